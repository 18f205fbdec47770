//! The benches' registry workload: services with an HTTP and a gRPC port, their
//! endpoints, then churn as a Kubernetes registry produces it (endpoints flipping
//! health and weight, pods deleted and replaced under new keys, now and then a
//! service relabelled), deterministic for a given [`Shape`].
//!
//! What it does NOT do: write logs or time anything (each bench does).

use deltapilot_proto::{self as pb, Event, SCHEMA_VERSION, event::Payload};

/// How large a workload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Services.
    pub services: usize,
    /// Endpoints at the start (a multiple of `services`: pod `p` belongs to
    /// service `p % services`).
    pub endpoints: usize,
    /// Events in all: the services, the endpoints, then churn up to this many.
    pub events: usize,
}

/// 10k services, 100k endpoints, 1M events: the replay bench's log.
pub const CHURN_1M: Shape = Shape {
    services: 10_000,
    endpoints: 100_000,
    events: 1_000_000,
};

/// 1k services of 1,040 endpoints each, every event an upsert: few, very large
/// assignments.
pub const LARGE_SERVICES: Shape = Shape {
    services: 1_000,
    endpoints: 1_040_000,
    events: 1_041_000,
};

/// The hostname of service `s`.
pub fn host(s: usize) -> String {
    format!("svc-{s}.ns-{}.svc.cluster.local", s % 50)
}

/// An event of the bench's Kubernetes source carrying `payload`.
pub fn event(payload: Payload) -> Event {
    Event {
        schema_version: SCHEMA_VERSION,
        source: "k8s:bench".into(),
        generation: 1,
        observed_at_unix_micros: 1_700_000_000_000_000,
        payload: Some(payload),
    }
}

/// Service `s` at label revision `rev`, with an HTTP and a gRPC port.
pub fn service(s: usize, rev: usize) -> Event {
    event(Payload::ServiceUpsert(pb::ServiceUpsert {
        service: Some(pb::Service {
            hostname: host(s),
            namespace: format!("ns-{}", s % 50),
            ports: vec![
                pb::Port {
                    name: "http".into(),
                    number: 8080,
                    protocol: pb::Protocol::Http as i32,
                },
                pb::Port {
                    name: "grpc".into(),
                    number: 9090,
                    protocol: pb::Protocol::Grpc as i32,
                },
            ],
            labels: [
                ("app".to_string(), format!("svc-{s}")),
                ("rev".to_string(), rev.to_string()),
            ]
            .into(),
            resolution: 0,
        }),
    }))
}

/// Pod `pod` of service `pod % services`, in a given health and weight.
pub fn endpoint(services: usize, pod: usize, healthy: bool, weight: u32) -> Event {
    let s = pod % services;
    event(Payload::EndpointUpsert(pb::EndpointUpsert {
        key: format!("ep/k8s/ns-{}/pod-{pod}", s % 50),
        endpoint: Some(pb::Endpoint {
            address: format!(
                "10.{}.{}.{}",
                (pod >> 16) & 255,
                (pod >> 8) & 255,
                pod & 255
            ),
            ports: [("http".to_string(), 8080), ("grpc".to_string(), 9090)].into(),
            labels: [
                ("app".to_string(), format!("svc-{s}")),
                ("version".to_string(), "v1".to_string()),
            ]
            .into(),
            locality: Some(pb::Locality {
                region: "us-east1".into(),
                zone: format!("us-east1-{}", ["b", "c", "d"][pod % 3]),
                subzone: String::new(),
            }),
            weight,
            health: if healthy {
                pb::Health::Healthy
            } else {
                pb::Health::Unhealthy
            } as i32,
            service_account: format!("spiffe://cluster.local/ns/ns-{}/sa/svc-{s}", s % 50),
            services: vec![pb::ServiceRef {
                namespace: format!("ns-{}", s % 50),
                hostname: host(s),
            }],
        }),
    }))
}

/// The deletion of pod `pod` of service `pod % services`.
pub fn delete(services: usize, pod: usize) -> Event {
    let s = pod % services;
    event(Payload::EndpointDelete(pb::EntityDelete {
        key: format!("ep/k8s/ns-{}/pod-{pod}", s % 50),
    }))
}

/// The whole event stream of `shape`, deterministic: the registry, then churn.
pub fn events(shape: Shape) -> Vec<Event> {
    let Shape {
        services,
        endpoints,
        events,
    } = shape;
    let mut out: Vec<Event> = (0..services).map(|s| service(s, 0)).collect();
    out.extend((0..endpoints).map(|p| endpoint(services, p, true, 1)));
    // Live pods, by slot: slot i holds pod `live[i]`; replacements get new numbers.
    let mut live: Vec<usize> = (0..endpoints).collect();
    let mut k = 0usize;
    while out.len() < events {
        k += 1;
        let slot = (k * 7_919) % endpoints;
        match k % 20 {
            // A pod is replaced: the old one goes, a new one (new key, new IP) comes.
            0 => {
                out.push(delete(services, live[slot]));
                // Same service as the pod it replaces (`endpoints` is a multiple
                // of `services`), new key and address.
                let pod = live[slot] + endpoints;
                live[slot] = pod;
                out.push(endpoint(services, pod, true, 1));
            }
            // A service is relabelled (rare).
            1 if k % 2_000 == 1 => out.push(service(slot % services, k)),
            // Readiness flaps and weight changes: the bulk of real churn.
            _ => out.push(endpoint(
                services,
                live[slot],
                !k.is_multiple_of(3),
                1 + (k % 4) as u32,
            )),
        }
    }
    out.truncate(events);
    out
}
