//! `deltapilot log compact` and replay against a compacted embedded log, with the
//! real binary: offsets and the state stay (a replay from the horizon ends at the
//! same snapshot hash as on the full log), and a replay of a position below the
//! horizon says it is older than the log's retention and names the oldest one
//! still available.

mod replay_support;

use std::path::Path;

use replay_support::compact::write_churn_log as write_log;
use replay_support::{dp, json_lines};

fn end_hash(cwd: &Path, log: &str, from: &str) -> String {
    let o = dp(
        cwd,
        &[
            "replay",
            "--log",
            log,
            "--from",
            from,
            "--no-checkpoints",
            "--output",
            "json",
        ],
    );
    assert!(o.ok(), "{o:?}");
    json_lines(&o.stdout).pop().expect("end line")["end"]["hash"]
        .as_str()
        .expect("hash")
        .to_owned()
}

#[tokio::test]
async fn a_compacted_log_replays_to_the_same_hash_and_refuses_older_positions() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    write_log(&d.join("full"), 1_500).await;
    write_log(&d.join("compact"), 1_500).await;

    let o = dp(
        d,
        &[
            "log",
            "compact",
            "compact",
            "--below",
            "1200",
            "--retention",
            "0s",
        ],
    );
    assert!(o.ok(), "{o:?}");
    let horizon: u64 = o
        .stdout
        .split("horizon ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no horizon in {:?}", o.stdout));
    assert!(horizon > 1_000 && horizon <= 1_200, "{}", o.stdout);
    let records_after: u64 = o
        .stdout
        .split(" -> ")
        .nth(1)
        .and_then(|t| {
            t.trim_end_matches(|c: char| !c.is_ascii_digit())
                .split(';')
                .next()
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no record count in {:?}", o.stdout));
    assert!(
        records_after * 4 < horizon,
        "most records went: {}",
        o.stdout
    );

    // The same state, hence the same resources and snapshot hash, at and after
    // the horizon.
    let h = horizon.to_string();
    assert_eq!(
        end_hash(d, "file://compact", &h),
        end_hash(d, "file://full", &h)
    );

    // Below the horizon: refused, naming the oldest position still available.
    let o = dp(
        d,
        &[
            "replay",
            "--log",
            "file://compact",
            "--from",
            "10",
            "--no-checkpoints",
        ],
    );
    assert!(!o.ok(), "{o:?}");
    assert!(
        o.stderr.contains("older than the log's retention")
            && o.stderr
                .contains(&format!("oldest position still available is {horizon}")),
        "{}",
        o.stderr
    );
    let o = dp(
        d,
        &[
            "replay",
            "--log",
            "file://compact",
            "--dump",
            "--proxy",
            "sidecar~10.0.0.1~p.ns~ns.svc.cluster.local",
            "--at",
            "500",
            "--no-checkpoints",
        ],
    );
    assert!(!o.ok(), "{o:?}");
    assert!(
        o.stderr.contains("older than the log's retention"),
        "{}",
        o.stderr
    );

    // The full log is not affected by any of it, and a compact of a Kafka URI
    // says where Kafka compaction happens.
    let o = dp(d, &["log", "--log", "kafka://127.0.0.1:1/t", "compact"]);
    assert!(
        !o.ok() && o.stderr.contains("compacted by the broker"),
        "{o:?}"
    );
}
