//! Which records compaction keeps: a pure decision over the records of the range
//! being compacted, in log order. No I/O.
//!
//! The rule has to keep one promise: folding the compacted range from the start
//! of the log gives exactly the state (and so the hash) that folding the full
//! range gives, at the range's end and at every position after it. The fold's
//! rules (`deltapilot-model`, `fold/mod.rs`) decide what is safe to drop:
//!
//! - **Latest effective write per entity.** An entity is a service definition
//!   (`svc/<ns>/<host>` per source: services are stored per key and source), an
//!   endpoint (`ep/…`) or a config object (`cfg/…`). Its state at the range's end
//!   is that of its last *effective* write (upsert or delete) followed by any sweep;
//!   earlier writes can go. A write is effective when the fold would apply it.
//! - **Stale writes are dropped.** The fold skips an event whose generation is below
//!   its source's completed resync ([`StaleGeneration`]); such an event changes
//!   nothing, so it goes (and, being a no-op, never counts as an entity's last
//!   write: keeping the newest *record* instead would let a stale delete hide a
//!   live upsert). The plan tracks each source's completed generation as the fold
//!   does.
//! - **Resync markers**: per source the latest effective `STARTED` and the latest
//!   effective `COMPLETED` stay. Sweeps only remove, generations only grow, so the
//!   last `COMPLETED` at `G` removes everything an earlier one would have removed
//!   among what is left (an entity whose last write precedes it with a generation
//!   below `G`), and the fence it sets is the same. A resync that deleted entities
//!   still deletes them after compaction (`tests/file_compact.rs` checks it with the
//!   real fold).
//! - **Tombstones** (the last write of an entity being a delete) are kept for the
//!   retention window, by the event's `observed_at`: a reader that resumes inside
//!   the compacted range (a checkpoint older than it) needs them to delete what it
//!   holds. Past the window they go; an entity absent at the end stays absent.
//!   A tombstone without `observed_at` has no age and is kept.
//! - **Kept as they are**: records that do not decode, carry a newer schema, have
//!   no payload (an entity kind newer than this build), or that the caller's
//!   validation says the fold would refuse. A newer build may read them; they
//!   never count as anyone's last write.
//! - **Key conflicts.** Endpoints and config objects have one owner (the first
//!   source to write the key); writes by another source are skipped by the fold.
//!   Ownership depends on the full history of the key and on sweeps, so a key
//!   written by more than one source in the range keeps every effective record, and
//!   then every effective resync marker of every source stays too.
//! - **Multi-copy resync markers** (`copies > 1`, from a Kafka topic copied into a
//!   file log) follow counting rules this plan does not model: compaction refuses
//!   such a range rather than guess.
//!
//! [`StaleGeneration`]: https://docs.rs/deltapilot-model (SkipReason::StaleGeneration)
//!
//! What it does NOT do: read or write files (`compact.rs`), or validate payloads
//! (the caller passes the fold's own validation as [`Admit`]).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use deltapilot_proto::Event;
use deltapilot_proto::event::Payload;
use deltapilot_proto::resync_marker::Phase;

use crate::{RecordPos, decode_event};

/// Whether the fold would accept an event on its own merits (payload validation
/// that does not depend on state: ports, addresses, hostnames, rule syntax). The
/// log cannot know; the caller passes the model's validation. Events it refuses
/// are kept and never supersede anything.
pub type Admit = dyn Fn(&Event) -> bool + Send + Sync;

/// What compaction keeps and drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactPolicy {
    /// Tombstones younger than this (by `observed_at`) are kept.
    pub tombstone_retention: Duration,
    /// "Now", as Unix time in microseconds, for the tombstones' age.
    pub now_unix_micros: i64,
}

/// Which entity a record writes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Slot {
    /// A service definition: key and source.
    Service(String, String),
    /// An endpoint or config object (one owner): class and key.
    Owned(u8, String),
    /// A source's latest `STARTED` (false) or `COMPLETED` (true) marker.
    Marker(String, bool),
}

/// What one record is, for the decision.
#[derive(Debug)]
enum Kind {
    /// Keep as it is.
    Opaque,
    /// A no-op for the fold: drop.
    Stale,
    /// An effective write of a slot; `delete` for a tombstone, with its
    /// `observed_at`.
    Write {
        slot: usize,
        /// The source, interned.
        source: u32,
        delete: bool,
        observed_at: i64,
    },
}

/// Decides which records of the range being compacted stay: fed every record of
/// the range in log order ([`Planner::push`]), then asked once
/// ([`Planner::finish`]). Holds a small entry per record, not the records.
pub(crate) struct Planner<'a> {
    admit: &'a Admit,
    slots: HashMap<Slot, usize>,
    completed: HashMap<String, u64>,
    sources: HashMap<String, u32>,
    kinds: Vec<Kind>,
}

impl<'a> Planner<'a> {
    /// An empty plan using the fold's validation `admit`.
    pub(crate) fn new(admit: &'a Admit) -> Self {
        Self {
            admit,
            slots: HashMap::new(),
            completed: HashMap::new(),
            sources: HashMap::new(),
            kinds: Vec::new(),
        }
    }

    /// Takes the next record of the range; `Err` says why the range cannot be
    /// compacted.
    pub(crate) fn push(&mut self, pos: RecordPos, bytes: &[u8]) -> Result<(), String> {
        let kind = self.classify(pos, bytes)?;
        self.kinds.push(kind);
        Ok(())
    }

    fn classify(&mut self, pos: RecordPos, bytes: &[u8]) -> Result<Kind, String> {
        let (slots, completed, admit) = (&mut self.slots, &mut self.completed, self.admit);
        let Ok(ev) = decode_event(bytes, pos) else {
            return Ok(Kind::Opaque);
        };
        let Some(payload) = &ev.payload else {
            return Ok(Kind::Opaque);
        };
        if ev.generation < completed.get(&ev.source).copied().unwrap_or(0) {
            return Ok(Kind::Stale);
        }
        if let Payload::Resync(m) = payload
            && m.copies > 1
        {
            return Err(format!(
                "the resync marker at {pos} was written in {} copies (a Kafka topic copied \
                 into this log?); compaction of such markers is not supported",
                m.copies
            ));
        }
        if !admit(&ev) {
            return Ok(Kind::Opaque);
        }
        let (slot, delete) = match payload {
            Payload::ServiceUpsert(u) => {
                let Some(s) = &u.service else {
                    return Ok(Kind::Opaque);
                };
                (
                    Slot::Service(
                        deltapilot_proto::service_key(&s.namespace, &s.hostname),
                        ev.source.clone(),
                    ),
                    false,
                )
            }
            Payload::ServiceDelete(d) => (Slot::Service(d.key.clone(), ev.source.clone()), true),
            Payload::EndpointUpsert(u) => (Slot::Owned(0, u.key.clone()), false),
            Payload::EndpointDelete(d) => (Slot::Owned(0, d.key.clone()), true),
            Payload::ConfigUpsert(_) | Payload::ConfigDelete(_) => {
                let Some(key) = ev.key() else {
                    return Ok(Kind::Opaque);
                };
                (
                    Slot::Owned(1, key),
                    matches!(payload, Payload::ConfigDelete(_)),
                )
            }
            Payload::Resync(m) => match m.phase() {
                Phase::Started => (Slot::Marker(ev.source.clone(), false), false),
                Phase::Completed => {
                    completed.insert(ev.source.clone(), ev.generation);
                    (Slot::Marker(ev.source.clone(), true), false)
                }
                Phase::Unspecified => {
                    return Ok(Kind::Opaque);
                }
            },
        };
        let n = slots.len();
        let slot = *slots.entry(slot).or_insert(n);
        let n = u32::try_from(self.sources.len()).unwrap_or(u32::MAX);
        let source = *self.sources.entry(ev.source).or_insert(n);
        Ok(Kind::Write {
            slot,
            source,
            delete,
            observed_at: ev.observed_at_unix_micros,
        })
    }

    /// One flag per record pushed: whether compaction keeps it.
    pub(crate) fn finish(self, policy: CompactPolicy) -> Vec<bool> {
        let Planner { slots, kinds, .. } = self;

        // Owned keys written by more than one source keep their whole history.
        let mut writers: HashMap<usize, HashSet<u32>> = HashMap::new();
        let mut is_marker = vec![false; slots.len()];
        let mut is_owned = vec![false; slots.len()];
        for (slot, &i) in &slots {
            is_marker[i] = matches!(slot, Slot::Marker(..));
            is_owned[i] = matches!(slot, Slot::Owned(..));
        }
        let mut last = vec![usize::MAX; slots.len()];
        for (r, k) in kinds.iter().enumerate() {
            if let Kind::Write { slot, source, .. } = k {
                last[*slot] = r;
                if is_owned[*slot] {
                    writers.entry(*slot).or_default().insert(*source);
                }
            }
        }
        let conflicted: HashSet<usize> = writers
            .into_iter()
            .filter(|(_, w)| w.len() > 1)
            .map(|(s, _)| s)
            .collect();
        let all_markers = !conflicted.is_empty();
        let retention = i64::try_from(policy.tombstone_retention.as_micros()).unwrap_or(i64::MAX);

        kinds
            .iter()
            .enumerate()
            .map(|(r, k)| match k {
                Kind::Opaque => true,
                Kind::Stale => false,
                Kind::Write {
                    slot,
                    delete,
                    observed_at,
                    ..
                } => {
                    if conflicted.contains(slot) || (all_markers && is_marker[*slot]) {
                        return true;
                    }
                    if last[*slot] != r {
                        return false;
                    }
                    let expired = *delete
                        && *observed_at > 0
                        && policy.now_unix_micros.saturating_sub(*observed_at) > retention;
                    !expired
                }
            })
            .collect()
    }
}
