//! The folded registry state: what the log says exists, in persistent maps that
//! consecutive snapshots share.
//!
//! [`ModelState`] holds two layers, both in `imbl` maps (cloning one is O(1); an
//! update copies only the path to the changed entry, so two snapshots share all
//! untouched nodes):
//!
//! - **Raw entities**, exactly as their sources last wrote them, each stamped with the
//!   source and resync generation of that write ([`Written`]):
//!   - services by `(entity key, source)`: several sources may define the same key;
//!   - endpoints by entity key (one owner at a time; the large maps are keyed by a
//!     128-bit hash of the key or hostname, see `HKey`, because string comparisons
//!     and string clones dominated the fold's cost), as plain records whose
//!     key text, source and shape the hostname index holds (see `endpoints`);
//!   - config objects by entity key (one owner at a time);
//!   - per source, the last resync generation started and completed ([`SourceGen`]),
//!     and a `COMPLETED` marker whose copies on a multi-partition log have not all
//!     been folded yet ([`PendingResync`]).
//! - **The merged view** everything downstream reads, derived from the raw layer and
//!   maintained incrementally:
//!   - one [`Service`] per hostname, chosen by the merge rule below;
//!   - the endpoints of each hostname, as the union over all sources: the keys
//!     of the endpoints that list it, in key order, each with the parts of the
//!     endpoint that change only with its shape (a rewrite of address, weight
//!     or health leaves this index untouched);
//!   - the traffic rules among the configs, parsed and indexed by host
//!     ([`ModelState::rules`], see `rules`), a function of the raw configs;
//!   - endpoint keys by address, for [`ModelState::proxy_service_instances`] and
//!     [`ModelState::management_ports`], built when first asked for (see
//!     `addr_index`).
//!
//! ## Merge rule (several sources, one hostname)
//!
//! Every raw service definition is a *claim* on its hostname, ordered by
//! `(source, namespace, entity key)`, compared as byte strings. **The lowest claim
//! wins**: the merged service of a hostname is exactly that definition (ports,
//! labels, resolution, namespace); the others are kept and take over, in that order,
//! when the winner is deleted or swept. This is Istio's aggregate-controller rule
//! ("the first registry wins") made independent of arrival order: the outcome is a
//! function of the set of definitions, never of which arrived first, so a replay and
//! a from-scratch rebuild agree. Operators pick the winner by naming sources (e.g.
//! `a-k8s:prod` before `file:/etc/mesh`).
//!
//! Endpoints are never merged away: the endpoints of a hostname are the union of
//! every stored endpoint that lists that hostname among its services, whichever
//! source wrote it.
//!
//! ## Resync and ownership
//!
//! See the `fold` module for the rules (sweep on completed resync, stale-generation
//! fence, single owner per endpoint/config key). This module only provides the
//! primitives that keep indexes and the hash consistent.
//!
//! ## Content hash
//!
//! [`ModelState::hash`] is the wrapping sum of one 64-bit xxh3 digest per raw entity
//! (over its kind, key, source, generation and canonical content; see `canon.rs`)
//! and per source's resync bookkeeping (a pending resync included). Because it is
//! a sum over a set, it is updated in O(changed) per batch and equal states have
//! equal hashes whatever history led to them. The merged view is not hashed
//! separately: it is a function of the raw layer.
//!
//! What it does NOT do: decide which events are valid or apply them (see `fold`),
//! or build xDS resources (see `xds`).

mod addr_index;
mod apply;
mod bulk;
mod derived;
mod endpoints;
mod host_keys;
#[cfg(any(test, feature = "test-builders"))]
pub mod mk;
mod query;
#[cfg(test)]
mod records_tests;
mod rule_touch;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use imbl::OrdMap;

use crate::canon;
pub use crate::keys::HKey;
use crate::model::{Config, Endpoint, EndpointShape, Hostname, Service};
use crate::rules::{ExportDefaults, RuleIndex, RuleTouch};

use addr_index::AddrIndex;
pub(crate) use apply::Rewrite;
pub use bulk::{EndpointBatch, ServiceEntry};
use endpoints::EndpointStore;
pub use endpoints::Hot;
pub use endpoints::ShapeFacts;
pub use endpoints::source_key;
use host_keys::HostKeys;
pub use query::{MANAGEMENT_PORTS_LABEL, StateCounts};

/// An entity as its source last wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written<T> {
    /// The validated model value (shared with the merged view and with snapshots).
    pub value: Arc<T>,
    /// The source (adapter instance) that wrote it; resync sweeps are per source.
    pub source: Arc<str>,
    /// The source's resync generation at that write; a completed resync at a higher
    /// generation removes it.
    pub generation: u64,
    /// Digest of `value`'s canonical encoding, to spot identical rewrites cheaply.
    digest: u64,
    /// Its term in the state's content hash (kind, key, source, generation and
    /// digest), kept so that replacing it does not hash the old record again.
    hash: u64,
}

/// Where a raw service definition is stored: several sources may write one key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceSlot {
    /// The entity key (`svc/<namespace>/<hostname>`).
    pub key: Arc<str>,
    /// The source that wrote it.
    pub source: Arc<str>,
}

/// A source's resync bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct SourceGen {
    /// Generation of the last `STARTED` marker (or of the last `COMPLETED` one if
    /// that is higher).
    pub started: u64,
    /// Generation of the last `COMPLETED` marker: every entity of the source below it
    /// has been swept, and events below it are stale.
    pub completed: u64,
}

/// A `COMPLETED` resync marker written as one copy per partition (its
/// `ResyncMarker.copies` is above 1) of which not every copy has been folded yet.
/// The fold sweeps, and raises [`SourceGen::completed`], only once `copies`
/// distinct partitions have delivered a copy of `generation`; until then this is
/// part of the state (its hash, checkpoints), since it decides what a later copy
/// does. See the `fold` module for the rules.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct PendingResync {
    /// The generation the copies complete.
    pub generation: u64,
    /// How many distinct partitions must deliver a copy.
    pub copies: u32,
    /// The partitions a copy has been folded from so far (a repeat counts once).
    pub partitions: BTreeSet<u32>,
}

impl PendingResync {
    /// Whether enough distinct partitions have delivered a copy.
    pub fn is_complete(&self) -> bool {
        self.partitions.len() >= self.copies as usize
    }
}

/// One definition competing for a hostname; the lowest claim wins (see module doc).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Claim {
    source: Arc<str>,
    namespace: Arc<str>,
    key: Arc<str>,
}

/// The claims on one hostname, sorted (lowest first), and the hostname. Usually
/// one element, so a shared vector is far smaller than a nested map.
///
/// Why the hostname here too: hostnames touched by key are named through this
/// map (see [`ModelState::host_name_at`] and [`Touched::endpoint_names`]). Read
/// through the list and its winning definition, that was three dependent cache
/// misses per hostname each time the fold named them; held in the map's entry,
/// the name is one lookup away.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Claims {
    host: Hostname,
    list: Arc<Vec<(Claim, Arc<Service>)>>,
}

impl std::ops::Deref for Claims {
    type Target = Vec<(Claim, Arc<Service>)>;

    fn deref(&self) -> &Self::Target {
        &self.list
    }
}

/// How many endpoints of a hostname [`ModelState::shape_like`] looks at: the
/// pods of a deployment spread over a few zones, so a handful finds a match
/// when there is one, and the cost of a miss stays bounded.
const SIBLINGS: usize = 8;

/// An address as the address index orders it: IPv4 before IPv6, as `IpAddr`
/// orders them, then by value. Why not `IpAddr` itself: its order compares
/// octet arrays with `memcmp`, which was most of the cost of sorting and
/// inserting 100k index entries in a restore; integers compare in place. Three
/// fields of at most eight bytes, so that an index entry stays 40 bytes (a
/// `u128` would align it to 16 and make it 48).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct AddrKey {
    family: u8,
    high: u64,
    low: u64,
}

impl AddrKey {
    /// The key of `addr`.
    pub(crate) fn of(addr: IpAddr) -> Self {
        let (family, bits) = match addr {
            IpAddr::V4(a) => (4, u128::from(a.to_bits())),
            IpAddr::V6(a) => (6, a.to_bits()),
        };
        AddrKey {
            family,
            high: (bits >> 64) as u64,
            low: bits as u64,
        }
    }
}

/// Anything that names a hostname or an entity key in a query: `str`, `String`,
/// `Arc<str>` or [`Hostname`].
pub trait KeyText {
    /// The text.
    fn key_text(&self) -> &str;
}

impl KeyText for str {
    fn key_text(&self) -> &str {
        self
    }
}

impl KeyText for String {
    fn key_text(&self) -> &str {
        self
    }
}

impl KeyText for Arc<str> {
    fn key_text(&self) -> &str {
        self
    }
}

impl KeyText for Hostname {
    fn key_text(&self) -> &str {
        self.as_str()
    }
}

/// The folded registry state a snapshot holds. Cloning is O(1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelState {
    raw_services: OrdMap<ServiceSlot, Written<Service>>,
    /// Endpoints by key hash, as plain records, and the endpoints of each
    /// hostname (by hash) with their rarely written parts (see `endpoints`).
    raw_endpoints: EndpointStore,
    raw_configs: OrdMap<Arc<str>, Written<Config>>,
    sources: OrdMap<Arc<str>, SourceGen>,
    /// Per source, a multi-copy `COMPLETED` marker still waiting for copies.
    resyncs_pending: OrdMap<Arc<str>, PendingResync>,
    /// Every definition per hostname (by hostname hash), lowest claim first.
    claims: OrdMap<HKey, Claims>,
    /// The keys of `claims`, as a sorted array, built on first use (see
    /// `host_keys`).
    claim_keys: HostKeys,
    /// The winning definitions, by hostname (alphabetical, for `services()`).
    services: OrdMap<Hostname, Arc<Service>>,
    /// (address, endpoint key hash) of every endpoint, built on first use
    /// (see `addr_index`).
    endpoints_by_addr: AddrIndex,
    /// The VirtualServices and DestinationRules among `raw_configs`, parsed and
    /// indexed (a function of `raw_configs`, so not hashed separately).
    rules: RuleIndex,
    hash: u64,
}

/// What a fold step touched, so only dependent xDS resources are regenerated.
///
/// It is a superset of what changed in content: an entity rewritten with identical
/// content never appears, but an endpoint added and removed within one batch may
/// (the generator then finds identical bytes and reports no change).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Touched {
    /// Hostnames whose merged service definition was created, changed or removed.
    pub services: BTreeSet<Hostname>,
    /// Hostnames whose set of endpoints (or any endpoint's content) changed. May
    /// name hostnames that have no merged service (endpoints listing them are kept).
    /// More are in `endpoint_keys`; [`Touched::endpoint_names`] names them all.
    pub endpoints: BTreeSet<Hostname>,
    /// More hostnames whose endpoints changed, by key, sorted, each once: those
    /// the fold's rewrite path touched (see `fold::Folding::admit_later`). Why
    /// keys: naming them (a reference to each hostname's text at a scattered
    /// address, then a sort of the texts) was a large part of the fold at 100k
    /// endpoints, and the generator, which holds every hostname with a service
    /// by key, names those from its own index and skips the others (a hostname
    /// without a service has no assignment).
    pub endpoint_keys: Vec<HKey>,
    /// Whether any config object changed.
    pub configs: bool,
    /// Hostnames whose VirtualService or DestinationRule may have changed: the
    /// hosts the old and new versions of each changed rule bind (wildcards
    /// expanded against the services that exist after the batch; exact hosts as
    /// written, with or without a service), and the hosts whose VirtualService
    /// routes to a host whose service or DestinationRule changed. The generator
    /// recomputes them as it does a touched service. (A [`Touched`] used as a
    /// plain [`Touch`] sink holds the patterns unexpanded.)
    pub rule_hosts: BTreeSet<Hostname>,
}

impl Touched {
    /// Whether nothing was touched.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
            && self.endpoints.is_empty()
            && self.endpoint_keys.is_empty()
            && !self.configs
            && self.rule_hosts.is_empty()
    }

    /// Every hostname whose endpoints changed, by name: `endpoints` and the
    /// ones touched by key, named by `st` (the state the touches were folded
    /// into, or a later one). A key `st` no longer names (no service defines
    /// it and no endpoint lists it) is left out: whatever removed it touched
    /// it by name.
    pub fn endpoint_names(&self, st: &ModelState) -> BTreeSet<Hostname> {
        let mut names = self.endpoints.clone();
        names.extend(self.endpoint_keys.iter().filter_map(|k| st.host_name_at(k)));
        names
    }

    /// Adds the touches of a later batch (a replay regenerates once for many).
    pub fn extend(&mut self, later: Touched) {
        self.services.extend(later.services);
        self.endpoints.extend(later.endpoints);
        self.endpoint_keys.extend(later.endpoint_keys);
        self.endpoint_keys.sort_unstable();
        self.endpoint_keys.dedup();
        self.configs |= later.configs;
        self.rule_hosts.extend(later.rule_hosts);
    }
}

/// Where the mutation primitives record what they touched: a [`Touched`], or the
/// fold's cheaper append-only log that becomes one at the end of a batch.
pub trait Touch {
    /// The merged service of `host` changed.
    fn service(&mut self, host: &Hostname);
    /// The endpoints of `host` changed.
    fn endpoints(&mut self, host: &Hostname);
    /// [`Touch::endpoints`] for each hostname `shape` lists.
    fn endpoints_of(&mut self, shape: &Arc<EndpointShape>) {
        for (_, host) in &shape.services {
            self.endpoints(host);
        }
    }
    /// A config object changed.
    fn configs(&mut self);
    /// A traffic rule binding these patterns changed.
    fn rules(&mut self, t: &RuleTouch);
}

impl Touch for Touched {
    fn service(&mut self, host: &Hostname) {
        self.services.insert(host.clone());
    }

    fn endpoints(&mut self, host: &Hostname) {
        self.endpoints.insert(host.clone());
    }

    fn configs(&mut self) {
        self.configs = true;
    }

    fn rules(&mut self, t: &RuleTouch) {
        self.rule_hosts
            .extend(t.virtual_service.iter().chain(&t.destination_rule).cloned());
    }
}

/// An append-only [`Touch`] (a push per touch, no ordered-set insert with string
/// comparisons); [`TouchLog::finish`] sorts and deduplicates once per batch.
#[derive(Debug, Default)]
pub(crate) struct TouchLog {
    services: Vec<Hostname>,
    endpoints: Vec<Hostname>,
    /// Shapes whose hostnames are touched, expanded once per distinct shape by
    /// [`TouchLog::finish`]. Why: reading a shape's hostnames on every event was
    /// two cache misses per rewrite at 100k endpoints, and a batch's rewrites
    /// share a few thousand shapes.
    shapes: Vec<Arc<EndpointShape>>,
    /// Hostnames touched by key (see [`TouchLog::endpoints_by_key`]).
    keys: Vec<HKey>,
    configs: bool,
    /// Patterns of changed rules, expanded by [`TouchLog::finish`].
    rules: RuleTouch,
}

impl Touch for TouchLog {
    fn service(&mut self, host: &Hostname) {
        self.services.push(host.clone());
    }

    fn endpoints(&mut self, host: &Hostname) {
        if self.endpoints.last() != Some(host) {
            self.endpoints.push(host.clone());
        }
    }

    fn endpoints_of(&mut self, shape: &Arc<EndpointShape>) {
        if !self.shapes.last().is_some_and(|s| Arc::ptr_eq(s, shape)) {
            self.shapes.push(shape.clone());
        }
    }

    fn configs(&mut self) {
        self.configs = true;
    }

    fn rules(&mut self, t: &RuleTouch) {
        self.rules
            .virtual_service
            .extend(t.virtual_service.iter().cloned());
        self.rules
            .destination_rule
            .extend(t.destination_rule.iter().cloned());
    }
}

impl TouchLog {
    /// Touches the endpoints of the hostname whose key is `host`, left by key
    /// in [`Touched::endpoint_keys`]. Why by key: a rewrite reads the
    /// endpoint's plain record only, which holds its hostname's key, not its
    /// text; whoever needs the name looks it up once per hostname.
    pub(crate) fn endpoints_by_key(&mut self, host: HKey) {
        if self.keys.last() != Some(&host) {
            self.keys.push(host);
        }
    }

    /// The touches, sorted and without repeats; rule patterns expanded against
    /// `st`, the state after the batch (see [`Touched::rule_hosts`]).
    pub(crate) fn finish(mut self, st: &ModelState) -> Touched {
        self.services.sort_unstable();
        self.shapes
            .sort_unstable_by_key(|s| Arc::as_ptr(s) as usize);
        self.shapes.dedup_by(|a, b| Arc::ptr_eq(a, b));
        for shape in &self.shapes {
            self.endpoints
                .extend(shape.services.iter().map(|(_, host)| host.clone()));
        }
        // Most entries repeat a few shared hostnames: dropping repeats by pointer
        // first (cheap) leaves far fewer for the string sort.
        self.endpoints
            .sort_unstable_by_key(|h| Arc::as_ptr(&h.0).cast::<u8>() as usize);
        self.endpoints.dedup_by(|a, b| Arc::ptr_eq(&a.0, &b.0));
        self.endpoints.sort_unstable();
        self.keys.sort_unstable();
        self.keys.dedup();
        let services: BTreeSet<Hostname> = self.services.into_iter().collect();
        let rule_hosts = st.rule_hosts(&self.rules, &services);
        Touched {
            services,
            endpoints: self.endpoints.into_iter().collect(),
            endpoint_keys: self.keys,
            configs: self.configs,
            rule_hosts,
        }
    }
}

impl ModelState {
    /// Content hash of the whole state (see the module doc): equal states have equal
    /// hashes regardless of the history that built them.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// The traffic rules (VirtualService, DestinationRule), parsed and indexed.
    pub fn rules(&self) -> &RuleIndex {
        &self.rules
    }

    /// This state with its rules parsed anew under the mesh's `exportTo`
    /// `defaults` (the server's flags: a restored or replayed state must read
    /// its objects as the server does). O(1) when they are the ones in use,
    /// else O(configs).
    pub fn with_export_defaults(&self, defaults: &ExportDefaults) -> ModelState {
        if self.rules.export_defaults() == defaults {
            return self.clone();
        }
        let mut out = self.clone();
        out.rules = RuleIndex::with_defaults(defaults.clone());
        for (_, w) in &self.raw_configs {
            out.rules.upsert(&w.value);
        }
        out
    }

    /// The raw service definitions, by `(key, source)`.
    pub fn raw_services(&self) -> impl Iterator<Item = (&ServiceSlot, &Written<Service>)> + '_ {
        self.raw_services.iter()
    }

    /// The raw endpoints with their keys, in key-hash order (deterministic, not
    /// alphabetical). Each is assembled from its stored parts.
    pub fn raw_endpoints(&self) -> impl Iterator<Item = (Arc<str>, Written<Endpoint>)> + '_ {
        self.raw_endpoints
            .iter()
            .map(|(_, hot, cold)| (cold.key.clone(), endpoints::written(hot, cold)))
    }

    /// The raw config objects, by key.
    pub fn raw_configs(&self) -> impl Iterator<Item = (&Arc<str>, &Written<Config>)> + '_ {
        self.raw_configs.iter()
    }

    /// The stored endpoint under `key`, with who wrote it.
    pub fn raw_endpoint<Q: KeyText + ?Sized>(&self, key: &Q) -> Option<Written<Endpoint>> {
        let key = key.key_text();
        self.raw_endpoints
            .written(&HKey::of(key))
            .filter(|w| *w.value.key == *key)
    }

    /// The claims on the hostname `host`, by its text (not another text of the
    /// same hash).
    fn claims_named(&self, host: &str) -> Option<&Claims> {
        self.claims
            .get(&HKey::of(host))
            .filter(|c| c.host.as_str() == host)
    }

    /// [`ModelState::raw_endpoint`] with the key already hashed (the fold's path).
    pub(crate) fn raw_endpoint_at(&self, hk: &HKey) -> Option<Written<Endpoint>> {
        self.raw_endpoints.written(hk)
    }

    /// The stored endpoints' parts, in key-hash order, for the checkpoint
    /// writer: its key, source and shape (shared with the state) and the rest
    /// by value.
    pub fn endpoint_records(
        &self,
    ) -> impl Iterator<Item = (&Arc<str>, &Arc<str>, &Arc<EndpointShape>, &Hot)> + '_ {
        self.raw_endpoints
            .iter()
            .map(|(_, hot, cold)| (&cold.key, &cold.source, &cold.shape, hot))
    }

    /// Reads what a lookup of the endpoint under `hk` reads first, for the
    /// fold to bring the records of the next few events into the cache at
    /// once (see `records::Records::warm`); the value means nothing.
    pub(crate) fn warm_endpoint(&self, hk: &HKey) -> u64 {
        self.raw_endpoints.warm(hk)
    }

    /// The plain record of the endpoint stored under `hk`.
    pub(crate) fn endpoint_record_at(&self, hk: &HKey) -> Option<&Hot> {
        self.raw_endpoints.hot(hk)
    }

    /// The shape of the endpoint stored under `hk`.
    pub(crate) fn endpoint_shape_at(&self, hk: &HKey) -> Option<&Arc<EndpointShape>> {
        self.raw_endpoints.cold(hk).map(|c| &c.shape)
    }

    /// A stored shape converted from a payload of digest `digest` (its
    /// [`EndpointShape::source_digest`]), among the first [`SIBLINGS`]
    /// endpoints listed under hostname `host` (its text as the payload gives it:
    /// a hostname that conversion would lowercase is simply not found). Why:
    /// the pods of one deployment in one zone have equal shapes, and a new pod
    /// sharing its sibling's saves converting and storing one more copy (about
    /// a kilobyte each, most of an endpoint's memory).
    pub(crate) fn shape_like(&self, host: &str, digest: u128) -> Option<&Arc<EndpointShape>> {
        self.raw_endpoints
            .listing_named(host)?
            .values()
            .take(SIBLINGS)
            .map(|c| &c.shape)
            .find(|s| s.source_digest() == digest)
    }

    /// Whether a hostname has a merged service (the fold's admission check).
    pub(crate) fn has_service(&self, host: &Hostname) -> bool {
        self.claims_named(host.as_str()).is_some()
    }

    /// [`ModelState::has_service`] for the hostname whose key is `host`.
    pub(crate) fn has_service_at(&self, host: &HKey) -> bool {
        self.claims.contains_key(host)
    }

    /// The hostname of key `host`: the name its service definitions give it,
    /// or else an endpoint that lists it; `None` when neither exists.
    pub(crate) fn host_name_at(&self, host: &HKey) -> Option<Hostname> {
        if let Some(claims) = self.claims.get(host) {
            return Some(claims.host.clone());
        }
        let (_, cold) = self.raw_endpoints.listing(host)?.iter().next()?;
        cold.shape
            .services
            .iter()
            .map(|(_, h)| h)
            .find(|h| HKey::of(h.as_str()) == *host)
            .cloned()
    }

    /// Whether an endpoint of key text `key` (hash `hk`) is stored.
    pub(crate) fn holds_endpoint_key(&self, hk: &HKey, key: &str) -> bool {
        self.raw_endpoints.holds_key(hk, key)
    }

    /// The stored hostname of other text whose key is `host`'s, if any: a
    /// service or endpoint of `host` would be merged with it.
    pub(crate) fn hostname_collision(&self, host: &Hostname) -> Option<Hostname> {
        self.host_name_at(&HKey::of(host.as_str()))
            .filter(|stored| stored != host)
    }

    /// The key of every hostname a service defines, in key order (built on
    /// first use, see `host_keys`).
    pub(crate) fn service_host_keys(&self) -> &[HKey] {
        self.claim_keys.get(&self.claims)
    }

    /// How many hostnames a service defines.
    pub(crate) fn service_host_count(&self) -> usize {
        self.claims.len()
    }

    /// The stored config object under `key`, with who wrote it.
    pub fn raw_config(&self, key: &str) -> Option<&Written<Config>> {
        self.raw_configs.get(key)
    }

    /// Every source's resync bookkeeping, by source name.
    pub fn sources(&self) -> impl Iterator<Item = (&Arc<str>, &SourceGen)> + '_ {
        self.sources.iter()
    }

    /// One source's resync bookkeeping (zeroes for a source never seen).
    pub fn source_gen(&self, source: &str) -> SourceGen {
        self.sources.get(source).copied().unwrap_or_default()
    }

    /// Every source's pending multi-copy resync, by source name.
    pub fn pending_resyncs(&self) -> impl Iterator<Item = (&Arc<str>, &PendingResync)> + '_ {
        self.resyncs_pending.iter()
    }

    /// One source's pending multi-copy resync, if a copy of a generation it has not
    /// completed has been folded.
    pub fn pending_resync(&self, source: &str) -> Option<&PendingResync> {
        self.resyncs_pending.get(source)
    }

    /// The hash recomputed from scratch, O(entities). [`ModelState::hash`] must
    /// always equal it; tests and debug tools check that.
    pub fn recompute_hash(&self) -> u64 {
        let mut h = 0u64;
        for (slot, w) in &self.raw_services {
            h = h.wrapping_add(w.fresh_entity_hash(canon::Kind::Service, &slot.key));
        }
        for (_, hot, cold) in self.raw_endpoints.iter() {
            h = h.wrapping_add(canon::entity_hash(
                canon::Kind::Endpoint,
                &cold.key,
                &cold.source,
                hot.generation,
                hot.digest(&cold.key),
            ));
        }
        for (key, w) in &self.raw_configs {
            h = h.wrapping_add(w.fresh_entity_hash(canon::Kind::Config, key));
        }
        for (source, g) in &self.sources {
            h = h.wrapping_add(canon::source_hash(source, g.started, g.completed));
        }
        for (source, p) in &self.resyncs_pending {
            h = h.wrapping_add(canon::pending_resync_hash(
                source,
                p.generation,
                p.copies,
                &p.partitions,
            ));
        }
        h
    }

    /// A state built from scratch out of this one's raw entities and source
    /// bookkeeping, inserting each entity once into an empty state: the merged view,
    /// indexes and hash are derived anew. For tests (incremental maintenance must
    /// equal this) and debug tools; O(entities · log entities).
    pub fn rebuild(&self) -> ModelState {
        let mut fresh = ModelState {
            rules: RuleIndex::with_defaults(self.rules.export_defaults().clone()),
            ..ModelState::default()
        };
        let mut sink = TouchLog::default();
        for (source, g) in &self.sources {
            fresh.set_source_gen(source.clone(), *g);
        }
        for (source, p) in &self.resyncs_pending {
            fresh.set_pending_resync(source.clone(), Some(p.clone()));
        }
        for (slot, w) in &self.raw_services {
            fresh.put_service(slot.clone(), w.generation, w.value.clone(), &mut sink);
        }
        for (_, w) in &self.raw_configs {
            fresh.put_config(w.source.clone(), w.generation, w.value.clone(), &mut sink);
        }
        for (_, hot, cold) in self.raw_endpoints.iter() {
            fresh.put_endpoint(
                cold.source.clone(),
                hot.generation,
                cold.endpoint(hot),
                &mut sink,
            );
        }
        fresh
    }
}

impl Written<Service> {
    /// A service definition as stored under `slot`.
    fn service(slot: &ServiceSlot, generation: u64, value: Arc<Service>, digest: u64) -> Self {
        Written::new(
            canon::Kind::Service,
            &slot.key,
            value,
            slot.source.clone(),
            generation,
            digest,
        )
    }
}

impl<T> Written<T> {
    /// A record of `value` under `key`, with its hash term.
    fn new(
        kind: canon::Kind,
        key: &str,
        value: Arc<T>,
        source: Arc<str>,
        generation: u64,
        digest: u64,
    ) -> Self {
        let hash = canon::entity_hash(kind, key, &source, generation, digest);
        Written {
            value,
            source,
            generation,
            digest,
            hash,
        }
    }

    /// Its term in the state's content hash.
    fn entity_hash(&self) -> u64 {
        self.hash
    }

    /// The term computed again from the record's fields, for
    /// [`ModelState::recompute_hash`] (which must not trust the kept one).
    fn fresh_entity_hash(&self, kind: canon::Kind, key: &str) -> u64 {
        canon::entity_hash(kind, key, &self.source, self.generation, self.digest)
    }
}
