//! Event builders shared by the fold integration tests (`fold_*.rs`).

#![allow(dead_code, unreachable_pub)]

use deltapilot_proto::event::Payload;
use deltapilot_proto::resync_marker::Phase;
use deltapilot_proto::{self as pb, Event, SCHEMA_VERSION};

pub fn event(source: &str, generation: u64, payload: Payload) -> Event {
    Event {
        schema_version: SCHEMA_VERSION,
        source: source.into(),
        generation,
        observed_at_unix_micros: 0,
        payload: Some(payload),
    }
}

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

/// An endpoint upsert belonging to `hosts` (namespace `ns`).
pub fn ep(
    source: &str,
    generation: u64,
    key: &str,
    addr: &str,
    hosts: &[&str],
    weight: u32,
) -> Event {
    event(
        source,
        generation,
        Payload::EndpointUpsert(pb::EndpointUpsert {
            key: key.into(),
            endpoint: Some(pb::Endpoint {
                address: addr.into(),
                weight,
                locality: Some(pb::Locality {
                    region: "r1".into(),
                    zone: "z1".into(),
                    subzone: String::new(),
                }),
                services: hosts
                    .iter()
                    .map(|h| pb::ServiceRef {
                        namespace: "ns".into(),
                        hostname: h.to_string(),
                    })
                    .collect(),
                ..Default::default()
            }),
        }),
    )
}

pub fn ep_del(source: &str, generation: u64, key: &str) -> Event {
    event(
        source,
        generation,
        Payload::EndpointDelete(pb::EntityDelete { key: key.into() }),
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

pub fn resync(source: &str, generation: u64, completed: bool) -> Event {
    let phase = if completed {
        Phase::Completed
    } else {
        Phase::Started
    };
    event(
        source,
        generation,
        Payload::Resync(pb::ResyncMarker {
            phase: phase as i32,
        }),
    )
}
