//! The engine runner: owns the folded state, the current xDS resources and the one
//! [`SnapshotWriter`], and turns each batch of log records into the next snapshot.
//!
//! Per batch ([`Engine::apply_records`]): decode each record (a record that does not
//! decode, or has a newer schema, is skipped with its position), [`fold`]
//! the events, regenerate the touched xDS resources, and publish a snapshot. A
//! snapshot is published after every batch so its `position` is always current (for
//! readiness and debug views), but its `seq` only moves, and readers are only woken,
//! when the change set is non-empty: identical content never causes a push.
//! [`Engine::run`] folds the log it finds at start differently, as a replay
//! does (large batches, one regeneration and one snapshot at the catch-up; see
//! `runner_catch_up.rs`), then takes this per-batch path.
//!
//! Counters ([`EngineStats`]) are plain atomics that the server exports as metrics;
//! the engine depends on no metrics crate. How long each batch's fold and
//! regeneration took goes to a [`StepObserver`] the server installs (it feeds
//! histograms); the fold and the generator themselves never read a clock.
//!
//! What it does NOT do: decide what a proxy sees (that is `xds::view`) or serve
//! anything. [`Engine::run`] follows a log until shutdown; everything else is
//! synchronous and deterministic.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use deltapilot_proto::Event;
use futures::StreamExt;
use imbl::Vector;
use tokio::sync::watch;

use self::catch_up::{FoldItem, Gather};
use crate::Result;
use crate::release::Releaser;
use deltapilot_log::{EventLog, FollowItem, Position, Record, RecordPos};
use deltapilot_model::fold::{SkipReason, Skipped, fold};
use deltapilot_model::state::{ModelState, Touched};
use deltapilot_xds::generate::{GenError, GenOptions, Generator};
use deltapilot_xds::snapshot::{RECENT_CHANGES, Snapshot, SnapshotReader, SnapshotWriter};
use deltapilot_xds::view::Views;
use deltapilot_xds::{ChangeSet, ResourceSet};

/// The name of the OS thread [`Engine::run`] folds on (shown by `top -H` and in
/// profiles).
pub const FOLD_THREAD: &str = "deltapilot-fold";

/// Log items waiting for the fold thread. Why this many: one batch folding and a
/// couple read ahead keep the thread busy while the log is read; more would only
/// hold more decoded records in memory while the fold is behind.
pub const FOLD_QUEUE: usize = 4;

/// Counters of the engine, readable from any thread while it runs.
#[derive(Debug, Default)]
pub struct EngineStats {
    events_applied: AtomicU64,
    skipped: [AtomicU64; SkipReason::ALL.len()],
    gen_errors: AtomicU64,
    batches: AtomicU64,
    caught_up: AtomicBool,
}

impl EngineStats {
    /// Events folded into the state (including rewrites that changed nothing).
    pub fn events_applied(&self) -> u64 {
        self.events_applied.load(Ordering::Relaxed)
    }

    /// Events or records skipped for `reason`.
    pub fn skipped(&self, reason: SkipReason) -> u64 {
        self.skipped[reason.index()].load(Ordering::Relaxed)
    }

    /// Events or records skipped, all reasons.
    pub fn skipped_total(&self) -> u64 {
        SkipReason::ALL.iter().map(|r| self.skipped(*r)).sum()
    }

    /// xDS resources that failed to build or encode (and were not published).
    pub fn gen_errors(&self) -> u64 {
        self.gen_errors.load(Ordering::Relaxed)
    }

    /// Batches folded.
    pub fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }

    /// Whether the engine has caught up with the log head at least once (readiness).
    pub fn caught_up(&self) -> bool {
        self.caught_up.load(Ordering::Relaxed)
    }
}

/// How long one batch took, per phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepTimes {
    /// Folding the batch's events into the state.
    pub fold: Duration,
    /// Regenerating the xDS resources the fold touched.
    pub regenerate: Duration,
}

/// What the observer learns of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepDone {
    /// How long its phases took.
    pub times: StepTimes,
    /// The sequence number of the snapshot it is about to publish, when the
    /// batch changed what proxies see (`None`: no new snapshot).
    pub new_seq: Option<u64>,
    /// The observed-at time (Unix microseconds, 0 if unknown) of the newest
    /// event in that snapshot.
    pub observed_at_micros: i64,
}

/// Called on the fold thread after every batch, just before its snapshot is
/// published, so that whatever it records about a sequence number (the
/// server's convergence clock) is in place before any stream can send that
/// snapshot and be ACKed. It must be quick (record into a histogram, no I/O).
pub struct StepObserver(Box<dyn Fn(StepDone) + Send>);

impl StepObserver {
    /// Wraps `f`.
    pub fn new(f: impl Fn(StepDone) + Send + 'static) -> Self {
        StepObserver(Box::new(f))
    }
}

impl std::fmt::Debug for StepObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StepObserver")
    }
}

/// What one batch did.
#[derive(Debug, Clone, Default)]
pub struct StepReport {
    /// Records (or events) in the batch, skipped ones included.
    pub records: usize,
    /// Events applied.
    pub applied: usize,
    /// Records or events skipped, in log order.
    pub skipped: Vec<Skipped>,
    /// What the fold touched.
    pub touched: Touched,
    /// Resources that failed to build or encode.
    pub gen_errors: Vec<GenError>,
    /// The xDS changes this batch produced (empty: no push).
    pub changes: Arc<ChangeSet>,
    /// Sequence number of the published snapshot (unchanged if `changes` is empty).
    pub seq: u64,
    /// Its content hash.
    pub hash: u64,
    /// Its log position.
    pub position: Position,
    /// How long the fold and the regeneration took.
    pub times: StepTimes,
}

/// The fold loop's owner: one per process, not `Clone` (there is one writer).
#[derive(Debug)]
pub struct Engine {
    model: ModelState,
    resources: ResourceSet,
    /// The incremental generator and its reverse indexes (entity → resources);
    /// it also keeps the hash of `resources` ([`Generator::resources_hash`]).
    generator: Generator,
    /// The Sidecar-scoped views, updated with each batch (see `view::Views`).
    views: Views,
    writer: SnapshotWriter,
    position: Position,
    seq: u64,
    recent: Vector<(u64, Arc<ChangeSet>)>,
    /// See [`Snapshot::observed_at_micros`].
    observed_at_micros: i64,
    stats: Arc<EngineStats>,
    ready: watch::Sender<bool>,
    /// Frees each replaced snapshot off the fold's thread (see
    /// `crate::release`): at 100k endpoints, freeing what a 4,096-event batch
    /// superseded cost about as much as folding it.
    releaser: Releaser<Arc<Snapshot>>,
    /// See [`Engine::observe_steps`].
    observer: Option<StepObserver>,
    /// Set while [`Engine::run`] folds the log it found at start (see
    /// `catch_up`).
    catch_up: Option<catch_up::CatchUp>,
}

/// What [`Engine::regenerate_and_publish`] produced.
struct Published {
    gen_errors: Vec<GenError>,
    changes: Arc<ChangeSet>,
    hash: u64,
    times: StepTimes,
}

impl Engine {
    /// An engine with an empty state, publishing its first snapshot (seq 0) at once.
    pub fn new(opts: GenOptions) -> Self {
        Self::with_state(opts, ModelState::default(), Position::default())
    }

    /// An engine restored from a checkpoint: its state at its position, every
    /// resource built from that state, published at once as snapshot seq 0. Run it
    /// from `checkpoint.position` to continue where the checkpoint was taken.
    pub fn from_checkpoint(opts: GenOptions, checkpoint: crate::checkpoint::Checkpoint) -> Self {
        Self::with_state(opts, checkpoint.model, checkpoint.position)
    }

    fn with_state(opts: GenOptions, model: ModelState, position: Position) -> Self {
        let model = model.with_export_defaults(&opts.export_defaults);
        let (generator, resources, errors) = Generator::build(&model, opts);
        for e in &errors {
            tracing::warn!(resource = %e.name, reason = %e.reason, "xDS resource not published");
        }
        let views = Views::build(&model, &resources, generator.options());
        let stats = Arc::new(EngineStats::default());
        stats
            .gen_errors
            .fetch_add(errors.len() as u64, Ordering::Relaxed);
        let initial = Snapshot {
            seq: 0,
            position: position.clone(),
            hash: deltapilot_xds::hash::snapshot_hash(model.hash(), generator.resources_hash()),
            model: model.clone(),
            resources: resources.clone(),
            observed_at_micros: 0,
            recent: Vector::new(),
            views: views.clone(),
        };
        let (writer, _reader) = SnapshotWriter::new(initial);
        let (ready, _) = watch::channel(false);
        Engine {
            model,
            resources,
            generator,
            views,
            writer,
            position,
            seq: 0,
            recent: Vector::new(),
            observed_at_micros: 0,
            stats,
            ready,
            releaser: Releaser::new("engine-release"),
            observer: None,
            catch_up: None,
        }
    }

    /// A reader of the published snapshots.
    pub fn reader(&self) -> SnapshotReader {
        self.writer.reader()
    }

    /// The engine's counters (shared; they keep counting while the engine runs).
    pub fn stats(&self) -> Arc<EngineStats> {
        self.stats.clone()
    }

    /// Becomes `true` once the engine has caught up with the log head (and stays
    /// so): the replica is ready to serve.
    pub fn ready(&self) -> watch::Receiver<bool> {
        self.ready.subscribe()
    }

    /// Calls `observer` after every batch with how long it took (the server's
    /// fold and regenerate histograms). Replaces an earlier observer.
    pub fn observe_steps(&mut self, observer: StepObserver) {
        self.observer = Some(observer);
    }

    /// The snapshot currently published.
    pub fn current(&self) -> Arc<Snapshot> {
        self.writer.current()
    }

    /// The folded state.
    pub fn model(&self) -> &ModelState {
        &self.model
    }

    /// Where the engine stands in the log: everything before it is folded.
    pub fn position(&self) -> &Position {
        &self.position
    }

    /// Decodes, folds and publishes one batch of records. Records at or before the
    /// engine's position in their partition (a re-delivery) are ignored.
    pub fn apply_records(&mut self, records: &[Record]) -> StepReport {
        let mut events: Vec<(RecordPos, Event)> = Vec::with_capacity(records.len());
        let mut skipped = Vec::new();
        let mut fresh = 0;
        for r in records {
            if self.position.contains(r.pos) {
                tracing::debug!(position = %r.pos, "record already folded; ignored");
                continue;
            }
            fresh += 1;
            match r.decode() {
                Ok(ev) => events.push((r.pos, ev)),
                Err(e) => skipped.push(undecodable(r.pos, &e)),
            }
            self.position.advance(r.pos);
        }
        let mut report = self.step(&events, skipped);
        report.records = fresh;
        report
    }

    /// Folds and publishes one batch of already decoded events (replay tools and
    /// tests); positions advance as for records.
    pub fn apply_events(&mut self, batch: &[(RecordPos, Event)]) -> StepReport {
        for (pos, _) in batch {
            self.position.advance(*pos);
        }
        self.step(batch, Vec::new())
    }

    fn step(&mut self, events: &[(RecordPos, Event)], mut skipped: Vec<Skipped>) -> StepReport {
        let fold_started = Instant::now();
        let out = fold(&self.model, events);
        let fold_took = fold_started.elapsed();
        skipped.extend(out.skipped);
        self.count_batch(&mut skipped, out.applied);
        let observed_at = events
            .iter()
            .map(|(_, e)| e.observed_at_unix_micros)
            .max()
            .unwrap_or(0);
        let done = self.regenerate_and_publish(out.state, &out.touched, fold_took, observed_at);
        StepReport {
            records: events.len() + skipped.len(),
            applied: out.applied,
            skipped,
            touched: out.touched,
            gen_errors: done.gen_errors,
            changes: done.changes,
            seq: self.seq,
            hash: done.hash,
            position: self.position.clone(),
            times: done.times,
        }
    }

    /// Counts a folded batch and its skipped events (sorted into log order and
    /// logged here).
    fn count_batch(&self, skipped: &mut [Skipped], applied: usize) {
        skipped.sort_by_key(|s| s.pos);
        for s in skipped.iter() {
            self.stats.skipped[s.reason.index()].fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                position = %s.pos,
                key = s.key.as_deref().unwrap_or("-"),
                reason = s.reason.as_str(),
                "event skipped: {}",
                s.detail
            );
        }
        self.stats
            .events_applied
            .fetch_add(applied as u64, Ordering::Relaxed);
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
    }

    /// Makes `state` (folded from the current one, with `touched` what changed)
    /// the engine's: regenerates the touched resources, updates the views, and
    /// publishes the next snapshot (a new `seq` only if something proxies see
    /// changed). `observed_at` is the newest observation time among the events
    /// folded into it.
    fn regenerate_and_publish(
        &mut self,
        state: ModelState,
        touched: &Touched,
        fold_took: Duration,
        observed_at: i64,
    ) -> Published {
        let regen_started = Instant::now();
        let (resources, changes, gen_errors) =
            self.generator.regenerate(&self.resources, &state, touched);
        let times = StepTimes {
            fold: fold_took,
            regenerate: regen_started.elapsed(),
        };
        for e in &gen_errors {
            tracing::warn!(resource = %e.name, reason = %e.reason, "xDS resource not published");
        }
        self.stats
            .gen_errors
            .fetch_add(gen_errors.len() as u64, Ordering::Relaxed);

        let (views, views_changed) = self.views.update(
            &state,
            &resources,
            &changes,
            touched,
            self.generator.options(),
            self.seq + 1,
        );
        self.model = state;
        self.resources = resources;
        self.views = views;
        let changes = Arc::new(changes);
        // A Sidecar change moves no global resource but must reach its proxies.
        if !changes.is_empty() || views_changed {
            self.seq += 1;
            self.observed_at_micros = observed_at;
            self.recent.push_back((self.seq, changes.clone()));
            while self.recent.len() > RECENT_CHANGES {
                self.recent.pop_front();
            }
        }
        if let Some(observer) = &self.observer {
            let published = !changes.is_empty() || views_changed;
            (observer.0)(StepDone {
                times,
                new_seq: published.then_some(self.seq),
                observed_at_micros: self.observed_at_micros,
            });
        }
        let hash = self.publish();
        Published {
            gen_errors,
            changes,
            hash,
            times,
        }
    }

    fn publish(&mut self) -> u64 {
        let hash =
            deltapilot_xds::hash::snapshot_hash(self.model.hash(), self.generator.resources_hash());
        let replaced = self.writer.publish(Snapshot {
            seq: self.seq,
            position: self.position.clone(),
            hash,
            model: self.model.clone(),
            resources: self.resources.clone(),
            observed_at_micros: self.observed_at_micros,
            recent: self.recent.clone(),
            views: self.views.clone(),
        });
        self.releaser.release(replaced);
        hash
    }

    /// Records that the log has been read up to `head`: the engine's position moves
    /// up to it (per partition), the snapshot at that position is published, and
    /// only then does the engine become ready, so that nothing that waits for
    /// readiness (`/readyz`, xDS streams) sees an older position.
    pub fn mark_caught_up(&mut self, head: &Position) {
        self.mark_position(head);
        self.publish();
        self.stats.caught_up.store(true, Ordering::Relaxed);
        self.ready.send_if_modified(|r| !std::mem::replace(r, true));
    }

    /// Follows `log` from `from`, folding every batch, until `shutdown` turns `true`
    /// (or its sender is dropped), the log stream ends, or the log fails. A log error
    /// is returned: the log is the truth, so the engine never skips past a failure
    /// of the log itself (only past individual bad records).
    ///
    /// The fold runs on an OS thread of its own ([`FOLD_THREAD`]), never on a tokio
    /// worker: a large batch, and the helper threads it splits its work over, must
    /// not stall the xDS streams that share the runtime. The calling task only
    /// reads the log and hands each item over a channel of [`FOLD_QUEUE`] items, so
    /// a fold that falls behind slows the reading instead of queueing without bound.
    /// The engine comes back when the run ends, for the caller to inspect.
    pub async fn run<L: EventLog + ?Sized>(
        mut self,
        log: &L,
        from: Position,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<Engine> {
        if !self.position.covers(&from) {
            self.mark_position(&from);
        }
        let (tx, mut rx) = tokio::sync::mpsc::channel::<FoldItem>(FOLD_QUEUE);
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        self.begin_catch_up();
        let mut gather = Gather::new(self.catching_up());
        let thread = std::thread::Builder::new()
            .name(FOLD_THREAD.into())
            .spawn(move || {
                while let Some(item) = rx.blocking_recv() {
                    match item {
                        FoldItem::Decoded(records, decoded) => self.fold_decoded(records, decoded),
                        FoldItem::Follow(FollowItem::Records(records)) => {
                            self.fold_records(records)
                        }
                        FoldItem::Follow(FollowItem::CaughtUp(head)) => self.finish_catch_up(&head),
                    }
                }
                // Stopped before the catch-up ended: what was folded is
                // published, so the engine handed back is consistent.
                self.end_catch_up();
                // The receiver may be gone if the caller was cancelled: then the
                // engine is simply dropped here.
                let _ = done_tx.send(self);
            })
            .map_err(|e| crate::Error::Task(format!("starting the fold thread: {e}")))?;
        let outcome = {
            let mut stream = log.follow(from);
            let stop = shutdown.wait_for(|s| *s);
            tokio::pin!(stop);
            'read: loop {
                // The select only picks; sending happens after it, so the
                // shutdown future's borrow of the watch is never held across an
                // await (the task must stay `Send`).
                let item = tokio::select! {
                    biased;
                    _ = &mut stop => break Ok(()),
                    item = stream.next() => item,
                };
                match item {
                    None => break Ok(()),
                    // A follower that stalls (broker down or cut off) keeps
                    // trying; the engine keeps serving what it has meanwhile.
                    Some(Err(e)) if e.is_transient() => {
                        tracing::warn!(error = %e, "engine: the log is not answering; serving the last good state");
                    }
                    Some(Err(e)) => break Err(e.into()),
                    Some(Ok(item)) => {
                        let items = match gather.take(item).await {
                            Ok(items) => items,
                            Err(e) => break Err(e),
                        };
                        for item in items {
                            if tx.send(item).await.is_err() {
                                break 'read Err(crate::Error::Task(
                                    "the fold thread stopped".into(),
                                ));
                            }
                        }
                    }
                }
            }
        };
        // Closing the channel ends the thread once it has folded what it holds.
        drop(tx);
        let engine = done_rx.await;
        let _ = thread.join();
        outcome?;
        engine.map_err(|_| crate::Error::Task("the fold thread panicked".into()))
    }

    /// Moves the position up to `at`, per partition (never back).
    fn mark_position(&mut self, at: &Position) {
        let n = self.position.partitions().max(at.partitions());
        let merged: Vec<u64> = (0..n as u32)
            .map(|p| self.position.offset(p).max(at.offset(p)))
            .collect();
        self.position = Position::from_offsets(merged);
    }
}

/// The skip report of a record whose bytes are not an event this build reads:
/// written by a newer schema, or not an event at all. The engine and a replay
/// both skip it with this report, so that both fold the same events.
pub(crate) fn undecodable(pos: RecordPos, e: &deltapilot_log::Error) -> Skipped {
    let reason = match e {
        deltapilot_log::Error::SchemaTooNew { .. } => SkipReason::SchemaTooNew,
        _ => SkipReason::Decode,
    };
    Skipped::undecodable(pos, reason, e.to_string())
}

#[path = "runner_catch_up.rs"]
mod catch_up;

#[cfg(test)]
#[path = "runner_tests.rs"]
mod tests;
