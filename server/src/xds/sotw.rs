//! The per-stream state-of-the-world xDS state machine (`DiscoveryRequest`/
//! `Response`), with no I/O.
//!
//! Every response carries the full state of its type as this client sees it:
//! everything in the proxy's view for wildcard requests (Envoy's CDS and LDS), or
//! exactly the requested names that exist (Envoy's EDS and RDS, and proxyless gRPC,
//! which names every resource it wants: LDS `[host:port]` → RDS → CDS → EDS).
//! The node is remembered from the first request (gRPC sends it only there).
//! Stale requests (a nonce that is not the latest sent for the type) are ignored, as
//! the spec says; a client always repeats its full subscription in the next ACK.
//!
//! What it does NOT do: talk gRPC or count metrics (the loop in `service` does).

use std::collections::{BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use deltapilot_model::{Proxy, ProxyType};
use deltapilot_xds::snapshot::Snapshot;
use deltapilot_xds::view::{RouteDelivery, ViewKey};
use deltapilot_xds::{Resource, ResourceMap, ResourceType};
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;

use super::encode::SotwOut;
use super::order::{TypeWork, pick};
use super::registry::TypeStatus;
use super::status::{AckStatus, SentResponse, Subscription};
use super::{Acked, Limits, NonceGen, RequestOutcome, type_of};
use crate::Error;

#[derive(Debug, Clone)]
struct InFlight {
    nonce: String,
    seq: u64,
    push: bool,
    version: String,
}

#[derive(Debug, Default)]
struct TypeState {
    started: bool,
    started_seq: u64,
    wildcard: bool,
    /// The client has named resources (`*` included) on this type: from then on
    /// an empty list unsubscribes everything instead of meaning the legacy
    /// wildcard (xDS spec, "How the client specifies what resources to return").
    explicit: bool,
    names: BTreeSet<Arc<str>>,
    /// The state last sent: name → version.
    sent: HashMap<Arc<str>, Arc<str>>,
    must_respond: bool,
    dirty: bool,
    next_state: Option<Vec<Arc<Resource>>>,
    in_flight: Option<InFlight>,
    /// The last response sent and ACKed (with their `version_info`), and the NACKs.
    acks: AckStatus<String>,
}

impl TypeState {
    fn state(&self, view: &ResourceMap) -> Vec<Arc<Resource>> {
        if self.wildcard {
            view.values().cloned().collect()
        } else {
            self.names
                .iter()
                .filter_map(|n| view.get(n).cloned())
                .collect()
        }
    }

    fn work_flags(&mut self, view: &ResourceMap) -> TypeWork {
        if self.started && (self.dirty || self.must_respond) && self.next_state.is_none() {
            let state = self.state(view);
            let changed = state.len() != self.sent.len()
                || state
                    .iter()
                    .any(|r| self.sent.get(&r.name) != Some(&r.version));
            self.dirty = false;
            if changed || self.must_respond {
                self.next_state = Some(state);
            }
        }
        let (upserts, removals) = match &self.next_state {
            None => (false, false),
            Some(w) => {
                let names: BTreeSet<&str> = w.iter().map(|r| &*r.name).collect();
                let removals = self.sent.keys().any(|n| !names.contains(&**n));
                let upserts = self.must_respond
                    || w.iter().any(|r| self.sent.get(&r.name) != Some(&r.version));
                (upserts, removals)
            }
        };
        let in_flight = self.in_flight.is_some();
        TypeWork {
            upserts,
            removals,
            in_flight,
            // State of the world sends whole types; keep the strict order: any
            // work of a referencing type holds removals back (all of it counts as
            // from the oldest snapshot).
            ungated: false,
            unfinished_since: (upserts || removals || in_flight).then_some(0),
            oldest_removal: 0,
        }
    }
}

fn version_of(resources: &[Arc<Resource>]) -> String {
    let mut h = DefaultHasher::new();
    for r in resources {
        r.name.hash(&mut h);
        r.version.hash(&mut h);
    }
    format!("{:016x}", h.finish())
}

/// A response the loop should send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SotwPush {
    /// The response.
    pub out: SotwOut,
    /// Its type.
    pub t: ResourceType,
}

/// One state-of-the-world stream's protocol state.
#[derive(Debug)]
pub struct SotwStream {
    proxy: Option<Proxy>,
    /// The key of the view last sent from (see `DeltaStream`).
    key: Option<ViewKey>,
    fixed: Option<ResourceType>,
    limits: Limits,
    nonces: NonceGen,
    seq: u64,
    types: [TypeState; ResourceType::SNAPSHOT_COUNT],
}

impl SotwStream {
    /// A new stream positioned at `snap`; `fixed` restricts it to one type.
    pub fn new(fixed: Option<ResourceType>, limits: Limits, snap: &Snapshot) -> Self {
        SotwStream {
            proxy: None,
            key: None,
            fixed,
            limits,
            nonces: NonceGen::default(),
            seq: snap.seq,
            types: Default::default(),
        }
    }

    /// The proxy, from the node of the first request that carried one.
    pub fn proxy(&self) -> Option<&Proxy> {
        self.proxy.as_ref()
    }

    /// The last NACK's message for a type, if its latest answer was a NACK.
    pub fn last_nack(&self, t: ResourceType) -> Option<&str> {
        self.types[t.index()].acks.last_nack()
    }

    /// How many NACKs this stream has received for a type.
    pub fn nacks(&self, t: ResourceType) -> u64 {
        self.types[t.index()].acks.nacks()
    }

    /// How many responses are waiting for an ACK or NACK.
    pub fn in_flight(&self) -> usize {
        self.types.iter().filter(|s| s.in_flight.is_some()).count()
    }

    /// The newest snapshot this stream has taken into account.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Per-type status for the debug views (O(subscribed names)).
    pub fn type_statuses(&self) -> Vec<TypeStatus> {
        ResourceType::ALL
            .iter()
            .map(|t| {
                let s = &self.types[t.index()];
                let subscription = Subscription {
                    requested: s.started,
                    wildcard: s.wildcard,
                    names: &s.names,
                };
                s.acks.type_status(
                    *t,
                    subscription,
                    s.sent.len(),
                    s.in_flight.as_ref().map(|f| f.nonce.as_str()),
                    s.dirty || s.must_respond || s.next_state.is_some(),
                )
            })
            .collect()
    }

    /// Applies one request.
    pub fn on_request(&mut self, req: &DiscoveryRequest) -> Result<RequestOutcome, Error> {
        if self.proxy.is_none()
            && let Some(node) = &req.node
        {
            self.proxy = Some(deltapilot_xds::proxy_from_node(node));
        }
        let t = type_of(&req.type_url, self.fixed)?;
        let others: usize = self
            .types
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != t.index())
            .map(|(_, s)| s.names.len())
            .sum();
        if others + req.resource_names.len() > self.limits.max_names_per_stream {
            return Err(Error::TooManyNames {
                limit: self.limits.max_names_per_stream,
                requested: others + req.resource_names.len(),
            });
        }
        let seq = self.seq;
        let s = &mut self.types[t.index()];
        let mut outcome = RequestOutcome {
            t: Some(t),
            ..Default::default()
        };
        // A nonce on the first request of a type was not sent on this stream (it
        // comes from an earlier stream, or another type): the request is an
        // initial one, never a stale one to ignore (the client would wait forever).
        if !req.response_nonce.is_empty() && s.started {
            if s.acks.last_nonce() != Some(req.response_nonce.as_str()) {
                outcome.stale_nonce = true;
                return Ok(outcome);
            }
            if let Some(f) = s.in_flight.take_if(|f| f.nonce == req.response_nonce) {
                match &req.error_detail {
                    Some(status) => {
                        s.acks.nacked(&status.message);
                        outcome.nack = Some(status.message.clone());
                    }
                    None => {
                        outcome.ack = Some(Acked {
                            seq: f.seq,
                            push: f.push,
                        });
                        s.acks.acked(SentResponse {
                            nonce: f.nonce,
                            seq: f.seq,
                            version: f.version,
                        });
                    }
                }
            }
        }
        let first = !s.started;
        s.explicit |= !req.resource_names.is_empty();
        let wildcard = req.resource_names.iter().any(|n| n == "*")
            || (req.resource_names.is_empty() && !s.explicit);
        let names: BTreeSet<Arc<str>> = req
            .resource_names
            .iter()
            .filter(|n| *n != "*")
            .map(|n| Arc::from(n.as_str()))
            .collect();
        if first {
            s.started = true;
            s.started_seq = seq;
            s.must_respond = true;
        } else if names != s.names || wildcard != s.wildcard {
            s.must_respond = true;
        }
        s.wildcard = wildcard;
        s.names = names;
        if s.must_respond {
            s.next_state = None;
        }
        Ok(outcome)
    }

    /// The proxy's view key in `snap` (`None` until a request named the node:
    /// a key guessed without the proxy must never stick).
    fn key_in(&self, snap: &Snapshot) -> Option<ViewKey> {
        self.proxy.as_ref().map(|p| snap.view_key(p))
    }

    /// The key of the view this stream sends from.
    pub fn view_key(&self) -> Option<&ViewKey> {
        self.key.as_ref()
    }

    /// Notes a newly published snapshot.
    pub fn on_snapshot(&mut self, snap: &Snapshot) {
        if snap.seq == self.seq {
            return;
        }
        let key = self.key_in(snap);
        let moved = matches!((&self.key, &key), (Some(a), Some(b)) if a != b);
        let changes = if moved {
            None
        } else {
            let k = key.clone().unwrap_or(ViewKey::Default(ProxyType::Sidecar));
            snap.view_changes_since(&k, self.seq)
        };
        self.key = key;
        self.seq = snap.seq;
        for t in ResourceType::ALL {
            let s = &mut self.types[t.index()];
            if s.started && changes.as_ref().is_none_or(|cs| !cs.of(t).is_empty()) {
                s.dirty = true;
                s.next_state = None;
            }
        }
    }

    /// The next response to send, if any may go now. Call until `None`.
    pub fn next_response(&mut self, snap: &Snapshot) -> Option<SotwPush> {
        if snap.seq != self.seq {
            self.on_snapshot(snap);
        }
        if self.key.is_none() {
            self.key = self.key_in(snap);
        }
        let key = self
            .key
            .clone()
            .unwrap_or(ViewKey::Default(ProxyType::Sidecar));
        let mut work = [TypeWork::default(); ResourceType::SNAPSHOT_COUNT];
        for t in ResourceType::ALL {
            // State of the world cannot carry VHDS: routes stay inline.
            let view = snap.delivered_view(&key, t, RouteDelivery::Inline);
            work[t.index()] = self.types[t.index()].work_flags(view);
        }
        // State of the world cannot split a type's upserts from its removals; the
        // full state goes as soon as its upserts may.
        let p = pick(&work)?;
        let s = &mut self.types[p.t.index()];
        let resources = s.next_state.take()?;
        s.sent = resources
            .iter()
            .map(|r| (r.name.clone(), r.version.clone()))
            .collect();
        s.must_respond = false;
        let out = SotwOut {
            type_url: Some(p.t),
            version_info: version_of(&resources),
            nonce: self.nonces.next(),
            resources,
        };
        s.acks.sent(SentResponse {
            nonce: out.nonce.clone(),
            seq: self.seq,
            version: out.version_info.clone(),
        });
        s.in_flight = Some(InFlight {
            nonce: out.nonce.clone(),
            seq: self.seq,
            push: self.seq > s.started_seq,
            version: out.version_info.clone(),
        });
        if p.t == ResourceType::Cluster {
            // Envoy waits for endpoints again after a cluster update; answer EDS anew.
            let eds = &mut self.types[ResourceType::Endpoint.index()];
            if eds.started {
                eds.must_respond = true;
                eds.next_state = None;
            }
        }
        Some(SotwPush { out, t: p.t })
    }
}

#[cfg(test)]
#[path = "sotw_tests.rs"]
mod tests;
