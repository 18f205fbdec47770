//! Retention by deletion in the embedded log, against real files: whole sealed
//! segments below the safe position and outside the window go, oldest first,
//! never the newest; the log then starts above 0 and opens, reads and appends
//! there (writer and read-only); a position below the start is refused naming
//! the oldest one left; a deletion cut short (before, or in the middle of,
//! removing the files) loses nothing above the cut and is finished at the next
//! open; a segment lost above the start is still refused; compaction keeps a
//! segment's age; and a writer killed (-9) while appending and deleting leaves a
//! log holding every record from its start to its head.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use deltapilot_log::file::{CompactPolicy, DeletePolicy, DeleteReport, FileLog, START_FILE};
use deltapilot_log::{Error, EventLog, FollowItem, Position, Record};
use deltapilot_testkit::segments::{batch, segments, small_segments, write_log};
use futures::StreamExt;

const HOUR: Duration = Duration::from_secs(3600);

/// Everything older than an hour, judged two hours from now: every segment.
fn all_old() -> DeletePolicy {
    DeletePolicy {
        max_age: HOUR,
        max_bytes: None,
        now: SystemTime::now() + 2 * HOUR,
    }
}

async fn read_from(log: &FileLog, from: u64) -> Vec<Record> {
    let head = log.head().await.expect("head").offset(0);
    let mut out = Vec::new();
    let mut at = from;
    while at < head {
        let recs = log.read(&Position::single(at), 1000).await.expect("read");
        let Some(last) = recs.last() else { break };
        at = last.pos.offset + 1;
        out.extend(recs);
    }
    out
}

/// The records `from..to` as written by `write_log` (payloads of `batch`).
fn written(from: u64, to: u64) -> Vec<Vec<u8>> {
    batch(0, to)
        .iter()
        .skip(from as usize)
        .map(deltapilot_log::encode_event)
        .collect()
}

fn payloads(recs: &[Record]) -> Vec<Vec<u8>> {
    recs.iter().map(|r| r.bytes.to_vec()).collect()
}

fn start_file(dir: &Path) -> String {
    std::fs::read_to_string(dir.join(START_FILE)).expect("START")
}

#[tokio::test]
async fn old_segments_below_the_safe_position_go_and_the_log_starts_above_zero() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    let before = write_log(&dir, 300).await;
    assert!(before.len() > 10, "{before:?}");
    let sizes: Vec<u64> = before
        .iter()
        .map(|(_, p)| std::fs::metadata(p).expect("stat").len())
        .collect();
    let log = FileLog::open(&dir, small_segments()).expect("open");

    let report = log.delete_segments(150, all_old()).await.expect("delete");
    // Every segment ending at or below 150 went, and only those.
    let kept = segments(&dir);
    let cut = kept[0].0;
    let gone: Vec<_> = before.iter().filter(|(b, _)| *b < cut).collect();
    assert!(cut <= 150 && cut > 150 - 30, "cut {cut}: {kept:?}");
    assert!(kept.get(1).is_none_or(|(next, _)| *next > 150), "{kept:?}");
    assert!(gone.iter().all(|(_, p)| !p.exists()), "the files are gone");
    assert_eq!(
        (report.start, report.segments),
        (cut, before.len() - kept.len())
    );
    assert_eq!(report.bytes, sizes[..gone.len()].iter().sum::<u64>());
    assert_eq!(start_file(&dir), format!("start {cut}\n"));
    assert_eq!(log.start_offset(), cut);
    assert_eq!(log.start(), Position::single(cut));
    assert_eq!(log.horizon(), Position::single(cut));
    assert_eq!(log.disk_usage().oldest_offset, cut);

    // Below the start: refused, naming the oldest position left.
    match log.read(&Position::single(cut - 1), 10).await {
        Err(Error::BeforeRetention { requested, oldest }) => {
            assert_eq!(requested, Position::single(cut - 1).to_string());
            assert_eq!(oldest, cut.to_string());
        }
        other => panic!("expected BeforeRetention, got {other:?}"),
    }
    let e = log
        .read(&Position::single(0), 10)
        .await
        .expect_err("below the start")
        .to_string();
    assert!(
        e.contains(&format!("oldest position still available is {cut}")),
        "{e}"
    );
    let mut follower = log.follow(Position::single(3));
    assert!(
        matches!(
            follower.next().await,
            Some(Err(Error::BeforeRetention { .. }))
        ),
        "a follower below the start is refused"
    );

    // From the start on, every record is there; appends go on at the head.
    assert_eq!(payloads(&read_from(&log, cut).await), written(cut, 300));
    let at = log.append(&batch(300, 5)).await.expect("append");
    assert_eq!(at[0].offset, 300);
    drop(log);

    // Reopened, for writing and for reading only, it starts at the cut.
    let log = FileLog::open(&dir, small_segments()).expect("reopen above 0");
    assert_eq!(log.start_offset(), cut);
    assert_eq!(payloads(&read_from(&log, cut).await), written(cut, 305));
    drop(log);
    let ro = FileLog::open_read_only(&dir).expect("read-only open above 0");
    assert_eq!(ro.start(), Position::single(cut));
    assert_eq!(payloads(&read_from(&ro, cut).await), written(cut, 305));
    assert!(matches!(
        ro.read(&Position::single(0), 1).await,
        Err(Error::BeforeRetention { .. })
    ));
}

#[tokio::test]
async fn nothing_inside_the_window_or_above_the_safe_position_goes_nor_the_newest_segment() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    let before = write_log(&dir, 300).await;
    let log = FileLog::open(&dir, small_segments()).expect("open");
    let young = DeletePolicy {
        max_age: HOUR,
        max_bytes: None,
        now: SystemTime::now(),
    };
    let none = DeleteReport {
        start: 0,
        segments: 0,
        bytes: 0,
    };
    assert_eq!(log.delete_segments(300, young).await.expect("delete"), none);
    assert_eq!(
        log.delete_segments(0, all_old()).await.expect("delete"),
        none
    );
    assert_eq!(segments(&dir), before);
    assert!(!dir.join(START_FILE).exists(), "no START before a deletion");

    // Everything old and below the head: all but the newest segment.
    let report = log.delete_segments(300, all_old()).await.expect("delete");
    let kept = segments(&dir);
    assert_eq!(kept, before[before.len() - 1..].to_vec());
    assert_eq!(report.start, kept[0].0);
    assert_eq!(
        payloads(&read_from(&log, report.start).await),
        written(report.start, 300)
    );
}

#[tokio::test]
async fn a_size_window_keeps_the_newest_bytes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    write_log(&dir, 300).await;
    let log = FileLog::open(&dir, small_segments()).expect("open");
    let total = log.disk_usage().bytes;
    let keep = 3 * 4096;
    let policy = DeletePolicy {
        max_age: 1000 * HOUR,
        max_bytes: Some(keep),
        now: SystemTime::now(),
    };
    let report = log.delete_segments(300, policy).await.expect("delete");
    let sizes: Vec<u64> = segments(&dir)
        .iter()
        .map(|(_, p)| std::fs::metadata(p).expect("stat").len())
        .collect();
    let left: u64 = sizes.iter().sum();
    assert!(report.segments > 0, "{report:?}");
    assert_eq!(left + report.bytes, total);
    // At least the window is left, and the oldest segment left is needed for it.
    assert!(left >= keep, "{left} < {keep}");
    assert!(left - sizes[0] < keep, "{sizes:?}");
}

#[tokio::test]
async fn a_deletion_cut_short_loses_nothing_above_the_cut_and_is_finished_at_open() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    let before = write_log(&dir, 300).await;
    let cut = before[6].0;
    // A crash after START was written, while the files below it were being
    // removed: some are gone, some are still there.
    std::fs::write(dir.join(START_FILE), format!("start {cut}\n")).expect("START");
    for (_, p) in &before[..3] {
        std::fs::remove_file(p).expect("remove");
    }

    let ro = FileLog::open_read_only(&dir).expect("read-only open");
    assert_eq!(ro.start(), Position::single(cut));
    assert_eq!(payloads(&read_from(&ro, cut).await), written(cut, 300));
    drop(ro);
    assert_eq!(
        segments(&dir).len(),
        before.len() - 3,
        "a reader removes nothing"
    );

    let log = FileLog::open(&dir, small_segments()).expect("writer open");
    assert_eq!(
        segments(&dir),
        before[6..].to_vec(),
        "the rest went at open"
    );
    assert_eq!(log.start_offset(), cut);
    assert_eq!(payloads(&read_from(&log, cut).await), written(cut, 300));
    assert_eq!(
        log.append(&batch(300, 1)).await.expect("append")[0].offset,
        300
    );
    drop(log);

    // A crash after START was written, before any file was removed.
    let tmp2 = tempfile::tempdir().expect("tempdir");
    let dir2 = tmp2.path().join("log");
    let before2 = write_log(&dir2, 300).await;
    let cut2 = before2[4].0;
    std::fs::write(dir2.join(START_FILE), format!("start {cut2}\n")).expect("START");
    let log = FileLog::open(&dir2, small_segments()).expect("writer open");
    assert_eq!(segments(&dir2), before2[4..].to_vec());
    assert_eq!(payloads(&read_from(&log, cut2).await), written(cut2, 300));
}

#[tokio::test]
async fn a_segment_lost_above_the_start_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    write_log(&dir, 300).await;
    let log = FileLog::open(&dir, small_segments()).expect("open");
    let start = log
        .delete_segments(100, all_old())
        .await
        .expect("delete")
        .start;
    drop(log);
    let kept = segments(&dir);
    std::fs::remove_file(&kept[0].1).expect("lose the first segment");
    let next = kept[1].0;
    for e in [
        FileLog::open(&dir, small_segments()).expect_err("writer"),
        FileLog::open_read_only(&dir).expect_err("reader"),
    ] {
        let e = e.to_string();
        assert!(
            e.contains(&format!("segments {start}..{next} are missing")),
            "{e}"
        );
    }
    // Without START, a first segment above 0 is refused as before.
    std::fs::remove_file(dir.join(START_FILE)).expect("rm START");
    let e = FileLog::open(&dir, small_segments())
        .expect_err("no START")
        .to_string();
    assert!(e.contains("earlier segments are missing"), "{e}");
}

#[tokio::test]
async fn compaction_keeps_a_segments_age_and_works_after_a_deletion() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    let before = write_log(&dir, 300).await;
    let long_ago = SystemTime::now() - 48 * HOUR;
    for (_, p) in &before {
        std::fs::File::options()
            .write(true)
            .open(p)
            .and_then(|f| f.set_modified(long_ago))
            .expect("age the segment");
    }
    let log = FileLog::open(&dir, small_segments()).expect("open");
    let report = log
        .delete_segments(
            60,
            DeletePolicy {
                max_age: 24 * HOUR,
                max_bytes: None,
                now: SystemTime::now(),
            },
        )
        .await
        .expect("delete");
    assert!(report.segments > 0, "{report:?}");
    let compacted = log
        .compact(
            250,
            Arc::new(|_: &deltapilot_proto::Event| true),
            CompactPolicy {
                tombstone_retention: Duration::ZERO,
                now_unix_micros: 0,
            },
        )
        .await
        .expect("compact");
    assert!(compacted.rewritten > 0, "{compacted:?}");
    for (_, p) in segments(&dir).iter().rev().skip(1) {
        let m = std::fs::metadata(p)
            .and_then(|m| m.modified())
            .expect("mtime");
        assert_eq!(m, long_ago, "{}: compaction kept the age", p.display());
    }
    // Compaction moved the horizon past the start; deleting again goes on from
    // the start, and the log reopens.
    assert_eq!(log.start_offset(), report.start);
    assert!(log.horizon_offset() > report.start);
    let again = log
        .delete_segments(
            200,
            DeletePolicy {
                max_age: 24 * HOUR,
                max_bytes: None,
                now: SystemTime::now(),
            },
        )
        .await
        .expect("delete again");
    assert!(again.start > report.start, "{again:?}");
    drop(log);
    let log = FileLog::open(&dir, small_segments()).expect("reopen");
    assert_eq!(log.start_offset(), again.start);
    let recs = read_from(&log, again.start).await;
    assert_eq!(recs.last().map(|r| r.pos.offset), Some(299));
    assert!(recs.iter().all(|r| r.pos.offset >= again.start));
}

/// Set in a child copy of this test binary to make it a writer that appends and
/// deletes until it is killed.
const CHILD_DIR_ENV: &str = "DELTAPILOT_RETENTION_TEST_DIR";

async fn deleting_writer(dir: &Path) {
    let log = FileLog::open(dir, small_segments()).expect("child: open");
    let mut next = log.head().await.expect("child: head").offset(0);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for _ in 0..1_000 {
        if std::time::Instant::now() > deadline {
            break;
        }
        let events: Vec<_> = (next..next + 37).map(|i| batch(i, 1).remove(0)).collect();
        log.append(&events).await.expect("child: append");
        next += 37;
        log.delete_segments(next.saturating_sub(120), all_old())
            .await
            .expect("child: delete");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_deleting_leaves_every_record_from_the_start_to_the_head() {
    if let Some(dir) = std::env::var_os(CHILD_DIR_ENV) {
        deleting_writer(Path::new(&dir)).await;
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    std::fs::create_dir(&dir).expect("mkdir");
    let (mut head, mut start) = (0, 0);
    for round in 0..5u64 {
        let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "kill_9_while_deleting_leaves_every_record_from_the_start_to_the_head",
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

        let log = FileLog::open(&dir, small_segments()).expect("the killed log opens");
        let now = log.head().await.expect("head").offset(0);
        let first = log.start_offset();
        assert!(now > head, "round {round}: progress");
        assert!(first >= start && first > 0, "round {round}: start {first}");
        // Never more than the writer asked for: it deleted below head - 120 at most.
        assert!(
            first + 120 <= now + 37,
            "round {round}: start {first}, head {now}"
        );
        let recs = read_from(&log, first).await;
        let offsets: Vec<u64> = recs.iter().map(|r| r.pos.offset).collect();
        assert_eq!(offsets, (first..now).collect::<Vec<_>>(), "round {round}");
        assert_eq!(payloads(&recs), written(first, now), "round {round}");
        assert!(
            segments(&dir).iter().all(|(b, _)| *b >= first),
            "round {round}: nothing left below the start"
        );
        (head, start) = (now, first);
    }
}

#[tokio::test]
async fn a_follower_that_fell_behind_the_start_is_told() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    write_log(&dir, 10).await;
    let log = FileLog::open(&dir, small_segments()).expect("open");
    let mut follower = log.follow(Position::single(0));
    match follower.next().await {
        Some(Ok(FollowItem::Records(r))) => assert_eq!(r.len(), 10),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        follower.next().await,
        Some(Ok(FollowItem::CaughtUp(_)))
    ));
    drop(follower);
    // A follower created before a deletion, first pulled after it.
    let mut late = log.follow(Position::single(0));
    for b in (10..300).step_by(10) {
        log.append(&batch(b, 10)).await.expect("append");
    }
    let start = log
        .delete_segments(200, all_old())
        .await
        .expect("delete")
        .start;
    assert!(start > 0);
    match late.next().await {
        Some(Err(Error::BeforeRetention { oldest, .. })) => assert_eq!(oldest, start.to_string()),
        other => panic!("{other:?}"),
    }
}
