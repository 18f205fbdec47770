//! The engine's catch-up: how [`Engine::run`] folds the log it finds at start,
//! before it is ready.
//!
//! Until the follower first reports that it has delivered everything the log
//! held ([`FollowItem::CaughtUp`](deltapilot_log::FollowItem)), nobody is served
//! (xDS streams wait for readiness), so the engine folds as a replay does: each
//! batch is folded in place ([`fold_prepared_owned`]) and only noted as touched;
//! nothing is regenerated and no snapshot is published. At the catch-up, what
//! every batch touched is regenerated once and published as one snapshot, and
//! only then does the engine become ready; after it, every batch takes the live
//! path (regenerate, publish). Why: regenerating and publishing after every
//! batch rebuilt each hot resource once per batch that touched it (every
//! assignment of a large service, per batch), and the periodic checkpoint writer
//! checkpointed states nobody was served; the generator's output depends only on
//! the model, so one regeneration of the union equals one per batch, and the
//! published snapshot is the one a replay to the same position computes.
//!
//! What it does NOT do: decide when the engine is caught up (the follower
//! does), or change anything once it is.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use deltapilot_log::{FollowItem, Position, Record};
use deltapilot_model::fold::fold_prepared_owned;
use deltapilot_model::state::Touched;

use super::Engine;
use crate::release::Releaser;
use crate::replay::{Decoded, decode_records};
use crate::{Error, Result};

/// What the engine has folded while catching up and not yet regenerated.
#[derive(Debug)]
pub(super) struct CatchUp {
    /// Everything folded since the catch-up began touched.
    pending: Touched,
    /// The newest observation time among the events folded.
    observed_at_micros: i64,
    /// Time spent folding, for the step observer's one report.
    fold_took: Duration,
    /// Frees folded batches off the fold thread (see `crate::release`).
    dropper: Releaser<(Vec<Record>, Decoded)>,
}

impl CatchUp {
    pub(super) fn new() -> Self {
        CatchUp {
            pending: Touched::default(),
            observed_at_micros: 0,
            fold_took: Duration::ZERO,
            dropper: Releaser::new("engine-catch-up-drop"),
        }
    }
}

impl Engine {
    /// Whether the engine is still folding the log it found at start (see the
    /// module doc).
    pub(super) fn catching_up(&self) -> bool {
        self.catch_up.is_some()
    }

    /// Starts a catch-up, unless the engine has caught up before (a second
    /// `run` of the same engine goes on the live path at once).
    pub(super) fn begin_catch_up(&mut self) {
        if !self.stats.caught_up() && self.catch_up.is_none() {
            self.catch_up = Some(CatchUp::new());
        }
    }

    /// Folds a batch the reading task decoded while catching up: folded in
    /// place and noted as touched; no regeneration, no snapshot. Records
    /// already folded are left out, and records that did not decode are
    /// skipped and counted, as on the live path.
    pub(super) fn fold_decoded(&mut self, records: Vec<Record>, decoded: Decoded) {
        let Some(mut catch_up) = self.catch_up.take() else {
            // Not reached (the reading task decodes only while catching up);
            // the live path folds the records as they are.
            self.apply_records(&records);
            return;
        };
        let started = Instant::now();
        let decoded = unfolded(decoded, &self.position);
        let out = fold_prepared_owned(
            std::mem::take(&mut self.model),
            &decoded.events,
            &decoded.prepared,
        );
        self.model = out.state;
        catch_up.fold_took += started.elapsed();
        for pos in decoded
            .events
            .iter()
            .map(|(p, _)| p)
            .chain(decoded.skipped.iter().map(|s| &s.pos))
        {
            self.position.advance(*pos);
        }
        let mut skipped = decoded.skipped.clone();
        skipped.extend(out.skipped);
        self.count_batch(&mut skipped, out.applied);
        catch_up.pending.extend(out.touched);
        catch_up.observed_at_micros = decoded
            .events
            .iter()
            .map(|(_, e)| e.observed_at_unix_micros)
            .fold(catch_up.observed_at_micros, i64::max);
        catch_up.dropper.release((records, decoded));
        self.catch_up = Some(catch_up);
    }

    /// Folds records the follower delivered as they are: on the live path, or
    /// (decoded here) into the catch-up if one is under way, so that a catch-up
    /// never publishes a state whose earlier batches were not regenerated.
    pub(super) fn fold_records(&mut self, records: Vec<Record>) {
        if self.catching_up() {
            let decoded = decode_records(&records, &self.position);
            self.fold_decoded(records, decoded);
        } else {
            self.apply_records(&records);
        }
    }

    /// Ends the catch-up, then marks the engine caught up with `head`: readiness
    /// never precedes the snapshot that covers the head.
    pub(super) fn finish_catch_up(&mut self, head: &Position) {
        self.end_catch_up();
        self.mark_caught_up(head);
    }

    /// Ends the catch-up, if one is under way: regenerates what it touched and
    /// publishes the result (the engine is not marked ready here).
    pub(super) fn end_catch_up(&mut self) {
        let Some(catch_up) = self.catch_up.take() else {
            return;
        };
        let state = self.model.clone();
        let done = self.regenerate_and_publish(
            state,
            &catch_up.pending,
            catch_up.fold_took,
            catch_up.observed_at_micros,
        );
        tracing::info!(
            position = %self.position,
            events = self.stats.events_applied.load(Ordering::Relaxed),
            seq = self.seq,
            fold_ms = catch_up.fold_took.as_millis() as u64,
            regenerate_ms = done.times.regenerate.as_millis() as u64,
            "engine: folded the log found at start"
        );
    }
}

/// `decoded` without the records `folded` already covers (a re-delivery).
fn unfolded(decoded: Decoded, folded: &Position) -> Decoded {
    let stale = decoded.events.iter().any(|(p, _)| folded.contains(*p))
        || decoded.skipped.iter().any(|s| folded.contains(s.pos));
    if !stale {
        return decoded;
    }
    let Decoded {
        events,
        prepared,
        skipped,
    } = decoded;
    let given = prepared.len() == events.len();
    let mut out = Decoded::default();
    for (i, (pos, ev)) in events.into_iter().enumerate() {
        if folded.contains(pos) {
            continue;
        }
        if given {
            out.prepared.push(prepared[i]);
        }
        out.events.push((pos, ev));
    }
    out.skipped = skipped
        .into_iter()
        .filter(|s| !folded.contains(s.pos))
        .collect();
    out
}

/// Records the reading task gathers into one fold batch while catching up.
/// Why this many: larger batches let the fold walk the endpoint map in longer
/// sorted runs; with the [`FOLD_QUEUE`](super::FOLD_QUEUE) batches queued, one
/// gathering and one folding, this holds about as many decoded records in
/// memory as a replay's two batches of `READ_CHUNK`.
pub(super) const CATCH_UP_BATCH: usize = 16_384;

/// What the reading task hands the fold thread.
#[derive(Debug)]
pub(super) enum FoldItem {
    /// A follower's item, as it came.
    Follow(FollowItem),
    /// Records gathered and decoded while catching up (see [`Gather`]).
    Decoded(Vec<Record>, Decoded),
}

/// The reading task's side of the catch-up: gathers the follower's batches
/// into [`CATCH_UP_BATCH`]-record ones and decodes each on a blocking thread
/// (so decoding overlaps the fold of the batch before, as in a replay), until
/// the follower first reports it caught up; after that it passes every item
/// on as it comes.
#[derive(Debug)]
pub(super) struct Gather {
    on: bool,
    held: Vec<Record>,
}

impl Gather {
    /// Gathering while `catching_up`.
    pub(super) fn new(catching_up: bool) -> Self {
        Gather {
            on: catching_up,
            held: Vec::new(),
        }
    }

    /// What to hand the fold thread, in order, now that `item` came.
    pub(super) async fn take(&mut self, item: FollowItem) -> Result<Vec<FoldItem>> {
        if !self.on {
            return Ok(vec![FoldItem::Follow(item)]);
        }
        match item {
            FollowItem::Records(records) => {
                if self.held.is_empty() {
                    self.held = records;
                } else {
                    self.held.extend(records);
                }
                if self.held.len() < CATCH_UP_BATCH {
                    return Ok(Vec::new());
                }
                Ok(vec![decode(std::mem::take(&mut self.held)).await?])
            }
            FollowItem::CaughtUp(head) => {
                self.on = false;
                let mut out = Vec::with_capacity(2);
                if !self.held.is_empty() {
                    out.push(decode(std::mem::take(&mut self.held)).await?);
                }
                out.push(FoldItem::Follow(FollowItem::CaughtUp(head)));
                Ok(out)
            }
        }
    }
}

/// Decodes `records` on a blocking thread (the fold thread leaves out any it
/// has folded already).
async fn decode(records: Vec<Record>) -> Result<FoldItem> {
    tokio::task::spawn_blocking(move || {
        let decoded = decode_records(&records, &Position::default());
        FoldItem::Decoded(records, decoded)
    })
    .await
    .map_err(|e| Error::Task(format!("decoding records: {e}")))
}
