//! `deltapilot run --log 'file://DIR?compact=true'`: the running server compacts
//! its embedded log below its oldest checkpoint, serves the same snapshot hash as
//! a replay of the full log, and restarts from its checkpoint (which lies at or
//! above the horizon) to that same hash. A replay below the horizon is refused.
//! `/metrics` shows the compactions, what they reclaimed, the horizon and the
//! log's segments and bytes on disk.

mod replay_support;
mod support;

use std::time::Duration;

use replay_support::compact::{self, churn_logs_and_full_hash};
use replay_support::{Server, dp, get, wait_for};
use support::metric;

const EVENTS: u64 = 1_500;

fn served_hash(s: &Server) -> String {
    compact::served_hash(s, EVENTS)
}

#[tokio::test]
async fn run_compacts_below_its_oldest_checkpoint_and_serves_the_same_state() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let full_hash = churn_logs_and_full_hash(d, EVENTS).await;

    let args = [
        "--log",
        "file://data/log?compact=true&segment_bytes=4096&retention=0s",
        "--checkpoint-every-events",
        "100",
        "--checkpoint-every-secs",
        "1",
        "--checkpoint-keep",
        "2",
    ];
    let mut server = Server::start(d, &args);
    assert_eq!(served_hash(&server), full_hash, "the full log's state");
    wait_for("a compaction", Duration::from_secs(60), || {
        let out = server.output();
        if out.contains("embedded log compacted") {
            Ok(())
        } else {
            Err(out)
        }
    });
    let (code, m) = get(server.admin, "/metrics").expect("/metrics");
    assert_eq!(code, 200, "{m}");
    let text = std::fs::read_to_string(d.join("data/log/COMPACTED")).expect("COMPACTED");
    let horizon: u64 = text
        .trim()
        .strip_prefix("horizon ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("COMPACTED holds {text:?}"));
    assert!(horizon > 1_000 && horizon <= EVENTS, "horizon {horizon}");
    // The compaction is counted with what it reclaimed; the horizon gauge was
    // read before the file, so a later compaction can only have moved the file on.
    let at = |name: &str, labels: &[&str]| metric(&m, name, labels);
    assert!(
        at("deltapilot_log_compactions_total", &["result=\"ok\""]) >= 1.0,
        "{m}"
    );
    assert_eq!(
        at("deltapilot_log_compaction_failures_total", &[]),
        0.0,
        "{m}"
    );
    assert!(
        at("deltapilot_log_compaction_reclaimed_records_total", &[]) > 0.0,
        "{m}"
    );
    assert!(
        at("deltapilot_log_compaction_reclaimed_bytes_total", &[]) > 0.0,
        "{m}"
    );
    assert!(
        at("deltapilot_log_last_compaction_timestamp_seconds", &[]) > 0.0,
        "{m}"
    );
    let gauge_horizon = at("deltapilot_log_compaction_horizon", &[]);
    assert!(
        gauge_horizon > 1_000.0 && gauge_horizon <= horizon as f64,
        "{m}"
    );
    assert_eq!(at("deltapilot_log_oldest_offset", &[]), 0.0, "{m}");
    // Segments and bytes are the directory's (polled: a compaction in flight
    // between the scrape and the listing changes both).
    wait_for(
        "the disk gauges equal the directory",
        Duration::from_secs(30),
        || {
            let (_, m) = get(server.admin, "/metrics")?;
            let (mut files, mut bytes) = (0.0, 0.0);
            for e in std::fs::read_dir(d.join("data/log")).map_err(|e| e.to_string())? {
                let e = e.map_err(|e| e.to_string())?;
                if e.file_name().to_string_lossy().ends_with(".log") {
                    files += 1.0;
                    bytes += e.metadata().map_err(|e| e.to_string())?.len() as f64;
                }
            }
            let got = (
                metric(&m, "deltapilot_log_segments", &[]),
                metric(&m, "deltapilot_log_disk_bytes", &[]),
            );
            if files > 1.0 && got == (files, bytes) {
                Ok(())
            } else {
                Err(format!(
                    "{files} segments of {bytes} bytes; metrics say {got:?}"
                ))
            }
        },
    );
    assert_eq!(
        served_hash(&server),
        full_hash,
        "compaction changed nothing served"
    );
    server.stop();

    // A restart restores its checkpoint (at or above the horizon) and reaches the
    // same state; nothing was skipped for being below the horizon.
    let server = Server::start(d, &args);
    assert_eq!(served_hash(&server), full_hash, "after a restart");
    let out = server.output();
    assert!(out.contains("restoring from checkpoint"), "{out}");
    assert!(!out.contains("compaction horizon"), "{out}");
    drop(server);

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
    assert!(
        !o.ok()
            && o.stderr
                .contains(&format!("oldest position still available is {horizon}")),
        "{o:?}"
    );
}
