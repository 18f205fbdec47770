//! The embedded file log opened read-only over several segments: open reads only
//! the newest segment and checks the sealed ones cheaply (header, last record), so
//! damage inside a sealed segment is reported by the read (or replay) that reaches
//! it, with its position, while everything before it stays readable; what the cheap
//! checks can see (a missing segment, a bad name, a bad tail) still fails the open.
//! Real files in temp dirs.

mod suite;

use std::time::Duration;

use deltapilot_log::Error;
use deltapilot_log::file::{FileLog, FileLogOptions};
use deltapilot_log::{EventLog, Position, Record};
use deltapilot_testkit::segments::{
    byte_in_segment, damage_third_segment, flip_byte, framed, segments, small_segments, write_log,
};

fn offsets(recs: &[Record]) -> Vec<u64> {
    recs.iter().map(|r| r.pos.offset).collect()
}

fn assert_events(recs: &[Record]) {
    for r in recs {
        assert_eq!(r.decode().expect("decode"), suite::event(r.pos.offset, 200));
    }
}

#[tokio::test]
async fn damage_inside_a_sealed_segment_is_reported_by_the_read_that_reaches_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 200;
    let segs = write_log(dir.path(), n).await;
    let base = segs[2].0;
    let (seg, bad, byte, next) = damage_third_segment(&segs, 3);

    let log = FileLog::open_read_only(dir.path()).expect("opens: only the tail is scanned");
    assert_eq!(log.head().await.expect("head"), Position::single(n));

    let expect_corrupt = |res: deltapilot_log::Result<Vec<Record>>, what: &str| match res {
        Err(Error::Corrupt {
            segment,
            byte_offset,
            offset,
            reason,
        }) => {
            assert_eq!(segment, seg, "{what}");
            assert_eq!((offset, byte_offset), (bad, byte), "{what}");
            assert!(reason.contains("CRC"), "{what}: {reason}");
        }
        other => panic!("{what}: expected Error::Corrupt, got {other:?}"),
    };

    // Reading from the start stops at the damage with the records before it; the
    // read that starts at the damage reports it.
    let upto = log.read(&log.start(), 10_000).await.expect("read from 0");
    assert_eq!(offsets(&upto), (0..bad).collect::<Vec<_>>());
    expect_corrupt(
        log.read(&Position::single(bad), 10_000).await,
        "read from the damage",
    );
    // Everything before it reads back, including the damaged segment's first records.
    let before = log.read(&log.start(), bad as usize).await.expect("before");
    assert_eq!(offsets(&before), (0..bad).collect::<Vec<_>>());
    assert_events(&before);
    let same_segment = log.read(&Position::single(base), 3).await.expect("same");
    assert_eq!(offsets(&same_segment), (base..base + 3).collect::<Vec<_>>());
    // A read starting after the damage in the same segment must pass it: reported.
    expect_corrupt(
        log.read(&Position::single(bad + 1), 1).await,
        "read after the damage",
    );
    // And again: a failed read leaves nothing cached that would hide it.
    expect_corrupt(log.read(&Position::single(bad), 5).await, "read at it");
    // Later segments do not depend on it.
    let after = log.read(&Position::single(next), 30).await.expect("after");
    assert_eq!(offsets(&after), (next..next + 30).collect::<Vec<_>>());
    assert_events(&after);

    // The writer still refuses the log at open, at the same spot.
    match FileLog::open(dir.path(), FileLogOptions::default()) {
        Err(Error::Corrupt {
            segment, offset, ..
        }) => assert_eq!((segment, offset), (seg, bad)),
        other => panic!("writer: expected Error::Corrupt, got {other:?}"),
    }
}

#[tokio::test]
async fn every_read_over_lazily_opened_segments_returns_the_right_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 300;
    let segs = write_log(dir.path(), n).await;
    assert!(segs.len() >= 10, "{}", segs.len());
    let log = FileLog::open_read_only(dir.path()).expect("open read-only");
    assert_eq!(log.head().await.expect("head"), Position::single(n));
    // Starts in a scrambled order, so reads land before, inside and past what
    // earlier reads verified, and cross segment ends.
    for k in 0..n {
        let from = (k * 137) % n;
        let recs = log.read(&Position::single(from), 25).await.expect("read");
        let want: Vec<u64> = (from..(from + 25).min(n)).collect();
        assert_eq!(offsets(&recs), want, "from {from}");
        assert_events(&recs);
    }
    let all = suite::read_to_end(&log, &log.start()).await;
    assert_eq!(offsets(&all), (0..n).collect::<Vec<_>>());
}

#[tokio::test]
async fn head_after_a_read_only_open_stops_before_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 125;
    let segs = write_log(dir.path(), n).await;
    assert!(segs.len() >= 5, "{segs:?}");
    let (last_base, last) = segs.last().cloned().expect("segments");
    assert!(last_base + 1 < n, "last segment holds several records");
    // A writer crashed in the middle of the last record: its whole batch (the
    // last five records, appended together by `write_log`) is not there yet.
    let cut = byte_in_segment(last_base, n - 1) + framed(n - 1) / 2;
    let batch_start = n - 5;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&last)
        .expect("open segment")
        .set_len(cut)
        .expect("cut");
    let log = FileLog::open_read_only(dir.path()).expect("open read-only");
    assert_eq!(
        log.head().await.expect("head"),
        Position::single(batch_start)
    );
    let all = suite::read_to_end(&log, &log.start()).await;
    assert_eq!(offsets(&all), (0..batch_start).collect::<Vec<_>>());
    assert_eq!(std::fs::metadata(&last).expect("stat").len(), cut);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_handle_sees_segments_the_writer_adds_later() {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer = FileLog::open(dir.path(), small_segments()).expect("open");
    writer.append(&suite::batch(0, 60)).await.expect("append");
    let reader = FileLog::open_read_only(dir.path()).expect("open read-only");
    assert_eq!(reader.head().await.expect("head"), Position::single(60));
    let segs_before = segments(dir.path()).len();

    // Several segments appear between two looks of the reader, so the middle ones
    // are picked up as sealed segments.
    for b in 0..10 {
        writer
            .append(&suite::batch(60 + b * 20, 20))
            .await
            .expect("append");
    }
    assert!(segments(dir.path()).len() >= segs_before + 5);
    assert_eq!(reader.head().await.expect("head"), Position::single(260));
    let all = suite::read_to_end(&reader, &reader.start()).await;
    assert_eq!(offsets(&all), (0..260).collect::<Vec<_>>());
    assert_events(&all);

    // And a follower of the reader gets what comes next.
    let follow = tokio::spawn(suite::collect_following(
        reader.follow(Position::single(250)),
        30,
    ));
    writer.append(&suite::batch(260, 20)).await.expect("append");
    let (recs, caught_up) = tokio::time::timeout(Duration::from_secs(30), follow)
        .await
        .expect("read-only follower stuck")
        .expect("follower task");
    assert_eq!(caught_up, Position::single(280));
    assert_eq!(offsets(&recs), (250..280).collect::<Vec<_>>());
}

#[tokio::test]
async fn what_the_cheap_checks_see_still_fails_the_open() {
    // A missing segment between two others.
    let dir = tempfile::tempdir().expect("tempdir");
    let segs = write_log(dir.path(), 200).await;
    std::fs::remove_file(&segs[3].1).expect("rm");
    match FileLog::open_read_only(dir.path()) {
        Err(Error::Corrupt {
            segment, reason, ..
        }) => {
            assert_eq!(segment, segs[2].1);
            assert!(
                reason.contains(&format!("next segment starts at offset {}", segs[4].0)),
                "{reason}"
            );
        }
        other => panic!("gap: expected Error::Corrupt, got {other:?}"),
    }

    // A file that looks like a segment but is not named like one.
    let dir = tempfile::tempdir().expect("tempdir");
    write_log(dir.path(), 100).await;
    std::fs::write(dir.path().join("12.log"), b"").expect("write");
    let err = FileLog::open_read_only(dir.path()).expect_err("bad name");
    assert!(matches!(err, Error::InvalidLogDir { .. }), "{err}");

    // A damaged last record of a sealed segment.
    let dir = tempfile::tempdir().expect("tempdir");
    let segs = write_log(dir.path(), 200).await;
    let first = &segs[0].1;
    let len = std::fs::metadata(first).expect("stat").len();
    flip_byte(first, len - 2);
    match FileLog::open_read_only(dir.path()) {
        Err(Error::Corrupt {
            segment, reason, ..
        }) => {
            assert_eq!(&segment, first);
            assert!(reason.contains("not in the last segment"), "{reason}");
        }
        other => panic!("bad tail: expected Error::Corrupt, got {other:?}"),
    }

    // A sealed segment whose header names another base.
    let dir = tempfile::tempdir().expect("tempdir");
    let segs = write_log(dir.path(), 200).await;
    flip_byte(&segs[1].1, 8);
    let err = FileLog::open_read_only(dir.path()).expect_err("bad header");
    assert!(
        matches!(&err, Error::InvalidLogDir { reason, .. } if reason.contains("base offset")),
        "{err}"
    );
}
