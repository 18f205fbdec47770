//! The embedded file log against real files: the shared behavioural suite, crash
//! recovery (torn tail vs corruption in the middle), segment rolling, read-only
//! followers beside a writer (in this process and in a child process), and the
//! writer lock.

mod suite;

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::time::Duration;

use deltapilot_log::Error;
use deltapilot_log::file::{FileLog, FileLogOptions, FsyncPolicy};
use deltapilot_log::{EventLog, FollowItem, Position, encode_event};
use futures::StreamExt;

/// On-disk sizes, from the format documented in `engine/src/log/file/format.rs`.
const SEGMENT_HEADER: u64 = 16;
const RECORD_HEADER: u64 = 20;

fn opts(fsync: FsyncPolicy, segment_bytes: u64) -> FileLogOptions {
    FileLogOptions {
        fsync,
        segment_bytes,
        ..FileLogOptions::default()
    }
}

fn open(dir: &Path) -> FileLog {
    FileLog::open(dir, FileLogOptions::default()).expect("open")
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    v.sort();
    v
}

/// Bytes record `i` of `suite::batch(0, n)` takes on disk.
fn framed(i: u64) -> u64 {
    RECORD_HEADER + encode_event(&suite::event(i, 200)).len() as u64
}

/// Byte offset of record `i` in a one-segment log written with `suite::batch(0, n)`.
fn byte_of(i: u64) -> u64 {
    SEGMENT_HEADER + (0..i).map(framed).sum::<u64>()
}

/// A log holding records 0..n in one segment, closed again; returns its segment.
/// Writes records `0..n` into one segment, each as its own batch, so that a
/// damaged record is the only one recovery must cut (a batch is cut whole).
async fn write_and_close(dir: &Path, n: u64) -> PathBuf {
    let log = open(dir);
    for i in 0..n {
        log.append(&suite::batch(i, 1)).await.expect("append");
    }
    drop(log);
    let segs = segment_files(dir);
    assert_eq!(segs.len(), 1);
    segs.into_iter().next().expect("one segment")
}

fn flip_byte(path: &Path, at: u64) {
    let mut bytes = std::fs::read(path).expect("read segment");
    bytes[at as usize] ^= 0x40;
    std::fs::write(path, bytes).expect("write segment");
}

#[tokio::test]
async fn suite_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    suite::round_trip(&open(dir.path())).await;
}

#[tokio::test]
async fn suite_read_from_position() {
    let dir = tempfile::tempdir().expect("tempdir");
    suite::read_from_position(&open(dir.path())).await;
}

#[tokio::test]
async fn suite_head_reports_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    suite::head_reports_end(&open(dir.path())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_tail_follow_while_appending() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = FileLog::open(dir.path(), opts(FsyncPolicy::Never, 8 * 1024)).expect("open");
    suite::tail_follow_while_appending(&log).await;
}

#[test]
fn suite_any_batches_read_back() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    // Small segments so that cases cross segment boundaries.
    let log = FileLog::open(dir.path(), opts(FsyncPolicy::Never, 16 * 1024)).expect("open");
    suite::any_batches_read_back(&rt, &log, 64);
}

#[tokio::test]
async fn all_fsync_policies_survive_reopen() {
    for policy in [
        FsyncPolicy::Always,
        FsyncPolicy::Interval(Duration::from_millis(1)),
        FsyncPolicy::Never,
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let log = FileLog::open(dir.path(), opts(policy, 4096)).expect("open");
            suite::round_trip(&log).await;
        }
        let log = open(dir.path());
        assert!(log.recovery().is_none(), "{policy:?}: {:?}", log.recovery());
        assert_eq!(log.head().await.expect("head"), Position::single(50));
        assert_eq!(suite::read_to_end(&log, &log.start()).await.len(), 50);
    }
}

#[tokio::test]
async fn torn_tail_is_truncated_and_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = write_and_close(dir.path(), 10).await;
    let full = std::fs::metadata(&seg).expect("stat").len();
    assert_eq!(full, byte_of(10));
    // A crash in the middle of writing record 9.
    let cut = byte_of(9) + framed(9) / 2;
    OpenOptions::new()
        .write(true)
        .open(&seg)
        .expect("open segment")
        .set_len(cut)
        .expect("cut");

    let log = open(dir.path());
    let rec = log.recovery().expect("a recovery report");
    assert_eq!(rec.segment, seg);
    assert_eq!(rec.offset, 9);
    assert_eq!(rec.byte_offset, byte_of(9));
    assert_eq!(rec.truncated_bytes, cut - byte_of(9));
    assert!(rec.reason.contains("incomplete"), "{}", rec.reason);
    assert_eq!(std::fs::metadata(&seg).expect("stat").len(), byte_of(9));
    assert_eq!(log.head().await.expect("head"), Position::single(9));

    // Appends continue at the cut with the right offsets.
    let pos = log.append(&suite::batch(9, 3)).await.expect("append");
    assert_eq!(
        pos.iter().map(|p| p.offset).collect::<Vec<_>>(),
        [9, 10, 11]
    );
    drop(log);
    let log = open(dir.path());
    assert!(log.recovery().is_none());
    let recs = suite::read_to_end(&log, &log.start()).await;
    assert_eq!(recs.len(), 12);
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.pos.offset, i as u64);
        assert_eq!(r.decode().expect("decode"), suite::event(i as u64, 200));
    }
}

#[tokio::test]
async fn flipped_byte_in_last_record_is_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = write_and_close(dir.path(), 10).await;
    flip_byte(&seg, byte_of(9) + framed(9) - 3);

    let log = open(dir.path());
    let rec = log.recovery().expect("a recovery report");
    assert_eq!((rec.offset, rec.byte_offset), (9, byte_of(9)));
    assert_eq!(rec.truncated_bytes, framed(9));
    assert!(rec.reason.contains("CRC"), "{}", rec.reason);
    assert_eq!(log.head().await.expect("head"), Position::single(9));
    assert_eq!(suite::read_to_end(&log, &log.start()).await.len(), 9);
}

#[tokio::test]
async fn flipped_length_in_last_record_is_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = write_and_close(dir.path(), 10).await;
    // The length field's high byte: the record now claims to run past the file.
    flip_byte(&seg, byte_of(9) + 11);
    let log = open(dir.path());
    let rec = log.recovery().expect("a recovery report");
    assert_eq!((rec.offset, rec.byte_offset), (9, byte_of(9)));
}

#[tokio::test]
async fn flipped_byte_in_middle_record_is_corruption() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = write_and_close(dir.path(), 10).await;
    let len = std::fs::metadata(&seg).expect("stat").len();
    flip_byte(&seg, byte_of(4) + RECORD_HEADER + 5);

    for (who, res) in [
        (
            "writer",
            FileLog::open(dir.path(), FileLogOptions::default()),
        ),
        ("reader", FileLog::open_read_only(dir.path())),
    ] {
        match res {
            Err(Error::Corrupt {
                segment,
                byte_offset,
                offset,
                reason,
            }) => {
                assert_eq!(segment, seg, "{who}");
                assert_eq!((offset, byte_offset), (4, byte_of(4)), "{who}");
                assert!(
                    reason.contains("CRC") && reason.contains("offset 5"),
                    "{who}: {reason}"
                );
            }
            other => panic!("{who}: expected Error::Corrupt, got {other:?}"),
        }
    }
    // Nothing was cut.
    assert_eq!(std::fs::metadata(&seg).expect("stat").len(), len);
}

#[tokio::test]
async fn damage_after_open_fails_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = write_and_close(dir.path(), 10).await;
    let log = open(dir.path());
    flip_byte(&seg, byte_of(6) + RECORD_HEADER + 1);
    // A read across the damage returns the records before it...
    let before = log.read(&Position::single(0), 100).await.expect("before");
    assert_eq!(
        before.iter().map(|r| r.pos.offset).collect::<Vec<_>>(),
        (0..6).collect::<Vec<_>>()
    );
    // ...and the read that starts at it is the error.
    let err = log
        .read(&Position::single(6), 100)
        .await
        .expect_err("corrupt");
    assert!(
        matches!(err, Error::Corrupt { offset: 6, byte_offset, .. } if byte_offset == byte_of(6)),
        "{err}"
    );
    // Records before the damage are still readable.
    assert_eq!(
        log.read(&Position::single(0), 6).await.expect("read").len(),
        6
    );
}

#[tokio::test]
async fn bad_tail_of_an_older_segment_is_corruption() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let log = FileLog::open(dir.path(), opts(FsyncPolicy::Never, 4096)).expect("open");
        for b in 0..10 {
            log.append(&suite::batch(b * 10, 10)).await.expect("append");
        }
    }
    let segs = segment_files(dir.path());
    assert!(segs.len() >= 3, "{segs:?}");
    let first = &segs[0];
    let len = std::fs::metadata(first).expect("stat").len();
    flip_byte(first, len - 2);
    let err = FileLog::open(dir.path(), FileLogOptions::default()).expect_err("corrupt");
    assert!(
        matches!(&err, Error::Corrupt { segment, reason, .. } if segment == first && reason.contains("not in the last segment")),
        "{err}"
    );
}

#[tokio::test]
async fn torn_segment_header_is_recovered() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_and_close(dir.path(), 3).await;
    // A crash right after a roll created the next segment.
    let next = dir.path().join(format!("{:020}.log", 3));
    std::fs::write(&next, b"DPLO").expect("write");
    let log = open(dir.path());
    let rec = log.recovery().expect("a recovery report");
    assert_eq!(
        (rec.segment.clone(), rec.offset, rec.byte_offset),
        (next.clone(), 3, 0)
    );
    let pos = log.append(&suite::batch(3, 1)).await.expect("append");
    assert_eq!(pos[0].offset, 3);
    drop(log);
    let log = open(dir.path());
    assert!(log.recovery().is_none());
    assert_eq!(suite::read_to_end(&log, &log.start()).await.len(), 4);
}

#[tokio::test]
async fn segments_roll_and_reads_cross_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 200u64;
    {
        let log = FileLog::open(dir.path(), opts(FsyncPolicy::Never, 4096)).expect("open");
        for b in 0..n / 10 {
            log.append(&suite::batch(b * 10, 10)).await.expect("append");
        }
        // One batch larger than a segment is never split: it rolls first and
        // goes whole into a segment of its own.
        let pos = log.append(&suite::batch(n, 50)).await.expect("append");
        assert_eq!(pos.last().map(|p| p.offset), Some(n + 49));
    }
    let big = n;
    let n = n + 50;
    let mut segs = segment_files(dir.path());
    let whole = segs.pop().expect("the big batch's segment");
    let name = whole.file_stem().and_then(|x| x.to_str()).expect("name");
    assert_eq!(
        name.parse::<u64>().expect("digits"),
        big,
        "rolled before it"
    );
    assert!(std::fs::metadata(&whole).expect("stat").len() > 4096);
    assert!(
        segs.len() >= 10,
        "expected several segments, got {}",
        segs.len()
    );
    let mut bases = Vec::new();
    for s in &segs {
        let name = s.file_stem().and_then(|x| x.to_str()).expect("name");
        assert_eq!(name.len(), 20, "{name}");
        bases.push(name.parse::<u64>().expect("digits"));
        let len = std::fs::metadata(s).expect("stat").len();
        assert!(
            len > SEGMENT_HEADER && len <= 4096,
            "{} is {len} bytes",
            s.display()
        );
    }
    assert_eq!(bases[0], 0);
    assert!(bases.windows(2).all(|w| w[0] < w[1]), "{bases:?}");
    assert!(bases.last().is_some_and(|b| *b < big), "{bases:?}");

    let log = open(dir.path());
    assert_eq!(log.head().await.expect("head"), Position::single(n));
    for from in [0, 1, 13, 17, 18, 19, 20, 57, 199, n - 7] {
        let recs = log.read(&Position::single(from), 7).await.expect("read");
        let offsets: Vec<u64> = recs.iter().map(|r| r.pos.offset).collect();
        assert_eq!(offsets, (from..from + 7).collect::<Vec<_>>(), "from {from}");
        for r in &recs {
            assert_eq!(r.decode().expect("decode"), suite::event(r.pos.offset, 200));
        }
    }
    let all = log.read(&log.start(), 10_000).await.expect("read all");
    assert_eq!(all.len() as u64, n);
    // Appends after reopen continue in the last segment.
    let pos = log.append(&suite::batch(n, 1)).await.expect("append");
    assert_eq!(pos[0].offset, n);
}

#[tokio::test]
async fn positions_outside_the_log_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path());
    log.append(&suite::batch(0, 3)).await.expect("append");
    for bad in [Position::single(4), Position::from_offsets(vec![0, 0])] {
        match log.read(&bad, 1).await {
            Err(Error::PositionOutOfRange { start, head, .. }) => {
                assert_eq!((start.as_str(), head.as_str()), ("0", "3"));
            }
            other => panic!("{bad}: {other:?}"),
        }
        let mut follow = log.follow(bad.clone());
        let first = follow.next().await.expect("an item");
        assert!(
            matches!(first, Err(Error::PositionOutOfRange { .. })),
            "{first:?}"
        );
        assert!(follow.next().await.is_none(), "stream ends after the error");
    }
    assert!(
        log.read(&Position::single(3), 5)
            .await
            .expect("at head")
            .is_empty()
    );
}

#[tokio::test]
async fn second_writer_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = open(dir.path());
    let err = FileLog::open(dir.path(), FileLogOptions::default()).expect_err("locked");
    let text = err.to_string();
    assert!(matches!(err, Error::InvalidLogDir { .. }), "{text}");
    assert!(
        text.contains("LOCK") && text.contains("another writer"),
        "{text}"
    );
    assert!(text.contains(&std::process::id().to_string()), "{text}");
    // Readers are welcome meanwhile.
    assert!(FileLog::open_read_only(dir.path()).is_ok());
    drop(first);
    open(dir.path());
}

#[tokio::test]
async fn follower_ends_when_the_log_is_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path());
    let mut follow = log.follow(log.start());
    assert!(
        matches!(follow.next().await, Some(Ok(FollowItem::CaughtUp(p))) if p == Position::single(0))
    );
    drop(log);
    let item = tokio::time::timeout(Duration::from_secs(5), follow.next())
        .await
        .expect("woken by the drop");
    assert!(matches!(item, Some(Err(Error::Closed))), "{item:?}");
    assert!(follow.next().await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_handle_follows_a_writer_in_this_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer = FileLog::open(dir.path(), opts(FsyncPolicy::Never, 4096)).expect("open");
    writer.append(&suite::batch(0, 5)).await.expect("append");

    let reader = FileLog::open_read_only(dir.path()).expect("open read-only");
    assert!(reader.is_read_only() && reader.recovery().is_none());
    assert!(
        reader.append(&suite::batch(0, 1)).await.is_err(),
        "read-only append"
    );
    assert_eq!(reader.head().await.expect("head"), Position::single(5));

    let total = 5 + 8 * 20;
    let follower = tokio::spawn(suite::collect_following(
        reader.follow(reader.start()),
        total,
    ));
    for b in 0..8u64 {
        writer
            .append(&suite::batch(5 + b * 20, 20))
            .await
            .expect("append");
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let (records, caught_up) = tokio::time::timeout(Duration::from_secs(30), follower)
        .await
        .expect("read-only follower stuck")
        .expect("follower task");
    assert_eq!(caught_up, Position::single(total as u64));
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.pos.offset, i as u64);
        assert_eq!(r.decode().expect("decode"), suite::event(i as u64, 200));
    }
    assert!(
        segment_files(dir.path()).len() > 2,
        "the writer rolled meanwhile"
    );
    assert_eq!(
        reader.head().await.expect("head"),
        Position::single(total as u64)
    );
}

#[tokio::test]
async fn read_only_stops_before_a_torn_tail_and_leaves_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = write_and_close(dir.path(), 10).await;
    let cut = byte_of(9) + 7;
    OpenOptions::new()
        .write(true)
        .open(&seg)
        .expect("open segment")
        .set_len(cut)
        .expect("cut");
    let reader = FileLog::open_read_only(dir.path()).expect("open read-only");
    assert_eq!(reader.head().await.expect("head"), Position::single(9));
    assert_eq!(
        std::fs::metadata(&seg).expect("stat").len(),
        cut,
        "reader truncated"
    );
    assert!(
        FileLog::open_read_only(&dir.path().join("missing")).is_err(),
        "a missing directory is an error for a reader"
    );
}

/// Set in a child copy of this test binary to make it the writer process.
const CHILD_DIR_ENV: &str = "DELTAPILOT_FILE_LOG_TEST_CHILD_DIR";
/// The child exits once this file exists.
const CHILD_RELEASE_ENV: &str = "DELTAPILOT_FILE_LOG_TEST_CHILD_RELEASE";
const CHILD_BATCHES: u64 = 10;
const CHILD_BATCH: u64 = 20;

/// The writer half of `reader_follows_a_writer_in_another_process`, run in a child
/// process: appends in batches (rolling segments), then holds the lock until told.
async fn child_writer(dir: &Path, release: &Path) {
    let log = FileLog::open(dir, opts(FsyncPolicy::Never, 4096)).expect("child: open");
    for b in 0..CHILD_BATCHES {
        log.append(&suite::batch(b * CHILD_BATCH, CHILD_BATCH))
            .await
            .expect("child: append");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !release.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reader_follows_a_writer_in_another_process() {
    if let (Some(dir), Some(release)) = (
        std::env::var_os(CHILD_DIR_ENV),
        std::env::var_os(CHILD_RELEASE_ENV),
    ) {
        child_writer(Path::new(&dir), Path::new(&release)).await;
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    std::fs::create_dir(&dir).expect("mkdir");
    let release = tmp.path().join("release");
    let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["reader_follows_a_writer_in_another_process", "--exact"])
        .env(CHILD_DIR_ENV, &dir)
        .env(CHILD_RELEASE_ENV, &release)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn the writer process");

    // The reader starts while the child may not even have created a segment yet.
    let reader = FileLog::open_read_only(&dir).expect("open read-only");
    let total = (CHILD_BATCHES * CHILD_BATCH) as usize;
    let follow = suite::collect_following(reader.follow(reader.start()), total);
    let (records, caught_up) = tokio::time::timeout(Duration::from_secs(60), follow)
        .await
        .expect("follower stuck");
    assert_eq!(caught_up, Position::single(total as u64));
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.pos.offset, i as u64);
        assert_eq!(r.decode().expect("decode"), suite::event(i as u64, 200));
    }
    assert!(segment_files(&dir).len() > 2, "the writer rolled meanwhile");

    // The child still holds the lock: a second writer is refused, naming it.
    let err = FileLog::open(&dir, FileLogOptions::default()).expect_err("locked by the child");
    assert!(err.to_string().contains(&child.id().to_string()), "{err}");

    std::fs::write(&release, b"").expect("release the child");
    let status = child.wait().expect("wait for the child");
    assert!(status.success(), "writer process failed: {status}");
    let log = open(&dir);
    assert!(log.recovery().is_none());
    assert_eq!(
        log.head().await.expect("head"),
        Position::single(total as u64)
    );
}

/// Records `first..first + n` appended as one batch, then the log closed.
async fn append_batch(dir: &Path, first: u64, n: u64) {
    let log = open(dir);
    log.append(&suite::batch(first, n)).await.expect("append");
}

#[tokio::test]
async fn a_batch_whose_last_record_is_torn_is_cut_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    append_batch(dir.path(), 0, 5).await;
    append_batch(dir.path(), 5, 5).await;
    let seg = segment_files(dir.path()).pop().expect("segment");
    flip_byte(&seg, byte_of(9) + framed(9) - 3);

    let log = open(dir.path());
    let rec = log.recovery().expect("a recovery report");
    assert_eq!((rec.offset, rec.byte_offset), (5, byte_of(5)), "{rec:?}");
    assert!(
        rec.reason.contains("CRC") && rec.reason.contains("records 5..9"),
        "{}",
        rec.reason
    );
    assert_eq!(log.head().await.expect("head"), Position::single(5));
    assert_eq!(std::fs::metadata(&seg).expect("stat").len(), byte_of(5));
}

#[tokio::test]
async fn a_batch_cut_at_a_record_boundary_is_cut_whole_for_writer_and_reader() {
    let dir = tempfile::tempdir().expect("tempdir");
    append_batch(dir.path(), 0, 4).await;
    append_batch(dir.path(), 4, 6).await;
    let seg = segment_files(dir.path()).pop().expect("segment");
    // Records 4..8 of the second batch are whole on disk; its last two are not.
    OpenOptions::new()
        .write(true)
        .open(&seg)
        .expect("open segment")
        .set_len(byte_of(8))
        .expect("cut");

    let reader = FileLog::open_read_only(dir.path()).expect("open read-only");
    assert_eq!(reader.head().await.expect("head"), Position::single(4));
    assert_eq!(suite::read_to_end(&reader, &reader.start()).await.len(), 4);
    drop(reader);

    let log = open(dir.path());
    let rec = log.recovery().expect("a recovery report");
    assert_eq!((rec.offset, rec.byte_offset), (4, byte_of(4)), "{rec:?}");
    assert!(rec.reason.contains("incomplete batch"), "{}", rec.reason);
    assert_eq!(log.head().await.expect("head"), Position::single(4));
    let pos = log.append(&suite::batch(4, 3)).await.expect("append");
    assert_eq!(pos.first().map(|p| p.offset), Some(4));
}

#[tokio::test]
async fn a_segment_of_the_earlier_format_is_read_and_appends_move_to_a_new_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = write_and_close(dir.path(), 6).await;
    // Every record of a v01 segment ends its batch, as these do: only the header
    // tells the formats apart.
    let mut bytes = std::fs::read(&seg).expect("read");
    bytes[..8].copy_from_slice(b"DPLOGv01");
    std::fs::write(&seg, &bytes).expect("write");

    let log = open(dir.path());
    assert!(log.recovery().is_none());
    assert_eq!(log.head().await.expect("head"), Position::single(6));
    log.append(&suite::batch(6, 4)).await.expect("append");
    drop(log);
    let segs = segment_files(dir.path());
    assert_eq!(segs.len(), 2, "the batch went into a new segment: {segs:?}");
    assert_eq!(&std::fs::read(&segs[0]).expect("read")[..8], b"DPLOGv01");
    assert_eq!(&std::fs::read(&segs[1]).expect("read")[..8], b"DPLOGv02");
    let log = open(dir.path());
    let recs = suite::read_to_end(&log, &log.start()).await;
    assert_eq!(recs.len(), 10);
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.decode().expect("decode"), suite::event(i as u64, 200));
    }
}

/// Set in a child copy of this test binary to make it a writer that is killed.
const KILLED_DIR_ENV: &str = "DELTAPILOT_FILE_LOG_TEST_KILLED_DIR";
/// Records per batch of the killed writer: prime, so a half batch never looks
/// whole by accident of segment arithmetic.
const KILLED_BATCH: u64 = 37;
/// Kills per test run.
const KILLS: usize = 6;

/// The writer `kill_9_during_appends_never_leaves_half_a_batch` kills: appends
/// batches with small segments and fsync on every append, until killed (bounded
/// in count and time in case nobody does).
async fn killed_writer(dir: &Path) {
    let log = FileLog::open(dir, opts(FsyncPolicy::Always, 4096)).expect("child: open");
    let mut next = log.head().await.expect("child: head").offset(0);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for _ in 0..5_000 {
        if std::time::Instant::now() > deadline {
            break;
        }
        log.append(&suite::batch(next, KILLED_BATCH))
            .await
            .expect("child: append");
        next += KILLED_BATCH;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_appends_never_leaves_half_a_batch() {
    if let Some(dir) = std::env::var_os(KILLED_DIR_ENV) {
        killed_writer(Path::new(&dir)).await;
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    std::fs::create_dir(&dir).expect("mkdir");
    let mut head = 0;
    let mut rolled_through = 0;
    for round in 0..KILLS {
        let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["kill_9_during_appends_never_leaves_half_a_batch", "--exact"])
            .env(KILLED_DIR_ENV, &dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn the writer process");
        // Let it write past where the last round stopped, then kill it mid-stream
        // at a moment that varies per round.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let now = match FileLog::open_read_only(&dir) {
                Ok(l) => l.head().await.map_or(0, |p| p.offset(0)),
                Err(_) => 0,
            };
            if now > head + KILLED_BATCH * 3 || std::time::Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(3 + 7 * round as u64)).await;
        child.kill().expect("kill -9 the writer");
        child.wait().expect("reap the writer");

        let log = open(&dir);
        let now = log.head().await.expect("head").offset(0);
        assert_eq!(
            now % KILLED_BATCH,
            0,
            "round {round}: head {now} is not a whole number of {KILLED_BATCH}-record batches \
             (recovery: {:?})",
            log.recovery()
        );
        assert!(now > head, "round {round}: the writer made progress");
        let recs = suite::read_to_end(&log, &log.start()).await;
        assert_eq!(recs.len() as u64, now);
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.decode().expect("decode"), suite::event(i as u64, 200));
        }
        head = now;
        rolled_through = segment_files(&dir).len();
    }
    assert!(rolled_through > KILLS, "segments rolled during the kills");
}
