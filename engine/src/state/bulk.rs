//! Loading many endpoints into a state that holds none yet (a checkpoint
//! restore), building the raw map and both endpoint indexes from sorted runs.
//!
//! Why: restoring 110k endpoints one [`ModelState::put_endpoint`] at a time was
//! half of a restore, mostly `OrdSet` inserts into the hostname and address
//! indexes that compare strings at random places (a cache miss or two per
//! level). Sorted first, each map and set is filled front to back, and every
//! hostname's key set is built in one go.
//!
//! The result equals what `put_endpoint` in the same order gives: same raw map
//! (the last write of a repeated key wins), same indexes, same hash (a test
//! compares the two). Nothing is touched: a restore regenerates everything.
//!
//! What it does NOT do: admission checks (nor does `put_endpoint`), or loading
//! into a state that already has endpoints (that goes one by one).

use std::net::IpAddr;
use std::sync::Arc;

use imbl::{OrdMap, OrdSet};

use super::canon::{self, Kind};
use super::{HKey, ModelState, Written};
use crate::model::Endpoint;

impl ModelState {
    /// Stores `entries` (source, generation, endpoint), in order, as
    /// `put_endpoint` would; in bulk when the state holds no endpoint yet.
    pub(crate) fn load_endpoints(&mut self, entries: Vec<(Arc<str>, u64, Arc<Endpoint>)>) {
        if !self.raw_endpoints.is_empty() {
            let mut sink = super::Touched::default();
            for (source, generation, ep) in entries {
                self.put_endpoint(source, generation, ep, &mut sink);
            }
            return;
        }
        let mut records: Vec<(HKey, usize, Arc<Written<Endpoint>>)> = entries
            .into_iter()
            .enumerate()
            .map(|(i, (source, generation, ep))| {
                let digest = canon::endpoint_digest(&ep);
                let hk = HKey::of(&ep.key);
                let key = ep.key.clone();
                let w = Written::new(Kind::Endpoint, &key, ep, source, generation, digest);
                (hk, i, Arc::new(w))
            })
            .collect();
        // By key hash, and for a repeated key the last write last; keep that one.
        records.sort_unstable_by_key(|(hk, i, _)| (*hk, *i));
        records.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same {
                std::mem::swap(later, earlier);
            }
            same
        });

        let mut by_host: Vec<(HKey, Arc<str>)> = Vec::with_capacity(records.len());
        let mut by_addr: Vec<(IpAddr, Arc<str>)> = Vec::with_capacity(records.len());
        for (_, _, w) in &records {
            self.hash_add(w.entity_hash());
            let ep = &w.value;
            for (_, host) in &ep.services {
                by_host.push((HKey::of(host.as_str()), ep.key.clone()));
            }
            by_addr.push((ep.address, ep.key.clone()));
        }
        self.raw_endpoints = records.into_iter().map(|(hk, _, w)| (hk, w)).collect();

        by_host.sort_unstable();
        by_host.dedup();
        let mut index: OrdMap<HKey, OrdSet<Arc<str>>> = OrdMap::new();
        for group in by_host.chunk_by(|a, b| a.0 == b.0) {
            let keys: OrdSet<Arc<str>> = group.iter().map(|(_, k)| k.clone()).collect();
            index.insert(group[0].0, keys);
        }
        self.endpoints_by_host = index;

        by_addr.sort_unstable();
        self.endpoints_by_addr = by_addr.into_iter().collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EndpointShape, Health, Hostname, Locality};

    fn endpoint(key: &str, addr: &str, hosts: &[&str], weight: u32) -> Arc<Endpoint> {
        let services = hosts
            .iter()
            .map(|h| (Arc::<str>::from("ns"), Hostname::new(h)))
            .collect();
        Arc::new(Endpoint {
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
        })
    }

    /// Bulk loading equals putting one by one: raw map, indexes, hash; including
    /// a repeated key (the last write wins), endpoints sharing a hostname and an
    /// address, and an endpoint of several hostnames.
    #[test]
    fn bulk_load_equals_one_by_one() {
        let a: Arc<str> = "a".into();
        let mut entries = Vec::new();
        for i in 0..500u32 {
            let key = format!("ep/{}", i % 433);
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
        for (s, g, e) in entries {
            one.put_endpoint(s, g, e, &mut sink);
        }
        assert_eq!(bulk, one);
        assert_eq!(bulk.hash(), one.hash());
        assert_eq!(bulk.hash(), bulk.recompute_hash());
        assert_eq!(bulk.endpoints_by_host, one.endpoints_by_host);
        assert_eq!(bulk.endpoints_by_addr, one.endpoints_by_addr);
        assert_eq!(
            bulk.raw_endpoints().count(),
            433,
            "repeated keys are stored once"
        );
    }
}
