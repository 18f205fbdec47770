//! Lean decoding of `DeltaDiscoveryRequest`: the fields deltapilot reads, with
//! strings kept as `Bytes` slices of the received message instead of `String`s.
//!
//! Envoy sends its `node` (id, cluster, metadata maps, build version, …) on every
//! request, ACKs included; envoy-types' message decodes all of it each time, and
//! allocates every name and every `initial_resource_versions` entry. Here `node`
//! stays raw bytes (decoded once, by the stream that has no proxy yet), and names
//! are borrowed from the message until the stream interns them against the
//! snapshot's own `Arc<str>`s. The message is wire-compatible with envoy's:
//! unknown fields (resource locators) are skipped.
//!
//! What it does NOT do: apply the request (see `delta`), or decode state-of-the-world
//! requests (those stay envoy-types' `DiscoveryRequest`).

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use prost::Message;

use crate::Error;

/// `DeltaDiscoveryRequest`, decoded leanly (field numbers as in envoy's proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeltaRequest {
    /// `node` (1), undecoded; the stream decodes it only while it has no proxy.
    #[prost(bytes = "bytes", optional, tag = "1")]
    pub node: Option<Bytes>,
    /// `type_url` (2).
    #[prost(bytes = "bytes", tag = "2")]
    pub type_url: Bytes,
    /// `resource_names_subscribe` (3).
    #[prost(bytes = "bytes", repeated, tag = "3")]
    pub subscribe: Vec<Bytes>,
    /// `resource_names_unsubscribe` (4).
    #[prost(bytes = "bytes", repeated, tag = "4")]
    pub unsubscribe: Vec<Bytes>,
    /// `initial_resource_versions` (5), a map on the wire: repeated entries.
    #[prost(message, repeated, tag = "5")]
    pub initial_resource_versions: Vec<VersionEntry>,
    /// `response_nonce` (6).
    #[prost(bytes = "bytes", tag = "6")]
    pub response_nonce: Bytes,
    /// `error_detail` (7): present means NACK.
    #[prost(message, optional, tag = "7")]
    pub error_detail: Option<ErrorDetail>,
}

/// One `initial_resource_versions` map entry.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VersionEntry {
    /// The resource name (map key).
    #[prost(bytes = "bytes", tag = "1")]
    pub name: Bytes,
    /// The version the client holds (map value).
    #[prost(bytes = "bytes", tag = "2")]
    pub version: Bytes,
}

/// `google.rpc.Status` without its `details`, which deltapilot does not read.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ErrorDetail {
    /// The gRPC code the client reported.
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// Why the client rejected the response.
    #[prost(string, tag = "2")]
    pub message: String,
}

/// A string field as `&str`; protobuf strings must be UTF-8.
pub fn text(b: &Bytes) -> Result<&str, Error> {
    std::str::from_utf8(b).map_err(|_| Error::Malformed("a string field is not UTF-8".into()))
}

impl DeltaRequest {
    /// Decodes a request message.
    pub fn decode_from(msg: Bytes) -> Result<Self, Error> {
        DeltaRequest::decode(msg).map_err(|e| Error::Malformed(e.to_string()))
    }

    /// The node, decoded (only called while the stream has no proxy yet).
    pub fn decode_node(&self) -> Result<Option<Node>, Error> {
        self.node
            .as_ref()
            .map(|b| Node::decode(b.clone()).map_err(|e| Error::Malformed(format!("node: {e}"))))
            .transpose()
    }

    /// The same request as envoy-types builds it (tests, benches, tools): re-encoded
    /// field by field, so it cannot fail.
    pub fn from_envoy(r: &DeltaDiscoveryRequest) -> Self {
        let s = |v: &String| Bytes::from(v.clone());
        DeltaRequest {
            node: r.node.as_ref().map(|n| Bytes::from(n.encode_to_vec())),
            type_url: s(&r.type_url),
            subscribe: r.resource_names_subscribe.iter().map(s).collect(),
            unsubscribe: r.resource_names_unsubscribe.iter().map(s).collect(),
            initial_resource_versions: r
                .initial_resource_versions
                .iter()
                .map(|(n, v)| VersionEntry {
                    name: s(n),
                    version: s(v),
                })
                .collect(),
            response_nonce: s(&r.response_nonce),
            error_detail: r.error_detail.as_ref().map(|e| ErrorDetail {
                code: e.code,
                message: e.message.clone(),
            }),
        }
    }
}

impl From<&DeltaDiscoveryRequest> for DeltaRequest {
    fn from(r: &DeltaDiscoveryRequest) -> Self {
        DeltaRequest::from_envoy(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::google::rpc::Status as RpcStatus;
    use std::collections::HashMap;

    #[test]
    fn decodes_what_envoy_types_encodes() {
        let full = DeltaDiscoveryRequest {
            node: Some(Node {
                id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local".into(),
                cluster: "a".into(),
                ..Default::default()
            }),
            type_url: "t".into(),
            resource_names_subscribe: vec!["a".into(), "b".into()],
            resource_names_unsubscribe: vec!["c".into()],
            initial_resource_versions: HashMap::from([("a".into(), "v1".into())]),
            response_nonce: "n".into(),
            error_detail: Some(RpcStatus {
                code: 3,
                message: "bad".into(),
                details: vec![envoy_types::pb::google::protobuf::Any {
                    type_url: "x".into(),
                    value: vec![1],
                }],
            }),
            ..Default::default()
        };
        let lean = DeltaRequest::decode_from(Bytes::from(full.encode_to_vec())).expect("decodes");
        assert_eq!(lean, DeltaRequest::from_envoy(&full));
        assert_eq!(lean.decode_node().expect("node"), full.node);
        assert_eq!(text(&lean.subscribe[1]).expect("utf8"), "b");
        assert_eq!(
            lean.error_detail.as_ref().map(|e| e.message.as_str()),
            Some("bad")
        );
        let ack = DeltaDiscoveryRequest {
            type_url: "t".into(),
            response_nonce: "n".into(),
            ..Default::default()
        };
        let lean = DeltaRequest::decode_from(Bytes::from(ack.encode_to_vec())).expect("ack");
        assert_eq!((lean.node, lean.error_detail), (None, None));
    }

    #[test]
    fn invalid_utf8_is_malformed() {
        assert!(matches!(
            text(&Bytes::from_static(&[0xff, 0xfe])),
            Err(Error::Malformed(_))
        ));
    }
}
