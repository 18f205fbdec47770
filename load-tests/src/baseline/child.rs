//! The replay server as its own process: the load generator's binary started
//! again in a hidden mode (`--baseline-serve DIR`).
//!
//! Why a process: 10,000 proxies need 10,000 client sockets here and 10,000
//! server sockets in the replay server; one process may hold only
//! `RLIMIT_NOFILE` descriptors (20,000 on the reference machine, and the hard
//! limit cannot be raised there), and a separate process is also what the
//! server under test is. The in-process server remains for library use (tests),
//! where no binary exists to start.
//!
//! Protocol: the parent writes the captured responses to `DIR/initial.bin` and
//! `DIR/pushes.bin` (each message as a little-endian `u32` length and its bytes);
//! the child listens on a free loopback port, prints `LISTENING <addr>` on
//! stdout, then sends push `i` to every stream for each `PUSH <i>` line on
//! stdin, and stops at end of input. The pipe adds microseconds to each raw
//! fan-out time, which is noted in the report.
//!
//! What it does NOT do: measure anything (the parent does).

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::{Buf, Bytes};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use super::BaselineServer;

/// Push orders waiting between the stdin thread and the server: the parent sends
/// them at churn pace, so a few are ever queued; a full queue blocks the reader,
/// which only delays the parent's writes.
const PUSH_QUEUE: usize = 1024;

/// Writes messages as `len: u32 LE | bytes`.
pub fn write_messages(path: &Path, msgs: &[Bytes]) -> anyhow::Result<()> {
    let mut out = Vec::with_capacity(msgs.iter().map(|m| m.len() + 4).sum());
    for m in msgs {
        out.extend_from_slice(&(m.len() as u32).to_le_bytes());
        out.extend_from_slice(m);
    }
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}

/// Reads what [`write_messages`] wrote.
pub fn read_messages(path: &Path) -> anyhow::Result<Vec<Bytes>> {
    let mut b =
        Bytes::from(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?);
    let mut out = Vec::new();
    while b.has_remaining() {
        if b.remaining() < 4 {
            bail!("{}: truncated length", path.display());
        }
        let n = b.get_u32_le() as usize;
        if b.remaining() < n {
            bail!("{}: truncated message", path.display());
        }
        out.push(b.split_to(n));
    }
    Ok(out)
}

/// The child's main: serve `DIR`'s responses until stdin ends.
pub async fn serve(dir: &Path) -> anyhow::Result<()> {
    let initial = read_messages(&dir.join("initial.bin"))?;
    let pushes = read_messages(&dir.join("pushes.bin"))?;
    let server = BaselineServer::start(initial).await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "LISTENING {}", server.addr)?;
        out.flush()?;
    }
    // Standard input is read on its own thread (blocking reads), one line per push.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<usize>(PUSH_QUEUE);
    std::thread::Builder::new()
        .name("baseline-stdin".into())
        .spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if let Some(i) = line
                    .strip_prefix("PUSH ")
                    .and_then(|i| i.trim().parse().ok())
                    && tx.blocking_send(i).is_err()
                {
                    break;
                }
            }
        })?;
    while let Some(i) = rx.recv().await {
        if let Some(p) = pushes.get(i) {
            server.push(p.clone());
        }
    }
    server.stop(Duration::from_secs(5)).await;
    Ok(())
}

/// The replay server running as a child process.
pub struct ChildServer {
    /// Where it listens.
    pub addr: SocketAddr,
    child: Child,
    stdin: ChildStdin,
    _dir: tempfile::TempDir,
}

impl ChildServer {
    /// Starts `exe [prefix..] --baseline-serve DIR` with the captured responses.
    pub async fn start(
        exe: &Path,
        prefix: &[String],
        initial: &[Bytes],
        pushes: &[Bytes],
    ) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("deltapilot-baseline-")
            .tempdir()?;
        write_messages(&dir.path().join("initial.bin"), initial)?;
        write_messages(&dir.path().join("pushes.bin"), pushes)?;
        let mut child = Command::new(exe)
            .args(prefix)
            .arg("--baseline-serve")
            .arg(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting the baseline server ({})", exe.display()))?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .context("the baseline server did not start within 30 s")??
            .unwrap_or_default();
        let addr: SocketAddr = first
            .strip_prefix("LISTENING ")
            .and_then(|a| a.trim().parse().ok())
            .with_context(|| {
                format!("the baseline server said {first:?} instead of LISTENING <addr>")
            })?;
        Ok(ChildServer {
            addr,
            child,
            stdin,
            _dir: dir,
        })
    }

    /// Its process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Sends push `i` to every stream.
    pub async fn push(&mut self, i: usize) -> anyhow::Result<()> {
        self.stdin
            .write_all(format!("PUSH {i}\n").as_bytes())
            .await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// Closes its input and waits (bounded) for it to exit.
    pub async fn stop(mut self, within: Duration) {
        drop(self.stdin);
        if tokio::time::timeout(within, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// How to start the load generator's own binary in child mode: the executable
/// and the arguments before `--baseline-serve` (`loadgen` for `deltapilot`).
pub fn own_binary() -> Option<(PathBuf, Vec<String>)> {
    let exe = std::env::current_exe().ok()?;
    match exe.file_name()?.to_str()? {
        "deltapilot" => Some((exe, vec!["loadgen".into()])),
        "deltapilot-loadgen" => Some((exe, Vec::new())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("m.bin");
        let msgs = vec![
            Bytes::from_static(b"abc"),
            Bytes::new(),
            Bytes::from(vec![7u8; 70_000]),
        ];
        write_messages(&p, &msgs).expect("write");
        assert_eq!(read_messages(&p).expect("read"), msgs);
        std::fs::write(&p, [5, 0, 0, 0, 1]).expect("write");
        assert!(read_messages(&p).is_err());
    }
}
