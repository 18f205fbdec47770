//! The raw endpoints of a [`ModelState`](super::ModelState) and the hostname
//! index, by key hash: what a rewrite reads and writes, as plain data
//! ([`Hot`]), and what changes only when an endpoint is created, deleted or
//! given another shape ([`Cold`]: the key's text, the source, the shape),
//! which the hostname index holds (see [`EndpointStore`]).
//!
//! Why plain data in the records' map: a fold writes into a state that shares
//! its map with the last published snapshot, so every write copies the path to
//! its record (a bucket of a few records, see `records`; before that, the leaf
//! of a tree). When the leaves held reference-counted records, copying a leaf
//! took a reference to each of its sixteen records (sixteen cache misses at
//! scattered addresses), and dropping the superseded state let go of them
//! again, a large part of the fold at 100k endpoints. A leaf of plain records
//! is copied with one `memcpy`, and the common event (health, weight or address
//! of an endpoint, same owner and shape) touches only this map. Reading the
//! record also no longer follows record → value → shape, three dependent cache
//! misses. The probe `benches/benches/record_layout.rs` compares this layout
//! with the reference-counted one.
//!
//! Readers assemble an [`Endpoint`] from the two parts, which takes two
//! references (key and shape).
//!
//! What it does NOT do: decide what to list where, the content hash or the
//! merged view (see `apply`); it stores what it is given.

use std::net::IpAddr;
use std::sync::Arc;

use imbl::OrdMap;

use super::canon;
use super::{HKey, Written};
use crate::model::{Endpoint, EndpointRef, EndpointShape, Health};
use crate::records::{FullKey, Records};

/// What a rewrite of an endpoint reads and writes, by value.
#[derive(Debug, Clone, Copy)]
pub struct Hot {
    /// The endpoint's address.
    pub address: IpAddr,
    /// Its load-balancing weight.
    pub weight: u32,
    /// Its health.
    pub health: Health,
    /// How many hostnames the shape lists: 0, 1, or 2 for two or more. With
    /// exactly one, `first_host` names every hostname the endpoint serves.
    pub(crate) hosts: u8,
    /// The resync generation of the write.
    pub generation: u64,
    /// [`Written`]'s term in the state's content hash. (The content digest
    /// it is made from is not kept: a rewrite that changes nothing is found by
    /// comparing fields, and readers compute it; 8 bytes less per record is 8
    /// bytes less to copy per record of every bucket a fold copies.)
    pub(crate) hash: u64,
    /// The low 64 bits of the shape's [`EndpointShape::source_digest`] (see
    /// [`Hot::same_shape_source`]).
    shape_source: u64,
    /// The shape's [`EndpointShape::digest`].
    pub(crate) shape_digest: u64,
    /// [`source_key`] of the source's name: the owner check compares integers.
    pub(crate) source: u64,
    /// The key of the shape's first hostname ([`HKey::MIN`] when it lists none).
    pub(crate) first_host: HKey,
}

impl PartialEq for Hot {
    /// Everything but the shape's source digest, which says what a shape was
    /// converted from, not what it holds (shape equality ignores it too).
    fn eq(&self, o: &Self) -> bool {
        self.address == o.address
            && self.weight == o.weight
            && self.health == o.health
            && self.hosts == o.hosts
            && self.generation == o.generation
            && self.hash == o.hash
            && self.shape_digest == o.shape_digest
            && self.source == o.source
            && self.first_host == o.first_host
    }
}

impl Eq for Hot {}

impl FullKey for Hot {
    /// Nothing beyond the hash here. Why: a record holds no key text (its cold
    /// part, in the hostname index, does, and a reference-counted copy in each
    /// record would bring back the per-record reference counting this layout
    /// removed). The store compares the text instead where a second text could
    /// enter: a rewrite reads the cold part's key ([`EndpointStore::hot_mut_named`]),
    /// and the fold refuses any other write whose stored key differs.
    type Key = ();
    fn full_key(&self) -> &() {
        &()
    }
}

/// What the facts of a shape a [`Hot`] record copies: passed in by callers that
/// keep them at hand for many endpoints of one shape (a restore), so that
/// building a record reads nothing through the shape.
#[derive(Debug, Clone, Copy)]
pub struct ShapeFacts {
    pub(crate) digest: u64,
    pub(crate) source_digest: u128,
    pub(crate) first_host: Option<HKey>,
    /// How many hostnames it lists.
    pub(crate) hosts: usize,
}

impl ShapeFacts {
    /// The facts of `shape`, read from it.
    pub fn of(shape: &EndpointShape) -> Self {
        ShapeFacts {
            digest: shape.digest(),
            source_digest: shape.source_digest(),
            first_host: shape.first_host(),
            hosts: shape.services.len(),
        }
    }
}

impl Hot {
    /// The record of `ep` (whose shape's facts are `shape`) as the source of
    /// key `source` wrote it at `generation`, with its hash term.
    pub(crate) fn new(
        ep: &Endpoint,
        shape: ShapeFacts,
        source: u64,
        generation: u64,
        hash: u64,
    ) -> Self {
        Hot {
            address: ep.address,
            weight: ep.weight,
            health: ep.health,
            hosts: shape.hosts.min(2) as u8,
            generation,
            hash,
            shape_source: shape.source_digest as u64,
            shape_digest: shape.digest,
            source,
            first_host: shape.first_host.unwrap_or(HKey::MIN),
        }
    }

    /// The digest of the content of the endpoint `key` whose record this is.
    pub(crate) fn digest(&self, key: &str) -> u64 {
        canon::endpoint_fields_digest(
            key,
            &self.address,
            self.weight,
            self.health,
            self.shape_digest,
        )
    }

    /// Whether the shape was converted from a payload of source digest
    /// `digest` (so that a payload of that digest converts to this very shape).
    /// Compares 64 of its 128 bits. Why not all: the record is copied whole
    /// with every bucket a fold copies, 8 bytes fewer per record is 8 % less to
    /// copy, and a false match needs another payload of the same endpoint
    /// whose digest agrees in 64 bits, a chance of 2^-64 per shape change, as
    /// for the source key ([`source_key`]) and the state's 64-bit content hash.
    pub(crate) fn same_shape_source(&self, digest: u128) -> bool {
        self.shape_source == digest as u64
    }
}

/// What an endpoint keeps until it is deleted or given another shape.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Cold {
    pub(crate) key: Arc<str>,
    pub(crate) source: Arc<str>,
    pub(crate) shape: Arc<EndpointShape>,
}

impl Cold {
    /// The endpoint these parts and `hot` make, borrowed (see [`EndpointRef`]).
    pub(crate) fn endpoint_ref<'a>(&'a self, hot: &Hot) -> EndpointRef<'a> {
        EndpointRef {
            key: &self.key,
            address: hot.address,
            weight: hot.weight,
            health: hot.health,
            shape: &self.shape,
        }
    }

    /// The endpoint these parts and `hot` make.
    pub(crate) fn endpoint(&self, hot: &Hot) -> Endpoint {
        self.endpoint_ref(hot).to_endpoint()
    }
}

/// The records, and the endpoints of each hostname with their cold parts.
/// Cloning is O(1).
///
/// Why the cold parts live in the hostname index rather than in a map of their
/// own: the index is written exactly when they are (an endpoint created,
/// deleted or given another shape), so storing them there costs no extra write;
/// the xDS generator reads a hostname's endpoints through the index and now
/// finds their cold parts there, one lookup per endpoint fewer; and a restore
/// builds one map less (a third map of 100k entries, on every checkpoint
/// replay). A lookup by endpoint key goes through the record's first hostname
/// (every endpoint lists at least one; one that lists none would sit under
/// [`HKey::MIN`]).
///
/// Both maps are split in [`SHARDS`] by the top bit of the key, so that a
/// restore builds them on two threads, one shard each (one thread built the
/// records' map while the other, done with the index, waited). A shard holds
/// a contiguous range of keys, so walking the shards in order walks the keys
/// in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EndpointStore {
    /// Endpoint key → record (see `records` for why not an `OrdMap`).
    hot: [HotRecords; SHARDS],
    /// Hostname (by key) → the endpoints that list it (by key), with their
    /// cold parts. An endpoint of several hostnames is under each, sharing one
    /// cold part. Keys only in the order, not names: sets compare integers held
    /// in their nodes instead of following each key to its text.
    by_host: [OrdMap<HKey, Listing>; SHARDS],
    /// Endpoint key → its text, to compare keys by value (see
    /// [`EndpointStore::hot_mut_named`]). Written only when an endpoint is
    /// created or deleted; a lookup is one bucket, as in `hot`, where the
    /// listing under the record's first hostname was two tree walks.
    texts: [KeyTexts; SHARDS],
}

/// An endpoint key's text, told apart from others of its hash by value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyText(pub(crate) Arc<str>);

impl FullKey for KeyText {
    type Key = str;
    fn full_key(&self) -> &str {
        &self.0
    }
}

/// One shard's key texts.
pub(crate) type KeyTexts = Records<KeyText, SHARD_BITS>;

/// How many of a key's top bits pick its shard.
pub(crate) const SHARD_BITS: u32 = 1;

/// One shard's records: its keys share their top [`SHARD_BITS`].
pub(crate) type HotRecords = Records<Hot, SHARD_BITS>;

/// How many shards each map of an [`EndpointStore`] is split in.
pub(crate) const SHARDS: usize = 1 << SHARD_BITS;

/// The shard of `key`: its top [`SHARD_BITS`].
pub(crate) fn shard(key: &HKey) -> usize {
    (key.prefix() >> (64 - SHARD_BITS)) as usize
}

/// The endpoints of one hostname, by key, with their cold parts.
pub(crate) type Listing = OrdMap<HKey, Arc<Cold>>;

/// The keys of the hostnames `shape` lists, or [`HKey::MIN`] when it lists
/// none (see [`EndpointStore`]).
pub(crate) fn host_keys(shape: &EndpointShape) -> impl Iterator<Item = HKey> + '_ {
    let none = shape.services.is_empty().then_some(HKey::MIN);
    shape
        .services
        .iter()
        .map(|(_, h)| HKey::of(h.as_str()))
        .chain(none)
}

impl EndpointStore {
    /// A store of the records and the index, each in [`SHARDS`] (each key in
    /// its [`shard`]), which must agree (each record's endpoint listed under
    /// each of its hostnames, with its cold part).
    pub(crate) fn from_parts(
        hot: [HotRecords; SHARDS],
        by_host: [OrdMap<HKey, Listing>; SHARDS],
        texts: [KeyTexts; SHARDS],
    ) -> Self {
        EndpointStore {
            hot,
            by_host,
            texts,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.hot.iter().map(HotRecords::len).sum()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.hot.iter().all(HotRecords::is_empty)
    }

    /// Reads what a lookup of `hk` reads first (see [`Records::warm`]).
    pub(crate) fn warm(&self, hk: &HKey) -> u64 {
        self.hot[shard(hk)].warm(hk) ^ self.texts[shard(hk)].warm(hk)
    }

    pub(crate) fn hot(&self, hk: &HKey) -> Option<&Hot> {
        self.hot[shard(hk)].get(hk, &())
    }

    /// The records of `keys`, in order, into `out` (`None` where there is
    /// none), each shard's run of keys looked up together (see
    /// [`Records::get_each`]); a listing's keys, in key order, make one run per
    /// shard.
    pub(crate) fn hot_each<'s>(&'s self, keys: &[HKey], out: &mut Vec<Option<&'s Hot>>) {
        for run in keys.chunk_by(|a, b| shard(a) == shard(b)) {
            self.hot[shard(&run[0])].get_each(run, out);
        }
    }

    /// The record under `hk`, to write in place (copies the path to it if
    /// another state shares it).
    pub(crate) fn hot_mut(&mut self, hk: &HKey) -> Option<&mut Hot> {
        self.hot[shard(hk)].get_mut(hk, &())
    }

    /// The record under `hk` to write in place, when the endpoint stored there
    /// has the key text `key`: `None` when there is none, or when it is another
    /// text of the same hash. Compares the stored text by value, in the
    /// key texts: one bucket lookup more than [`EndpointStore::hot_mut`], the
    /// cost of never conflating two keys.
    pub(crate) fn hot_mut_named(&mut self, hk: &HKey, key: &str) -> Option<&mut Hot> {
        self.texts[shard(hk)].get(hk, key)?;
        self.hot[shard(hk)].get_mut(hk, &())
    }

    /// Whether an endpoint of key text `key` (hash `hk`) is stored: one bucket
    /// lookup in the key texts, not a walk to its cold part.
    pub(crate) fn holds_key(&self, hk: &HKey, key: &str) -> bool {
        self.texts[shard(hk)].get(hk, key).is_some()
    }

    /// The cold part of the endpoint under `hk`, listed under its record's
    /// first hostname.
    pub(crate) fn cold(&self, hk: &HKey) -> Option<&Arc<Cold>> {
        self.listed(hk, self.hot(hk)?)
    }

    /// The cold part of the endpoint under `hk` whose record is `hot`.
    fn listed(&self, hk: &HKey, hot: &Hot) -> Option<&Arc<Cold>> {
        self.listing(&hot.first_host)?.get(hk)
    }

    /// The endpoint under `hk`.
    pub(crate) fn endpoint(&self, hk: &HKey) -> Option<Endpoint> {
        let hot = self.hot(hk)?;
        Some(self.listed(hk, hot)?.endpoint(hot))
    }

    /// The endpoint under `hk` with who wrote it.
    pub(crate) fn written(&self, hk: &HKey) -> Option<Written<Endpoint>> {
        let hot = self.hot(hk)?;
        Some(written(hot, self.listed(hk, hot)?))
    }

    /// Every record with its cold part, in key-hash order (a lookup of each
    /// cold part: for whole-state passes, not hot paths). A record without a
    /// listing would be a broken invariant: debug builds (the tests) stop on
    /// it rather than let a checkpoint leave the endpoint out.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (HKey, &Hot, &Arc<Cold>)> + '_ {
        self.iter_hot().filter_map(|(k, h)| {
            let cold = self.listed(k, h);
            debug_assert!(
                cold.is_some(),
                "record {k:?} is not listed under its first hostname"
            );
            Some((*k, h, cold?))
        })
    }

    /// Every record's key and hot part, in key-hash order.
    pub(crate) fn iter_hot(&self) -> impl Iterator<Item = (&HKey, &Hot)> + '_ {
        self.hot.iter().flat_map(HotRecords::iter)
    }

    /// The endpoints that list the hostname of key `host`.
    pub(crate) fn listing(&self, host: &HKey) -> Option<&Listing> {
        self.by_host[shard(host)].get(host)
    }

    /// The endpoints that list the hostname `host`, by its text: `None` also
    /// when the listing under its key belongs to another text of the same
    /// hash (whose endpoints list that text, not `host`).
    pub(crate) fn listing_named(&self, host: &str) -> Option<&Listing> {
        let listing = self.listing(&HKey::of(host))?;
        let (_, cold) = listing.iter().next()?;
        let named = cold.shape.services.iter().any(|(_, h)| h.as_str() == host);
        named.then_some(listing)
    }

    /// Every hostname's listing, by hostname key (the hostless bucket
    /// [`HKey::MIN`] included, if any).
    pub(crate) fn listings(&self) -> impl Iterator<Item = (&HKey, &Listing)> + '_ {
        self.by_host.iter().flat_map(OrdMap::iter)
    }

    /// How many hostnames at least one endpoint lists.
    pub(crate) fn host_count(&self) -> usize {
        let hostless = self.listing(&HKey::MIN).is_some();
        self.by_host.iter().map(OrdMap::len).sum::<usize>() - usize::from(hostless)
    }

    /// Stores the record under `hk`, returning the one it replaces. The
    /// caller lists the endpoint (see [`EndpointStore::list`]).
    pub(crate) fn put_hot(&mut self, hk: HKey, key: &Arc<str>, hot: Hot) -> Option<Hot> {
        let old = self.hot[shard(&hk)].insert(hk, hot);
        if old.is_none() {
            self.texts[shard(&hk)].insert(hk, KeyText(key.clone()));
        }
        old
    }

    /// Removes the record under `hk`, returning it with the cold part listed
    /// for it. The caller unlists the endpoint.
    pub(crate) fn remove(&mut self, hk: &HKey) -> Option<(Hot, Arc<Cold>)> {
        let hot = self.hot[shard(hk)].remove(hk, &())?;
        let cold = self.listed(hk, &hot)?.clone();
        self.texts[shard(hk)].remove(hk, &cold.key);
        Some((hot, cold))
    }

    /// Lists the endpoint `ek` under the hostname of key `host` with its cold
    /// part (replacing the one listed, if any).
    pub(crate) fn list(&mut self, host: HKey, ek: HKey, cold: Arc<Cold>) {
        let by_host = &mut self.by_host[shard(&host)];
        match by_host.get_mut(&host) {
            Some(listing) => {
                listing.insert(ek, cold);
            }
            None => {
                by_host.insert(host, OrdMap::unit(ek, cold));
            }
        }
    }

    /// Takes the endpoint `ek` off the hostname of key `host`.
    pub(crate) fn unlist(&mut self, host: &HKey, ek: &HKey) {
        let by_host = &mut self.by_host[shard(host)];
        let now_empty = match by_host.get_mut(host) {
            Some(listing) => {
                listing.remove(ek);
                listing.is_empty()
            }
            None => false,
        };
        if now_empty {
            by_host.remove(host);
        }
    }
}

/// The key of a source's name in a [`Hot`] record: the top 64 bits of
/// [`HKey::of`] it. Why not all 128: a handful of sources share a state, so 64
/// bits leave no practical chance of two sharing a key, and a smaller record
/// is cheaper to copy.
pub fn source_key(name: &str) -> u64 {
    HKey::of(name).prefix()
}

/// The record `hot` and `cold` make, as [`Written`].
pub(crate) fn written(hot: &Hot, cold: &Cold) -> Written<Endpoint> {
    Written {
        value: Arc::new(cold.endpoint(hot)),
        source: cold.source.clone(),
        generation: hot.generation,
        digest: hot.digest(&cold.key),
        hash: hot.hash,
    }
}
