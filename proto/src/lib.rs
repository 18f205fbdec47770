//! deltapilot's event schema: the contract between adapters that append to the event
//! log and every engine replica that folds it.
//!
//! The types are generated at build time from `proto/deltapilot/events/v1/*.proto`
//! (prost for the binary encoding, pbjson for canonical proto3 JSON). The evolution
//! rules live in the `.proto` comments. This crate adds only what every user of the
//! schema needs: the schema version, each event's entity key, and key constructors.
//! It does NOT validate semantics (ports in range, known services): that is the
//! engine's job, because validity depends on state.

#[allow(missing_docs, unreachable_pub, clippy::all)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/deltapilot.events.v1.rs"));
    include!(concat!(env!("OUT_DIR"), "/deltapilot.events.v1.serde.rs"));
}

pub use generated::*;

/// The newest minor version of `deltapilot.events.v1` this build understands.
/// Writers stamp it into every event; readers refuse anything newer (rule 4 in
/// `events.proto`).
pub const SCHEMA_VERSION: u32 = 1;

/// Key of a service entity: `svc/<namespace>/<hostname>`.
pub fn service_key(namespace: &str, hostname: &str) -> String {
    format!("svc/{namespace}/{hostname}")
}

/// Key of a config entity: `cfg/<kind>/<namespace>/<name>`, kind in lowercase
/// snake form (e.g. `virtual_service`).
pub fn config_key(kind: ConfigKind, namespace: &str, name: &str) -> String {
    format!("cfg/{}/{namespace}/{name}", kind_slug(kind))
}

/// Lower-case slug of a config kind, as used in keys.
pub fn kind_slug(kind: ConfigKind) -> &'static str {
    match kind {
        ConfigKind::Unspecified => "unspecified",
        ConfigKind::VirtualService => "virtual_service",
        ConfigKind::DestinationRule => "destination_rule",
        ConfigKind::Gateway => "gateway",
        ConfigKind::ServiceEntry => "service_entry",
        ConfigKind::Sidecar => "sidecar",
        ConfigKind::WorkloadEntry => "workload_entry",
    }
}

/// Key under which resync markers of a source are stored in a keyed log: markers are
/// per source, so per-source order holds wherever the key decides placement.
pub fn resync_key(source: &str) -> String {
    format!("resync/{source}")
}

impl Event {
    /// The stable entity key this event writes, which is also the Kafka message key.
    /// `None` when the event carries no payload (an unknown newer variant, or
    /// garbage): callers must report such events rather than guess.
    pub fn key(&self) -> Option<String> {
        use event::Payload;
        Some(match self.payload.as_ref()? {
            Payload::ServiceUpsert(u) => {
                let s = u.service.as_ref()?;
                service_key(&s.namespace, &s.hostname)
            }
            Payload::EndpointUpsert(u) => u.key.clone(),
            Payload::ConfigUpsert(u) => {
                let c = u.config.as_ref()?;
                config_key(c.kind(), &c.namespace, &c.name)
            }
            Payload::ServiceDelete(d) | Payload::EndpointDelete(d) | Payload::ConfigDelete(d) => {
                d.key.clone()
            }
            Payload::Resync(_) => resync_key(&self.source),
        })
    }

    /// A short name for the event's kind, for logs, metrics and filters.
    pub fn kind_name(&self) -> &'static str {
        use event::Payload;
        match &self.payload {
            None => "empty",
            Some(Payload::ServiceUpsert(_)) => "service_upsert",
            Some(Payload::ServiceDelete(_)) => "service_delete",
            Some(Payload::EndpointUpsert(_)) => "endpoint_upsert",
            Some(Payload::EndpointDelete(_)) => "endpoint_delete",
            Some(Payload::ConfigUpsert(_)) => "config_upsert",
            Some(Payload::ConfigDelete(_)) => "config_delete",
            Some(Payload::Resync(_)) => "resync",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc_event() -> Event {
        Event {
            schema_version: SCHEMA_VERSION,
            source: "file:test".into(),
            generation: 3,
            observed_at_unix_micros: 1_700_000_000_000_000,
            payload: Some(event::Payload::ServiceUpsert(ServiceUpsert {
                service: Some(Service {
                    hostname: "reviews.default.svc.cluster.local".into(),
                    namespace: "default".into(),
                    ports: vec![Port {
                        name: "http".into(),
                        number: 9080,
                        protocol: Protocol::Http as i32,
                    }],
                    labels: Default::default(),
                    resolution: Resolution::StaticEndpoints as i32,
                }),
            })),
        }
    }

    #[test]
    fn key_of_service_upsert_names_namespace_and_host() {
        assert_eq!(
            svc_event().key().as_deref(),
            Some("svc/default/reviews.default.svc.cluster.local")
        );
    }

    #[test]
    fn json_round_trip_is_lossless() {
        let e = svc_event();
        let json = serde_json::to_string(&e).expect("serialize");
        assert!(json.contains("\"serviceUpsert\""), "{json}");
        let back: Event = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, e);
    }

    #[test]
    fn event_without_payload_has_no_key() {
        let e = Event {
            payload: None,
            ..svc_event()
        };
        assert_eq!(e.key(), None);
        assert_eq!(e.kind_name(), "empty");
    }
}
