//! Hashes of resource sets and snapshots, beside the resources they digest.
//!
//! A snapshot's hash mixes the model's hash and the resources' hash; both are sums
//! of per-entry digests, so the engine updates them in O(changed) with
//! [`replace_entry_hash`], and a replay or a checkpoint restore recomputes the same
//! value from scratch.

use xxhash_rust::xxh3::xxh3_64;

use crate::snapshot::Snapshot;
use crate::{Resource, ResourceKind, ResourceMap, ResourceSet, ResourceType, entry_hash};

/// A snapshot's hash recomputed from scratch (O(state)): equals `snapshot.hash` for
/// every snapshot an [`Engine`] publishes. For tests and debug tools.
pub fn full_snapshot_hash(snapshot: &Snapshot) -> u64 {
    snapshot_hash(
        snapshot.model.recompute_hash(),
        resources_hash(&snapshot.resources),
    )
}

/// The snapshot hash: model hash and resources hash, mixed.
pub fn snapshot_hash(model: u64, resources: u64) -> u64 {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&model.to_le_bytes());
    b[8..].copy_from_slice(&resources.to_le_bytes());
    xxh3_64(&b)
}

/// The maps that hold resources of type `t` (listeners come in two flavours), each
/// with its kind's tag so equal names in different maps hash apart.
fn maps_of(set: &ResourceSet, t: ResourceType) -> impl Iterator<Item = (u8, &ResourceMap)> {
    ResourceKind::of_type(t)
        .iter()
        .map(|k| (k.tag(), k.map(set)))
}

/// Hash of a whole resource set: the wrapping sum of one digest per (map, name,
/// version). O(resources); the engine maintains it incrementally instead.
pub fn resources_hash(set: &ResourceSet) -> u64 {
    let mut h = 0u64;
    for t in ResourceType::ALL {
        for (tag, map) in maps_of(set, t) {
            for r in map.values() {
                h = h.wrapping_add(entry_hash(tag, r));
            }
        }
    }
    h
}

/// `h`, a resources hash, after the entry of map `tag` under one name went from
/// `old` to `new` (either absent): the one step every incremental update of the
/// hash takes.
pub fn replace_entry_hash(h: u64, tag: u8, old: Option<&Resource>, new: Option<&Resource>) -> u64 {
    let h = old.map_or(h, |r| h.wrapping_sub(entry_hash(tag, r)));
    new.map_or(h, |r| h.wrapping_add(entry_hash(tag, r)))
}
