//! Compaction of the embedded log against real files and the real fold: offsets
//! stay (gaps where records went), the state hash folded from the compacted log
//! equals the one from the full log at the horizon and at the head, resync sweeps
//! still delete what they deleted, tombstones go only after their window,
//! recovery refuses a damaged compacted segment instead of truncating it, and a
//! writer killed (-9) in the middle of compactions leaves a log that opens and
//! folds to the state of the events it acknowledged; and for random histories
//! (property test, `DELTAPILOT_FUZZ_CASES` cases) the state hash survives compaction.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use deltapilot_log::file::{Admit, CompactPolicy, FileLog, FileLogOptions, FsyncPolicy};
use deltapilot_log::{Error, EventLog, FollowItem, Position, Record, RecordPos};
use deltapilot_model::fold;
use deltapilot_model::state::ModelState;
use deltapilot_proto::event::Payload;
use deltapilot_proto::{self as pb, Event};
use deltapilot_testkit::events::{ep, ep_del, event, resync};
use futures::StreamExt;

/// Steps per resync generation of source `a` (STARTED at 0, COMPLETED half way).
const GEN_STEPS: u64 = 200;
/// Distinct endpoint keys of source `a`.
const KEYS: u64 = 40;

fn opts() -> FileLogOptions {
    FileLogOptions {
        fsync: FsyncPolicy::Never,
        segment_bytes: 4096,
        ..FileLogOptions::default()
    }
}

fn admit() -> Arc<Admit> {
    Arc::new(fold::admits)
}

/// Tombstones kept for ever / dropped at once.
fn keep_tombstones() -> CompactPolicy {
    CompactPolicy {
        tombstone_retention: Duration::from_secs(3600),
        now_unix_micros: 10_000,
    }
}
fn drop_tombstones() -> CompactPolicy {
    CompactPolicy {
        tombstone_retention: Duration::ZERO,
        now_unix_micros: 10_000,
    }
}

fn svc(source: &str, generation: u64, host: &str, port: u32) -> Event {
    event(
        source,
        generation,
        Payload::ServiceUpsert(pb::ServiceUpsert {
            service: Some(pb::Service {
                hostname: host.into(),
                namespace: "ns".into(),
                ports: vec![pb::Port {
                    name: "http".into(),
                    number: port,
                    protocol: pb::Protocol::Http as i32,
                }],
                ..Default::default()
            }),
        }),
    )
}

/// Step `i` of a churning workload with everything compaction must get right:
/// endpoint updates and deletes, services defined by two sources, resyncs that
/// sweep, stale events after a completed resync, a key written by two sources
/// (a conflict the fold skips), and invalid events.
fn step(i: u64) -> Event {
    let g = 1 + i / GEN_STEPS;
    let host = |n: u64| format!("h{}.ns.svc", n % 5);
    let key = |n: u64| format!("ep/a/k{}", (n * 7) % KEYS);
    let mut e = match i % GEN_STEPS {
        0 => resync("a", g, false),
        // Sweeps every endpoint of `a` not rewritten since STARTED.
        100 => resync("a", g, true),
        _ if i % 10 == 3 => ep_del("a", g, &key(i)),
        _ if i % 10 == 5 => svc("a", g, &host(i), 80 + (i % 3) as u32),
        _ if i % 10 == 7 => svc("b", 1, &host(i), 90 + (i % 2) as u32),
        // One key that `b` also writes: the fold skips `b`'s writes while `a`
        // owns it, and compaction keeps that key's whole history.
        _ if i.is_multiple_of(17) => ep("b", 1, "ep/a/k3", "10.9.9.9", &[&host(i)], 1),
        _ if i.is_multiple_of(23) && g > 1 => ep_del("a", g - 1, &key(i + 1)),
        _ if i.is_multiple_of(31) => ep("a", g, &key(i), "not-an-ip", &[&host(i)], 1),
        _ => ep(
            "a",
            g,
            &key(i),
            &format!("10.0.{}.{}", (i / 250) % 250, i % 250),
            &[&host(i)],
            1 + (i % 4) as u32,
        ),
    };
    // Deletes are old (their window is measured from here), everything is dated.
    e.observed_at_unix_micros = if matches!(
        e.payload,
        Some(Payload::EndpointDelete(_) | Payload::ServiceDelete(_))
    ) {
        1
    } else {
        5_000
    };
    e
}

async fn write(log: &FileLog, from: u64, to: u64) {
    let mut i = from;
    while i < to {
        // Batches of 1..=4 records, so batch ends move around segments.
        let n = (1 + i % 4).min(to - i);
        let batch: Vec<Event> = (i..i + n).map(step).collect();
        log.append(&batch).await.expect("append");
        i += n;
    }
}

async fn read_all(log: &FileLog) -> Vec<Record> {
    let mut out = Vec::new();
    let mut pos = log.start();
    for _ in 0..100_000 {
        let recs = log.read(&pos, 500).await.expect("read");
        let Some(last) = recs.last() else { break };
        pos = Position::single(last.pos.offset + 1);
        out.extend(recs);
    }
    out
}

/// The state hash of folding `recs` (at their own positions) whose offset is
/// below `below`.
fn hash_below(recs: &[Record], below: u64) -> u64 {
    let batch: Vec<(RecordPos, Event)> = recs
        .iter()
        .filter(|r| r.pos.offset < below)
        .map(|r| (r.pos, r.decode().expect("decode")))
        .collect();
    fold::fold(&ModelState::default(), &batch).state.hash()
}

fn segment_count(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .expect("dir")
        .filter(|e| {
            e.as_ref()
                .expect("entry")
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count()
}

#[tokio::test]
async fn compaction_keeps_offsets_and_the_state_hash() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    let log = FileLog::open(&dir, opts()).expect("open");
    write(&log, 0, 2_000).await;
    let full = read_all(&log).await;
    assert_eq!(full.len(), 2_000);
    assert_eq!(log.horizon_offset(), 0, "never compacted");

    let below = 1_500;
    let report = log
        .compact(below, admit(), keep_tombstones())
        .await
        .expect("compact");
    let horizon = report.horizon;
    assert!(
        horizon <= below && horizon > 1_000,
        "horizon {horizon} ends a sealed segment at or below {below}"
    );
    assert_eq!(log.horizon_offset(), horizon);
    assert!(report.rewritten > 0, "{report:?}");
    assert!(
        report.records_after * 2 < report.records_before,
        "compaction dropped most records: {report:?}"
    );
    assert!(report.bytes_after < report.bytes_before, "{report:?}");
    assert_eq!(
        segment_count(&dir),
        segment_count(&dir),
        "segments keep their names"
    );

    let compacted = read_all(&log).await;
    assert_eq!(
        compacted.len() as u64,
        report.records_after + (2_000 - horizon),
        "every record at or past the horizon is still there"
    );
    // Every kept record sits at its original offset with its original bytes.
    for r in &compacted {
        let orig = &full[r.pos.offset as usize];
        assert_eq!(orig.pos, r.pos);
        assert_eq!(orig.bytes, r.bytes, "record {} changed", r.pos);
    }
    for at in [horizon, 1_700, 2_000] {
        assert_eq!(
            hash_below(&compacted, at),
            hash_below(&full, at),
            "state hash at {at} (horizon {horizon})"
        );
    }

    // A read starting in a gap begins at the next kept record.
    let kept: Vec<u64> = compacted.iter().map(|r| r.pos.offset).collect();
    let gap = (1..horizon)
        .find(|o| !kept.contains(o))
        .expect("compaction left a gap");
    let next = kept
        .iter()
        .copied()
        .find(|&o| o > gap)
        .expect("a later record");
    let recs = log
        .read(&Position::single(gap), 1)
        .await
        .expect("read in gap");
    assert_eq!(recs[0].pos.offset, next);

    // Appending goes on; the writer, a reopened writer and a read-only reader all
    // see the same records, and a follower from the start reaches the head.
    write(&log, 2_000, 2_100).await;
    let after = read_all(&log).await;
    drop(log);
    let reopened = FileLog::open(&dir, opts()).expect("reopen");
    assert_eq!(reopened.recovery(), None, "nothing to repair");
    assert_eq!(reopened.horizon_offset(), horizon);
    assert_eq!(read_all(&reopened).await, after);
    drop(reopened);
    let reader = FileLog::open_read_only(&dir).expect("read-only");
    assert_eq!(reader.horizon_offset(), horizon);
    assert_eq!(read_all(&reader).await, after);
    let mut follow = reader.follow(reader.start());
    let mut seen = Vec::new();
    for _ in 0..10_000 {
        match follow.next().await.expect("item").expect("follow") {
            FollowItem::Records(r) => seen.extend(r),
            FollowItem::CaughtUp(p) => {
                assert_eq!(p, Position::single(2_100));
                break;
            }
        }
    }
    assert_eq!(seen, after);

    // Compacting again changes nothing more (idempotent) below the same point.
    drop(reader);
    let log = FileLog::open(&dir, opts()).expect("reopen");
    let again = log
        .compact(below, admit(), keep_tombstones())
        .await
        .expect("compact again");
    assert_eq!(again.rewritten, 0, "{again:?}");
    assert_eq!(read_all(&log).await, after);
}

#[tokio::test]
async fn tombstones_go_only_after_their_window() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    let log = FileLog::open(&dir, opts()).expect("open");
    write(&log, 0, 1_200).await;
    let full = read_all(&log).await;
    let deletes = |recs: &[Record], below: u64| {
        recs.iter()
            .filter(|r| r.pos.offset < below)
            .filter(|r| {
                // The conflicted key keeps its whole history (see `step`).
                matches!(
                    r.decode().expect("decode").payload,
                    Some(Payload::EndpointDelete(d)) if d.key != "ep/a/k3"
                )
            })
            .count()
    };
    let kept = log
        .compact(1_100, admit(), keep_tombstones())
        .await
        .expect("compact");
    let with = read_all(&log).await;
    assert!(
        deletes(&with, kept.horizon) > 0,
        "tombstones in the window stay"
    );
    let dropped = log
        .compact(1_100, admit(), drop_tombstones())
        .await
        .expect("compact");
    assert_eq!(dropped.horizon, kept.horizon);
    let without = read_all(&log).await;
    assert_eq!(deletes(&without, kept.horizon), 0, "expired tombstones go");
    assert!(dropped.rewritten > 0);
    for at in [kept.horizon, 1_200] {
        assert_eq!(
            hash_below(&without, at),
            hash_below(&full, at),
            "hash at {at}"
        );
    }
}

/// A relist that found entities gone deletes them by its sweep; after compaction
/// drops the resync's history (and the gone entities' writes but the last), the
/// sweep still deletes them.
#[tokio::test]
async fn a_resync_that_swept_entities_still_sweeps_them_after_compaction() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    let log = FileLog::open(&dir, opts()).expect("open");
    let hosts = ["h0.ns.svc"];
    let mut events = vec![svc("a", 1, "h0.ns.svc", 80)];
    // Generation 1: ten endpoints, each updated a few times.
    for round in 0..4u32 {
        for k in 0..10 {
            events.push(ep(
                "a",
                1,
                &format!("ep/a/k{k}"),
                &format!("10.0.0.{k}"),
                &hosts,
                1 + round,
            ));
        }
    }
    // Relist at generation 2 finds k0..k5 only: k6..k9 are swept.
    events.push(resync("a", 2, false));
    events.push(svc("a", 2, "h0.ns.svc", 80));
    for k in 0..6 {
        events.push(ep(
            "a",
            2,
            &format!("ep/a/k{k}"),
            &format!("10.0.0.{k}"),
            &hosts,
            9,
        ));
    }
    events.push(resync("a", 2, true));
    // A stale write of a swept key after the sweep: the fold skips it.
    events.push(ep("a", 1, "ep/a/k7", "10.0.0.7", &hosts, 3));
    // Another relist at 3 that keeps everything, then churn to seal segments.
    events.push(resync("a", 3, false));
    events.push(svc("a", 3, "h0.ns.svc", 80));
    for k in 0..6 {
        events.push(ep(
            "a",
            3,
            &format!("ep/a/k{k}"),
            &format!("10.0.0.{k}"),
            &hosts,
            9,
        ));
    }
    events.push(resync("a", 3, true));
    for i in 0..100 {
        events.push(ep(
            "a",
            3,
            &format!("ep/a/k{}", i % 6),
            "10.0.1.1",
            &hosts,
            1 + i % 3,
        ));
    }
    for e in &events {
        log.append(std::slice::from_ref(e)).await.expect("append");
    }
    let head = events.len() as u64;
    let full = read_all(&log).await;
    let report = log
        .compact(head, admit(), keep_tombstones())
        .await
        .expect("compact");
    assert!(
        report.horizon > 60,
        "the resyncs are in the compacted range: {report:?}"
    );
    let compacted = read_all(&log).await;
    assert!(compacted.len() < full.len());
    let state = |recs: &[Record]| {
        let batch: Vec<_> = recs
            .iter()
            .map(|r| (r.pos, r.decode().expect("decode")))
            .collect();
        fold::fold(&ModelState::default(), &batch).state
    };
    let (before, after) = (state(&full), state(&compacted));
    assert_eq!(after.hash(), before.hash());
    let mut keys: Vec<String> = after.raw_endpoints().map(|(k, _)| k.to_string()).collect();
    keys.sort();
    assert_eq!(
        keys,
        (0..6).map(|k| format!("ep/a/k{k}")).collect::<Vec<_>>(),
        "the swept endpoints stay swept"
    );
    // Only the newest STARTED and COMPLETED of `a` stay in the compacted range.
    let markers = compacted
        .iter()
        .filter(|r| r.pos.offset < report.horizon)
        .filter(|r| {
            matches!(
                r.decode().expect("decode").payload,
                Some(Payload::Resync(_))
            )
        })
        .count();
    assert_eq!(markers, 2);
}

#[tokio::test]
async fn a_damaged_compacted_segment_is_corruption_not_a_torn_tail() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    let log = FileLog::open(&dir, opts()).expect("open");
    write(&log, 0, 1_000).await;
    let report = log
        .compact(900, admit(), keep_tombstones())
        .await
        .expect("compact");
    assert!(report.rewritten > 0);
    drop(log);
    // The first segment is compacted: cut its last record short.
    let first = dir.join(format!("{:020}.log", 0));
    let bytes = std::fs::read(&first).expect("read");
    assert_eq!(&bytes[..8], b"DPLOGc03", "the first segment is compacted");
    std::fs::write(&first, &bytes[..bytes.len() - 5]).expect("cut");
    let err = FileLog::open(&dir, opts()).expect_err("damage in a compacted segment");
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert_eq!(
        std::fs::read(&first).expect("read").len(),
        bytes.len() - 5,
        "nothing was truncated"
    );
}

#[tokio::test]
async fn a_leftover_of_an_interrupted_compaction_is_removed_at_open() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    let log = FileLog::open(&dir, opts()).expect("open");
    write(&log, 0, 300).await;
    let full = read_all(&log).await;
    drop(log);
    // What a compaction killed before its rename leaves: a half-written copy.
    let leftover = dir.join(format!("{:020}.log.compact", 0));
    std::fs::write(&leftover, b"DPLOGc03 half written").expect("write");
    let log = FileLog::open(&dir, opts()).expect("open");
    assert!(!leftover.exists(), "the leftover is removed");
    assert_eq!(read_all(&log).await, full);
}

/// Set in a child copy of this test binary to make it a writer that appends and
/// compacts until it is killed.
const CHILD_DIR_ENV: &str = "DELTAPILOT_COMPACT_TEST_DIR";

async fn compacting_writer(dir: &Path) {
    let log = FileLog::open(dir, opts()).expect("child: open");
    let mut next = log.head().await.expect("child: head").offset(0);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for _ in 0..1_000 {
        if std::time::Instant::now() > deadline {
            break;
        }
        write(&log, next, next + 97).await;
        next += 97;
        log.compact(next.saturating_sub(150), admit(), drop_tombstones())
            .await
            .expect("child: compact");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_compacting_leaves_a_log_that_folds_to_what_was_written() {
    if let Some(dir) = std::env::var_os(CHILD_DIR_ENV) {
        compacting_writer(Path::new(&dir)).await;
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    std::fs::create_dir(&dir).expect("mkdir");
    let mut head = 0;
    for round in 0..5u64 {
        let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "kill_9_while_compacting_leaves_a_log_that_folds_to_what_was_written",
                "--exact",
            ])
            .env(CHILD_DIR_ENV, &dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn the writer");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let now = match FileLog::open_read_only(&dir) {
                Ok(l) => l.head().await.map_or(0, |p| p.offset(0)),
                Err(_) => 0,
            };
            if now > head + 500 || std::time::Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(2 + 9 * round)).await;
        child.kill().expect("kill -9");
        child.wait().expect("reap");

        let log = FileLog::open(&dir, opts()).expect("the killed log opens");
        let now = log.head().await.expect("head").offset(0);
        assert!(now > head, "round {round}: progress");
        let recs = read_all(&log).await;
        // The reference: the same steps, never compacted.
        let reference: Vec<Record> = (0..now)
            .map(|i| Record {
                pos: RecordPos {
                    partition: 0,
                    offset: i,
                },
                bytes: deltapilot_log::encode_event(&step(i)).into(),
            })
            .collect();
        assert_eq!(
            hash_below(&recs, now),
            hash_below(&reference, now),
            "round {round}: the compacted log folds to the written state (horizon {})",
            log.horizon_offset()
        );
        head = now;
    }
}

/// One random operation of [`random_history`].
#[derive(Debug, Clone)]
enum Op {
    /// An endpoint upsert by source `s` of key `k` with weight `w`.
    Ep { s: usize, k: usize, w: u32 },
    /// An endpoint delete.
    EpDel { s: usize, k: usize },
    /// A service upsert (per source) of host `h` with port `p`.
    Svc { s: usize, h: usize, p: u32 },
    /// A service delete.
    SvcDel { s: usize, h: usize },
    /// A resync marker; `back` writes a generation one below the source's current
    /// (a stale marker, or a stale write on the next ops of the source).
    Mark { s: usize, completed: bool },
    /// The source's next resync generation starts (its later writes carry it).
    NextGen { s: usize },
    /// The source writes its next few events one generation back (stale once a
    /// newer relist completed).
    Stale { s: usize },
    /// An invalid write (the fold refuses it).
    Invalid { s: usize, k: usize },
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    let s = 0..2usize;
    prop_oneof![
        6 => (s.clone(), 0..6usize, 1..4u32).prop_map(|(s, k, w)| Op::Ep { s, k, w }),
        2 => (s.clone(), 0..6usize).prop_map(|(s, k)| Op::EpDel { s, k }),
        2 => (s.clone(), 0..3usize, 80..82u32).prop_map(|(s, h, p)| Op::Svc { s, h, p }),
        1 => (s.clone(), 0..3usize).prop_map(|(s, h)| Op::SvcDel { s, h }),
        2 => (s.clone(), any::<bool>()).prop_map(|(s, completed)| Op::Mark { s, completed }),
        1 => s.clone().prop_map(|s| Op::NextGen { s }),
        1 => s.clone().prop_map(|s| Op::Stale { s }),
        1 => (s, 0..6usize).prop_map(|(s, k)| Op::Invalid { s, k }),
    ]
}

/// The events of `ops`: each source keeps a current generation; endpoint keys are
/// shared by both sources (so keys conflict), services are per source.
fn random_history(ops: &[Op]) -> Vec<Event> {
    let names = ["a", "b"];
    let mut gens = [1u64, 1];
    let mut stale = [0usize; 2];
    let mut out = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let s = match op {
            Op::Ep { s, .. }
            | Op::EpDel { s, .. }
            | Op::Svc { s, .. }
            | Op::SvcDel { s, .. }
            | Op::Mark { s, .. }
            | Op::NextGen { s }
            | Op::Stale { s }
            | Op::Invalid { s, .. } => *s,
        };
        let g = if stale[s] > 0 {
            stale[s] -= 1;
            gens[s].saturating_sub(1).max(1)
        } else {
            gens[s]
        };
        let src = names[s];
        let host = |h: usize| format!("h{h}.ns.svc");
        let mut e = match op {
            Op::Ep { k, w, .. } => ep(
                src,
                g,
                &format!("ep/k{k}"),
                "10.0.0.1",
                &[&host(*k % 3)],
                *w,
            ),
            Op::EpDel { k, .. } => ep_del(src, g, &format!("ep/k{k}")),
            Op::Svc { h, p, .. } => svc(src, g, &host(*h), *p),
            Op::SvcDel { h, .. } => event(
                src,
                g,
                Payload::ServiceDelete(pb::EntityDelete {
                    key: pb::service_key("ns", &host(*h)),
                }),
            ),
            Op::Mark { completed, .. } => resync(src, g, *completed),
            Op::NextGen { .. } => {
                gens[s] += 1;
                resync(src, gens[s], false)
            }
            Op::Stale { .. } => {
                stale[s] = 3;
                continue;
            }
            Op::Invalid { k, .. } => ep(src, g, &format!("ep/k{k}"), "not-an-ip", &[&host(0)], 1),
        };
        // Half the deletes are old enough to expire.
        e.observed_at_unix_micros = if i % 2 == 0 { 1 } else { 9_999 };
        out.push(e);
    }
    out
}

fn fuzz_cases() -> u32 {
    std::env::var("DELTAPILOT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

/// For random histories (conflicting keys, stale writes, stale and repeated
/// markers, invalid writes, deletes old and new), compacting below a random
/// position leaves the state hash at the horizon and at the head exactly as the
/// full log folds, under both tombstone policies.
#[test]
fn random_histories_compact_to_the_same_state() {
    use proptest::prelude::*;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let config = proptest::test_runner::Config {
        cases: fuzz_cases(),
        failure_persistence: None,
        ..Default::default()
    };
    let strategy = (
        proptest::collection::vec(op(), 60..240),
        0.0..1.0f64,
        any::<bool>(),
    );
    proptest::test_runner::TestRunner::new(config)
        .run(&strategy, |(ops, cut, expire)| {
            let events = random_history(&ops);
            rt.block_on(async {
                let tmp = tempfile::tempdir().expect("tempdir");
                let log = FileLog::open(
                    tmp.path(),
                    FileLogOptions {
                        segment_bytes: 1024,
                        ..opts()
                    },
                )
                .expect("open");
                for chunk in events.chunks(3) {
                    log.append(chunk).await.expect("append");
                }
                let full = read_all(&log).await;
                let head = full.len() as u64;
                let below = (head as f64 * cut) as u64;
                let policy = if expire {
                    drop_tombstones()
                } else {
                    keep_tombstones()
                };
                let report = log.compact(below, admit(), policy).await.expect("compact");
                let compacted = read_all(&log).await;
                for at in [report.horizon, head] {
                    prop_assert_eq!(
                        hash_below(&compacted, at),
                        hash_below(&full, at),
                        "hash at {} (horizon {}, {:?})",
                        at,
                        report.horizon,
                        report
                    );
                }
                Ok(())
            })
        })
        .expect("compaction keeps the state");
}
