//! A small immutable map held as one shared sorted slice.
//!
//! Why: an endpoint shape's ports and labels are a handful of entries, and a
//! `BTreeMap` allocates a node of eleven slots for the first one (about 220 bytes
//! for two ports, 360 for two labels), which was most of a shape's memory and
//! a large part of a checkpoint restore's fresh pages. One exact-size slice
//! holds the same entries in 64 and 80 bytes (with its reference counts), a
//! shape that keeps its predecessor's map shares it, and a lookup is a binary
//! search over a few entries.
//!
//! What it does NOT do: change after it is built (shapes are immutable; a new
//! shape gets a new map).

use std::borrow::Borrow;
use std::sync::Arc;

/// Entries sorted by key, keys unique; shared, so a clone (a new shape that
/// keeps its predecessor's labels) copies one pointer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SortedMap<K, V>(Arc<[(K, V)]>);

impl<K, V> Default for SortedMap<K, V> {
    fn default() -> Self {
        SortedMap(Arc::new([]))
    }
}

impl<K: Ord, V> SortedMap<K, V> {
    /// The value under `key`.
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.0
            .binary_search_by(|(k, _)| k.borrow().cmp(key))
            .ok()
            .map(|i| &self.0[i].1)
    }
}

impl<K, V> SortedMap<K, V> {
    /// The entries, by key.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&K, &V)> + '_ {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Collects entries in any order; for a repeated key the last one wins, as for
/// a `BTreeMap`.
impl<K: Ord, V> FromIterator<(K, V)> for SortedMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut v: Vec<(K, V)> = iter.into_iter().collect();
        // Stable, so that among equal keys the input order stays and the last
        // one can be kept.
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same {
                std::mem::swap(later, earlier);
            }
            same
        });
        SortedMap(v.into())
    }
}

impl<K: Ord, V> From<std::collections::BTreeMap<K, V>> for SortedMap<K, V> {
    fn from(m: std::collections::BTreeMap<K, V>) -> Self {
        // Already sorted and unique.
        SortedMap(m.into_iter().collect::<Vec<_>>().into())
    }
}

impl<'a, K, V> IntoIterator for &'a SortedMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (K, V)>, fn(&'a (K, V)) -> (&'a K, &'a V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Built from entries in any order, it holds what a `BTreeMap` built from the
    /// same entries holds, in the same order, the last of a repeated key winning;
    /// lookups find every key and nothing else.
    #[test]
    fn it_holds_what_a_btree_map_holds() {
        let entries = [("b", 2), ("a", 1), ("d", 4), ("b", 3), ("c", 5), ("a", 6)];
        let want: BTreeMap<&str, i32> = entries.iter().copied().collect();
        let got: SortedMap<&str, i32> = entries.iter().copied().collect();
        assert_eq!(
            got.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>(),
            want.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>()
        );
        assert_eq!(got.len(), 4);
        for (k, v) in &want {
            assert_eq!(got.get(k), Some(v), "{k}");
        }
        assert_eq!(got.get("e"), None);
        assert_eq!(got.get(""), None);
        assert_eq!(SortedMap::from(want.clone()), got);
        assert!(SortedMap::<&str, i32>::default().is_empty());
    }
}
