//! `deltapilot run`: one process holding the embedded log, the in-process adapters
//! (file, Kubernetes, Eureka), the engine, the xDS server and the admin server.
//!
//! Settings come from flags, their `DELTAPILOT_*` environment variables, and an
//! optional `--config FILE` whose keys mirror the long flag names
//! (`xds-addr: 127.0.0.1:18000`, `watch: [mesh]`). Precedence: flag, then
//! environment, then config file, then the built-in default. Relative paths in a
//! config file are relative to the file's directory. Everything is validated before
//! anything starts.
//!
//! The log is the embedded one in `DATA_DIR/log` unless `--log` names another: a
//! `kafka://` topic lets several replicas serve one registry, fed by adapters in
//! this process (`--watch`, `--kubeconfig`, `--eureka-url`) or in their own
//! (`deltapilot adapter`).
//!
//! What it does NOT do: parse registries itself (the adapters do).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use deltapilot_adapters::eureka::{EurekaAdapter, EurekaOptions};
use deltapilot_adapters::file::{FileAdapter, FileAdapterOptions};
use deltapilot_adapters::kubernetes::{KubernetesAdapter, KubernetesOptions};
use deltapilot_engine::runner::Engine;
use deltapilot_log::{EventLog, Log, LogOptions, LogUri, parse_uri};
use deltapilot_server::adapter_health::{self, AdapterWatch, not_ready_reason};
use deltapilot_server::metrics::Metrics;
use deltapilot_server::xds::Limits;
use deltapilot_server::xds::service::{PublishClock, XdsShared};
use deltapilot_xds::generate::GenOptions;
use serde::Deserialize;
use tokio::sync::watch;

use super::replay::live::{self, DebugEndpoints, Live, LiveArgs, LiveFileConfig};

/// Arguments of `deltapilot run`. Every flag is optional so that a config file can
/// supply it; defaults are applied after merging.
#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// xDS gRPC listen address [default: 127.0.0.1:18000].
    #[arg(long, env = "DELTAPILOT_XDS_ADDR")]
    xds_addr: Option<SocketAddr>,
    /// Admin HTTP listen address (/healthz, /readyz, /metrics) [default: 127.0.0.1:15014].
    #[arg(long, env = "DELTAPILOT_ADMIN_ADDR")]
    admin_addr: Option<SocketAddr>,
    /// Data directory: checkpoints, adapter state, and the embedded log in
    /// DATA_DIR/log unless --log names another [default: ./data].
    #[arg(long, env = "DELTAPILOT_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// The event log to follow and serve: `file://DIR` (embedded) or
    /// `kafka://HOST:PORT[,HOST:PORT…]/TOPIC[?…]` (many replicas, adapters in
    /// their own processes) [default: file://DATA_DIR/log].
    #[arg(long, env = "DELTAPILOT_LOG", value_name = "URI")]
    log: Option<String>,
    /// A directory of Istio ServiceEntry YAML files to watch (repeatable; the env
    /// variable takes a comma-separated list).
    #[arg(
        long = "watch",
        value_name = "DIR",
        env = "DELTAPILOT_WATCH",
        value_delimiter = ','
    )]
    watch: Vec<PathBuf>,
    /// A kubeconfig naming a Kubernetes cluster to watch in-process (Services,
    /// EndpointSlices, Pods, Nodes, Istio networking objects).
    #[arg(long, env = "DELTAPILOT_KUBECONFIG", value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// Base URL of a Eureka server to read in-process, everything before `/apps`
    /// (e.g. `http://HOST:8080/eureka/v2`, or Spring Cloud's `http://HOST:8761/eureka`).
    #[arg(long, env = "DELTAPILOT_EUREKA_URL", value_name = "URL")]
    eureka_url: Option<String>,
    /// Seconds between Eureka delta polls, fractions allowed [default: 30].
    #[arg(long, env = "DELTAPILOT_EUREKA_REFRESH_SECS", value_name = "SECS")]
    eureka_refresh_secs: Option<f64>,
    /// A YAML or JSON file whose keys mirror these flags (e.g. `xds-addr`, `watch`).
    #[arg(long, value_name = "FILE", env = "DELTAPILOT_CONFIG")]
    config: Option<PathBuf>,
    /// Make sidecar outbound listeners bind their service port directly (no iptables
    /// capture needed) [default: false].
    #[arg(long, env = "DELTAPILOT_BIND_OUTBOUND", num_args = 0..=1, default_missing_value = "true")]
    bind_outbound: Option<bool>,
    /// Address sidecar outbound listeners listen on [default: 0.0.0.0].
    #[arg(long, env = "DELTAPILOT_OUTBOUND_ADDRESS")]
    outbound_address: Option<IpAddr>,
    /// Most resource names one xDS stream may subscribe to [default: 100000].
    #[arg(long, env = "DELTAPILOT_MAX_NAMES_PER_STREAM")]
    max_names_per_stream: Option<usize>,
    /// Largest xDS request accepted, in bytes [default: 4194304].
    #[arg(long, env = "DELTAPILOT_MAX_REQUEST_BYTES")]
    max_request_bytes: Option<usize>,
    /// Most resources in one delta response; the rest follow after the ACK [default: 10000].
    #[arg(long, env = "DELTAPILOT_MAX_RESOURCES_PER_RESPONSE")]
    max_resources_per_response: Option<usize>,
    /// Most concurrent xDS streams [default: 100000].
    #[arg(long, env = "DELTAPILOT_MAX_STREAMS")]
    max_streams: Option<usize>,
    /// Seconds a stream may stay silent with a response un-ACKed before it is closed [default: 300].
    #[arg(long, env = "DELTAPILOT_STALL_TIMEOUT_SECS")]
    stall_timeout_secs: Option<u64>,
    /// Seconds to wait for streams and tasks to finish after SIGTERM/SIGINT [default: 10].
    #[arg(long, env = "DELTAPILOT_DRAIN_GRACE_SECS")]
    drain_grace_secs: Option<u64>,
    /// Checkpoints and debug endpoints (see `cli/replay/live.rs`).
    #[command(flatten)]
    live: LiveArgs,
}

/// The config file: the same keys as the long flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileConfig {
    xds_addr: Option<SocketAddr>,
    admin_addr: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    log: Option<String>,
    #[serde(default)]
    watch: Vec<PathBuf>,
    kubeconfig: Option<PathBuf>,
    eureka_url: Option<String>,
    eureka_refresh_secs: Option<f64>,
    bind_outbound: Option<bool>,
    outbound_address: Option<IpAddr>,
    max_names_per_stream: Option<usize>,
    max_request_bytes: Option<usize>,
    max_resources_per_response: Option<usize>,
    max_streams: Option<usize>,
    stall_timeout_secs: Option<u64>,
    drain_grace_secs: Option<u64>,
    checkpoint_every_events: Option<u64>,
    checkpoint_every_secs: Option<u64>,
    checkpoint_keep: Option<usize>,
    debug_endpoints: Option<DebugEndpoints>,
}

/// Validated settings.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    xds_addr: SocketAddr,
    admin_addr: SocketAddr,
    data_dir: PathBuf,
    /// The log's URI as given (for messages), parsed, with its options.
    log: (String, LogUri, LogOptions),
    watch: Vec<PathBuf>,
    kubeconfig: Option<PathBuf>,
    eureka: Option<EurekaOptions>,
    gen_opts: GenOptions,
    limits: Limits,
    drain_grace: Duration,
    live: Live,
}

fn read_config(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --config {}", path.display()))?;
    // JSON is YAML too, so one parser reads both.
    let parsed: Result<FileConfig, _> = serde_yaml::from_str(&text);
    let mut cfg = parsed.with_context(|| format!("--config {}: invalid config", path.display()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let rebase = |p: PathBuf| if p.is_relative() { base.join(p) } else { p };
    cfg.data_dir = cfg.data_dir.map(rebase);
    cfg.log = cfg.log.map(|uri| rebase_file_uri(&uri, base));
    cfg.watch = cfg.watch.into_iter().map(rebase).collect();
    cfg.kubeconfig = cfg.kubeconfig.map(rebase);
    Ok(cfg)
}

/// A `file://` URI whose directory is relative, made relative to `base` (the
/// config file's directory, like every other path in it); any other URI as is.
fn rebase_file_uri(uri: &str, base: &Path) -> String {
    match uri.strip_prefix("file://") {
        Some(rest) => {
            let (dir, query) = rest
                .split_once('?')
                .map_or((rest, None), |(d, q)| (d, Some(q)));
            if Path::new(dir).is_relative() {
                let joined = base.join(dir);
                match query {
                    Some(q) => format!("file://{}?{q}", joined.display()),
                    None => format!("file://{}", joined.display()),
                }
            } else {
                uri.to_owned()
            }
        }
        None => uri.to_owned(),
    }
}

/// The log to serve: `--log` (or the config file's `log`), else the embedded log
/// in `DATA_DIR/log`. A bad URI is refused with the reason, before anything starts.
fn log_settings(
    given: Option<String>,
    data_dir: &Path,
) -> anyhow::Result<(String, LogUri, LogOptions)> {
    match given {
        Some(text) => {
            let (uri, opts) = parse_uri(&text).with_context(|| format!("--log {text}"))?;
            Ok((text, uri, opts))
        }
        None => {
            let dir = data_dir.join("log");
            Ok((
                format!("file://{}", dir.display()),
                LogUri::File { dir },
                LogOptions::default(),
            ))
        }
    }
}

impl RunArgs {
    /// Merges flags (and their env vars) over the config file over defaults, and
    /// validates the result.
    pub(crate) fn settings(self) -> anyhow::Result<Settings> {
        let file = match &self.config {
            Some(p) => read_config(p)?,
            None => FileConfig::default(),
        };
        let d = Limits::default();
        let limits = Limits {
            max_names_per_stream: self
                .max_names_per_stream
                .or(file.max_names_per_stream)
                .unwrap_or(d.max_names_per_stream),
            max_request_bytes: self
                .max_request_bytes
                .or(file.max_request_bytes)
                .unwrap_or(d.max_request_bytes),
            max_resources_per_response: self
                .max_resources_per_response
                .or(file.max_resources_per_response)
                .unwrap_or(d.max_resources_per_response),
            max_streams: self
                .max_streams
                .or(file.max_streams)
                .unwrap_or(d.max_streams),
            stall_timeout: self
                .stall_timeout_secs
                .or(file.stall_timeout_secs)
                .map(Duration::from_secs)
                .unwrap_or(d.stall_timeout),
        };
        for (name, v) in [
            ("max-names-per-stream", limits.max_names_per_stream),
            ("max-request-bytes", limits.max_request_bytes),
            (
                "max-resources-per-response",
                limits.max_resources_per_response,
            ),
            ("max-streams", limits.max_streams),
            (
                "stall-timeout-secs",
                limits.stall_timeout.as_secs() as usize,
            ),
        ] {
            if v == 0 {
                bail!("--{name} must be at least 1");
            }
        }
        if limits.max_request_bytes < 1024 {
            bail!(
                "--max-request-bytes must be at least 1024 (Envoy's first request alone is larger)"
            );
        }
        let watch = if self.watch.is_empty() {
            file.watch
        } else {
            self.watch
        };
        for w in &watch {
            if !w.is_dir() {
                bail!(
                    "--watch {}: not a directory (create it, or fix the path)",
                    w.display()
                );
            }
        }
        let xds_addr = self
            .xds_addr
            .or(file.xds_addr)
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 18000)));
        let admin_addr = self
            .admin_addr
            .or(file.admin_addr)
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 15014)));
        if xds_addr == admin_addr && xds_addr.port() != 0 {
            bail!("--xds-addr and --admin-addr are both {xds_addr}; they need different ports");
        }
        let data_dir = self
            .data_dir
            .or(file.data_dir)
            .unwrap_or_else(|| PathBuf::from("./data"));
        if data_dir.exists() && !data_dir.is_dir() {
            bail!(
                "--data-dir {}: exists and is not a directory",
                data_dir.display()
            );
        }
        let log = log_settings(self.log.or(file.log), &data_dir)?;
        let kubeconfig = self.kubeconfig.or(file.kubeconfig);
        if let Some(k) = &kubeconfig
            && !k.is_file()
        {
            bail!(
                "--kubeconfig {}: not a file (fix the path, or leave the flag out)",
                k.display()
            );
        }
        let eureka = eureka_options(
            self.eureka_url.or(file.eureka_url),
            self.eureka_refresh_secs.or(file.eureka_refresh_secs),
            &data_dir,
        )?;
        let defaults = GenOptions::default();
        let gen_opts = GenOptions {
            outbound_address: self
                .outbound_address
                .or(file.outbound_address)
                .map(|a| a.to_string())
                .unwrap_or(defaults.outbound_address),
            bind_outbound: self.bind_outbound.or(file.bind_outbound).unwrap_or(false),
            ..defaults
        };
        let drain_grace = Duration::from_secs(
            self.drain_grace_secs
                .or(file.drain_grace_secs)
                .unwrap_or(10),
        );
        let live = self.live.settings(
            LiveFileConfig {
                checkpoint_every_events: file.checkpoint_every_events,
                checkpoint_every_secs: file.checkpoint_every_secs,
                checkpoint_keep: file.checkpoint_keep,
                debug_endpoints: file.debug_endpoints,
            },
            admin_addr,
        )?;
        Ok(Settings {
            live,
            xds_addr,
            admin_addr,
            data_dir,
            log,
            watch,
            kubeconfig,
            eureka,
            gen_opts,
            limits,
            drain_grace,
        })
    }
}

async fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("cannot listen on {addr} for {what} (port in use? pick another with --{what}-addr)")
    })
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

pub(crate) async fn main(args: RunArgs) -> anyhow::Result<()> {
    let s = args.settings()?;
    let adapter = file_adapter(&s)?;
    let eureka = match &s.eureka {
        Some(opts) => Some(
            EurekaAdapter::new(opts.clone())
                .context("starting the eureka adapter (--eureka-url)")?,
        ),
        None => None,
    };
    let k8s = match &s.kubeconfig {
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
    let xds_listener =
        deltapilot_server::xds::service::bind_listener(s.xds_addr).with_context(|| {
            format!(
                "cannot listen on {} for xds (port in use? pick another with --xds-addr)",
                s.xds_addr
            )
        })?;
    let admin_listener = bind(s.admin_addr, "admin").await?;
    let (log_text, log_uri, log_opts) = &s.log;
    let log = Arc::new(
        Log::open(log_uri, log_opts)
            .await
            .with_context(|| format!("opening the log {log_text}"))?,
    );

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let checkpoints = s
        .live
        .checkpoints
        .map(|p| (live::store(&s.data_dir, &p), p));
    let restored = match &checkpoints {
        Some((store, _)) => live::restore(&log, store).await?,
        None => None,
    };
    let engine = match restored {
        Some(cp) => Engine::from_checkpoint(s.gen_opts.clone(), cp),
        None => Engine::new(s.gen_opts.clone()),
    };
    let from = if engine.position().total() > 0 {
        engine.position().clone()
    } else {
        log.start()
    };
    let snapshots = engine.reader();
    let ready = engine.ready();
    let metrics = Arc::new(Metrics::new());
    {
        // Read at scrape time: a pending resync or a held endpoint changes no
        // resource, so no snapshot tick announces it; the engine's counters
        // live in its own atomics.
        let snapshots = snapshots.clone();
        let stats = engine.stats();
        metrics.on_scrape(move |m| {
            m.follow_engine(&stats);
            let snap = snapshots.load();
            m.resyncs_pending
                .set(snap.model.pending_resyncs().count() as i64);
            m.endpoints_held.set(snap.model.held_endpoints() as i64);
        });
    }
    let clock = Arc::new(PublishClock::default());

    let mut tasks = tokio::task::JoinSet::new();
    {
        let (log, shutdown) = (log.clone(), shutdown_rx.clone());
        let from = from.clone();
        tasks.spawn(async move {
            engine
                .run(&*log, from, shutdown)
                .await
                .map(drop)
                .context("engine stopped: the log failed")
        });
    }
    {
        let (mut reader, clock, metrics, mut shutdown) = (
            snapshots.clone(),
            clock.clone(),
            metrics.clone(),
            shutdown_rx.clone(),
        );
        tasks.spawn(async move {
            loop {
                tokio::select! {
                    snap = reader.changed() => match snap {
                        Some(snap) => {
                            // Convergence is measured from when the registry change
                            // was observed; events without that time fall back to
                            // when this server first saw the snapshot.
                            let at = u64::try_from(snap.observed_at_micros)
                                .ok()
                                .filter(|m| *m > 0)
                                .map_or_else(SystemTime::now, |m| {
                                    SystemTime::UNIX_EPOCH + Duration::from_micros(m)
                                });
                            clock.record(snap.seq, at);
                            metrics.snapshot_seq.set(snap.seq as i64);
                        }
                        None => return Ok(()),
                    },
                    _ = shutdown.wait_for(|s| *s) => return Ok(()),
                }
            }
        });
    }
    let adapter_status = adapter.as_ref().map(FileAdapter::status);
    if let Some(adapter) = adapter {
        let (log, shutdown) = (log.clone(), shutdown_rx.clone());
        tasks.spawn(async move {
            adapter
                .run(log, shutdown)
                .await
                .context("file adapter stopped")
        });
    }
    if let Some((store, policy)) = checkpoints {
        tasks.spawn(live::checkpointer(
            log.clone(),
            store,
            policy,
            s.gen_opts.clone(),
            snapshots.clone(),
            from,
            shutdown_rx.clone(),
        ));
    }
    let debug = s.live.debug.then(|| (snapshots.clone(), log.clone()));
    let k8s_status = k8s.as_ref().map(KubernetesAdapter::status);
    if let Some(k8s) = k8s {
        let (log, shutdown) = (log.clone(), shutdown_rx.clone());
        tasks.spawn(async move {
            k8s.run(log, shutdown)
                .await
                .context("kubernetes adapter stopped")
        });
    }
    let eureka_status = eureka.as_ref().map(EurekaAdapter::status);
    if let Some(eureka) = eureka {
        let (log, shutdown) = (log.clone(), shutdown_rx.clone());
        tasks.spawn(async move {
            eureka
                .run(log, shutdown)
                .await
                .context("eureka adapter stopped")
        });
    }
    // Every in-process adapter, for the adapter_* metrics and /readyz.
    let adapters: Vec<AdapterWatch> = adapter_status
        .map(AdapterWatch::File)
        .into_iter()
        .chain(k8s_status.map(AdapterWatch::Kubernetes))
        .chain(eureka_status.map(AdapterWatch::Eureka))
        .collect();
    let ready_adapters = adapters.clone();
    {
        let (metrics, shutdown) = (metrics.clone(), shutdown_rx.clone());
        tasks.spawn(async move {
            adapter_health::export(adapters, metrics, shutdown).await;
            Ok(())
        });
    }
    let shared = XdsShared::new(
        snapshots,
        s.limits,
        metrics.clone(),
        shutdown_rx.clone(),
        ready.clone(),
        clock,
    );
    let debug = debug.map(|(snapshots, log)| live::debug_state(snapshots, shared.streams(), log));
    tasks.spawn(async move {
        deltapilot_server::xds::service::serve(xds_listener, shared)
            .await
            .context("xDS server failed")
    });
    {
        let ready = ready.clone();
        let mut shutdown = shutdown_rx.clone();
        tasks.spawn(async move {
            // Ready = the engine has caught up with the log head and every in-process
            // adapter's start-up resync is in the log (otherwise a fresh replica would
            // report ready while still serving the previous run's view). A Eureka
            // server (or Kubernetes API server) that has not answered since start keeps
            // the process not ready; one that goes down later does not (the last state
            // is kept and served).
            let ready_fn: deltapilot_server::admin::ReadyFn = Arc::new(move || {
                if !*ready.borrow() {
                    return Err("the engine is catching up with the log".into());
                }
                not_ready_reason(&ready_adapters).map_or(Ok(()), Err)
            });
            let routes = deltapilot_server::admin::router_with_debug(metrics, ready_fn, debug);
            deltapilot_server::admin::serve_routes(admin_listener, routes, async move {
                let _ = shutdown.wait_for(|s| *s).await;
            })
            .await
            .context("admin server failed")
        });
    }
    tracing::info!(
        xds = %s.xds_addr, admin = %s.admin_addr, data_dir = %s.data_dir.display(),
        watch = ?s.watch, kubeconfig = ?s.kubeconfig, eureka = s.eureka.as_ref().map_or("", |e| e.base_url.as_str()),
        bind_outbound = s.gen_opts.bind_outbound, "deltapilot running"
    );

    let failure = tokio::select! {
        () = terminated() => None,
        r = tasks.join_next() => Some(r),
    };
    let _ = shutdown_tx.send(true);
    let drained = tokio::time::timeout(s.drain_grace, async {
        while let Some(r) = tasks.join_next().await {
            if let Ok(Err(e)) = r {
                tracing::warn!(error = %format!("{e:#}"), "task ended with an error while draining");
            }
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(grace = ?s.drain_grace, "drain grace period over; aborting what is left");
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

/// The Eureka adapter's options for `--eureka-url`, validated before anything runs.
fn eureka_options(
    url: Option<String>,
    refresh_secs: Option<f64>,
    data_dir: &Path,
) -> anyhow::Result<Option<EurekaOptions>> {
    let Some(url) = url else {
        if refresh_secs.is_some() {
            bail!("--eureka-refresh-secs needs --eureka-url");
        }
        return Ok(None);
    };
    let mut opts = EurekaOptions::new(url);
    if let Some(secs) = refresh_secs {
        if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
            bail!("--eureka-refresh-secs {secs}: must be above 0 and at most 86400");
        }
        opts.refresh_interval = Duration::from_secs_f64(secs);
    }
    // A fixed source id (see `file_adapter`), and the generation kept next to the log.
    opts.source_id = EurekaOptions::DEFAULT_SOURCE.into();
    opts.state_dir = Some(data_dir.join("eureka-adapter"));
    opts.validate().context("--eureka-url")?;
    Ok(Some(opts))
}

/// The file adapter over every `--watch` directory, validated before anything runs.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn settings(args: &[&str]) -> anyhow::Result<Settings> {
        use clap::Parser as _;
        Cli::try_parse_from(std::iter::once("run").chain(args.iter().copied()))?
            .run
            .settings()
    }

    #[test]
    fn registries_come_from_flags_or_the_config_file() {
        let dir = tempfile::tempdir().expect("tmp");
        let data = dir.path().join("data");
        let data = data.to_str().expect("utf-8");
        let e = format!(
            "{:#}",
            settings(&["--data-dir", data, "--kubeconfig", "/nonexistent/kc"])
                .expect_err("missing")
        );
        assert!(e.contains("--kubeconfig /nonexistent/kc"), "{e}");
        std::fs::write(dir.path().join("kc.yaml"), "apiVersion: v1\nkind: Config\n").expect("kc");
        let c = dir.path().join("c.yaml");
        std::fs::write(
            &c,
            "kubeconfig: kc.yaml\neureka-url: http://127.0.0.1:8761/eureka\neureka-refresh-secs: 2\n",
        )
        .expect("config");
        let s =
            settings(&["--data-dir", data, "--config", c.to_str().expect("utf-8")]).expect("valid");
        assert_eq!(s.kubeconfig, Some(dir.path().join("kc.yaml")));
        let eureka = s.eureka.expect("eureka");
        assert_eq!(eureka.base_url, "http://127.0.0.1:8761/eureka");
        assert_eq!(eureka.refresh_interval, Duration::from_secs(2));
    }

    #[test]
    fn eureka_settings_are_checked_before_anything_runs() {
        let data = Path::new("/var/lib/dp");
        assert!(eureka_options(None, None, data).expect("none").is_none());
        let o = eureka_options(
            Some("http://127.0.0.1:8761/eureka".into()),
            Some(0.25),
            data,
        )
        .expect("valid")
        .expect("some");
        assert_eq!(o.refresh_interval, Duration::from_millis(250));
        assert_eq!(
            o.state_dir.as_deref(),
            Some(data.join("eureka-adapter").as_path())
        );
        let e = |url: Option<&str>, secs: Option<f64>| {
            format!(
                "{:#}",
                eureka_options(url.map(str::to_owned), secs, data).expect_err("invalid")
            )
        };
        assert!(e(None, Some(1.0)).contains("needs --eureka-url"));
        assert!(e(Some("ftp://x/eureka"), None).contains("scheme"));
        assert!(e(Some("http://x/eureka"), Some(0.0)).contains("above 0"));
    }

    #[test]
    fn config_file_yaml_and_json_with_relative_paths() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::create_dir(dir.path().join("mesh")).expect("mesh");
        let y = dir.path().join("c.yaml");
        std::fs::write(
            &y,
            "xds-addr: 127.0.0.1:1\nbind-outbound: true\nwatch:\n  - mesh\nmax-streams: 5\n",
        )
        .expect("write");
        let c = read_config(&y).expect("yaml");
        assert_eq!(c.xds_addr, Some("127.0.0.1:1".parse().expect("addr")));
        assert_eq!((c.bind_outbound, c.max_streams), (Some(true), Some(5)));
        assert_eq!(c.watch, [dir.path().join("mesh")]);
        let j = dir.path().join("c.json");
        std::fs::write(&j, r#"{"admin-addr": "127.0.0.1:2"}"#).expect("write");
        assert!(read_config(&j).expect("json").admin_addr.is_some());
        std::fs::write(&j, "colour: blue").expect("write");
        let e = format!("{:#}", read_config(&j).expect_err("unknown key"));
        assert!(e.contains("colour"), "{e}");
    }
}
