//! Replaying a real embedded log: event-by-event attribution agrees with the fast
//! fold, positions outside the log are refused with the valid range, a record that
//! does not decode is skipped as the engine skips it, a record damaged after the
//! log was opened stops the replay there, and bisect finds the first event that
//! made a resource match.

mod replay_support;

use std::ops::ControlFlow;
use std::str::FromStr;

use deltapilot_engine::Error;
use deltapilot_engine::replay::bisect::{Outcome, Predicate, Target, bisect};
use deltapilot_engine::replay::drive::{check_position, each_event, fold_to};
use deltapilot_engine::replay::{Replayer, ResourceKind};
use deltapilot_log::file::FileLog;
use deltapilot_log::{EventLog, Position, RecordPos};
use deltapilot_proto::SCHEMA_VERSION;
use deltapilot_testkit::segments::{damage_third_segment, write_log};
use deltapilot_xds::Resource;
use deltapilot_xds::generate::GenOptions;
use replay_support::*;

fn text(r: &Resource) -> String {
    String::from_utf8_lossy(&r.bytes).into_owned()
}

#[tokio::test]
async fn event_by_event_agrees_with_the_fast_fold_and_names_every_change() {
    let dir = tempfile::tempdir().expect("tmp");
    let events = history();
    let log = log_with(dir.path(), &events).await;
    let head = log.head().await.expect("head");

    let mut fast = Replayer::new(GenOptions::default());
    fold_to(&log, &mut fast, &head, &mut |_| {})
        .await
        .expect("fold");

    let mut slow = Replayer::new(GenOptions::default());
    let mut seen = Vec::new();
    let mut skipped = Vec::new();
    let mut eds_changes = 0;
    let stop = each_event(&log, &mut slow, &head, &mut |pos, _, report, _| {
        seen.push(pos.offset);
        if let Some(s) = &report.skipped {
            skipped.push((pos.offset, s.reason.as_str()));
        }
        for c in &report.changes {
            assert_ne!(
                c.old.as_ref().map(|r| &r.bytes),
                c.new.as_ref().map(|r| &r.bytes),
                "a change changes bytes"
            );
            if c.kind == ResourceKind::Endpoint {
                eds_changes += 1;
            }
        }
        ControlFlow::Continue(())
    })
    .await
    .expect("replay");
    assert!(stop.is_none());
    assert_eq!(
        seen,
        (0..events.len() as u64).collect::<Vec<_>>(),
        "every record, in order"
    );
    // The orphan endpoint, and an update of an endpoint whose service was deleted
    // (the stored one is kept, and serves again when the service comes back).
    assert_eq!(skipped, [(25, "unknown_service"), (31, "unknown_service")]);
    assert!(
        eds_changes >= 20,
        "endpoints change assignments: {eds_changes}"
    );
    assert_eq!(slow.snapshot().hash, fast.snapshot().hash);
    assert_eq!(all_bytes(slow.resources()), all_bytes(fast.resources()));

    // A range: from the middle, stopping early.
    let mut r = Replayer::new(GenOptions::default());
    fold_to(&log, &mut r, &Position::single(10), &mut |_| {})
        .await
        .expect("fold");
    let mut first = None;
    each_event(&log, &mut r, &Position::single(12), &mut |pos, _, _, _| {
        first.get_or_insert(pos);
        ControlFlow::Continue(())
    })
    .await
    .expect("range");
    assert_eq!(
        first,
        Some(RecordPos {
            partition: 0,
            offset: 10
        })
    );
    assert_eq!(r.position(), &Position::single(12));
}

#[tokio::test]
async fn positions_outside_the_log_state_the_valid_range() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = log_with(dir.path(), &history()[..9]).await;
    check_position(&log, &Position::single(9))
        .await
        .expect("the head is valid");
    check_position(&log, &Position::single(0))
        .await
        .expect("the start is valid");
    for bad in [Position::single(10), Position::from_offsets(vec![0, 3])] {
        let e = check_position(&log, &bad).await.expect_err("outside");
        assert!(
            matches!(
                e,
                Error::Log(deltapilot_log::Error::PositionOutOfRange { .. })
            ),
            "{e}"
        );
        assert!(e.to_string().contains("valid range 0..=9"), "{e}");
    }
}

#[tokio::test]
async fn a_record_of_a_newer_schema_is_skipped_as_the_engine_skips_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut events = history()[..10].to_vec();
    events[6].schema_version = SCHEMA_VERSION + 1;
    let log = log_with(dir.path(), &events).await;
    let head = log.head().await.expect("head");

    let mut fast = Replayer::new(GenOptions::default());
    let stop = fold_to(&log, &mut fast, &head, &mut |_| {})
        .await
        .expect("fold");
    assert_eq!(stop, None, "nothing stops the replay");
    assert_eq!(fast.position(), &head, "the records after it are folded");

    let mut slow = Replayer::new(GenOptions::default());
    let mut holes = Vec::new();
    let stop = each_event(&log, &mut slow, &head, &mut |pos, event, report, _| {
        if event.is_none() {
            let s = report.skipped.as_ref().expect("a reason");
            holes.push((
                pos.offset,
                s.reason.as_str(),
                s.detail.contains("schema version"),
            ));
        }
        ControlFlow::Continue(())
    })
    .await
    .expect("replay");
    assert_eq!(stop, None);
    assert_eq!(holes, [(6, "schema_too_new", true)]);

    // Both reach the state the engine served from the same log.
    let mut engine = deltapilot_engine::runner::Engine::new(GenOptions::default());
    engine.apply_records(&log.read(&Position::default(), 100).await.expect("read"));
    let served = engine.current().hash;
    assert_eq!(fast.snapshot().hash, served);
    assert_eq!(slow.snapshot().hash, served);
    assert_eq!(
        (fast.stats().skipped, slow.stats().skipped),
        (
            engine.stats().skipped_total(),
            engine.stats().skipped_total()
        )
    );
}

#[tokio::test]
async fn a_record_damaged_after_open_stops_the_replay_with_its_offset() {
    let dir = tempfile::tempdir().expect("tmp");
    let events = history();
    let writer = log_with(dir.path(), &events).await;
    drop(writer);
    let log = deltapilot_log::file::FileLog::open_read_only(dir.path()).expect("open");
    let head = log.head().await.expect("head");
    // Flip one byte in the middle of the (only) segment's records.
    let seg = std::fs::read_dir(dir.path())
        .expect("ls")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .expect("segment");
    let mut bytes = std::fs::read(&seg).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&seg, &bytes).expect("write");

    let mut r = Replayer::new(GenOptions::default());
    let stop = fold_to(&log, &mut r, &head, &mut |_| {})
        .await
        .expect("fold")
        .expect("stopped");
    assert!(stop.reason.contains("corrupt"), "{}", stop.reason);
    let at: u64 = stop
        .position
        .trim_start_matches("0:")
        .parse()
        .expect("offset");
    assert!(at > 0 && at < events.len() as u64, "in the middle: {at}");
    assert!(
        r.position().offset(0) <= at,
        "nothing past the damage is folded"
    );
}

#[tokio::test]
async fn bisect_finds_the_first_event_that_made_a_resource_match() {
    let dir = tempfile::tempdir().expect("tmp");
    let events = history();
    let log = log_with(dir.path(), &events).await;
    let head = log.head().await.expect("head");
    let target = Target::from_str("eds/outbound|80||a.ns.svc").expect("target");

    let run = |pred: &str| {
        let pred = Predicate::from_str(pred).expect("predicate");
        let (log, head, target) = (&log, head.clone(), target.clone());
        async move {
            let mut r = Replayer::new(GenOptions::default());
            bisect(log, &mut r, &head, &target, &pred, &text, &mut |_| {})
                .await
                .expect("bisect")
        }
    };
    // 10.0.0.3 is ep/3 of a.ns.svc, written at offset 5 + 3.
    match run("contains 10.0.0.3").await {
        Outcome::Found(f) => {
            assert_eq!(f.pos.offset, 8);
            assert_eq!(f.event.key().as_deref(), Some("ep/3"));
            assert!(f.before.is_some() && f.after.is_some());
        }
        other => panic!("{other:?}"),
    }
    // ep/0 moves to 10.0.0.100 at offset 28.
    match run("contains 10.0.0.100").await {
        Outcome::Found(f) => assert_eq!(f.pos.offset, 28),
        other => panic!("{other:?}"),
    }
    // The assignment appears with the service, at offset 1.
    match run("present").await {
        Outcome::Found(f) => assert_eq!((f.pos.offset, f.before.is_none()), (1, true)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(run("contains 10.77.0.1").await, Outcome::Never));
    assert!(matches!(
        run("absent").await,
        Outcome::MatchedAtStart {
            matches_at_end: false
        }
    ));
}

/// A replay over a log with a damaged record inside a sealed segment stops there,
/// and folds nothing past it.
#[tokio::test]
async fn a_replay_stops_at_damage_inside_a_sealed_segment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 200;
    let segs = write_log(dir.path(), n).await;
    let (_, bad, _, _) = damage_third_segment(&segs, 5);

    let log = FileLog::open_read_only(dir.path()).expect("open read-only");
    let head = log.head().await.expect("head");
    let mut r = Replayer::new(GenOptions::default());
    let stop = fold_to(&log, &mut r, &head, &mut |_| {})
        .await
        .expect("fold")
        .expect("the replay stops");
    assert_eq!(stop.position, format!("0:{bad}"), "{}", stop.reason);
    assert!(stop.reason.contains("CRC"), "{}", stop.reason);
    assert!(r.position().offset(0) <= bad, "nothing past the damage");
}
