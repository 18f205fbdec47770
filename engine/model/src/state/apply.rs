//! The mutation primitives of [`ModelState`]: put and remove one raw entity, record
//! a source's resync generations, sweep a source. Each keeps the merged view, the
//! indexes and the content hash consistent, and records what it touched.
//!
//! Rewriting an entity with identical content never touches anything (at most its
//! generation stamp, and so the hash, moves): identical content must never cause a
//! push.
//!
//! What it does NOT do: validate events or enforce ownership and admission rules;
//! the fold decides whether a primitive may run.

use std::net::IpAddr;
use std::sync::Arc;

use super::endpoints::{Cold, host_keys};
use super::{
    Claim, Claims, HKey, Hot, ModelState, PendingResync, ServiceSlot, ShapeFacts, SourceGen, Touch,
    TouchLog, Written, source_key,
};
use crate::canon::{self, Kind};
use crate::model::{Config, Endpoint, Health, Hostname, Service};

/// What an endpoint rewrite writes, for [`ModelState::rewrite_endpoint`]: the
/// fields a rewrite usually changes (everything but the key and the shape), and
/// the key's text.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rewrite<'a> {
    /// The key as the event spells it: the stored key, since it has the same
    /// hash. Hashing it reads the event (in cache) rather than the stored key's
    /// string, which at 100k endpoints was one more cache miss per event.
    pub key: &'a str,
    pub address: IpAddr,
    /// Already at least 1, as the model requires.
    pub weight: u32,
    pub health: Health,
    pub generation: u64,
}

/// What [`ModelState::rewrite_endpoint`] did: the record as now stored, and
/// whether the endpoint's content changed (not only its generation stamp).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rewritten {
    pub rec: Hot,
    pub changed: bool,
}

impl ModelState {
    pub(super) fn hash_add(&mut self, h: u64) {
        self.hash = self.hash.wrapping_add(h);
    }

    fn hash_sub(&mut self, h: u64) {
        self.hash = self.hash.wrapping_sub(h);
    }

    /// Records a source's resync generations. All-zero bookkeeping is not stored, so
    /// a source that never sent a marker leaves no trace in the state (or its hash).
    pub fn set_source_gen(&mut self, source: Arc<str>, g: SourceGen) {
        let old = if g == SourceGen::default() {
            self.sources.remove(&source)
        } else {
            self.sources.insert(source.clone(), g)
        };
        if let Some(o) = old {
            self.hash_sub(canon::source_hash(&source, o.started, o.completed));
        }
        if g != SourceGen::default() {
            self.hash_add(canon::source_hash(&source, g.started, g.completed));
        }
    }

    /// Records (`Some`) or clears (`None`) a source's pending multi-copy resync.
    pub fn set_pending_resync(&mut self, source: Arc<str>, p: Option<PendingResync>) {
        let term = |p: &PendingResync| {
            canon::pending_resync_hash(&source, p.generation, p.copies, &p.partitions)
        };
        let new_term = p.as_ref().map(term);
        let old = match p {
            Some(p) => self.resyncs_pending.insert(source.clone(), p),
            None => self.resyncs_pending.remove(&source),
        };
        if let Some(o) = old {
            self.hash_sub(term(&o));
        }
        if let Some(h) = new_term {
            self.hash_add(h);
        }
    }

    /// Stores a service definition under `slot` and re-resolves its hostname.
    pub(crate) fn put_service(
        &mut self,
        slot: ServiceSlot,
        generation: u64,
        svc: Arc<Service>,
        touched: &mut impl Touch,
    ) {
        let digest = canon::service_digest(&svc);
        if let Some(old) = self.raw_services.get(&slot)
            && old.digest == digest
            && *old.value == *svc
        {
            if old.generation != generation {
                let value = old.value.clone();
                self.restamp_service(slot, generation, value, digest);
            }
            return;
        }
        let written = Written::service(&slot, generation, svc.clone(), digest);
        self.hash_add(written.entity_hash());
        let old = self.raw_services.insert(slot.clone(), written);
        if let Some(old) = &old {
            self.hash_sub(old.entity_hash());
            if old.value.hostname != svc.hostname || old.value.namespace != svc.namespace {
                self.remove_claim(&old.value, &slot, touched);
            }
        }
        self.add_claim(&slot, svc, touched);
    }

    fn restamp_service(
        &mut self,
        slot: ServiceSlot,
        generation: u64,
        value: Arc<Service>,
        digest: u64,
    ) {
        let written = Written::service(&slot, generation, value, digest);
        self.hash_add(written.entity_hash());
        if let Some(old) = self.raw_services.insert(slot.clone(), written) {
            self.hash_sub(old.entity_hash());
        }
    }

    /// Removes the definition under `slot`; the next claim on its hostname (if any)
    /// takes over. Returns whether there was one.
    pub(crate) fn remove_service(&mut self, slot: &ServiceSlot, touched: &mut impl Touch) -> bool {
        let Some(old) = self.raw_services.remove(slot) else {
            return false;
        };
        self.hash_sub(old.entity_hash());
        self.remove_claim(&old.value, slot, touched);
        true
    }

    pub(super) fn claim_of(svc: &Service, slot: &ServiceSlot) -> Claim {
        Claim {
            source: slot.source.clone(),
            namespace: svc.namespace.clone(),
            key: slot.key.clone(),
        }
    }

    fn add_claim(&mut self, slot: &ServiceSlot, svc: Arc<Service>, touched: &mut impl Touch) {
        let host = svc.hostname.clone();
        let hk = HKey::of(host.as_str());
        let claim = Self::claim_of(&svc, slot);
        match self.claims.get_mut(&hk) {
            Some(claims) => {
                let list = Arc::make_mut(&mut claims.list);
                match list.binary_search_by(|(c, _)| c.cmp(&claim)) {
                    Ok(i) => list[i].1 = svc,
                    Err(i) => list.insert(i, (claim, svc)),
                }
            }
            None => {
                let claims = Claims {
                    host: host.clone(),
                    list: Arc::new(vec![(claim, svc)]),
                };
                self.claims.insert(hk, claims);
                self.claim_keys.invalidate();
            }
        }
        self.refresh_winner(&hk, &host, touched);
    }

    fn remove_claim(&mut self, svc: &Service, slot: &ServiceSlot, touched: &mut impl Touch) {
        let claim = Self::claim_of(svc, slot);
        let host = &svc.hostname;
        let hk = HKey::of(host.as_str());
        let now_empty = match self.claims.get_mut(&hk) {
            Some(claims) => {
                let list = Arc::make_mut(&mut claims.list);
                if let Ok(i) = list.binary_search_by(|(c, _)| c.cmp(&claim)) {
                    list.remove(i);
                }
                list.is_empty()
            }
            None => false,
        };
        if now_empty {
            self.claims.remove(&hk);
            self.claim_keys.invalidate();
        }
        self.refresh_winner(&hk, host, touched);
    }

    /// Makes the merged service of `host` the lowest claim's definition; touches the
    /// hostname only if the merged content actually changed.
    fn refresh_winner(&mut self, hk: &HKey, host: &Hostname, touched: &mut impl Touch) {
        let winner = self
            .claims
            .get(hk)
            .and_then(|l| l.first())
            .map(|(_, s)| s.clone());
        let current = self.services.get(host);
        match (current, winner) {
            (None, None) => {}
            (Some(cur), Some(win)) if Arc::ptr_eq(cur, &win) || **cur == *win => {}
            (_, Some(win)) => {
                self.services.insert(host.clone(), win);
                touched.service(host);
            }
            (Some(_), None) => {
                self.services.remove(host);
                touched.service(host);
            }
        }
    }

    /// Stores an endpoint under its key (replacing any previous one) and indexes it
    /// under each of its hostnames and its address.
    pub(crate) fn put_endpoint(
        &mut self,
        source: Arc<str>,
        generation: u64,
        ep: Endpoint,
        touched: &mut impl Touch,
    ) {
        let hk = HKey::of(&ep.key);
        let current = self.raw_endpoints.written(&hk);
        self.put_endpoint_over(hk, current, source, generation, ep, touched);
    }

    /// Rewrites the endpoint stored under `hk` with `new`, when the source of key
    /// `source` wrote it and its shape was converted from a payload of source
    /// digest `shape` (so the rewrite keeps that shape): the common health,
    /// weight or address change. Returns its record as now stored when it did;
    /// otherwise, with a state equal to what it was, what is stored under `hk`
    /// (nothing, another owner's record, or one of another shape), for the
    /// general path to decide without looking it up again. The result is what
    /// [`ModelState::put_endpoint_over`] makes of the same endpoint: same
    /// records, indexes, hash and touches, but for one: when the endpoint
    /// lists exactly one hostname (`rec.hosts == 1`) and its content changed,
    /// touching that hostname (key `rec.first_host`) is left to the caller.
    /// Why: the fold then touches it (by key) with the admission check, in
    /// hostname order for a whole run (see `fold::Folding::admit_later`).
    ///
    /// Why: this reads and writes only the endpoint's plain record (see
    /// `endpoints`), in place, found with one mutable lookup that copies the
    /// tree path to it before anything is compared. A separate read-only lookup
    /// first, to spare that copy when nothing changes, walked the tree twice
    /// for every change. What the single walk gives up is small: an exact
    /// repeat of an event (same content, same generation) or a fallback to the
    /// general path leaves the state equal but no longer sharing that one leaf
    /// with the state it was folded from. Exact repeats are rare: adapters
    /// append only what changed, so they come from a log redelivering records.
    pub(crate) fn rewrite_endpoint(
        &mut self,
        hk: &HKey,
        source: (&str, u64),
        shape: u128,
        new: Rewrite<'_>,
        touched: &mut TouchLog,
    ) -> Result<Rewritten, Option<Written<Endpoint>>> {
        let Some(rec) = self.raw_endpoints.hot_mut_named(hk, new.key) else {
            // Nothing stored, or another key's text of the same hash (which the
            // general path refuses).
            return Err(self.raw_endpoints.written(hk));
        };
        if rec.source != source.1 || !rec.same_shape_source(shape) {
            return Err(self.raw_endpoints.written(hk));
        }
        // Same key and shape: the content is the same exactly when these are.
        let same =
            rec.address == new.address && rec.weight == new.weight && rec.health == new.health;
        if same && rec.generation == new.generation {
            let rec = *rec;
            return Ok(Rewritten {
                rec,
                changed: false,
            });
        }
        let digest = canon::endpoint_fields_digest(
            new.key,
            &new.address,
            new.weight,
            new.health,
            rec.shape_digest,
        );
        let old_address = rec.address;
        let old_hash = rec.hash;
        rec.address = new.address;
        rec.weight = new.weight;
        rec.health = new.health;
        rec.generation = new.generation;
        rec.hash = canon::entity_hash(Kind::Endpoint, new.key, source.0, new.generation, digest);
        let rec = *rec;
        self.hash_sub(old_hash);
        self.hash_add(rec.hash);
        if same {
            // Only the generation stamp moved: nothing to index or push.
            return Ok(Rewritten {
                rec,
                changed: false,
            });
        }
        self.move_address(Some(old_address), Some(new.address));
        if rec.hosts > 1
            && let Some(shape) = self.endpoint_shape_at(hk)
        {
            touched.endpoints_of(shape);
        }
        Ok(Rewritten { rec, changed: true })
    }

    /// [`ModelState::put_endpoint`] when the caller has already looked up the key's
    /// hash and what is stored under it (`current`): saves a lookup.
    pub(crate) fn put_endpoint_over(
        &mut self,
        hk: HKey,
        current: Option<Written<Endpoint>>,
        source: Arc<str>,
        generation: u64,
        ep: Endpoint,
        touched: &mut impl Touch,
    ) {
        let digest = canon::endpoint_digest(&ep);
        if let Some(old) = &current
            && old.digest == digest
            && *old.value == ep
            && old.source == source
        {
            if old.generation != generation
                && let Some(rec) = self.raw_endpoints.hot_mut(&hk)
            {
                let old_hash = rec.hash;
                rec.generation = generation;
                rec.hash = canon::entity_hash(Kind::Endpoint, &ep.key, &source, generation, digest);
                let new_hash = rec.hash;
                self.hash_sub(old_hash);
                self.hash_add(new_hash);
            }
            return;
        }
        let hash = canon::entity_hash(Kind::Endpoint, &ep.key, &source, generation, digest);
        let hot = Hot::new(
            &ep,
            ShapeFacts::of(&ep.shape),
            source_key(&source),
            generation,
            hash,
        );
        self.hash_add(hash);
        if let Some(old) = self.raw_endpoints.put_hot(hk, &ep.key, hot) {
            self.hash_sub(old.hash);
        }
        let old = current.as_ref().map(|o| &*o.value);
        let kept = current
            .as_ref()
            .is_some_and(|o| Arc::ptr_eq(&o.value.shape, &ep.shape) && o.source == source);
        if kept {
            // The same key, source and shape: the cold part listed under each
            // hostname stays, and only their content is touched.
            touched.endpoints_of(&ep.shape);
        } else {
            let cold = Arc::new(Cold {
                key: ep.key.clone(),
                source,
                shape: ep.shape.clone(),
            });
            self.relist(hk, old, Some((&ep, cold)), touched);
        }
        self.move_address(old.map(|o| o.address), Some(ep.address));
    }

    /// Removes the endpoint under `hk` from the raw layer and every index. Returns
    /// whether there was one.
    pub(crate) fn remove_endpoint_at(&mut self, hk: &HKey, touched: &mut impl Touch) -> bool {
        let Some((hot, cold)) = self.raw_endpoints.remove(hk) else {
            return false;
        };
        self.hash_sub(hot.hash);
        let old = cold.endpoint(&hot);
        self.relist(*hk, Some(&old), None, touched);
        self.move_address(Some(old.address), None);
        true
    }

    /// Notes that an endpoint moved from address `old` to `new` (either may be
    /// absent): the address index is built again when next asked for.
    fn move_address(&mut self, old: Option<IpAddr>, new: Option<IpAddr>) {
        if old != new {
            self.endpoints_by_addr.invalidate();
        }
    }

    /// Moves the endpoint `ek` from the hostnames `old` lists to those `new`
    /// lists, with `new`'s cold part (either version may be absent; the cold
    /// part changed, so each hostname of `new` is listed again even when `old`
    /// listed it too). Every hostname of either version is touched (its
    /// endpoints' content changed).
    fn relist(
        &mut self,
        ek: HKey,
        old: Option<&Endpoint>,
        new: Option<(&Endpoint, Arc<Cold>)>,
        touched: &mut impl Touch,
    ) {
        let lists = |e: &Endpoint, host: &Hostname| e.services.iter().any(|(_, h)| h == host);
        if let Some(o) = old {
            for (_, host) in &o.services {
                if !new.as_ref().is_some_and(|(n, _)| lists(n, host)) {
                    self.raw_endpoints.unlist(&HKey::of(host.as_str()), &ek);
                }
                touched.endpoints(host);
            }
            if o.services.is_empty() {
                self.raw_endpoints.unlist(&HKey::MIN, &ek);
            }
        }
        if let Some((n, cold)) = new {
            for host in host_keys(&n.shape) {
                self.raw_endpoints.list(host, ek, cold.clone());
            }
            for (_, host) in &n.services {
                touched.endpoints(host);
            }
        }
    }

    /// Stores a config object under its key.
    pub fn put_config(
        &mut self,
        source: Arc<str>,
        generation: u64,
        cfg: Arc<Config>,
        touched: &mut impl Touch,
    ) {
        let digest = canon::config_digest(&cfg);
        let key = cfg.key.clone();
        let content_same = self
            .raw_configs
            .get(&*key)
            .is_some_and(|old| old.digest == digest && *old.value == *cfg);
        let written = Written::new(Kind::Config, &key, cfg, source, generation, digest);
        self.hash_add(written.entity_hash());
        if let Some(old) = self.raw_configs.insert(key.clone(), written) {
            self.hash_sub(old.entity_hash());
        }
        if !content_same {
            touched.configs();
            let value = &self.raw_configs[&key].value;
            if let Some(t) = self.rules.upsert(value) {
                touched.rules(&t);
            }
        }
    }

    /// Removes the config object under `key`. Returns whether there was one.
    pub(crate) fn remove_config(&mut self, key: &str, touched: &mut impl Touch) -> bool {
        let Some(old) = self.raw_configs.remove(key) else {
            return false;
        };
        self.hash_sub(old.entity_hash());
        touched.configs();
        if let Some(t) = self.rules.remove(key) {
            touched.rules(&t);
        }
        true
    }

    /// Removes every entity of `source` whose generation is below `below`. O(entities
    /// of all sources) to find them (resyncs are rare), O(removed) to remove them.
    /// Returns how many were removed.
    pub(crate) fn sweep(&mut self, source: &str, below: u64, touched: &mut impl Touch) -> usize {
        let stale = |s: &Arc<str>, g: u64| g < below && &**s == source;
        let services: Vec<ServiceSlot> = self
            .raw_services
            .iter()
            .filter(|(_, w)| stale(&w.source, w.generation))
            .map(|(slot, _)| slot.clone())
            .collect();
        let owner = source_key(source);
        let endpoints: Vec<HKey> = self
            .raw_endpoints
            .iter_hot()
            .filter(|(_, h)| h.generation < below && h.source == owner)
            .map(|(k, _)| *k)
            .collect();
        let configs: Vec<Arc<str>> = self
            .raw_configs
            .iter()
            .filter(|(_, w)| stale(&w.source, w.generation))
            .map(|(k, _)| k.clone())
            .collect();
        let n = services.len() + endpoints.len() + configs.len();
        for slot in &services {
            self.remove_service(slot, touched);
        }
        for key in &endpoints {
            self.remove_endpoint_at(key, touched);
        }
        for key in &configs {
            self.remove_config(key, touched);
        }
        n
    }
}
