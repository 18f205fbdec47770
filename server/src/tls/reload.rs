//! Reloading the TLS files when they change.
//!
//! The files are polled: each one's resolved target (symlinks followed) is
//! compared by path, inode, size and modification time. A rewrite in place
//! changes the time or size, a rename over the file changes the inode, and
//! Kubernetes' Secret volume update (a new `..2026_…` directory, then an atomic
//! swap of the `..data` symlink the files point through) changes the resolved
//! path. Polling needs no watch on a directory that is itself swapped away.
//!
//! A change that does not load (a key written before its certificate, a bad
//! file) keeps the config served and is retried at the next poll, so a
//! half-written rotation heals once complete.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::{TlsFiles, XdsTls, load};
use crate::metrics::Metrics;

/// How often the files are looked at.
pub const RELOAD_POLL: Duration = Duration::from_secs(1);

/// What identifies one file's content without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    target: Option<PathBuf>,
    inode: u64,
    len: u64,
    modified: Option<SystemTime>,
}

/// The stamps of every file of a [`TlsFiles`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stamps(Vec<Option<Stamp>>);

impl Stamps {
    pub(super) fn of(files: &TlsFiles) -> Self {
        use std::os::unix::fs::MetadataExt;
        let paths = [
            Some(&files.cert),
            Some(&files.key),
            files.client_ca.as_ref(),
        ];
        Stamps(
            paths
                .into_iter()
                .flatten()
                .map(|p| {
                    let m = std::fs::metadata(p).ok()?;
                    Some(Stamp {
                        target: std::fs::canonicalize(p).ok(),
                        inode: m.ino(),
                        len: m.len(),
                        modified: m.modified().ok(),
                    })
                })
                .collect(),
        )
    }
}

impl XdsTls {
    /// Reloads the files if they changed since the last load: `Ok(true)` when
    /// a new config now serves new connections, `Ok(false)` when nothing
    /// changed, `Err` when they changed but do not load (the old config stays).
    pub fn reload_if_changed(&self) -> Result<bool, crate::Error> {
        let now = Stamps::of(&self.files);
        let mut last = self.stamps.lock().unwrap_or_else(|p| p.into_inner());
        if *last == now {
            return Ok(false);
        }
        let config = load::server_config(&self.files)?;
        self.swap(config);
        *last = now;
        Ok(true)
    }
}

/// Polls `tls`'s files every [`RELOAD_POLL`] until `shutdown`, counting each
/// reload in `deltapilot_xds_tls_reloads_total{result}`. A failed load is logged
/// once per distinct error, not at every poll.
pub async fn watch_files(
    tls: Arc<XdsTls>,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut last_error: Option<String> = None;
    let mut tick = tokio::time::interval(RELOAD_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        let t = tls.clone();
        let result = match tokio::task::spawn_blocking(move || t.reload_if_changed()).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "the TLS reload task failed; retrying");
                continue;
            }
        };
        match result {
            Ok(false) => {}
            Ok(true) => {
                last_error = None;
                metrics
                    .xds_tls_reloads
                    .get_or_create(&[("result", "ok")])
                    .inc();
                tracing::info!(cert = %tls.files.cert.display(), "xDS TLS files changed: new connections use the new certificate");
            }
            Err(e) => {
                let text = e.to_string();
                if last_error.as_deref() != Some(&text) {
                    metrics
                        .xds_tls_reloads
                        .get_or_create(&[("result", "failed")])
                        .inc();
                    tracing::warn!(error = %text, "xDS TLS files changed but cannot be loaded; still serving the previous certificate, retrying");
                    last_error = Some(text);
                }
            }
        }
    }
}
