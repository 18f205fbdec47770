//! Two keys whose hashes are equal stay two records: the map compares full
//! keys wherever the hashes match, in a small bucket, in a big one, and while
//! a resize moves them.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{FullKey, Records};
use crate::keys::HKey;

/// A record that carries its full key and a value to tell writes apart.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    key: Arc<str>,
    value: u64,
}

impl FullKey for Rec {
    type Key = str;
    fn full_key(&self) -> &str {
        &self.key
    }
}

fn rec(key: &str, value: u64) -> Rec {
    Rec {
        key: key.into(),
        value,
    }
}

/// The one hash every forced key is stored under.
fn forced() -> HKey {
    HKey::of("forced")
}

#[test]
fn two_keys_of_one_hash_are_two_records() {
    let mut map: Records<Rec, 0> = Records::default();
    let h = forced();
    assert_eq!(map.insert(h, rec("a", 1)), None);
    assert_eq!(map.insert(h, rec("b", 2)), None, "b must not replace a");
    map.check();
    assert_eq!(map.len(), 2);
    assert_eq!(map.get(&h, "a"), Some(&rec("a", 1)));
    assert_eq!(map.get(&h, "b"), Some(&rec("b", 2)));
    assert_eq!(map.get(&h, "c"), None, "a third text of the hash is absent");

    // A rewrite replaces only the record of its own key.
    assert_eq!(map.insert(h, rec("a", 3)), Some(rec("a", 1)));
    assert_eq!(map.get(&h, "b"), Some(&rec("b", 2)));
    if let Some(r) = map.get_mut(&h, "b") {
        r.value = 4;
    }
    assert_eq!(map.get(&h, "a"), Some(&rec("a", 3)));

    // A delete removes only one.
    let kept = map.clone();
    assert_eq!(map.remove(&h, "a"), Some(rec("a", 3)));
    assert_eq!(map.remove(&h, "a"), None);
    map.check();
    assert_eq!(map.len(), 1);
    assert_eq!(map.get(&h, "a"), None);
    assert_eq!(map.get(&h, "b"), Some(&rec("b", 4)));
    // The clone taken before keeps both.
    assert_eq!(kept.len(), 2);
    assert_eq!(kept.get(&h, "a"), Some(&rec("a", 3)));
    // Iteration shows each record once, in full-key order within the hash.
    let keys: Vec<&str> = kept.iter().map(|(_, r)| &*r.key).collect();
    assert_eq!(keys, ["a", "b"]);
}

/// Hundreds of texts forced onto one hash (a big bucket), among ordinary keys
/// that make the map double and halve: every answer is the model's.
#[test]
fn many_keys_of_one_hash_survive_resizes_and_the_big_bucket() {
    let mut map: Records<Rec, 0> = Records::default();
    let mut model: BTreeMap<(HKey, String), u64> = BTreeMap::new();
    let forced_keys: Vec<String> = (0..200).map(|i| format!("forced-{i}")).collect();
    let plain_keys: Vec<String> = (0..3_000).map(|i| format!("plain-{i}")).collect();
    let hash_of = |k: &str| {
        if k.starts_with("forced-") {
            forced()
        } else {
            HKey::of(k)
        }
    };
    let mut step = 0u64;
    for round in 0..3u64 {
        for (i, k) in forced_keys.iter().chain(&plain_keys).enumerate() {
            step += 1;
            let h = hash_of(k);
            if (i as u64 + round) % 3 == 2 {
                let want = model.remove(&(h, k.clone()));
                assert_eq!(map.remove(&h, k).map(|r| r.value), want, "{k}");
            } else {
                let want = model.insert((h, k.clone()), step);
                assert_eq!(map.insert(h, rec(k, step)).map(|r| r.value), want, "{k}");
            }
            if step.is_multiple_of(97) {
                map.check();
            }
        }
        map.check();
        assert!(map.big_buckets() > 0, "the forced keys make a big bucket");
        assert_eq!(map.len(), model.len());
        for k in forced_keys.iter().chain(&plain_keys) {
            let h = hash_of(k);
            let want = model.get(&(h, k.clone())).copied();
            assert_eq!(map.get(&h, k).map(|r| r.value), want, "{k}");
        }
        let seen: Vec<(HKey, String, u64)> = map
            .iter()
            .map(|(h, r)| (*h, r.key.to_string(), r.value))
            .collect();
        let want: Vec<(HKey, String, u64)> = model
            .iter()
            .map(|((h, k), v)| (*h, k.clone(), *v))
            .collect();
        assert_eq!(seen, want, "iteration is by hash, then full key");
    }
    // Down to nothing, one forced key at a time: each delete removes one.
    for k in &forced_keys {
        let before = map.len();
        let present = map.get(&forced(), k).is_some();
        map.remove(&forced(), k);
        assert_eq!(map.len(), before - usize::from(present));
        assert!(map.get(&forced(), k).is_none());
    }
    map.check();
}
