//! `deltapilot run --log 'file://DIR?compact=true'`: the running server compacts
//! its embedded log below its oldest checkpoint, serves the same snapshot hash as
//! a replay of the full log, and restarts from its checkpoint (which lies at or
//! above the horizon) to that same hash. A replay below the horizon is refused.

mod replay_support;

use std::path::Path;
use std::time::Duration;

use deltapilot_log::EventLog;
use deltapilot_log::file::{FileLog, FileLogOptions, FsyncPolicy};
use deltapilot_proto::event::Payload;
use deltapilot_proto::{self as pb, Event};
use deltapilot_testkit::events::{ep, ep_del, event, resync};
use replay_support::{Server, dp, get, json_lines, wait_for};

const EVENTS: u64 = 1_500;

fn svc(generation: u64, host: &str, port: u32) -> Event {
    event(
        "a",
        generation,
        Payload::ServiceUpsert(pb::ServiceUpsert {
            service: Some(pb::Service {
                hostname: host.into(),
                namespace: "ns".into(),
                ports: vec![pb::Port {
                    name: "http".into(),
                    number: port,
                    protocol: pb::Protocol::Http as i32,
                }],
                ..Default::default()
            }),
        }),
    )
}

fn step(i: u64) -> Event {
    let g = 1 + i / 300;
    let host = format!("h{}.ns.svc", i % 5);
    let key = format!("ep/a/k{}", (i * 7) % 30);
    match i % 300 {
        0 => resync("a", g, false),
        150 => resync("a", g, true),
        _ if i % 10 == 3 => ep_del("a", g, &key),
        _ if i % 10 == 5 => svc(g, &host, 80 + (i % 3) as u32),
        _ => ep(
            "a",
            g,
            &key,
            &format!("10.0.{}.{}", (i / 250) % 250, i % 250),
            &[&host],
            1 + (i % 4) as u32,
        ),
    }
}

async fn write_log(dir: &Path) {
    let opts = FileLogOptions {
        fsync: FsyncPolicy::Never,
        segment_bytes: 4096,
        ..FileLogOptions::default()
    };
    let log = FileLog::open(dir, opts).expect("open");
    for i in (0..EVENTS).step_by(3) {
        let batch: Vec<Event> = (i..(i + 3).min(EVENTS)).map(step).collect();
        log.append(&batch).await.expect("append");
    }
}

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
    write_log(&d.join("data/log")).await;
    write_log(&d.join("full")).await;
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
