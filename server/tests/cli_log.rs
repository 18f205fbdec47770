//! `deltapilot log …` end to end: the real binary on real temp directories (embedded
//! log) and on a real Apache Kafka broker.
//!
//! Every child process is bounded in time and killed if a test fails early.
//!
//! The Kafka test needs `DELTAPILOT_KAFKA_BROKERS` (e.g. `127.0.0.1:19192` after
//! `scripts/kafka.sh start 19192`); without it the test fails, never skips.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::kafka_brokers;

use deltapilot_proto::{ConfigKind, Event, event::Payload, resync_marker::Phase};
use serde_json::Value;

/// Upper bound on any one CLI run; far above what a run takes, so only a hang hits it.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// Upper bound on waiting for one line from `log tail`.
const LINE_TIMEOUT: Duration = Duration::from_secs(30);

fn examples_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/events.jsonl")
}

fn examples_text() -> String {
    std::fs::read_to_string(examples_path()).expect("read examples/events.jsonl")
}

/// The event lines of a JSON-lines text (blank and `#` lines skipped).
fn event_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| {
            let t = l.trim_start();
            !t.is_empty() && !t.starts_with('#')
        })
        .collect()
}

/// Parses JSON lines the way a reader of `log read` would: `position` aside, each
/// line is an `Event` in canonical proto3 JSON.
fn parse_events(text: &str) -> Vec<(Option<String>, Event)> {
    event_lines(text)
        .into_iter()
        .map(|line| {
            let mut v: Value = serde_json::from_str(line).expect(line);
            let obj = v.as_object_mut().expect("object");
            let pos = obj
                .remove("position")
                .map(|p| p.as_str().expect("position is a string").to_owned());
            let event: Event = serde_json::from_value(v).expect(line);
            (pos, event)
        })
        .collect()
}

fn events_only(text: &str) -> Vec<Event> {
    parse_events(text).into_iter().map(|(_, e)| e).collect()
}

fn file_uri(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

/// The binary with a clean environment for what it reads.
fn deltapilot() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_deltapilot"));
    cmd.env_remove("DELTAPILOT_LOG")
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LOG", "warn");
    cmd
}

/// Kills the child when dropped, so a failing test leaves no process behind.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl ChildGuard {
    fn spawn(cmd: &mut Command) -> Self {
        Self(cmd.spawn().expect("spawn deltapilot"))
    }

    /// Waits for exit, at most `limit`.
    fn wait_for(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "deltapilot did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// What one finished run printed.
#[derive(Debug)]
struct Output {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Reads a pipe to its end on a thread.
fn collect<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        r.read_to_string(&mut s).expect("read child output");
        s
    })
}

/// Runs `deltapilot ARGS` to completion, feeding `stdin`, bounded by [`RUN_TIMEOUT`].
fn run(args: &[&str], stdin: Option<Stdio>) -> Output {
    let mut cmd = deltapilot();
    cmd.args(args)
        .stdin(stdin.unwrap_or_else(Stdio::null))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = ChildGuard::spawn(&mut cmd);
    let out = collect(child.0.stdout.take().expect("stdout"));
    let err = collect(child.0.stderr.take().expect("stderr"));
    let status = child.wait_for(RUN_TIMEOUT);
    Output {
        status,
        stdout: out.join().expect("stdout thread"),
        stderr: err.join().expect("stderr thread"),
    }
}

fn run_ok(args: &[&str]) -> Output {
    let out = run(args, None);
    assert!(out.status.success(), "deltapilot {args:?} failed: {out:?}");
    out
}

fn append_file(log: &str, file: &Path) -> Output {
    run_ok(&[
        "log",
        "append",
        "--log",
        log,
        "--file",
        file.to_str().expect("utf8 path"),
    ])
}

fn append_text(log: &str, text: &str) -> Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("in.jsonl");
    std::fs::write(&path, text).expect("write input");
    append_file(log, &path)
}

fn head(log: &str) -> String {
    run_ok(&["log", "head", "--log", log])
        .stdout
        .trim()
        .to_owned()
}

fn read_all(log: &str) -> String {
    run_ok(&["log", "read", "--log", log]).stdout
}

/// A log directory filled with the example events.
fn example_log() -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = file_uri(&dir.path().join("log"));
    append_file(&uri, &examples_path());
    (dir, uri, examples_text())
}

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
const GOOD: &str = r#"{"schemaVersion":1,"source":"t","serviceDelete":{"key":"svc/default/gone.default.svc.cluster.local"}}"#;

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
