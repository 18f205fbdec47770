//! The registry-neutral service model, after Istio's `pilot/pkg/model`.
//!
//! Adapters speak their registry's language; the log speaks `deltapilot.events.v1`;
//! everything downstream of the fold speaks these types. They are immutable values,
//! shared by `Arc` between snapshots, and ordered deterministically (`BTreeMap`,
//! `Ord` derives) so that folding the same log always yields identical bytes.
//!
//! What it does NOT do: hold state or decide merges (see `state`), or build xDS
//! (see `xds`).

mod convert;
mod labels;
mod proxy;
mod shape;
mod sorted_map;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

pub use convert::{
    ConvertError, endpoint_from_digested, endpoint_from_proto, endpoint_from_proto_reusing,
    health_from_proto, service_from_proto, shape_from_payload_sharing,
};
pub use labels::{LabelLookup, LabelSelector, Labels, WorkloadLabels};
pub use proxy::{Proxy, ProxyType};
pub use shape::{EndpointShape, source_digest, warm_source};
pub use sorted_map::SortedMap;

/// A fully qualified service hostname, e.g. `reviews.default.svc.cluster.local`.
/// Cheap to clone (shared string).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hostname(pub Arc<str>);

impl Hostname {
    /// Wraps a hostname string.
    pub fn new(s: &str) -> Self {
        Hostname(Arc::from(s))
    }

    /// The hostname text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Hostname {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::borrow::Borrow<str> for Hostname {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// Application protocol of a port (Istio's list).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// HTTP/1.1 (and HTTP/2 upgrade).
    Http,
    /// Prior-knowledge HTTP/2.
    Http2,
    /// gRPC (HTTP/2).
    Grpc,
    /// Opaque TCP.
    Tcp,
    /// TLS, routed by SNI.
    Tls,
    /// HTTPS (TLS terminated by the workload).
    Https,
    /// MongoDB (treated as TCP).
    Mongo,
    /// Redis (treated as TCP).
    Redis,
    /// MySQL (treated as TCP).
    Mysql,
    /// UDP (not proxied).
    Udp,
}

impl Protocol {
    /// Whether traffic on this port is HTTP and gets an HCM and RDS.
    pub fn is_http(self) -> bool {
        matches!(self, Protocol::Http | Protocol::Http2 | Protocol::Grpc)
    }

    /// Whether upstream connections must use HTTP/2.
    pub fn is_http2(self) -> bool {
        matches!(self, Protocol::Http2 | Protocol::Grpc)
    }
}

/// A service port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Port {
    /// Port name, unique within the service.
    pub name: Arc<str>,
    /// 1..=65535.
    pub number: u16,
    /// Application protocol.
    pub protocol: Protocol,
}

/// How proxies resolve a service's addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Resolution {
    /// Endpoints come from the registry over EDS.
    #[default]
    StaticEndpoints,
    /// The proxy resolves the hostname with DNS.
    Dns,
    /// Traffic passes through to the original destination.
    Passthrough,
}

/// A logical service.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Service {
    /// Identity of the service across registries.
    pub hostname: Hostname,
    /// The namespace that defines it.
    pub namespace: Arc<str>,
    /// Ports, sorted by number; numbers and names are unique.
    pub ports: Vec<Port>,
    /// Service labels.
    pub labels: Labels,
    /// How proxies resolve it.
    pub resolution: Resolution,
}

impl Service {
    /// The port with this number, if the service has it.
    pub fn port(&self, number: u16) -> Option<&Port> {
        self.ports.iter().find(|p| p.number == number)
    }
}

/// Topology of a workload.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Locality {
    /// Region, e.g. `us-east1`.
    pub region: Arc<str>,
    /// Zone, e.g. `us-east1-b`.
    pub zone: Arc<str>,
    /// Sub-zone (rack, node).
    pub subzone: Arc<str>,
}

/// Health of a workload as its registry reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Health {
    /// Serving.
    #[default]
    Healthy,
    /// Failing checks.
    Unhealthy,
    /// Shutting down: no new traffic.
    Draining,
    /// Not ready yet.
    NotReady,
}

/// One workload instance (Istio's `IstioEndpoint`): it may serve several services.
///
/// Its ports, labels, locality, identity and services live in a shared
/// [`EndpointShape`] (reached through `Deref`: `endpoint.labels` reads the shape's),
/// so that a health or weight change, the common event, shares them with the
/// previous version instead of rebuilding them (see `shape`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// The entity key it was written under (stable for the workload's life).
    pub key: Arc<str>,
    /// IP address.
    pub address: std::net::IpAddr,
    /// Load-balancing weight, always >= 1.
    pub weight: u32,
    /// Registry health.
    pub health: Health,
    /// Ports, labels, locality, identity and services.
    pub shape: Arc<EndpointShape>,
}

impl std::ops::Deref for Endpoint {
    type Target = EndpointShape;

    fn deref(&self) -> &EndpointShape {
        &self.shape
    }
}

impl Endpoint {
    /// The port this workload serves `port` of a service on.
    pub fn target_port(&self, port: &Port) -> u16 {
        self.shape.target_port(port)
    }
}

/// An [`Endpoint`] as the folded state holds it, borrowed: what the xDS
/// generator reads of each endpoint of a hostname it rebuilds.
///
/// Why borrowed: the generator reads a few fields of each and keeps none. An
/// owned [`Endpoint`] clones the key and the shape, and at 100k endpoints each
/// clone is a write to an allocation nothing else in the rebuild touches (the
/// key is read only to break a tie between two endpoints on one socket).
#[derive(Debug, Clone, Copy)]
pub struct EndpointRef<'a> {
    /// The entity key it was written under.
    pub key: &'a Arc<str>,
    /// IP address.
    pub address: std::net::IpAddr,
    /// Load-balancing weight, always >= 1.
    pub weight: u32,
    /// Registry health.
    pub health: Health,
    /// Ports, labels, locality, identity and services.
    pub shape: &'a Arc<EndpointShape>,
}

impl<'a> EndpointRef<'a> {
    /// Borrows `e`.
    pub fn of(e: &'a Endpoint) -> Self {
        EndpointRef {
            key: &e.key,
            address: e.address,
            weight: e.weight,
            health: e.health,
            shape: &e.shape,
        }
    }

    /// An owned copy (takes a reference on the key and the shape).
    pub fn to_endpoint(&self) -> Endpoint {
        Endpoint {
            key: self.key.clone(),
            address: self.address,
            weight: self.weight,
            health: self.health,
            shape: self.shape.clone(),
        }
    }
}

/// One workload serving one port of one service (Istio's `ServiceInstance`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceInstance {
    /// The service.
    pub service: Arc<Service>,
    /// The service port.
    pub service_port: Port,
    /// The workload.
    pub endpoint: Arc<Endpoint>,
    /// The port the workload listens on for it.
    pub target_port: u16,
}

/// The kind of a traffic-rule config object.
pub use deltapilot_proto::ConfigKind;

/// A traffic-rule config object (VirtualService, DestinationRule, …), carried as its
/// canonical spec JSON; kinds the engine implements parse it when generating xDS.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Config {
    /// Its entity key (`cfg/<kind>/<namespace>/<name>`).
    pub key: Arc<str>,
    /// Kind.
    pub kind: ConfigKind,
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
    /// Labels.
    pub labels: Labels,
    /// Annotations.
    pub annotations: BTreeMap<Arc<str>, Arc<str>>,
    /// Canonical JSON of the Istio spec.
    pub spec_json: Arc<str>,
}
