//! Small event builders for the unit tests of `state` and `fold` (test-only).

use deltapilot_proto::event::Payload;
use deltapilot_proto::resync_marker::Phase;
use deltapilot_proto::{self as pb, Event, SCHEMA_VERSION};

use deltapilot_types::RecordPos;

fn event(source: &str, generation: u64, payload: Payload) -> Event {
    Event {
        schema_version: SCHEMA_VERSION,
        source: source.into(),
        generation,
        observed_at_unix_micros: 0,
        payload: Some(payload),
    }
}

/// A service upsert with HTTP ports.
pub fn svc(source: &str, generation: u64, ns: &str, host: &str, ports: &[u32]) -> Event {
    let ports = ports
        .iter()
        .map(|n| pb::Port {
            name: format!("http-{n}"),
            number: *n,
            protocol: pb::Protocol::Http as i32,
        })
        .collect();
    event(
        source,
        generation,
        Payload::ServiceUpsert(pb::ServiceUpsert {
            service: Some(pb::Service {
                hostname: host.into(),
                namespace: ns.into(),
                ports,
                labels: Default::default(),
                resolution: 0,
            }),
        }),
    )
}

/// A service delete.
pub fn svc_del(source: &str, generation: u64, ns: &str, host: &str) -> Event {
    event(
        source,
        generation,
        Payload::ServiceDelete(pb::EntityDelete {
            key: pb::service_key(ns, host),
        }),
    )
}

/// An endpoint upsert for the given hostnames (namespace `ns`).
pub fn ep(source: &str, generation: u64, key: &str, addr: &str, hosts: &[&str]) -> Event {
    ep_labeled(source, generation, key, addr, hosts, &[])
}

/// An endpoint upsert with workload labels.
pub fn ep_labeled(
    source: &str,
    generation: u64,
    key: &str,
    addr: &str,
    hosts: &[&str],
    labels: &[(&str, &str)],
) -> Event {
    event(
        source,
        generation,
        Payload::EndpointUpsert(pb::EndpointUpsert {
            key: key.into(),
            endpoint: Some(pb::Endpoint {
                address: addr.into(),
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
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

/// An endpoint delete.
pub fn ep_del(source: &str, generation: u64, key: &str) -> Event {
    event(
        source,
        generation,
        Payload::EndpointDelete(pb::EntityDelete { key: key.into() }),
    )
}

/// A VirtualService upsert.
pub fn cfg(source: &str, generation: u64, name: &str, spec: &str) -> Event {
    event(
        source,
        generation,
        Payload::ConfigUpsert(pb::ConfigUpsert {
            config: Some(pb::ConfigObject {
                kind: pb::ConfigKind::VirtualService as i32,
                namespace: "ns".into(),
                name: name.into(),
                spec_json: spec.into(),
                ..Default::default()
            }),
        }),
    )
}

/// A config delete.
pub fn cfg_del(source: &str, generation: u64, name: &str) -> Event {
    event(
        source,
        generation,
        Payload::ConfigDelete(pb::EntityDelete {
            key: pb::config_key(pb::ConfigKind::VirtualService, "ns", name),
        }),
    )
}

/// An upsert of a config object of any kind (`kind` as in `pb::ConfigKind`).
pub fn rule(
    source: &str,
    generation: u64,
    kind: pb::ConfigKind,
    ns: &str,
    name: &str,
    spec: &str,
) -> Event {
    event(
        source,
        generation,
        Payload::ConfigUpsert(pb::ConfigUpsert {
            config: Some(pb::ConfigObject {
                kind: kind as i32,
                namespace: ns.into(),
                name: name.into(),
                spec_json: spec.into(),
                ..Default::default()
            }),
        }),
    )
}

/// A delete of a config object of any kind.
pub fn rule_del(
    source: &str,
    generation: u64,
    kind: pb::ConfigKind,
    ns: &str,
    name: &str,
) -> Event {
    event(
        source,
        generation,
        Payload::ConfigDelete(pb::EntityDelete {
            key: pb::config_key(kind, ns, name),
        }),
    )
}

/// A resync marker.
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
            ..Default::default()
        }),
    )
}

/// Positions events at offsets `start..` of partition 0.
pub fn at(start: u64, events: Vec<Event>) -> Vec<(RecordPos, Event)> {
    events
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let pos = RecordPos {
                partition: 0,
                offset: start + i as u64,
            };
            (pos, e)
        })
        .collect()
}
