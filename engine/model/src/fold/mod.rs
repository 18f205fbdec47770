//! The fold: a pure function from (state, batch of events) to (next state, what it
//! touched, what it skipped). No I/O, no clocks, no randomness: folding the same
//! events from the same state always yields the same state and hash.
//!
//! `deltapilot_engine::runner::Engine` wraps it: it decodes records, folds, regenerates xDS resources
//! and publishes snapshots.
//!
//! ## Rules
//!
//! - **Events apply in batch order**, one at a time; an event that cannot be applied
//!   is skipped as a whole ([`Skipped`], with its log position and a
//!   [`SkipReason`]) and leaves the state exactly as it was, so it never poisons
//!   later events or later folds. Nothing here panics on input.
//! - **Identical content is not a change.** An upsert whose converted model value
//!   equals the stored one touches nothing (only its generation stamp moves), so it
//!   can never cause a push.
//! - **Services** are stored per `(key, source)`: several sources may define the
//!   same key or hostname; the merged view picks one by the rule in `state`.
//!   Deleting a service removes only the deleting source's definition.
//! - **Endpoints and config objects have one owner.** The first source to write a
//!   key owns it until the key is deleted or swept. A write or delete of that key by
//!   another source is skipped as [`SkipReason::KeyConflict`] (keys are meant to be
//!   source-scoped, e.g. `ep/k8s-a/ns/pod`; a clash is a misconfiguration that must
//!   not let two adapters fight over one entity).
//! - **Endpoints of unknown services are held.** An endpoint upsert none of whose
//!   services has a merged service at that point is reported like a skip, as
//!   [`SkipReason::UnknownService`] with its position (counted and logged), but it
//!   is **stored**: it contributes nothing to xDS until a service with one of its
//!   hostnames exists, and then it is served, as Istio does. Dropping it instead
//!   lost endpoints for good on a multi-partition Kafka topic, where a reader can
//!   fold an endpoint before its service (they are keyed differently, so they sit on
//!   different partitions, and there is no order across partitions): with 3
//!   partitions, 9 of 20 services came up with missing endpoints. Held endpoints are
//!   ordinary entities of their source: deletes and resync sweeps remove them, so
//!   they are bounded by what the registry holds. An endpoint that names several
//!   services is indexed under all of them. An endpoint already stored is likewise
//!   kept when its service is later deleted.
//! - **Two texts never share a key.** The large maps order entities by a 128-bit
//!   hash of their key or hostname (`keys::HKey`). An endpoint key, or a
//!   hostname, whose hash equals a stored one of other text is skipped as
//!   [`SkipReason::HashCollision`], by value comparison, so that the two are never
//!   merged (nothing reaches that by chance; a registry could craft it).
//! - **Deleting** a key that is not stored is a no-op, not an error: compacted logs
//!   and sweeps make such tombstones normal.
//!
//! ## Resync
//!
//! An adapter brackets a full relist of its registry with markers at a new
//! generation `G`: `STARTED` (recorded, nothing else), then every entity re-upserted
//! with `generation = G`, then `COMPLETED`. On `COMPLETED` at `G`, every entity of
//! that source whose last write has a generation below `G` is removed (swept):
//! entities that vanished while the adapter was down never leak. Re-upserting an
//! unchanged entity at the new generation only restamps it, so a resync of an
//! unchanged registry pushes nothing.
//!
//! After a `COMPLETED` at `G`, any event of that source with a generation below `G`
//! (an entity write, a delete or a marker) is **stale** and skipped
//! ([`SkipReason::StaleGeneration`]): it was produced before the relist that
//! superseded it, and applying it could resurrect a swept entity or delete a
//! re-created one.
//!
//! ### Multi-partition logs (Kafka)
//!
//! The embedded log has one partition, so the fold sees a resync exactly in the
//! order the adapter wrote it. A Kafka topic is keyed by entity key: the entity
//! writes of one relist are spread over all partitions, and a reader has no total
//! order across partitions. A single `COMPLETED` marker on one partition could be
//! folded before a gen-`G` upsert from another partition, and sweeping then would
//! remove an unchanged, live entity still stamped `G-1` (a transient removal pushed
//! to every proxy after an adapter restart). Three rules together make every entity
//! write of a relist reach the fold before its sweep:
//!
//! 1. the writer appends `COMPLETED` only after every entity append of the relist
//!    is acknowledged (`acks=all`); every adapter does this (the marker goes in an
//!    append of its own);
//! 2. the Kafka backend writes that marker once to **every** partition, by explicit
//!    partition, after the rest of its batch is acknowledged, with
//!    `ResyncMarker.copies` set to the partition count. Per-partition order puts
//!    each copy after every event of the relist on that partition;
//! 3. the fold, on a `COMPLETED` at `G` with `copies = N > 1`, records the record's
//!    partition in the source's [`PendingResync`](crate::state::PendingResync) and
//!    sweeps, and raises the stale fence (`completed`), only once `N` distinct
//!    partitions have delivered a copy of `G`. A repeated partition counts once; a
//!    copy of a generation older than the pending one is ignored (the newer sweep
//!    covers it: it removes everything below the newer generation); a pending
//!    generation is dropped once a generation at or above it completes; a copy of
//!    the generation already completed (a retried append writes the copies again)
//!    changes nothing. `copies` 0 or 1 (the embedded log, events written before
//!    the field existed) sweeps at that one marker, exactly as before.
//!
//! The pending set is state like any other: it is in the content hash and in
//! checkpoints, so a replay from a checkpoint continues counting where it was. A
//! relist whose copies never all arrive (the writer died while writing them) leaves
//! its generation pending, so entities that vanished are swept late (at the next
//! relist that completes), never early. `STARTED` is written once, keyed: nothing
//! depends on its order against entity events.
//!
//! Replays are unaffected: a log folds to the same state in the order the follower
//! delivers it (partition-major for `read`).
//!
//! What it does NOT do: read the log, generate xDS, publish snapshots, log or count
//! (the runner does all that with what [`fold`] returns).

#[cfg(test)]
mod collision_tests;
mod config;
mod event;
#[cfg(test)]
mod resync_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod touch_tests;

use std::net::IpAddr;

use deltapilot_proto::Event;
use deltapilot_proto::event::Payload;

use crate::model::{source_digest, warm_source};
use crate::state::{HKey, ModelState, TouchLog, Touched};
use deltapilot_types::RecordPos;

use event::{Applied, Cx, apply_event, held_event, warm};

/// Why an event (or record) was skipped; one metric label each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// The record's bytes are not an event (runner only).
    Decode,
    /// The record was written by a newer schema than this build reads (runner only).
    SchemaTooNew,
    /// The event has no payload: empty, or an entity kind newer than this build.
    EmptyPayload,
    /// The payload fails validation: bad port, address, hostname, empty key, …
    Invalid,
    /// An endpoint none of whose services exists (yet). Reported, but unlike the
    /// other reasons the endpoint is stored, and served once a service appears
    /// (see the module doc).
    UnknownService,
    /// The key is owned by another source.
    KeyConflict,
    /// The event's generation is below its source's completed resync.
    StaleGeneration,
    /// The event's endpoint key or hostname has the same 128-bit hash as a
    /// stored one of other text.
    HashCollision,
}

impl SkipReason {
    /// Every reason, in metric-label order.
    pub const ALL: [SkipReason; 8] = [
        SkipReason::Decode,
        SkipReason::SchemaTooNew,
        SkipReason::EmptyPayload,
        SkipReason::Invalid,
        SkipReason::UnknownService,
        SkipReason::KeyConflict,
        SkipReason::StaleGeneration,
        SkipReason::HashCollision,
    ];

    /// Snake-case name, for metric labels and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Decode => "decode",
            SkipReason::SchemaTooNew => "schema_too_new",
            SkipReason::EmptyPayload => "empty_payload",
            SkipReason::Invalid => "invalid",
            SkipReason::UnknownService => "unknown_service",
            SkipReason::KeyConflict => "key_conflict",
            SkipReason::StaleGeneration => "stale_generation",
            SkipReason::HashCollision => "hash_collision",
        }
    }

    /// Index into per-reason arrays (`[T; SkipReason::ALL.len()]`).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// An event (or record) that was not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Where it sits in the log.
    pub pos: RecordPos,
    /// Its entity key, when it has one.
    pub key: Option<String>,
    /// Why it was skipped (the metric label).
    pub reason: SkipReason,
    /// What exactly was wrong, for the log line.
    pub detail: String,
}

impl Skipped {
    /// A record whose bytes are not an event this build reads (`reason` is
    /// [`SkipReason::Decode`] or [`SkipReason::SchemaTooNew`], `detail` the
    /// decoder's message). The engine and a replay both skip it with this
    /// report, so that both fold the same events.
    pub fn undecodable(pos: RecordPos, reason: SkipReason, detail: String) -> Skipped {
        Skipped {
            pos,
            key: None,
            reason,
            detail,
        }
    }
}

/// What one fold step produced.
#[derive(Debug, Clone, Default)]
pub struct FoldOutput {
    /// The next state (shares structure with the input state).
    pub state: ModelState,
    /// What changed, for incremental xDS generation.
    pub touched: Touched,
    /// Events that were skipped, in batch order; with them, endpoints held for a
    /// service that does not exist yet ([`SkipReason::UnknownService`], stored).
    pub skipped: Vec<Skipped>,
    /// Number of events applied and not reported in `skipped`, including no-op
    /// rewrites.
    pub applied: usize,
}

/// Folds a batch of decoded events into `state`. Pure.
pub fn fold(state: &ModelState, batch: &[(RecordPos, Event)]) -> FoldOutput {
    fold_iter(state, batch.iter().map(|(p, e)| (*p, e)))
}

/// [`fold`] with each event's [`Prepared`] part computed ahead (`prepared[i]`
/// is `Prepared::of(&batch[i].1)`). Why: a replay decodes on a second thread,
/// and what can be derived from an event alone is cheapest computed there,
/// while its strings are still in that core's cache, rather than on the folding
/// thread, where reading them back is a cache miss each. A `prepared` of
/// another length is ignored (everything is computed here, with the same
/// result).
pub fn fold_prepared(
    state: &ModelState,
    batch: &[(RecordPos, Event)],
    prepared: &[Prepared],
) -> FoldOutput {
    fold_from(state.clone(), Some(state), with_prepared(batch, prepared))
}

/// `batch` with each event's [`Prepared`]: from `prepared` when it matches the
/// batch, else computed here, in log order (see [`fold_iter`]).
fn with_prepared<'a>(
    batch: &'a [(RecordPos, Event)],
    prepared: &'a [Prepared],
) -> impl Iterator<Item = (RecordPos, &'a Event, Prepared)> + 'a {
    let given = prepared.len() == batch.len();
    batch.iter().enumerate().map(move |(i, (p, e))| {
        let prep = if given { prepared[i] } else { Prepared::of(e) };
        (*p, e, prep)
    })
}

/// [`fold`] over any sequence of positioned events (avoids collecting them).
///
/// Consecutive endpoint upserts and deletes are applied in the order of their
/// keys' hashes (events on one key keep their log order). Such events commute:
/// each reads and writes only its own key's slot and indexes that are sets, and
/// reads services and resync generations that only other kinds of event change,
/// so the resulting state, hash and touched set are exactly those of log order.
/// Why: the raw endpoint map is ordered by that hash, so a sorted run walks it
/// front to back and each tree node is fetched from memory once per run instead
/// of once per event, which at 100k endpoints was most of the fold's cost.
/// Skipped events are still reported in log order.
///
/// What can be derived from an event alone ([`Prepared`]) is computed first, in
/// log order, before a run is reordered. Why: the shape digest reads a dozen
/// strings of the payload, which lie in memory in the order the events were
/// decoded; read in key-hash order, as the run is applied, each was a cache
/// miss. It is computed for a whole run at once, a few events at a time with
/// their payloads' map nodes read first (see `Folding::complete`).
pub fn fold_iter<'a>(
    state: &ModelState,
    events: impl IntoIterator<Item = (RecordPos, &'a Event)>,
) -> FoldOutput {
    let events = events.into_iter().map(|(p, e)| (p, e, Prepared::keyed(e)));
    fold_from(state.clone(), Some(state), events)
}

/// [`fold_prepared`] into a state the caller gives up rather than lends.
///
/// Why: folding into a borrowed state copies every tree node a batch touches
/// (the borrowed state still holds them), and dropping the superseded state frees
/// them again, which in a 1M-event replay was path copies, allocator traffic and
/// page faults on the folding thread plus a whole second thread freeing. A state
/// nobody else holds is changed in place. The resulting state is exactly
/// [`fold_prepared`]'s; `touched.services` may also name a hostname whose merged
/// service changed and changed back within the batch (a superset is allowed: see
/// [`Touched`]), since the state before the batch is no longer there to compare.
pub fn fold_prepared_owned(
    state: ModelState,
    batch: &[(RecordPos, Event)],
    prepared: &[Prepared],
) -> FoldOutput {
    fold_from(state, None, with_prepared(batch, prepared))
}

/// Folds `events` into `start`; `before`, when given, is the state `start` was
/// cloned from, used to leave out services that changed back within the batch.
fn fold_from<'a>(
    start: ModelState,
    before: Option<&ModelState>,
    events: impl IntoIterator<Item = (RecordPos, &'a Event, Prepared)>,
) -> FoldOutput {
    let mut f = Folding {
        out: FoldOutput {
            state: start,
            ..Default::default()
        },
        cx: Cx::default(),
        touched: TouchLog::default(),
        skipped: Vec::new(),
        later: Vec::new(),
    };
    let mut run: Vec<Pending<'a>> = Vec::new();
    for (index, (pos, ev, prep)) in events.into_iter().enumerate() {
        let pending = Pending {
            prep,
            index,
            pos,
            ev,
        };
        if prep.hk.is_some() {
            run.push(pending);
        } else {
            f.apply_run(&mut run);
            let later = f.apply(&pending);
            debug_assert!(later.is_none(), "only endpoint events leave admissions");
        }
    }
    f.apply_run(&mut run);
    let Folding {
        mut out,
        touched,
        mut skipped,
        ..
    } = f;
    skipped.sort_by_key(|(index, _)| *index);
    out.skipped = skipped.into_iter().map(|(_, s)| s).collect();
    out.touched = touched.finish(&out.state);
    // A hostname whose merged service changed back within the batch is not touched.
    if let Some(state) = before {
        out.touched
            .services
            .retain(|h| state.get_service(h) != out.state.get_service(h));
    }
    out
}

/// What the fold derives from an event alone, whatever the state: computed by
/// [`Prepared::of`] ahead of the fold, on another thread (see [`fold_prepared`])
/// or in log order before a run is reordered (see [`fold_iter`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Prepared {
    /// The hashed key of an endpoint upsert or delete (the events a run may
    /// reorder); `None` for every other event.
    hk: Option<HKey>,
    /// The [`source_digest`] of an endpoint upsert's payload, when computed.
    shape_digest: Option<u128>,
    /// An endpoint upsert's address, when computed and valid (an invalid one is
    /// parsed again by the fold, which reports it).
    address: Option<IpAddr>,
    /// Whether the parts read from the payload (`shape_digest`, `address`)
    /// were computed, or only the key.
    full: bool,
}

impl Prepared {
    /// Everything the fold can compute from `ev` without the state.
    pub fn of(ev: &Event) -> Self {
        Prepared::keyed(ev).completed(ev)
    }

    /// Only the key of `ev` (see [`Folding::complete`] for the rest).
    fn keyed(ev: &Event) -> Self {
        Prepared {
            hk: endpoint_hkey(ev),
            ..Prepared::default()
        }
    }

    /// This with the parts read from the payload of `ev` (whose key it has).
    fn completed(self, ev: &Event) -> Self {
        let endpoint = match &ev.payload {
            Some(Payload::EndpointUpsert(u)) => u.endpoint.as_ref(),
            _ => None,
        };
        Prepared {
            shape_digest: endpoint.map(source_digest),
            address: endpoint.and_then(|e| e.address.parse().ok()),
            full: true,
            ..self
        }
    }
}

/// An event waiting to be applied, with its place in the batch.
struct Pending<'a> {
    /// What was derived from the event alone; `prep.hk` is set exactly for the
    /// events a run may reorder.
    prep: Prepared,
    index: usize,
    pos: RecordPos,
    ev: &'a Event,
}

/// A sorted run is applied this many events at a time, each group's memory
/// read first, all of it at once (see [`event::warm`]).
const WARM_AHEAD: usize = 16;

/// Runs shorter than this are applied in log order: sorting them buys nothing.
const SORTED_RUN_MIN: usize = 64;

/// The hashed key of an endpoint upsert or delete, the events a run may reorder.
fn endpoint_hkey(ev: &Event) -> Option<HKey> {
    match &ev.payload {
        Some(Payload::EndpointUpsert(u)) => Some(HKey::of(&u.key)),
        Some(Payload::EndpointDelete(d)) => Some(HKey::of(&d.key)),
        _ => None,
    }
}

/// What a fold accumulates while it applies a batch.
struct Folding {
    out: FoldOutput,
    cx: Cx,
    touched: TouchLog,
    /// Skipped events with their index in the batch (runs apply out of order).
    skipped: Vec<(usize, Skipped)>,
    /// What the current run's events left to check: hostname key, the
    /// event's place in the run, whether to touch the hostname (see
    /// [`Folding::admit_later`]).
    later: Vec<(HKey, u32, bool)>,
}

impl Folding {
    /// Applies a run of endpoint events in key-hash order (log order within a
    /// key), checks the admissions they left (see [`Applied::Later`]), and
    /// empties it.
    fn apply_run(&mut self, run: &mut Vec<Pending<'_>>) {
        Folding::complete(run);
        if run.len() >= SORTED_RUN_MIN {
            // Sort small (top 64 bits of the hash, place in the run) pairs rather
            // than the events themselves: moving 48-byte entries dominated the
            // sort. Equal prefixes keep run order, so one key's events stay in log
            // order (keys that merely share a prefix commute anyway).
            let mut order: Vec<(u64, u32)> = run
                .iter()
                .enumerate()
                .map(|(i, p)| (p.prep.hk.map_or(0, HKey::prefix), i as u32))
                .collect();
            order.sort_unstable();
            for chunk in order.chunks(WARM_AHEAD) {
                let st = &self.out.state;
                let warmed = chunk.iter().fold(0u64, |w, &(_, i)| {
                    let p = &run[i as usize];
                    w ^ p.prep.hk.map_or(0, |hk| warm(st, p.ev, &hk))
                });
                std::hint::black_box(warmed);
                for &(_, i) in chunk {
                    self.apply_in_run(run, i);
                }
            }
        } else {
            for i in 0..run.len() {
                self.apply_in_run(run, i as u32);
            }
        }
        self.admit_later(run);
        run.clear();
    }

    /// Completes the [`Prepared`] part of each event of `run` given only its
    /// key, in log order, [`WARM_AHEAD`] events at a time, the map nodes of
    /// each group's payloads read first, all at once (see [`warm_source`]).
    fn complete(run: &mut [Pending<'_>]) {
        for group in run.chunks_mut(WARM_AHEAD) {
            if group.iter().all(|p| p.prep.full) {
                continue;
            }
            let warmed = group.iter().fold(0u64, |w, p| match &p.ev.payload {
                Some(Payload::EndpointUpsert(u)) => w ^ u.endpoint.as_ref().map_or(0, warm_source),
                _ => w,
            });
            std::hint::black_box(warmed);
            for p in group.iter_mut().filter(|p| !p.prep.full) {
                p.prep = p.prep.completed(p.ev);
            }
        }
    }

    /// Applies the event at `i` in `run`, noting what it leaves to check.
    fn apply_in_run(&mut self, run: &[Pending<'_>], i: u32) {
        if let Some((host, touch)) = self.apply(&run[i as usize]) {
            self.later.push((host, i, touch));
        }
    }

    /// Checks the admissions the events of `run` left and touches their
    /// hostnames by key ([`Touched::endpoint_keys`]; see [`Applied::Later`]):
    /// in hostname order, so that the checks walk the claims map front to back
    /// (see [`ServiceHosts`]). A run changes no service, so the answers are
    /// those at each event. Each endpoint held for a hostname without a
    /// service is reported as applying it would have.
    fn admit_later(&mut self, run: &[Pending<'_>]) {
        let Folding {
            out,
            touched,
            skipped,
            later,
            ..
        } = self;
        later.sort_unstable();
        let mut hosts = ServiceHosts::new(&out.state, later.len());
        for &(host, i, touch) in later.iter() {
            if touch {
                touched.endpoints_by_key(host);
            }
            if !hosts.served(&host) {
                let p = &run[i as usize];
                let (reason, detail) = held_event(p.ev);
                out.applied -= 1;
                skipped.push((p.index, skipped_at(p, reason, detail)));
            }
        }
        later.clear();
    }

    /// Applies one event, counting it or recording why it was skipped. Returns
    /// what it leaves to check (see [`Applied::Later`]), counted as applied
    /// meanwhile.
    fn apply(&mut self, p: &Pending<'_>) -> Option<(HKey, bool)> {
        self.cx.partition = p.pos.partition;
        if p.prep.hk.is_none() {
            // Only endpoint events leave the merged services as they are.
            self.cx.forget_admissions();
        }
        let applied = apply_event(
            &mut self.out.state,
            p.ev,
            &p.prep,
            &mut self.cx,
            &mut self.touched,
        );
        match applied {
            Ok(later) => {
                self.out.applied += 1;
                match later {
                    Applied::Done => None,
                    Applied::Later { host, touch } => Some((host, touch)),
                }
            }
            Err((reason, detail)) => {
                self.skipped.push((p.index, skipped_at(p, reason, detail)));
                None
            }
        }
    }
}

/// Answers which hostnames have a service, for keys asked in increasing
/// order: by walking the sorted keys of every hostname with a service
/// alongside when there are many, otherwise one lookup each.
///
/// Why walk: each lookup of a 4,096-event run at 100k endpoints costs a cache
/// miss or two per tree level; walking the keys in order reads them once each,
/// front to back (as one array, see `state::host_keys`). Why not always: a walk
/// reads all of them (10k), and the array may need building, which a short run
/// would pay for a handful of hostnames.
struct ServiceHosts<'a> {
    st: &'a ModelState,
    /// The keys not yet walked past, when walking.
    walk: Option<&'a [HKey]>,
}

/// A run walks the keys when it asks for at least one hostname per this many
/// services.
const WALK_PER_PROBE: usize = 8;

impl<'a> ServiceHosts<'a> {
    /// A finder for `probes` keys asked of `st`.
    fn new(st: &'a ModelState, probes: usize) -> Self {
        let walk =
            (probes * WALK_PER_PROBE >= st.service_host_count()).then(|| st.service_host_keys());
        ServiceHosts { st, walk }
    }

    /// Whether a service defines the hostname of key `host`; `host` is at
    /// least the key asked before.
    fn served(&mut self, host: &HKey) -> bool {
        let Some(keys) = &mut self.walk else {
            return self.st.has_service_at(host);
        };
        while let [k, rest @ ..] = keys
            && k < host
        {
            *keys = rest;
        }
        keys.first() == Some(host)
    }
}

/// The report of `p`, skipped (or, for [`SkipReason::UnknownService`], held).
fn skipped_at(p: &Pending<'_>, reason: SkipReason, detail: String) -> Skipped {
    Skipped {
        pos: p.pos,
        key: p.ev.key(),
        reason,
        detail,
    }
}

impl ModelState {
    /// The state that folding `events` into an empty state yields (positions are
    /// their indices in partition 0). Skipped events are dropped silently; use
    /// [`fold`] to see them.
    pub fn from_events<'a>(events: impl IntoIterator<Item = &'a Event>) -> ModelState {
        let positioned = events.into_iter().enumerate().map(|(i, e)| {
            let pos = RecordPos {
                partition: 0,
                offset: i as u64,
            };
            (pos, e)
        });
        fold_iter(&ModelState::default(), positioned).state
    }
}
