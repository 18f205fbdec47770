//! A churn log for the compaction tests: five services and thirty endpoints
//! of one source, with deletes and a resync every 300 steps, written to an
//! embedded log of small segments so that compaction has sealed ones to work on.

use std::path::Path;

use deltapilot_log::EventLog;
use deltapilot_log::file::{FileLog, FileLogOptions, FsyncPolicy};
use deltapilot_proto::event::Payload;
use deltapilot_proto::{self as pb, Event};
use deltapilot_testkit::events::{ep, ep_del, event, resync};

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

/// Churn over five services and thirty endpoints, with a resync every 300 steps
/// that sweeps the endpoints not rewritten since it started.
pub fn step(i: u64) -> Event {
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

pub async fn write_churn_log(dir: &Path, n: u64) {
    let opts = FileLogOptions {
        fsync: FsyncPolicy::Never,
        segment_bytes: 4096,
        ..FileLogOptions::default()
    };
    let log = FileLog::open(dir, opts).expect("open");
    for i in (0..n).step_by(3) {
        let batch: Vec<Event> = (i..(i + 3).min(n)).map(step).collect();
        log.append(&batch).await.expect("append");
    }
}

/// Writes the churn log of `n` events twice, to `d/data/log` (for a server) and
/// `d/full` (kept whole), and returns the snapshot hash a replay of the whole
/// one ends at.
pub async fn churn_logs_and_full_hash(d: &Path, n: u64) -> String {
    write_churn_log(&d.join("data/log"), n).await;
    write_churn_log(&d.join("full"), n).await;
    let o = super::dp(d, &["replay", "--log", "file://full", "--output", "json"]);
    assert!(o.ok(), "{o:?}");
    super::json_lines(&o.stdout).pop().expect("end")["end"]["hash"]
        .as_str()
        .expect("hash")
        .to_owned()
}

/// The hash `s` serves once its snapshot is at position `n` (polled).
pub fn served_hash(s: &super::Server, n: u64) -> String {
    super::wait_for(
        "the snapshot at the head",
        std::time::Duration::from_secs(30),
        || {
            let (code, body) = super::get(s.admin, "/debug/snapshot")?;
            let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
            if code != 200 || v["position"].as_str() != Some(&n.to_string()) {
                return Err(format!("{code} {body}"));
            }
            Ok(v["hash"].as_str().expect("hash").to_owned())
        },
    )
}
