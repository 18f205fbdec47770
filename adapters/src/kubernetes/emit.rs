//! From the desired view to events: what the adapter has appended (the emitted
//! view), which keys may differ from the desired view (pending), and the next batch
//! of events that brings the log closer.
//!
//! Entities are compared by value, so a key marked pending whose desired entity
//! equals the emitted one appends nothing: a relist that finds the registry
//! unchanged emits no event, and nothing is ever deleted and re-created.
//!
//! A resync (on every start) empties the emitted view, marks every desired key
//! pending, and appends `resync STARTED`, every entity, then `resync COMPLETED`, all
//! at the new generation. `COMPLETED` goes out in a batch of its own once the
//! pending set is empty, i.e. after every entity append was acknowledged, which is
//! what lets the engine sweep older generations safely (also on a partitioned
//! log, where a marker sharing a batch with entities could be read first).
//!
//! Order within a batch follows what the engine admits: upserts of services, then
//! config objects, then endpoints (an endpoint whose service is unknown is
//! skipped by the fold); then deletes of endpoints, config objects, services.
//!
//! What it does NOT do: compute the desired view (see `store`) or append (see
//! `adapter`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use deltapilot_proto::event::Payload;
use deltapilot_proto::{self as pb, Event, SCHEMA_VERSION, resync_marker::Phase};

/// One entity's content.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Entity {
    /// Keyed `svc/<ns>/<host>`.
    Service(pb::Service),
    /// Keyed `ep/k8s/<cluster>/<ns>/<service>/<pod or ->/<address>`.
    Endpoint(pb::Endpoint),
    /// Keyed `cfg/<kind>/<ns>/<name>`.
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
}

/// Key → entity, shared between the desired and emitted views.
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

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    pub(crate) fn phase(&self) -> ResyncPhase {
        self.phase
    }

    /// Entities appended and current.
    pub(crate) fn len(&self) -> usize {
        self.emitted.len()
    }

    /// Marks keys whose desired entity may have changed.
    pub(crate) fn mark(&mut self, keys: impl IntoIterator<Item = String>) {
        self.pending.extend(keys);
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

    /// Records that `events` (a plan from [`Emitter::plan`]) are in the log, with
    /// the entities of `desired` they were planned from.
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
                }
                _ => {
                    if let Some(e) = desired.get(&key) {
                        self.emitted.insert(key.clone(), e.clone());
                    }
                }
            }
            self.pending.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(host: &str, port: u32) -> Arc<Entity> {
        Arc::new(Entity::Service(pb::Service {
            hostname: host.into(),
            namespace: "ns".into(),
            ports: vec![pb::Port {
                name: "http".into(),
                number: port,
                protocol: pb::Protocol::Http as i32,
            }],
            ..Default::default()
        }))
    }

    fn ep(addr: &str, host: &str) -> Arc<Entity> {
        Arc::new(Entity::Endpoint(pb::Endpoint {
            address: addr.into(),
            services: vec![pb::ServiceRef {
                namespace: "ns".into(),
                hostname: host.into(),
            }],
            ..Default::default()
        }))
    }

    fn names(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .map(|e| match &e.payload {
                Some(Payload::Resync(m)) => format!("resync:{}", m.phase().as_str_name()),
                _ => format!("{}:{}", e.kind_name(), e.key().unwrap_or_default()),
            })
            .collect()
    }

    fn run(em: &mut Emitter, desired: &EntityMap, batch: usize) -> Vec<String> {
        let mut out = Vec::new();
        for _ in 0..100 {
            let plan = em.plan(desired, batch, 1);
            if plan.is_empty() {
                return out;
            }
            em.commit(&plan, desired);
            out.extend(names(&plan));
        }
        panic!("planning did not converge");
    }

    #[test]
    fn resync_brackets_entities_services_first_and_completes_alone_at_the_end() {
        let mut desired = EntityMap::new();
        desired.insert("ep/k8s/c/ns/p/10.0.0.1".into(), ep("10.0.0.1", "a.ns"));
        desired.insert("ep/k8s/c/ns/q/10.0.0.2".into(), ep("10.0.0.2", "a.ns"));
        desired.insert("svc/ns/a.ns".into(), svc("a.ns", 80));
        let mut em = Emitter::new("k8s:c".into(), 7, &desired);
        let mut batches = Vec::new();
        for _ in 0..10 {
            let plan = em.plan(&desired, 3, 1);
            if plan.is_empty() {
                break;
            }
            assert!(plan.iter().all(|e| e.generation == 7));
            em.commit(&plan, &desired);
            batches.push(names(&plan));
        }
        assert_eq!(
            batches,
            vec![
                vec![
                    "resync:STARTED",
                    "service_upsert:svc/ns/a.ns",
                    "endpoint_upsert:ep/k8s/c/ns/p/10.0.0.1"
                ],
                vec!["endpoint_upsert:ep/k8s/c/ns/q/10.0.0.2"],
                vec!["resync:COMPLETED"],
            ]
        );
        assert_eq!(em.phase(), ResyncPhase::Completed);
        assert_eq!(em.len(), 3);
        // An empty registry: both markers at once.
        let mut empty = Emitter::new("k8s:c".into(), 8, &EntityMap::new());
        assert_eq!(
            names(&empty.plan(&EntityMap::new(), 3, 1)),
            vec!["resync:STARTED", "resync:COMPLETED"]
        );
    }

    #[test]
    fn unchanged_pending_keys_emit_nothing_and_deletes_go_endpoints_first() {
        let mut desired = EntityMap::new();
        desired.insert("svc/ns/a.ns".into(), svc("a.ns", 80));
        desired.insert("ep/x".into(), ep("10.0.0.1", "a.ns"));
        let mut em = Emitter::new("k8s:c".into(), 1, &desired);
        run(&mut em, &desired, 100);
        // A relist that marks everything but changes nothing.
        em.mark(desired.keys().cloned());
        assert!(run(&mut em, &desired, 100).is_empty());
        // A change, then removal of both.
        desired.insert("svc/ns/a.ns".into(), svc("a.ns", 81));
        em.mark(["svc/ns/a.ns".to_owned()]);
        assert_eq!(
            run(&mut em, &desired, 100),
            vec!["service_upsert:svc/ns/a.ns"]
        );
        desired.clear();
        em.mark(["svc/ns/a.ns".to_owned(), "ep/x".to_owned()]);
        assert_eq!(
            run(&mut em, &desired, 100),
            vec!["endpoint_delete:ep/x", "service_delete:svc/ns/a.ns"]
        );
        assert_eq!(em.len(), 0);
    }
}
