//! `deltapilot log …` end to end: the real binary on real temp directories (embedded
//! log) and on a real Apache Kafka broker.
//!
//! Every child process is bounded in time and killed if a test fails early.
//!
//! The Kafka test needs `DELTAPILOT_KAFKA_BROKERS` (e.g. `127.0.0.1:19192` after
//! `scripts/kafka.sh start 19192`); without it the test fails, never skips.

mod cli_log_support;
mod support;

use cli_log_support::*;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deltapilot_proto::{ConfigKind, Event, event::Payload, resync_marker::Phase};
use serde_json::Value;

#[test]
fn example_file_has_every_event_kind() {
    let events = events_only(&examples_text());
    let kinds: BTreeSet<&str> = events.iter().map(Event::kind_name).collect();
    for k in [
        "service_upsert",
        "service_delete",
        "endpoint_upsert",
        "endpoint_delete",
        "config_upsert",
        "config_delete",
        "resync",
    ] {
        assert!(kinds.contains(k), "examples/events.jsonl lacks {k}");
    }
    let mut phases = BTreeSet::new();
    let mut config_kinds = BTreeSet::new();
    for e in &events {
        assert!(e.key().is_some_and(|k| !k.is_empty()), "keyless: {e:?}");
        match &e.payload {
            Some(Payload::Resync(r)) => {
                phases.insert(r.phase().as_str_name());
            }
            Some(Payload::ConfigUpsert(u)) => {
                let c = u.config.as_ref().expect("config");
                let spec: Value = serde_json::from_str(&c.spec_json).expect("spec is JSON");
                // Canonical: compact, keys sorted (serde_json's map is sorted).
                assert_eq!(spec.to_string(), c.spec_json, "{} is not canonical", c.name);
                config_kinds.insert(c.kind().as_str_name());
            }
            _ => {}
        }
    }
    assert_eq!(
        phases,
        BTreeSet::from([Phase::Started.as_str_name(), Phase::Completed.as_str_name()])
    );
    let all_kinds: BTreeSet<&str> = [
        ConfigKind::VirtualService,
        ConfigKind::DestinationRule,
        ConfigKind::Gateway,
        ConfigKind::ServiceEntry,
        ConfigKind::Sidecar,
        ConfigKind::WorkloadEntry,
    ]
    .iter()
    .map(|k| k.as_str_name())
    .collect();
    assert_eq!(config_kinds, all_kinds);
}

#[test]
fn append_then_read_round_trips_the_example() {
    let (_dir, log, input) = example_log();
    let lines = event_lines(&input);
    assert_eq!(head(&log), lines.len().to_string());

    let output = read_all(&log);
    let read = parse_events(&output);
    assert_eq!(
        read.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>(),
        events_only(&input)
    );
    for (i, (pos, _)) in read.iter().enumerate() {
        assert_eq!(pos.as_deref(), Some(format!("0:{i}").as_str()));
    }
    // The example is written in exactly the form `log read` prints, so the README's
    // description of the format can be checked against it line by line.
    for (i, (got, want)) in event_lines(&output).iter().zip(&lines).enumerate() {
        let prefix = format!("{{\"position\":\"0:{i}\",");
        let rest = got
            .strip_prefix(&prefix)
            .expect("line starts with its position");
        assert_eq!(format!("{{{rest}"), **want, "line {i}");
    }
}

#[test]
fn append_reports_count_and_positions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = file_uri(&dir.path().join("log"));
    let n = event_lines(&examples_text()).len();
    let out = run_ok(&[
        "log",
        "append",
        "--log",
        &log,
        "--file",
        examples_path().to_str().expect("utf8"),
        "--batch-size",
        "7",
    ]);
    let batches = n.div_ceil(7);
    let want = format!("appended {n} events");
    assert!(out.stderr.contains(&want), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("in {batches} batch(es)")),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains(&format!("first at 0:0, last at 0:{}", n - 1)),
        "{}",
        out.stderr
    );
    assert_eq!(events_only(&read_all(&log)), events_only(&examples_text()));
}

#[test]
fn read_piped_into_append_copies_a_log() {
    let (dir, a, _) = example_log();
    let b = file_uri(&dir.path().join("copy"));
    let mut reader = deltapilot();
    reader
        .args(["log", "read", "--log", &a])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut reader = ChildGuard::spawn(&mut reader);
    let pipe = reader.0.stdout.take().expect("stdout");
    let appended = run(
        &["log", "append", "--log", &b, "--file", "-"],
        Some(Stdio::from(pipe)),
    );
    assert!(reader.wait_for(RUN_TIMEOUT).success(), "log read failed");
    assert!(appended.status.success(), "{appended:?}");
    assert_eq!(head(&b), head(&a));
    // Same events at the same positions, byte for byte.
    assert_eq!(read_all(&b), read_all(&a));
}

/// A good line any batch can carry.
#[test]
fn defaults_fill_schema_version_and_observed_at_and_position_is_ignored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = file_uri(&dir.path().join("log"));
    let now = |()| {
        let d = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
        i64::try_from(d.as_micros()).expect("micros fit")
    };
    let before = now(());
    append_text(
        &log,
        &format!(
            "{}\n{}\n",
            r#"{"source":"t","serviceDelete":{"key":"svc/default/gone"}}"#,
            r#"{"position":"7:7","schemaVersion":1,"source":"t","observedAtUnixMicros":"0","resync":{"phase":"STARTED"}}"#
        ),
    );
    let after = now(());
    let events = events_only(&read_all(&log));
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].schema_version, 1);
    assert!(
        (before..=after).contains(&events[0].observed_at_unix_micros),
        "{} not in {before}..={after}",
        events[0].observed_at_unix_micros
    );
    // An explicit 0 stays 0, and `log read` prints it so a copy keeps it.
    assert_eq!(events[1].observed_at_unix_micros, 0);
    let line = read_all(&log).lines().nth(1).expect("line 2").to_owned();
    assert!(line.contains(r#""observedAtUnixMicros":"0""#), "{line}");
    assert!(line.starts_with(r#"{"position":"0:1","#), "{line}");
}

#[test]
fn read_from_and_limit() {
    let (_dir, log, input) = example_log();
    let all = events_only(&input);
    let n = all.len();

    let out = run_ok(&["log", "read", "--log", &log, "--from", "3", "--limit", "2"]);
    let got = parse_events(&out.stdout);
    assert_eq!(
        got.iter()
            .map(|(p, _)| p.clone().expect("position"))
            .collect::<Vec<_>>(),
        ["0:3", "0:4"]
    );
    assert_eq!(
        got.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>(),
        all[3..5]
    );

    // A printed position re-reads its record.
    let out = run_ok(&[
        "log", "read", "--log", &log, "--from", "0:5", "--limit", "1",
    ]);
    assert_eq!(events_only(&out.stdout), all[5..6]);

    let tail = run_ok(&["log", "read", "--log", &log, "--from", &(n - 2).to_string()]);
    assert_eq!(events_only(&tail.stdout), all[n - 2..]);
    let at_head = n.to_string();
    for empty in [["--from", "head"], ["--from", &at_head], ["--limit", "0"]] {
        let mut args = vec!["log", "read", "--log", &log];
        args.extend(empty);
        assert_eq!(run_ok(&args).stdout, "", "{args:?}");
    }

    let past = (n + 1).to_string();
    let out = run(&["log", "read", "--log", &log, "--from", &past], None);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains(&format!("position {past} is outside the log")),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&format!("valid range 0..={n}")),
        "{}",
        out.stderr
    );
    assert_eq!(out.stdout, "");

    let out = run(&["log", "read", "--log", &log, "--from", "soon"], None);
    assert_eq!(out.status.code(), Some(2), "usage error: {out:?}");
    assert!(out.stderr.contains("--from"), "{}", out.stderr);
}

fn lines_of(stdout: ChildStdout) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn next_line(rx: &mpsc::Receiver<String>) -> String {
    rx.recv_timeout(LINE_TIMEOUT)
        .unwrap_or_else(|e| panic!("no line from log tail within {LINE_TIMEOUT:?}: {e}"))
}

fn position_of(line: &str) -> String {
    let v: Value = serde_json::from_str(line).expect(line);
    v["position"].as_str().expect("position").to_owned()
}

fn spawn_tail(log: &str, from: &str) -> ChildGuard {
    let mut cmd = deltapilot();
    cmd.args(["log", "tail", "--log", log, "--from", from])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    ChildGuard::spawn(&mut cmd)
}

#[test]
fn tail_follows_another_process_appending_and_stops_on_sigterm() {
    let (_dir, log, input) = example_log();
    let n = event_lines(&input).len();
    let mut tail = spawn_tail(&log, &(n - 2).to_string());
    let lines = lines_of(tail.0.stdout.take().expect("stdout"));
    let stderr = collect(tail.0.stderr.take().expect("stderr"));
    assert_eq!(position_of(&next_line(&lines)), format!("0:{}", n - 2));
    assert_eq!(position_of(&next_line(&lines)), format!("0:{}", n - 1));

    let more = [
        r#"{"schemaVersion":1,"source":"t","observedAtUnixMicros":"1","serviceDelete":{"key":"svc/a/one"}}"#,
        r#"{"schemaVersion":1,"source":"t","observedAtUnixMicros":"2","serviceDelete":{"key":"svc/a/two"}}"#,
        r#"{"schemaVersion":1,"source":"t","observedAtUnixMicros":"3","serviceDelete":{"key":"svc/a/three"}}"#,
    ];
    for (i, line) in more.iter().enumerate() {
        // One append (one process) per event: the tail sees each as it lands.
        append_text(&log, line);
        let got = next_line(&lines);
        assert_eq!(position_of(&got), format!("0:{}", n + i));
        assert_eq!(events_only(&got), events_only(line));
    }

    let pid = tail.0.id().to_string();
    // `kill` as a shell builtin: no procps needed, and std cannot send SIGTERM.
    let kill = Command::new("sh")
        .args(["-c", &format!("kill -TERM {pid}")])
        .status()
        .expect("run sh");
    assert!(kill.success());
    let status = tail.wait_for(Duration::from_secs(20));
    let stderr = stderr.join().expect("stderr");
    assert!(status.success(), "tail exited with {status:?}: {stderr}");
}

#[test]
fn tail_exits_quietly_when_stdout_closes() {
    let (_dir, log, _) = example_log();
    let mut tail = spawn_tail(&log, "start");
    let stderr = collect(tail.0.stderr.take().expect("stderr"));
    let mut reader = BufReader::new(tail.0.stdout.take().expect("stdout"));
    let mut first = String::new();
    reader.read_line(&mut first).expect("first line");
    assert_eq!(position_of(&first), "0:0");
    drop(reader);
    // The closed pipe is noticed at the next write.
    append_text(&log, GOOD);
    let status = tail.wait_for(Duration::from_secs(30));
    let stderr = stderr.join().expect("stderr");
    assert!(status.success(), "{status:?}: {stderr}");
    assert!(!stderr.contains("Error"), "{stderr}");
}
