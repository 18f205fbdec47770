//! What one type of one stream has sent and how the client answered: the
//! bookkeeping the delta and state-of-the-world state machines keep the same way,
//! and turn into the debug views' [`TypeStatus`].
//!
//! What it does NOT do: decide what to send, or match a request's nonce against
//! the response in flight (each protocol does, with its own in-flight record).

use std::collections::BTreeSet;
use std::sync::Arc;

use deltapilot_xds::ResourceType;
use deltapilot_xds::view::RouteDelivery;

use super::registry::TypeStatus;

/// A response as the status remembers it. `V` is its `version_info`:
/// [`NoVersion`] for delta, a `String` for state of the world.
#[derive(Debug, Clone)]
pub(crate) struct SentResponse<V> {
    /// Its nonce.
    pub(crate) nonce: String,
    /// The snapshot seq it reflected.
    pub(crate) seq: u64,
    /// Its `version_info`.
    pub(crate) version: V,
}

/// The version of a delta response, which has none: delta versions are per
/// resource. Costs nothing in the status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NoVersion;

impl From<NoVersion> for Option<String> {
    fn from(_: NoVersion) -> Self {
        None
    }
}

/// The last response sent, the last one ACKed, and the NACKs of one type.
#[derive(Debug)]
pub(crate) struct AckStatus<V> {
    last_sent: Option<SentResponse<V>>,
    last_acked: Option<SentResponse<V>>,
    /// The error text of the last NACK, while the latest answer is a NACK.
    last_nack: Option<String>,
    nacks: u64,
}

impl<V> Default for AckStatus<V> {
    fn default() -> Self {
        AckStatus {
            last_sent: None,
            last_acked: None,
            last_nack: None,
            nacks: 0,
        }
    }
}

/// A type's subscription, as the debug views show it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Subscription<'a> {
    /// Whether the client has asked for the type at all.
    pub(crate) requested: bool,
    /// Whether it subscribed to everything of the type.
    pub(crate) wildcard: bool,
    /// The names it subscribed to explicitly.
    pub(crate) names: &'a BTreeSet<Arc<str>>,
}

impl<V: Clone + Into<Option<String>>> AckStatus<V> {
    /// Notes a response sent.
    pub(crate) fn sent(&mut self, response: SentResponse<V>) {
        self.last_sent = Some(response);
    }

    /// Notes that the client ACKed `response`.
    pub(crate) fn acked(&mut self, response: SentResponse<V>) {
        self.last_nack = None;
        self.last_acked = Some(response);
    }

    /// Notes that the client NACKed the response in flight with `message`.
    pub(crate) fn nacked(&mut self, message: &str) {
        self.nacks += 1;
        self.last_nack = Some(message.to_owned());
    }

    /// The nonce of the last response sent.
    pub(crate) fn last_nonce(&self) -> Option<&str> {
        self.last_sent.as_ref().map(|r| r.nonce.as_str())
    }

    /// The last NACK's error message, if the latest answer was a NACK.
    pub(crate) fn last_nack(&self) -> Option<&str> {
        self.last_nack.as_deref()
    }

    /// How many NACKs the client has sent.
    pub(crate) fn nacks(&self) -> u64 {
        self.nacks
    }

    /// The debug views' status of the type: this exchange, plus the
    /// subscription, the resources held, the nonce in flight and whether work
    /// is pending, which each protocol tracks its own way.
    pub(crate) fn type_status(
        &self,
        resource_type: ResourceType,
        subscription: Subscription<'_>,
        held: usize,
        in_flight: Option<&str>,
        pending: bool,
    ) -> TypeStatus {
        TypeStatus {
            resource_type,
            requested: subscription.requested,
            wildcard: subscription.wildcard,
            names: subscription.names.iter().cloned().collect(),
            held,
            sent_nonce: self.last_sent.as_ref().map(|r| r.nonce.clone()),
            sent_seq: self.last_sent.as_ref().map(|r| r.seq),
            sent_version: self
                .last_sent
                .as_ref()
                .and_then(|r| r.version.clone().into()),
            acked_nonce: self.last_acked.as_ref().map(|r| r.nonce.clone()),
            acked_seq: self.last_acked.as_ref().map(|r| r.seq),
            acked_version: self
                .last_acked
                .as_ref()
                .and_then(|r| r.version.clone().into()),
            in_flight: in_flight.map(str::to_owned),
            pending,
            nacks: self.nacks,
            last_nack: self.last_nack.clone(),
            route_delivery: RouteDelivery::Inline,
        }
    }
}
