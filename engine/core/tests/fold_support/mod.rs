//! Event builders shared by the fold integration tests (`fold_*.rs`).

#![allow(dead_code, unreachable_pub)]

#[allow(unused_imports)] // each test binary uses its own subset
pub use deltapilot_testkit::events::{ep, ep_del, event, resync};

use deltapilot_proto::event::Payload;
use deltapilot_proto::{self as pb, Event};

/// A service upsert with one HTTP port.
pub fn svc(source: &str, generation: u64, ns: &str, host: &str, port: u32) -> Event {
    event(
        source,
        generation,
        Payload::ServiceUpsert(pb::ServiceUpsert {
            service: Some(pb::Service {
                hostname: host.into(),
                namespace: ns.into(),
                ports: vec![pb::Port {
                    name: "http".into(),
                    number: port,
                    protocol: pb::Protocol::Http as i32,
                }],
                labels: Default::default(),
                resolution: 0,
            }),
        }),
    )
}

pub fn svc_del(source: &str, generation: u64, ns: &str, host: &str) -> Event {
    event(
        source,
        generation,
        Payload::ServiceDelete(pb::EntityDelete {
            key: pb::service_key(ns, host),
        }),
    )
}

pub fn cfg(source: &str, generation: u64, name: &str, spec: &str) -> Event {
    event(
        source,
        generation,
        Payload::ConfigUpsert(pb::ConfigUpsert {
            config: Some(pb::ConfigObject {
                kind: pb::ConfigKind::DestinationRule as i32,
                namespace: "ns".into(),
                name: name.into(),
                spec_json: spec.into(),
                ..Default::default()
            }),
        }),
    )
}

pub fn cfg_key(name: &str) -> String {
    pb::config_key(pb::ConfigKind::DestinationRule, "ns", name)
}

pub fn cfg_del(source: &str, generation: u64, name: &str) -> Event {
    event(
        source,
        generation,
        Payload::ConfigDelete(pb::EntityDelete { key: cfg_key(name) }),
    )
}
