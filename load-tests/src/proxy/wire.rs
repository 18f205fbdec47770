//! Lean wire types for the hot path: discovery responses with resource bytes
//! borrowed from the received buffer (no copy), and a ClusterLoadAssignment
//! reduced to what the tracker reads (cluster name, endpoint addresses); every
//! other field is skipped unread. prost decodes exactly the same wire format as
//! envoy-types' full messages (the field numbers below are theirs), at a fraction
//! of the allocations, so the simulated proxies cost the shared CPU as little as
//! possible.
//!
//! Requests carry the proxy's node (Envoy sends it on every request): it is encoded
//! once per proxy and appended to each request as its field, instead of cloning
//! and re-encoding a `Node` with its metadata maps every time (protobuf allows
//! fields in any order).
//!
//! What it does NOT do: decode listeners (see `decode`, which uses envoy-types).

use bytes::{BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::config::core::v3::Node;
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint};

/// `google.protobuf.Any` with its value borrowed.
#[derive(Clone, PartialEq, Message)]
pub struct AnyBytes {
    /// `value = 2`.
    #[prost(bytes = "bytes", tag = "2")]
    pub value: Bytes,
}

/// `discovery.v3.Resource`.
#[derive(Clone, PartialEq, Message)]
pub struct DeltaResource {
    /// `version = 1`.
    #[prost(string, tag = "1")]
    pub version: String,
    /// `resource = 2`.
    #[prost(message, optional, tag = "2")]
    pub resource: Option<AnyBytes>,
    /// `name = 3`.
    #[prost(string, tag = "3")]
    pub name: String,
}

/// `DeltaDiscoveryResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct DeltaResponse {
    /// `resources = 2`.
    #[prost(message, repeated, tag = "2")]
    pub resources: Vec<DeltaResource>,
    /// `type_url = 4`.
    #[prost(string, tag = "4")]
    pub type_url: String,
    /// `nonce = 5`.
    #[prost(string, tag = "5")]
    pub nonce: String,
    /// `removed_resources = 6`.
    #[prost(string, repeated, tag = "6")]
    pub removed_resources: Vec<String>,
}

/// `DiscoveryResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct SotwResponse {
    /// `version_info = 1`.
    #[prost(string, tag = "1")]
    pub version_info: String,
    /// `resources = 2`.
    #[prost(message, repeated, tag = "2")]
    pub resources: Vec<AnyBytes>,
    /// `type_url = 4`.
    #[prost(string, tag = "4")]
    pub type_url: String,
    /// `nonce = 5`.
    #[prost(string, tag = "5")]
    pub nonce: String,
}

/// `core.v3.SocketAddress` (`address = 2`).
#[derive(Clone, PartialEq, Message)]
struct SocketAddress {
    #[prost(string, tag = "2")]
    address: String,
}

/// `core.v3.Address` (`socket_address = 1`).
#[derive(Clone, PartialEq, Message)]
struct Address {
    #[prost(message, optional, tag = "1")]
    socket_address: Option<SocketAddress>,
}

/// `endpoint.v3.Endpoint` (`address = 1`).
#[derive(Clone, PartialEq, Message)]
struct Endpoint {
    #[prost(message, optional, tag = "1")]
    address: Option<Address>,
}

/// `endpoint.v3.LbEndpoint` (`endpoint = 1`).
#[derive(Clone, PartialEq, Message)]
struct LbEndpoint {
    #[prost(message, optional, tag = "1")]
    endpoint: Option<Endpoint>,
}

/// `endpoint.v3.LocalityLbEndpoints` (`lb_endpoints = 2`).
#[derive(Clone, PartialEq, Message)]
struct LocalityLbEndpoints {
    #[prost(message, repeated, tag = "2")]
    lb_endpoints: Vec<LbEndpoint>,
}

/// `endpoint.v3.ClusterLoadAssignment` (`cluster_name = 1`, `endpoints = 2`).
#[derive(Clone, PartialEq, Message)]
struct ClusterLoadAssignment {
    #[prost(string, tag = "1")]
    cluster_name: String,
    #[prost(message, repeated, tag = "2")]
    endpoints: Vec<LocalityLbEndpoints>,
}

/// A ClusterLoadAssignment's cluster name and endpoint addresses, sorted.
pub fn cla_addresses(value: &Bytes) -> Result<(String, Vec<String>), prost::DecodeError> {
    let cla = ClusterLoadAssignment::decode(value.clone())?;
    let mut addrs: Vec<String> = cla
        .endpoints
        .into_iter()
        .flat_map(|g| g.lb_endpoints)
        .filter_map(|lb| lb.endpoint?.address?.socket_address)
        .map(|s| s.address)
        .collect();
    addrs.sort();
    Ok((cla.cluster_name, addrs))
}

/// A proxy's node as an encoded field (`tag` is 1 in delta requests, 2 in SotW
/// ones), ready to append to each request.
pub fn node_field(node: &Node, tag: u32) -> Bytes {
    let body = node.encode_to_vec();
    let mut b = BytesMut::with_capacity(body.len() + 8);
    encode_key(tag, WireType::LengthDelimited, &mut b);
    encode_varint(body.len() as u64, &mut b);
    b.put_slice(&body);
    b.freeze()
}

/// `msg` encoded, followed by the pre-encoded node field.
pub fn with_node(msg: &impl Message, node: &Bytes) -> Bytes {
    let mut b = BytesMut::with_capacity(msg.encoded_len() + node.len());
    // Encoding into a BytesMut with enough capacity cannot fail.
    let _ = msg.encode(&mut b);
    b.put_slice(node);
    b.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::{Locality, SocketAddress as PbSocket, address};
    use envoy_types::pb::envoy::config::endpoint::v3 as ep;
    use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;

    #[test]
    fn lean_cla_matches_the_full_decoder_and_the_node_rides_along() {
        let lb = |a: &str| ep::LbEndpoint {
            host_identifier: Some(ep::lb_endpoint::HostIdentifier::Endpoint(ep::Endpoint {
                address: Some(envoy_types::pb::envoy::config::core::v3::Address {
                    address: Some(address::Address::SocketAddress(PbSocket {
                        address: a.into(),
                        ..Default::default()
                    })),
                }),
                hostname: "skipped".into(),
                ..Default::default()
            })),
            load_balancing_weight: Some(envoy_types::pb::google::protobuf::UInt32Value {
                value: 3,
            }),
            ..Default::default()
        };
        let cla = ep::ClusterLoadAssignment {
            cluster_name: "outbound|8080||a".into(),
            endpoints: vec![
                ep::LocalityLbEndpoints {
                    locality: Some(Locality {
                        region: "r".into(),
                        ..Default::default()
                    }),
                    lb_endpoints: vec![lb("10.0.0.9"), lb("10.0.0.1")],
                    ..Default::default()
                },
                ep::LocalityLbEndpoints {
                    lb_endpoints: vec![lb("10.0.0.5")],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let bytes = Bytes::from(cla.encode_to_vec());
        assert_eq!(
            cla_addresses(&bytes).expect("lean"),
            super::super::decode::cla_addresses(&bytes).expect("full")
        );

        let node = Node {
            id: "sidecar~1".into(),
            ..Default::default()
        };
        let req = DeltaDiscoveryRequest {
            type_url: "t".into(),
            response_nonce: "n".into(),
            ..Default::default()
        };
        let back =
            DeltaDiscoveryRequest::decode(with_node(&req, &node_field(&node, 1))).expect("decodes");
        assert_eq!(back.node.as_ref().map(|n| n.id.as_str()), Some("sidecar~1"));
        assert_eq!(
            (back.type_url.as_str(), back.response_nonce.as_str()),
            ("t", "n")
        );
    }
}
