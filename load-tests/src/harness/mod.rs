//! One load-generator run, phase by phase:
//!
//! 1. raise the file-descriptor limit (or stop with the `ulimit -n` to use);
//! 2. write the initial mesh, start the server (`--spawn`) or aim at one
//!    (`--target`), and wait until it serves the whole mesh;
//! 3. connect the fleet and time the initial sync; read the server's RSS before
//!    and after;
//! 4. optionally, the reconnect storm;
//! 5. churn at the scenario's rate, then wait for the last changes to converge;
//! 6. optionally, the baseline: replay what proxy 0 received to the same fleet
//!    through a plain tonic server;
//! 7. stop everything and assemble the report.
//!
//! What it does NOT do: parse flags (see the crate root) or format output (see
//! `report`, `plot`).

mod phases;
mod replay;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use deltapilot_log::{Log, parse_uri};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use crate::churn::Churn;
use crate::fdlimit;
use crate::mesh::Mesh;
use crate::metrics::Scrape;
use crate::procstat::{self, ProcSample};
use crate::progress::Progress;
use crate::proxy::Behaviour;
use crate::proxy::fleet::{Fleet, FleetConfig};
use crate::report::{BehaviourCounts, Report};
use crate::scenario::Scenario;
use crate::server::{ServerDirs, Spawned};
use crate::sink::Sink;
use crate::stats::{ms, percentiles};
use crate::tracker::Tracker;

/// How long RSS is left to settle after a phase before it is read.
const SETTLE: Duration = Duration::from_secs(1);

/// Which server, and how churn reaches it.
#[derive(Debug, Clone)]
pub enum Target {
    /// Start `deltapilot run` on a temporary directory.
    Spawn {
        /// The binary.
        bin: PathBuf,
        /// Keep the temporary directory (server log, data) after the run.
        keep: bool,
        /// A `kafka://` log for the server to follow (`deltapilot run --log`);
        /// the load generator appends the mesh and churn to it. `None`: the
        /// embedded log, fed through the file adapter.
        log: Option<String>,
    },
    /// Start a peer control plane (`--peer`) on a temporary directory; churn
    /// reaches it as ServiceEntry files, as it reaches a spawned deltapilot.
    Peer {
        /// Which peer.
        peer: crate::peer::Peer,
        /// Its binary.
        bin: PathBuf,
        /// The go-control-plane cache it uses (`linear` or `snapshot`); istiod
        /// has its own and ignores it.
        cache: crate::peer::PeerCache,
        /// Keep the temporary directory (the peer's output) after the run.
        keep: bool,
    },
    /// A server already running.
    Remote {
        /// Its xDS address.
        xds: SocketAddr,
        /// A log the load generator appends churn to.
        log: Option<String>,
        /// Or a directory its file adapter watches.
        watch_dir: Option<PathBuf>,
        /// Its admin address (`/metrics`).
        admin: Option<SocketAddr>,
        /// Its process id, when it runs on this machine.
        pid: Option<u32>,
        /// Its embedded log directory, to read append times from (file-adapter churn).
        observe_log: Option<PathBuf>,
    },
}

/// A fully resolved run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The scenario, with command-line overrides applied.
    pub scenario: Scenario,
    /// The server.
    pub target: Target,
    /// Draw the progress line (on a terminal).
    pub progress: bool,
    /// The load generator's own binary and the arguments before
    /// `--baseline-serve`, to run the baseline replay server as a child process;
    /// `None` runs it in this process (library use, tests).
    pub baseline_exe: Option<(PathBuf, Vec<String>)>,
}

/// Where the server's CPU and memory come from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServerStats {
    pid: Option<u32>,
    admin: Option<SocketAddr>,
}

impl ServerStats {
    pub(crate) async fn sample(&self) -> Option<ProcSample> {
        if let Some(pid) = self.pid {
            return procstat::sample(pid);
        }
        let s = self.scrape().await?;
        let cpu = s.sum("process_cpu_seconds_total");
        let rss = s.sum("process_resident_memory_bytes");
        (cpu.is_some() || rss.is_some()).then(|| ProcSample {
            cpu_seconds: cpu.unwrap_or(0.0),
            rss_bytes: rss.unwrap_or(0.0) as u64,
            ..Default::default()
        })
    }

    pub(crate) async fn scrape(&self) -> Option<Scrape> {
        Scrape::fetch(self.admin?).await.ok()
    }

    fn source(&self) -> String {
        match (self.pid, self.admin) {
            (Some(pid), _) => format!("/proc/{pid}"),
            (None, Some(a)) => format!("http://{a}/metrics"),
            (None, None) => "none".into(),
        }
    }
}

/// Proxy behaviours: proxy 0 (whose responses the baseline replays) stays
/// normal; the misbehaving ones are spread over the rest by a seeded shuffle.
pub(crate) fn behaviours(sc: &Scenario) -> (Vec<Behaviour>, BehaviourCounts) {
    let n = sc.proxies;
    let count = |f: f64| ((f * n as f64).round() as usize).min(n.saturating_sub(1));
    let b = &sc.behaviour;
    let (nack, slow, stall) = (
        count(b.nack_fraction),
        count(b.slow_fraction),
        count(b.stall_fraction),
    );
    let mut idx: Vec<usize> = (1..n).collect();
    idx.shuffle(&mut StdRng::seed_from_u64(sc.seed ^ 0xbe4a));
    let mut out = vec![Behaviour::Normal; n];
    let mut it = idx.into_iter();
    for (k, beh) in [
        (nack, Behaviour::Nack),
        (slow, Behaviour::Slow),
        (stall, Behaviour::Stall),
    ] {
        for i in it.by_ref().take(k) {
            out[i] = beh;
        }
    }
    let counts = BehaviourCounts {
        normal: out.iter().filter(|b| **b == Behaviour::Normal).count(),
        slow: out.iter().filter(|b| **b == Behaviour::Slow).count(),
        nack: out.iter().filter(|b| **b == Behaviour::Nack).count(),
        stall: out.iter().filter(|b| **b == Behaviour::Stall).count(),
    };
    (out, counts)
}

struct Server {
    xds: SocketAddr,
    sink: Sink,
    stats: ServerStats,
    observe_log: Option<PathBuf>,
    spawned: Option<Spawned>,
    dirs: Option<ServerDirs>,
}

async fn prepare(plan: &Plan, mesh: &Mesh) -> anyhow::Result<Server> {
    let sc = &plan.scenario;
    match &plan.target {
        Target::Spawn { bin, log, .. } => {
            let dirs = ServerDirs::create()?;
            let sink = match log {
                Some(uri) => Sink::log(open_log(uri).await?),
                None => Sink::Files {
                    dir: dirs.watch.clone(),
                },
            };
            sink.write_initial(mesh).await?;
            let within = Duration::from_secs(sc.timeouts.server_secs);
            let spawned = Spawned::start(bin, &dirs, log.as_deref(), &sc.server, within).await?;
            Ok(Server {
                xds: spawned.xds,
                stats: ServerStats {
                    pid: Some(spawned.pid()),
                    admin: spawned.admin,
                },
                // Churn through a log is timed from the load generator's own
                // append; only the file adapter's appends need reading back.
                observe_log: log.is_none().then(|| dirs.log_dir()),
                sink,
                spawned: Some(spawned),
                dirs: Some(dirs),
            })
        }
        Target::Peer {
            peer, bin, cache, ..
        } => {
            let dirs = ServerDirs::create()?;
            let sink = Sink::Files {
                dir: dirs.watch.clone(),
            };
            sink.write_initial(mesh).await?;
            let within = Duration::from_secs(sc.timeouts.server_secs);
            let spawned = match peer {
                crate::peer::Peer::GoControlPlane => {
                    Spawned::start_gcp_peer(bin, &dirs, cache.as_str(), within).await?
                }
                crate::peer::Peer::Istiod => Spawned::start_istiod_peer(bin, &dirs, within).await?,
            };
            Ok(Server {
                xds: spawned.xds,
                stats: ServerStats {
                    pid: Some(spawned.pid()),
                    admin: None,
                },
                // No log: convergence runs from the file's write.
                observe_log: None,
                sink,
                spawned: Some(spawned),
                dirs: Some(dirs),
            })
        }
        Target::Remote {
            xds,
            log,
            watch_dir,
            admin,
            pid,
            observe_log,
        } => {
            let sink = match (log, watch_dir) {
                (Some(uri), _) => Sink::log(open_log(uri).await?),
                (None, Some(dir)) => Sink::Files { dir: dir.clone() },
                (None, None) => anyhow::bail!(
                    "--target needs --log URI or --watch-dir DIR to write the mesh and churn"
                ),
            };
            sink.write_initial(mesh).await?;
            Ok(Server {
                xds: *xds,
                sink,
                stats: ServerStats {
                    pid: *pid,
                    admin: *admin,
                },
                observe_log: observe_log.clone(),
                spawned: None,
                dirs: None,
            })
        }
    }
}

/// Opens `--log URI` to append the mesh and churn to.
async fn open_log(uri: &str) -> anyhow::Result<Log> {
    let (u, o) = parse_uri(uri).with_context(|| format!("--log {uri}"))?;
    Log::open(&u, &o).await.with_context(|| {
        format!("opening --log {uri} (a deltapilot run holding this embedded log refuses a second writer; use --watch-dir with its watched directory instead)")
    })
}

/// Runs the plan and returns the report.
pub async fn execute(plan: Plan) -> anyhow::Result<Report> {
    let sc = plan.scenario.clone();
    sc.validate()?;
    let in_process = sc.baseline && plan.baseline_exe.is_none();
    let per_proxy = if in_process { 2 } else { 1 };
    let need = sc.proxies as u64 * per_proxy + fdlimit::RESERVE;
    fdlimit::ensure(
        need,
        &format!(
            "{} proxies{}",
            sc.proxies,
            if in_process {
                " plus the in-process baseline server"
            } else {
                ""
            }
        ),
    )?;

    let mut rng = StdRng::seed_from_u64(sc.seed);
    let mesh = Mesh::new(&sc.mesh, &mut rng);
    let (behaviours, counts) = behaviours(&sc);
    let mut report = Report {
        scenario: sc.name.clone(),
        api: sc.api.as_str().into(),
        proxies: sc.proxies,
        behaviours: counts,
        mesh_services: mesh.services.len(),
        mesh_endpoints: mesh.endpoint_count(),
        churn_rate: sc.churn.rate,
        ..Default::default()
    };
    let mut server = prepare(&plan, &mesh).await?;
    report.server = match &plan.target {
        Target::Peer { peer, cache, .. } => match peer.cache(*cache) {
            Some(c) => format!("peer {} ({c} cache)", peer.as_str()),
            None => format!("peer {}", peer.as_str()),
        },
        Target::Spawn { .. } => "spawn".into(),
        Target::Remote { .. } => "target".into(),
    };
    report.churn_path = match (&plan.target, server.sink.stamps_itself()) {
        (Target::Peer { .. }, _) => "files (peer's own watcher)",
        (_, true) => "file-adapter",
        (_, false) => "log",
    }
    .into();
    report.server_stats_source = server.stats.source();
    let progress = Progress::start(plan.progress, server.stats.pid);
    let result = run_phases(
        &sc,
        &plan,
        &mut server,
        mesh,
        &behaviours,
        &progress,
        &mut report,
    )
    .await;
    progress.finish().await;
    if let Some(s) = server.stats.sample().await {
        report.server_cpu_seconds = Some(s.cpu_seconds);
        if s.peak_rss_bytes > 0 {
            report.server_peak_rss_bytes = Some(s.peak_rss_bytes);
        }
    }
    if let Some(me) = procstat::sample(std::process::id()) {
        report.loadgen_cpu_seconds = Some(me.cpu_seconds);
        report.loadgen_peak_rss_bytes = Some(me.peak_rss_bytes);
    }
    if let Some(spawned) = server.spawned.take() {
        if result.is_err() {
            eprintln!("server output (tail):\n{}", spawned.output_tail());
        }
        spawned.stop(Duration::from_secs(15)).await;
    }
    let keep = matches!(
        &plan.target,
        Target::Spawn { keep: true, .. } | Target::Peer { keep: true, .. }
    );
    if let (Some(dirs), true) = (server.dirs.take(), keep) {
        let kept = dirs.root.keep();
        report
            .notes
            .push(format!("server data and log kept in {}", kept.display()));
    }
    result?;
    Ok(report)
}

async fn run_phases(
    sc: &Scenario,
    plan: &Plan,
    server: &mut Server,
    mesh: Mesh,
    behaviours: &[Behaviour],
    progress: &Progress,
    report: &mut Report,
) -> anyhow::Result<()> {
    progress.phase("loading mesh", None, None);
    let within = Duration::from_secs(sc.timeouts.server_secs);
    crate::probe::wait_for_mesh(server.xds, &mesh.expected_clusters(), within)
        .await
        .context("waiting for the server to serve the initial mesh")?;
    tokio::time::sleep(SETTLE).await;
    let before = server.stats.sample().await;
    report.server_rss_bytes_before = before.map(|s| s.rss_bytes);

    let tracker = Arc::new(Tracker::new());
    let c = &report.behaviours;
    tracker.set_expected(c.normal as u32, c.slow as u32);
    let cfg = FleetConfig {
        target: server.xds,
        api: sc.api,
        slow_delay: Duration::from_millis(sc.behaviour.slow_delay_ms),
        connect_concurrency: sc.connect_concurrency,
        connect_timeout: Duration::from_secs(30),
        capture: sc.baseline,
    };
    let fleet = Fleet::start(cfg.clone(), behaviours, tracker.clone(), None)?;
    progress.phase(
        "initial sync",
        Some((fleet.shared.clone(), fleet.size())),
        None,
    );
    let sync_within = Duration::from_secs(sc.timeouts.sync_secs);
    let outcome = phases::wait_sync(&fleet, sync_within, server.spawned.as_mut()).await;
    let synced_cpu = server.stats.sample().await;
    let counters = &fleet.shared.counters;
    report.synced_proxies = counters.synced.load(Ordering::Relaxed);
    let times: Vec<f64> = fleet.shared.sync_times().iter().map(|d| ms(*d)).collect();
    report.initial_sync_per_proxy_ms = percentiles(&times);
    if report.synced_proxies as usize == fleet.size() {
        report.initial_sync_ms = times.iter().copied().reduce(f64::max);
    }
    report.initial_sync_server_cpu_seconds = match (before, synced_cpu) {
        (Some(a), Some(b)) => Some(b.cpu_seconds - a.cpu_seconds),
        _ => None,
    };
    if let Err(e) = outcome {
        report.errors = counters.errors.load(Ordering::Relaxed);
        report.first_error = fleet.shared.first_error();
        fleet.stop(Duration::from_secs(10)).await;
        return Err(e);
    }
    tokio::time::sleep(SETTLE).await;
    let after = server.stats.sample().await;
    report.server_rss_bytes_synced = after.map(|s| s.rss_bytes);
    if let (Some(b), Some(a)) = (before, after)
        && report.synced_proxies > 0
    {
        report.server_rss_bytes_per_proxy =
            Some((a.rss_bytes as f64 - b.rss_bytes as f64) / report.synced_proxies as f64);
    }

    if sc.reconnect_storm {
        progress.phase(
            "reconnect storm",
            Some((fleet.shared.clone(), fleet.size())),
            None,
        );
        report.reconnect = Some(phases::storm(&fleet, &server.stats, sc).await);
    }

    if sc.has_churn() {
        let mut churn = Churn::new(mesh, sc.churn.clone(), sc.seed, tracker.clone());
        progress.phase(
            "churn",
            Some((fleet.shared.clone(), fleet.size())),
            Some(tracker.clone()),
        );
        let out = phases::churn(sc, &mut churn, server, &tracker, &fleet).await?;
        phases::churn_figures(sc, &out, &tracker, &fleet, report);
        if churn.skipped() > 0 {
            report.notes.push(format!(
                "{} churn operations found no eligible target (waiting for earlier changes to converge) and were skipped",
                churn.skipped()
            ));
        }
    }
    report.nacks = counters.nacks.load(Ordering::Relaxed);
    report.errors = counters.errors.load(Ordering::Relaxed);
    report.connect_retries = counters.connect_retries.load(Ordering::Relaxed);
    report.first_error = fleet.shared.first_error();
    let captured = if sc.baseline {
        fleet.shared.captured()
    } else {
        Vec::new()
    };
    let shared = fleet.shared.clone();
    fleet.stop(Duration::from_secs(30)).await;
    report.converged_proxies = shared.counters.converged.load(Ordering::Relaxed);
    if let Some(s) = server.spawned.as_mut() {
        s.check_alive()?;
    }

    if sc.baseline {
        progress.phase("baseline", None, None);
        replay::baseline(
            sc,
            plan.baseline_exe.as_ref(),
            cfg,
            (&captured, &tracker.specs()),
            behaviours,
            report,
            progress,
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaviours_follow_fractions_and_keep_proxy_zero_normal() {
        let mut sc = Scenario {
            proxies: 100,
            ..Default::default()
        };
        sc.behaviour.nack_fraction = 0.3;
        sc.behaviour.slow_fraction = 0.1;
        sc.behaviour.stall_fraction = 0.05;
        let (b, c) = behaviours(&sc);
        assert_eq!((c.nack, c.slow, c.stall, c.normal), (30, 10, 5, 55));
        assert_eq!(b[0], Behaviour::Normal);
        assert_eq!(behaviours(&sc).0, b, "seeded");
    }
}
