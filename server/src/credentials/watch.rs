//! Rescanning the credentials directory when anything under it changes.
//!
//! The whole tree is watched, recursively: Kubernetes updates a mounted Secret
//! by writing a new timestamped directory and renaming a `..data_tmp` symlink
//! over `..data`, so `tls.crt` (a symlink into `..data`) never sees an event of
//! its own. Any event triggers one full rescan (events are coalesced: the
//! channel from the watcher holds at most [`WATCH_EVENTS`], and a full one
//! means a rescan is already due). A periodic rescan catches what a watcher
//! can miss (a directory that did not exist at start, an overflowed kernel
//! queue).

use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::CredentialStore;

/// Capacity of the channel from the file watcher: one pending event is enough
/// to know a rescan is due; a few more absorb a burst without blocking the
/// watcher's thread (it never blocks: `try_send`, and a full channel drops).
pub(crate) const WATCH_EVENTS: usize = 16;

/// How long after an event the rescan waits, so that a burst (a Secret update
/// writes several files and symlinks) is read once, complete.
const SETTLE: Duration = Duration::from_millis(50);

/// The fallback rescan period.
const RESCAN_EVERY: Duration = Duration::from_secs(30);

/// Watches the store's directory and rescans on change until `drain` turns
/// true. Returns `None` when the store has no directory.
pub fn spawn_watcher(
    store: Arc<CredentialStore>,
    mut drain: watch::Receiver<bool>,
) -> anyhow::Result<Option<JoinHandle<()>>> {
    let Some(dir) = store.dir().map(|d| d.to_path_buf()) else {
        return Ok(None);
    };
    let (tx, mut rx) = mpsc::channel::<()>(WATCH_EVENTS);
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        if ev.is_ok_and(|e| !e.kind.is_access()) {
            let _ = tx.try_send(());
        }
    })?;
    watcher
        .watch(&dir, RecursiveMode::Recursive)
        .map_err(|e| anyhow::anyhow!("watching credentials directory {}: {e}", dir.display()))?;
    Ok(Some(tokio::spawn(async move {
        // Owned by the task: dropping it stops the watch.
        let _watcher = watcher;
        let mut every = tokio::time::interval(RESCAN_EVERY);
        every.tick().await;
        loop {
            tokio::select! {
                r = drain.changed() => {
                    if r.is_err() || *drain.borrow() {
                        break;
                    }
                }
                ev = rx.recv() => {
                    if ev.is_none() {
                        break;
                    }
                    tokio::time::sleep(SETTLE).await;
                    while rx.try_recv().is_ok() {}
                    rescan(&store).await;
                }
                _ = every.tick() => rescan(&store).await,
            }
        }
    })))
}

/// Rescans off the async threads (it reads files).
async fn rescan(store: &Arc<CredentialStore>) {
    let s = store.clone();
    if let Err(e) = tokio::task::spawn_blocking(move || s.rescan()).await {
        tracing::warn!(error = %e, "credentials rescan failed");
    }
}
