//! From the desired view to events: what the adapter has appended (the emitted
//! view), and the plan that brings the log to the desired view.
//!
//! Entities are compared by value, so a delta or full fetch that changes nothing
//! appends nothing, and a full refetch never deletes and re-creates anything: only
//! entity-level differences go out.
//!
//! A resync (each start) begins with an empty emitted view: `resync STARTED` at the
//! new generation, every desired entity, then `resync COMPLETED` once every entity
//! is in, cut into batches of at most `batch_max` events. Order follows what the
//! engine admits: services before endpoints on upsert (an endpoint whose service is
//! unknown is skipped by the fold), endpoints before services on delete.
//!
//! What it does NOT do: fetch (see `client`), map instances (see `mapping`) or talk
//! to the log (see `adapter`).

use std::collections::BTreeMap;

use deltapilot_proto::event::Payload;
use deltapilot_proto::{self as pb, Event, SCHEMA_VERSION, resync_marker::Phase};

/// One entity as the adapter last saw it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Entity {
    /// A service (keyed `svc/<namespace>/<vip>`).
    Service(pb::Service),
    /// An endpoint (keyed `ep/<source>/<APP>/<instanceId>`).
    Endpoint(pb::Endpoint),
}

impl Entity {
    fn is_service(&self) -> bool {
        matches!(self, Entity::Service(_))
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
        }
    }

    fn delete(&self, key: &str) -> Payload {
        let d = pb::EntityDelete {
            key: key.to_owned(),
        };
        match self {
            Entity::Service(_) => Payload::ServiceDelete(d),
            Entity::Endpoint(_) => Payload::EndpointDelete(d),
        }
    }
}

/// Key → entity, ordered by key.
pub(crate) type EntityMap = BTreeMap<String, Entity>;

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

    /// The next batch to append (at most `batch_max` events, at least 3), or an
    /// empty plan when the log already matches `desired`.
    pub(crate) fn plan(
        &self,
        desired: &EntityMap,
        batch_max: usize,
        now_micros: i64,
    ) -> Vec<Event> {
        let batch_max = batch_max.max(3);
        let changed = |(k, e): &(&String, &Entity)| self.entities.get(*k) != Some(*e);
        let upserts = desired
            .iter()
            .filter(|(_, e)| e.is_service())
            .chain(desired.iter().filter(|(_, e)| !e.is_service()))
            .filter(changed);
        let gone = |(k, _): &(&String, &Entity)| !desired.contains_key(*k);
        let deletes = self
            .entities
            .iter()
            .filter(|(_, e)| !e.is_service())
            .chain(self.entities.iter().filter(|(_, e)| e.is_service()))
            .filter(gone);

        let mut payloads = Vec::new();
        if self.phase == ResyncPhase::NotStarted {
            payloads.push(Payload::Resync(pb::ResyncMarker {
                phase: Phase::Started as i32,
            }));
        }
        // Room for the entities, keeping one slot for COMPLETED; one more than fits
        // is taken to learn whether everything did.
        let room = batch_max - payloads.len() - 1;
        let mut entities: Vec<Payload> = upserts
            .map(|(k, e)| e.upsert(k))
            .chain(deletes.map(|(k, e)| e.delete(k)))
            .take(room + 1)
            .collect();
        entities.truncate(room);
        // COMPLETED goes in an append of its own, once every entity of the relist
        // is acknowledged: on a partitioned (Kafka) log a marker in the same append
        // could be read before same-generation entities on other partitions.
        let nothing_left = entities.is_empty();
        payloads.extend(entities);
        if self.phase != ResyncPhase::Completed && nothing_left {
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
                Payload::ServiceDelete(d) | Payload::EndpointDelete(d) => {
                    self.entities.remove(&d.key);
                }
                Payload::ConfigUpsert(_) | Payload::ConfigDelete(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(host: &str) -> (String, Entity) {
        let s = pb::Service {
            hostname: host.into(),
            namespace: "eureka".into(),
            ..Default::default()
        };
        (pb::service_key("eureka", host), Entity::Service(s))
    }

    fn ep(key: &str, addr: &str) -> (String, Entity) {
        let e = pb::Endpoint {
            address: addr.into(),
            ..Default::default()
        };
        (key.into(), Entity::Endpoint(e))
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

    #[test]
    fn resync_then_diffs_in_admission_order_and_in_batches() {
        let mut em = Emitted::new("eureka".into(), 7);
        let desired: EntityMap = [
            ep("ep/eureka/A/1", "10.0.0.1"),
            svc("a"),
            ep("ep/eureka/A/2", "10.0.0.2"),
        ]
        .into_iter()
        .collect();
        let first = em.plan(&desired, 3, 1);
        assert_eq!(
            names(&first),
            ["resync:STARTED", "service_upsert:svc/eureka/a"]
        );
        assert!(
            first
                .iter()
                .all(|e| e.generation == 7 && e.source == "eureka")
        );
        em.commit(&first);
        let second = em.plan(&desired, 3, 1);
        assert_eq!(
            names(&second),
            [
                "endpoint_upsert:ep/eureka/A/1",
                "endpoint_upsert:ep/eureka/A/2",
            ]
        );
        em.commit(&second);
        let third = em.plan(&desired, 3, 1);
        assert_eq!(names(&third), ["resync:COMPLETED"]);
        em.commit(&third);
        assert_eq!(em.phase(), ResyncPhase::Completed);
        assert!(
            em.plan(&desired, 3, 1).is_empty(),
            "nothing changed, nothing to append"
        );

        let mut next = desired.clone();
        next.remove("ep/eureka/A/1");
        next.remove("ep/eureka/A/2");
        next.remove("svc/eureka/a");
        let (k, v) = ep("ep/eureka/B/1", "10.0.0.3");
        next.insert(k, v);
        let (k, v) = svc("b");
        next.insert(k, v);
        let plan = em.plan(&next, 100, 1);
        assert_eq!(
            names(&plan),
            [
                "service_upsert:svc/eureka/b",
                "endpoint_upsert:ep/eureka/B/1",
                "endpoint_delete:ep/eureka/A/1",
                "endpoint_delete:ep/eureka/A/2",
                "service_delete:svc/eureka/a",
            ]
        );
        em.commit(&plan);
        assert_eq!(em.len(), 2);
    }
}
