//! `Records` against `BTreeMap` as the model: the same answers after any
//! sequence of writes, across bucket doublings and halvings, and a clone taken
//! before writes keeps what it held (the fold writes into a state a snapshot
//! shares).

use std::collections::BTreeMap;

use super::endpoints::{HotRecords as Records, SHARDS, shard};
use super::{HKey, Hot, ModelState, mk};
use crate::fold::fold;

/// One real record, to vary by generation.
fn some_hot() -> Hot {
    let st = fold(
        &ModelState::default(),
        &mk::at(
            0,
            vec![
                mk::svc("s", 1, "ns", "a.ns.svc", &[80]),
                mk::ep("s", 1, "e", "10.0.0.1", &["a.ns.svc"]),
            ],
        ),
    )
    .state;
    let (_, hot) = st.raw_endpoints.iter_hot().next().expect("one record");
    *hot
}

fn hot(base: Hot, generation: u64) -> Hot {
    let mut h = base;
    h.generation = generation;
    h
}

/// A small deterministic generator (xorshift), so a failure repeats.
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

/// `n` keys of shard `s` (a map holds the keys of one shard of the store).
fn keys(s: usize, n: usize, name: &str) -> Vec<HKey> {
    (0..)
        .map(|i| HKey::of(&format!("{name}-{i}")))
        .filter(|k| shard(k) == s)
        .take(n)
        .collect()
}

/// Adds one to the weight of `h`, returning what it now holds.
fn bump(h: &mut Hot) -> Hot {
    h.weight = h.weight.wrapping_add(1);
    *h
}

fn same(records: &Records, model: &BTreeMap<HKey, Hot>) {
    records.check();
    assert_eq!(records.len(), model.len());
    assert!(
        records.iter().eq(model.iter()),
        "iteration differs from the model"
    );
}

/// [`Records::get_each`] answers as [`Records::get`] of each key, in order,
/// for keys present and absent.
fn each_agrees(records: &Records, keys: &[HKey], model: &BTreeMap<HKey, Hot>) {
    let mut out = Vec::new();
    records.get_each(keys, &mut out);
    let want: Vec<Option<&Hot>> = keys.iter().map(|k| model.get(k)).collect();
    assert_eq!(out, want, "get_each differs from the model");
}

#[test]
fn records_answer_as_a_sorted_map_through_growth_and_shrinking() {
    let base = some_hot();
    for s in 0..SHARDS {
        churn(base, &keys(s, 6_000, "key"));
    }
}

fn churn(base: Hot, keys: &[HKey]) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut records = Records::default();
    let mut model = BTreeMap::new();
    let mut kept: Vec<(Records, BTreeMap<HKey, Hot>)> = Vec::new();
    // Grow to ~5,000 (several doublings) and churn at random...
    for step in 0..40_000u64 {
        let k = keys[rng.next(keys.len() as u64) as usize];
        let roll = rng.next(10);
        if roll < if step < 20_000 { 9 } else { 5 } {
            let v = hot(base, step);
            assert_eq!(records.insert(k, v), model.insert(k, v));
        } else if roll < 8 {
            assert_eq!(records.remove(&k, &()), model.remove(&k));
        } else {
            assert_eq!(
                records.get_mut(&k, &()).map(bump),
                model.get_mut(&k).map(bump)
            );
        }
        assert_eq!(records.get(&k, &()), model.get(&k));
        if step % 5_000 == 0 {
            same(&records, &model);
            each_agrees(&records, keys, &model);
            kept.push((records.clone(), model.clone()));
        }
    }
    // ...then remove all but a few (several halvings).
    for (i, k) in keys.iter().enumerate().skip(20) {
        assert_eq!(records.remove(k, &()), model.remove(k));
        if i % 500 == 0 {
            same(&records, &model);
        }
    }
    same(&records, &model);
    each_agrees(&records, keys, &model);
    assert!(records.len() <= 20, "the sweep leaves at most 20");
    for (then, then_model) in &kept {
        same(then, then_model);
    }
}

/// A resize moves a few buckets per write rather than rebuilding the map in
/// one: the write that starts it leaves the map before it whole, shared with a
/// clone taken before that write but for the written bucket, and while the
/// buckets move the map answers as the model after every write, through
/// doublings and halvings.
#[test]
fn a_resize_moves_a_few_buckets_per_write_and_answers_throughout() {
    let base = some_hot();
    let ks = keys(1, 4_200, "resize");
    let mut records = Records::default();
    let mut model = BTreeMap::new();
    // One write (an insert or a remove of key i); whether it started a resize.
    let write = |records: &mut Records, model: &mut BTreeMap<HKey, Hot>, i: usize, add: bool| {
        let before = records.clone();
        let k = ks[i];
        if add {
            let v = hot(base, i as u64);
            assert_eq!(records.insert(k, v), model.insert(k, v));
        } else {
            assert_eq!(records.remove(&k, &()), model.remove(&k));
        }
        let mut started = false;
        if let Some(from) = records.resize_source() {
            if before.resize_source().is_none() {
                started = true;
                let buckets = from.buckets_shared_with(from); // every bucket
                assert!(
                    from.buckets_shared_with(&before) + 1 >= buckets,
                    "the map before the resize is not copied"
                );
            }
            same(records, model);
        } else if i.is_multiple_of(64) {
            same(records, model);
        }
        started
    };
    let grown = (0..ks.len())
        .filter(|&i| write(&mut records, &mut model, i, true))
        .count();
    // Up to 4,200 records the map doubles ten times; the first three move
    // their few buckets within the write that starts them.
    assert!(grown >= 7, "{grown} doublings seen moving");
    let shrunk = (0..ks.len())
        .filter(|&i| write(&mut records, &mut model, i, false))
        .count();
    assert!(shrunk >= 7, "{shrunk} halvings seen moving");
    same(&records, &model);
    assert!(records.is_empty());
}

#[test]
fn a_sorted_load_equals_one_insert_at_a_time() {
    let base = some_hot();
    for (n, s) in [0usize, 1, 7, 100, 2_048, 10_000]
        .into_iter()
        .zip((0..SHARDS).cycle())
    {
        let mut model: BTreeMap<HKey, Hot> = BTreeMap::new();
        let mut one_by_one = Records::default();
        for (i, k) in keys(s, n, "load").into_iter().enumerate() {
            model.insert(k, hot(base, i as u64));
            one_by_one.insert(k, hot(base, i as u64));
        }
        let loaded = Records::from_sorted(model.iter().map(|(k, v)| (*k, *v)));
        same(&loaded, &model);
        same(&one_by_one, &model);
        assert_eq!(loaded, one_by_one);
    }
}

/// Keys that share their top bits (the first `bits` after the shard bit) pile
/// into one bucket whatever the map's size: past 64 it becomes an `OrdMap`,
/// so inserting them does not copy an ever larger slice each time, and it
/// comes back to a slice when they are removed.
#[test]
fn keys_sharing_their_top_bits_do_not_grow_one_slice() {
    const SHARED: u32 = 10;
    let base = some_hot();
    let top = |k: &HKey| (k.prefix() << 1) >> (64 - SHARED);
    let piled: Vec<HKey> = keys(0, 150_000, "piled")
        .into_iter()
        .filter(|k| top(k) == 0)
        .take(150)
        .collect();
    assert_eq!(piled.len(), 150, "enough keys share their top bits");
    let mut records = Records::default();
    let mut model = BTreeMap::new();
    for (i, k) in keys(0, 1_000, "spread").into_iter().enumerate() {
        records.insert(k, hot(base, i as u64));
        model.insert(k, hot(base, i as u64));
    }
    assert_eq!(records.big_buckets(), 0, "hash keys spread");
    let before = records.clone();
    for (i, k) in piled.iter().enumerate() {
        let v = hot(base, 10_000 + i as u64);
        assert_eq!(records.insert(*k, v), model.insert(*k, v));
    }
    same(&records, &model);
    assert_eq!(records.big_buckets(), 1, "the piled keys share one bucket");
    let mut asked = keys(0, 1_200, "spread");
    asked.extend(&piled);
    each_agrees(&records, &asked, &model);
    for k in &piled {
        assert_eq!(
            records.get_mut(k, &()).map(bump),
            model.get_mut(k).map(bump)
        );
    }
    same(&records, &model);
    for k in &piled[..140] {
        assert_eq!(records.remove(k, &()), model.remove(k));
    }
    same(&records, &model);
    assert_eq!(records.big_buckets(), 0, "back to a slice under 32");
    assert_eq!(before.big_buckets(), 0, "the clone kept its buckets");
}
