//! The proxy model: who is asking for config. `deltapilot_xds::proxy_from_node`
//! builds one from Envoy's `Node` (Istio's node id and metadata); this crate knows
//! nothing of Envoy's types.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use super::Labels;

/// What kind of client a proxy is; it decides which resources it sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum ProxyType {
    /// An Envoy sidecar next to a workload: outbound listeners per service port.
    #[default]
    Sidecar,
    /// An Envoy gateway (ingress/egress): serves gateways only, has no workload.
    Router,
    /// A proxyless gRPC client: `api_listener`s named `<host>:<port>`.
    ProxylessGrpc,
}

impl ProxyType {
    /// Lower-case name, as used in metrics and debug views.
    pub fn as_str(self) -> &'static str {
        match self {
            ProxyType::Sidecar => "sidecar",
            ProxyType::Router => "router",
            ProxyType::ProxylessGrpc => "proxyless_grpc",
        }
    }
}

/// A connected proxy's identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Proxy {
    /// Envoy node id, unique per proxy.
    pub id: Arc<str>,
    /// Envoy `--service-cluster`.
    pub cluster: Arc<str>,
    /// Namespace of the workload (or gateway).
    pub namespace: Arc<str>,
    /// Workload labels.
    pub labels: Labels,
    /// Kind of client.
    pub proxy_type: ProxyType,
    /// The workload's IP addresses.
    pub ips: Vec<IpAddr>,
    /// Remaining node metadata, as flat strings (nested values as JSON).
    pub metadata: BTreeMap<Arc<str>, Arc<str>>,
}
