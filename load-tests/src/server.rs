//! The server under test: a `deltapilot run` the load generator spawns (`--spawn`)
//! on a temporary data directory, or one already running (`--target`).
//!
//! A spawned server watches a directory of ServiceEntry files (its file adapter
//! appends them to its embedded log), or, with `--log kafka://…`, follows that
//! topic while the load generator appends to it; it listens on free loopback
//! ports, and logs to
//! `server.log` in the temporary directory. It is stopped with SIGTERM (then
//! killed if it does not drain in time) and killed on drop, so a failed run never
//! leaves it behind.
//!
//! A peer (`--peer go-control-plane`, `--peer istiod`) is spawned the same way
//! on its own temporary directory: it watches the ServiceEntry directory and
//! listens on a free loopback port; it has no admin port the load generator
//! reads, so it is ready once its xDS port accepts connections (both read the
//! directory before listening), and its CPU and RSS come from /proc.
//!
//! What it does NOT do: write the mesh (see `sink`) or measure (see `procstat`,
//! `metrics`).

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::metrics;
use crate::scenario::ServerSpec;

/// The binary's file name.
const BINARY: &str = "deltapilot";

/// Finds the `deltapilot` binary: `explicit` (`--server-bin` or
/// `DELTAPILOT_BIN`), else next to the running executable (the same target
/// directory, or its parent for test executables under `deps/`).
pub fn find_binary(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        if p.is_file() {
            return Ok(p.to_owned());
        }
        bail!("--server-bin {}: no such file", p.display());
    }
    let exe = std::env::current_exe().context("locating the running executable")?;
    if exe.file_name().and_then(|n| n.to_str()) == Some(BINARY) {
        return Ok(exe);
    }
    let dir = exe
        .parent()
        .context("the running executable has no directory")?;
    let candidates = [dir.join(BINARY), dir.join("..").join(BINARY)];
    for c in &candidates {
        if c.is_file() {
            return Ok(c.clone());
        }
    }
    bail!(
        "cannot find the {BINARY} binary next to {} (looked at {}); build it with \
         `cargo build --release -p deltapilot-server --bin deltapilot` (or without --release \
         for a debug run), or pass --server-bin PATH",
        exe.display(),
        candidates
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// A free loopback port (bound, then released for the server to take).
pub fn free_port() -> anyhow::Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?)
}

/// Directories of a spawned server, created before it starts so that the mesh
/// files are in place when its file adapter first scans.
#[derive(Debug)]
pub struct ServerDirs {
    /// The temporary directory (removed on drop unless kept).
    pub root: tempfile::TempDir,
    /// `--data-dir`; the embedded log is `data/log`.
    pub data: PathBuf,
    /// `--watch`.
    pub watch: PathBuf,
}

impl ServerDirs {
    /// Creates the directories.
    pub fn create() -> anyhow::Result<Self> {
        let root = tempfile::Builder::new()
            .prefix("deltapilot-loadgen-")
            .tempdir()
            .context("creating a temporary directory for the server")?;
        let data = root.path().join("data");
        let watch = root.path().join("mesh");
        std::fs::create_dir_all(&data)?;
        std::fs::create_dir_all(&watch)?;
        Ok(ServerDirs { root, data, watch })
    }

    /// The embedded log's directory.
    pub fn log_dir(&self) -> PathBuf {
        self.data.join("log")
    }
}

/// A running `deltapilot run`.
#[derive(Debug)]
pub struct Spawned {
    child: Child,
    /// Its xDS address.
    pub xds: SocketAddr,
    /// Its admin address (`None` for a peer, which has none).
    pub admin: Option<SocketAddr>,
    /// What it is, for messages: `deltapilot` or the peer's name.
    pub what: &'static str,
    /// Its output.
    pub log_file: PathBuf,
}

impl Spawned {
    /// Starts `bin run` on `dirs` and waits (up to `within`) until `/readyz` says
    /// ready. With `log`, the server follows that log (`--log`) and runs no
    /// adapter; without, it watches `dirs.watch` and uses its embedded log.
    pub async fn start(
        bin: &Path,
        dirs: &ServerDirs,
        log: Option<&str>,
        spec: &ServerSpec,
        within: Duration,
    ) -> anyhow::Result<Self> {
        let (xds, admin) = (free_port()?, free_port()?);
        let log_file = dirs.root.path().join("server.log");
        let out = std::fs::File::create(&log_file)?;
        let mut cmd = Command::new(bin);
        cmd.arg("run")
            .arg("--xds-addr")
            .arg(xds.to_string())
            .arg("--admin-addr")
            .arg(admin.to_string())
            .arg("--data-dir")
            .arg(&dirs.data);
        match log {
            Some(uri) => cmd.arg("--log").arg(uri),
            None => cmd.arg("--watch").arg(&dirs.watch),
        };
        if log.is_none() && !spec.log_options.is_empty() {
            cmd.arg("--log").arg(format!(
                "file://{}?{}",
                dirs.log_dir().display(),
                spec.log_options
            ));
        }
        if let Some(secs) = spec.checkpoint_every_secs {
            cmd.arg("--checkpoint-every-secs").arg(secs.to_string());
        }
        if let Some(keep) = spec.checkpoint_keep {
            cmd.arg("--checkpoint-keep").arg(keep.to_string());
        }
        if let Some(how) = &spec.route_delivery {
            cmd.arg("--route-delivery").arg(how);
        }
        let child = cmd
            .arg("--stall-timeout-secs")
            .arg(spec.stall_timeout_secs.to_string())
            .env("RUST_LOG", &spec.rust_log)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {} run", bin.display()))?;
        let mut s = Spawned {
            child,
            xds,
            admin: Some(admin),
            what: "deltapilot",
            log_file,
        };
        s.wait_ready(within).await?;
        Ok(s)
    }

    /// Starts the go-control-plane peer (`load-tests/peers/go-control-plane`)
    /// on `dirs.watch` with `cache` (`linear` or `snapshot`), and waits (up to
    /// `within`) until its xDS port accepts connections.
    pub async fn start_gcp_peer(
        bin: &Path,
        dirs: &ServerDirs,
        cache: &str,
        within: Duration,
    ) -> anyhow::Result<Self> {
        let xds = free_port()?;
        let mut cmd = Command::new(bin);
        cmd.arg("--addr")
            .arg(xds.to_string())
            .arg("--watch")
            .arg(&dirs.watch)
            .arg("--cache")
            .arg(cache);
        Self::start_peer(cmd, dirs, xds, "go-control-plane peer", within).await
    }

    /// Starts Istio's `pilot-discovery` (see [`crate::istiod`]) on `dirs.watch`,
    /// and waits (up to `within`) until its plaintext xDS port accepts
    /// connections, which istiod opens only once its config caches have synced.
    pub async fn start_istiod_peer(
        bin: &Path,
        dirs: &ServerDirs,
        within: Duration,
    ) -> anyhow::Result<Self> {
        let xds = free_port()?;
        let cmd = crate::istiod::command(
            bin,
            dirs.root.path(),
            &dirs.watch,
            xds,
            free_port()?,
            free_port()?,
            free_port()?,
        )?;
        Self::start_peer(cmd, dirs, xds, "istiod peer", within).await
    }

    async fn start_peer(
        mut cmd: Command,
        dirs: &ServerDirs,
        xds: SocketAddr,
        what: &'static str,
        within: Duration,
    ) -> anyhow::Result<Self> {
        let log_file = dirs.root.path().join("peer.log");
        let out = std::fs::File::create(&log_file)?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| {
                format!(
                    "starting the {what} {}",
                    cmd.get_program().to_string_lossy()
                )
            })?;
        let mut s = Spawned {
            child,
            xds,
            admin: None,
            what,
            log_file,
        };
        s.wait_ready(within).await?;
        Ok(s)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines of its output.
    pub fn output_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log_file).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Fails if the process has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "the spawned {} exited ({status}); its output:\n{}",
                self.what,
                self.output_tail()
            );
        }
        Ok(())
    }

    async fn wait_ready(&mut self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            self.check_alive()?;
            let ready = match self.admin {
                Some(admin) => matches!(
                    metrics::get(admin, "/readyz", Duration::from_secs(2)).await,
                    Ok((200, _))
                ),
                None => tokio::net::TcpStream::connect(self.xds).await.is_ok(),
            };
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the spawned {} was not ready within {within:?}; its output:\n{}",
                    self.what,
                    self.output_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERM, then a bounded wait, then SIGKILL.
    pub async fn stop(mut self, within: Duration) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
