//! `deltapilot run --log 'file://DIR?compact=true'`: the running server compacts
//! its embedded log below its oldest checkpoint, serves the same snapshot hash as
//! a replay of the full log, and restarts from its checkpoint (which lies at or
//! above the horizon) to that same hash. A replay below the horizon is refused.

mod replay_support;

use std::time::Duration;

use replay_support::compact::write_churn_log;
use replay_support::{Server, dp, get, json_lines, wait_for};

const EVENTS: u64 = 1_500;

fn served_hash(s: &Server) -> String {
    wait_for("the snapshot at the head", Duration::from_secs(30), || {
        let (code, body) = get(s.admin, "/debug/snapshot")?;
        let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        if code != 200 || v["position"].as_str() != Some(&EVENTS.to_string()) {
            return Err(format!("{code} {body}"));
        }
        Ok(v["hash"].as_str().expect("hash").to_owned())
    })
}

#[tokio::test]
async fn run_compacts_below_its_oldest_checkpoint_and_serves_the_same_state() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    write_churn_log(&d.join("data/log"), EVENTS).await;
    write_churn_log(&d.join("full"), EVENTS).await;
    let o = dp(d, &["replay", "--log", "file://full", "--output", "json"]);
    assert!(o.ok(), "{o:?}");
    let full_hash = json_lines(&o.stdout).pop().expect("end")["end"]["hash"]
        .as_str()
        .expect("hash")
        .to_owned();

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
    let text = std::fs::read_to_string(d.join("data/log/COMPACTED")).expect("COMPACTED");
    let horizon: u64 = text
        .trim()
        .strip_prefix("horizon ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("COMPACTED holds {text:?}"));
    assert!(horizon > 1_000 && horizon <= EVENTS, "horizon {horizon}");
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
