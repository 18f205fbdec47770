//! [`KubernetesAdapter`]: builds the client, runs one watch task per kind and
//! namespace, folds their updates into the store, and appends the differences to
//! the log.
//!
//! The loop: wait until every watch has listed once (or found its kind absent),
//! then resync at a new generation; after that, each batch of updates is applied
//! to the store and only changed entities are appended. A log that refuses appends
//! is retried with capped, jittered exponential backoff while updates keep being
//! folded in, so the next attempt carries the latest state.
//!
//! What it does NOT do: parse objects (`parse`), join them (`store`), plan and
//! append events (`common::emit`, `common::append`) or talk to the API server
//! directly (`watch`).

use std::path::Path;
use std::sync::Arc;

use deltapilot_log::EventLog;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::kinds::{WatchSpec, watch_specs};
use super::options::KubernetesOptions;
use super::status::{KubernetesAdapterStatus, SyncState, WatchStatus};
use super::store::{Applied, Store};
use super::watch::{UPDATE_CHANNEL_CAPACITY, Update, WatchTask};
use crate::common::append::{Outbox, Planner, flush_if_due, now_micros, publish};
use crate::common::emit::EntityMap;
use crate::generation::{GenerationStore, next_generation};
use crate::{Error, Result};

/// Most updates folded into the store before the desired view is recomputed and
/// appended: coalesces bursts (a rollout touching hundreds of Pods) into few
/// batches, while bounding how long one round keeps the loop busy.
const DRAIN_MAX: usize = 1024;

/// The Kubernetes adapter. See the [module docs](super) for the rules it follows.
pub struct KubernetesAdapter {
    client: kube::Client,
    opts: Arc<KubernetesOptions>,
    core: Core,
    status_tx: watch::Sender<KubernetesAdapterStatus>,
}

impl std::fmt::Debug for KubernetesAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesAdapter")
            .field("source", &self.core.source)
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl KubernetesAdapter {
    /// An adapter watching the cluster `client` talks to. Checks the options and
    /// loads the persisted generation; contacts nothing yet, so an unreachable API
    /// server is a status to watch, never a construction error.
    ///
    /// The client's settings are the caller's. Configure it as `from_kubeconfig`
    /// does: a read timeout above [`KubernetesOptions::watch_timeout`] (so a
    /// hanging API server fails requests instead of stalling them) and
    /// `default_retry` off (so 503s reach the adapter's backoff and status instead
    /// of being retried silently inside kube).
    pub fn new(client: kube::Client, opts: KubernetesOptions) -> Result<Self> {
        opts.validate()?;
        let source = opts.source();
        let specs = watch_specs(opts.istio, &opts.namespaces, opts.label_selector.as_deref());
        let (state, persisted_generation) = GenerationStore::open_loaded(
            opts.state_dir.as_deref(),
            "k8s-adapter",
            &source,
            "kubernetes",
        )?;
        let watches = specs
            .iter()
            .map(|s| WatchStatus {
                kind: s.kind,
                namespace: s.namespace.clone(),
                state: SyncState::Pending,
                initial_sync_done: false,
                objects: 0,
                relists_total: 0,
                errors_total: 0,
                consecutive_failures: 0,
                last_error: None,
                retry_in: None,
            })
            .collect();
        let core = Core {
            source,
            store: Store::new(opts.cluster_id.clone(), opts.cluster_domain.clone()),
            specs,
            watches,
            outbox: Outbox::new(opts.append_batch_max),
            state,
            persisted_generation,
            counters: Counters::default(),
        };
        let (status_tx, _) = watch::channel(core.status());
        Ok(Self {
            client,
            opts: Arc::new(opts),
            core,
            status_tx,
        })
    }

    /// An adapter for the cluster a kubeconfig names: the file at `path`, or, when
    /// `None`, the usual places (`$KUBECONFIG`, `~/.kube/config`, then the
    /// in-cluster service account). The client gets
    /// [`KubernetesOptions::connect_timeout`] and an idle
    /// [`KubernetesOptions::read_timeout`], so no request can hang forever.
    pub async fn from_kubeconfig(path: Option<&Path>, opts: KubernetesOptions) -> Result<Self> {
        opts.validate()?;
        let mut config = match path {
            Some(p) => {
                let kubeconfig = kube::config::Kubeconfig::read_from(p).map_err(|e| {
                    Error::KubeClient(format!("reading kubeconfig {}: {e}", p.display()))
                })?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                    .await
                    .map_err(|e| Error::KubeClient(format!("kubeconfig {}: {e}", p.display())))?
            }
            None => kube::Config::infer().await.map_err(|e| {
                Error::KubeClient(format!(
                    "no cluster configuration found ($KUBECONFIG, ~/.kube/config, in-cluster): {e}"
                ))
            })?,
        };
        config.connect_timeout = Some(opts.connect_timeout);
        config.read_timeout = Some(opts.read_timeout);
        config.reset_reader_on_write = true;
        // kube would otherwise retry 429/503/504 inside each request (up to 15
        // times, minutes in all), invisible to the status; the watch tasks retry
        // with their own backoff and report every failure.
        config.default_retry = false;
        let client =
            kube::Client::try_from(config).map_err(|e| Error::KubeClient(e.to_string()))?;
        Self::new(client, opts)
    }

    /// The source id stamped on every event (`k8s:<cluster_id>` unless
    /// [`KubernetesOptions::source_id`] names one).
    pub fn source(&self) -> &str {
        &self.core.source
    }

    /// A receiver of the adapter's status, updated whenever it changes; `borrow()`
    /// is cheap, so metrics and `/readyz` read it on every request.
    pub fn status(&self) -> watch::Receiver<KubernetesAdapterStatus> {
        self.status_tx.subscribe()
    }

    /// Runs the adapter until `shutdown` becomes `true` (or its sender is dropped).
    /// API server failures and a log that refuses appends are retried with backoff
    /// and shown in the status, keeping the last state; malformed objects are
    /// skipped and counted. Returns `Err` only if every watch task died.
    pub async fn run<L: EventLog + 'static>(
        self,
        log: Arc<L>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<()> {
        let KubernetesAdapter {
            client,
            opts,
            mut core,
            status_tx,
        } = self;
        let (tx, mut rx) = mpsc::channel(UPDATE_CHANNEL_CAPACITY);
        let mut tasks = tokio::task::JoinSet::new();
        for (index, spec) in core.specs.iter().enumerate() {
            let task = WatchTask {
                index,
                spec: spec.clone(),
                client: client.clone(),
                opts: opts.clone(),
                tx: tx.clone(),
                shutdown: shutdown.clone(),
            };
            tasks.spawn(task.run());
        }
        drop(tx);
        tracing::info!(source = %core.source, watches = core.specs.len(),
            "kubernetes adapter: started; waiting for every watch to list once");

        let result = loop {
            if *shutdown.borrow() {
                break Ok(());
            }
            core.begin_if_ready();
            flush_if_due(&mut core, log.as_ref(), &shutdown, "kubernetes", |n| {
                opts.backoff(n)
            })
            .await;
            let retry_at = core.outbox.retry_at();
            publish(&status_tx, core.status());
            tokio::select! {
                changed = shutdown.changed() => {
                    if changed.is_err() {
                        break Ok(());
                    }
                }
                () = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {}
                update = rx.recv() => match update {
                    Some(first) => {
                        core.handle(first);
                        for _ in 1..DRAIN_MAX {
                            match rx.try_recv() {
                                Ok(u) => core.handle(u),
                                Err(_) => break,
                            }
                        }
                        core.refresh();
                    }
                    // The tasks also end on shutdown, possibly before this loop sees it.
                    None if *shutdown.borrow() => break Ok(()),
                    None => break Err(Error::Task("every Kubernetes watch task ended".into())),
                },
            }
        };
        drop(rx);
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        publish(&status_tx, core.status());
        tracing::info!(source = %core.source, "kubernetes adapter: stopped");
        result
    }
}

impl Planner for Core {
    /// Nothing is planned before every watch has listed once (see
    /// [`Core::begin_if_ready`]): the outbox has not begun until then.
    fn outbox(&mut self) -> Option<(&mut Outbox, &EntityMap)> {
        Some((&mut self.outbox, self.store.desired()))
    }
}

#[derive(Debug, Default)]
struct Counters {
    malformed_objects_total: u64,
    skipped_parts_total: u64,
    last_registry_error: Option<String>,
}

impl Counters {
    fn add(&mut self, a: Applied) {
        self.malformed_objects_total += a.malformed;
        self.skipped_parts_total += a.skipped_parts;
    }
}

/// Everything the adapter loop owns.
#[derive(Debug)]
struct Core {
    source: String,
    store: Store,
    specs: Vec<WatchSpec>,
    watches: Vec<WatchStatus>,
    outbox: Outbox,
    state: Option<GenerationStore>,
    persisted_generation: u64,
    counters: Counters,
}

impl Core {
    /// Starts the resync once every watch has listed once (or found its kind
    /// absent): before that the view is partial, and a resync would let the engine
    /// sweep whatever has not been listed yet.
    fn begin_if_ready(&mut self) {
        if self.outbox.begun() || !self.watches.iter().all(|w| w.initial_sync_done) {
            return;
        }
        let generation = next_generation(self.persisted_generation, now_micros());
        self.persisted_generation = generation;
        if let Some(state) = &self.state
            && let Err(e) = state.save(generation)
        {
            tracing::warn!(error = %e, "kubernetes adapter: cannot write state file; continuing without it");
        }
        tracing::info!(source = %self.source, generation, entities = self.store.desired().len(),
            "kubernetes adapter: every watch listed; resyncing");
        self.store.take_changed();
        self.outbox
            .begin(self.source.clone(), generation, self.store.desired());
    }

    /// Recomputes what the last updates affected and hands changed keys to the
    /// emitter (before the resync, the resync takes every key anyway).
    fn refresh(&mut self) {
        self.store.refresh();
        let changed = self.store.take_changed();
        self.outbox.mark(changed);
    }

    fn handle(&mut self, update: Update) {
        match update {
            Update::Relisted { watch, objects } => {
                let Some(spec) = self.specs.get(watch) else {
                    return;
                };
                let applied = self
                    .store
                    .relist(spec.kind, spec.namespace.as_deref(), objects);
                self.counters.add(applied);
                if let Some(w) = self.watches.get_mut(watch) {
                    if w.initial_sync_done {
                        w.relists_total += 1;
                    }
                    w.initial_sync_done = true;
                    w.state = SyncState::Synced;
                    w.consecutive_failures = 0;
                    w.retry_in = None;
                }
            }
            Update::Applied { watch, object } => {
                let Some(spec) = self.specs.get(watch) else {
                    return;
                };
                let applied = self.store.apply(spec.kind, object);
                self.counters.add(applied);
                self.mark_healthy(watch);
            }
            Update::Deleted { watch, id } => {
                let Some(spec) = self.specs.get(watch) else {
                    return;
                };
                self.store.delete(spec.kind, &id);
                self.mark_healthy(watch);
            }
            Update::Malformed { watch, reason } => {
                let kind = self.specs.get(watch).map(|s| s.kind);
                tracing::warn!(kind = ?kind, %reason, "kubernetes adapter: skipping an undecodable watch event");
                self.counters.malformed_objects_total += 1;
            }
            Update::Failed {
                watch,
                error,
                absent,
                attempt,
                retry_in,
            } => {
                let Some(spec) = self.specs.get(watch) else {
                    return;
                };
                let (kind, ns) = (spec.kind, spec.namespace.clone());
                if absent {
                    // An uninstalled kind has no objects.
                    let applied = self.store.relist(kind, ns.as_deref(), Vec::new());
                    self.counters.add(applied);
                } else {
                    self.counters.last_registry_error = Some(format!(
                        "{kind} in {}: {error}",
                        ns.as_deref().unwrap_or("all namespaces")
                    ));
                }
                if let Some(w) = self.watches.get_mut(watch) {
                    w.errors_total += 1;
                    w.consecutive_failures = attempt;
                    w.last_error = Some(error);
                    w.retry_in = Some(retry_in);
                    if absent {
                        w.state = SyncState::Absent;
                        w.initial_sync_done = true;
                    } else {
                        w.state = SyncState::Retrying;
                    }
                }
            }
            Update::Recovered { watch } => self.mark_healthy(watch),
        }
    }

    fn mark_healthy(&mut self, watch: usize) {
        if let Some(w) = self.watches.get_mut(watch)
            && w.state == SyncState::Retrying
        {
            w.state = if w.initial_sync_done {
                SyncState::Synced
            } else {
                SyncState::Pending
            };
            w.consecutive_failures = 0;
            w.retry_in = None;
        }
    }

    fn status(&self) -> KubernetesAdapterStatus {
        let c = &self.counters;
        let watches = self
            .watches
            .iter()
            .map(|w| WatchStatus {
                objects: self.store.count(w.kind, w.namespace.as_deref()),
                ..w.clone()
            })
            .collect();
        KubernetesAdapterStatus {
            source: self.source.clone(),
            generation: self.outbox.generation(),
            resync_completed: self.outbox.resync_completed(),
            resync_completed_at: self.outbox.resync_completed_at(),
            entities_in_view: self.outbox.len(),
            events_emitted_total: self.outbox.events_total,
            malformed_objects_total: c.malformed_objects_total,
            skipped_parts_total: c.skipped_parts_total,
            append_failures_total: self.outbox.failures_total,
            oversized_objects_total: self.outbox.oversized_total,
            append_backlog: self.outbox.backlog(),
            last_oversized_object: self.outbox.last_oversized.clone(),
            last_append_error: self.outbox.last_error.clone(),
            last_registry_error: c.last_registry_error.clone(),
            watches,
            problems: self.store.problems(KubernetesAdapterStatus::MAX_PROBLEMS),
        }
    }
}
