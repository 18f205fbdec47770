//! Helpers for the replay and debug tests: running the real `deltapilot` binary
//! with bounded waits, a log built from `examples/events.jsonl`, and a running
//! `deltapilot run` on free loopback ports.

#![allow(dead_code, unreachable_pub)]

pub mod compact;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What a finished command printed.
#[derive(Debug)]
pub struct Out {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn ok(&self) -> bool {
        self.status.success()
    }
}

/// Runs `deltapilot ARGS` in `cwd`, killed after `within`.
pub fn dp_in(cwd: &Path, args: &[&str], within: Duration) -> Out {
    let n = std::fs::read_dir(cwd).map(|d| d.count()).unwrap_or(0);
    let out_path = cwd.join(format!(".out-{n}"));
    let err_path = cwd.join(format!(".err-{n}"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_deltapilot"))
        .args(args)
        .current_dir(cwd)
        .env_remove("DELTAPILOT_LOG")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .spawn()
        .expect("spawn deltapilot");
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("deltapilot {args:?} did not finish within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |p: &PathBuf| std::fs::read_to_string(p).expect("output");
    let out = Out {
        status,
        stdout: read(&out_path),
        stderr: read(&err_path),
    };
    let _ = std::fs::remove_file(out_path);
    let _ = std::fs::remove_file(err_path);
    out
}

/// Runs `deltapilot ARGS` in `cwd` within 60 s.
pub fn dp(cwd: &Path, args: &[&str]) -> Out {
    dp_in(cwd, args, Duration::from_secs(60))
}

/// The repository's example events.
pub fn example_events() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/events.jsonl")
}

/// Appends `file` to the log at `data/log` under `cwd`.
pub fn append(cwd: &Path, file: &Path) {
    let o = dp(
        cwd,
        &[
            "log",
            "--log",
            "file://data/log",
            "append",
            "--file",
            file.to_str().expect("utf8"),
        ],
    );
    assert!(o.ok(), "append failed: {o:?}");
}

/// The data directory of `cwd` with the example events appended.
pub fn example_log(cwd: &Path) {
    append(cwd, &example_events());
}

/// The one segment file of the embedded log under `cwd`.
pub fn segment(cwd: &Path) -> PathBuf {
    std::fs::read_dir(cwd.join("data/log"))
        .expect("ls")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .expect("a segment")
}

/// Parses JSON lines.
pub fn json_lines(s: &str) -> Vec<serde_json::Value> {
    s.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// GET `path` from 127.0.0.1:`port` (HTTP/1.1, bounded): status and body.
pub fn get(port: u16, path: &str) -> Result<(u16, String), String> {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no headers")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("no status")?;
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut rest = body;
        while let Some((size, after)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            out.push_str(&after[..n]);
            rest = &after[n + 2..];
        }
        return Ok((status, out));
    }
    Ok((status, body.to_owned()))
}

/// Polls `f` every 50 ms until it returns `Ok` or `within` passes.
pub fn wait_for<T>(what: &str, within: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + within;
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if Instant::now() > deadline => {
                panic!("timed out after {within:?} waiting for {what}: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// `deltapilot run` on free loopback ports over `cwd/data`, killed on drop.
pub struct Server {
    pub child: std::process::Child,
    pub xds: u16,
    pub admin: u16,
    pub log: PathBuf,
}

impl Server {
    pub fn start(cwd: &Path, extra: &[&str]) -> Server {
        let (xds, admin) = (free_port(), free_port());
        let log = cwd.join(format!("run-{xds}.log"));
        let out = std::fs::File::create(&log).expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_deltapilot"))
            .args([
                "run",
                "--data-dir",
                "data",
                "--xds-addr",
                &format!("127.0.0.1:{xds}"),
                "--admin-addr",
                &format!("127.0.0.1:{admin}"),
            ])
            .args(extra)
            .current_dir(cwd)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("clone"))
            .stderr(out)
            .spawn()
            .expect("spawn run");
        let s = Server {
            child,
            xds,
            admin,
            log,
        };
        wait_for("/readyz", Duration::from_secs(60), || {
            match get(admin, "/readyz") {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{other:?}; output: {}", s.output())),
            }
        });
        s
    }

    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then waits (bounded) for the exit.
    pub fn stop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("deltapilot run did not stop within 20 s: {}", self.output());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The bound on each wait of [`delta_open`].
const DELTA_WAIT: Duration = Duration::from_secs(60);

/// Opens a delta ADS stream to `127.0.0.1:xds`, sends `first` (the node and
/// the first subscription) and waits for the first response. The sender keeps
/// the stream open while held; the stream yields the later responses.
pub async fn delta_open(
    xds: u16,
    first: envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest,
) -> (
    tokio::sync::mpsc::Sender<
        envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest,
    >,
    tonic::Streaming<envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryResponse>,
    envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryResponse,
) {
    use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
    let mut client = tokio::time::timeout(
        DELTA_WAIT,
        AggregatedDiscoveryServiceClient::connect(format!("http://127.0.0.1:{xds}")),
    )
    .await
    .expect("connect in time")
    .expect("connect");
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tx.send(first).await.expect("send the first request");
    let mut inbound = client
        .delta_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("stream")
        .into_inner();
    let response = tokio::time::timeout(DELTA_WAIT, inbound.message())
        .await
        .expect("first response in time")
        .expect("ok")
        .expect("a first response");
    (tx, inbound, response)
}
