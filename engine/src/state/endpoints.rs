//! The raw endpoints of a [`ModelState`](super::ModelState), in two maps by key
//! hash: what a rewrite reads and writes, as plain data ([`Hot`]), and what
//! changes only when an endpoint is created, deleted or given another shape
//! ([`Cold`]: the key's text, the source, the shape).
//!
//! Why two maps, and plain data in the first: a fold writes into a state that
//! shares its tree with the last published snapshot, so every write copies the
//! path to its leaf. When the leaves held reference-counted records, copying a
//! leaf took a reference to each of its sixteen records (sixteen cache misses
//! at scattered addresses), and dropping the superseded state let go of them
//! again: a third of the fold at 100k endpoints. A leaf of plain records is
//! copied with one `memcpy`, and the common event (health, weight or address
//! of an endpoint, same owner and shape) touches only this map. Reading the
//! record also no longer follows record → value → shape, three dependent cache
//! misses. The probe `benches/benches/record_layout.rs` measured this layout
//! at 1.30–1.72× the reference-counted one.
//!
//! Both maps always hold the same keys. Readers assemble an [`Endpoint`] from
//! the two, which takes two references (key and shape).
//!
//! What it does NOT do: indexes, the content hash or the merged view (see
//! `apply`); it stores what it is given.

use std::net::IpAddr;
use std::sync::Arc;

use imbl::OrdMap;

use super::canon;
use super::{HKey, Written};
use crate::model::{Endpoint, EndpointShape, Health};

/// What a rewrite of an endpoint reads and writes, by value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hot {
    pub(crate) address: IpAddr,
    pub(crate) weight: u32,
    pub(crate) health: Health,
    /// How many hostnames the shape lists: 0, 1, or 2 for two or more. With
    /// exactly one, `first_host` names every hostname the endpoint serves.
    pub(crate) hosts: u8,
    pub(crate) generation: u64,
    /// [`Written`]'s term in the state's content hash. (The content digest
    /// it is made from is not kept: a rewrite that changes nothing is found by
    /// comparing fields, and readers compute it; 8 bytes less per record is 8
    /// bytes less to copy per record of every leaf a fold copies.)
    pub(crate) hash: u64,
    /// The shape's [`EndpointShape::source_digest`], as two halves (a `u128`
    /// would align the record to 16 bytes and grow it).
    shape_source: [u64; 2],
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

/// What the facts of a shape a [`Hot`] record copies: passed in by callers that
/// keep them at hand for many endpoints of one shape (a restore), so that
/// building a record reads nothing through the shape.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShapeFacts {
    pub(crate) digest: u64,
    pub(crate) source_digest: u128,
    pub(crate) first_host: Option<HKey>,
    /// How many hostnames it lists.
    pub(crate) hosts: usize,
}

impl ShapeFacts {
    /// The facts of `shape`, read from it.
    pub(crate) fn of(shape: &EndpointShape) -> Self {
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
            shape_source: [
                shape.source_digest as u64,
                (shape.source_digest >> 64) as u64,
            ],
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

    /// The shape's [`EndpointShape::source_digest`].
    pub(crate) fn shape_source(&self) -> u128 {
        u128::from(self.shape_source[0]) | (u128::from(self.shape_source[1]) << 64)
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
    /// The endpoint these parts and `hot` make.
    pub(crate) fn endpoint(&self, hot: &Hot) -> Endpoint {
        Endpoint {
            key: self.key.clone(),
            address: hot.address,
            weight: hot.weight,
            health: hot.health,
            shape: self.shape.clone(),
        }
    }

    /// Whether `ep`, written by `source`, has these parts (same key, source and
    /// shape, the shape by pointer): a write that may keep this value.
    fn holds(&self, ep: &Endpoint, source: &Arc<str>) -> bool {
        Arc::ptr_eq(&self.shape, &ep.shape) && self.source == *source && self.key == ep.key
    }
}

/// The two maps. Cloning is O(1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EndpointStore {
    hot: OrdMap<HKey, Hot>,
    cold: OrdMap<HKey, Arc<Cold>>,
}

impl EndpointStore {
    /// A store of the two maps, which must hold the same keys.
    pub(crate) fn from_maps(hot: OrdMap<HKey, Hot>, cold: OrdMap<HKey, Arc<Cold>>) -> Self {
        debug_assert_eq!(hot.len(), cold.len());
        EndpointStore { hot, cold }
    }

    pub(crate) fn len(&self) -> usize {
        self.hot.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.hot.is_empty()
    }

    pub(crate) fn hot(&self, hk: &HKey) -> Option<&Hot> {
        self.hot.get(hk)
    }

    /// The record under `hk`, to write in place (copies the path to it if
    /// another state shares it).
    pub(crate) fn hot_mut(&mut self, hk: &HKey) -> Option<&mut Hot> {
        self.hot.get_mut(hk)
    }

    pub(crate) fn cold(&self, hk: &HKey) -> Option<&Arc<Cold>> {
        self.cold.get(hk)
    }

    /// The endpoint under `hk`.
    pub(crate) fn endpoint(&self, hk: &HKey) -> Option<Endpoint> {
        Some(self.cold.get(hk)?.endpoint(self.hot.get(hk)?))
    }

    /// The endpoint under `hk` with who wrote it.
    pub(crate) fn written(&self, hk: &HKey) -> Option<Written<Endpoint>> {
        Some(written(self.hot.get(hk)?, self.cold.get(hk)?))
    }

    /// Every record, in key-hash order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (HKey, &Hot, &Arc<Cold>)> + '_ {
        self.hot
            .iter()
            .zip(self.cold.values())
            .map(|((k, h), c)| (*k, h, c))
    }

    /// Every record's key and hot part, in key-hash order.
    pub(crate) fn iter_hot(&self) -> impl Iterator<Item = (&HKey, &Hot)> + '_ {
        self.hot.iter()
    }

    /// Stores `ep` under `hk` with its record `hot`, written by `source`;
    /// returns the record it replaces. The cold part is kept when it already
    /// holds the same key, source and shape.
    pub(crate) fn insert(
        &mut self,
        hk: HKey,
        hot: Hot,
        ep: &Endpoint,
        source: &Arc<str>,
    ) -> Option<Hot> {
        if !self.cold.get(&hk).is_some_and(|c| c.holds(ep, source)) {
            let cold = Cold {
                key: ep.key.clone(),
                source: source.clone(),
                shape: ep.shape.clone(),
            };
            self.cold.insert(hk, Arc::new(cold));
        }
        self.hot.insert(hk, hot)
    }

    /// Removes the endpoint under `hk`, returning both parts.
    pub(crate) fn remove(&mut self, hk: &HKey) -> Option<(Hot, Arc<Cold>)> {
        let hot = self.hot.remove(hk)?;
        let cold = self.cold.remove(hk)?;
        Some((hot, cold))
    }
}

/// The key of a source's name in a [`Hot`] record: the top 64 bits of
/// [`HKey::of`] it. Why not all 128: a handful of sources share a state, so 64
/// bits leave no practical chance of two sharing a key, and a smaller record
/// is cheaper to copy.
pub(crate) fn source_key(name: &str) -> u64 {
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
