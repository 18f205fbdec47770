//! The registry of live xDS streams, for the admin debug views (`/debug/syncz`,
//! `/debug/config_dump?proxy=ID`, `deltapilot proxy-status`).
//!
//! Each stream registers a handle to its protocol state when it opens and is
//! removed when its task ends. Nothing is copied on the hot path: a status is
//! computed only when a debug view asks, by briefly locking that stream's state
//! (the stream loop holds the same lock only while it handles one request,
//! snapshot or response, never across an await).
//!
//! What it does NOT do: judge whether a proxy is in sync (the admin views compare
//! a status with the current snapshot) or keep anything about closed streams.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use deltapilot_model::Proxy;
use deltapilot_xds::ResourceType;
use deltapilot_xds::view::RouteDelivery;

/// One type of one stream, as the protocol state machine sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeStatus {
    /// The type.
    pub resource_type: ResourceType,
    /// Whether the client has asked for this type at all.
    pub requested: bool,
    /// Whether it subscribed to everything of the type.
    pub wildcard: bool,
    /// The names it subscribed to explicitly.
    pub names: Vec<Arc<str>>,
    /// Resources the client holds per what was sent (delta: tracked per name;
    /// state of the world: the last full state sent).
    pub held: usize,
    /// Nonce of the last response sent.
    pub sent_nonce: Option<String>,
    /// Snapshot sequence the last response sent reflected.
    pub sent_seq: Option<u64>,
    /// `version_info` of the last response sent (state of the world only).
    pub sent_version: Option<String>,
    /// Nonce of the last response the client ACKed.
    pub acked_nonce: Option<String>,
    /// Snapshot sequence the last ACKed response reflected.
    pub acked_seq: Option<u64>,
    /// `version_info` the client last ACKed (state of the world only).
    pub acked_version: Option<String>,
    /// Nonce of the response waiting for an ACK or NACK.
    pub in_flight: Option<String>,
    /// Whether changes are waiting to be sent (behind the response in flight, or
    /// not yet picked up by the stream loop).
    pub pending: bool,
    /// NACKs received for this type.
    pub nacks: u64,
    /// The error text of the last NACK, if the latest answer was a NACK.
    pub last_nack: Option<String>,
    /// How the stream delivers routes (SotW: always inline), so the debug
    /// views judge it against the maps it is sent from.
    pub route_delivery: RouteDelivery,
}

/// One stream's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStatus {
    /// Stream id (also the first part of its nonces).
    pub stream: u64,
    /// `delta` or `sotw`.
    pub api: &'static str,
    /// The gRPC service (ADS or a per-type one).
    pub service: &'static str,
    /// The proxy, once a request carried its node.
    pub proxy: Option<Proxy>,
    /// When the stream opened.
    pub connected_at: SystemTime,
    /// The newest snapshot the stream has taken into account.
    pub seq: u64,
    /// Per type, in push order.
    pub types: Vec<TypeStatus>,
}

/// What a registered stream can report; the protocol state behind a mutex.
pub trait Inspect: Send + Sync {
    /// The proxy, the snapshot seen, and per-type status.
    fn inspect(&self) -> (Option<Proxy>, u64, Vec<TypeStatus>);
}

#[derive(Clone)]
struct Entry {
    api: &'static str,
    service: &'static str,
    connected_at: SystemTime,
    state: Arc<dyn Inspect>,
}

/// The live streams.
#[derive(Default)]
pub struct StreamRegistry {
    streams: Mutex<BTreeMap<u64, Entry>>,
}

impl std::fmt::Debug for StreamRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamRegistry")
            .field("streams", &self.len())
            .finish()
    }
}

/// Removes its stream from the registry when dropped (when the stream task ends).
pub struct Registration {
    registry: Arc<StreamRegistry>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.id);
    }
}

impl StreamRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.streams.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers stream `id` until the returned guard is dropped.
    pub fn register(
        self: &Arc<Self>,
        id: u64,
        api: &'static str,
        service: &'static str,
        state: Arc<dyn Inspect>,
    ) -> Registration {
        self.lock().insert(
            id,
            Entry {
                api,
                service,
                connected_at: SystemTime::now(),
                state,
            },
        );
        Registration {
            registry: self.clone(),
            id,
        }
    }

    /// Live streams.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no stream is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every live stream's status, by stream id. The registry lock is released
    /// before any stream is inspected.
    pub fn statuses(&self) -> Vec<StreamStatus> {
        let entries: Vec<(u64, Entry)> =
            self.lock().iter().map(|(id, e)| (*id, e.clone())).collect();
        entries
            .into_iter()
            .map(|(stream, e)| {
                let (proxy, seq, types) = e.state.inspect();
                StreamStatus {
                    stream,
                    api: e.api,
                    service: e.service,
                    proxy,
                    connected_at: e.connected_at,
                    seq,
                    types,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(u64);

    impl Inspect for Fixed {
        fn inspect(&self) -> (Option<Proxy>, u64, Vec<TypeStatus>) {
            (None, self.0, Vec::new())
        }
    }

    #[test]
    fn streams_are_listed_while_registered_and_gone_after() {
        let reg = Arc::new(StreamRegistry::default());
        let a = reg.register(7, "delta", "ads", Arc::new(Fixed(3)));
        let b = reg.register(9, "sotw", "cds", Arc::new(Fixed(4)));
        let seen: Vec<(u64, &str, u64)> = reg
            .statuses()
            .iter()
            .map(|s| (s.stream, s.api, s.seq))
            .collect();
        assert_eq!(seen, [(7, "delta", 3), (9, "sotw", 4)]);
        drop(a);
        assert_eq!(reg.len(), 1);
        drop(b);
        assert!(reg.is_empty());
    }
}
