//! Shared helpers of the `deltapilot log` CLI suites (`cli_log.rs`,
//! `cli_log_errors.rs`): the real binary, bounded in time, and the example
//! events.

#![allow(dead_code, unreachable_pub)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use deltapilot_proto::Event;
use serde_json::Value;

/// Upper bound on any one CLI run; far above what a run takes, so only a hang hits it.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// Upper bound on waiting for one line from `log tail`.
pub const LINE_TIMEOUT: Duration = Duration::from_secs(30);

pub fn examples_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/events.jsonl")
}

pub fn examples_text() -> String {
    std::fs::read_to_string(examples_path()).expect("read examples/events.jsonl")
}

/// The event lines of a JSON-lines text (blank and `#` lines skipped).
pub fn event_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| {
            let t = l.trim_start();
            !t.is_empty() && !t.starts_with('#')
        })
        .collect()
}

/// Parses JSON lines the way a reader of `log read` would: `position` aside, each
/// line is an `Event` in canonical proto3 JSON.
pub fn parse_events(text: &str) -> Vec<(Option<String>, Event)> {
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

pub fn events_only(text: &str) -> Vec<Event> {
    parse_events(text).into_iter().map(|(_, e)| e).collect()
}

pub fn file_uri(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

/// The binary with a clean environment for what it reads.
pub fn deltapilot() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_deltapilot"));
    cmd.env_remove("DELTAPILOT_LOG")
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LOG", "warn");
    cmd
}

/// Kills the child when dropped, so a failing test leaves no process behind.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl ChildGuard {
    pub fn spawn(cmd: &mut Command) -> Self {
        Self(cmd.spawn().expect("spawn deltapilot"))
    }

    /// Waits for exit, at most `limit`.
    pub fn wait_for(&mut self, limit: Duration) -> ExitStatus {
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
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Reads a pipe to its end on a thread.
pub fn collect<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        r.read_to_string(&mut s).expect("read child output");
        s
    })
}

/// Runs `deltapilot ARGS` to completion, feeding `stdin`, bounded by [`RUN_TIMEOUT`].
pub fn run(args: &[&str], stdin: Option<Stdio>) -> Output {
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

pub fn run_ok(args: &[&str]) -> Output {
    let out = run(args, None);
    assert!(out.status.success(), "deltapilot {args:?} failed: {out:?}");
    out
}

pub fn append_file(log: &str, file: &Path) -> Output {
    run_ok(&[
        "log",
        "append",
        "--log",
        log,
        "--file",
        file.to_str().expect("utf8 path"),
    ])
}

pub fn append_text(log: &str, text: &str) -> Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("in.jsonl");
    std::fs::write(&path, text).expect("write input");
    append_file(log, &path)
}

pub fn head(log: &str) -> String {
    run_ok(&["log", "head", "--log", log])
        .stdout
        .trim()
        .to_owned()
}

pub fn read_all(log: &str) -> String {
    run_ok(&["log", "read", "--log", log]).stdout
}

/// A log directory filled with the example events.
pub fn example_log() -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = file_uri(&dir.path().join("log"));
    append_file(&uri, &examples_path());
    (dir, uri, examples_text())
}

/// One valid event line.
pub const GOOD: &str = r#"{"schemaVersion":1,"source":"t","serviceDelete":{"key":"svc/default/gone.default.svc.cluster.local"}}"#;
