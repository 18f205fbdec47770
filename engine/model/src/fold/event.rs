//! One event applied to the state: the rules of the module doc, event by event
//! ([`apply_event`]), with the admission check of endpoints and the per-batch
//! scratch ([`Cx`]) they share.
//!
//! What it does NOT do: order events (runs are sorted by the caller, see
//! [`super::fold_iter`]) or collect what was skipped.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use nohash_hasher::{BuildNoHashHasher, IsEnabled};

use deltapilot_proto::event::Payload;
use deltapilot_proto::resync_marker::Phase;
use deltapilot_proto::{self as pb, Event};

use super::{Prepared, SkipReason, config};
use crate::model::{
    EndpointShape, endpoint_from_digested, health_from_proto, service_from_proto, source_digest,
};
use crate::state::{HKey, Hot, ModelState, Rewrite, ServiceSlot, SourceGen, TouchLog, source_key};

/// Per-batch scratch: the last source name seen, so a batch from one adapter
/// allocates its name once; the partition of the event being applied (a
/// multi-copy resync marker counts the partitions its copies came from); and the
/// admission check's answers for the current run of endpoint events.
#[derive(Default)]
pub(super) struct Cx {
    source: Option<Arc<str>>,
    pub(super) partition: u32,
    /// Whether an endpoint of a shape (by its [`source_digest`]) names a service
    /// that exists. Valid while only endpoint events are applied, since they
    /// leave the merged services as they are; cleared before any other event.
    /// Why: the check read the shape's services and hashed their hostnames, two
    /// cache misses per event at 100k endpoints, while the endpoints of a run
    /// mostly share a few thousand shapes. At most one entry per event of a batch.
    admitted: HashMap<ShapeDigest, bool, BuildNoHashHasher<ShapeDigest>>,
}

/// A shape's 128-bit [`source_digest`] as a key of a map that does not hash
/// again: the digest is already uniform, so its low 64 bits are the hash
/// (`nohash-hasher` takes one `u64`, and has no `u128`); equality compares all
/// 128 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ShapeDigest(u128);

impl Hash for ShapeDigest {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0 as u64);
    }
}

impl IsEnabled for ShapeDigest {}

impl Cx {
    /// Forgets the admission answers: the event about to be applied may change
    /// the merged services.
    pub(super) fn forget_admissions(&mut self) {
        self.admitted.clear();
    }

    /// Whether an endpoint whose shape has the digest `shape` names an existing
    /// service; `check` answers when this run has not seen the shape yet.
    fn admitted(&mut self, shape: u128, check: impl FnOnce() -> bool) -> bool {
        *self
            .admitted
            .entry(ShapeDigest(shape))
            .or_insert_with(check)
    }

    fn source(&mut self, st: &ModelState, name: &str) -> Arc<str> {
        if let Some(s) = &self.source
            && &**s == name
        {
            return s.clone();
        }
        let s = st
            .sources()
            .find(|(k, _)| &***k == name)
            .map_or_else(|| Arc::from(name), |(k, _)| k.clone());
        self.source = Some(s.clone());
        s
    }
}

type Skip = (SkipReason, String);

fn invalid(e: impl std::fmt::Display) -> Skip {
    (SkipReason::Invalid, e.to_string())
}

fn conflict(key: &str, owner: &str, writer: &str) -> Skip {
    (
        SkipReason::KeyConflict,
        format!(
            "key {key} is owned by source {owner:?}; source {writer:?} may not write or delete it"
        ),
    )
}

/// The skip of an entity whose key (or hostname) `text` has the same 128-bit
/// hash as the stored `stored` (see `keys::HKey`): refused rather than merged
/// with it.
fn collision(what: &str, text: &str, stored: &str) -> Skip {
    (
        SkipReason::HashCollision,
        format!(
            "{what} {text:?} has the same 128-bit key hash as the stored {what} {stored:?}; \
             refused so that the two are not merged (rename one of them)"
        ),
    )
}

/// A hostname `shape` lists whose key another stored hostname already holds,
/// or two it lists that share a key: the skip for either.
fn shape_collision(st: &ModelState, shape: &EndpointShape) -> Result<(), Skip> {
    for (i, (_, host)) in shape.services.iter().enumerate() {
        if let Some(stored) = st.hostname_collision(host) {
            return Err(collision("hostname", host.as_str(), stored.as_str()));
        }
        let hk = HKey::of(host.as_str());
        if let Some((_, other)) = shape.services[..i]
            .iter()
            .find(|(_, h)| h != host && HKey::of(h.as_str()) == hk)
        {
            return Err(collision("hostname", host.as_str(), other.as_str()));
        }
    }
    Ok(())
}

fn nonempty_key(d: &pb::EntityDelete) -> Result<&str, Skip> {
    if d.key.is_empty() {
        Err(invalid("delete with an empty key"))
    } else {
        Ok(&d.key)
    }
}

/// The admission check of a stored endpoint (of shape `shape`, converted from
/// a payload of source digest `digest`): `Err` (reported, but the endpoint stays
/// stored, see the module doc) when none of its services exists yet.
///
/// Why the shape's first hostname key first: when it names a service, one
/// lookup in the small, cache-resident claims map answers, without reading the
/// shape's hostnames and hashing them (two cache misses per event at 100k
/// endpoints, where most events of a batch have a shape of their own, so the
/// per-run cache rarely hits). Otherwise every hostname is checked, as before.
fn admit(
    st: &ModelState,
    cx: &mut Cx,
    digest: u128,
    key: &str,
    shape: &EndpointShape,
) -> Result<(), Skip> {
    let services = &shape.services;
    if shape.first_host().is_some_and(|h| st.has_service_at(&h))
        || cx.admitted(digest, || services.iter().any(|(_, h)| st.has_service(h)))
    {
        return Ok(());
    }
    Err(held(key, services.iter().map(|(_, h)| h.as_str())))
}

/// The report of an endpoint `key` none of whose services (`hosts`) exists.
fn held<'a>(key: &str, hosts: impl Iterator<Item = &'a str>) -> Skip {
    let names: Vec<&str> = hosts.collect();
    (
        SkipReason::UnknownService,
        format!(
            "endpoint {key}: none of its services exists yet: {}; held, and served once one \
             does",
            names.join(", ")
        ),
    )
}

/// [`held`] for the endpoint upsert `ev`, naming the hostnames its payload
/// lists (each once): for an admission checked after the event was applied
/// (see [`Applied::Later`]), when the stored shape may be gone.
pub(super) fn held_event(ev: &Event) -> Skip {
    let Some(Payload::EndpointUpsert(u)) = &ev.payload else {
        return held("", std::iter::empty());
    };
    let mut hosts: Vec<&str> = u
        .endpoint
        .iter()
        .flat_map(|e| &e.services)
        .map(|s| s.hostname.as_str())
        .collect();
    hosts.sort_unstable();
    hosts.dedup();
    held(&u.key, hosts.into_iter())
}

/// What applying an event leaves to its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Applied {
    /// Nothing: the event is applied, and admitted if it is an endpoint's.
    Done,
    /// An endpoint of exactly one hostname, of key `host`, stored and applied
    /// by the rewrite path, whose admission (a service of that hostname exists)
    /// the caller checks, and whose hostname it touches when `touch` (see
    /// [`ModelState::rewrite_endpoint`]), before the next event that is not an
    /// endpoint's. Why later: done at once, it was a lookup in the claims map
    /// at a random place per event, where the leaf copies of the records' map
    /// keep evicting that map from the cache; done for a run at once, in
    /// hostname order, the claims map is read front to back (see
    /// `Folding::admit_later`).
    Later { host: HKey, touch: bool },
}

/// [`admit`] for an endpoint of several hostnames (or none) the rewrite path
/// kept (stored under `hk`, its record `rec`; one of exactly one hostname is
/// checked later, see [`Applied::Later`]): its first hostname's key is in the
/// record, so a service found by it answers without reading the shape.
fn admit_stored(
    st: &ModelState,
    cx: &mut Cx,
    digest: u128,
    key: &str,
    hk: &HKey,
    rec: &Hot,
) -> Result<(), Skip> {
    if rec.hosts > 0 && st.has_service_at(&rec.first_host) {
        return Ok(());
    }
    match st.endpoint_shape_at(hk) {
        Some(shape) => admit(st, cx, digest, key, shape),
        None => Ok(()),
    }
}

/// Reads what applying the endpoint event `ev` (key `hk`) reads first: the
/// event's fields, its key's and source's text, and the stored record's bucket;
/// the value means nothing, and the caller keeps it (`std::hint::black_box`) so
/// the reads stay. Why: a run is applied in key-hash order, not the order the
/// events lie in memory, so each of these was a cache miss waited for in turn;
/// read for several events one after another, the processor overlaps the misses
/// (see `Folding::apply_run`).
pub(super) fn warm(st: &ModelState, ev: &Event, hk: &HKey) -> u64 {
    let first = |s: &str| u64::from(s.as_bytes().first().copied().unwrap_or(0));
    let mut w = st.warm_endpoint(hk) ^ ev.generation ^ first(&ev.source);
    if let Some(Payload::EndpointUpsert(u)) = &ev.payload {
        w ^= first(&u.key);
        if let Some(e) = &u.endpoint {
            w ^= u64::from(e.weight) ^ e.health as u64;
        }
    }
    w
}

pub(super) fn apply_event(
    st: &mut ModelState,
    ev: &Event,
    prep: &Prepared,
    cx: &mut Cx,
    touched: &mut TouchLog,
) -> Result<Applied, Skip> {
    let Some(payload) = &ev.payload else {
        return Err((
            SkipReason::EmptyPayload,
            "event has no payload (empty, or an entity kind newer than this build)".into(),
        ));
    };
    let gen_state = st.source_gen(&ev.source);
    if ev.generation < gen_state.completed {
        return Err((
            SkipReason::StaleGeneration,
            format!(
                "generation {} of source {:?} is below its completed resync generation {}",
                ev.generation, ev.source, gen_state.completed
            ),
        ));
    }
    match payload {
        Payload::ServiceUpsert(u) => {
            let s = u
                .service
                .as_ref()
                .ok_or_else(|| invalid("service_upsert without a service"))?;
            let svc = service_from_proto(s).map_err(invalid)?;
            if let Some(stored) = st.hostname_collision(&svc.hostname) {
                return Err(collision(
                    "hostname",
                    svc.hostname.as_str(),
                    stored.as_str(),
                ));
            }
            let slot = ServiceSlot {
                key: Arc::from(pb::service_key(&s.namespace, &s.hostname).as_str()),
                source: cx.source(st, &ev.source),
            };
            st.put_service(slot, ev.generation, Arc::new(svc), touched);
        }
        Payload::ServiceDelete(d) => {
            let slot = ServiceSlot {
                key: Arc::from(nonempty_key(d)?),
                source: cx.source(st, &ev.source),
            };
            st.remove_service(&slot, touched);
        }
        Payload::EndpointUpsert(u) => {
            let e = u
                .endpoint
                .as_ref()
                .ok_or_else(|| invalid("endpoint_upsert without an endpoint"))?;
            let hk = prep.hk.unwrap_or_else(|| HKey::of(&u.key));
            let digest = prep.shape_digest.unwrap_or_else(|| source_digest(e));
            // The common rewrite (same owner, same shape) first; anything else,
            // including every error, takes the general path below, with what the
            // rewrite found stored (so the key is looked up once).
            let address = prep.address.or_else(|| e.address.parse().ok());
            let rewrite = address
                .filter(|_| !u.key.is_empty())
                .map(|address| Rewrite {
                    key: &u.key,
                    address,
                    weight: e.weight.max(1),
                    health: health_from_proto(e.health),
                    generation: ev.generation,
                });
            let current = match rewrite {
                Some(new) => {
                    let source = (ev.source.as_str(), source_key(&ev.source));
                    match st.rewrite_endpoint(&hk, source, digest, new, touched) {
                        Ok(r) if r.rec.hosts == 1 => {
                            return Ok(Applied::Later {
                                host: r.rec.first_host,
                                touch: r.changed,
                            });
                        }
                        Ok(r) => {
                            return admit_stored(st, cx, digest, &u.key, &hk, &r.rec)
                                .map(|()| Applied::Done);
                        }
                        Err(current) => current,
                    }
                }
                None => st.raw_endpoint_at(&hk),
            };
            if let Some(w) = &current
                && *w.value.key != *u.key
            {
                return Err(collision("endpoint key", &u.key, &w.value.key));
            }
            let prev = current.as_ref().map(|w| &*w.value);
            let like = || {
                let first = e.services.first()?;
                st.shape_like(&first.hostname, digest).cloned()
            };
            let ep = endpoint_from_digested(&u.key, e, digest, prep.address, prev, like)
                .map_err(invalid)?;
            let source = match &current {
                Some(w) if *w.source != *ev.source => {
                    return Err(conflict(&u.key, &w.source, &ev.source));
                }
                Some(w) => w.source.clone(),
                None => cx.source(st, &ev.source),
            };
            let shape = ep.shape.clone();
            if !current
                .as_ref()
                .is_some_and(|w| Arc::ptr_eq(&w.value.shape, &shape))
            {
                shape_collision(st, &shape)?;
            }
            st.put_endpoint_over(hk, current, source, ev.generation, ep, touched);
            return admit(st, cx, digest, &u.key, &shape).map(|()| Applied::Done);
        }
        Payload::EndpointDelete(d) => {
            let key = nonempty_key(d)?;
            let hk = prep.hk.unwrap_or_else(|| HKey::of(key));
            if !st.holds_endpoint_key(&hk, key) {
                // Not stored (nothing is, or another key of the same hash):
                // deleting it is a no-op.
                return Ok(Applied::Done);
            }
            if let Some(rec) = st.endpoint_record_at(&hk)
                && rec.source != source_key(&ev.source)
                && let Some(w) = st.raw_endpoint_at(&hk)
            {
                return Err(conflict(key, &w.source, &ev.source));
            }
            st.remove_endpoint_at(&hk, touched);
        }
        Payload::ConfigUpsert(u) => {
            let c = u
                .config
                .as_ref()
                .ok_or_else(|| invalid("config_upsert without a config"))?;
            let cfg = config::config_from_proto(c).map_err(invalid)?;
            let source = match st.raw_config(&cfg.key) {
                Some(w) if *w.source != *ev.source => {
                    return Err(conflict(&cfg.key, &w.source, &ev.source));
                }
                Some(w) => w.source.clone(),
                None => cx.source(st, &ev.source),
            };
            st.put_config(source, ev.generation, Arc::new(cfg), touched);
        }
        Payload::ConfigDelete(d) => {
            let key = nonempty_key(d)?;
            if let Some(w) = st.raw_config(key)
                && *w.source != *ev.source
            {
                return Err(conflict(key, &w.source, &ev.source));
            }
            st.remove_config(key, touched);
        }
        Payload::Resync(m) => {
            let g = ev.generation;
            let source = cx.source(st, &ev.source);
            match m.phase() {
                Phase::Started => st.set_source_gen(
                    source,
                    SourceGen {
                        started: g,
                        completed: gen_state.completed,
                    },
                ),
                Phase::Completed => {
                    // Several copies (one per partition): sweep only once `copies`
                    // distinct partitions have delivered one (see the module doc).
                    if m.copies > 1 {
                        if g == gen_state.completed {
                            // A late copy of a generation already completed (a
                            // retried append writes its copies again).
                            return Ok(Applied::Done);
                        }
                        let mut pending = match st.pending_resync(&source) {
                            // A newer generation is pending: it supersedes this one.
                            Some(p) if p.generation > g => return Ok(Applied::Done),
                            Some(p) if p.generation == g => p.clone(),
                            _ => crate::state::PendingResync {
                                generation: g,
                                ..Default::default()
                            },
                        };
                        pending.copies = pending.copies.max(m.copies);
                        pending.partitions.insert(cx.partition);
                        if !pending.is_complete() {
                            st.set_pending_resync(source, Some(pending));
                            return Ok(Applied::Done);
                        }
                    }
                    if st
                        .pending_resync(&source)
                        .is_some_and(|p| p.generation <= g)
                    {
                        st.set_pending_resync(source.clone(), None);
                    }
                    st.set_source_gen(
                        source.clone(),
                        SourceGen {
                            started: gen_state.started.max(g),
                            completed: g,
                        },
                    );
                    st.sweep(&source, g, touched);
                }
                Phase::Unspecified => {
                    return Err(invalid("resync marker with an unspecified phase"));
                }
            }
        }
    }
    Ok(Applied::Done)
}
