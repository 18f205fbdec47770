//! `deltapilot run --log 'file://DIR?delete=true'` (alone, and with
//! `compact=true`): the running server deletes the sealed segments below its
//! oldest checkpoint, keeps serving the full log's snapshot hash, and counts what
//! it deleted in `/metrics`. Reads, `log head` and replays below the new start
//! say so and name the oldest position left; a replay from the checkpoints
//! reaches the same hash. Killed with -9, it restarts from its checkpoint to the
//! same state; without a checkpoint it refuses to start rather than serve what
//! is left of the log.

mod replay_support;
mod support;

use std::path::Path;
use std::time::Duration;

use replay_support::compact::{self, churn_logs_and_full_hash};
use replay_support::{Server, dp, dp_in, free_port, get, json_lines, wait_for};
use support::metric;

const EVENTS: u64 = 1_500;

fn served_hash(s: &Server) -> String {
    compact::served_hash(s, EVENTS)
}

fn replay_hash(d: &Path, extra: &[&str]) -> String {
    let mut args = vec!["replay", "--log", "file://data/log", "--output", "json"];
    args.extend_from_slice(extra);
    let o = dp(d, &args);
    assert!(o.ok(), "{o:?}");
    json_lines(&o.stdout).pop().expect("end")["end"]["hash"]
        .as_str()
        .expect("hash")
        .to_owned()
}

fn start_file(d: &Path) -> u64 {
    let text = std::fs::read_to_string(d.join("data/log/START")).expect("START");
    text.trim()
        .strip_prefix("start ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("START holds {text:?}"))
}

async fn deletes_below_its_oldest_checkpoint(uri: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let full_hash = churn_logs_and_full_hash(d, EVENTS).await;

    let args = [
        "--log",
        uri,
        "--checkpoint-every-events",
        "100",
        "--checkpoint-every-secs",
        "1",
        "--checkpoint-keep",
        "2",
    ];
    let mut server = Server::start(d, &args);
    assert_eq!(served_hash(&server), full_hash, "the full log's state");
    wait_for("a deletion", Duration::from_secs(60), || {
        let out = server.output();
        if out.contains("segments deleted by retention") {
            Ok(())
        } else {
            Err(out)
        }
    });
    let start = start_file(d);
    assert!(start > 1_000 && start <= EVENTS, "start {start}");
    let segs: Vec<u64> = std::fs::read_dir(d.join("data/log"))
        .expect("ls")
        .filter_map(|e| {
            let name = e.expect("entry").file_name().into_string().ok()?;
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    assert!(
        !segs.is_empty() && segs.iter().all(|b| *b >= start),
        "start {start}: {segs:?}"
    );
    let (code, m) = get(server.admin, "/metrics").expect("/metrics");
    assert_eq!(code, 200, "{m}");
    let at = |name: &str, labels: &[&str]| metric(&m, name, labels);
    assert!(
        at("deltapilot_log_retention_deleted_segments_total", &[]) >= 1.0,
        "{m}"
    );
    assert!(
        at("deltapilot_log_retention_deleted_bytes_total", &[]) > 4096.0,
        "{m}"
    );
    assert_eq!(
        at("deltapilot_log_retention_failures_total", &[]),
        0.0,
        "{m}"
    );
    let oldest = at("deltapilot_log_oldest_offset", &[]);
    assert!(oldest >= start as f64, "{oldest} < {start}: {m}");

    // Next to the running writer: below the start is refused, naming it.
    let start = start_file(d);
    let o = dp(
        d,
        &["log", "read", "--log", "file://data/log", "--from", "0"],
    );
    let oldest_msg = format!("the oldest position still available is {start}");
    assert!(!o.ok() && o.stderr.contains(&oldest_msg), "{o:?}");
    let o = dp(d, &["log", "head", "--log", "file://data/log"]);
    assert!(o.ok(), "{o:?}");
    assert_eq!(
        o.stdout.trim(),
        EVENTS.to_string(),
        "stdout is the head alone"
    );
    assert!(o.stderr.contains(&oldest_msg), "{o:?}");
    let o = dp(
        d,
        &[
            "replay",
            "--log",
            "file://data/log",
            "--from",
            "5",
            "--no-checkpoints",
        ],
    );
    assert!(!o.ok() && o.stderr.contains(&oldest_msg), "{o:?}");
    let o = dp(
        d,
        &["replay", "--log", "file://data/log", "--no-checkpoints"],
    );
    assert!(
        !o.ok() && o.stderr.contains("no usable checkpoint"),
        "folding what is left is refused: {o:?}"
    );
    assert_eq!(
        replay_hash(d, &[]),
        full_hash,
        "a replay from the checkpoints"
    );
    assert_eq!(
        served_hash(&server),
        full_hash,
        "deletion changed nothing served"
    );

    // kill -9, then a restart from the checkpoint reaches the same state.
    server.child.kill().expect("kill -9");
    server.child.wait().expect("reap");
    let server = Server::start(d, &args);
    assert_eq!(
        served_hash(&server),
        full_hash,
        "after kill -9 and a restart"
    );
    assert!(server.output().contains("restoring from checkpoint"));
    drop(server);

    // Without its checkpoints the state below the start is gone: no start.
    std::fs::remove_dir_all(d.join("data/checkpoints")).expect("rm checkpoints");
    let (xds, admin) = (free_port(), free_port());
    let xds_addr = format!("127.0.0.1:{xds}");
    let admin_addr = format!("127.0.0.1:{admin}");
    let mut run = vec![
        "run",
        "--data-dir",
        "data",
        "--xds-addr",
        &xds_addr,
        "--admin-addr",
        &admin_addr,
    ];
    run.extend_from_slice(&args);
    let o = dp_in(d, &run, Duration::from_secs(60));
    assert!(
        !o.ok() && o.stderr.contains("retention deleted the records below it"),
        "{o:?}"
    );
}

#[tokio::test]
async fn run_deletes_segments_below_its_oldest_checkpoint() {
    deletes_below_its_oldest_checkpoint(
        "file://data/log?delete=true&segment_bytes=4096&retention=0s",
    )
    .await;
}

#[tokio::test]
async fn run_deletes_and_compacts_together() {
    deletes_below_its_oldest_checkpoint(
        "file://data/log?delete=true&compact=true&segment_bytes=4096&retention=0s",
    )
    .await;
}
