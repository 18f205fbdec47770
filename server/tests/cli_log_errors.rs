//! `deltapilot log …` on bad input and damaged or unreachable logs: every
//! error names what, where and why, and nothing is half written. The real
//! binary on real temp directories and a real Apache Kafka broker
//! (`DELTAPILOT_KAFKA_BROKERS`; without it the Kafka test fails, never skips).

mod cli_log_support;
mod support;

use cli_log_support::*;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::kafka_brokers;

use deltapilot_proto::{Event, event::Payload, resync_marker::Phase};
use serde_json::Value;

#[test]
fn a_malformed_line_is_named_and_nothing_is_appended() {
    let (_dir, log, _) = example_log();
    let before = head(&log);
    let cases = [
        (
            r#"{"source":"t","serviceDelete":{"key":"svc/a/b"}"#,
            "invalid JSON at column",
        ),
        (
            r#"{"source":"t","colour":"blue","serviceDelete":{"key":"svc/a/b"}}"#,
            "unknown field `colour`",
        ),
        (r#"{"source":"t","generation":"3"}"#, "no payload"),
        (
            r#"{"schemaVersion":2,"source":"t","serviceDelete":{"key":"svc/a/b"}}"#,
            "schemaVersion 2 is newer than the newest this build supports (1)",
        ),
        (
            r#"{"source":"t","endpointDelete":{"key":""}}"#,
            "endpointDelete.key is missing",
        ),
        (r#"{"source":"t","serviceUpsert":{}}"#, "no entity key"),
    ];
    for (bad, reason) in cases {
        // Line 5: a comment and a blank line count as lines too.
        let input = format!("# header\n{GOOD}\n\n{GOOD}\n{bad}\n{GOOD}\n");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bad.jsonl");
        std::fs::write(&path, input).expect("write");
        let out = run(
            &[
                "log",
                "append",
                "--log",
                &log,
                "--file",
                path.to_str().expect("utf8"),
            ],
            None,
        );
        assert_eq!(out.status.code(), Some(1), "{bad}: {out:?}");
        assert!(out.stderr.contains("line 5: "), "{bad}: {}", out.stderr);
        assert!(out.stderr.contains(reason), "{bad}: {}", out.stderr);
        assert!(
            out.stderr.contains("nothing was appended"),
            "{}",
            out.stderr
        );
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
        assert_eq!(head(&log), before, "{bad}: something was appended");
    }
}

/// An event above the log's size limit is found by the check of every line,
/// before anything is written: with one event per batch, the good batches before
/// it are not appended either.
#[test]
fn an_oversized_event_is_named_and_nothing_is_appended() {
    let (_dir, log, _) = example_log();
    let before = head(&log);
    let huge = format!(
        r#"{{"source":"t","configUpsert":{{"config":{{"kind":"VIRTUAL_SERVICE","namespace":"ns","name":"big","specJson":"{{\"hosts\":[\"{}\"]}}"}}}}}}"#,
        "a".repeat(17 * 1024 * 1024)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.jsonl");
    std::fs::write(&path, format!("{GOOD}\n{GOOD}\n{huge}\n{GOOD}\n")).expect("write");
    let out = run(
        &[
            "log",
            "append",
            "--log",
            &log,
            "--batch-size",
            "1",
            "--file",
            path.to_str().expect("utf8"),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        out.stderr.contains("big.jsonl:3: the event encodes to")
            && out.stderr.contains("limit of 16777216 bytes")
            && out.stderr.contains("nothing was appended"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("may or may not"), "{}", out.stderr);
    assert_eq!(head(&log), before, "something was appended");
}

/// Damage inside an older segment: `log read` and `replay` print every record
/// before it, then the error naming the segment and offset, and `replay` says
/// how far it got.
#[test]
fn damage_in_an_older_segment_is_reported_after_the_records_before_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logdir = dir.path().join("log");
    std::fs::create_dir(&logdir).expect("mkdir");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let segs = rt.block_on(deltapilot_testkit::segments::write_log(&logdir, 200));
    let (seg, bad, _, _) = deltapilot_testkit::segments::damage_third_segment(&segs, 3);
    let log = format!("file://{}", logdir.display());

    let out = run(&["log", "read", "--log", &log], None);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let printed: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    let records = printed.iter().filter(|v| v.get("error").is_none()).count();
    assert_eq!(records as u64, bad, "every record before the damage");
    assert_eq!(
        printed.last().and_then(|v| v["position"].as_str()),
        Some(format!("0:{}", bad - 1).as_str()),
        "the last record printed is the one before the damage"
    );
    let seg_name = seg.file_name().and_then(|n| n.to_str()).expect("name");
    assert!(
        out.stderr.contains(seg_name) && out.stderr.contains(&format!("log offset {bad}")),
        "{}",
        out.stderr
    );

    let out = run(&["replay", "--log", &log, "--output", "json"], None);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        out.stderr.contains(&format!(
            "everything before it (up to position {bad}) was replayed"
        )),
        "{}",
        out.stderr
    );
}

#[test]
fn head_and_read_need_an_existing_log_and_bad_uris_are_usage_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = file_uri(&dir.path().join("nope"));
    for cmd in ["head", "read"] {
        let out = run(&["log", cmd, "--log", &missing], None);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(out.stderr.contains("no such directory"), "{}", out.stderr);
    }
    assert!(!dir.path().join("nope").exists(), "a read created the log");

    let out = run(&["log", "head", "--log", "http://example.com/log"], None);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        out.stderr.contains("expected file://DIR or kafka://"),
        "{}",
        out.stderr
    );

    // The flag's environment variable works too.
    let (_d, log, input) = example_log();
    let mut cmd = deltapilot();
    cmd.args(["log", "head"]).env("DELTAPILOT_LOG", &log);
    let out = cmd.output().expect("run");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        event_lines(&input).len().to_string()
    );
}

/// Reads `log tail`'s stdout line by line on a thread.
#[test]
fn a_record_with_a_newer_schema_stops_read_with_its_position() {
    use deltapilot_log::{EventLog, file::FileLog, file::FileLogOptions};

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log");
    let good = events_only(GOOD).remove(0);
    let newer = Event {
        schema_version: deltapilot_proto::SCHEMA_VERSION + 1,
        ..good.clone()
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let log = FileLog::open(&path, FileLogOptions::default()).expect("open");
        log.append(&[good.clone(), good.clone(), newer, good.clone()])
            .await
            .expect("append");
    });
    let log = file_uri(&path);
    let out = run(&["log", "read", "--log", &log], None);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stderr.contains("0:2"), "{}", out.stderr);
    assert!(out.stderr.contains("schema version 2"), "{}", out.stderr);
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    // The records before it are printed, then a line `log append` refuses.
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    assert_eq!(events_only(&lines[..2].join("\n")), [good.clone(), good]);
    let last: Value = serde_json::from_str(lines[2]).expect("error line");
    assert_eq!(last["position"], "0:2");
    assert!(
        last["error"]
            .as_str()
            .is_some_and(|e| e.contains("schema version 2")),
        "{last}"
    );

    // So a copy through a pipe fails whole instead of copying a prefix.
    let copy = dir.path().join("copy");
    let mut child = deltapilot()
        .args(["log", "append", "--log", &file_uri(&copy), "--file", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(ChildGuard)
        .expect("spawn");
    child
        .0
        .stdin
        .take()
        .expect("stdin")
        .write_all(out.stdout.as_bytes())
        .expect("write");
    let stderr = collect(child.0.stderr.take().expect("stderr"));
    let status = child.wait_for(RUN_TIMEOUT);
    let stderr = stderr.join().expect("stderr");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("line 3: "), "{stderr}");
    assert!(stderr.contains("reports an error"), "{stderr}");
    assert!(
        !copy.exists(),
        "append created the log although it appended nothing"
    );
}

#[test]
fn append_to_an_unreachable_broker_fails_within_its_timeouts() {
    // Nothing listens on port 1 of loopback.
    let log = "kafka://127.0.0.1:1/cli-log-down?append_timeout_ms=2000&request_timeout_ms=1000";
    let started = Instant::now();
    let out = run(
        &[
            "log",
            "append",
            "--log",
            log,
            "--file",
            examples_path().to_str().expect("utf8"),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        out.stderr.contains("opening the log kafka://127.0.0.1:1/"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(": kafka create topic"),
        "{}",
        out.stderr
    );
    // Bounded by the URI's timeouts, not by the test's RUN_TIMEOUT.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

/// A topic name no other test (or earlier run) uses.
fn unique_topic(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    format!("cli-log-{tag}-{}-{nanos}", std::process::id())
}

#[test]
fn kafka_append_read_head_and_copy_to_a_file_log() {
    let brokers = kafka_brokers();
    let input = examples_text();
    let want = events_only(&input);

    // One partition: positions are plain offsets, order is total.
    let one = format!("kafka://{brokers}/{}", unique_topic("one"));
    append_file(&one, &examples_path());
    assert_eq!(head(&one), want.len().to_string());
    let read = parse_events(&read_all(&one));
    assert_eq!(
        read.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>(),
        want
    );
    assert_eq!(read[3].0.as_deref(), Some("0:3"));
    let out = run_ok(&["log", "read", "--log", &one, "--from", "3", "--limit", "2"]);
    assert_eq!(events_only(&out.stdout), want[3..5]);

    // Kafka → file log through a pipe.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = file_uri(&dir.path().join("copy"));
    let mut reader = deltapilot();
    reader
        .args(["log", "read", "--log", &one])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut reader = ChildGuard::spawn(&mut reader);
    let pipe = reader.0.stdout.take().expect("stdout");
    let appended = run(
        &["log", "append", "--log", &file, "--file", "-"],
        Some(Stdio::from(pipe)),
    );
    assert!(reader.wait_for(RUN_TIMEOUT).success());
    assert!(appended.status.success(), "{appended:?}");
    assert_eq!(events_only(&read_all(&file)), want);

    // Three partitions: the head lists each partition; per-key order holds.
    let three = format!("kafka://{brokers}/{}?partitions=3", unique_topic("three"));
    append_file(&three, &examples_path());
    let h = head(&three);
    let total: u64 = h
        .split(',')
        .map(|p| {
            p.split_once(':')
                .expect("partition:offset")
                .1
                .parse::<u64>()
                .expect("offset")
        })
        .sum();
    // A COMPLETED resync marker is written once to every partition (its `copies`
    // is 3); every other event once, by key.
    let is_completed =
        |e: &Event| matches!(&e.payload, Some(Payload::Resync(m)) if m.phase() == Phase::Completed);
    let stored = want.len() + 2 * want.iter().filter(|e| is_completed(e)).count();
    assert_eq!(total, stored as u64, "head {h}");
    let read = parse_events(&read_all(&three));
    assert_eq!(read.len(), stored);
    // Keep each marker's copy on the last partition, as written (copies unset).
    let read: Vec<(Option<String>, Event)> = read
        .into_iter()
        .filter_map(|(pos, mut e)| {
            if let Some(Payload::Resync(m)) = &mut e.payload
                && m.phase() == Phase::Completed
            {
                assert_eq!(m.copies, 3, "{pos:?}");
                if !pos.as_deref().is_some_and(|p| p.starts_with("2:")) {
                    return None;
                }
                m.copies = 0;
            }
            Some((pos, e))
        })
        .collect();
    assert_eq!(read.len(), want.len());
    let by_key = |events: Vec<Event>| {
        let mut m: BTreeMap<String, Vec<Event>> = BTreeMap::new();
        for e in events {
            m.entry(e.key().expect("key")).or_default().push(e);
        }
        m
    };
    assert_eq!(
        by_key(read.into_iter().map(|(_, e)| e).collect()),
        by_key(want.clone())
    );

    // Three partitions → file log: each marker's copies become one marker again
    // (a file log has one partition, so copies could never all arrive).
    let merged = file_uri(&dir.path().join("merged"));
    let mut reader = deltapilot();
    reader
        .args(["log", "read", "--log", &three])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut reader = ChildGuard::spawn(&mut reader);
    let pipe = reader.0.stdout.take().expect("stdout");
    let appended = run(
        &["log", "append", "--log", &merged, "--file", "-"],
        Some(Stdio::from(pipe)),
    );
    assert!(reader.wait_for(RUN_TIMEOUT).success());
    assert!(appended.status.success(), "{appended:?}");
    let copied = events_only(&read_all(&merged));
    assert_eq!(copied.len(), want.len());
    assert_eq!(by_key(copied), by_key(want));
}
