//! The one rule the raw fan-out keeps from a real control plane: make-before-break
//! order across types on each stream. A response of a later type (CDS → EDS →
//! LDS → RDS → VHDS) waits until every earlier-type response sent before it, or queued
//! ahead of it, is ACKed or NACKed, so a service add costs the replay the same
//! round trips (CDS, its ACK, then the assignment and the route) that it costs any
//! correct server. EDS never holds back listeners and routes (a real server
//! holds them only behind assignments of clusters it just sent, which the replay
//! cannot tell apart), which keeps the baseline on the fast side of the truth.
//! Within a type, responses go in captured order and are pipelined (no wait for
//! their own ACKs).
//!
//! Pure: no I/O. The replay server's per-stream loop feeds it responses and the
//! nonces the client answers, and sends what it releases.
//!
//! What it does NOT do: look inside resources, or coalesce (the replay sends
//! exactly the captured bytes).

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use deltapilot_xds::ResourceType;

/// A response to replay, with what the gate needs to know of it.
#[derive(Debug, Clone)]
pub struct Msg {
    /// The encoded response, sent unchanged.
    pub bytes: Bytes,
    /// Its make-before-break rank (CDS 0 … RDS 3, VHDS 4); `None` for types outside the
    /// ordering (secrets), which never wait and never hold anything back.
    rank: Option<u8>,
    /// The nonce a client's ACK or NACK echoes.
    nonce: Arc<str>,
}

/// The two fields every xDS response, delta or state of the world, keeps at the
/// same tags: all the replay reads of a response.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseHead {
    /// The response's type.
    #[prost(string, tag = "4")]
    pub type_url: String,
    /// What the client's ACK or NACK echoes.
    #[prost(string, tag = "5")]
    pub nonce: String,
}

impl ResponseHead {
    /// Reads the head of an encoded response (empty fields when undecodable).
    pub fn of(bytes: &[u8]) -> Self {
        <ResponseHead as prost::Message>::decode(bytes).unwrap_or_default()
    }
}

/// The rank whose in-flight responses never hold back later types.
const EDS_RANK: u8 = 1;

impl Msg {
    /// Reads the type and nonce of an encoded response (delta or SotW).
    pub fn new(bytes: Bytes) -> Self {
        let head = ResponseHead::of(&bytes);
        let rank = match ResourceType::from_type_url(&head.type_url) {
            Some(ResourceType::Cluster) => Some(0),
            Some(ResourceType::Endpoint) => Some(EDS_RANK),
            Some(ResourceType::Listener) => Some(2),
            Some(ResourceType::Route) => Some(3),
            Some(ResourceType::VirtualHost) => Some(4),
            _ => None,
        };
        Msg {
            bytes,
            rank,
            nonce: head.nonce.into(),
        }
    }

    /// Whether an outstanding `self` keeps a response of `rank` from going.
    fn holds_back(&self, rank: Option<u8>) -> bool {
        match (self.rank, rank) {
            (Some(mine), Some(theirs)) => mine < theirs && mine != EDS_RANK,
            _ => false,
        }
    }
}

/// One stream's queue and the responses it has in flight.
#[derive(Debug, Default)]
pub struct Gate {
    queued: VecDeque<Msg>,
    in_flight: Vec<Msg>,
}

impl Gate {
    /// Queues a response behind everything queued before it.
    pub fn push(&mut self, m: Msg) {
        self.queued.push_back(m);
    }

    /// Responses queued and not yet released.
    pub fn queued(&self) -> usize {
        self.queued.len()
    }

    /// The client answered (ACK or NACK) the response with `nonce`.
    pub fn answered(&mut self, nonce: &str) {
        self.in_flight.retain(|m| &*m.nonce != nonce);
    }

    /// The next response that may go now, in queue order among those allowed:
    /// nothing of its own type is queued ahead of it, and nothing of an earlier
    /// (holding) type is queued ahead of it or in flight.
    pub fn next_ready(&mut self) -> Option<Bytes> {
        let pos = (0..self.queued.len()).find(|&i| {
            let m = &self.queued[i];
            let ahead = self.queued.iter().take(i);
            !ahead
                .clone()
                .any(|a| a.rank == m.rank || a.holds_back(m.rank))
                && !self.in_flight.iter().any(|f| f.holds_back(m.rank))
        })?;
        let m = self.queued.remove(pos)?;
        let bytes = m.bytes.clone();
        if m.rank.is_some() && !m.nonce.is_empty() {
            self.in_flight.push(m);
        }
        Some(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn msg(t: ResourceType, nonce: &str) -> Msg {
        let head = ResponseHead {
            type_url: t.type_url().into(),
            nonce: nonce.into(),
        };
        Msg::new(Bytes::from(head.encode_to_vec()))
    }

    fn drain(g: &mut Gate) -> Vec<String> {
        std::iter::from_fn(|| g.next_ready())
            .map(|b| ResponseHead::decode(b.as_ref()).unwrap_or_default().nonce)
            .collect()
    }

    #[test]
    fn a_route_waits_for_the_cluster_ack_but_endpoints_of_other_clusters_do_not() {
        let mut g = Gate::default();
        g.push(msg(ResourceType::Cluster, "c1"));
        g.push(msg(ResourceType::Route, "r1"));
        g.push(msg(ResourceType::Endpoint, "e1"));
        // The route and the assignment both wait for the cluster's ACK.
        assert_eq!(drain(&mut g), ["c1"]);
        g.answered("c1");
        assert_eq!(drain(&mut g), ["r1", "e1"]);
        // An assignment in flight holds back nothing.
        g.push(msg(ResourceType::Endpoint, "e2"));
        g.push(msg(ResourceType::Listener, "l1"));
        g.push(msg(ResourceType::Route, "r2"));
        assert_eq!(drain(&mut g), ["e2", "l1"]);
        g.answered("l1");
        assert_eq!(drain(&mut g), ["r2"]);
        assert_eq!(g.queued(), 0);
    }

    #[test]
    fn one_type_keeps_its_order_and_pipelines() {
        let mut g = Gate::default();
        for n in ["e1", "e2", "e3"] {
            g.push(msg(ResourceType::Endpoint, n));
        }
        assert_eq!(drain(&mut g), ["e1", "e2", "e3"]);
        g.push(msg(ResourceType::Cluster, "c1"));
        g.push(msg(ResourceType::Cluster, "c2"));
        g.push(msg(ResourceType::Endpoint, "e4"));
        assert_eq!(drain(&mut g), ["c1", "c2"]);
        g.answered("c2");
        assert!(drain(&mut g).is_empty(), "c1 is still in flight");
        g.answered("c1");
        assert_eq!(drain(&mut g), ["e4"]);
    }

    #[test]
    fn an_undecodable_or_unordered_response_never_waits() {
        let mut g = Gate::default();
        g.push(msg(ResourceType::Cluster, "c1"));
        g.push(Msg::new(Bytes::from_static(b"\xff\xff")));
        g.push(msg(ResourceType::Secret, "s1"));
        assert_eq!(drain(&mut g).len(), 3);
    }
}
