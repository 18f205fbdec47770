//! What `deltapilot run` needs from the replay and debugging work: restoring the
//! engine from the newest checkpoint at start, writing checkpoints while it runs,
//! and the state behind the admin `/debug/` views. Kept here so that `run.rs`
//! only wires it in.
//!
//! Flags (each with its `DELTAPILOT_*` variable and `--config` key):
//!
//! - `--checkpoint-every-events N` (default 100000), `--checkpoint-every-secs S` (300),
//!   `--checkpoint-keep K` (3): when to write `DATA_DIR/checkpoints/*.dpc` and how
//!   many to keep; `--checkpoint-every-events 0` turns checkpoints off (restart
//!   then re-folds the whole log).
//! - `--debug-endpoints auto|on|off` (default auto): mount `/debug/*` on the admin server;
//!   `auto` does only when the admin address is loopback, since the views expose
//!   the whole mesh's configuration.
//!
//! What it does NOT do: run the engine or serve anything itself.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use deltapilot_engine::checkpoint::{
    CHECKPOINT_DIR, Checkpoint, CheckpointPolicy, CheckpointStore, load_verified, run_checkpointer,
};
use deltapilot_log::{Log, Position};
use deltapilot_server::admin::DebugState;
use deltapilot_server::xds::registry::StreamRegistry;
use deltapilot_xds::generate::GenOptions;
use deltapilot_xds::snapshot::SnapshotReader;
use serde::Deserialize;
use tokio::sync::watch;

/// `--debug-endpoints`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum DebugEndpoints {
    /// Only when the admin server listens on a loopback address.
    Auto,
    /// Always.
    On,
    /// Never.
    Off,
}

/// The flags `run` flattens in.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct LiveArgs {
    /// Write a checkpoint after this many log records (0: no checkpoints) [default: 100000].
    #[arg(long, env = "DELTAPILOT_CHECKPOINT_EVERY_EVENTS", value_name = "N")]
    pub(crate) checkpoint_every_events: Option<u64>,
    /// Write a checkpoint after this many seconds if the log moved [default: 300].
    #[arg(long, env = "DELTAPILOT_CHECKPOINT_EVERY_SECS", value_name = "SECS")]
    pub(crate) checkpoint_every_secs: Option<u64>,
    /// Checkpoints to keep in DATA_DIR/checkpoints [default: 3].
    #[arg(long, env = "DELTAPILOT_CHECKPOINT_KEEP", value_name = "K")]
    pub(crate) checkpoint_keep: Option<usize>,
    /// Serve /debug/* on the admin server: auto (only on a loopback admin address), on, off [default: auto].
    #[arg(
        long,
        env = "DELTAPILOT_DEBUG_ENDPOINTS",
        value_enum,
        value_name = "WHEN"
    )]
    pub(crate) debug_endpoints: Option<DebugEndpoints>,
}

/// The same keys in a `--config` file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct LiveFileConfig {
    pub(crate) checkpoint_every_events: Option<u64>,
    pub(crate) checkpoint_every_secs: Option<u64>,
    pub(crate) checkpoint_keep: Option<usize>,
    pub(crate) debug_endpoints: Option<DebugEndpoints>,
}

/// Validated settings.
#[derive(Debug, Clone)]
pub(crate) struct Live {
    /// `None`: checkpoints are off.
    pub(crate) checkpoints: Option<CheckpointPolicy>,
    /// Whether `/debug/*` is mounted.
    pub(crate) debug: bool,
}

impl LiveArgs {
    /// Merges flags over the config file over defaults.
    pub(crate) fn settings(self, file: LiveFileConfig, admin: SocketAddr) -> anyhow::Result<Live> {
        let d = CheckpointPolicy::default();
        let every_events = self
            .checkpoint_every_events
            .or(file.checkpoint_every_events)
            .unwrap_or(d.every_events);
        let every_secs = self
            .checkpoint_every_secs
            .or(file.checkpoint_every_secs)
            .unwrap_or(d.every.as_secs());
        let keep = self
            .checkpoint_keep
            .or(file.checkpoint_keep)
            .unwrap_or(d.keep);
        if every_events > 0 && (every_secs == 0 || keep == 0) {
            anyhow::bail!(
                "--checkpoint-every-secs and --checkpoint-keep must be at least 1 (turn checkpoints off with --checkpoint-every-events 0)"
            );
        }
        let debug = match self
            .debug_endpoints
            .or(file.debug_endpoints)
            .unwrap_or(DebugEndpoints::Auto)
        {
            DebugEndpoints::Auto => admin.ip().is_loopback(),
            DebugEndpoints::On => true,
            DebugEndpoints::Off => false,
        };
        Ok(Live {
            checkpoints: (every_events > 0).then_some(CheckpointPolicy {
                every_events,
                every: Duration::from_secs(every_secs),
                keep,
            }),
            debug,
        })
    }
}

/// The checkpoint directory of a data directory.
pub(crate) fn store(data_dir: &Path, policy: &CheckpointPolicy) -> CheckpointStore {
    CheckpointStore::new(data_dir.join(CHECKPOINT_DIR), policy.keep)
}

/// The newest usable checkpoint to restore the engine from, logging every one
/// passed over and why (a damaged checkpoint never stops a start: the engine
/// falls back to an older one, or to the start of the log).
pub(crate) async fn restore(
    log: &Log,
    store: &CheckpointStore,
) -> anyhow::Result<Option<Checkpoint>> {
    let loaded = match load_verified(store, log, None).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, dir = %store.dir().display(), "cannot read checkpoints; folding the whole log");
            return Ok(None);
        }
    };
    for r in &loaded.rejected {
        tracing::warn!(checkpoint = %r.path.display(), reason = %r.reason, "checkpoint skipped");
    }
    Ok(match loaded.checkpoint {
        Some((path, cp)) => {
            tracing::info!(checkpoint = %path.display(), position = %cp.position, "restoring from checkpoint");
            Some(cp)
        }
        None => None,
    })
}

/// The periodic checkpoint writer, as a task for `run`'s task set.
pub(crate) async fn checkpointer(
    log: Arc<Log>,
    store: CheckpointStore,
    policy: CheckpointPolicy,
    opts: GenOptions,
    reader: SnapshotReader,
    from: Position,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    run_checkpointer(log, store, policy, opts, reader, from, shutdown)
        .await
        .map_err(|e| anyhow::anyhow!("checkpoint writer stopped: {e}"))
}

/// The state the `/debug/*` routes read.
pub(crate) fn debug_state(
    snapshots: SnapshotReader,
    streams: Arc<StreamRegistry>,
    log: Arc<Log>,
) -> DebugState {
    DebugState {
        snapshots,
        streams,
        log: Some(log),
    }
}
