//! Helpers for the fleet test (`failover.rs`): `deltapilot run` replicas on one
//! Kafka topic that can be killed with SIGKILL and restarted on the same ports and
//! data directory, the file adapter as its own process, Envoy bootstraps whose xds
//! cluster lists every replica, and a bounded traffic loop through an Envoy.
//! Everything binds 127.0.0.1; every process is a [`Proc`], killed on drop.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::support::{Proc, http_get, metric, xds_cluster_yaml};

/// One `deltapilot run --log kafka://…` replica: fixed ports and data directory,
/// so that a restart is the same replica to the Envoys that list it.
pub struct Replica {
    pub name: String,
    pub data: PathBuf,
    pub xds_port: u16,
    pub admin_port: u16,
    log_uri: String,
    dir: PathBuf,
    starts: usize,
    /// More `run` flags, given at every start.
    pub extra: Vec<String>,
    pub proc: Option<Proc>,
}

impl Replica {
    pub fn new(dir: &Path, name: &str, log_uri: &str, xds_port: u16, admin_port: u16) -> Self {
        Replica {
            name: name.into(),
            data: dir.join(format!("{name}-data")),
            xds_port,
            admin_port,
            log_uri: log_uri.into(),
            dir: dir.into(),
            starts: 0,
            extra: Vec::new(),
            proc: None,
        }
    }

    /// Starts the process without waiting for it. A checkpoint after every
    /// record (or second), so that a kill at any moment leaves one to restore.
    pub fn spawn(&mut self) {
        assert!(self.proc.is_none(), "{} is running already", self.name);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_deltapilot"));
        cmd.arg("run")
            .arg("--xds-addr")
            .arg(format!("127.0.0.1:{}", self.xds_port))
            .arg("--admin-addr")
            .arg(format!("127.0.0.1:{}", self.admin_port))
            .arg("--data-dir")
            .arg(&self.data)
            .arg("--log")
            .arg(&self.log_uri)
            .args(["--checkpoint-every-events", "1"])
            .args(["--checkpoint-every-secs", "1"])
            .args(&self.extra)
            .env("RUST_LOG", "info");
        self.starts += 1;
        let log = self.dir.join(format!("{}-{}.log", self.name, self.starts));
        self.proc = Some(Proc::spawn(&self.name, cmd, log));
    }

    /// SIGKILL, then reaps it: no drain, no last checkpoint.
    pub fn kill9(&mut self) {
        let mut proc = self.proc.take().expect("replica running");
        proc.child.kill().expect("SIGKILL");
        proc.child.wait().expect("reap");
    }

    pub fn admin(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.admin_port))
    }

    pub fn get(&self, path: &str) -> Result<(u16, String), String> {
        http_get(self.admin(), path, "localhost")
    }

    pub fn metrics(&self) -> String {
        self.get("/metrics").map(|(_, b)| b).unwrap_or_default()
    }

    /// A counter or gauge from `/metrics` (summed over matching labels).
    pub fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        metric(&self.metrics(), name, labels)
    }

    /// `/debug/snapshot`'s `(position, hash)`.
    pub fn snapshot(&self) -> Result<(String, String), String> {
        let (status, body) = self.get("/debug/snapshot")?;
        if status != 200 {
            return Err(format!("{}: /debug/snapshot {status}: {body}", self.name));
        }
        let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        let field = |k: &str| v[k].as_str().map(str::to_owned).ok_or(body.clone());
        Ok((field("position")?, field("hash")?))
    }

    /// The node ids of the proxies `/debug/syncz` lists, each with whether
    /// every type it asked for is `SYNCED`.
    pub fn proxies(&self) -> Result<Vec<(String, bool)>, String> {
        let (_, body) = self.get("/debug/syncz")?;
        let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        let proxies = v["proxies"].as_array().ok_or(body.clone())?;
        Ok(proxies
            .iter()
            .map(|p| {
                let synced = p["types"].as_object().is_some_and(|t| {
                    t.values()
                        .all(|t| matches!(t["status"].as_str(), Some("SYNCED" | "NOT_SENT")))
                });
                (p["id"].as_str().unwrap_or_default().to_owned(), synced)
            })
            .collect())
    }

    /// The records before the newest checkpoint in the data directory.
    pub fn newest_checkpoint(&self) -> Option<u64> {
        std::fs::read_dir(self.data.join("checkpoints"))
            .ok()?
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                name.strip_prefix("checkpoint-")?
                    .strip_suffix(".dpc")?
                    .parse()
                    .ok()
            })
            .max()
    }

    /// Polls `/readyz` every 5 ms until it answers 200 (at most `within`):
    /// each distinct `(status, state)` it answered, in order. Before the
    /// process listens there is no answer, and nothing is noted.
    pub fn readiness_until_ready(&self, within: Duration) -> Vec<(u16, String)> {
        let mut states: Vec<(u16, String)> = Vec::new();
        let deadline = Instant::now() + within;
        loop {
            if let Ok((status, body)) = self.get("/readyz") {
                let v: serde_json::Value = serde_json::from_str(&body)
                    .unwrap_or_else(|e| panic!("{}: /readyz is not JSON ({e}): {body}", self.name));
                let state = v["state"].as_str().unwrap_or_default().to_owned();
                if states.last() != Some(&(status, state.clone())) {
                    states.push((status, state));
                }
                if status == 200 {
                    return states;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready after {within:?}: {states:?}\n{}",
                self.name,
                self.output()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn output(&self) -> String {
        self.proc.as_ref().map(Proc::output).unwrap_or_default()
    }
}

/// The records a position (`/debug/snapshot`'s `0:3,1:0,2:5`) stands after.
pub fn position_total(pos: &str) -> u64 {
    pos.split(',')
        .filter_map(|p| p.rsplit(':').next()?.parse::<u64>().ok())
        .sum()
}

/// `deltapilot adapter file` on `watch`, appending to `log_uri`.
pub fn file_adapter(dir: &Path, watch: &Path, log_uri: &str) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_deltapilot"));
    cmd.args(["adapter", "file", "--watch"])
        .arg(watch)
        .arg("--log")
        .arg(log_uri)
        .arg("--state-dir")
        .arg(dir.join("adapter-state"))
        // Any free port: its admin server is not what this test looks at.
        .args(["--admin-addr", "127.0.0.1:0"])
        .env("RUST_LOG", "info");
    Proc::spawn("file-adapter", cmd, dir.join("adapter.log"))
}

/// An Envoy bootstrap for delta ADS over an xds cluster listing every replica,
/// one per priority in `replicas` order (`(xds port, admin port)`), so the
/// first is the one it connects to. Envoy sends a stream to the highest
/// priority with a healthy host; without health checks every host counts as
/// healthy and it would keep retrying a dead first replica, so each replica is
/// health-checked on its admin `/readyz`: a killed replica fails at once, and a
/// restarted one is not chosen before it has caught up. The xDS stream retries
/// after 100 ms (up to 1 s) instead of Envoy's default 500 ms (up to 30 s).
///
/// The application listener is static, on `listen_port`, and takes its routes
/// from RDS (`route`, the published service port's route configuration): the
/// generated outbound listeners are not bound (`run` without
/// `--bind-outbound`), since three Envoys on one host cannot all bind the
/// service port.
pub fn bootstrap(
    node: &str,
    listen_port: u16,
    admin_port: u16,
    route: &str,
    replicas: &[(u16, u16)],
) -> String {
    let mut endpoints = String::new();
    for (priority, (xds, admin)) in replicas.iter().enumerate() {
        endpoints.push_str(&format!(
            "          - priority: {priority}
            lb_endpoints:
              - endpoint:
                  address: {{socket_address: {{address: 127.0.0.1, port_value: {xds}}}}}
                  health_check_config: {{port_value: {admin}}}
"
        ));
    }
    let cluster = xds_cluster_yaml(
        "      health_checks:
        - timeout: 1s
          interval: 0.25s
          no_traffic_interval: 0.25s
          unhealthy_threshold: 1
          healthy_threshold: 1
          http_health_check: {path: /readyz}
",
        &endpoints,
    );
    format!(
        r#"node: {{id: {node}, cluster: failover}}
dynamic_resources:
  ads_config:
    api_type: DELTA_GRPC
    transport_api_version: V3
    grpc_services:
      - envoy_grpc:
          cluster_name: deltapilot
          retry_policy:
            retry_back_off: {{base_interval: 0.1s, max_interval: 1s}}
  cds_config: {{ads: {{}}, resource_api_version: V3}}
  lds_config: {{ads: {{}}, resource_api_version: V3}}
static_resources:
  listeners:
    - name: app
      address: {{socket_address: {{address: 127.0.0.1, port_value: {listen_port}}}}}
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: app
                rds:
                  route_config_name: "{route}"
                  config_source: {{ads: {{}}, resource_api_version: V3}}
                http_filters:
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
{cluster}admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: {admin_port}}}}}
"#
    )
}

/// Most requests one traffic loop sends.
pub const TRAFFIC_MAX_REQUESTS: usize = 5_000;
/// Longest a traffic loop runs.
pub const TRAFFIC_MAX_TIME: Duration = Duration::from_secs(60);
/// Pause between two requests of one loop (two cores are shared with three
/// Envoys, three replicas, the adapter and the broker).
const TRAFFIC_PAUSE: Duration = Duration::from_millis(10);

/// What one loop saw.
#[derive(Debug, Default)]
pub struct TrafficReport {
    pub ok: usize,
    /// Each request that did not get 200, with when (since the loop began).
    pub failures: Vec<String>,
    pub first: Option<Instant>,
    pub last: Option<Instant>,
}

/// Requests for `authority` through 127.0.0.1:`port`, one after another, until
/// stopped or a bound ([`TRAFFIC_MAX_REQUESTS`], [`TRAFFIC_MAX_TIME`]) is hit.
pub struct Traffic {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<TrafficReport>>,
}

impl Traffic {
    pub fn start(port: u16, authority: &str) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, authority) = (stop.clone(), authority.to_owned());
        let handle = std::thread::spawn(move || {
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let began = Instant::now();
            let mut r = TrafficReport::default();
            for _ in 0..TRAFFIC_MAX_REQUESTS {
                if flag.load(Ordering::Relaxed) || began.elapsed() > TRAFFIC_MAX_TIME {
                    break;
                }
                let at = Instant::now();
                match http_get(addr, "/", &authority) {
                    Ok((200, _)) => r.ok += 1,
                    other => r.failures.push(format!("{:?} in: {other:?}", at - began)),
                }
                r.first.get_or_insert(at);
                r.last = Some(at);
                std::thread::sleep(TRAFFIC_PAUSE);
            }
            r
        });
        Traffic {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops the loop and returns what it saw.
    pub fn finish(mut self) -> TrafficReport {
        self.stop.store(true, Ordering::Relaxed);
        let handle = self.handle.take().expect("not finished yet");
        handle.join().expect("traffic thread")
    }
}

impl Drop for Traffic {
    /// A test that failed before `finish` stops its loops too.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
