//! `run`'s wiring: the adapters, listeners and log it opens, and the tasks it
//! spawns around the engine (the fold, the publish clock, the adapters, the
//! checkpoint writer, adapter health, the xDS server and the admin server), all
//! in one task set that shares one shutdown signal.
//!
//! What it does NOT do: read or validate settings (see `settings`), or run any of
//! the components itself.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use deltapilot_adapters::eureka::EurekaAdapter;
use deltapilot_adapters::file::{FileAdapter, FileAdapterOptions};
use deltapilot_adapters::kubernetes::{KubernetesAdapter, KubernetesOptions};
use deltapilot_engine::runner::{Engine, StepObserver};
use deltapilot_log::{Log, Position};
use deltapilot_server::adapter_health::{self, AdapterWatch};
use deltapilot_server::admin::{DebugState, ReadyFn};
use deltapilot_server::log_health::{self, LogWatch};
use deltapilot_server::metrics::Metrics;
use deltapilot_server::readiness::{self, Inputs};
use deltapilot_server::stale_proxies;
use deltapilot_server::xds::service::{PublishClock, XdsShared};
use deltapilot_xds::snapshot::SnapshotReader;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::checkpoints::Checkpoints;
use super::settings::{LogSetting, Settings};

/// Every task of the process; each one's end is an answer to "is it still
/// running?".
pub(super) type Tasks = JoinSet<anyhow::Result<()>>;

/// The in-process adapters, built (and so checked) before anything listens.
pub(super) struct Adapters {
    file: Option<FileAdapter>,
    kubernetes: Option<KubernetesAdapter>,
    eureka: Option<EurekaAdapter>,
}

impl Adapters {
    /// The adapters the settings ask for: `--watch`, `--eureka-url`, `--kubeconfig`.
    pub(super) async fn new(s: &Settings) -> anyhow::Result<Self> {
        let file = file_adapter(s)?;
        let eureka = match &s.eureka {
            Some(opts) => Some(
                EurekaAdapter::new(opts.clone())
                    .context("starting the eureka adapter (--eureka-url)")?,
            ),
            None => None,
        };
        let kubernetes = match &s.kubeconfig {
            Some(path) => Some(
                KubernetesAdapter::from_kubeconfig(
                    Some(path),
                    KubernetesOptions {
                        state_dir: Some(s.data_dir.join("kubernetes-adapter")),
                        ..KubernetesOptions::default()
                    },
                )
                .await
                .with_context(|| {
                    format!(
                        "starting the kubernetes adapter (--kubeconfig {})",
                        path.display()
                    )
                })?,
            ),
            None => None,
        };
        Ok(Adapters {
            file,
            kubernetes,
            eureka,
        })
    }

    /// Runs every adapter as a task appending to `log`; returns their health
    /// handles, for the adapter_* metrics and /readyz.
    fn spawn(
        self,
        tasks: &mut Tasks,
        log: &Arc<Log>,
        shutdown: &watch::Receiver<bool>,
    ) -> Vec<AdapterWatch> {
        let mut watches = Vec::new();
        if let Some(adapter) = self.file {
            watches.push(AdapterWatch::File(adapter.status()));
            let (log, shutdown) = (log.clone(), shutdown.clone());
            tasks.spawn(async move {
                adapter
                    .run(log, shutdown)
                    .await
                    .context("file adapter stopped")
            });
        }
        if let Some(k8s) = self.kubernetes {
            watches.push(AdapterWatch::Kubernetes(k8s.status()));
            let (log, shutdown) = (log.clone(), shutdown.clone());
            tasks.spawn(async move {
                k8s.run(log, shutdown)
                    .await
                    .context("kubernetes adapter stopped")
            });
        }
        if let Some(eureka) = self.eureka {
            watches.push(AdapterWatch::Eureka(eureka.status()));
            let (log, shutdown) = (log.clone(), shutdown.clone());
            tasks.spawn(async move {
                eureka
                    .run(log, shutdown)
                    .await
                    .context("eureka adapter stopped")
            });
        }
        watches
    }
}

/// The file adapter over every `--watch` directory, checked before anything runs.
fn file_adapter(s: &Settings) -> anyhow::Result<Option<FileAdapter>> {
    if s.watch.is_empty() {
        return Ok(None);
    }
    let opts = FileAdapterOptions {
        // A fixed source id, not one derived from the --watch list: entities are owned
        // by their source, so a source id that changed with the flags would orphan
        // everything the previous run wrote instead of sweeping it on resync.
        source_id: Some("file".into()),
        state_dir: Some(s.data_dir.join("file-adapter")),
        ..FileAdapterOptions::default()
    };
    FileAdapter::new(s.watch.clone(), opts)
        .map(Some)
        .context("starting the file adapter (--watch)")
}

/// The xDS and admin listening sockets, bound before the log is opened so that a
/// port in use fails the start at once.
pub(super) struct Listeners {
    xds: TcpListener,
    admin: TcpListener,
}

impl Listeners {
    /// Binds `--xds-addr` and `--admin-addr`.
    pub(super) async fn bind(s: &Settings) -> anyhow::Result<Self> {
        let xds =
            deltapilot_server::xds::service::bind_listener(s.xds_addr).with_context(|| {
                format!(
                    "cannot listen on {} for xds (port in use? pick another with --xds-addr)",
                    s.xds_addr
                )
            })?;
        let admin = TcpListener::bind(s.admin_addr).await.with_context(|| {
            format!(
                "cannot listen on {} for admin (port in use? pick another with --admin-addr)",
                s.admin_addr
            )
        })?;
        Ok(Listeners { xds, admin })
    }
}

/// Opens the log to serve.
pub(super) async fn open_log(log: &LogSetting) -> anyhow::Result<Arc<Log>> {
    let opened = Log::open(&log.uri, &log.options)
        .await
        .with_context(|| format!("opening the log {}", log.text))?;
    Ok(Arc::new(opened))
}

/// What [`spawn_all`] starts from.
pub(super) struct Parts {
    pub(super) adapters: Adapters,
    pub(super) listeners: Listeners,
    pub(super) log: Arc<Log>,
    pub(super) engine: Engine,
    /// Where the engine folds on from.
    pub(super) from: Position,
    pub(super) checkpoints: Option<Checkpoints>,
}

/// Starts every task of the process, each of them stopping when `shutdown`
/// turns true.
pub(super) fn spawn_all(s: &Settings, parts: Parts, shutdown: &watch::Receiver<bool>) -> Tasks {
    let Parts {
        adapters,
        listeners,
        log,
        mut engine,
        from,
        checkpoints,
    } = parts;
    let snapshots = engine.reader();
    let ready = engine.ready();
    let metrics = engine_metrics(&engine, &snapshots);
    let clock = Arc::new(PublishClock::default());
    {
        let (metrics, clock) = (metrics.clone(), clock.clone());
        engine.observe_steps(StepObserver::new(move |done| {
            metrics.observe_step(done.times);
            // Recorded on the fold thread before the snapshot is published: a
            // task watching snapshots would skip the sequence numbers it
            // coalesces, and ACKs of those would go unmeasured.
            if let Some(seq) = done.new_seq {
                clock.record(seq, observed_at(done.observed_at_micros));
            }
        }));
    }

    let mut tasks = Tasks::new();
    {
        let (log, shutdown) = (log.clone(), shutdown.clone());
        let from = from.clone();
        tasks.spawn(async move {
            engine
                .run(&*log, from, shutdown)
                .await
                .map(drop)
                .context("engine stopped: the log failed")
        });
    }
    tasks.spawn(publish_clock(
        snapshots.clone(),
        clock.clone(),
        metrics.clone(),
        s.gen_opts.clone(),
        shutdown.clone(),
    ));
    let adapters = adapters.spawn(&mut tasks, &log, shutdown);
    let file_status: Vec<_> = adapters
        .iter()
        .filter_map(|a| match a {
            AdapterWatch::File(rx) => Some(rx.clone()),
            _ => None,
        })
        .collect();
    if let deltapilot_log::Log::File(_) = &*log {
        // The disk gauges are read at each scrape: cheap, and always current.
        let log = log.clone();
        metrics.on_scrape(move |m| {
            if let deltapilot_log::Log::File(file) = &*log {
                m.log_store
                    .set_disk(file.disk_usage(), file.horizon_offset());
            }
        });
    }
    if let Some(checkpoints) = checkpoints {
        if let LogSetting {
            uri: deltapilot_log::LogUri::File { .. },
            options,
            ..
        } = &s.log
            && (options.file.retention.compact || options.file.retention.delete)
        {
            tasks.spawn(checkpoints.retain_while_running(
                log.clone(),
                options.file.retention,
                metrics.clone(),
                shutdown.clone(),
            ));
        }
        let stats = checkpoints.stats();
        metrics.on_scrape(move |m| m.follow_checkpoints(&stats));
        tasks.spawn(checkpoints.write_while_running(
            log.clone(),
            s.gen_opts.clone(),
            snapshots.clone(),
            from,
            shutdown.clone(),
        ));
    }
    let log_watch = LogWatch::new(&log);
    {
        let (watch, snapshots) = (log_watch.clone(), snapshots.clone());
        metrics.on_scrape(move |m| {
            watch.export(m);
            if let Some(head) = watch.settled_head() {
                m.set_log_lag(&head, &snapshots.load().position);
            }
        });
        let (log, watch, shutdown) = (log.clone(), log_watch.clone(), shutdown.clone());
        tasks.spawn(async move {
            log_health::probe(log, watch, shutdown).await;
            Ok(())
        });
    }
    let ready_fn = ready_fn(
        ready.clone(),
        adapters.clone(),
        log_watch,
        snapshots.clone(),
    );
    {
        let (metrics, shutdown) = (metrics.clone(), shutdown.clone());
        tasks.spawn(async move {
            adapter_health::export(adapters, metrics, shutdown).await;
            Ok(())
        });
    }
    let debug_snapshots = s.debug_endpoints.then(|| snapshots.clone());
    let shared_snapshots = snapshots.clone();
    let shared = XdsShared::new(
        snapshots,
        s.limits,
        metrics.clone(),
        shutdown.clone(),
        ready,
        clock,
    );
    let credentials = deltapilot_server::credentials::CredentialStore::new(
        s.credentials_dir.clone(),
        Some(metrics.clone()),
    );
    shared.set_credentials(credentials.clone());
    match deltapilot_server::credentials::spawn_watcher(credentials.clone(), shutdown.clone()) {
        Ok(Some(watcher)) => {
            tasks.spawn(async move { watcher.await.context("credentials watcher failed") });
        }
        Ok(None) => {}
        Err(e) => {
            tasks.spawn(async move { Err(e.context("watching --credentials-dir")) });
        }
    }
    {
        let (streams, snapshots) = (shared.streams(), shared_snapshots.clone());
        let (metrics, shutdown) = (metrics.clone(), shutdown.clone());
        tasks.spawn(async move {
            stale_proxies::export(streams, snapshots, metrics, shutdown).await;
            Ok(())
        });
    }
    let debug = debug_snapshots.map(|snapshots| {
        DebugState::new(
            snapshots,
            shared.streams(),
            Some(log),
            s.gen_opts.clone(),
            file_status,
        )
        .with_credentials(credentials.clone())
    });
    let (xds_conn, admin_conn) = (s.xds_conn, s.admin_conn);
    if let Some(tls) = &s.xds_tls {
        let (tls, metrics, shutdown) = (tls.clone(), metrics.clone(), shutdown.clone());
        tasks.spawn(async move {
            deltapilot_server::tls::reload::watch_files(tls, metrics, shutdown).await;
            Ok(())
        });
    }
    let xds_tls = s.xds_tls.clone();
    tasks.spawn(async move {
        deltapilot_server::xds::service::serve_tls(listeners.xds, shared, xds_conn, xds_tls)
            .await
            .context("xDS server failed")
    });
    {
        let mut shutdown = shutdown.clone();
        let admin_guard = s.admin_guard.clone();
        tasks.spawn(async move {
            let routes = deltapilot_server::admin::router_guarded(
                metrics.clone(),
                ready_fn,
                debug,
                admin_guard.token,
                admin_guard.limits,
            );
            let stop = async move {
                let _ = shutdown.wait_for(|s| *s).await;
            };
            deltapilot_server::admin::serve_routes(
                listeners.admin,
                routes,
                admin_conn,
                &metrics,
                stop,
            )
            .await
            .context("admin server failed")
        });
    }
    tasks
}

/// The process's metrics, with the engine's read at scrape time: a pending resync
/// or a held endpoint changes no resource, so no snapshot tick announces it; the
/// engine's counters live in its own atomics.
fn engine_metrics(engine: &Engine, snapshots: &SnapshotReader) -> Arc<Metrics> {
    let metrics = Arc::new(Metrics::new());
    let snapshots = snapshots.clone();
    let stats = engine.stats();
    metrics.on_scrape(move |m| {
        m.follow_engine(&stats);
        let snap = snapshots.load();
        m.resyncs_pending
            .set(snap.model.pending_resyncs().count() as i64);
        m.endpoints_held.set(snap.model.held_endpoints() as i64);
    });
    metrics
}

/// Convergence is measured from when the registry change was observed; events
/// without that time fall back to now (when this server made or saw the
/// snapshot).
fn observed_at(micros: i64) -> SystemTime {
    u64::try_from(micros)
        .ok()
        .filter(|m| *m > 0)
        .map_or_else(SystemTime::now, |m| {
            SystemTime::UNIX_EPOCH + Duration::from_micros(m)
        })
}

/// Keeps the snapshot-derived gauges (rule counts, seq, views) current, and
/// times the snapshots the fold did not announce, until shutdown or the last
/// snapshot.
async fn publish_clock(
    mut reader: SnapshotReader,
    clock: Arc<PublishClock>,
    metrics: Arc<Metrics>,
    opts: deltapilot_xds::generate::GenOptions,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut counted: Option<(std::time::Instant, deltapilot_model::rules::RuleIndex)> = None;
    loop {
        tokio::select! {
            snap = reader.changed() => match snap {
                Some(snap) => {
                    let rules = snap.model.rules();
                    let stale = counted.as_ref().is_none_or(|(at, seen)| {
                        seen != rules || (!rules.is_empty() && at.elapsed() >= RULE_COUNTS_EVERY)
                    });
                    if stale {
                        set_rule_counts(&metrics, &snap.model, &opts);
                        counted = Some((std::time::Instant::now(), rules.clone()));
                    }
                    // Snapshots the fold did not announce (the first one, a
                    // restored state) are timed from when this task saw them.
                    clock.record(snap.seq, observed_at(snap.observed_at_micros));
                    metrics.snapshot_seq.set(snap.seq as i64);
                    // The three default views (one per proxy type), the scoped
                    // and the gateway ones.
                    let n = snap.views.len() + snap.views.gateways().count();
                    metrics.views.set(3 + n as i64);
                    metrics
                        .gateway_sets_truncated
                        .set(i64::from(snap.views.gateway_sets_truncated()));
                }
                None => return Ok(()),
            },
            _ = shutdown.wait_for(|s| *s) => return Ok(()),
        }
    }
}

/// How often the rule gauges are recomputed while rules exist and nothing in
/// them changed (a service change can still change a route's problems): the
/// translation check is O(rules × ports), too much for every snapshot.
const RULE_COUNTS_EVERY: Duration = Duration::from_secs(1);

/// Sets the `rules` and `rule_problems` gauges from `model`.
fn set_rule_counts(
    metrics: &Metrics,
    model: &deltapilot_model::state::ModelState,
    opts: &deltapilot_xds::generate::GenOptions,
) {
    let counts = deltapilot_server::admin::rules_view::rule_counts(model, opts);
    metrics.rules.clear();
    metrics.rule_problems.clear();
    for (status, n) in counts.by_status {
        metrics
            .rules
            .get_or_create(&[("status", status)])
            .set(n as i64);
    }
    for (code, n) in counts.by_code {
        metrics
            .rule_problems
            .get_or_create(&[("code", code)])
            .set(n as i64);
    }
}

/// `/readyz`: not ready until the engine has caught up with the log head and
/// every in-process adapter's start-up resync is in the log (otherwise a fresh
/// replica would report ready while still serving the previous run's view). A
/// Eureka server (or Kubernetes API server) that has not answered since start
/// keeps the process not ready; one that goes down later does not (the last
/// state is kept and served). After that, "caught up" or "serving the last good
/// state" (log unreachable or ahead of the engine, an adapter that cannot
/// append), both ready: see `readiness`.
fn ready_fn(
    engine_ready: watch::Receiver<bool>,
    adapters: Vec<AdapterWatch>,
    log: Arc<LogWatch>,
    snapshots: SnapshotReader,
) -> ReadyFn {
    Arc::new(move || {
        let reports: Vec<_> = adapters.iter().map(AdapterWatch::report).collect();
        let snap = snapshots.load();
        readiness::evaluate(&Inputs {
            engine_caught_up: *engine_ready.borrow(),
            adapters: &reports,
            log: log.health(),
            probe_error: log.probe_error(),
            settled_head: log.settled_head(),
            engine_position: &snap.position,
        })
    })
}

/// Waits for SIGTERM, SIGINT or the first task to end, then tells every task to
/// stop and waits for them for `grace`, aborting what is left after it. An
/// error if a task ended (or panicked) before any signal.
pub(super) async fn run_until_stopped(
    mut tasks: Tasks,
    shutdown: watch::Sender<bool>,
    grace: Duration,
) -> anyhow::Result<()> {
    let failure = tokio::select! {
        () = terminated() => None,
        r = tasks.join_next() => Some(r),
    };
    let _ = shutdown.send(true);
    let drained = tokio::time::timeout(grace, async {
        while let Some(r) = tasks.join_next().await {
            if let Ok(Err(e)) = r {
                tracing::warn!(error = %format!("{e:#}"), "task ended with an error while draining");
            }
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(grace = ?grace, "drain grace period over; aborting what is left");
        tasks.abort_all();
    }
    match failure {
        None => Ok(()),
        Some(Some(Ok(Ok(())))) => bail!("a component stopped unexpectedly"),
        Some(Some(Ok(Err(e)))) => Err(e),
        Some(Some(Err(e))) => Err(anyhow::anyhow!("a component panicked: {e}")),
        Some(None) => Ok(()),
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn terminated() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGTERM; only SIGINT stops deltapilot");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = term => tracing::info!("SIGTERM: draining"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: draining"),
    }
}
