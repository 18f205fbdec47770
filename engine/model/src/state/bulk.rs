//! Loading many endpoints (or services) into a state that holds none yet (a
//! checkpoint restore), building the endpoint records and the hostname index
//! (or the claims and the merged view) from sorted runs. The address index is
//! built on first use (see `addr_index`).
//!
//! Why: restoring 110k endpoints one [`ModelState::put_endpoint`] at a time was
//! half of a restore, mostly inserts into the endpoint indexes at random places
//! (a cache miss or two per level). Sorted first, each map is filled front to
//! back, and every hostname's listing is built in one go. The store's two
//! shards are independent, so each is built on a thread of its own (rayon's
//! pool, joined here).
//!
//! The result equals what `put_endpoint` in the same order gives: same raw map
//! (the last write of a repeated key wins), same indexes, same hash (a test
//! compares the two). Nothing is touched: a restore regenerates everything.
//!
//! What it does NOT do: admission checks (nor does `put_endpoint`), or loading
//! into a state that already has endpoints (that goes one by one).

use std::sync::Arc;

use imbl::OrdMap;

use super::endpoints::{
    Cold, EndpointStore, HotRecords, KeyText, KeyTexts, Listing, SHARDS, shard,
};
use super::{Claim, Claims, HKey, Hot, ModelState, ServiceSlot, ShapeFacts, Written};
use crate::canon::{self, Kind};
use crate::model::{Endpoint, Hostname, Service};
use crate::par;

/// Of each run of items that `same` says share a key, keeps the last one: with
/// the items sorted by key and then by place in the input, the last write wins,
/// as it does when they are stored one by one.
fn keep_last<T>(items: &mut Vec<T>, same: impl Fn(&T, &T) -> bool) {
    items.dedup_by(|later, earlier| {
        let repeated = same(later, earlier);
        if repeated {
            std::mem::swap(later, earlier);
        }
        repeated
    });
}

/// An entry of the hostname index for a bulk load: hostname key, endpoint
/// key, the endpoint's place in the input, its cold part.
type IndexEntry = (HKey, HKey, usize, Arc<Cold>);

/// Endpoints prepared for a bulk load: what each one contributes to the
/// records and the hostname index, computed while its record is fresh in the
/// cache (reading them back afterwards was a cache miss or three per
/// endpoint). Built on any thread, in parts that are appended in input order;
/// `usize` is each endpoint's place in the input.
#[derive(Default)]
pub struct EndpointBatch {
    records: Vec<(HKey, usize, Hot)>,
    /// One entry per hostname an endpoint lists, each with the endpoint's one
    /// cold part, in the hostname's [`shard`] of the store.
    by_host: [Vec<IndexEntry>; SHARDS],
    /// Whether some record's key is not above the one before it (so the load
    /// must sort and drop repeats). Tracked as records come, because a pass
    /// over 100k records of 112 bytes to check, and another to sum their hash
    /// terms, would each add to every restore.
    unsorted: bool,
    /// The sum of the records' hash terms.
    hash: u64,
}

impl EndpointBatch {
    /// An empty batch with room for `n` endpoints.
    pub fn with_capacity(n: usize) -> Self {
        EndpointBatch {
            records: Vec::with_capacity(n),
            by_host: [Vec::with_capacity(n / 2), Vec::with_capacity(n / 2)],
            ..Default::default()
        }
    }

    /// Adds the endpoint at place `i` of the input, written by `source` (its
    /// name and [`source_key`](super::source_key) of it). `shape` holds the
    /// facts of the endpoint's shape and `hosts` the keys of the hostnames it
    /// lists ([`HKey::of`] each, in order), which a caller holding many
    /// endpoints of one shape computes once per shape and keeps at hand.
    pub fn push(
        &mut self,
        i: usize,
        source: (&Arc<str>, u64),
        generation: u64,
        ep: Endpoint,
        shape: ShapeFacts,
        hosts: impl Iterator<Item = HKey>,
    ) {
        let hk = HKey::of(&ep.key);
        let digest =
            canon::endpoint_fields_digest(&ep.key, &ep.address, ep.weight, ep.health, shape.digest);
        let hash = canon::entity_hash(Kind::Endpoint, &ep.key, source.0, generation, digest);
        self.unsorted |= self.records.last().is_some_and(|(last, _, _)| *last >= hk);
        self.hash = self.hash.wrapping_add(hash);
        self.records
            .push((hk, i, Hot::new(&ep, shape, source.1, generation, hash)));
        let cold = Arc::new(Cold {
            key: ep.key,
            source: source.0.clone(),
            shape: ep.shape,
        });
        // Under each hostname; one that lists none is kept under the
        // hostless key (see `EndpointStore`).
        let mut listed = false;
        for host in hosts {
            self.by_host[shard(&host)].push((host, hk, i, cold.clone()));
            listed = true;
        }
        if !listed {
            self.by_host[shard(&HKey::MIN)].push((HKey::MIN, hk, i, cold));
        }
    }

    /// Sorts its index entries as the bulk load needs them. Why here: a
    /// caller that builds a batch in parts on several threads sorts each part
    /// on its own thread, and the load then only merges the sorted runs.
    pub fn sort_indexes(&mut self) {
        for entries in &mut self.by_host {
            entries.sort_unstable_by_key(|e| (e.0, e.1));
        }
    }

    /// Appends `other`, whose endpoints come after this batch's in the input.
    pub fn append(&mut self, mut other: EndpointBatch) {
        if self.records.is_empty() && self.by_host.iter().all(Vec::is_empty) {
            *self = other;
            return;
        }
        self.unsorted |= other.unsorted
            || self
                .records
                .last()
                .zip(other.records.first())
                .is_some_and(|(last, first)| last.0 >= first.0);
        self.hash = self.hash.wrapping_add(other.hash);
        self.records.append(&mut other.records);
        for (entries, more) in self.by_host.iter_mut().zip(&mut other.by_host) {
            entries.append(more);
        }
    }

    /// Its endpoints in input order, with source and generation (what storing
    /// them one by one takes).
    fn into_entries(self) -> Vec<(Arc<str>, u64, Endpoint)> {
        let mut colds: std::collections::HashMap<usize, Arc<Cold>> = self
            .by_host
            .into_iter()
            .flatten()
            .map(|(_, _, i, cold)| (i, cold))
            .collect();
        let mut records = self.records;
        records.sort_unstable_by_key(|(_, i, _)| *i);
        records
            .into_iter()
            .filter_map(|(_, i, hot)| {
                let cold = colds.remove(&i)?;
                Some((cold.source.clone(), hot.generation, cold.endpoint(&hot)))
            })
            .collect()
    }

    /// The endpoints in input order (for tests of the callers that build it).
    #[cfg(any(test, feature = "test-builders"))]
    pub fn endpoints(&self) -> Vec<Endpoint> {
        let colds: std::collections::HashMap<usize, &Arc<Cold>> = self
            .by_host
            .iter()
            .flatten()
            .map(|(_, _, i, c)| (*i, c))
            .collect();
        let mut r: Vec<_> = self
            .records
            .iter()
            .filter_map(|(_, i, hot)| Some((*i, colds.get(i)?.endpoint(hot))))
            .collect();
        r.sort_by_key(|(i, _)| *i);
        r.into_iter().map(|(_, e)| e).collect()
    }

    /// Sorts the records by key hash and, of a key written more than once,
    /// keeps the last write (with its index entries). A restore's input is in
    /// key-hash order with no key repeated, which is checked first and left as
    /// it is.
    fn sort_and_keep_last(&mut self) {
        if !self.unsorted {
            return;
        }
        self.records.sort_unstable_by_key(|(hk, i, _)| (*hk, *i));
        let before = self.records.len();
        keep_last(&mut self.records, |a, b| a.0 == b.0);
        if self.records.len() < before {
            // Index entries of the overwritten writes go too.
            let kept: std::collections::HashSet<usize> =
                self.records.iter().map(|(_, i, _)| *i).collect();
            for entries in &mut self.by_host {
                entries.retain(|(_, _, i, _)| kept.contains(i));
            }
            self.hash = self
                .records
                .iter()
                .fold(0, |h, (_, _, hot)| h.wrapping_add(hot.hash));
        }
        self.unsorted = false;
    }
}

impl ModelState {
    /// Stores `entries` (source, generation, endpoint), in order, through a
    /// batch built in two parts (as a restore builds it on two threads).
    #[cfg(test)]
    pub fn load_endpoints(&mut self, entries: Vec<(Arc<str>, u64, Endpoint)>) {
        let half = entries.len() / 2;
        let mut all = EndpointBatch::default();
        let mut part = EndpointBatch::default();
        for (i, (source, generation, ep)) in entries.into_iter().enumerate() {
            if i == half {
                all.append(std::mem::take(&mut part));
            }
            let hosts: Vec<HKey> = ep
                .shape
                .services
                .iter()
                .map(|(_, h)| HKey::of(h.as_str()))
                .collect();
            let facts = ShapeFacts::of(&ep.shape);
            let owner = super::source_key(&source);
            part.push(
                i,
                (&source, owner),
                generation,
                ep,
                facts,
                hosts.into_iter(),
            );
        }
        all.append(part);
        self.load_endpoint_batch(all);
    }

    fn put_endpoints(&mut self, entries: Vec<(Arc<str>, u64, Endpoint)>) {
        let mut sink = super::Touched::default();
        for (source, generation, ep) in entries {
            self.put_endpoint(source, generation, ep, &mut sink);
        }
    }

    /// Stores a prepared batch as `put_endpoint` in input order would: in bulk
    /// when the state holds no endpoint yet (each shard of the store on a
    /// thread of its own), one by one otherwise.
    pub fn load_endpoint_batch(&mut self, batch: EndpointBatch) {
        if !self.raw_endpoints.is_empty() {
            self.put_endpoints(batch.into_entries());
            return;
        }
        let mut batch = batch;
        batch.sort_and_keep_last();
        let EndpointBatch {
            records,
            by_host,
            hash,
            ..
        } = batch;
        self.hash_add(hash);

        // Each shard's records are a contiguous run of the sorted records;
        // its index entries are taken out in order (so the parts' sorted runs
        // stay runs). The two shards on two of the pool's threads.
        let split = records.partition_point(|(hk, _, _)| shard(hk) == 0);
        let (low, high) = records.split_at(split);
        // Each endpoint's key text once (an endpoint of several hostnames has
        // an index entry under each), by key; the index is split by hostname,
        // so its entries are gathered from both halves first.
        let mut texts: Vec<(HKey, KeyText)> = (by_host.iter().flatten())
            .map(|e| (e.1, KeyText(e.3.key.clone())))
            .collect();
        texts.sort_unstable_by_key(|t| t.0);
        texts.dedup_by_key(|t| t.0);
        let texts_high = texts.split_off(texts.partition_point(|(hk, _)| shard(hk) == 0));
        let [low_hosts, high_hosts] = by_host;
        let ((hot0, index0, texts0), (hot1, index1, texts1)) = par::join(
            move || load_shard(low, low_hosts, texts),
            move || load_shard(high, high_hosts, texts_high),
        );
        self.raw_endpoints =
            EndpointStore::from_parts([hot0, hot1], [index0, index1], [texts0, texts1]);
        self.endpoints_by_addr.invalidate();
    }
}

/// One shard of an [`EndpointStore`]: the map of `records` (sorted by key, no
/// key repeated), the hostname index of `by_host` and the key texts of
/// `texts` (sorted likewise). Each map is filled
/// front to back. The address index is built when first asked for (see
/// `addr_index`).
fn load_shard(
    records: &[(HKey, usize, Hot)],
    mut by_host: Vec<IndexEntry>,
    texts: Vec<(HKey, KeyText)>,
) -> (HotRecords, OrdMap<HKey, Listing>, KeyTexts) {
    let hot = HotRecords::from_sorted(records.iter().map(|(hk, _, hot)| (*hk, *hot)));
    let texts = KeyTexts::from_sorted(texts.into_iter());
    // Each hostname's endpoints in key order, so each listing is filled
    // front to back. A stable sort: it merges the runs of parts sorted on
    // their own threads (`sort_indexes`) in one pass.
    by_host.sort_by_key(|e| (e.0, e.1));
    let mut index: OrdMap<HKey, Listing> = OrdMap::new();
    let mut entries = by_host.into_iter().peekable();
    while let Some((host, ek, _, cold)) = entries.next() {
        let mut listing = OrdMap::unit(ek, cold);
        while let Some((_, ek, _, cold)) = entries.next_if(|e| e.0 == host) {
            listing.insert(ek, cold);
        }
        index.insert(host, listing);
    }
    (hot, index, texts)
}

/// A service definition to load: where it is stored, its generation, its value.
pub type ServiceEntry = (ServiceSlot, u64, Arc<Service>);

impl ModelState {
    /// Stores `entries` (slot, generation, service), in order, as `put_service`
    /// would; in bulk when the state holds no service yet: the raw map, every
    /// hostname's claims and the merged view are each built front to back from
    /// sorted runs instead of one insert (and one winner refresh) at a time.
    pub fn load_services(&mut self, entries: Vec<ServiceEntry>) {
        if !self.raw_services.is_empty() {
            let mut sink = super::Touched::default();
            for (slot, generation, svc) in entries {
                self.put_service(slot, generation, svc, &mut sink);
            }
            return;
        }
        // By slot, and for a repeated slot the last write last; keep that one.
        let mut entries: Vec<(usize, ServiceEntry)> = entries.into_iter().enumerate().collect();
        entries.sort_unstable_by(|(i, a), (j, b)| (&a.0, i).cmp(&(&b.0, j)));
        keep_last(&mut entries, |a, b| a.1.0 == b.1.0);
        let mut claims: Vec<(HKey, Claim, Arc<Service>)> = Vec::with_capacity(entries.len());
        let mut raw = Vec::with_capacity(entries.len());
        for (_, (slot, generation, svc)) in entries {
            let digest = canon::service_digest(&svc);
            let w = Written::service(&slot, generation, svc.clone(), digest);
            self.hash_add(w.entity_hash());
            claims.push((
                HKey::of(svc.hostname.as_str()),
                Self::claim_of(&svc, &slot),
                svc,
            ));
            raw.push((slot, w));
        }
        self.raw_services = raw.into_iter().collect();

        claims.sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut winners: Vec<(Hostname, Arc<Service>)> = Vec::new();
        let mut by_host: OrdMap<HKey, Claims> = OrdMap::new();
        for group in claims.chunk_by(|a, b| a.0 == b.0) {
            let list: Vec<(Claim, Arc<Service>)> = group
                .iter()
                .map(|(_, c, s)| (c.clone(), s.clone()))
                .collect();
            let host = list[0].1.hostname.clone();
            winners.push((host.clone(), list[0].1.clone()));
            let list = Arc::new(list);
            by_host.insert(group[0].0, Claims { host, list });
        }
        self.claims = by_host;
        self.claim_keys.invalidate();
        winners.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        self.services = winners.into_iter().collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EndpointShape, Health, Hostname, Locality};

    fn endpoint(key: &str, addr: &str, hosts: &[&str], weight: u32) -> Endpoint {
        let services = hosts
            .iter()
            .map(|h| (Arc::<str>::from("ns"), Hostname::new(h)))
            .collect();
        Endpoint {
            key: key.into(),
            address: addr.parse().expect("ip"),
            weight,
            health: Health::Healthy,
            shape: Arc::new(EndpointShape::new(
                Default::default(),
                Default::default(),
                Locality::default(),
                "".into(),
                services,
                0,
            )),
        }
    }

    /// Bulk loading equals putting one by one: raw map, indexes, hash; including
    /// repeated keys (the last write wins), endpoints sharing a hostname and an
    /// address, and an endpoint of several hostnames; with the batch built in two
    /// parts, as a restore builds it. Into a state that already has endpoints the
    /// batch goes one by one, in input order.
    #[test]
    fn bulk_load_equals_one_by_one() {
        for (n, distinct) in [(500u32, 433u32), (12_000, 9_001)] {
            let a: Arc<str> = "a".into();
            let mut entries = Vec::new();
            for i in 0..n {
                let key = format!("ep/{}", i % distinct);
                let addr = format!("10.0.{}.{}", i % 7, i % 200);
                let hosts: &[&str] = match i % 3 {
                    0 => &["h1.ns"],
                    1 => &["h1.ns", "h2.ns"],
                    _ => &["h3.ns"],
                };
                entries.push((a.clone(), u64::from(i % 4), endpoint(&key, &addr, hosts, i)));
            }
            let mut bulk = ModelState::default();
            bulk.load_endpoints(entries.clone());
            let mut one = ModelState::default();
            let mut sink = super::super::Touched::default();
            for (s, g, e) in entries.clone() {
                one.put_endpoint(s, g, e, &mut sink);
            }
            assert_eq!(bulk, one, "{n}");

            // Into a state holding an endpoint: one by one, the last write winning.
            let seed = (a.clone(), 9, endpoint("ep/0", "10.9.9.9", &["h9.ns"], 7));
            let mut onto = ModelState::default();
            onto.put_endpoint(seed.0.clone(), seed.1, seed.2.clone(), &mut sink);
            let mut want = onto.clone();
            onto.load_endpoints(entries.clone());
            for (s, g, e) in entries.clone() {
                want.put_endpoint(s, g, e, &mut sink);
            }
            assert_eq!(onto, want, "{n}: loaded onto endpoints");
            assert_eq!(bulk.hash(), one.hash(), "{n}");
            assert_eq!(bulk.hash(), bulk.recompute_hash(), "{n}");
            assert_eq!(
                bulk.endpoints_by_addr.get(&bulk.raw_endpoints),
                one.endpoints_by_addr.get(&one.raw_endpoints),
                "{n}"
            );
            assert_eq!(
                bulk.raw_endpoints().count(),
                distinct as usize,
                "repeated keys are stored once"
            );
        }
    }

    /// Bulk loading services equals putting them one by one: raw map, claims
    /// (two sources defining one hostname, the lowest claim winning), merged
    /// view and hash; including a repeated slot whose last write moves it to
    /// another hostname.
    #[test]
    fn bulk_service_load_equals_one_by_one() {
        use crate::state::mk::*;
        let folded = ModelState::from_events(&[
            svc("a", 3, "ns", "h1", &[80, 9090]),
            svc("b", 0, "ns", "h1", &[81]),
            svc("a", 5, "ns", "Upper.Case", &[8080]),
            svc("b", 1, "other", "h2", &[80]),
            svc("c", 0, "ns", "h3", &[80]),
        ]);
        let mut entries: Vec<ServiceEntry> = folded
            .raw_services()
            .map(|(slot, w)| (slot.clone(), w.generation, w.value.clone()))
            .collect();
        entries.reverse();
        let moved = ModelState::from_events(&[svc("a", 7, "ns", "h9", &[80])]);
        let (_, w) = moved.raw_services().next().expect("one");
        let first = entries.last().expect("some").0.clone();
        entries.insert(0, (first.clone(), 1, w.value.clone()));
        entries.push((first, 7, w.value.clone()));

        let mut bulk = ModelState::default();
        bulk.load_services(entries.clone());
        let mut one = ModelState::default();
        let mut sink = super::super::Touched::default();
        for (slot, g, svc) in entries {
            one.put_service(slot, g, svc, &mut sink);
        }
        assert_eq!(bulk, one);
        assert_eq!(bulk.hash(), one.hash());
        assert_eq!(bulk.hash(), bulk.recompute_hash());
        assert_eq!(bulk.claims, one.claims);
        assert_eq!(bulk.services, one.services);
        assert!(
            bulk.get_service("h9").is_some(),
            "the last write of a slot wins"
        );
        assert_eq!(bulk.raw_services().count(), 5);
    }
}
