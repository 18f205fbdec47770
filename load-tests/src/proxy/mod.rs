//! Simulated Envoys: each one its own gRPC connection (a tonic `Channel` per
//! proxy), its own node id and metadata, speaking delta (default) or
//! state-of-the-world ADS the way Envoy does, and ACKing every response — or, when
//! the scenario says so, NACKing, reading slowly or stalling.
//!
//! - [`delta`] and [`sotw`]: the per-proxy protocol state, no I/O.
//! - [`fleet`]: N proxies as tasks, their connections, counters and control.
//! - [`decode`] and [`wire`]: the little of each message a proxy must read.
//! - [`codec`]: raw message bytes over tonic.
//!
//! What it does NOT do: write churn or compute the report.

pub mod codec;
pub mod decode;
pub mod delta;
pub mod fleet;
pub mod sotw;
pub mod wire;

use bytes::Bytes;
use deltapilot_xds::ResourceType;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::core::v3::node::UserAgentVersionType;
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use envoy_types::pb::google::rpc::Status;

use crate::scenario::Api;
use crate::tracker::Group;

/// How one simulated proxy behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Behaviour {
    /// Reads at once and ACKs everything.
    Normal,
    /// Waits before handling each response.
    Slow,
    /// NACKs every response after its initial sync.
    Nack,
    /// Stops reading after its initial sync.
    Stall,
}

impl Behaviour {
    /// The convergence group it counts in.
    pub fn group(self) -> Group {
        match self {
            Behaviour::Normal => Group::Normal,
            Behaviour::Slow => Group::Slow,
            Behaviour::Nack | Behaviour::Stall => Group::Untracked,
        }
    }
}

/// What handling one response produced.
#[derive(Debug, Default)]
pub struct Handled {
    /// The response's type.
    pub t: Option<ResourceType>,
    /// Its nonce.
    pub nonce: String,
    /// Requests to send, in order: the ACK (or NACK) first.
    pub requests: Vec<Bytes>,
    /// Assignments received: cluster name and sorted endpoint addresses.
    pub cla: Vec<(String, Vec<String>)>,
    /// Clusters removed.
    pub gone: Vec<String>,
    /// Route configurations received with new content: name and bytes.
    pub routes: Vec<(String, Bytes)>,
    /// Resources in the response.
    pub resources: usize,
    /// Bytes of the resources whose content differs from what the proxy held
    /// (plus the names of those removed): the size of what actually changed.
    pub changed_bytes: usize,
    /// The response was NACKed.
    pub nacked: bool,
}

/// The `error_detail` of a NACK.
pub fn nack_status() -> Status {
    Status {
        code: 3,
        message: "loadgen: rejected on purpose (scenario NACK fraction)".into(),
        details: Vec::new(),
    }
}

/// Either protocol's client state.
#[derive(Debug)]
pub enum ClientState {
    /// Delta xDS.
    Delta(delta::DeltaClient),
    /// State of the world.
    Sotw(sotw::SotwClient),
}

impl ClientState {
    /// A fresh state for `api`.
    pub fn new(api: Api, node: Node) -> Self {
        match api {
            Api::Delta => ClientState::Delta(delta::DeltaClient::new(node)),
            Api::Sotw => ClientState::Sotw(sotw::SotwClient::new(node)),
        }
    }

    /// The requests that open a stream.
    pub fn initial_requests(&mut self, reconnect: bool) -> Vec<Bytes> {
        match self {
            ClientState::Delta(c) => c.initial_requests(reconnect),
            ClientState::Sotw(c) => c.initial_requests(reconnect),
        }
    }

    /// Handles one response.
    pub fn on_response(&mut self, bytes: &Bytes, nack: bool) -> anyhow::Result<Handled> {
        match self {
            ClientState::Delta(c) => c.on_response(bytes, nack),
            ClientState::Sotw(c) => c.on_response(bytes, nack),
        }
    }

    /// Whether every subscription has been answered.
    pub fn synced(&self) -> bool {
        match self {
            ClientState::Delta(c) => c.synced(),
            ClientState::Sotw(c) => c.synced(),
        }
    }

    /// Names reported in `initial_resource_versions` on reconnect.
    pub fn known_count(&self) -> usize {
        match self {
            ClientState::Delta(c) => c.known_count(),
            ClientState::Sotw(c) => c.known_count(),
        }
    }
}

fn s(v: impl Into<String>) -> Value {
    Value {
        kind: Some(Kind::StringValue(v.into())),
    }
}

/// The node of proxy `i`: an Istio-style sidecar identity (the id encodes type,
/// IP, pod and namespace), Istio metadata, and Envoy's user agent.
pub fn node(i: usize) -> Node {
    let ns = format!("lg-ns-{}", i % 16);
    let [_, a, b, c] = (i as u32).to_be_bytes();
    let ip = format!("10.{}.{b}.{c}", 128 + (a & 0x7f));
    let pod = format!("lg-proxy-{i}");
    let labels = Struct {
        fields: [
            ("app".to_owned(), s(format!("lg-app-{}", i % 64))),
            ("loadgen-proxy".to_owned(), s(i.to_string())),
        ]
        .into(),
    };
    let metadata = Struct {
        fields: [
            ("NAMESPACE".to_owned(), s(ns.clone())),
            ("INSTANCE_IPS".to_owned(), s(ip.clone())),
            ("POD_NAME".to_owned(), s(pod.clone())),
            ("GENERATOR".to_owned(), s("loadgen")),
            (
                "LABELS".to_owned(),
                Value {
                    kind: Some(Kind::StructValue(labels)),
                },
            ),
        ]
        .into(),
    };
    Node {
        id: format!("sidecar~{ip}~{pod}.{ns}~{ns}.svc.cluster.local"),
        cluster: format!("lg-app-{}.{ns}", i % 64),
        metadata: Some(metadata),
        user_agent_name: "envoy".into(),
        user_agent_version_type: Some(UserAgentVersionType::UserAgentVersion("1.40.0".into())),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltapilot_model::ProxyType;

    #[test]
    fn nodes_are_distinct_sidecars_to_deltapilot() {
        let (a, b) = (
            deltapilot_xds::proxy_from_node(&node(0)),
            deltapilot_xds::proxy_from_node(&node(70_000)),
        );
        assert_ne!(a.id, b.id);
        assert_eq!(a.proxy_type, ProxyType::Sidecar);
        assert_eq!(&*b.namespace, "lg-ns-0");
        assert_eq!(b.ips.len(), 1);
    }
}
