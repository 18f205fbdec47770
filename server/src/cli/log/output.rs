//! stdout for `log read` and `log tail`: a dedicated writer thread fed through a
//! bounded channel.
//!
//! Why a thread: writing to a pipe blocks when the reader is slow or paused. Done on
//! an async worker, a blocked write would keep `log tail` from seeing SIGINT/SIGTERM;
//! done on tokio's blocking pool, it would keep the runtime from shutting down. A
//! plain thread can be left behind at exit, and the async side only ever awaits a
//! cancellable channel send.
//!
//! A reader that goes away (broken pipe, e.g. `deltapilot log read | head`) is not
//! an error: the writer stops and the command exits quietly with status 0. It is
//! noticed at the next write, as with any Unix filter.
//!
//! What it does NOT do: format lines (see `jsonl.rs`) or decide when to stop.

use std::io::{self, Write};
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::{mpsc, oneshot};

/// Chunks of lines that may wait for the writer thread. Bounded so a slow stdout
/// reader slows the log reader down instead of the log piling up in memory. A chunk
/// is at most [`super::read::READ_CHUNK`] (read) or `FOLLOW_BATCH_MAX` (tail) lines,
/// about 2 MB of typical ~500-byte lines, so eight keep a pipe busy while the next
/// chunk is read and cap the queue near 16 MB.
const OUTPUT_QUEUE: usize = 8;

/// Whether a chunk reached the writer thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sent {
    /// Queued for writing.
    Queued,
    /// The writer has stopped (stdout closed or failed); call [`Output::finish`] to
    /// learn which.
    Stopped,
}

/// The stdout writer. Each chunk is written whole and flushed, so a reader of a
/// pipe sees complete lines as soon as they are produced.
pub(super) struct Output {
    tx: mpsc::Sender<Vec<u8>>,
    done: oneshot::Receiver<io::Result<()>>,
}

impl Output {
    /// Starts the writer thread.
    pub(super) fn spawn() -> anyhow::Result<Self> {
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(OUTPUT_QUEUE);
        let (done_tx, done) = oneshot::channel();
        std::thread::Builder::new()
            .name("stdout-writer".into())
            .spawn(move || {
                let mut stdout = io::stdout().lock();
                let mut result = Ok(());
                while let Some(chunk) = rx.blocking_recv() {
                    if let Err(e) = stdout.write_all(&chunk).and_then(|()| stdout.flush()) {
                        result = Err(e);
                        break;
                    }
                }
                // The receiver is gone only if the command already returned.
                let _ = done_tx.send(result);
            })
            .context("starting the stdout writer thread")?;
        Ok(Self { tx, done })
    }

    /// Queues a chunk of complete lines, waiting while the queue is full.
    pub(super) async fn send(&self, chunk: Vec<u8>) -> Sent {
        if chunk.is_empty() {
            return Sent::Queued;
        }
        match self.tx.send(chunk).await {
            Ok(()) => Sent::Queued,
            Err(_) => Sent::Stopped,
        }
    }

    /// Completes once the writer has stopped (stdout closed or failed), so a command
    /// that waits for input can end as soon as its output is gone.
    pub(super) async fn stopped(&self) {
        self.tx.closed().await;
    }

    /// Waits until everything queued is written. A closed stdout (broken pipe) is a
    /// normal end; any other write error is returned.
    pub(super) async fn finish(self) -> anyhow::Result<()> {
        let Self { tx, done } = self;
        drop(tx);
        match done.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
            Ok(Err(e)) => Err(e).context("writing to stdout"),
            Err(_) => anyhow::bail!("the stdout writer thread stopped without a result"),
        }
    }

    /// Like [`Output::finish`], but gives up after `grace` (used when stopping on a
    /// signal while the reader of stdout may be stalled).
    pub(super) async fn finish_within(self, grace: Duration) -> anyhow::Result<()> {
        tokio::time::timeout(grace, self.finish())
            .await
            .unwrap_or(Ok(()))
    }
}
