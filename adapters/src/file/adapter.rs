//! [`FileAdapter`]: the watched directories, the adapter's views, and the loop that
//! appends their differences to the log.
//!
//! What it does NOT do: parse YAML (see `parse`), compare files (see `scan`), build
//! the desired view (see `view`), plan or append events (see `common::emit` and
//! `common::append`), or serve metrics (the server reads [`FileAdapterStatus`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use deltapilot_log::EventLog;
use deltapilot_proto::Event;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

use super::offline::Origin;
use super::options::FileAdapterOptions;
use super::scan::Scanner;
use super::state::{StateStore, next_generation};
use super::status::{FileAdapterStatus, FileProblem};
use super::view::{self, EntityMap};
use super::watch::{DirWatcher, Dirty};
use crate::common::append::{Outbox, Planner, flush_if_due, now_micros, publish};
use crate::{Error, Result};

/// The file adapter: turns a set of directories of Istio YAML into entity-level
/// events. See the [module docs](super) for the rules it follows.
pub struct FileAdapter {
    core: Core,
    opts: FileAdapterOptions,
    status_tx: watch::Sender<FileAdapterStatus>,
}

impl std::fmt::Debug for FileAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileAdapter")
            .field("source", &self.core.source)
            .field("dirs", &self.core.scanner.dirs())
            .finish_non_exhaustive()
    }
}

impl FileAdapter {
    /// Checks the options and the directories (each must exist and be a directory)
    /// and loads the persisted state, so a misconfiguration fails at startup with a
    /// clear message. Reads no watched file yet.
    pub fn new(dirs: Vec<PathBuf>, opts: FileAdapterOptions) -> Result<Self> {
        opts.validate()?;
        if dirs.is_empty() {
            return Err(Error::InvalidConfig(
                "the file adapter needs at least one directory to watch".into(),
            ));
        }
        let mut abs = Vec::with_capacity(dirs.len());
        let mut canonical = BTreeSet::new();
        for d in dirs {
            let a = std::path::absolute(&d).map_err(|source| Error::Io {
                op: "resolve watched directory",
                path: d.clone(),
                source,
            })?;
            let meta = std::fs::metadata(&a).map_err(|source| Error::Io {
                op: "open watched directory",
                path: a.clone(),
                source,
            })?;
            if !meta.is_dir() {
                return Err(Error::InvalidConfig(format!(
                    "{} is not a directory",
                    a.display()
                )));
            }
            let c = std::fs::canonicalize(&a).map_err(|source| Error::Io {
                op: "resolve watched directory",
                path: a.clone(),
                source,
            })?;
            if canonical.insert(c) {
                abs.push(a);
            }
        }
        let source = match &opts.source_id {
            Some(id) => id.clone(),
            None => {
                let joined: Vec<String> =
                    canonical.iter().map(|c| c.display().to_string()).collect();
                format!("file:{}", joined.join(","))
            }
        };
        let mut scanner = Scanner::new(abs, opts.max_file_bytes);
        let mut persisted_generation = 0;
        let store = match &opts.state_dir {
            None => None,
            Some(dir) => {
                let store = StateStore::open(dir, &source)?;
                match store.load() {
                    Ok(loaded) => {
                        persisted_generation = loaded.generation;
                        scanner.restore(loaded.files);
                    }
                    Err(e) => tracing::warn!(
                        state_file = %store.path().display(),
                        error = %e,
                        "file adapter: ignoring unusable state file; starting without it"
                    ),
                }
                Some(store)
            }
        };
        let core = Core {
            source: source.clone(),
            scanner,
            store,
            persisted_generation,
            outbox: Outbox::new(opts.append_batch_max),
            desired: EntityMap::new(),
            desired_stale: true,
            conflicts: Vec::new(),
            origins: Arc::default(),
            counters: Counters::default(),
        };
        let (status_tx, _) = watch::channel(core.status());
        Ok(Self {
            core,
            opts,
            status_tx,
        })
    }

    /// The source id stamped on every event (`file:<canonical dirs>` unless
    /// [`FileAdapterOptions::source_id`] names one).
    pub fn source(&self) -> &str {
        &self.core.source
    }

    /// The watched directories, absolute.
    pub fn dirs(&self) -> &[PathBuf] {
        self.core.scanner.dirs()
    }

    /// A receiver of the adapter's status, updated whenever it changes; `borrow()`
    /// is cheap, so metrics and `/readyz` read it on every request.
    pub fn status(&self) -> watch::Receiver<FileAdapterStatus> {
        self.status_tx.subscribe()
    }

    /// Scans every directory once and returns the events that bring a log up to
    /// date: on the first call the whole resync (`STARTED`, every entity,
    /// `COMPLETED`) at a new generation, afterwards only the changes since the
    /// previous call. The events count as emitted: the caller appends them. Blocking
    /// filesystem I/O; meant for tests, dry runs and one-shot tools. [`Self::run`]
    /// continues from the state this leaves.
    pub fn scan_once(&mut self) -> Vec<Event> {
        self.core.begin_if_needed();
        self.core.scan(&Dirty::All);
        let mut out = Vec::new();
        // Each plan commits at least one event or is empty; the bound only guards
        // against a planning bug looping forever.
        let core = &mut self.core;
        let bound = core.desired.len() + core.outbox.len() + 3;
        for _ in 0..bound {
            let plan = core.outbox.plan(&core.desired, now_micros());
            if plan.is_empty() {
                break;
            }
            core.outbox.commit(&plan, &core.desired);
            out.extend(plan);
        }
        self.publish();
        out
    }

    /// Runs the adapter until `shutdown` becomes `true` (or its sender is dropped):
    /// resyncs at a new generation, then appends each change the watcher or the
    /// periodic rescan finds. A log that refuses appends is retried with capped
    /// exponential backoff and jitter, keeping the last state; bad input is reported
    /// in the status and never stops the loop. Returns `Err` only when the watcher
    /// cannot be created or a scan task dies.
    pub async fn run<L: EventLog + 'static>(
        self,
        log: Arc<L>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<()> {
        let FileAdapter {
            mut core,
            opts,
            status_tx,
        } = self;
        let mut watcher = DirWatcher::new(core.scanner.dirs().to_vec())?;
        for d in core.scanner.dirs() {
            if let Err(e) = watcher.watch(d) {
                tracing::warn!(error = %e, "file adapter: cannot watch directory; the periodic rescan retries");
            }
        }
        // Watching starts before the first scan, so nothing written in between is missed.
        core = blocking(core, |c| {
            c.begin_if_needed();
            c.scan(&Dirty::All);
        })
        .await?;
        tracing::info!(source = %core.source, generation = core.generation(), dirs = ?core.scanner.dirs(), "file adapter: started, resyncing");
        publish(&status_tx, core.status());

        let mut rescan =
            tokio::time::interval_at(Instant::now() + opts.rescan_interval, opts.rescan_interval);
        rescan.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut watching = true;
        loop {
            if *shutdown.borrow() {
                break;
            }
            flush_if_due(&mut core, log.as_ref(), &shutdown, "file", |n| {
                opts.backoff(n)
            })
            .await;
            publish(&status_tx, core.status());
            let retry_at = core.outbox.retry_at();
            tokio::select! {
                changed = shutdown.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                () = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {}
                first = watcher.first(), if watching => match first {
                    Some(first) => {
                        // Not cancellable by the other branches: a burst is bounded by
                        // `max_debounce`, and abandoning it would lose its signals.
                        let dirty = watcher.burst(first, opts.debounce, opts.max_debounce).await;
                        rewatch(&mut watcher, &core, &dirty);
                        core = blocking(core, move |c| c.scan(&dirty)).await?;
                    }
                    None => {
                        watching = false;
                        tracing::warn!("file adapter: the watcher stopped; relying on periodic rescans");
                    }
                },
                _ = rescan.tick() => {
                    rewatch(&mut watcher, &core, &Dirty::All);
                    core = blocking(core, |c| c.scan(&Dirty::All)).await?;
                }
            }
            publish(&status_tx, core.status());
        }
        tracing::info!(source = %core.source, "file adapter: stopped");
        Ok(())
    }

    fn publish(&self) {
        publish(&self.status_tx, self.core.status());
    }
}

/// Re-adds watches for the directories about to be rescanned, so one deleted and
/// re-created is watched again.
fn rewatch(watcher: &mut DirWatcher, core: &Core, dirty: &Dirty) {
    for (i, d) in core.scanner.dirs().iter().enumerate() {
        let hit = match dirty {
            Dirty::All => true,
            Dirty::Dirs(set) => set.contains(&i),
        };
        if hit && let Err(e) = watcher.watch(d) {
            tracing::debug!(error = %e, "file adapter: cannot watch directory");
        }
    }
}

/// Moves the core into a blocking task (filesystem I/O and parsing) and back.
async fn blocking(mut core: Core, f: impl FnOnce(&mut Core) + Send + 'static) -> Result<Core> {
    tokio::task::spawn_blocking(move || {
        f(&mut core);
        core
    })
    .await
    .map_err(|e| Error::Task(e.to_string()))
}

#[derive(Debug, Default)]
struct Counters {
    scans_total: u64,
    malformed_documents_total: u64,
    invalid_files_total: u64,
}

/// Everything the adapter knows, movable into a blocking task.
#[derive(Debug)]
struct Core {
    source: String,
    scanner: Scanner,
    store: Option<StateStore>,
    persisted_generation: u64,
    outbox: Outbox,
    desired: EntityMap,
    desired_stale: bool,
    conflicts: Vec<FileProblem>,
    /// Where each object in force was written (see [`FileAdapterStatus::origins`]).
    origins: Arc<BTreeMap<String, Origin>>,
    counters: Counters,
}

impl Core {
    fn generation(&self) -> u64 {
        self.outbox.generation()
    }

    /// Picks this start's generation and persists it before any event uses it.
    fn begin_if_needed(&mut self) {
        if self.outbox.begun() {
            return;
        }
        let generation = next_generation(self.persisted_generation, now_micros());
        self.persisted_generation = generation;
        self.outbox
            .begin(self.source.clone(), generation, &self.desired);
        self.persist();
    }

    fn scan(&mut self, dirty: &Dirty) {
        let counts = match dirty {
            Dirty::All => self.scanner.scan_all(),
            Dirty::Dirs(set) => {
                let mut total = super::scan::ScanCounts::default();
                for &i in set {
                    total.add(self.scanner.scan_dir(i));
                }
                total
            }
        };
        self.counters.scans_total += 1;
        self.counters.malformed_documents_total += counts.malformed_documents;
        self.counters.invalid_files_total += counts.invalid_files;
        if counts.changed || self.desired_stale {
            let (desired, conflicts) = view::desired(self.scanner.effective());
            for c in conflicts.iter().filter(|c| !self.conflicts.contains(c)) {
                tracing::warn!(problem = %c, "file adapter: definition left out");
            }
            self.desired = desired;
            self.outbox.mark_all(&self.desired);
            self.conflicts = conflicts;
            self.origins = Arc::new(self.scanner.origins());
            self.desired_stale = false;
            self.persist();
        }
    }

    fn persist(&self) {
        if let Some(store) = &self.store
            && let Err(e) = store.save(self.persisted_generation, self.scanner.effective())
        {
            tracing::warn!(error = %e, "file adapter: cannot write state file; continuing without it");
        }
    }
}

impl Planner for Core {
    fn outbox(&mut self) -> Option<(&mut Outbox, &EntityMap)> {
        Some((&mut self.outbox, &self.desired))
    }
}

impl Core {
    fn status(&self) -> FileAdapterStatus {
        let (files_ok, files_bad) = self.scanner.file_counts();
        let mut problems: Vec<FileProblem> = self
            .scanner
            .problems()
            .chain(&self.conflicts)
            .cloned()
            .collect();
        problems.sort_by(|a, b| (&a.path, a.document, a.line).cmp(&(&b.path, b.document, b.line)));
        let c = &self.counters;
        FileAdapterStatus {
            source: self.source.clone(),
            generation: self.generation(),
            resync_completed: self.outbox.resync_completed(),
            resync_completed_at: self.outbox.resync_completed_at(),
            files_ok,
            files_bad,
            entities_in_view: self.outbox.len(),
            events_emitted_total: self.outbox.events_total,
            scans_total: c.scans_total,
            malformed_documents_total: c.malformed_documents_total,
            invalid_files_total: c.invalid_files_total,
            append_failures_total: self.outbox.failures_total,
            oversized_objects_total: self.outbox.oversized_total,
            append_backlog: self.outbox.backlog(),
            last_oversized_object: self.outbox.last_oversized.clone(),
            last_append_error: self.outbox.last_error.clone(),
            problems,
            origins: self.origins.clone(),
        }
    }
}
