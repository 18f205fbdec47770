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
}

/// The whole mesh as the load generator believes it is.
#[derive(Debug)]
pub struct Mesh {
    /// Services, most popular first (the Zipf rank is the position).
    pub services: Vec<Service>,
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
            next_service: 0,
            next_addr: 1 << 8,
            spec: spec.clone(),
        };
        for _ in 0..spec.services {
            let s = mesh.new_service(rng, None);
            mesh.services.push(s);
        }
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
}
