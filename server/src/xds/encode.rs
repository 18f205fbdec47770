//! Wire encoding of discovery responses around shared resource bytes.
//!
//! envoy-types' `google.protobuf.Any` holds its value as `Vec<u8>`, so building a
//! `DeltaDiscoveryResponse` with prost would copy (and allocate) every resource's
//! bytes once per proxy. Instead, [`DeltaOut`] and [`SotwOut`] keep `Arc<Resource>`s
//! from the snapshot and write the protobuf wire format by hand, straight into the
//! response's frame (see `frame`): the only copy of a resource's bytes is the unavoidable one
//! into the HTTP/2 frame, and nothing is re-encoded per proxy.
//!
//! What it does NOT do: decide what goes into a response (see `delta` and `sotw`).

use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use deltapilot_xds::{Resource, ResourceType};
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};

/// A `DeltaDiscoveryResponse`, holding shared resources instead of copies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeltaOut {
    /// The type of every resource and removal in this response (`None` only in the
    /// `Default` value).
    pub type_url: Option<ResourceType>,
    /// Unique per response; the client echoes it in its ACK or NACK.
    pub nonce: String,
    /// Resources added or changed, each named once.
    pub resources: Vec<Arc<Resource>>,
    /// Names removed (or subscribed but absent), each named once.
    pub removed: Vec<Arc<str>>,
}

/// A `DiscoveryResponse` (state of the world), holding shared resources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SotwOut {
    /// The type of every resource in this response.
    pub type_url: Option<ResourceType>,
    /// Version of this type's whole state, echoed by the client in its ACK.
    pub version_info: String,
    /// Unique per response.
    pub nonce: String,
    /// The full state of the type as this client sees it.
    pub resources: Vec<Arc<Resource>>,
}

fn type_url(t: Option<ResourceType>) -> &'static str {
    t.map(ResourceType::type_url).unwrap_or_default()
}

fn str_len(tag: u32, s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        key_len(tag) + encoded_len_varint(s.len() as u64) + s.len()
    }
}

fn put_str(tag: u32, s: &str, buf: &mut impl BufMut) {
    if !s.is_empty() {
        encode_key(tag, WireType::LengthDelimited, buf);
        encode_varint(s.len() as u64, buf);
        buf.put_slice(s.as_bytes());
    }
}

fn put_len(tag: u32, len: usize, buf: &mut impl BufMut) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(len as u64, buf);
}

fn nested_len(tag: u32, body: usize) -> usize {
    key_len(tag) + encoded_len_varint(body as u64) + body
}

/// `google.protobuf.Any { type_url = 1; value = 2 }`, body length.
fn any_body_len(url: &str, r: &Resource) -> usize {
    str_len(1, url) + key_len(2) + encoded_len_varint(r.bytes.len() as u64) + r.bytes.len()
}

fn put_any(tag: u32, url: &str, r: &Resource, buf: &mut impl BufMut) {
    put_len(tag, any_body_len(url, r), buf);
    put_str(1, url, buf);
    encode_key(2, WireType::LengthDelimited, buf);
    encode_varint(r.bytes.len() as u64, buf);
    buf.put_slice(&r.bytes);
}

/// `discovery.v3.Resource { version = 1; resource = 2; name = 3 }`, body length.
fn delta_resource_body_len(url: &str, r: &Resource) -> usize {
    str_len(1, &r.version) + nested_len(2, any_body_len(url, r)) + str_len(3, &r.name)
}

impl DeltaOut {
    /// Encoded size in bytes.
    pub fn encoded_len(&self) -> usize {
        let url = type_url(self.type_url);
        let resources: usize = self
            .resources
            .iter()
            .map(|r| nested_len(2, delta_resource_body_len(url, r)))
            .sum();
        let removed: usize = self
            .removed
            .iter()
            .map(|n| key_len(6) + encoded_len_varint(n.len() as u64) + n.len())
            .sum();
        resources + str_len(4, url) + str_len(5, &self.nonce) + removed
    }

    /// Writes the `DeltaDiscoveryResponse` wire format: resources = 2, type_url = 4,
    /// nonce = 5, removed_resources = 6.
    pub fn encode(&self, buf: &mut impl BufMut) {
        let url = type_url(self.type_url);
        for r in &self.resources {
            put_len(2, delta_resource_body_len(url, r), buf);
            put_str(1, &r.version, buf);
            put_any(2, url, r, buf);
            put_str(3, &r.name, buf);
        }
        put_str(4, url, buf);
        put_str(5, &self.nonce, buf);
        for n in &self.removed {
            encode_key(6, WireType::LengthDelimited, buf);
            encode_varint(n.len() as u64, buf);
            buf.put_slice(n.as_bytes());
        }
    }
}

impl SotwOut {
    /// Encoded size in bytes.
    pub fn encoded_len(&self) -> usize {
        let url = type_url(self.type_url);
        let resources: usize = self
            .resources
            .iter()
            .map(|r| nested_len(2, any_body_len(url, r)))
            .sum();
        str_len(1, &self.version_info) + resources + str_len(4, url) + str_len(5, &self.nonce)
    }

    /// Writes the `DiscoveryResponse` wire format: version_info = 1, resources = 2
    /// (each an `Any`), type_url = 4, nonce = 5.
    pub fn encode(&self, buf: &mut impl BufMut) {
        let url = type_url(self.type_url);
        put_str(1, &self.version_info, buf);
        for r in &self.resources {
            put_any(2, url, r, buf);
        }
        put_str(4, url, buf);
        put_str(5, &self.nonce, buf);
    }
}

/// A response the stream bodies can frame (see `frame`).
pub trait WireOut: Send + 'static {
    /// Encoded size in bytes.
    fn wire_len(&self) -> usize;
    /// Writes the message.
    fn wire_encode(&self, buf: &mut BytesMut);
}

impl WireOut for DeltaOut {
    fn wire_len(&self) -> usize {
        self.encoded_len()
    }
    fn wire_encode(&self, buf: &mut BytesMut) {
        self.encode(buf)
    }
}

impl WireOut for SotwOut {
    fn wire_len(&self) -> usize {
        self.encoded_len()
    }
    fn wire_encode(&self, buf: &mut BytesMut) {
        self.encode(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use envoy_types::pb::envoy::service::discovery::v3::{
        DeltaDiscoveryResponse, DiscoveryResponse,
    };
    use prost::Message;

    fn res(name: &str, body: &'static [u8]) -> Arc<Resource> {
        Arc::new(Resource::new(Arc::from(name), Bytes::from_static(body)))
    }

    #[test]
    fn delta_wire_format_decodes_with_prost() {
        let out = DeltaOut {
            type_url: Some(ResourceType::Cluster),
            nonce: "n-1".into(),
            resources: vec![res("a", b"\x0a\x01a"), res("b", b"")],
            removed: vec![Arc::from("gone"), Arc::from("x")],
        };
        let mut buf = Vec::new();
        out.encode(&mut buf);
        assert_eq!(buf.len(), out.encoded_len());
        let d = DeltaDiscoveryResponse::decode(buf.as_slice()).expect("decodes");
        assert_eq!(d.type_url, ResourceType::Cluster.type_url());
        assert_eq!(d.nonce, "n-1");
        assert_eq!(d.removed_resources, ["gone", "x"]);
        assert_eq!(d.resources.len(), 2);
        assert_eq!(d.resources[0].name, "a");
        assert_eq!(d.resources[0].version, &*out.resources[0].version);
        let any = d.resources[0].resource.as_ref().expect("any");
        assert_eq!(any.type_url, ResourceType::Cluster.type_url());
        assert_eq!(any.value, b"\x0a\x01a");
        assert_eq!(d.resources[1].resource.as_ref().expect("any").value, b"");
    }

    #[test]
    fn sotw_wire_format_decodes_with_prost() {
        let out = SotwOut {
            type_url: Some(ResourceType::Route),
            version_info: "v9".into(),
            nonce: "n".into(),
            resources: vec![res("r", b"\x0a\x01r")],
        };
        let mut buf = Vec::new();
        out.encode(&mut buf);
        assert_eq!(buf.len(), out.encoded_len());
        let d = DiscoveryResponse::decode(buf.as_slice()).expect("decodes");
        assert_eq!((d.version_info.as_str(), d.nonce.as_str()), ("v9", "n"));
        assert_eq!(d.type_url, ResourceType::Route.type_url());
        assert_eq!(d.resources[0].value, b"\x0a\x01r");
        assert_eq!(d.resources[0].type_url, ResourceType::Route.type_url());
    }
}
