//! From objects to events: the desired view (what the files say now), the emitted
//! view (what the adapter has appended), and the diff between them.
//!
//! The adapter appends only entity-level changes: an upsert for an entity that is
//! new or whose content changed, a delete for one that vanished. Entities are
//! compared by value, so a rescan of unchanged files appends nothing and a rescan
//! never deletes and re-creates anything.
//!
//! A resync (on every start) empties the emitted view and appends `resync STARTED`
//! at the new generation, every desired entity, then `resync COMPLETED`. The plan is
//! cut into batches of at most `batch_max` events; `COMPLETED` goes out only once
//! every entity of the relist has been appended, which is what lets the engine sweep
//! entities of older generations safely.
//!
//! Order within a plan follows what the engine admits: services first (an endpoint
//! whose service is unknown is skipped by the fold), then config objects, then
//! endpoints; deletes after all upserts, endpoints before services.
//!
//! What it does NOT do: read files (see `scan`) or talk to the log (see `adapter`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use deltapilot_proto::event::Payload;
use deltapilot_proto::{self as pb, Event, SCHEMA_VERSION, resync_marker::Phase};

use super::parse::{IstioObject, ObjectId};
use super::status::{FileProblem, ProblemKind};

/// One entity's content as the adapter last saw it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Entity {
    /// A service (keyed `svc/<ns>/<host>`).
    Service(pb::Service),
    /// An endpoint (keyed by the adapter, `ep/file/...`).
    Endpoint(pb::Endpoint),
    /// A config object (keyed `cfg/<kind>/<ns>/<name>`).
    Config(pb::ConfigObject),
}

impl Entity {
    /// Plan order: services, configs, endpoints for upserts; reversed for deletes.
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

/// Key → entity, ordered by key.
pub(crate) type EntityMap = BTreeMap<String, Entity>;

/// Builds the desired view from every file's effective objects, given in path
/// order. Conflicts are decided by that order (then document order) so the result
/// never depends on which file changed last: the first definition of an object, and
/// the first service for a `(namespace, host)`, win; the rest are reported.
pub(crate) fn desired<'a>(
    files: impl IntoIterator<Item = (&'a Path, &'a [Arc<IstioObject>])>,
) -> (EntityMap, Vec<FileProblem>) {
    let mut view = EntityMap::new();
    let mut problems = Vec::new();
    let mut owners: BTreeMap<&ObjectId, (&Path, usize)> = BTreeMap::new();
    let mut service_owners: BTreeMap<String, (&Path, ObjectId)> = BTreeMap::new();
    for (path, objects) in files {
        for obj in objects {
            if let Some((first, doc)) = owners.get(&obj.id) {
                problems.push(conflict(
                    path,
                    obj.document,
                    format!(
                        "{} is also defined in {} (document {}); that one wins",
                        obj.id,
                        first.display(),
                        doc + 1
                    ),
                ));
                continue;
            }
            owners.insert(&obj.id, (path, obj.document));
            let key = pb::config_key(obj.id.kind, &obj.id.namespace, &obj.id.name);
            view.insert(key, Entity::Config(obj.config.clone()));
            for s in &obj.services {
                let key = pb::service_key(&s.namespace, &s.hostname);
                if let Some((first, by)) = service_owners.get(&key) {
                    problems.push(conflict(
                        path,
                        obj.document,
                        format!(
                            "{}: host {} in namespace {} is already defined by {by} in {}; that definition wins",
                            obj.id,
                            s.hostname,
                            s.namespace,
                            first.display()
                        ),
                    ));
                    continue;
                }
                service_owners.insert(key.clone(), (path, obj.id.clone()));
                view.insert(key, Entity::Service(s.clone()));
            }
            for (key, e) in &obj.endpoints {
                view.insert(key.clone(), Entity::Endpoint(e.clone()));
            }
        }
    }
    (view, problems)
}

fn conflict(path: &Path, document: usize, reason: String) -> FileProblem {
    FileProblem {
        path: PathBuf::from(path),
        line: None,
        column: None,
        document: Some(document),
        kind: ProblemKind::Conflict,
        reason,
        kept_last_good: false,
    }
}

/// Where the adapter stands in its resync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResyncPhase {
    /// `STARTED` has not been appended yet.
    NotStarted,
    /// `STARTED` is in the log; entities are going out.
    Started,
    /// `COMPLETED` is in the log; from now on only diffs.
    Completed,
}

/// What the adapter has appended, and how to get the log to the desired view.
#[derive(Debug)]
pub(crate) struct Emitted {
    source: String,
    generation: u64,
    phase: ResyncPhase,
    entities: EntityMap,
}

impl Emitted {
    /// A fresh emitted view that will resync at `generation`.
    pub(crate) fn new(source: String, generation: u64) -> Self {
        Self {
            source,
            generation,
            phase: ResyncPhase::NotStarted,
            entities: EntityMap::new(),
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
        self.entities.len()
    }

    /// The next batch to append (at most `batch_max` events, at least 2 counted for
    /// the markers), or an empty plan when the log already matches `desired`.
    pub(crate) fn plan(
        &self,
        desired: &EntityMap,
        batch_max: usize,
        now_micros: i64,
    ) -> Vec<Event> {
        let batch_max = batch_max.max(3);
        let mut upserts: Vec<(&String, &Entity)> = desired
            .iter()
            .filter(|(k, e)| self.entities.get(*k) != Some(*e))
            .collect();
        upserts.sort_by(|a, b| (a.1.rank(), a.0).cmp(&(b.1.rank(), b.0)));
        let mut deletes: Vec<(&String, &Entity)> = self
            .entities
            .iter()
            .filter(|(k, _)| !desired.contains_key(*k))
            .collect();
        deletes.sort_by(|a, b| (2 - a.1.rank(), a.0).cmp(&(2 - b.1.rank(), b.0)));

        let mut payloads = Vec::new();
        if self.phase == ResyncPhase::NotStarted {
            payloads.push(Payload::Resync(pb::ResyncMarker {
                phase: Phase::Started as i32,
            }));
        }
        let room = batch_max - payloads.len() - 1;
        let total = upserts.len() + deletes.len();
        payloads.extend(
            upserts
                .iter()
                .map(|(k, e)| e.upsert(k))
                .chain(deletes.iter().map(|(k, e)| e.delete(k)))
                .take(room),
        );
        // COMPLETED goes in an append of its own, after every entity of the relist is
        // acknowledged: on a partitioned (Kafka) log a marker in the same append
        // could be read before same-generation entities on other partitions, and
        // the sweep would briefly remove them.
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

    /// Records that `events` (a plan from [`Emitted::plan`]) are in the log.
    pub(crate) fn commit(&mut self, events: &[Event]) {
        for ev in events {
            let Some(payload) = &ev.payload else { continue };
            match payload {
                Payload::Resync(m) => match m.phase() {
                    Phase::Started => self.phase = ResyncPhase::Started,
                    Phase::Completed => self.phase = ResyncPhase::Completed,
                    Phase::Unspecified => {}
                },
                Payload::ServiceUpsert(u) => {
                    if let Some(s) = &u.service {
                        self.entities.insert(
                            pb::service_key(&s.namespace, &s.hostname),
                            Entity::Service(s.clone()),
                        );
                    }
                }
                Payload::EndpointUpsert(u) => {
                    if let Some(e) = &u.endpoint {
                        self.entities
                            .insert(u.key.clone(), Entity::Endpoint(e.clone()));
                    }
                }
                Payload::ConfigUpsert(u) => {
                    if let Some(c) = &u.config {
                        self.entities.insert(
                            pb::config_key(c.kind(), &c.namespace, &c.name),
                            Entity::Config(c.clone()),
                        );
                    }
                }
                Payload::ServiceDelete(d)
                | Payload::EndpointDelete(d)
                | Payload::ConfigDelete(d) => {
                    self.entities.remove(&d.key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
