//! [`EurekaAdapter`]: the fetch loop (full fetch, then deltas reconciled by
//! hashcode), the adapter's views, and the appends of their differences.
//!
//! What it does NOT do: HTTP details (see `client`), JSON (see `json`), the local
//! registry copy (see `registry`), mapping (see `mapping`), or planning and
//! appending events (see `common::emit` and `common::append`).

use std::sync::Arc;

use deltapilot_log::EventLog;
use tokio::sync::watch;
use tokio::time::Instant;

use super::client::{Fetch, Fetcher};
use super::json::Applications;
use super::mapping;
use super::options::EurekaOptions;
use super::registry::Registry;
use super::status::{EurekaAdapterStatus, FetchErrorKind, InstanceProblem};
use crate::common::append::{Outbox, Planner, flush_if_due, now_micros, publish};
use crate::common::emit::EntityMap;
use crate::generation::{GenerationStore, next_generation};
use crate::{Error, Result};

/// The Eureka adapter: polls one Eureka server and appends entity-level events. See
/// the [module docs](super) for the rules it follows.
pub struct EurekaAdapter {
    core: Core,
    fetcher: Fetcher,
    opts: EurekaOptions,
    status_tx: watch::Sender<EurekaAdapterStatus>,
}

impl std::fmt::Debug for EurekaAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EurekaAdapter")
            .field("source", &self.core.source)
            .field("url", &self.core.url)
            .finish_non_exhaustive()
    }
}

impl EurekaAdapter {
    /// Checks the options, builds the HTTP client and loads the persisted
    /// generation, so a misconfiguration fails at startup with a clear message.
    /// Makes no request yet.
    pub fn new(opts: EurekaOptions) -> Result<Self> {
        opts.validate()?;
        let fetcher = Fetcher::new(&opts)?;
        let (store, persisted_generation) = GenerationStore::open_loaded(
            opts.state_dir.as_deref(),
            "eureka-adapter",
            &opts.source_id,
            "eureka",
        )?;
        let core = Core {
            source: opts.source_id.clone(),
            namespace: opts.namespace.clone(),
            url: fetcher.url(Fetch::Full).to_string(),
            store,
            persisted_generation,
            registry: Registry::default(),
            desired: EntityMap::new(),
            problems: Vec::new(),
            outbox: Outbox::new(opts.append_batch_max),
            counters: Counters::default(),
        };
        let (status_tx, _) = watch::channel(core.status());
        Ok(Self {
            core,
            fetcher,
            opts,
            status_tx,
        })
    }

    /// The source id stamped on every event.
    pub fn source(&self) -> &str {
        &self.core.source
    }

    /// A receiver of the adapter's status, updated whenever it changes; `borrow()`
    /// is cheap, so metrics and `/readyz` read it on every request.
    pub fn status(&self) -> watch::Receiver<EurekaAdapterStatus> {
        self.status_tx.subscribe()
    }

    /// Runs the adapter until `shutdown` becomes `true` (or its sender is dropped).
    ///
    /// Picks a new generation, fetches the whole registry, appends the resync
    /// (`STARTED`, every entity, `COMPLETED`), then polls deltas every refresh
    /// interval and appends only what changed. A delta after which the local copy's
    /// hashcode differs from the server's is followed at once by a full fetch. A
    /// failed fetch keeps the last state, is retried with capped exponential backoff
    /// and jitter, and is followed by a full fetch; a log that refuses an append is
    /// retried the same way. Nothing here stops the loop: it returns `Ok` on
    /// shutdown.
    pub async fn run<L: EventLog + 'static>(
        self,
        log: Arc<L>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<()> {
        let EurekaAdapter {
            mut core,
            fetcher,
            opts,
            status_tx,
        } = self;
        core.begin();
        tracing::info!(source = %core.source, url = %core.url, generation = core.generation(), "eureka adapter: started");
        publish(&status_tx, core.status());

        let mut next_fetch = Instant::now();
        let mut need_full = true;
        let mut last_full: Option<Instant> = None;
        loop {
            if *shutdown.borrow() {
                break;
            }
            if Instant::now() >= next_fetch {
                let full_due = opts
                    .full_fetch_interval
                    .is_some_and(|every| last_full.is_some_and(|t| t.elapsed() >= every));
                let which = if need_full || full_due || !core.registry.is_loaded() {
                    Fetch::Full
                } else {
                    Fetch::Delta
                };
                let result = tokio::select! {
                    r = fetcher.fetch(which) => r,
                    changed = shutdown.changed() => {
                        if changed.is_err() {
                            break;
                        }
                        continue;
                    }
                };
                match result {
                    Ok(doc) => {
                        let reconciled = core.fetched(which, doc);
                        if which == Fetch::Full {
                            last_full = Some(Instant::now());
                            need_full = false;
                        }
                        if !reconciled {
                            // Eureka's client does the same: a copy that no longer
                            // matches the server is replaced at once, before anything
                            // is appended from it.
                            tracing::info!(
                                local = %core.registry.hashcode(),
                                server = core.counters.last_hashcode.as_deref().unwrap_or("(none)"),
                                "eureka adapter: hashcode mismatch after a delta; fetching the full registry"
                            );
                            need_full = true;
                            publish(&status_tx, core.status());
                            continue;
                        }
                        next_fetch = Instant::now() + opts.refresh_interval;
                    }
                    Err(e) => {
                        core.fetch_failed(&e);
                        need_full = true;
                        let delay = opts.backoff(core.counters.consecutive_fetch_failures);
                        tracing::warn!(error = %e, retry_in = ?delay, "eureka adapter: fetch failed; keeping the last state");
                        next_fetch = Instant::now() + delay;
                    }
                }
                publish(&status_tx, core.status());
            }
            flush_if_due(&mut core, log.as_ref(), &shutdown, "eureka", |n| {
                opts.backoff(n)
            })
            .await;
            publish(&status_tx, core.status());
            let wake = core
                .outbox
                .retry_at()
                .map_or(next_fetch, |t| t.min(next_fetch));
            tokio::select! {
                changed = shutdown.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                () = tokio::time::sleep_until(wake) => {}
            }
        }
        tracing::info!(source = %core.source, "eureka adapter: stopped");
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Counters {
    full_fetches_total: u64,
    delta_fetches_total: u64,
    fetch_failures_total: u64,
    consecutive_fetch_failures: u32,
    last_fetch_error: Option<(Option<FetchErrorKind>, String)>,
    hashcode_mismatches_total: u64,
    last_hashcode: Option<String>,
    malformed_instances_total: u64,
}

/// Everything the adapter knows.
#[derive(Debug)]
struct Core {
    source: String,
    namespace: String,
    url: String,
    store: Option<GenerationStore>,
    persisted_generation: u64,
    registry: Registry,
    desired: EntityMap,
    problems: Vec<InstanceProblem>,
    outbox: Outbox,
    counters: Counters,
}

impl Core {
    fn generation(&self) -> u64 {
        self.outbox.generation()
    }

    /// Picks this start's generation and persists it before any event uses it.
    fn begin(&mut self) {
        let generation = next_generation(self.persisted_generation, now_micros());
        self.persisted_generation = generation;
        self.outbox
            .begin(self.source.clone(), generation, &self.desired);
        if let Some(store) = &self.store
            && let Err(e) = store.save(generation)
        {
            tracing::warn!(error = %e, "eureka adapter: cannot write state file; continuing without it");
        }
    }

    /// Applies a fetched document; returns `false` when a delta left the copy out
    /// of step with the server's hashcode.
    fn fetched(&mut self, which: Fetch, doc: Applications) -> bool {
        let c = &mut self.counters;
        c.consecutive_fetch_failures = 0;
        c.last_fetch_error = None;
        c.last_hashcode.clone_from(&doc.hashcode);
        let hashcode = doc.hashcode.clone();
        let first = !self.registry.is_loaded();
        let applied = match which {
            Fetch::Full => {
                c.full_fetches_total += 1;
                self.registry.replace(doc)
            }
            Fetch::Delta => {
                c.delta_fetches_total += 1;
                self.registry.apply_delta(doc)
            }
        };
        c.malformed_instances_total += applied.malformed;
        if applied.changed || first {
            self.desired =
                mapping::desired(self.registry.instances(), &self.source, &self.namespace);
            self.outbox.mark_all(&self.desired);
        }
        let problems = self.registry.problems();
        for p in problems.iter().filter(|p| !self.problems.contains(p)) {
            tracing::warn!(problem = %p, "eureka adapter: malformed instance skipped");
        }
        self.problems = problems;
        let reconciled =
            which == Fetch::Full || self.registry.matches_hashcode(hashcode.as_deref());
        if !reconciled {
            self.counters.hashcode_mismatches_total += 1;
        }
        reconciled
    }

    fn fetch_failed(&mut self, e: &Error) {
        let c = &mut self.counters;
        c.fetch_failures_total += 1;
        c.consecutive_fetch_failures = c.consecutive_fetch_failures.saturating_add(1);
        let kind = match e {
            Error::Eureka { kind, .. } => Some(*kind),
            _ => None,
        };
        c.last_fetch_error = Some((kind, e.to_string()));
    }
}

impl Planner for Core {
    /// Nothing is appended before the first full fetch: the resync must carry the
    /// whole registry, and until Eureka answers the log keeps the last run's view.
    fn outbox(&mut self) -> Option<(&mut Outbox, &EntityMap)> {
        self.registry
            .is_loaded()
            .then_some((&mut self.outbox, &self.desired))
    }
}

impl Core {
    fn status(&self) -> EurekaAdapterStatus {
        let c = &self.counters;
        let (applications, instances) = self.registry.sizes();
        EurekaAdapterStatus {
            source: self.source.clone(),
            url: self.url.clone(),
            generation: self.generation(),
            resync_completed: self.outbox.resync_completed(),
            resync_completed_at: self.outbox.resync_completed_at(),
            registry_reachable: c.consecutive_fetch_failures == 0
                && c.full_fetches_total + c.delta_fetches_total > 0,
            consecutive_fetch_failures: c.consecutive_fetch_failures,
            last_fetch_error: c.last_fetch_error.as_ref().map(|(_, m)| m.clone()),
            last_fetch_error_kind: c.last_fetch_error.as_ref().and_then(|(k, _)| *k),
            full_fetches_total: c.full_fetches_total,
            delta_fetches_total: c.delta_fetches_total,
            fetch_failures_total: c.fetch_failures_total,
            hashcode_mismatches_total: c.hashcode_mismatches_total,
            last_hashcode: c.last_hashcode.clone(),
            applications,
            instances,
            malformed_instances_total: c.malformed_instances_total,
            entities_in_view: self.outbox.len(),
            events_emitted_total: self.outbox.events_total,
            append_failures_total: self.outbox.failures_total,
            oversized_objects_total: self.outbox.oversized_total,
            append_backlog: self.outbox.backlog(),
            last_oversized_object: self.outbox.last_oversized.clone(),
            last_append_error: self.outbox.last_error.clone(),
            problems: self.problems.clone(),
        }
    }
}
