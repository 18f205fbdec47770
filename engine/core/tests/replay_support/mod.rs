//! Event builders and a generated history for the replay and checkpoint tests.

#![allow(dead_code, unreachable_pub)]

#[allow(unused_imports)] // each test binary uses its own subset
pub use deltapilot_testkit::events::{ep, ep_del};

use deltapilot_log::EventLog;
use deltapilot_log::file::{FileLog, FileLogOptions, FsyncPolicy};
use deltapilot_proto::{self as pb, Event, SCHEMA_VERSION, event::Payload, resync_marker::Phase};
use deltapilot_xds::ResourceSet;

pub fn event(source: &str, generation: u64, payload: Payload) -> Event {
    Event {
        schema_version: SCHEMA_VERSION,
        source: source.into(),
        generation,
        observed_at_unix_micros: 1_700_000_000_000_000,
        payload: Some(payload),
    }
}

pub fn svc(source: &str, generation: u64, host: &str, ports: &[(u32, pb::Protocol)]) -> Event {
    event(
        source,
        generation,
        Payload::ServiceUpsert(pb::ServiceUpsert {
            service: Some(pb::Service {
                hostname: host.into(),
                namespace: "ns".into(),
                ports: ports
                    .iter()
                    .map(|(n, p)| pb::Port {
                        name: format!("p{n}"),
                        number: *n,
                        protocol: *p as i32,
                    })
                    .collect(),
                labels: [("app".to_string(), host.to_string())].into(),
                resolution: pb::Resolution::StaticEndpoints as i32,
            }),
        }),
    )
}

pub fn svc_del(source: &str, host: &str) -> Event {
    event(
        source,
        0,
        Payload::ServiceDelete(pb::EntityDelete {
            key: pb::service_key("ns", host),
        }),
    )
}

pub fn cfg(source: &str, name: &str) -> Event {
    event(
        source,
        0,
        Payload::ConfigUpsert(pb::ConfigUpsert {
            config: Some(pb::ConfigObject {
                kind: pb::ConfigKind::VirtualService as i32,
                namespace: "ns".into(),
                name: name.into(),
                spec_json: r#"{"hosts":["a"]}"#.into(),
                ..Default::default()
            }),
        }),
    )
}

pub fn resync(source: &str, generation: u64, phase: Phase) -> Event {
    event(
        source,
        generation,
        Payload::Resync(pb::ResyncMarker {
            phase: phase as i32,
            ..Default::default()
        }),
    )
}

/// A history with every kind of event: services over shared ports, endpoints
/// moving and weighted, an endpoint outliving its service, deletes, configs, a
/// skipped event, and a resync that sweeps.
pub fn history() -> Vec<Event> {
    use pb::Protocol::{Grpc, Http, Tcp};
    let mut h = vec![
        resync("k8s", 1, Phase::Started),
        svc("k8s", 1, "a.ns.svc", &[(80, Http), (9090, Grpc)]),
        svc("k8s", 1, "b.ns.svc", &[(80, Http), (5432, Tcp)]),
        svc("file", 0, "c.ns.svc", &[(443, Tcp)]),
        resync("k8s", 1, Phase::Completed),
    ];
    for i in 0..20u32 {
        let host = ["a.ns.svc", "b.ns.svc", "c.ns.svc"][i as usize % 3];
        let source = if host == "c.ns.svc" { "file" } else { "k8s" };
        let generation = if source == "k8s" { 1 } else { 0 };
        h.push(ep(
            source,
            generation,
            &format!("ep/{i}"),
            &format!("10.0.0.{i}"),
            &[host],
            1 + i % 3,
        ));
    }
    h.push(ep("k8s", 1, "ep/orphan", "10.0.1.1", &["nope.ns.svc"], 1));
    h.push(cfg("file", "vs-1"));
    h.push(svc(
        "k8s",
        1,
        "a.ns.svc",
        &[(80, Http), (9090, Grpc), (8080, Http)],
    ));
    h.push(ep(
        "k8s",
        1,
        "ep/0",
        "10.0.0.100",
        &["a.ns.svc", "b.ns.svc"],
        5,
    ));
    h.push(ep_del("k8s", 1, "ep/3"));
    h.push(svc_del("file", "c.ns.svc"));
    h.push(ep("file", 0, "ep/2", "10.0.0.2", &["c.ns.svc"], 7));
    h.push(resync("k8s", 2, Phase::Started));
    h.push(svc(
        "k8s",
        2,
        "a.ns.svc",
        &[(80, Http), (9090, Grpc), (8080, Http)],
    ));
    for i in [0u32, 6, 9, 12] {
        let w = if i == 0 { 5 } else { 1 + i % 3 };
        let addr = if i == 0 {
            "10.0.0.100".to_string()
        } else {
            format!("10.0.0.{i}")
        };
        let hosts: &[&str] = if i == 0 {
            &["a.ns.svc", "b.ns.svc"]
        } else {
            &["a.ns.svc"]
        };
        h.push(ep("k8s", 2, &format!("ep/{i}"), &addr, hosts, w));
    }
    h.push(resync("k8s", 2, Phase::Completed));
    h.push(svc("file", 0, "c.ns.svc", &[(443, Tcp), (80, Http)]));
    h.push(cfg("file", "vs-2"));
    h
}

/// A fresh embedded log in `dir` holding `events`.
pub async fn log_with(dir: &std::path::Path, events: &[Event]) -> FileLog {
    let log = FileLog::open(
        dir,
        FileLogOptions {
            fsync: FsyncPolicy::Never,
            ..Default::default()
        },
    )
    .expect("open log");
    for chunk in events.chunks(7) {
        log.append(chunk).await.expect("append");
    }
    log
}

/// Every resource of a set, as (map, name, bytes), for byte-for-byte comparison.
pub fn all_bytes(set: &ResourceSet) -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    for (tag, map) in [
        ("cds", &set.clusters),
        ("cds-grpc", &set.grpc_clusters),
        ("eds", &set.endpoints),
        ("lds", &set.sidecar_listeners),
        ("lds-grpc", &set.grpc_listeners),
        ("rds", &set.routes),
    ] {
        for (name, r) in map.iter() {
            out.push((tag, name.to_string(), r.bytes.to_vec()));
        }
    }
    out
}
