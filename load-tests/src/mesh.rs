//! The simulated mesh: services with endpoints, the names deltapilot gives their
//! xDS resources, and the two ways they are written down — log events (what an
//! adapter would append) and Istio `ServiceEntry` YAML (what the file adapter reads).
//!
//! Addresses are never reused within a run: a flapping pod comes back with a new
//! address, as a restarted pod does. That is what lets the convergence tracker tell
//! "this proxy has seen the change" from "this proxy has not seen the change yet"
//! by looking at addresses alone.
//!
//! What it does NOT do: decide what changes (see `churn`) or write anything (see
//! `sink`).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use deltapilot_proto::{self as pb, Event, SCHEMA_VERSION, event::Payload};
use rand::Rng;

use crate::scenario::MeshSpec;
use crate::tracker::EventId;

/// The event source the load generator writes under (direct log mode), so that its
/// resync sweeps only its own entities.
pub const SOURCE: &str = "loadgen";

/// The port every HTTP service serves; they share one listener and one route.
pub const HTTP_PORT: u16 = 8080;

/// First port of TCP services: each gets its own port (and so its own listener),
/// because several TCP services on one port cannot be told apart without VIPs.
const TCP_PORT_BASE: u16 = 20000;

/// How many distinct TCP ports exist before they wrap around.
const TCP_PORTS: u64 = 40000;

/// One workload instance.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Its IPv4 address, unique in the run.
    pub addr: Arc<str>,
    /// The tracked event that added it, if it was added by churn (the initial mesh
    /// has none). It may be removed only once that event has converged.
    pub introduced_by: Option<EventId>,
}

/// One service with one port.
#[derive(Debug, Clone)]
pub struct Service {
    /// Unique id in the run; also names the service.
    pub id: u64,
    /// `svc-<id>`: the ServiceEntry's name and the YAML file's stem.
    pub name: String,
    /// `ns-<k>`.
    pub namespace: String,
    /// `svc-<id>.ns-<k>.svc.cluster.local`.
    pub host: String,
    /// Its one port.
    pub port: u16,
    /// HTTP (shares the 8080 listener and route) or TCP (own listener).
    pub http: bool,
    /// The workloads.
    pub endpoints: Vec<Endpoint>,
    /// The tracked event that added the service, if churn added it.
    pub introduced_by: Option<EventId>,
    /// Its cluster (and ClusterLoadAssignment) name, `outbound|<port>||<host>`.
    pub cluster: Arc<str>,
    /// A rule routes to it, so churn never removes it.
    pub ruled: bool,
}

/// The response header each rule sets to its revision's marker. A weight alone
/// cannot say which shift a proxy holds (weights repeat); the marker is unique
/// per shift, so a proxy finds it in the route configuration's bytes without
/// decoding them.
pub const RULE_MARKER_HEADER: &str = "x-loadgen-rev";

/// Prefix of every rule marker, so the log watcher can find one in a spec.
const MARKER_PREFIX: &str = "lgrev-";

/// One VirtualService: `host`'s traffic split between it and `other`.
#[derive(Debug, Clone)]
pub struct Rule {
    /// `split-<k>`: the VirtualService's name and the YAML file's stem.
    pub name: String,
    /// The namespace of `host`'s service.
    pub namespace: String,
    /// The host it routes, and its first destination.
    pub host: String,
    /// Its second destination.
    pub other: String,
    /// Percent of the traffic to `host` (the rest to `other`).
    pub first: u32,
    /// Shifts so far; names the marker.
    pub rev: u64,
    /// The tracked event of the last shift. The next waits until it has
    /// converged, so no shift is overwritten before the adapter reads it.
    pub last_shift: Option<EventId>,
}

/// The whole mesh as the load generator believes it is.
#[derive(Debug)]
pub struct Mesh {
    /// Services, most popular first (the Zipf rank is the position).
    pub services: Vec<Service>,
    /// VirtualServices over the first HTTP services (`mesh.rules`).
    pub rules: Vec<Rule>,
    next_service: u64,
    next_addr: u32,
    spec: MeshSpec,
}

/// The cluster name deltapilot (like Istio) gives a service port.
pub fn cluster_name(port: u16, host: &str) -> Arc<str> {
    Arc::from(format!("outbound|{port}||{host}").as_str())
}

impl Mesh {
    /// The initial mesh of `spec`.
    pub fn new(spec: &MeshSpec, rng: &mut impl Rng) -> Self {
        let mut mesh = Mesh {
            services: Vec::with_capacity(spec.services),
            rules: Vec::with_capacity(spec.rules),
            next_service: 0,
            next_addr: 1 << 8,
            spec: spec.clone(),
        };
        for k in 0..spec.services {
            let mut s = mesh.new_service(rng, None);
            // A rule's two destinations are HTTP services that never go away.
            if spec.rules > 0 && k <= spec.rules {
                s.make_http();
                s.ruled = true;
            }
            mesh.services.push(s);
        }
        mesh.rules = mesh.services[..spec.rules]
            .iter()
            .zip(&mesh.services[1..])
            .map(|(s, next)| Rule {
                name: format!("split-{}", s.id),
                namespace: s.namespace.clone(),
                host: s.host.clone(),
                other: next.host.clone(),
                first: 80,
                rev: 0,
                last_shift: None,
            })
            .collect();
        mesh
    }

    /// A fresh, never used address.
    pub fn new_address(&mut self) -> Arc<str> {
        let n = self.next_addr;
        self.next_addr = self.next_addr.wrapping_add(1);
        let [_, a, b, c] = n.to_be_bytes();
        Arc::from(format!("10.{a}.{b}.{c}").as_str())
    }

    /// A new service with `endpoints-per-service` fresh endpoints (not yet added).
    pub fn new_service(&mut self, rng: &mut impl Rng, introduced_by: Option<EventId>) -> Service {
        let id = self.next_service;
        self.next_service += 1;
        let ns = format!("ns-{}", id % self.spec.namespaces as u64);
        let name = format!("svc-{id}");
        let host = format!("{name}.{ns}.svc.cluster.local");
        let http = rng.random_bool(self.spec.http_fraction);
        let port = if http {
            HTTP_PORT
        } else {
            TCP_PORT_BASE + (id % TCP_PORTS) as u16
        };
        let endpoints = (0..self.spec.endpoints_per_service)
            .map(|_| Endpoint {
                addr: self.new_address(),
                introduced_by,
            })
            .collect();
        Service {
            id,
            cluster: cluster_name(port, &host),
            name,
            namespace: ns,
            host,
            port,
            http,
            endpoints,
            introduced_by,
            ruled: false,
        }
    }

    /// Total endpoints.
    pub fn endpoint_count(&self) -> usize {
        self.services.iter().map(|s| s.endpoints.len()).sum()
    }

    /// Cluster name → endpoint addresses, for checking that a server holds the mesh.
    pub fn expected_clusters(&self) -> HashMap<Arc<str>, usize> {
        self.services
            .iter()
            .map(|s| (s.cluster.clone(), s.endpoints.len()))
            .collect()
    }

    /// Position of the service with id `id`.
    pub fn position(&self, id: u64) -> Option<usize> {
        self.services.iter().position(|s| s.id == id)
    }
}

impl Service {
    fn make_http(&mut self) {
        self.http = true;
        self.port = HTTP_PORT;
        self.cluster = cluster_name(HTTP_PORT, &self.host);
    }

    fn port_name(&self) -> &'static str {
        if self.http { "http" } else { "tcp" }
    }

    fn protocol(&self) -> pb::Protocol {
        if self.http {
            pb::Protocol::Http
        } else {
            pb::Protocol::Tcp
        }
    }

    /// The log key of one of its endpoints (direct log mode).
    pub fn endpoint_key(&self, addr: &str) -> String {
        format!("ep/{SOURCE}/{}/{}/{addr}", self.namespace, self.name)
    }

    /// The `ServiceUpsert` payload.
    pub fn upsert_payload(&self) -> Payload {
        Payload::ServiceUpsert(pb::ServiceUpsert {
            service: Some(pb::Service {
                hostname: self.host.clone(),
                namespace: self.namespace.clone(),
                ports: vec![pb::Port {
                    name: self.port_name().into(),
                    number: u32::from(self.port),
                    protocol: self.protocol() as i32,
                }],
                labels: [("app".to_owned(), self.name.clone())].into(),
                resolution: pb::Resolution::StaticEndpoints as i32,
            }),
        })
    }

    /// The `ServiceDelete` payload.
    pub fn delete_payload(&self) -> Payload {
        Payload::ServiceDelete(pb::EntityDelete {
            key: pb::service_key(&self.namespace, &self.host),
        })
    }

    /// The `EndpointUpsert` payload of one endpoint.
    pub fn endpoint_upsert(&self, addr: &str) -> Payload {
        Payload::EndpointUpsert(pb::EndpointUpsert {
            key: self.endpoint_key(addr),
            endpoint: Some(pb::Endpoint {
                address: addr.to_owned(),
                ports: Default::default(),
                labels: [("app".to_owned(), self.name.clone())].into(),
                locality: Some(pb::Locality {
                    region: "region-a".into(),
                    zone: zone_of(addr).into(),
                    subzone: String::new(),
                }),
                weight: 0,
                health: pb::Health::Healthy as i32,
                service_account: String::new(),
                services: vec![pb::ServiceRef {
                    namespace: self.namespace.clone(),
                    hostname: self.host.clone(),
                }],
            }),
        })
    }

    /// The `EndpointDelete` payload of one endpoint.
    pub fn endpoint_delete(&self, addr: &str) -> Payload {
        Payload::EndpointDelete(pb::EntityDelete {
            key: self.endpoint_key(addr),
        })
    }

    /// The Istio `ServiceEntry` the file adapter reads for this service.
    pub fn service_entry_yaml(&self) -> String {
        let mut y = String::with_capacity(256 + self.endpoints.len() * 96);
        let _ = write!(
            y,
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: {}\n  namespace: {}\nspec:\n  hosts:\n    - {}\n  location: MESH_INTERNAL\n  resolution: STATIC\n  ports:\n    - number: {}\n      name: {}\n      protocol: {}\n  endpoints:\n",
            self.name,
            self.namespace,
            self.host,
            self.port,
            self.port_name(),
            if self.http { "HTTP" } else { "TCP" },
        );
        for e in &self.endpoints {
            let _ = writeln!(
                y,
                "    - address: {}\n      labels:\n        app: {}\n      locality: region-a/{}",
                e.addr,
                self.name,
                zone_of(&e.addr)
            );
        }
        y
    }

    /// The YAML file name (in the watched directory).
    pub fn file_name(&self) -> String {
        format!("lg-{}.yaml", self.name)
    }
}

impl Rule {
    /// The route configuration that holds its virtual host.
    pub fn route(&self) -> Arc<str> {
        Arc::from(HTTP_PORT.to_string().as_str())
    }

    /// What the tracker files its shifts under.
    pub fn track_key(&self) -> Arc<str> {
        Arc::from(format!("rule:{}/{}", self.namespace, self.name).as_str())
    }

    /// The unique string the current revision puts in the route configuration.
    pub fn marker(&self) -> String {
        format!("{MARKER_PREFIX}{}-{}", self.name, self.rev)
    }

    /// The next shift: a new split and a new marker.
    pub fn shift(&mut self) {
        self.rev += 1;
        // 10..=90 in steps that never repeat the previous split.
        self.first = 10 + (self.first - 10 + 30) % 90;
    }

    /// The spec as canonical JSON (sorted keys), as an adapter would log it.
    pub fn spec_json(&self) -> String {
        let dest = |host: &str, weight: u32| serde_json::json!({"destination": {"host": host, "port": {"number": HTTP_PORT}}, "weight": weight});
        serde_json::json!({
            "hosts": [self.host],
            "http": [{
                "headers": {"response": {"set": {RULE_MARKER_HEADER: self.marker()}}},
                "route": [dest(&self.host, self.first), dest(&self.other, 100 - self.first)],
            }],
        })
        .to_string()
    }

    /// The `ConfigUpsert` payload (direct log mode).
    pub fn upsert_payload(&self) -> Payload {
        Payload::ConfigUpsert(pb::ConfigUpsert {
            config: Some(pb::ConfigObject {
                kind: pb::ConfigKind::VirtualService as i32,
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                spec_json: self.spec_json(),
                ..Default::default()
            }),
        })
    }

    /// The Istio `VirtualService` the file adapter reads (JSON is YAML).
    pub fn yaml(&self) -> String {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {}\n  namespace: {}\nspec: {}\n",
            self.name,
            self.namespace,
            self.spec_json()
        )
    }

    /// The YAML file name (in the watched directory).
    pub fn file_name(&self) -> String {
        format!("lg-vs-{}.yaml", self.name)
    }
}

/// The rule marker in a logged spec, if it carries one.
pub fn marker_in(spec_json: &str) -> Option<&str> {
    let at = spec_json.find(MARKER_PREFIX)?;
    let rest = &spec_json[at..];
    let end = rest.find('"').unwrap_or(rest.len());
    Some(&rest[..end])
}

fn zone_of(addr: &str) -> &'static str {
    match addr.bytes().last().map(|b| b % 3) {
        Some(0) => "zone-a",
        Some(1) => "zone-b",
        _ => "zone-c",
    }
}

/// An event under the load generator's source.
pub fn event(generation: u64, observed_at_micros: i64, payload: Payload) -> Event {
    Event {
        schema_version: SCHEMA_VERSION,
        source: SOURCE.into(),
        generation,
        observed_at_unix_micros: observed_at_micros,
        payload: Some(payload),
    }
}

/// The resync marker payload.
pub fn resync(phase: pb::resync_marker::Phase) -> Payload {
    Payload::Resync(pb::ResyncMarker {
        phase: phase as i32,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn addresses_are_unique_and_names_follow_deltapilot() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let spec = MeshSpec {
            services: 30,
            endpoints_per_service: 20,
            http_fraction: 0.5,
            namespaces: 4,
            rules: 0,
        };
        let mesh = Mesh::new(&spec, &mut rng);
        let mut seen = std::collections::HashSet::new();
        for s in &mesh.services {
            for e in &s.endpoints {
                assert!(seen.insert(e.addr.clone()), "reused {}", e.addr);
            }
        }
        assert_eq!(seen.len(), 600);
        let s = &mesh.services[0];
        assert_eq!(&*s.cluster, format!("outbound|{}||{}", s.port, s.host));
        assert!(mesh.services.iter().any(|s| s.http) && mesh.services.iter().any(|s| !s.http));
    }

    #[test]
    fn service_entry_yaml_is_valid_yaml_with_every_endpoint() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut mesh = Mesh::new(&MeshSpec::default(), &mut rng);
        let s = mesh.new_service(&mut rng, None);
        let v: serde_yaml::Value = serde_yaml::from_str(&s.service_entry_yaml()).expect("yaml");
        assert_eq!(v["kind"].as_str(), Some("ServiceEntry"));
        assert_eq!(v["spec"]["hosts"][0].as_str(), Some(s.host.as_str()));
        let eps = v["spec"]["endpoints"].as_sequence().expect("endpoints");
        assert_eq!(eps.len(), s.endpoints.len());
        assert_eq!(eps[0]["address"].as_str(), Some(&*s.endpoints[0].addr));
    }

    #[test]
    fn rules_split_between_http_services_and_every_shift_is_new() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let spec = MeshSpec {
            services: 20,
            http_fraction: 0.0,
            rules: 3,
            ..MeshSpec::default()
        };
        let mesh = Mesh::new(&spec, &mut rng);
        assert_eq!(mesh.rules.len(), 3);
        for (k, r) in mesh.rules.iter().enumerate() {
            assert!(mesh.services[k].http && mesh.services[k + 1].http && mesh.services[k].ruled);
            assert_eq!(
                (r.host.as_str(), r.other.as_str()),
                (
                    mesh.services[k].host.as_str(),
                    mesh.services[k + 1].host.as_str()
                )
            );
        }
        assert!(!mesh.services[4].http, "the rest keep the fraction");
        let mut r = mesh.rules[0].clone();
        let mut seen = std::collections::HashSet::new();
        let mut last = r.first;
        for _ in 0..50 {
            r.shift();
            assert!((10..=90).contains(&r.first) && r.first != last);
            last = r.first;
            assert!(seen.insert(r.marker()));
            assert_eq!(marker_in(&r.spec_json()), Some(r.marker().as_str()));
        }
        let v: serde_yaml::Value = serde_yaml::from_str(&r.yaml()).expect("yaml");
        assert_eq!(v["kind"].as_str(), Some("VirtualService"));
        assert_eq!(
            v["spec"]["http"][0]["route"][1]["weight"].as_u64(),
            Some(u64::from(100 - r.first))
        );
    }
}
