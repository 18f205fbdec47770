//! The periodic checkpoint writer: a task that watches published snapshots and
//! writes one when enough records were folded or enough time passed.
//!
//! It reads snapshots (an immutable `ModelState` and the position it reflects),
//! so the fold never waits for a checkpoint, and encoding and fsync run on a
//! blocking thread. Writes are sequential: at most one is in progress, and a
//! snapshot that moves on meanwhile is simply checkpointed next time.
//!
//! Failures are counted in [`CheckpointStats`] (plain atomics the server
//! exports as `checkpoint_failures_total{reason}`).
//!
//! What it does NOT do: restore (see [`super::load_verified`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{CheckpointStore, fingerprints, generator_id};
use crate::Result;
use deltapilot_log::{EventLog, Position};
use deltapilot_xds::generate::GenOptions;
use deltapilot_xds::snapshot::{Snapshot, SnapshotReader};

/// When to write checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointPolicy {
    /// Write once this many records were folded since the last checkpoint.
    pub every_events: u64,
    /// Write once this long passed since the last checkpoint, if any record was
    /// folded meanwhile.
    pub every: Duration,
    /// Checkpoints to keep (older ones are deleted after each write).
    pub keep: usize,
}

impl Default for CheckpointPolicy {
    /// 100,000 records or 5 minutes, keep 3: a restart then re-folds at most a
    /// fraction of a second of records, and three files leave two fallbacks if the
    /// newest is damaged.
    fn default() -> Self {
        CheckpointPolicy {
            every_events: 100_000,
            every: Duration::from_secs(300),
            keep: 3,
        }
    }
}

/// Why a checkpoint was not written, or not used at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointFailure {
    /// Writing failed on the filesystem (create, write, fsync, rename, prune).
    WriteIo,
    /// Reading the log's fingerprints for the checkpoint failed.
    WriteLog,
    /// The blocking write task died.
    WriteTask,
    /// At start, a stored checkpoint was passed over (damaged, or it does not
    /// match the log or this build).
    RestoreRejected,
    /// At start, the checkpoint directory could not be read at all.
    RestoreUnreadable,
}

impl CheckpointFailure {
    /// Every reason, in a fixed order.
    pub const ALL: [CheckpointFailure; 5] = [
        CheckpointFailure::WriteIo,
        CheckpointFailure::WriteLog,
        CheckpointFailure::WriteTask,
        CheckpointFailure::RestoreRejected,
        CheckpointFailure::RestoreUnreadable,
    ];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointFailure::WriteIo => "write_io",
            CheckpointFailure::WriteLog => "write_log",
            CheckpointFailure::WriteTask => "write_task",
            CheckpointFailure::RestoreRejected => "restore_rejected",
            CheckpointFailure::RestoreUnreadable => "restore_unreadable",
        }
    }

    /// The write-failure reason of `e`.
    pub fn of_write(e: &crate::Error) -> Self {
        match e {
            crate::Error::Io { .. } => CheckpointFailure::WriteIo,
            crate::Error::Log(_) => CheckpointFailure::WriteLog,
            crate::Error::Task(_) => CheckpointFailure::WriteTask,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Checkpoint failures by reason, readable from any thread.
#[derive(Debug, Default)]
pub struct CheckpointStats {
    failures: [AtomicU64; CheckpointFailure::ALL.len()],
}

impl CheckpointStats {
    /// Counts one failure.
    pub fn count(&self, reason: CheckpointFailure) {
        self.failures[reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Failures for `reason` so far.
    pub fn failures(&self, reason: CheckpointFailure) -> u64 {
        self.failures[reason.index()].load(Ordering::Relaxed)
    }
}

/// How often the task looks at the current snapshot: the record-count threshold
/// is noticed within this long.
const POLL: Duration = Duration::from_secs(1);

/// Writes checkpoints of what `reader` publishes into `store` per `policy` (with
/// the resources, generated with `opts`), until
/// `shutdown` turns true (then writes a last one if the position moved). `from` is
/// where the engine started (a restored checkpoint's position, or the log start):
/// no checkpoint is written until the position moves past it. A failed write is
/// logged and retried at the next threshold; it never stops the task.
pub async fn run_checkpointer<L: EventLog + ?Sized + 'static>(
    log: Arc<L>,
    store: CheckpointStore,
    policy: CheckpointPolicy,
    opts: GenOptions,
    reader: SnapshotReader,
    from: Position,
    shutdown: watch::Receiver<bool>,
) -> Result<()> {
    let stats = Arc::new(CheckpointStats::default());
    run_counted(log, store, policy, opts, reader, from, shutdown, stats).await
}

/// [`run_checkpointer`], counting each failed write in `stats`.
#[allow(clippy::too_many_arguments)]
pub async fn run_counted<L: EventLog + ?Sized + 'static>(
    log: Arc<L>,
    store: CheckpointStore,
    policy: CheckpointPolicy,
    opts: GenOptions,
    reader: SnapshotReader,
    from: Position,
    mut shutdown: watch::Receiver<bool>,
    stats: Arc<CheckpointStats>,
) -> Result<()> {
    let generator = generator_id(&opts);
    let mut last = from;
    let mut last_at = Instant::now();
    let mut tick = tokio::time::interval(POLL.min(policy.every.max(Duration::from_millis(10))));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let stopping = tokio::select! {
            _ = tick.tick() => false,
            _ = shutdown.wait_for(|s| *s) => true,
        };
        let snap = reader.load();
        let moved = snap.position != last && snap.position.covers(&last);
        let due = moved
            && (stopping
                || snap.position.total().saturating_sub(last.total()) >= policy.every_events
                || last_at.elapsed() >= policy.every);
        if due {
            match write(&*log, &store, &generator, &snap).await {
                Ok(()) => {
                    last = snap.position.clone();
                    last_at = Instant::now();
                }
                Err(e) => {
                    stats.count(CheckpointFailure::of_write(&e));
                    tracing::warn!(error = %e, position = %snap.position, "checkpoint not written")
                }
            }
        }
        if stopping {
            return Ok(());
        }
    }
}

/// Writes one checkpoint of `snap`.
async fn write<L: EventLog + ?Sized>(
    log: &L,
    store: &CheckpointStore,
    generator: &str,
    snap: &Arc<Snapshot>,
) -> Result<()> {
    let started = Instant::now();
    let fps = fingerprints(log, &snap.position).await?;
    let (store, snap2, generator) = (store.clone(), snap.clone(), generator.to_owned());
    let path = tokio::task::spawn_blocking(move || {
        store.write(
            &snap2.position,
            &fps,
            &snap2.model,
            Some((&generator, &snap2.resources)),
        )
    })
    .await
    .map_err(|e| crate::Error::Task(format!("writing a checkpoint: {e}")))??;
    let counts = snap.model.counts();
    tracing::info!(
        path = %path.display(),
        position = %snap.position,
        entities = counts.service_definitions + counts.endpoints + counts.configs,
        took_ms = started.elapsed().as_millis() as u64,
        "checkpoint written"
    );
    Ok(())
}
