//! A persistent map from key hash to value, made for what the fold does to
//! it: the endpoint records of one shard of an
//! [`EndpointStore`](super::endpoints::EndpointStore) (values `Hot`), and
//! each type's xDS resources (see `xds::resource_map`, values one pointer).
//!
//! Why not `imbl::OrdMap`: a fold writes a batch of up to 4,096 rewrites into a
//! state that shares its map with the last published snapshot, and the keys are
//! uniform hashes, so the batch lands all over the map. In a B+tree of 16-entry
//! nodes that copied a large share of the leaves (each built on the stack and
//! then moved to the heap, two copies of a whole node for a few records) and
//! every branch above them, with a binary search over 16-byte keys
//! at each of four levels on the way down. Path copies were the bulk of the
//! fold at 100k endpoints.
//!
//! Here the keys' top bits pick a bucket directly: each bucket a sorted slice
//! of about [`MEAN`] records in one allocation of exactly their size, under a
//! node of [`1 << MID_BITS`](MID_BITS) buckets, under a node of
//! [`1 << TOP_BITS`](TOP_BITS) of those, under one root array. A write copies
//! the root array and the two nodes above its bucket once per batch and the
//! bucket with one `memcpy`; a lookup is three indexes and a binary search in a
//! few records. Walking the buckets in order walks the keys in order, as the tree
//! did. The bucket count doubles or halves with the map, so a bucket stays
//! between [`MIN_MEAN`] and [`MAX_MEAN`] records on average; the keys being
//! hashes, none strays far from the mean. A resize moves the records a few
//! buckets at a time ([`MOVE_PER_WRITE`] per insert or remove), not all at
//! once: a map rebuilt whole in one write shared nothing with the map it came
//! from, and that one write copied a published snapshot's map whole, in the
//! batch that crossed the size. While it moves, the map before the resize
//! answers for the buckets not yet moved ([`Moving`]); bucket `i` of a map of
//! `bits` covers the keys of buckets `2i` and `2i + 1` of one of `bits + 1`, so
//! moving in bucket order keeps every moved key below every unmoved one, and a
//! walk of the moved buckets then the unmoved ones is still in key order.
//!
//! Keys chosen to share their top bits (an endpoint key is whatever a
//! registry calls it, and xxh3 is not keyed) would pile into one bucket, so a
//! bucket past [`BIG`] records moves to a tree of its own ([`Records::big`])
//! and inserting into it stays logarithmic.
//!
//! Why buckets this small: a batch of 4,096 into 100k records writes most
//! buckets of any size, so the bytes it copies fall with the bucket size, and
//! each halving of the mean down to this one raised the fold's throughput. Why
//! the middle level: with one flat array of 16k buckets a batch of 100 copied
//! it whole, a reference taken on every bucket, which made the 100-endpoint
//! fold much slower. Nodes of 16 buckets make it faster than it was before the
//! flat array, at a small cost to the large batch's throughput (nodes of 64
//! help it less). Why the upper level: a map that shares everything with
//! another and then takes one write (a delta stream's record of what its proxy
//! holds, shared with the snapshot's resources until the next push) copied a
//! root array of one reference per 16 buckets, over a thousand at 100k entries;
//! under nodes of 16 of those it is one per 256 buckets, fewer than a tree's
//! path copy.
//!
//! **Full keys.** A hash only picks the place: two records are the same key
//! exactly when their hashes and their full keys ([`FullKey`], the text a
//! resource is named by) are equal, so two texts with one hash (xxh3 is not
//! keyed, and registries choose the texts) are two records side by side, in
//! the order of their full keys, never one. A lookup compares the full key
//! only where the hash already matched: in practice once, on the record found.
//! A map whose keys are unique by construction says so with a full key of
//! `()` (see `state::endpoints`), and compares nothing more.
//!
//! What it does NOT do: know what a value means. A value is cloned whenever
//! its bucket is copied, so it should be plain data or one pointer.

use std::cmp::Ordering;
use std::sync::Arc;

use imbl::OrdMap;

use crate::keys::HKey;

#[cfg(test)]
mod collision_tests;

/// What tells two records of one map apart beyond their key's hash: their
/// full key, compared only when the hashes are equal.
pub trait FullKey {
    /// The full key: the text itself (`str`), or `()` where the map's hashes
    /// are unique by construction.
    type Key: ?Sized + Ord;
    /// This record's full key.
    fn full_key(&self) -> &Self::Key;
}

impl FullKey for Arc<str> {
    type Key = str;
    fn full_key(&self) -> &str {
        self
    }
}

/// The order of a stored record `(e, v)` against the key `k` with full key
/// `key`: by hash, then (equal hashes only) by full key.
fn order<V: FullKey>(e: &HKey, v: &V, k: &HKey, key: &V::Key) -> Ordering {
    e.cmp(k).then_with(|| v.full_key().cmp(key))
}

/// The mean bucket size a map is built or rebuilt for.
const MEAN: usize = 4;
/// A map whose mean bucket grows past this doubles its buckets.
const MAX_MEAN: usize = 8;
/// A map whose mean bucket shrinks below this halves its buckets.
const MIN_MEAN: usize = 1;
/// The buckets are grouped [`1 << MID_BITS`](MID_BITS) to a node under the
/// root array, so that a small batch copies the root array and a few small
/// nodes rather than one array of every bucket (which took a reference on
/// each bucket: at 100k records, 16k of them per batch, however small).
const MID_BITS: u32 = 4;
/// The bucket nodes are grouped [`1 << TOP_BITS`](TOP_BITS) to a node under
/// the root array, so that one write into a map shared whole copies one
/// reference per 256 buckets at the root (see the module doc).
const TOP_BITS: u32 = 4;

/// Buckets of the map before a resize moved into the new one per insert or
/// remove. Enough to finish long before the next resize is due: a doubling
/// leaves `2^bits` old buckets and `4 · 2^bits` inserts before the next, a
/// halving `2^(bits+1)` old buckets and `2^bits` removes before the next (a
/// resize due before the move ends finishes it first).
const MOVE_PER_WRITE: usize = 4;

/// A bucket that would grow past this many records moves to
/// [`Records::big`]. Keys that behave like hashes never get there (the mean
/// is at most [`MAX_MEAN`], and a bucket of 64 at a mean of 8 has a chance
/// below 10^-30); keys chosen to share their top bits would, and a slice
/// copied whole on every insert would make inserting n of them cost n².
const BIG: usize = 64;

/// One bucket: records sorted by hash then full key, no full key twice.
type Bucket<V> = Arc<[(HKey, V)]>;
/// A bucket that outgrew [`BIG`], as a tree: each write copies a path, not
/// the bucket. The records of one hash, in full-key order (almost always one).
type BigBucket<V> = OrdMap<HKey, Vec<V>>;
/// Up to [`1 << MID_BITS`](MID_BITS) consecutive buckets.
type Mid<V> = Arc<[Bucket<V>]>;
/// Up to [`1 << TOP_BITS`](TOP_BITS) consecutive bucket nodes.
type Top<V> = Arc<[Mid<V>]>;

/// Key hash → record, in buckets by the key's top bits after the first
/// `SKIP` (bits the same for every key of one map, such as the endpoint
/// store's shard bits).
#[derive(Clone)]
pub struct Records<V: Clone, const SKIP: u32> {
    tops: Arc<[Top<V>]>,
    /// The buckets that outgrew [`BIG`], by index; their slice is empty
    /// (back to a slice under half of [`BIG`]). Empty unless keys share their
    /// top bits, so the common path only asks whether it is empty; kept apart
    /// so that a bucket stays a bare slice, as small and as quick to copy as
    /// before.
    big: OrdMap<usize, BigBucket<V>>,
    /// There are `1 << bits` buckets.
    bits: u32,
    /// Records in the map, both tables counted while a resize moves them.
    len: usize,
    /// A resize in progress: the map before it, answering for the keys of
    /// the buckets not moved yet (see the module doc).
    moving: Option<Box<Moving<V, SKIP>>>,
}

/// The map before a resize, and how far the move has got.
#[derive(Clone)]
struct Moving<V: Clone, const SKIP: u32> {
    /// The map before the resize (it has no resize of its own in progress).
    from: Records<V, SKIP>,
    /// Its buckets below this have moved; its records there are stale.
    next: usize,
}

impl<V: Clone + FullKey, const SKIP: u32> Moving<V, SKIP> {
    /// Whether the map before the resize still answers for `k` (its bucket
    /// there has not moved yet).
    fn holds(&self, k: &HKey) -> bool {
        bucket_of::<SKIP>(k, self.from.bits) >= self.next
    }
}

impl<V: Clone + FullKey, const SKIP: u32> Default for Records<V, SKIP> {
    fn default() -> Self {
        Records::with_bits(0, std::iter::empty())
    }
}

/// How many bucket bits a map of `len` records is built with.
fn bits_for(len: usize) -> u32 {
    (len / MEAN).max(1).ilog2()
}

/// The records of one big bucket, in order.
fn big_records<V: Clone>(big: &BigBucket<V>) -> impl Iterator<Item = (&HKey, &V)> + '_ {
    big.iter()
        .flat_map(|(k, vs)| vs.iter().map(move |v| (k, v)))
}

/// How many records a big bucket holds.
fn big_len<V: Clone>(big: &BigBucket<V>) -> usize {
    big.values().map(Vec::len).sum()
}

/// A big bucket of `records` (sorted by hash then full key).
fn big_of<V: Clone>(records: impl IntoIterator<Item = (HKey, V)>) -> BigBucket<V> {
    let mut big = BigBucket::new();
    for (k, v) in records {
        big.entry(k).or_insert_with(Vec::new).push(v);
    }
    big
}

impl<V: Clone + FullKey, const SKIP: u32> Records<V, SKIP> {
    /// A map of `sorted` (sorted by hash then full key, no full key twice, all
    /// with the same first `SKIP` bits).
    pub fn from_sorted(sorted: impl ExactSizeIterator<Item = (HKey, V)>) -> Self {
        Records::with_bits(bits_for(sorted.len()), sorted)
    }

    /// A map of `sorted` in `1 << bits` buckets.
    fn with_bits(bits: u32, sorted: impl Iterator<Item = (HKey, V)>) -> Self {
        let mut sorted = sorted.peekable();
        let mut len = 0;
        let mut big = OrdMap::new();
        let buckets: Vec<Bucket<V>> = (0..1usize << bits)
            .map(|i| {
                let records: Vec<(HKey, V)> =
                    std::iter::from_fn(|| sorted.next_if(|(k, _)| bucket_of::<SKIP>(k, bits) == i))
                        .collect();
                len += records.len();
                if records.len() > BIG {
                    big.insert(i, big_of(records));
                    Bucket::from([])
                } else {
                    records.into()
                }
            })
            .collect();
        debug_assert!(sorted.next().is_none(), "records not sorted by key");
        let mids: Vec<Mid<V>> = buckets.chunks(1 << MID_BITS).map(Mid::from).collect();
        let tops = mids.chunks(1 << TOP_BITS).map(Top::from).collect();
        Records {
            tops,
            big,
            bits,
            len,
            moving: None,
        }
    }

    /// An empty map of `1 << bits` buckets whose nodes are shared: one empty
    /// bucket under one node under one node, so that a resize starts with a
    /// root array of one reference per 256 buckets and copies a node only
    /// when a bucket under it is written.
    fn skeleton(bits: u32) -> Self {
        let buckets = 1usize << bits;
        let per_mid = buckets.min(1 << MID_BITS);
        let mids = buckets / per_mid;
        let per_top = mids.min(1 << TOP_BITS);
        let empty: Bucket<V> = Bucket::from([]);
        let mid: Mid<V> = (0..per_mid).map(|_| empty.clone()).collect();
        let top: Top<V> = (0..per_top).map(|_| mid.clone()).collect();
        Records {
            tops: (0..mids / per_top).map(|_| top.clone()).collect(),
            big: OrdMap::new(),
            bits,
            len: 0,
            moving: None,
        }
    }

    /// How many records the map holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the map holds no record.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The table that answers for `k`: this one, or the map before a resize
    /// in progress.
    fn table_of(&self, k: &HKey) -> &Self {
        match &self.moving {
            Some(m) if m.holds(k) => &m.from,
            _ => self,
        }
    }

    /// The bucket of index `b` in this table.
    fn bucket_at(&self, b: usize) -> &Bucket<V> {
        &self.tops[b >> (MID_BITS + TOP_BITS)][(b >> MID_BITS) & TOP_MASK][b & MID_MASK]
    }

    /// The bucket of `k` in this table, with its index.
    fn bucket(&self, k: &HKey) -> (usize, &Bucket<V>) {
        let b = bucket_of::<SKIP>(k, self.bits);
        (b, self.bucket_at(b))
    }

    /// The bucket of `k` (its index), and where the record of hash `k` and
    /// full key `key` is in it (`Ok`) or would go (`Err`).
    fn find(&self, k: &HKey, key: &V::Key) -> (usize, &Bucket<V>, Result<usize, usize>) {
        let (b, bucket) = self.bucket(k);
        (
            b,
            bucket,
            bucket.binary_search_by(|(e, v)| order(e, v, k, key)),
        )
    }

    /// The bucket of index `b`, to replace or write into: copies the root
    /// array and the two nodes above the bucket where another map shares them.
    fn bucket_mut(&mut self, b: usize) -> &mut Bucket<V> {
        let top = &mut Arc::make_mut(&mut self.tops)[b >> (MID_BITS + TOP_BITS)];
        let mid = &mut Arc::make_mut(top)[(b >> MID_BITS) & TOP_MASK];
        &mut Arc::make_mut(mid)[b & MID_MASK]
    }

    /// Reads what a lookup of `k` reads (the bucket's first cache line, which
    /// holds its reference count, and every record's key: a binary search in
    /// a few records reads most of their lines, 96 bytes a record in the
    /// endpoint store, and a write copies them all), and returns a value made
    /// of it, for the caller to keep (`std::hint::black_box`) so the reads
    /// stay. Why: at 100k records a bucket is a cache miss, and a fold that
    /// looks up one key after another waits for each miss in turn; reading
    /// the buckets of the next few keys first, one after another with nothing
    /// depending on the previous read, lets the processor wait for all of them
    /// at once (as [`Records::get_each`] does).
    pub fn warm(&self, k: &HKey) -> u64 {
        let (_, bucket) = self.table_of(k).bucket(k);
        let keys = bucket.iter().fold(0, |w, (k, _)| w ^ k.low);
        keys ^ Arc::strong_count(bucket) as u64
    }

    /// The big bucket of index `b`, to write into, if it holds the record of
    /// hash `k` and full key `key` (looked up first, so that a miss copies no
    /// path).
    fn big_holding(&mut self, b: usize, k: &HKey, key: &V::Key) -> Option<&mut BigBucket<V>> {
        let vs = self.big.get(&b)?.get(k)?;
        vs.iter().find(|v| v.full_key() == key)?;
        self.big.get_mut(&b)
    }

    /// The record of hash `k` and full key `key`, if any.
    pub fn get(&self, k: &HKey, key: &V::Key) -> Option<&V> {
        let t = self.table_of(k);
        let (b, bucket) = t.bucket(k);
        t.get_in(b, bucket, k, key)
    }

    /// The record of hash `k` and full key `key` in `bucket` (of index `b` in
    /// this table), or in the big bucket of that index.
    fn get_in<'s>(
        &'s self,
        b: usize,
        bucket: &'s Bucket<V>,
        k: &HKey,
        key: &V::Key,
    ) -> Option<&'s V> {
        match bucket.binary_search_by(|(e, v)| order(e, v, k, key)) {
            Ok(at) => Some(&bucket[at].1),
            Err(_) if self.big.is_empty() => None,
            Err(_) => self
                .big
                .get(&b)?
                .get(k)?
                .iter()
                .find(|v| v.full_key() == key),
        }
    }

    /// The records of `keys`, in order, into `out` (`None` where there is
    /// none): [`Records::get`] of each, level by level, in a map whose hashes
    /// are unique by construction (full key `()`). Why: at 100k endpoints a
    /// lookup is two cache misses in a row (the node above the bucket, then
    /// the bucket). Looking every key up one level at a time leaves the
    /// misses of different keys independent of each other, so the processor
    /// overlaps them; one key after another, it waits for each in turn.
    pub fn get_each<'s>(&'s self, keys: &[HKey], out: &mut Vec<Option<&'s V>>)
    where
        V: FullKey<Key = ()>,
    {
        let buckets: Vec<(&Self, usize, &Bucket<V>)> = keys
            .iter()
            .map(|k| {
                let t = self.table_of(k);
                let (b, bucket) = t.bucket(k);
                (t, b, bucket)
            })
            .collect();
        out.extend(
            keys.iter()
                .zip(buckets)
                .map(|(k, (t, b, bucket))| t.get_in(b, bucket, k, &())),
        );
    }

    /// The record of hash `k` and full key `key`, to write in place (the
    /// write must leave its full key as it is): copies its path (root array,
    /// node, bucket) where another map shares it, and only when it is present.
    pub fn get_mut(&mut self, k: &HKey, key: &V::Key) -> Option<&mut V> {
        // Decided before borrowing: a borrow returned from one arm of a match
        // would hold `self` in the other.
        if self.moving.as_ref().is_some_and(|m| m.holds(k)) {
            return self.moving.as_deref_mut()?.from.get_mut_here(k, key);
        }
        self.get_mut_here(k, key)
    }

    /// [`Records::get_mut`] in this table.
    fn get_mut_here(&mut self, k: &HKey, key: &V::Key) -> Option<&mut V> {
        let (b, _, at) = self.find(k, key);
        match at {
            Ok(at) => Some(&mut Arc::make_mut(self.bucket_mut(b))[at].1),
            Err(_) if self.big.is_empty() => None,
            Err(_) => self
                .big_holding(b, k, key)?
                .get_mut(k)?
                .iter_mut()
                .find(|v| v.full_key() == key),
        }
    }

    /// Stores `v` under hash `k` (the hash of its full key), returning the
    /// record of the same full key it replaces.
    pub fn insert(&mut self, k: HKey, v: V) -> Option<V> {
        let replaced = match self.moving.as_deref_mut() {
            Some(m) if m.holds(&k) => m.from.put(k, v),
            _ => self.put(k, v),
        };
        if replaced.is_none() {
            self.len += 1;
        }
        self.after_write();
        replaced
    }

    /// Removes the record of hash `k` and full key `key`, returning it.
    pub fn remove(&mut self, k: &HKey, key: &V::Key) -> Option<V> {
        let gone = match self.moving.as_deref_mut() {
            Some(m) if m.holds(k) => m.from.take(k, key),
            _ => self.take(k, key),
        };
        if gone.is_some() {
            self.len -= 1;
        }
        self.after_write();
        gone
    }

    /// Moves a few buckets of a resize in progress, and starts a resize when
    /// the map has outgrown or undergrown its buckets (finishing the one in
    /// progress first).
    fn after_write(&mut self) {
        self.move_buckets(MOVE_PER_WRITE);
        let grow = self.len > MAX_MEAN << self.bits;
        let shrink = self.bits > 0 && self.len < MIN_MEAN << self.bits;
        if grow || shrink {
            self.move_buckets(usize::MAX);
            let bits = if grow { self.bits + 1 } else { self.bits - 1 };
            let from = std::mem::replace(self, Records::skeleton(bits));
            self.len = from.len;
            self.moving = Some(Box::new(Moving { from, next: 0 }));
            self.move_buckets(MOVE_PER_WRITE);
        }
    }

    /// Moves up to `n` buckets of the map before a resize in progress into
    /// this one (a halving moves them in pairs), and drops it once all have.
    fn move_buckets(&mut self, n: usize) {
        let Some(mut m) = self.moving.take() else {
            return;
        };
        let old = 1usize << m.from.bits;
        let mut moved = 0;
        while m.next < old && moved < n {
            if self.bits > m.from.bits {
                // Old bucket i holds the keys of new buckets 2i and 2i + 1.
                let i = m.next;
                let mut low = m.from.records_at(i);
                let split = low.partition_point(|(k, _)| bucket_of::<SKIP>(k, self.bits) == 2 * i);
                let high = low.split_off(split);
                self.place(2 * i, low);
                self.place(2 * i + 1, high);
                m.next += 1;
                moved += 1;
            } else {
                // Old buckets 2j and 2j + 1 make new bucket j.
                let j = m.next / 2;
                let mut both = m.from.records_at(2 * j);
                both.extend(m.from.records_at(2 * j + 1));
                self.place(j, both);
                m.next += 2;
                moved += 2;
            }
        }
        if m.next < old {
            self.moving = Some(m);
        }
    }

    /// The records of bucket `b` of this table, big bucket included, sorted.
    fn records_at(&self, b: usize) -> Vec<(HKey, V)> {
        let mut out: Vec<(HKey, V)> = self.bucket_at(b).to_vec();
        if let Some(big) = self.big.get(&b) {
            out.extend(big_records(big).map(|(k, v)| (*k, v.clone())));
        }
        out
    }

    /// Fills the empty bucket `b` of this table with `records` (sorted, all of
    /// that bucket).
    fn place(&mut self, b: usize, records: Vec<(HKey, V)>) {
        if records.len() > BIG {
            self.big.insert(b, big_of(records));
        } else if !records.is_empty() {
            *self.bucket_mut(b) = records.into();
        }
    }

    /// [`Records::insert`] in this table, neither counting nor resizing.
    fn put(&mut self, k: HKey, v: V) -> Option<V> {
        let (b, bucket, at) = self.find(&k, v.full_key());
        match at {
            Ok(at) => {
                let slot = &mut Arc::make_mut(self.bucket_mut(b))[at].1;
                return Some(std::mem::replace(slot, v));
            }
            Err(_) if !self.big.is_empty() && self.big.contains_key(&b) => {
                let vs = self.big.get_mut(&b)?.entry(k).or_insert_with(Vec::new);
                match vs.binary_search_by(|e| e.full_key().cmp(v.full_key())) {
                    Ok(at) => return Some(std::mem::replace(&mut vs[at], v)),
                    Err(at) => vs.insert(at, v),
                }
            }
            Err(at) => {
                let records = bucket[..at]
                    .iter()
                    .cloned()
                    .chain(std::iter::once((k, v)))
                    .chain(bucket[at..].iter().cloned());
                if bucket.len() < BIG {
                    *self.bucket_mut(b) = records.collect();
                } else {
                    self.big.insert(b, big_of(records));
                    *self.bucket_mut(b) = Bucket::from([]);
                }
            }
        }
        None
    }

    /// [`Records::remove`] in this table, neither counting nor resizing.
    fn take(&mut self, k: &HKey, key: &V::Key) -> Option<V> {
        let (b, bucket, at) = self.find(k, key);
        let gone = match at {
            Ok(at) => {
                let gone = bucket[at].1.clone();
                let new: Bucket<V> = bucket[..at]
                    .iter()
                    .chain(&bucket[at + 1..])
                    .cloned()
                    .collect();
                *self.bucket_mut(b) = new;
                gone
            }
            Err(_) if self.big.is_empty() => return None,
            Err(_) => {
                let big = self.big_holding(b, k, key)?;
                let vs = big.get_mut(k)?;
                let at = vs.iter().position(|v| v.full_key() == key)?;
                let gone = vs.remove(at);
                if vs.is_empty() {
                    big.remove(k);
                }
                if big_len(big) < BIG / 2 {
                    let small: Bucket<V> = big_records(big).map(|(k, v)| (*k, v.clone())).collect();
                    self.big.remove(&b);
                    *self.bucket_mut(b) = small;
                }
                gone
            }
        };
        Some(gone)
    }

    /// Every record in key order: while a resize moves them, the moved
    /// buckets of this table, then the unmoved ones of the map before it.
    pub fn iter(&self) -> impl Iterator<Item = (&HKey, &V)> + '_ {
        let moved = self.moved_buckets();
        self.iter_buckets(0, moved).chain(
            self.moving
                .iter()
                .flat_map(|m| m.from.iter_buckets(m.next, 1 << m.from.bits)),
        )
    }

    /// How many of this table's buckets hold their records: all of them, or
    /// those moved so far while a resize is in progress.
    fn moved_buckets(&self) -> usize {
        match &self.moving {
            None => 1 << self.bits,
            Some(m) if self.bits > m.from.bits => 2 * m.next,
            Some(m) => m.next / 2,
        }
    }

    /// The records of buckets `from..to` of this table, in key order.
    fn iter_buckets(&self, from: usize, to: usize) -> impl Iterator<Item = (&HKey, &V)> + '_ {
        let big = |i: usize| self.big.get(&i).into_iter().flat_map(big_records);
        self.tops
            .iter()
            .flat_map(|t| t.iter())
            .flat_map(|m| m.iter())
            .enumerate()
            .skip(from)
            .take(to.saturating_sub(from))
            .flat_map(move |(i, b)| b.iter().map(|(k, v)| (k, v)).chain(big(i)))
    }

    /// Whether `other` is this map or a clone of it with no write since:
    /// true means equal, false means nothing (as `OrdMap::ptr_eq`).
    pub fn ptr_eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.tops, &other.tops)
            && self.big.ptr_eq(&other.big)
            && match (&self.moving, &other.moving) {
                (None, None) => true,
                (Some(a), Some(b)) => a.next == b.next && a.from.ptr_eq(&b.from),
                _ => false,
            }
    }
}

/// The index of a bucket within its node.
const MID_MASK: usize = (1 << MID_BITS) - 1;
/// The index of a bucket node within its node.
const TOP_MASK: usize = (1 << TOP_BITS) - 1;

/// The bucket of `k` in a map of `1 << bits` buckets: the key's top bits after
/// the first `SKIP`.
fn bucket_of<const SKIP: u32>(k: &HKey, bits: u32) -> usize {
    if bits == 0 {
        0
    } else {
        ((k.prefix() << SKIP) >> (64 - bits)) as usize
    }
}

impl<V: Clone + FullKey + PartialEq, const SKIP: u32> PartialEq for Records<V, SKIP> {
    /// Equal records in the same order, whatever the buckets.
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<V: Clone + FullKey + Eq, const SKIP: u32> Eq for Records<V, SKIP> {}

impl<V: Clone + FullKey + std::fmt::Debug, const SKIP: u32> std::fmt::Debug for Records<V, SKIP> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
impl<V: Clone + FullKey, const SKIP: u32> Records<V, SKIP> {
    /// Panics unless every record is in its bucket, each bucket is sorted
    /// with no key twice, `len` counts them, and the mean bucket is within
    /// bounds (a map of one bucket may hold fewer). While a resize is in
    /// progress, the same of the map before it, for its unmoved buckets, and
    /// this table's unmoved buckets are empty.
    pub(super) fn check(&self) {
        let mut len = self.check_table(0, self.moved_buckets());
        if let Some(m) = &self.moving {
            assert!(m.from.moving.is_none(), "one resize at a time");
            assert!(m.next < 1 << m.from.bits, "a finished move is dropped");
            len += m.from.check_table(m.next, 1 << m.from.bits);
        }
        assert_eq!(len, self.len);
        assert!(
            self.len <= MAX_MEAN << self.bits,
            "{} in {} bits",
            self.len,
            self.bits
        );
        assert!(self.bits == 0 || self.len >= MIN_MEAN << self.bits);
    }

    /// Checks this table's structure; returns how many records its buckets
    /// `live..end` hold, and panics if one outside that range holds any.
    fn check_table(&self, live: usize, end: usize) -> usize {
        let mids: Vec<&Mid<V>> = self.tops.iter().flat_map(|t| t.iter()).collect();
        let buckets: Vec<&Bucket<V>> = mids.iter().flat_map(|m| m.iter()).collect();
        assert_eq!(buckets.len(), 1 << self.bits);
        assert!(mids.iter().all(|m| m.len() <= 1 << MID_BITS));
        assert!(self.tops.iter().all(|t| t.len() <= 1 << TOP_BITS));
        let mut len = 0;
        for (i, b) in buckets.iter().enumerate() {
            assert!(b.iter().all(|(k, _)| bucket_of::<SKIP>(k, self.bits) == i));
            assert!(
                b.windows(2)
                    .all(|w| order(&w[0].0, &w[0].1, &w[1].0, w[1].1.full_key()).is_lt()),
                "bucket {i} unsorted"
            );
            assert!(b.len() <= BIG, "bucket {i}: {} records", b.len());
            if (live..end).contains(&i) {
                len += b.len();
            } else if self.moving.is_some() {
                assert!(b.is_empty(), "bucket {i} not moved yet but filled");
            }
        }
        for (i, big) in &self.big {
            assert!(buckets[*i].is_empty(), "bucket {i} both big and small");
            assert!(
                big_len(big) >= BIG / 2,
                "big bucket {i}: {} records",
                big_len(big)
            );
            assert!(big.keys().all(|k| bucket_of::<SKIP>(k, self.bits) == *i));
            assert!(big.values().all(|vs| {
                !vs.is_empty() && vs.windows(2).all(|w| w[0].full_key() < w[1].full_key())
            }));
            if (live..end).contains(i) {
                len += big_len(big);
            }
        }
        len
    }

    /// The map before a resize in progress.
    pub(super) fn resize_source(&self) -> Option<&Self> {
        self.moving.as_ref().map(|m| &m.from)
    }

    /// How many of this table's buckets are the very buckets (shared, not
    /// copied) of `other`'s at the same index.
    pub(super) fn buckets_shared_with(&self, other: &Self) -> usize {
        let all = |r: &Self| -> Vec<Bucket<V>> {
            (0..1usize << r.bits)
                .map(|b| r.bucket_at(b).clone())
                .collect()
        };
        all(self)
            .iter()
            .zip(all(other).iter())
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count()
    }

    /// How many buckets outgrew [`BIG`] (of both tables while a resize moves
    /// them).
    pub(super) fn big_buckets(&self) -> usize {
        let unmoved = self
            .moving
            .as_ref()
            .map_or(0, |m| m.from.big.range(m.next..).count());
        self.big.range(..self.moved_buckets()).count() + unmoved
    }
}
