//! The per-stream delta xDS state machine (`DeltaDiscoveryRequest`/`Response`),
//! with no I/O: feed it requests and snapshots, ask it for the next response.
//!
//! Per type it keeps the subscription (legacy wildcard, `*`, explicit names), what
//! the client holds (`held`: name → version, seeded from
//! `initial_resource_versions` on reconnect), names that must be answered even if
//! unchanged (`forced`), names a snapshot touched (`dirty`, or "everything" when the
//! stream is too far behind for `Snapshot::changes_since`), the resolved work
//! waiting to go out, and the one response in flight. Work is coalesced: a proxy
//! that is behind gets the newest state of each changed name once, never a queue of
//! intermediate versions.
//!
//! What it does NOT do: talk gRPC, count metrics, or measure time (the loop in
//! `service` does).

use std::collections::{BTreeMap, BTreeSet};
use std::mem;
use std::sync::Arc;

use deltapilot_model::{Proxy, ProxyType};
use deltapilot_xds::snapshot::Snapshot;
use deltapilot_xds::view::ViewKey;
use deltapilot_xds::view::{Verdict, judge};
use deltapilot_xds::{Resource, ResourceMap, ResourceType};

use super::encode::DeltaOut;
use super::order::{TypeWork, pick, removal_bound};
use super::registry::TypeStatus;
use super::request::{DeltaRequest, text};
use super::status::{AckStatus, NoVersion, SentResponse, Subscription};
use super::{Acked, Limits, NonceGen, RequestOutcome, type_of};
use crate::Error;

/// Names a snapshot (or a subscription change) asks to re-examine.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Dirty {
    Names(BTreeSet<Arc<str>>),
    All,
}

impl Default for Dirty {
    fn default() -> Self {
        Dirty::Names(BTreeSet::new())
    }
}

#[derive(Debug, Clone)]
struct InFlight {
    nonce: String,
    seq: u64,
    push: bool,
    /// It carries assignments of clusters just (re)sent (EDS only).
    carries_owed_assignments: bool,
    /// The oldest snapshot seq its content may come from (see `order`).
    since: u64,
    /// It carries removals only.
    removals_only: bool,
}

#[derive(Debug, Default)]
struct TypeState {
    started: bool,
    /// VHDS: a subscribed name without a `/` stands for every resource in
    /// its namespace (`<name>/...`), as Envoy's namespace matching reads it.
    namespaced: bool,
    /// VHDS: a namespace was subscribed and no response of this type has
    /// gone since. Envoy's route configuration warms until one arrives, so
    /// an empty namespace is answered with an empty response.
    owes_answer: bool,
    started_seq: u64,
    wildcard: bool,
    names: BTreeSet<Arc<str>>,
    /// What the client holds. Usually the very map of the snapshot's view (see
    /// [`TypeState::reshare`]), so a synced stream keeps no per-name copy.
    held: ResourceMap,
    /// What the client reported in `initial_resource_versions` and has not been
    /// sent since (name → its resource, or a bodiless stand-in with the
    /// reported version). Built as `held` is, so a reconnect holding exactly
    /// the current view shares the snapshot's map here too: no per-name table
    /// (a hash insert and two reference counts per name, on names every
    /// reconnecting stream shares, were most of a reconnect storm's own work).
    reported_on_reconnect: ResourceMap,
    forced: BTreeSet<Arc<str>>,
    /// EDS only: assignments owed to clusters just (re)sent, which listeners and
    /// routes must not overtake (see `order`).
    owed_to_sent_clusters: BTreeSet<Arc<str>>,
    dirty: Dirty,
    /// Resolved upserts waiting to be sent: name → the resource to send.
    pending_upserts: BTreeMap<Arc<str>, Arc<Resource>>,
    /// Pending removals, with the stream seq at which each was decided.
    pending_removals: BTreeMap<Arc<str>, u64>,
    /// The oldest snapshot seq that pending work (dirty, forced, pending upserts
    /// and removals) may come from; `None` when there is none. Set when work
    /// arrives, cleared when all of it has been sent: removals of the types this
    /// one can reference wait only for work this old (see `order`).
    pending_since: Option<u64>,
    in_flight: Option<InFlight>,
    /// The last response sent and ACKed, and the NACKs.
    acks: AckStatus<NoVersion>,
}

impl TypeState {
    fn wants(&self, name: &str) -> bool {
        self.started
            && (self.wildcard
                || self.names.contains(name)
                || (self.namespaced
                    && namespace_of(name).is_some_and(|ns| self.names.contains(ns))))
    }

    /// The names of `view` in subscribed namespace `ns` (VHDS).
    fn in_namespace<'v>(view: &'v ResourceMap, ns: &'v str) -> impl Iterator<Item = &'v Arc<str>> {
        view.keys().filter(move |n| namespace_of(n) == Some(ns))
    }

    fn mark(&mut self, name: &Arc<str>) {
        if let Dirty::Names(s) = &mut self.dirty {
            s.insert(name.clone());
        }
    }

    /// Notes that work from snapshot `seq` (or later) has arrived.
    fn pending_from(&mut self, seq: u64) {
        self.pending_since.get_or_insert(seq);
    }

    fn has_pending(&self) -> bool {
        self.owes_answer
            || !self.pending_upserts.is_empty()
            || !self.pending_removals.is_empty()
            || !self.forced.is_empty()
            || !matches!(&self.dirty, Dirty::Names(n) if n.is_empty())
    }

    /// Turns dirty and forced names into pending upserts and removals; `seq` is
    /// the stream's snapshot seq, recorded with each new removal.
    fn resolve(&mut self, view: &ResourceMap, seq: u64) {
        let candidates: BTreeSet<Arc<str>> = match mem::take(&mut self.dirty) {
            // Holding exactly the view leaves nothing to compare: every name in it
            // is held at its version, and nothing outside it is held. Only forced
            // names (below) can need an answer.
            Dirty::All if self.held.ptr_eq(view) => {
                self.pending_upserts.clear();
                self.pending_removals.clear();
                BTreeSet::new()
            }
            Dirty::All => {
                self.pending_upserts.clear();
                self.pending_removals.clear();
                let mut c: BTreeSet<Arc<str>> = self.held.keys().cloned().collect();
                c.extend(self.names.iter().filter(|n| view.contains_key(n)).cloned());
                if self.wildcard || self.namespaced {
                    c.extend(view.keys().filter(|n| self.wants(n)).cloned());
                }
                c
            }
            Dirty::Names(s) => s,
        };
        let forced = mem::take(&mut self.forced);
        for name in candidates.iter().chain(forced.iter()) {
            self.pending_upserts.remove(name);
            self.pending_removals.remove(name);
            if !self.wants(name) {
                // Reported on reconnect but not subscribed: nothing to track.
                self.held.remove(name);
                continue;
            }
            // A forced name is answered whatever the client holds; any other
            // is judged by the engine's one comparison of view and held.
            let verdict = match (forced.contains(name), view.get(name)) {
                (true, Some(r)) => Verdict::Upsert(r),
                (true, None) => Verdict::Remove,
                (false, _) => judge(view, &self.held, name),
            };
            match verdict {
                Verdict::Upsert(r) => {
                    self.pending_upserts.insert(name.clone(), r.clone());
                }
                Verdict::Remove => {
                    self.pending_removals.insert(name.clone(), seq);
                }
                Verdict::Nothing => {}
            }
        }
        // `reported_on_reconnect` only tells whether a resend repeats what the client reported on
        // reconnect; names no longer pending can never be such a resend, so let
        // them (and, once empty, the table) go.
        if !self.reported_on_reconnect.is_empty() {
            let reported = &self.reported_on_reconnect;
            self.reported_on_reconnect = self
                .pending_upserts
                .keys()
                .filter_map(|n| reported.get(n).cloned())
                .collect();
        }
        if !self.owed_to_sent_clusters.is_empty() {
            let upserts = &self.pending_upserts;
            self.owed_to_sent_clusters
                .retain(|n| upserts.contains_key(n));
        }
        if !self.has_pending() {
            self.pending_since = None;
        }
        self.reshare(view);
    }

    /// Shares the snapshot's map as `held` once the client holds exactly it.
    ///
    /// Every name whose view entry differs from `held` (and that the stream
    /// wants) sits in `dirty`, `forced`, `pending_upserts` or `pending_removals`
    /// until it is sent, and `held` only holds wanted names. So with all four
    /// empty, `held` is the view restricted to the wanted names, and equal sizes
    /// mean it is the whole view: the private copy (built while sending, or from
    /// `initial_resource_versions`) can give way to a clone of the snapshot's
    /// persistent map, which costs nothing per name. The next change copies a
    /// path (the root array, two nodes, one bucket; see `ResourceMap`), and the
    /// send after it shares again.
    fn reshare(&mut self, view: &ResourceMap) {
        if !self.has_pending() && self.held.len() == view.len() && !self.held.ptr_eq(view) {
            self.held = view.clone();
        }
    }

    fn work(&self, t: ResourceType) -> TypeWork {
        let in_flight_since = self.in_flight.as_ref().map(|f| f.since);
        TypeWork {
            upserts: !self.pending_upserts.is_empty() || self.owes_answer,
            removals: !self.pending_removals.is_empty(),
            in_flight: self.in_flight.is_some(),
            unfinished_since: match (self.pending_since, in_flight_since) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            oldest_removal: self
                .pending_removals
                .values()
                .copied()
                .min()
                .unwrap_or(u64::MAX),
            // Endpoint churn of clusters the proxy already holds cannot make a
            // listener or route point at something missing. Nor can removals
            // (a later type's upserts come from snapshots without the removed
            // names): a removal in flight to a slow proxy must not hold back
            // every later type's changes for its round trip.
            ungated: (t == ResourceType::Endpoint
                && self.owed_to_sent_clusters.is_empty()
                && !self
                    .in_flight
                    .as_ref()
                    .is_some_and(|f| f.carries_owed_assignments))
                || (self.pending_upserts.is_empty()
                    && !self.owes_answer
                    && self.in_flight.as_ref().is_none_or(|f| f.removals_only)),
        }
    }
}

/// A response the loop should send, with what the metrics need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaPush {
    /// The response.
    pub out: DeltaOut,
    /// Its type.
    pub t: ResourceType,
    /// Resources sent at exactly the version the client reported in its
    /// `initial_resource_versions` (a correct server keeps this at 0).
    pub resent_known: usize,
}

/// One delta xDS stream's protocol state.
#[derive(Debug)]
pub struct DeltaStream {
    proxy: Option<Proxy>,
    /// The key of the view this stream was last judged against: a snapshot
    /// that gives the proxy another key moves it (a full diff of the new view
    /// against what it holds: the minimal delta).
    key: Option<ViewKey>,
    fixed: Option<ResourceType>,
    limits: Limits,
    nonces: NonceGen,
    seq: u64,
    total_names: usize,
    types: [TypeState; ResourceType::SNAPSHOT_COUNT],
}

impl DeltaStream {
    /// A new stream, positioned at `snap`. `fixed` restricts it to one type (the
    /// per-type services such as `DeltaClusters`); `None` is ADS.
    pub fn new(fixed: Option<ResourceType>, limits: Limits, snap: &Snapshot) -> Self {
        let mut types: [TypeState; ResourceType::SNAPSHOT_COUNT] = Default::default();
        types[ResourceType::VirtualHost.index()].namespaced = true;
        DeltaStream {
            proxy: None,
            key: None,
            fixed,
            limits,
            nonces: NonceGen::default(),
            seq: snap.seq,
            total_names: 0,
            types,
        }
    }

    /// The proxy, from the node of the first request that carried one.
    pub fn proxy(&self) -> Option<&Proxy> {
        self.proxy.as_ref()
    }

    /// The proxy's view key in `snap` (`None` until a request named the node:
    /// a key guessed without the proxy must never stick).
    fn key_in(&self, snap: &Snapshot) -> Option<ViewKey> {
        self.proxy.as_ref().map(|p| snap.view_key(p))
    }

    /// The key to judge against in `snap`: the proxy's, or the default
    /// sidecar view while the node is unknown.
    fn key_or_default(&self, snap: &Snapshot) -> ViewKey {
        self.key
            .clone()
            .or_else(|| self.key_in(snap))
            .unwrap_or(ViewKey::Default(ProxyType::default()))
    }

    /// The key of the view this stream is judged against.
    pub fn view_key(&self) -> Option<&ViewKey> {
        self.key.as_ref()
    }

    /// The last NACK's error message for a type, if its latest answer was a NACK.
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
                let mut status = s.acks.type_status(
                    *t,
                    subscription,
                    s.held.len(),
                    s.in_flight.as_ref().map(|f| f.nonce.as_str()),
                    s.has_pending(),
                );
                status.route_delivery = self.limits.route_delivery;
                status
            })
            .collect()
    }

    /// Applies one request: ACK/NACK by `response_nonce`, then subscription
    /// changes (applied even when the nonce is stale, as the spec requires). Names
    /// and versions the snapshot already holds are shared with it (`snap`'s
    /// `Arc<str>`s) rather than allocated per stream.
    pub fn on_request(
        &mut self,
        req: &DeltaRequest,
        snap: &Snapshot,
    ) -> Result<RequestOutcome, Error> {
        if self.proxy.is_none()
            && let Some(node) = req.decode_node()?
        {
            self.proxy = Some(deltapilot_xds::proxy_from_node(&node));
        }
        let t = type_of(text(&req.type_url)?, self.fixed)?;
        if self.key.is_none() {
            self.key = self.key_in(snap);
        }
        let key = self.key_or_default(snap);
        let view = snap.delivered_view(&key, t, self.limits.route_delivery);
        let subscribe: Vec<&str> = req.subscribe.iter().map(text).collect::<Result<_, _>>()?;
        let unsubscribe: Vec<&str> = req.unsubscribe.iter().map(text).collect::<Result<_, _>>()?;
        let seq = self.seq;
        let adding = subscribe
            .iter()
            .filter(|n| !self.types[t.index()].names.contains(**n))
            .count();
        if self.total_names + adding > self.limits.max_names_per_stream {
            return Err(Error::TooManyNames {
                limit: self.limits.max_names_per_stream,
                requested: self.total_names + adding,
            });
        }
        let s = &mut self.types[t.index()];
        let mut outcome = RequestOutcome {
            t: Some(t),
            ..Default::default()
        };

        if !req.response_nonce.is_empty() {
            let nonce = &req.response_nonce[..];
            if let Some(f) = s.in_flight.take_if(|f| f.nonce.as_bytes() == nonce) {
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
                            version: NoVersion,
                        });
                    }
                }
            } else if s.acks.last_nonce().map(str::as_bytes) != Some(nonce) {
                outcome.stale_nonce = true;
            }
        }

        let first = !s.started;
        if first {
            s.started = true;
            s.started_seq = seq;
            s.dirty = Dirty::All;
            s.pending_from(seq);
            if holds_exactly(req, view)? {
                // A reconnect holding exactly the current view (the common case:
                // nothing changed while it was away): share the snapshot's map
                // rather than build a copy name by name.
                s.held = view.clone();
            } else {
                // What the client holds: the snapshot's own resource when the
                // versions match (nothing allocated), else a bodiless stand-in
                // carrying the reported version.
                for e in &req.initial_resource_versions {
                    let (n, v) = (text(&e.name)?, text(&e.version)?);
                    let r = match view.get(n) {
                        Some(r) if &*r.version == v => r.clone(),
                        found => Arc::new(Resource::stand_in(
                            found.map_or_else(|| Arc::from(n), |r| r.name.clone()),
                            Arc::from(v),
                        )),
                    };
                    s.held.insert(r);
                }
            }
            // Until something is sent, what the client reported is what it holds.
            s.reported_on_reconnect = s.held.clone();
            outcome.initial_versions = req.initial_resource_versions.len();
            if subscribe.is_empty() && unsubscribe.is_empty() {
                s.wildcard = true;
            }
        }
        for n in subscribe {
            if n == "*" {
                if !s.wildcard {
                    s.wildcard = true;
                    s.dirty = Dirty::All;
                    s.pending_from(seq);
                }
                continue;
            }
            let name: Arc<str> = match view.get(n) {
                Some(r) => r.name.clone(),
                None => Arc::from(n),
            };
            if s.names.insert(name.clone()) {
                self.total_names += 1;
            }
            if s.namespaced && namespace_of(&name).is_none() {
                // A namespace: every resource in it is answered as a newly
                // subscribed name would be, and an empty one with an empty
                // response (see `owes_answer`).
                let exact = view.get(&name).map(|r| &r.name);
                for n in TypeState::in_namespace(view, &name).chain(exact) {
                    if !(first && s.reported_on_reconnect.contains_key(n)) {
                        s.forced.insert(n.clone());
                    }
                }
                s.owes_answer = true;
                s.pending_from(seq);
                continue;
            }
            // Every newly subscribed name is answered, unless the client told us on
            // reconnect that it already holds it (then only a version change is sent).
            if !(first && s.reported_on_reconnect.contains_key(&name)) {
                s.forced.insert(name);
                s.pending_from(seq);
            }
        }
        for n in unsubscribe {
            if n == "*" {
                s.wildcard = false;
                let names = &s.names;
                let gone: Vec<Arc<str>> = s
                    .held
                    .keys()
                    .filter(|k| !names.contains(*k))
                    .cloned()
                    .collect();
                for k in gone {
                    s.held.remove(&k);
                }
                s.pending_upserts.retain(|k, _| names.contains(k));
                s.pending_removals.retain(|k, _| names.contains(k));
                continue;
            }
            if s.names.remove(n) {
                self.total_names -= 1;
            }
            if s.wildcard {
                // Still subscribed through the wildcard. The spec asks for an
                // answer: the resource if the wildcard includes it, its removal if
                // not (a name the client asked for that does not exist).
                let name = view.get(n).map_or_else(|| Arc::from(n), |r| r.name.clone());
                s.forced.insert(name);
                s.pending_from(seq);
            } else {
                s.held.remove(n);
                s.pending_upserts.remove(n);
                s.pending_removals.remove(n);
                s.forced.remove(n);
                if s.namespaced && namespace_of(n).is_none() {
                    // The namespace's resources go with it, unless still
                    // subscribed by their own names.
                    let gone: Vec<Arc<str>> = (s.held.keys())
                        .chain(s.pending_upserts.keys())
                        .chain(s.pending_removals.keys())
                        .chain(s.forced.iter())
                        .filter(|k| namespace_of(k) == Some(n) && !s.wants(k))
                        .cloned()
                        .collect();
                    for k in gone {
                        s.held.remove(&k);
                        s.pending_upserts.remove(&k);
                        s.pending_removals.remove(&k);
                        s.forced.remove(&k);
                    }
                }
            }
        }
        Ok(outcome)
    }

    /// Notes a newly published snapshot: the names it changed become dirty (all
    /// names, if this stream is further behind than the snapshot remembers).
    pub fn on_snapshot(&mut self, snap: &Snapshot) {
        if snap.seq == self.seq {
            return;
        }
        let key = self.key_in(snap);
        let moved = matches!((&self.key, &key), (Some(a), Some(b)) if a != b);
        let changes = if moved {
            None
        } else {
            let k = key
                .clone()
                .unwrap_or(ViewKey::Default(ProxyType::default()));
            snap.view_changes_since(&k, self.seq)
        };
        self.key = key;
        // The changes come from the snapshots after the one this stream last saw.
        let from = self.seq + 1;
        self.seq = snap.seq;
        for t in ResourceType::ALL {
            let s = &mut self.types[t.index()];
            if !s.started {
                continue;
            }
            match &changes {
                None => {
                    s.dirty = Dirty::All;
                    s.pending_from(from);
                }
                Some(cs) => {
                    let tc = cs.of(t);
                    for n in tc.upserted.iter().chain(tc.removed.iter()) {
                        s.mark(n);
                        s.pending_from(from);
                    }
                }
            }
        }
    }

    /// The next response to send, if any may go now (make-before-break order, at
    /// most one in flight per type). Call until it returns `None`.
    pub fn next_response(&mut self, snap: &Snapshot) -> Option<DeltaPush> {
        if snap.seq != self.seq {
            self.on_snapshot(snap);
        }
        let key = self.key_or_default(snap);
        let delivery = self.limits.route_delivery;
        let mut work = [TypeWork::default(); ResourceType::SNAPSHOT_COUNT];
        for t in ResourceType::ALL {
            let s = &mut self.types[t.index()];
            if s.started {
                s.resolve(snap.delivered_view(&key, t, delivery), self.seq);
            }
            work[t.index()] = s.work(t);
        }
        let p = pick(&work)?;
        let bound = removal_bound(&work, p.t.index());
        let max = self.limits.max_resources_per_response.max(1);
        let s = &mut self.types[p.t.index()];
        let mut out = DeltaOut {
            type_url: Some(p.t),
            nonce: self.nonces.next(),
            resources: Vec::new(),
            removed: Vec::new(),
        };
        let mut resent_known = 0;
        let mut carries_owed = false;
        if p.upserts {
            while out.resources.len() < max {
                let Some((name, r)) = s.pending_upserts.pop_first() else {
                    break;
                };
                if s.reported_on_reconnect
                    .remove(&name)
                    .is_some_and(|v| v.version == r.version)
                {
                    resent_known += 1;
                }
                carries_owed |= s.owed_to_sent_clusters.remove(&name);
                s.held.insert(r.clone());
                out.resources.push(r);
            }
        }
        if p.removals {
            // Only the removals every referencing type has caught up with.
            let ready: Vec<Arc<str>> = s
                .pending_removals
                .iter()
                .filter(|(_, decided)| **decided < bound)
                .map(|(name, _)| name.clone())
                .collect();
            for name in ready {
                s.pending_removals.remove(&name);
                s.held.remove(&name);
                s.reported_on_reconnect.remove(&name);
                out.removed.push(name);
            }
        }
        let since = s.pending_since.unwrap_or(self.seq);
        s.owes_answer = false;
        if !s.has_pending() {
            s.pending_since = None;
        }
        s.reshare(snap.delivered_view(&key, p.t, delivery));
        s.acks.sent(SentResponse {
            nonce: out.nonce.clone(),
            seq: self.seq,
            version: NoVersion,
        });
        s.in_flight = Some(InFlight {
            nonce: out.nonce.clone(),
            seq: self.seq,
            push: self.seq > s.started_seq,
            carries_owed_assignments: carries_owed,
            since,
            removals_only: out.resources.is_empty(),
        });
        // Envoy re-creates a cluster on update and waits for its endpoints again, so
        // a (re)sent cluster's ClusterLoadAssignment always follows it.
        if p.t == ResourceType::Cluster {
            let eds = &mut self.types[ResourceType::Endpoint.index()];
            for r in &out.resources {
                if eds.wants(&r.name) {
                    eds.forced.insert(r.name.clone());
                    eds.owed_to_sent_clusters.insert(r.name.clone());
                    eds.pending_from(self.seq);
                }
            }
        }
        Some(DeltaPush {
            out,
            t: p.t,
            resent_known,
        })
    }
}

/// The namespace of a VHDS name, the text before its last `/` (as Envoy's
/// `namespaceFromName` reads it), or `None` for a name without one.
fn namespace_of(name: &str) -> Option<&str> {
    name.rfind('/').map(|at| &name[..at])
}

/// Whether `req`'s `initial_resource_versions` name every resource of `view` at
/// its current version, and nothing else. Allocates nothing per name: each
/// name is looked up and its version compared in place, and repeated names
/// (a map on the wire may repeat a key) are told apart by the snapshot
/// resources they found. `Err` for a name or version that is not UTF-8.
fn holds_exactly(req: &DeltaRequest, view: &ResourceMap) -> Result<bool, Error> {
    let reported = &req.initial_resource_versions;
    if reported.len() != view.len() {
        // Fewer names cannot cover the view; more must repeat or add one. The
        // texts are checked by the caller's name-by-name pass.
        return Ok(false);
    }
    let mut found: Vec<usize> = Vec::with_capacity(reported.len());
    for e in reported {
        let (n, v) = (text(&e.name)?, text(&e.version)?);
        match view.get(n) {
            Some(r) if &*r.version == v => found.push(Arc::as_ptr(r) as usize),
            _ => return Ok(false),
        }
    }
    found.sort_unstable();
    found.dedup();
    Ok(found.len() == view.len())
}

#[cfg(test)]
#[path = "delta_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "delta_view_tests.rs"]
mod view_tests;

#[cfg(test)]
#[path = "delta_vhds_tests.rs"]
mod vhds_tests;
