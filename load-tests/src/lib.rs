//! deltapilot's load generator: N simulated Envoys (each its own gRPC connection,
//! node id and metadata; delta ADS by default, SotW as an option) against a
//! deltapilot server, churn written into the server's log at a given rate, and a
//! report of what it cost: end-to-end convergence per change (p50/p90/p99/max),
//! responses per second, bytes per proxy per change, initial sync time, the
//! server's CPU and memory, and — in the same run — the raw fan-out time of the
//! same bytes through a plain tonic server.
//!
//! It runs as `deltapilot loadgen` and as the `deltapilot-loadgen` binary; both
//! parse [`LoadgenArgs`] and call [`run`]. Scenarios live in `load-tests/scenarios/`.
//!
//! Modules:
//! - [`scenario`]: the scenario file format;
//! - [`mesh`], [`churn`], [`sink`], [`logwatch`]: what is written and how;
//! - [`proxy`]: the simulated Envoys; [`tracker`]: convergence per change;
//! - [`baseline`]: the replay server for the raw fan-out time;
//! - [`harness`]: the phases of a run; [`server`], [`probe`], [`procstat`],
//!   [`metrics`], [`fdlimit`]: the server under test and the machine;
//! - [`report`], [`plot`], [`progress`], [`stats`]: output;
//! - [`peer`], [`istiod`]: `--peer`, the same scenario against a peer control
//!   plane (go-control-plane, Istio's istiod), side by side.
//!
//! What it does NOT do: run inside the server, assert anything (tests and people
//! judge the report), or use any server code: it speaks only the wire protocols.

pub mod baseline;
pub mod churn;
pub mod fdlimit;
pub mod harness;
pub mod istiod;
pub mod logwatch;
pub mod mesh;
pub mod metrics;
pub mod peer;
pub mod plot;
pub mod probe;
pub mod procstat;
pub mod progress;
pub mod proxy;
pub mod report;
pub mod scenario;
pub mod server;
pub mod sink;
pub mod soak;
pub mod stats;
pub mod tracker;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};

use crate::harness::{Plan, Target};
use crate::scenario::{Api, Scenario};

/// Arguments of the load generator (`deltapilot loadgen` and
/// `deltapilot-loadgen`). A scenario file sets the run; flags override it.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadgenArgs {
    /// Start a `deltapilot run` on a temporary data directory and measure it.
    /// Churn reaches it through its file adapter (ServiceEntry files), because the
    /// server holds its embedded log's writer lock.
    #[arg(long, env = "DELTAPILOT_LOADGEN_SPAWN", conflicts_with = "target")]
    pub spawn: bool,
    /// The `deltapilot` binary for --spawn [default: next to this executable].
    #[arg(long, value_name = "PATH", env = "DELTAPILOT_BIN")]
    pub server_bin: Option<PathBuf>,
    /// Keep the spawned server's temporary directory (its log and data).
    #[arg(long, env = "DELTAPILOT_LOADGEN_KEEP_DATA")]
    pub keep_data: bool,
    /// A running server's xDS address (instead of --spawn).
    #[arg(long, value_name = "HOST:PORT", env = "DELTAPILOT_LOADGEN_TARGET")]
    pub target: Option<SocketAddr>,
    /// The log the --target server reads, to append the mesh and churn to
    /// (`kafka://HOST:PORT/TOPIC`, or `file://DIR` when no other process writes it).
    /// With --spawn: a `kafka://` topic the spawned server follows (`run --log`).
    #[arg(
        long,
        value_name = "URI",
        env = "DELTAPILOT_LOADGEN_LOG",
        conflicts_with = "watch_dir"
    )]
    pub log: Option<String>,
    /// Or a directory the --target server's file adapter watches.
    #[arg(long, value_name = "DIR", env = "DELTAPILOT_LOADGEN_WATCH_DIR")]
    pub watch_dir: Option<PathBuf>,
    /// The --target server's embedded log directory, read (read-only) for the
    /// append times of file-adapter churn.
    #[arg(long, value_name = "DIR", env = "DELTAPILOT_LOADGEN_OBSERVE_LOG")]
    pub observe_log: Option<PathBuf>,
    /// The --target server's admin address, for /metrics.
    #[arg(long, value_name = "HOST:PORT", env = "DELTAPILOT_LOADGEN_ADMIN")]
    pub admin: Option<SocketAddr>,
    /// The --target server's process id, when local: CPU and RSS from /proc.
    #[arg(long, value_name = "PID", env = "DELTAPILOT_LOADGEN_SERVER_PID")]
    pub server_pid: Option<u32>,
    /// A scenario file (YAML), e.g. load-tests/scenarios/steady-churn.yaml.
    #[arg(long, value_name = "FILE", env = "DELTAPILOT_LOADGEN_SCENARIO")]
    pub scenario: Option<PathBuf>,
    /// Number of simulated proxies (overrides the scenario).
    #[arg(long, value_name = "N", env = "DELTAPILOT_LOADGEN_PROXIES")]
    pub proxies: Option<usize>,
    /// Churn duration in seconds (overrides the scenario).
    #[arg(long, value_name = "SECS", env = "DELTAPILOT_LOADGEN_DURATION")]
    pub duration: Option<u64>,
    /// Churn rate in events per second (overrides the scenario).
    #[arg(long, value_name = "EVENTS_PER_SEC", env = "DELTAPILOT_LOADGEN_RATE")]
    pub rate: Option<f64>,
    /// Delta or state-of-the-world ADS (overrides the scenario).
    #[arg(long, value_enum, env = "DELTAPILOT_LOADGEN_API")]
    pub api: Option<Api>,
    /// Random seed (overrides the scenario).
    #[arg(long, env = "DELTAPILOT_LOADGEN_SEED")]
    pub seed: Option<u64>,
    /// Skip the baseline replay.
    #[arg(long, env = "DELTAPILOT_LOADGEN_NO_BASELINE")]
    pub no_baseline: bool,
    /// Write the JSON report here.
    #[arg(long, value_name = "FILE.json", env = "DELTAPILOT_LOADGEN_REPORT")]
    pub report: Option<PathBuf>,
    /// Write the SVG latency plot here.
    #[arg(long, value_name = "FILE.svg", env = "DELTAPILOT_LOADGEN_PLOT")]
    pub plot: Option<PathBuf>,
    /// No progress line (it is drawn only on a terminal anyway).
    #[arg(long, env = "DELTAPILOT_LOADGEN_QUIET")]
    pub quiet: bool,
    /// Run the scenario against deltapilot (--spawn) and then against this peer,
    /// one after the other, and print both side by side.
    #[arg(long, value_enum, env = "DELTAPILOT_LOADGEN_PEER", requires = "spawn")]
    pub peer: Option<peer::Peer>,
    /// The peer's binary; without it, the peer's own environment variable
    /// (DELTAPILOT_GCP_PEER, DELTAPILOT_ISTIOD_PEER; see load-tests/peers/).
    #[arg(long, value_name = "PATH")]
    pub peer_bin: Option<PathBuf>,
    /// The go-control-plane cache the peer serves from (istiod has its own).
    #[arg(
        long,
        value_enum,
        default_value = "linear",
        env = "DELTAPILOT_GCP_PEER_CACHE"
    )]
    pub peer_cache: peer::PeerCache,
    /// Internal: run as the baseline replay server over the captured responses in
    /// DIR (started by the load generator itself).
    #[arg(long, value_name = "DIR", hide = true)]
    pub baseline_serve: Option<PathBuf>,
}

impl LoadgenArgs {
    /// The scenario with overrides applied, and where to run it.
    pub fn plan(&self) -> anyhow::Result<Plan> {
        let mut sc = match &self.scenario {
            Some(p) => Scenario::load(p)?,
            None => Scenario::default(),
        };
        if let Some(n) = self.proxies {
            sc.proxies = n;
        }
        if let Some(d) = self.duration {
            sc.duration_secs = d;
        }
        if let Some(r) = self.rate {
            sc.churn.rate = r;
        }
        if let Some(a) = self.api {
            sc.api = a;
        }
        if let Some(s) = self.seed {
            sc.seed = s;
        }
        if self.no_baseline {
            sc.baseline = false;
        }
        sc.validate().context("invalid scenario")?;
        let target = match (self.spawn, self.target) {
            (true, None) => {
                if let Some(uri) = &self.log
                    && !uri.starts_with("kafka://")
                {
                    bail!(
                        "--spawn --log {uri}: only a kafka:// log can be shared with a spawned \
                         server (it holds its embedded log's writer lock); leave --log out to use \
                         the embedded log"
                    );
                }
                Target::Spawn {
                    bin: server::find_binary(self.server_bin.as_deref())?,
                    keep: self.keep_data,
                    log: self.log.clone(),
                }
            }
            (false, Some(xds)) => {
                if self.log.is_none() && self.watch_dir.is_none() {
                    bail!(
                        "--target needs --log URI (a log the server reads) or --watch-dir DIR (a directory its file adapter watches)"
                    );
                }
                Target::Remote {
                    xds,
                    log: self.log.clone(),
                    watch_dir: self.watch_dir.clone(),
                    admin: self.admin,
                    pid: self.server_pid,
                    observe_log: self.observe_log.clone(),
                }
            }
            _ => bail!(
                "say where the server is: --spawn, or --target HOST:PORT with --log URI or --watch-dir DIR"
            ),
        };
        Ok(Plan {
            scenario: sc,
            target,
            progress: !self.quiet,
            baseline_exe: baseline::child::own_binary(),
        })
    }

    /// The plan for the `--peer` run: the same scenario against the peer.
    pub fn peer_plan(&self, deltapilot: &Plan) -> anyhow::Result<Option<Plan>> {
        let Some(p) = self.peer else {
            return Ok(None);
        };
        if self.log.is_some() {
            bail!(
                "--peer: the peer reads ServiceEntry files, so the deltapilot run must too; \
                 leave --log out"
            );
        }
        Ok(Some(Plan {
            target: Target::Peer {
                peer: p,
                bin: peer::find_binary(p, self.peer_bin.as_deref())?,
                cache: self.peer_cache,
                keep: self.keep_data,
            },
            ..deltapilot.clone()
        }))
    }
}

/// Runs the load generator: the plan, then the table on stdout and the report
/// and plot files.
pub async fn run(args: LoadgenArgs) -> anyhow::Result<()> {
    if let Some(dir) = &args.baseline_serve {
        return baseline::child::serve(dir).await;
    }
    let plan = args.plan()?;
    if let Some(peer_plan) = args.peer_plan(&plan)? {
        return side_by_side(&args, plan, peer_plan).await;
    }
    let report = harness::execute(plan).await?;
    print!("{}", report.table());
    if let Some(p) = &args.report {
        report.write_json(p)?;
    }
    if let Some(p) = &args.plot {
        std::fs::write(p, plot::svg(&report))
            .with_context(|| format!("writing --plot {}", p.display()))?;
    }
    Ok(())
}

/// Appends `-<suffix>` to a file's stem (`r.svg` → `r-go-control-plane.svg`).
fn suffixed(p: &std::path::Path, suffix: &str) -> PathBuf {
    let stem = p
        .file_stem()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default();
    let name = match p.extension() {
        Some(e) => format!("{stem}-{suffix}.{}", e.to_string_lossy()),
        None => format!("{stem}-{suffix}"),
    };
    p.with_file_name(name)
}

/// `--peer`: deltapilot, then the peer, then the comparison. With `--report`
/// the JSON holds both reports and the comparison; with `--plot`, deltapilot's
/// plot goes to the path and the peer's next to it.
async fn side_by_side(args: &LoadgenArgs, plan: Plan, peer_plan: Plan) -> anyhow::Result<()> {
    let Target::Peer { peer, cache, .. } = &peer_plan.target else {
        bail!("internal: the peer plan has no peer target");
    };
    let (peer, cache) = (*peer, *cache);
    eprintln!("== run 1 of 2: deltapilot");
    let ours = harness::execute(plan).await.context("the deltapilot run")?;
    print!("== deltapilot\n{}", ours.table());
    eprintln!("== run 2 of 2: {}", peer.as_str());
    let theirs = harness::execute(peer_plan)
        .await
        .with_context(|| format!("the {} run", peer.as_str()))?;
    print!(
        "== {} ({} cache)\n{}",
        peer.as_str(),
        cache.as_str(),
        theirs.table()
    );
    if let Some(p) = &args.plot {
        std::fs::write(p, plot::svg(&ours))
            .with_context(|| format!("writing --plot {}", p.display()))?;
        let q = suffixed(p, peer.as_str());
        std::fs::write(&q, plot::svg(&theirs))
            .with_context(|| format!("writing {}", q.display()))?;
    }
    let both = peer::SideBySide::new(peer, cache, ours, theirs);
    print!("== side by side\n{}", both.table());
    if let Some(p) = &args.report {
        both.write_json(p)?;
    }
    Ok(())
}
