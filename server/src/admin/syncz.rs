//! `/debug/syncz`: every connected proxy, with per type what was sent and ACKed
//! (versions, nonces, snapshot sequences), the last NACK and its text, and how far
//! behind the current snapshot it is; plus a verdict per type that `deltapilot
//! proxy-status` prints:
//!
//! - `NOT_SENT`: the proxy has not asked for this type;
//! - `NACKED`: its latest answer for the type was a NACK;
//! - `STALE`: a response is waiting for its ACK, changes wait to be sent, or a
//!   snapshot the stream has not looked at yet changed names it wants;
//! - `SYNCED`: none of that (it holds what the current snapshot says).
//!
//! "Behind" counts snapshots since the one its last ACKed response reflected, and
//! the names of this type changed since then that its view holds (`null` when the
//! snapshot no longer remembers that far back: more than `RECENT_CHANGES`
//! snapshots).
//!
//! What it does NOT do: change any stream.

use deltapilot_model::Proxy;
use deltapilot_xds::snapshot::Snapshot;
use serde::Serialize;

use crate::xds::registry::{StreamStatus, TypeStatus};

/// A type's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Sync {
    /// Not requested.
    NotSent,
    /// Last answer was a NACK.
    Nacked,
    /// Something is in flight or waiting.
    Stale,
    /// Holds the current state.
    Synced,
}

/// How far behind one type is.
#[derive(Debug, Clone, Serialize)]
pub struct Behind {
    /// Snapshots published since the one its last ACKed response reflected.
    pub snapshots: Option<u64>,
    /// Names of this type its view holds that changed since then (`None`: too
    /// far back to know).
    pub changes: Option<usize>,
}

/// One type of one proxy, as served.
#[derive(Debug, Clone, Serialize)]
pub struct TypeView {
    /// The verdict.
    pub status: Sync,
    /// Subscribed to everything of the type.
    pub wildcard: bool,
    /// Names subscribed explicitly.
    pub subscribed: usize,
    /// Resources it holds per what was sent.
    pub held: usize,
    /// Last response sent: nonce, snapshot seq, `version_info` (SotW).
    pub sent_nonce: Option<String>,
    /// Snapshot seq of the last response sent.
    pub sent_seq: Option<u64>,
    /// `version_info` of the last response sent (SotW only).
    pub sent_version: Option<String>,
    /// Last ACKed response: nonce.
    pub acked_nonce: Option<String>,
    /// Snapshot seq the last ACKed response reflected.
    pub acked_seq: Option<u64>,
    /// `version_info` last ACKed (SotW only).
    pub acked_version: Option<String>,
    /// Nonce waiting for ACK/NACK.
    pub in_flight_nonce: Option<String>,
    /// NACKs received.
    pub nacks: u64,
    /// Text of the last NACK, if the latest answer was one.
    pub last_nack: Option<String>,
    /// How far behind.
    pub behind: Behind,
}

/// A connected proxy (one stream).
#[derive(Debug, Clone, Serialize)]
pub struct ProxyView {
    /// Node id (`None` until a request carried a node).
    pub id: Option<String>,
    /// Node cluster.
    pub cluster: Option<String>,
    /// `sidecar`, `router` or `proxyless_grpc`.
    pub proxy_type: Option<&'static str>,
    /// Namespace from the node.
    pub namespace: Option<String>,
    /// The key of its view in the current snapshot (`default/<type>` or
    /// `sidecar/<Sidecar key>`).
    pub view_key: Option<String>,
    /// Workload IPs from the node.
    pub ips: Vec<String>,
    /// Stream id.
    pub stream: u64,
    /// `delta` or `sotw`.
    pub api: &'static str,
    /// gRPC service.
    pub service: &'static str,
    /// Seconds since the Unix epoch when the stream opened.
    pub connected_at_unix: u64,
    /// Newest snapshot the stream has taken into account.
    pub seq_seen: u64,
    /// Per type (`cds`, `eds`, `lds`, `rds`).
    pub types: std::collections::BTreeMap<&'static str, TypeView>,
}

/// The whole `/debug/syncz` answer.
#[derive(Debug, Clone, Serialize)]
pub struct Syncz {
    /// The current snapshot's seq.
    pub snapshot_seq: u64,
    /// Its log position.
    pub snapshot_position: String,
    /// Every live stream.
    pub proxies: Vec<ProxyView>,
}

fn type_view(t: &TypeStatus, proxy: Option<&Proxy>, seen: u64, snap: &Snapshot) -> TypeView {
    let key = match proxy {
        Some(p) => snap.view_key(p),
        None => deltapilot_xds::view::ViewKey::Default(Default::default()),
    };
    let view = snap.delivered_view(&key, t.resource_type, t.route_delivery);
    // A VHDS name is wanted through its namespace (before its last `/`) too.
    let vhds = t.resource_type == deltapilot_xds::ResourceType::VirtualHost;
    let subscribed = |name: &str| t.names.iter().any(|n| &**n == name);
    let wants = |name: &str| {
        t.wildcard
            || subscribed(name)
            || (vhds && name.rfind('/').is_some_and(|at| subscribed(&name[..at])))
    };
    let relevant_since = |seq: u64| {
        snap.view_changes_since(&key, seq).map(|cs| {
            let tc = cs.of(t.resource_type);
            tc.upserted
                .iter()
                .filter(|n| view.contains_key(n) && wants(n))
                .chain(tc.removed.iter().filter(|n| wants(n)))
                .count()
        })
    };
    let behind = match t.acked_seq {
        None => Behind {
            snapshots: None,
            changes: None,
        },
        Some(a) => Behind {
            snapshots: Some(snap.seq.saturating_sub(a)),
            changes: relevant_since(a),
        },
    };
    // The verdict follows the stream's own state: once it has looked at the
    // current snapshot, nothing in flight and nothing pending means it holds
    // what that snapshot says (a name changed and changed back needs no push).
    let unseen = seen < snap.seq && relevant_since(seen) != Some(0);
    let status = if !t.requested {
        Sync::NotSent
    } else if t.last_nack.is_some() {
        Sync::Nacked
    } else if t.in_flight.is_some() || t.pending || unseen {
        Sync::Stale
    } else {
        Sync::Synced
    };
    TypeView {
        status,
        wildcard: t.wildcard,
        subscribed: t.names.len(),
        held: t.held,
        sent_nonce: t.sent_nonce.clone(),
        sent_seq: t.sent_seq,
        sent_version: t.sent_version.clone(),
        acked_nonce: t.acked_nonce.clone(),
        acked_seq: t.acked_seq,
        acked_version: t.acked_version.clone(),
        in_flight_nonce: t.in_flight.clone(),
        nacks: t.nacks,
        last_nack: t.last_nack.clone(),
        behind,
    }
}

/// The syncz view of `streams` against the current snapshot.
pub fn syncz(streams: &[StreamStatus], snap: &Snapshot) -> Syncz {
    let proxies = streams
        .iter()
        .map(|s| {
            let p = s.proxy.as_ref();
            ProxyView {
                id: p.map(|p| p.id.to_string()),
                cluster: p.map(|p| p.cluster.to_string()),
                proxy_type: p.map(|p| p.proxy_type.as_str()),
                namespace: p.map(|p| p.namespace.to_string()),
                view_key: p.map(|p| snap.view_key(p).to_string()),
                ips: p
                    .map(|p| p.ips.iter().map(|i| i.to_string()).collect())
                    .unwrap_or_default(),
                stream: s.stream,
                api: s.api,
                service: s.service,
                connected_at_unix: s
                    .connected_at
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
                seq_seen: s.seq,
                types: s
                    .types
                    .iter()
                    .map(|t| (t.resource_type.short_name(), type_view(t, p, s.seq, snap)))
                    .collect(),
            }
        })
        .collect();
    Syncz {
        snapshot_seq: snap.seq,
        snapshot_position: snap.position.to_string(),
        proxies,
    }
}
