//! [`ResourceMap`]: the resources of one type (or flavour), by name, as a
//! persistent map that snapshots, views and every delta stream's record of
//! what its proxy holds share.
//!
//! Why not `imbl::OrdMap<Arc<str>, Arc<Resource>>`, as before: a batch rewrites
//! resources scattered over the map, and in a B-tree each write copied a leaf
//! and the branches above it, taking a reference on every key and value a
//! copied node holds (32 per leaf, each a cache miss at a scattered address)
//! after a descent of string compares, each following a key to its text. At 20k
//! resources that was a large part of the 100-endpoint batch. Here a name's
//! 128-bit hash picks its bucket directly (see `state::records`): a write
//! copies the two nodes above its bucket (16 pointers each), the bucket (a few
//! entries) and, in a map shared whole, the root array (one pointer per 256
//! buckets); an entry is one pointer, since the resource holds its name. The
//! last point matters to every delta stream: its map of what its proxy holds
//! shares the snapshot's until the next push, and each push writes into it.
//!
//! **Order:** iteration is in the order of the names' hashes, which is
//! deterministic (the same names always iterate in the same order) but not
//! alphabetical. Whatever shows names to people sorts them itself.
//!
//! **Names** are compared by value: the hash only picks the bucket, and two
//! names with one hash (xxh3 is not keyed, and registries choose the names)
//! are two entries, each found by its own name (see `records`, "Full keys").

use std::sync::{Arc, LazyLock};

use super::Resource;
use deltapilot_model::keys::HKey;
use deltapilot_model::records::{FullKey, Records};

/// Named resources of one type (or one flavour of a type); see the module doc.
#[derive(Clone, PartialEq, Eq)]
pub struct ResourceMap {
    /// Name hash → resource; every key bit picks buckets (no shards).
    records: Records<Named, 0>,
}

/// A resource in the map, told apart from others of the same name hash by
/// its name.
#[derive(Clone, PartialEq, Eq)]
struct Named(Arc<Resource>);

/// The hash a name is stored under. Tests force names that begin with
/// `same-hash/` onto one hash, to show two such names stay two resources.
fn hash_of(name: &str) -> HKey {
    #[cfg(test)]
    if name.starts_with("same-hash/") {
        return HKey::of("same-hash/");
    }
    HKey::of(name)
}

impl FullKey for Named {
    type Key = str;
    fn full_key(&self) -> &str {
        &self.0.name
    }
}

/// The empty map every new one starts as a clone of. Why: an empty map still
/// holds a root and a node, and a delta stream keeps two maps per type it
/// serves; sharing one pair keeps an idle stream's maps to a reference each.
static EMPTY: LazyLock<ResourceMap> = LazyLock::new(|| ResourceMap {
    records: Records::default(),
});

impl Default for ResourceMap {
    fn default() -> Self {
        EMPTY.clone()
    }
}

impl ResourceMap {
    /// An empty map.
    pub fn new() -> Self {
        ResourceMap::default()
    }

    /// The shared empty map, borrowed for as long as needed (what a view of a
    /// type the snapshot does not hold is).
    pub fn empty() -> &'static ResourceMap {
        &EMPTY
    }

    /// How many resources it holds.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The resource named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Resource>> {
        self.records.get(&hash_of(name), name).map(|n| &n.0)
    }

    /// Whether a resource is named `name`.
    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Stores `r` under its name, returning the resource it replaces.
    pub fn insert(&mut self, r: Arc<Resource>) -> Option<Arc<Resource>> {
        let k = hash_of(&r.name);
        self.records.insert(k, Named(r)).map(|n| n.0)
    }

    /// Removes the resource named `name`, returning it.
    pub fn remove(&mut self, name: &str) -> Option<Arc<Resource>> {
        self.records.remove(&hash_of(name), name).map(|n| n.0)
    }

    /// Every resource with its name, in the order of the module doc.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Arc<Resource>)> + '_ {
        self.records.iter().map(|(_, Named(r))| (&r.name, r))
    }

    /// Every name, in the order of [`ResourceMap::iter`].
    pub fn keys(&self) -> impl Iterator<Item = &Arc<str>> + '_ {
        self.records.iter().map(|(_, Named(r))| &r.name)
    }

    /// Every resource, in the order of [`ResourceMap::iter`].
    pub fn values(&self) -> impl Iterator<Item = &Arc<Resource>> + '_ {
        self.records.iter().map(|(_, Named(r))| r)
    }

    /// Whether `other` is this map or a clone of it with no write since: true
    /// means equal, false means nothing. A constant-time test that lets a
    /// stream skip comparing a view it already holds.
    pub fn ptr_eq(&self, other: &Self) -> bool {
        self.records.ptr_eq(&other.records)
    }
}

impl FromIterator<Arc<Resource>> for ResourceMap {
    fn from_iter<I: IntoIterator<Item = Arc<Resource>>>(iter: I) -> Self {
        let mut map = ResourceMap::new();
        map.extend(iter);
        map
    }
}

impl Extend<Arc<Resource>> for ResourceMap {
    fn extend<I: IntoIterator<Item = Arc<Resource>>>(&mut self, iter: I) {
        for r in iter {
            self.insert(r);
        }
    }
}

impl std::fmt::Debug for ResourceMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn res(name: &str, body: &str) -> Arc<Resource> {
        Arc::new(Resource::new(
            name.into(),
            bytes::Bytes::copy_from_slice(body.as_bytes()),
        ))
    }

    /// The same answers as a `BTreeMap` after inserts, replacements and
    /// removals across bucket doublings and halvings, and a clone taken
    /// before the writes keeps what it held.
    #[test]
    fn it_answers_as_a_btreemap_and_clones_keep_their_contents() {
        let mut map = ResourceMap::new();
        let mut model: BTreeMap<String, Arc<Resource>> = BTreeMap::new();
        let mut kept = Vec::new();
        for round in 0..3u32 {
            for i in 0..3_000u32 {
                let name = format!("outbound|{}||svc-{}.ns.svc", 80 + i % 3, i / 3);
                if (i + round) % 5 == 0 {
                    assert_eq!(map.remove(&name), model.remove(&name), "{name}");
                } else {
                    let r = res(&name, &format!("{round}-{i}"));
                    assert_eq!(map.insert(r.clone()), model.insert(name, r));
                }
            }
            assert_eq!(map.len(), model.len());
            for (name, r) in &model {
                assert_eq!(map.get(name), Some(r), "{name}");
                assert!(map.contains_key(name));
            }
            assert!(map.get("absent").is_none());
            let mut names: Vec<&str> = map.keys().map(|n| &**n).collect();
            names.sort_unstable();
            assert!(names.iter().copied().eq(model.keys().map(String::as_str)));
            assert!(map.iter().all(|(n, r)| Arc::ptr_eq(n, &r.name)));
            kept.push((map.clone(), model.clone()));
        }
        for _ in 0..3_000 {
            let Some(name) = map.keys().next().cloned() else {
                break;
            };
            map.remove(&name);
            model.remove(&*name);
        }
        assert!(map.is_empty() && model.is_empty());
        for (map, model) in kept {
            assert_eq!(map.len(), model.len());
            assert!(model.iter().all(|(n, r)| map.get(n) == Some(r)));
        }
    }

    /// Iteration order depends only on the names held, not on the order
    /// they were written in; equality ignores that order too.
    #[test]
    fn order_and_equality_depend_only_on_contents() {
        let names: Vec<String> = (0..500).map(|i| format!("r{i}")).collect();
        let forward: ResourceMap = names.iter().map(|n| res(n, "x")).collect();
        let backward: ResourceMap = names.iter().rev().map(|n| res(n, "x")).collect();
        assert!(forward.keys().eq(backward.keys()));
        assert_eq!(forward, backward);
        let mut other = backward.clone();
        other.insert(res("r7", "y"));
        assert_ne!(forward, other);
    }

    /// Two names forced onto one hash are two resources: each found by its
    /// own name, a write of one leaves the other, a remove takes only one.
    #[test]
    fn two_names_of_one_hash_are_two_resources() {
        let (a, b) = ("same-hash/a", "same-hash/b");
        let mut map: ResourceMap = (0..100).map(|i| res(&format!("r{i}"), "x")).collect();
        assert!(map.insert(res(a, "1")).is_none());
        assert!(map.insert(res(b, "2")).is_none(), "b must not replace a");
        assert_eq!(map.len(), 102);
        assert_eq!(map.get(a).map(|r| r.bytes.clone()), Some("1".into()));
        assert_eq!(map.get(b).map(|r| r.bytes.clone()), Some("2".into()));
        assert!(map.get("same-hash/c").is_none());
        let old = map.insert(res(a, "3")).expect("a replaces a");
        assert_eq!(old.bytes, bytes::Bytes::from("1"));
        assert_eq!(map.get(b).map(|r| r.bytes.clone()), Some("2".into()));
        let gone = map.remove(b).expect("b is removed");
        assert_eq!(&*gone.name, b);
        assert!(map.remove(b).is_none());
        assert_eq!(map.get(a).map(|r| r.bytes.clone()), Some("3".into()));
        assert_eq!(map.len(), 101);
        assert_eq!(
            map.keys().filter(|n| n.starts_with("same-hash/")).count(),
            1
        );
    }

    /// `ptr_eq` holds for a clone until either side is written.
    #[test]
    fn ptr_eq_holds_until_a_write() {
        let a: ResourceMap = (0..40).map(|i| res(&format!("r{i}"), "x")).collect();
        let mut b = a.clone();
        assert!(a.ptr_eq(&b));
        b.insert(res("r3", "y"));
        assert!(!a.ptr_eq(&b));
        assert!(!a.ptr_eq(&ResourceMap::new()));
        assert!(ResourceMap::new().ptr_eq(&ResourceMap::default()));
    }
}
