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
