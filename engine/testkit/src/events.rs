//! Event builders every engine integration-test family uses the same way (the
//! fold, replay and xDS supports re-export them next to their own builders).
//!
//! What it does NOT do: services or config objects, whose shape each family
//! chooses for what it tests.

use deltapilot_proto::event::Payload;
use deltapilot_proto::resync_marker::Phase;
use deltapilot_proto::{self as pb, Event, SCHEMA_VERSION};

/// An event of `source` at `generation` (observed at time 0).
pub fn event(source: &str, generation: u64, payload: Payload) -> Event {
    Event {
        schema_version: SCHEMA_VERSION,
        source: source.into(),
        generation,
        observed_at_unix_micros: 0,
        payload: Some(payload),
    }
}

/// An endpoint upsert belonging to `hosts` (namespace `ns`), locality `r1/z1`.
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

/// An endpoint delete.
pub fn ep_del(source: &str, generation: u64, key: &str) -> Event {
    event(
        source,
        generation,
        Payload::EndpointDelete(pb::EntityDelete { key: key.into() }),
    )
}

/// A resync marker: `STARTED`, or `COMPLETED` when `completed`.
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
