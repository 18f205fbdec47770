//! `run`'s checkpoints: restoring the engine from the newest usable checkpoint at
//! start, and the task that writes `DATA_DIR/checkpoints/*.dpc` while it runs.
//!
//! With `--log file://DIR?compact=true` (or `delete=true`) it also compacts (or
//! deletes segments of) the embedded log while running
//! ([`Checkpoints::retain_while_running`]): the log must not know about
//! checkpoints, so this is where the safe position comes from. It is the
//! position of the **oldest** checkpoint kept: a restart restores the newest
//! usable one, and falls back to older ones when that is damaged, so every one of
//! them must lie at or above the compacted or deleted range (a checkpoint below
//! it is not restored, see `checkpoint::verify`). For deletion this matters more
//! than for compaction: below the log's start the state exists only in the
//! checkpoints.
//!
//! What it does NOT do: encode, verify or prune checkpoints (the engine's
//! `checkpoint` module does), or decide when to write them (that is the
//! `--checkpoint-*` settings).

use std::path::Path;
use std::sync::Arc;

use deltapilot_engine::checkpoint::{
    CHECKPOINT_DIR, Checkpoint, CheckpointFailure, CheckpointPolicy, CheckpointStats,
    CheckpointStore, load_verified, run_counted,
};
use deltapilot_engine::runner::Engine;
use deltapilot_log::file::{DeletePolicy, RetentionPolicy};
use deltapilot_log::{EventLog, Log, Position};
use deltapilot_server::log_metrics::CompactionFailure;
use deltapilot_server::metrics::Metrics;
use deltapilot_xds::generate::GenOptions;
use deltapilot_xds::snapshot::SnapshotReader;
use tokio::sync::watch;

/// The checkpoint directory of a data directory, and when to write to it.
#[derive(Debug)]
pub(crate) struct Checkpoints {
    store: CheckpointStore,
    policy: CheckpointPolicy,
    /// Failures at restore and while writing (`checkpoint_failures_total`).
    stats: Arc<CheckpointStats>,
}

impl Checkpoints {
    /// `DATA_DIR/checkpoints`, keeping as many as `policy` says.
    pub(crate) fn new(data_dir: &Path, policy: CheckpointPolicy) -> Self {
        Checkpoints {
            store: CheckpointStore::new(data_dir.join(CHECKPOINT_DIR), policy.keep),
            policy,
            stats: Arc::default(),
        }
    }

    /// The failure counts, for the metrics.
    pub(crate) fn stats(&self) -> Arc<CheckpointStats> {
        self.stats.clone()
    }

    /// The newest usable checkpoint to restore the engine from, logging every one
    /// passed over and why (a damaged checkpoint never stops a start: the engine
    /// falls back to an older one, or to the start of the log).
    pub(crate) async fn restore(&self, log: &Log) -> Option<Checkpoint> {
        let loaded = match load_verified(&self.store, log, None).await {
            Ok(l) => l,
            Err(e) => {
                self.stats.count(CheckpointFailure::RestoreUnreadable);
                tracing::warn!(error = %e, dir = %self.store.dir().display(), "cannot read checkpoints; folding the whole log");
                return None;
            }
        };
        for r in &loaded.rejected {
            self.stats.count(CheckpointFailure::RestoreRejected);
            tracing::warn!(checkpoint = %r.path.display(), reason = %r.reason, "checkpoint skipped");
        }
        let (path, cp) = loaded.checkpoint?;
        tracing::info!(checkpoint = %path.display(), position = %cp.position, "restoring from checkpoint");
        Some(cp)
    }

    /// Applies the embedded log's retention below the oldest kept checkpoint,
    /// once per checkpoint interval, until `shutdown`: deletes the segments
    /// outside the window (`delete=true`), then compacts the sealed ones left
    /// (`compact=true`). A failure is logged and retried at the next interval (the
    /// log stays as it was: see `engine/log/src/file/{compact,retain}.rs`). Each
    /// attempt is counted in `metrics.log_store` (see `log_metrics`).
    pub(crate) fn retain_while_running(
        &self,
        log: Arc<Log>,
        retention: RetentionPolicy,
        metrics: Arc<Metrics>,
        mut shutdown: watch::Receiver<bool>,
    ) -> impl std::future::Future<Output = anyhow::Result<()>> + Send + 'static {
        let (store, every) = (self.store.clone(), self.policy.every);
        async move {
            let Log::File(file) = &*log else {
                return Ok(());
            };
            let mut compacted_below = 0;
            loop {
                tokio::select! {
                    _ = shutdown.changed() => return Ok(()),
                    () = tokio::time::sleep(every) => {}
                }
                if *shutdown.borrow() {
                    return Ok(());
                }
                let Some(below) = oldest_checkpoint(&store, &metrics, retention).await else {
                    continue;
                };
                if retention.delete {
                    let policy = DeletePolicy {
                        max_age: retention.tombstone_retention,
                        max_bytes: retention.retention_bytes,
                        now: std::time::SystemTime::now(),
                    };
                    match file.delete_segments(below, policy).await {
                        Ok(report) => metrics.log_store.deleted(&report),
                        Err(e) => {
                            metrics.log_store.delete_failed(CompactionFailure::of(&e));
                            tracing::warn!(error = %e, below, "deleting segments of the embedded log failed; retrying at the next interval");
                        }
                    }
                }
                if !retention.compact || below <= compacted_below {
                    continue;
                }
                let policy = deltapilot_log::file::CompactPolicy {
                    tombstone_retention: retention.tombstone_retention,
                    now_unix_micros: crate::cli::log::compact::now_unix_micros(),
                };
                match file
                    .compact(below, Arc::new(deltapilot_model::fold::admits), policy)
                    .await
                {
                    Ok(report) => {
                        compacted_below = below;
                        let now = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0.0, |d| d.as_secs_f64());
                        metrics.log_store.compacted(&report, now);
                    }
                    Err(e) => {
                        metrics.log_store.failed(CompactionFailure::of(&e));
                        tracing::warn!(error = %e, below, "compaction of the embedded log failed; retrying at the next interval")
                    }
                }
            }
        }
    }

    /// The periodic checkpoint writer, as a task for `run`'s task set.
    pub(crate) async fn write_while_running(
        self,
        log: Arc<Log>,
        opts: GenOptions,
        reader: SnapshotReader,
        from: Position,
        shutdown: watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let stats = self.stats;
        run_counted(
            log,
            self.store,
            self.policy,
            opts,
            reader,
            from,
            shutdown,
            stats,
        )
        .await
        .map_err(|e| anyhow::anyhow!("checkpoint writer stopped: {e}"))
    }
}

/// The position of the oldest kept checkpoint: what retention may remove lies
/// below it. `None` (counted as a failure of each policy that is on) when the
/// checkpoints cannot be listed, or there is none yet.
async fn oldest_checkpoint(
    store: &CheckpointStore,
    metrics: &Metrics,
    retention: RetentionPolicy,
) -> Option<u64> {
    let listed = {
        let store = store.clone();
        tokio::task::spawn_blocking(move || store.list()).await
    };
    let error = match listed {
        Ok(Ok(files)) => return files.iter().map(|f| f.records).min(),
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    };
    if retention.compact {
        metrics.log_store.failed(CompactionFailure::Checkpoints);
    }
    if retention.delete {
        metrics
            .log_store
            .delete_failed(CompactionFailure::Checkpoints);
    }
    tracing::warn!(error = %error, "retention: cannot list checkpoints; nothing deleted or compacted");
    None
}

/// The engine, restored from the newest usable checkpoint when checkpoints are on,
/// and the position it folds on from: the checkpoint's, else the start of the log.
///
/// Refuses to start when retention deleted the front of the log and no
/// checkpoint at or above its start could be restored: folding what is left
/// would serve a state that is missing everything written before it.
pub(crate) async fn start_engine(
    opts: &GenOptions,
    log: &Log,
    checkpoints: Option<&Checkpoints>,
) -> anyhow::Result<(Engine, Position)> {
    let restored = match checkpoints {
        Some(c) => c.restore(log).await,
        None => None,
    };
    let engine = match restored {
        Some(cp) => Engine::from_checkpoint(opts.clone(), cp),
        None => Engine::new(opts.clone()),
    };
    let from = if engine.position().total() > 0 {
        engine.position().clone()
    } else {
        log.start()
    };
    if from.total() > 0 && engine.position().total() == 0 {
        anyhow::bail!(
            "the embedded log starts at {from}: retention deleted the records below it, and \
             their state lives on only in the checkpoints, but no checkpoint at or above \
             {from} could be restored (see the warnings above); restore DATA_DIR/checkpoints \
             from a backup, or start on a new log directory (the adapters' start-up resync \
             rebuilds the registries' current state)"
        );
    }
    Ok((engine, from))
}
