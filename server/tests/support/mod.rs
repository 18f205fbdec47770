//! Helpers for the end-to-end tests: real processes (deltapilot, Envoy, Python
//! grpcio) under guards that kill them on drop, tiny HTTP backends, raw HTTP/1.1
//! requests, and bounded polling. Everything binds 127.0.0.1.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A required test tool from `scripts/install-test-deps.sh`; fails (never skips)
/// when it is missing.
pub fn tool(var: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(p) if Path::new(&p).exists() => PathBuf::from(p),
        _ => panic!(
            "{var} is not set (or points nowhere): run scripts/install-test-deps.sh, then \
             `source ~/.cache/deltapilot-tools/env.sh` and rerun the tests"
        ),
    }
}

/// `DELTAPILOT_KAFKA_BROKERS`, or a panic saying how to start a broker: the
/// Kafka tests need a real one and fail, never skip, without it.
pub fn kafka_brokers() -> String {
    match std::env::var("DELTAPILOT_KAFKA_BROKERS") {
        Ok(b) if !b.trim().is_empty() => b,
        _ => panic!(
            "DELTAPILOT_KAFKA_BROKERS is not set: start a broker (scripts/kafka.sh start 19192) \
             and export DELTAPILOT_KAFKA_BROKERS=127.0.0.1:19192; this test never skips"
        ),
    }
}

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// `n` distinct free loopback ports, held together while picked so that no
/// two are the same (then released).
pub fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("free port"))
        .collect();
    held.iter()
        .map(|l| l.local_addr().expect("addr").port())
        .collect()
}

/// Polls `f` every 100 ms until it returns `Some` or `within` passes (then panics
/// with `what` and the last state `f` reported through `last`).
pub fn wait_for<T>(what: &str, within: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + within;
    let mut last;
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) => last = e,
        }
        if Instant::now() > deadline {
            panic!("timed out after {within:?} waiting for {what}; last: {last}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A child process killed (and reaped) on drop, with its output in a log file.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    /// Spawns `cmd` with stdout and stderr into `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: PathBuf) -> Proc {
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {name}: {e}"));
        Proc {
            name: name.into(),
            child,
            log,
        }
    }

    /// The process's output so far (for failure messages).
    pub fn output(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = s.lines().rev().take(60).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// Sends SIGTERM and waits (bounded) for exit; returns whether it exited.
    pub fn terminate(&mut self, within: Duration) -> bool {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // SIGTERM first: a command run under `timeout` (Envoy, the Python
        // clients) is a grandchild, and a SIGKILL to `timeout` left it running
        // after the test (three Envoys per suite run); `timeout` passes TERM on.
        let exited = matches!(self.child.try_wait(), Ok(Some(_)));
        if !exited && !self.terminate(Duration::from_secs(5)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// A tiny HTTP/1.1 server answering every request with 200 and its id.
pub struct Backend {
    pub port: u16,
    stop: Arc<AtomicBool>,
}

impl Backend {
    pub fn start(id: &str) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind backend");
        let port = listener.local_addr().expect("addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let (stop2, id) = (stop.clone(), id.to_owned());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let id = id.clone();
                std::thread::spawn(move || {
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
                    loop {
                        let mut line = String::new();
                        let mut got_request = false;
                        while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                            got_request = true;
                            if line == "\r\n" || line == "\n" {
                                break;
                            }
                            line.clear();
                        }
                        if !got_request {
                            return;
                        }
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\ncontent-type: text/plain\r\n\r\n{}",
                            id.len(),
                            id
                        );
                        if conn.write_all(resp.as_bytes()).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Backend { port, stop }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// A GET over a fresh connection: `(status, body)`.
pub fn http_get(addr: SocketAddr, path: &str, host: &str) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let req = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .map_err(|e| format!("read {addr}{path}: {e}"))?;
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status line in {out:?}"))?;
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// `curl` over TLS to 127.0.0.1:`port` as `host` (its SNI and authority),
/// trusting only `ca`: succeeds only when the server reached holds a
/// certificate for `host` that `ca` signed. The body, or curl's error.
pub fn curl_tls(host: &str, port: u16, ca: &Path, path: &str) -> Result<String, String> {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "5", "--cacert"])
        .arg(ca)
        .arg("--resolve")
        .arg(format!("{host}:{port}:127.0.0.1"))
        .arg(format!("https://{host}:{port}{path}"))
        .output()
        .map_err(|e| format!("curl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A TLS backend: `openssl s_server -www` on 127.0.0.1:`port`, with a fresh
/// self-signed certificate for `host` made in `dir` (`dir/tls.crt` is then
/// the CA a client trusts).
pub fn tls_backend(dir: &Path, host: &str, port: u16) -> Proc {
    deltapilot_testkit::tls::make_cert(dir, host);
    let mut cmd = Command::new("openssl");
    cmd.args(["s_server", "-www", "-accept"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("-cert")
        .arg(dir.join("tls.crt"))
        .arg("-key")
        .arg(dir.join("tls.key"));
    Proc::spawn(host, cmd, dir.join("s_server.log"))
}

/// The body of one GET over a fresh connection, read by its content-length:
/// for connections a proxy forwards byte for byte (TCP routes), where the
/// test backends, which keep a connection open for more requests, would make
/// a read to the end wait for their idle timeout.
pub fn raw_http_body(addr: SocketAddr, host: &str) -> Result<String, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    s.write_all(format!("GET / HTTP/1.1\r\nhost: {host}\r\n\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|n| n.trim().parse::<usize>().ok())
                .ok_or_else(|| format!("no content-length in {head:?}"))?;
            if body.len() >= len {
                return Ok(body[..len].to_string());
            }
        }
        match s.read(&mut buf) {
            Ok(0) => return Err(format!("closed after {:?}", String::from_utf8_lossy(&got))),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("read {addr}: {e}")),
        }
    }
}

/// A `deltapilot run` on `log` with its data in `dir/name`, on free loopback
/// ports, with `extra` flags and `env`; not waited for. Returns it and its admin
/// port. The replica tests (`run_kafka*.rs`) start theirs through it.
pub fn spawn_replica(
    dir: &Path,
    name: &str,
    log: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Proc, u16) {
    let admin_port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_deltapilot"));
    cmd.arg("run")
        .arg("--xds-addr")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--admin-addr")
        .arg(format!("127.0.0.1:{admin_port}"))
        .arg("--data-dir")
        .arg(dir.join(name))
        .arg("--log")
        .arg(log)
        .args(extra)
        .env("RUST_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    (
        Proc::spawn(name, cmd, dir.join(format!("{name}.log"))),
        admin_port,
    )
}

/// `deltapilot run` on free loopback ports.
pub struct Deltapilot {
    pub proc: Proc,
    pub xds_port: u16,
    pub admin_port: u16,
}

impl Deltapilot {
    pub fn start(
        dir: &Path,
        data: &Path,
        watch: &Path,
        xds_port: u16,
        admin_port: u16,
    ) -> Deltapilot {
        Self::start_with(dir, data, watch, xds_port, admin_port, &[])
    }

    /// As [`Deltapilot::start`], with `extra` flags.
    pub fn start_with(
        dir: &Path,
        data: &Path,
        watch: &Path,
        xds_port: u16,
        admin_port: u16,
        extra: &[&str],
    ) -> Deltapilot {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_deltapilot"));
        cmd.arg("run")
            .arg("--xds-addr")
            .arg(format!("127.0.0.1:{xds_port}"))
            .arg("--admin-addr")
            .arg(format!("127.0.0.1:{admin_port}"))
            .arg("--data-dir")
            .arg(data)
            .arg("--watch")
            .arg(watch)
            .arg("--bind-outbound")
            .arg("--outbound-address")
            .arg("127.0.0.1")
            .args(extra)
            .env("RUST_LOG", "info,deltapilot_server=debug");
        let n = std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
        let proc = Proc::spawn("deltapilot", cmd, dir.join(format!("deltapilot-{n}.log")));
        let dp = Deltapilot {
            proc,
            xds_port,
            admin_port,
        };
        wait_for(
            "deltapilot /readyz",
            Duration::from_secs(60),
            || match http_get(dp.admin(), "/readyz", "localhost") {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{other:?}; output:\n{}", dp.proc.output())),
            },
        );
        dp
    }

    pub fn admin(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.admin_port))
    }

    pub fn metrics(&self) -> String {
        http_get(self.admin(), "/metrics", "localhost")
            .map(|(_, b)| b)
            .unwrap_or_default()
    }
}

/// Sum of every sample of `name` whose labels contain all of `labels`.
pub fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// A real Envoy from `DELTAPILOT_ENVOY`, with a shipped bootstrap
/// (`examples/envoy-*.yaml`) pointed at the test's ports.
pub struct Envoy {
    pub proc: Proc,
    pub admin_port: u16,
}

impl Envoy {
    pub fn start(dir: &Path, example: &str, xds_port: u16) -> Envoy {
        Self::start_as(dir, example, xds_port, None)
    }

    /// As [`Envoy::start`], with the bootstrap's node id replaced by `node_id`
    /// (e.g. Istio's `sidecar~IP~POD.NS~NS.svc.cluster.local`, which gives the
    /// proxy a namespace).
    pub fn start_as(dir: &Path, example: &str, xds_port: u16, node_id: Option<&str>) -> Envoy {
        Self::start_labelled(dir, example, xds_port, node_id, &[])
    }

    /// As [`Envoy::start_as`], with node metadata `LABELS` (Istio's workload
    /// labels) set to `labels` when there are any.
    pub fn start_labelled(
        dir: &Path,
        example: &str,
        xds_port: u16,
        node_id: Option<&str>,
        labels: &[(&str, &str)],
    ) -> Envoy {
        let admin_port = free_port();
        let template = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../examples")
                .join(example),
        )
        .expect("shipped bootstrap");
        let bootstrap = template
            .replace("port_value: 18000", &format!("port_value: {xds_port}"))
            .replace("port_value: 9901", &format!("port_value: {admin_port}"))
            .replace("port_value: 9902", &format!("port_value: {admin_port}"));
        let bootstrap = match node_id {
            Some(id) => bootstrap
                .lines()
                .map(|l| match l.trim_start().strip_prefix("id: ") {
                    Some(_) if l.starts_with("  id: ") => format!("  id: \"{id}\""),
                    _ => l.to_string(),
                })
                .collect::<Vec<_>>()
                .join("\n"),
            None => bootstrap,
        };
        let bootstrap = if labels.is_empty() {
            bootstrap
        } else {
            let meta: String = labels
                .iter()
                .map(|(k, v)| format!("      {k}: \"{v}\"\n"))
                .collect();
            bootstrap.replacen(
                "\n  cluster: demo\n",
                &format!("\n  cluster: demo\n  metadata:\n    LABELS:\n{meta}"),
                1,
            )
        };
        Self::boot(dir, example, &bootstrap, admin_port)
    }

    /// A real Envoy from the bootstrap text `bootstrap` (written to
    /// `dir/name`), whose admin listens on `admin_port`.
    pub fn boot(dir: &Path, name: &str, bootstrap: &str, admin_port: u16) -> Envoy {
        let path = dir.join(name);
        std::fs::write(&path, bootstrap).expect("write bootstrap");
        Self::start_bootstrap(dir, &path, admin_port)
    }

    /// An Envoy with the bootstrap at `path`, whose admin listens on
    /// `admin_port`.
    pub fn start_bootstrap(dir: &Path, path: &Path, admin_port: u16) -> Envoy {
        let envoy = tool("DELTAPILOT_ENVOY");
        let example = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut cmd = Command::new("timeout");
        cmd.arg("600")
            .arg(envoy)
            .arg("-c")
            .arg(path)
            .arg("--disable-hot-restart")
            .arg("--concurrency")
            .arg("1")
            .arg("--log-level")
            .arg("info");
        let proc = Proc::spawn("envoy", cmd, dir.join(format!("{example}.log")));
        let e = Envoy { proc, admin_port };
        wait_for("envoy admin", Duration::from_secs(60), || {
            http_get(e.admin(), "/ready", "localhost")
                .map(|_| ())
                .map_err(|err| format!("{err}; output:\n{}", e.proc.output()))
        });
        e
    }

    pub fn admin(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.admin_port))
    }

    pub fn get(&self, path: &str) -> String {
        http_get(self.admin(), path, "localhost")
            .map(|(_, b)| b)
            .unwrap_or_default()
    }

    /// Every `*update_rejected` stat with a non-zero value.
    pub fn rejected_updates(&self) -> Vec<String> {
        self.get("/stats")
            .lines()
            .filter(|l| l.contains("update_rejected") && !l.trim_end().ends_with(": 0"))
            .map(str::to_owned)
            .collect()
    }
}

/// The `deltapilot` cluster of an Envoy bootstrap (an item of
/// `static_resources.clusters`, indented for it): static, HTTP/2, then `extra`
/// (more cluster fields, each line indented six spaces) and `endpoints` (items
/// of `load_assignment.endpoints`, indented ten).
pub fn xds_cluster_yaml(extra: &str, endpoints: &str) -> String {
    format!(
        r#"    - name: deltapilot
      type: STATIC
      connect_timeout: 1s
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config:
            http2_protocol_options: {{}}
{extra}      load_assignment:
        cluster_name: deltapilot
        endpoints:
{endpoints}"#
    )
}

/// Writes the demo ServiceEntry for `host` with one endpoint per backend port.
pub fn write_service_entry(
    dir: &Path,
    file: &str,
    host: &str,
    port: u16,
    protocol: &str,
    backends: &[u16],
) {
    let mut eps = String::new();
    for (i, p) in backends.iter().enumerate() {
        eps.push_str(&format!(
            "    - address: 127.0.0.1\n      ports:\n        main: {p}\n      labels:\n        idx: \"{i}\"\n      locality: test-region/zone-{i}\n"
        ));
    }
    let endpoints = if backends.is_empty() {
        "  endpoints: []\n".to_string()
    } else {
        format!("  endpoints:\n{eps}")
    };
    let yaml = format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: {name}\n  namespace: test\nspec:\n  hosts:\n    - {host}\n  location: MESH_INTERNAL\n  resolution: STATIC\n  ports:\n    - number: {port}\n      name: main\n      protocol: {protocol}\n{endpoints}",
        name = file.trim_end_matches(".yaml"),
    );
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, yaml).expect("write service entry");
    std::fs::rename(&tmp, dir.join(file)).expect("rename service entry");
}
