//! From an adapter's desired view to events, for every adapter: what the adapter
//! has appended (the emitted view), which keys may differ from the desired view
//! (pending), and the next batch of events that brings the log closer.
//!
//! Entities are compared by value, so a key marked pending whose desired entity
//! equals the emitted one appends nothing: a relist, rescan or refetch that finds
//! the registry unchanged emits no event, and nothing is ever deleted and
//! re-created.
//!
//! A resync (on every start) begins with an empty emitted view and every desired
//! key pending: `resync STARTED`, every entity, then `resync COMPLETED`, all at the
//! new generation. `COMPLETED` goes out in a batch of its own once nothing is
//! pending, i.e. after every entity append was acknowledged, which is what lets
//! the engine sweep older generations safely (also on a partitioned log, where a
//! marker sharing a batch with entities could be read first).
//!
//! Order within a batch follows what the engine admits: upserts of services, then
//! config objects, then endpoints (an endpoint whose service is unknown is skipped
//! by the fold); then deletes of endpoints, config objects, services.
//!
//! An adapter either marks the keys it knows changed ([`Emitter::mark`], the
//! Kubernetes store's incremental way) or, after rebuilding its whole desired view,
//! marks everything ([`Emitter::mark_all`], the file and Eureka way).
//!
//! What it does NOT do: compute a desired view (each adapter does), or append
//! (see `append`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use deltapilot_proto::event::Payload;
use deltapilot_proto::{self as pb, Event, SCHEMA_VERSION, resync_marker::Phase};

/// One entity's content. Keys: `svc/<ns>/<host>` for services,
/// `cfg/<kind>/<ns>/<name>` for config objects, and an adapter-chosen,
/// source-scoped `ep/...` for endpoints (see each adapter's module docs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Entity {
    /// A service.
    Service(pb::Service),
    /// An endpoint (one workload address).
    Endpoint(pb::Endpoint),
    /// A traffic-rule config object.
    Config(pb::ConfigObject),
}

impl Entity {
    fn rank(&self) -> u8 {
        match self {
            Entity::Service(_) => 0,
            Entity::Config(_) => 1,
            Entity::Endpoint(_) => 2,
        }
    }

    fn upsert(&self, key: &str) -> Payload {
        match self {
            Entity::Service(s) => Payload::ServiceUpsert(pb::ServiceUpsert {
                service: Some(s.clone()),
            }),
            Entity::Endpoint(e) => Payload::EndpointUpsert(pb::EndpointUpsert {
                key: key.to_owned(),
                endpoint: Some(e.clone()),
            }),
            Entity::Config(c) => Payload::ConfigUpsert(pb::ConfigUpsert {
                config: Some(c.clone()),
            }),
        }
    }

    fn delete(&self, key: &str) -> Payload {
        let d = pb::EntityDelete {
            key: key.to_owned(),
        };
        match self {
            Entity::Service(_) => Payload::ServiceDelete(d),
            Entity::Endpoint(_) => Payload::EndpointDelete(d),
            Entity::Config(_) => Payload::ConfigDelete(d),
        }
    }

    /// The entity an upsert payload carries.
    fn of_upsert(payload: &Payload) -> Option<Entity> {
        match payload {
            Payload::ServiceUpsert(u) => u.service.clone().map(Entity::Service),
            Payload::EndpointUpsert(u) => u.endpoint.clone().map(Entity::Endpoint),
            Payload::ConfigUpsert(u) => u.config.clone().map(Entity::Config),
            _ => None,
        }
    }
}

/// Key → entity, for desired and emitted views (shared `Arc`s, so an emitted view
/// costs little beside the desired one).
pub(crate) type EntityMap = BTreeMap<String, Arc<Entity>>;

/// Where the resync stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResyncPhase {
    /// `STARTED` not appended yet.
    NotStarted,
    /// `STARTED` is in the log; entities are going out.
    Started,
    /// `COMPLETED` is in the log; only diffs from now on.
    Completed,
}

/// The emitted view and the pending keys of one resync generation.
#[derive(Debug)]
pub(crate) struct Emitter {
    source: String,
    generation: u64,
    phase: ResyncPhase,
    emitted: EntityMap,
    pending: BTreeSet<String>,
}

impl Emitter {
    /// Starts a resync at `generation` of everything in `desired`.
    pub(crate) fn new(source: String, generation: u64, desired: &EntityMap) -> Self {
        Self {
            source,
            generation,
            phase: ResyncPhase::NotStarted,
            emitted: EntityMap::new(),
            pending: desired.keys().cloned().collect(),
        }
    }

    /// The generation on every event.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Where the resync stands.
    pub(crate) fn phase(&self) -> ResyncPhase {
        self.phase
    }

    /// Entities appended and current.
    pub(crate) fn len(&self) -> usize {
        self.emitted.len()
    }

    /// Events planned or due but not yet in the log: the pending keys (an upper
    /// bound: a pending key whose entity turns out unchanged emits nothing) and
    /// the resync markers still to write.
    pub(crate) fn backlog(&self) -> usize {
        let markers = match self.phase {
            ResyncPhase::NotStarted => 2,
            ResyncPhase::Started => 1,
            ResyncPhase::Completed => 0,
        };
        self.pending.len() + markers
    }

    /// Marks keys whose desired entity may have changed.
    pub(crate) fn mark(&mut self, keys: impl IntoIterator<Item = String>) {
        self.pending.extend(keys);
    }

    /// Marks every key of a rebuilt desired view, and every emitted key (those
    /// missing from `desired` are deleted by the next plans).
    pub(crate) fn mark_all(&mut self, desired: &EntityMap) {
        self.pending.extend(desired.keys().cloned());
        self.pending.extend(self.emitted.keys().cloned());
    }

    /// The next batch (at most `batch_max` events, at least 3), or an empty plan
    /// when the log matches `desired`. Drops pending keys that turn out unchanged.
    pub(crate) fn plan(
        &mut self,
        desired: &EntityMap,
        batch_max: usize,
        now_micros: i64,
    ) -> Vec<Event> {
        let batch_max = batch_max.max(3);
        let emitted = &self.emitted;
        self.pending
            .retain(|k| desired.get(k).map(Arc::as_ref) != emitted.get(k).map(Arc::as_ref));
        let mut upserts: Vec<(&String, &Arc<Entity>)> = Vec::new();
        let mut deletes: Vec<(&String, &Arc<Entity>)> = Vec::new();
        for k in &self.pending {
            match (desired.get(k), emitted.get(k)) {
                (Some(d), _) => upserts.push((k, d)),
                (None, Some(e)) => deletes.push((k, e)),
                (None, None) => {}
            }
        }
        upserts.sort_by(|a, b| (a.1.rank(), a.0).cmp(&(b.1.rank(), b.0)));
        deletes.sort_by(|a, b| (2 - a.1.rank(), a.0).cmp(&(2 - b.1.rank(), b.0)));

        let mut payloads = Vec::new();
        if self.phase == ResyncPhase::NotStarted {
            payloads.push(Payload::Resync(pb::ResyncMarker {
                phase: Phase::Started as i32,
                ..Default::default()
            }));
        }
        let room = batch_max - payloads.len();
        let total = upserts.len() + deletes.len();
        payloads.extend(
            upserts
                .iter()
                .map(|(k, e)| e.upsert(k))
                .chain(deletes.iter().map(|(k, e)| e.delete(k)))
                .take(room),
        );
        // `COMPLETED` travels alone, once every entity of the resync has been
        // acknowledged: on a partitioned log (Kafka) a marker in the same batch
        // could become readable before entity writes on other partitions.
        if self.phase != ResyncPhase::Completed && total == 0 {
            payloads.push(Payload::Resync(pb::ResyncMarker {
                phase: Phase::Completed as i32,
                ..Default::default()
            }));
        }
        payloads
            .into_iter()
            .map(|p| Event {
                schema_version: SCHEMA_VERSION,
                source: self.source.clone(),
                generation: self.generation,
                observed_at_unix_micros: now_micros,
                payload: Some(p),
            })
            .collect()
    }

    /// Records that `events` (a plan from [`Emitter::plan`]) are in the log.
    /// `desired` is the view they were planned from: an upserted entity still
    /// equal to it is shared with it, one that changed since is recorded as
    /// appended (and stays pending, so the change goes out next).
    pub(crate) fn commit(&mut self, events: &[Event], desired: &EntityMap) {
        for ev in events {
            let Some(payload) = &ev.payload else { continue };
            if let Payload::Resync(m) = payload {
                match m.phase() {
                    Phase::Started => self.phase = ResyncPhase::Started,
                    Phase::Completed => self.phase = ResyncPhase::Completed,
                    Phase::Unspecified => {}
                }
                continue;
            }
            let Some(key) = ev.key() else { continue };
            match payload {
                Payload::ServiceDelete(_)
                | Payload::EndpointDelete(_)
                | Payload::ConfigDelete(_) => {
                    self.emitted.remove(&key);
                    if desired.contains_key(&key) {
                        continue;
                    }
                }
                _ => {
                    let Some(sent) = Entity::of_upsert(payload) else {
                        continue;
                    };
                    match desired.get(&key) {
                        Some(d) if **d == sent => {
                            self.emitted.insert(key.clone(), d.clone());
                        }
                        _ => {
                            self.emitted.insert(key.clone(), Arc::new(sent));
                            continue;
                        }
                    }
                }
            }
            self.pending.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests;
