//! Filesystem events to "rescan these directories", debounced.
//!
//! An event only says *where* to look; the scan then compares bytes (see `scan`), so
//! the adapter never depends on the exact event sequence an editor, `kubectl cp`, a
//! `mv` over the file or a ConfigMap symlink swap produces. Each watched directory is
//! watched **non-recursively**: only files directly in it are read, which keeps
//! Kubernetes' hidden timestamped subdirectories out, and several directories are
//! given as several `--watch` flags.
//!
//! The notify callback runs on notify's own thread and must never block, so it
//! `try_send`s a small [`Signal`] into a bounded channel. When the channel is full
//! it sets an overflow flag instead, and the next burst rescans every directory:
//! a burst of events coalesces into one rescan, and nothing is queued without bound.
//!
//! What it does NOT do: read files, or rescan on a timer (the adapter loop does the
//! periodic full rescan, the safety net for anything a watch can miss: a directory
//! deleted and re-created, inotify queue overflows, network filesystems).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, EventKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::{Error, Result};

/// Capacity of the watcher-to-adapter signal channel. Signals are tiny and only mean
/// "look at directory i"; 256 absorbs the event burst of a bulk copy of a few dozen
/// files between two polls, and anything beyond that turns into one full rescan via
/// the overflow flag, so a larger queue would buy nothing.
pub const SIGNAL_CHANNEL_CAPACITY: usize = 256;

/// What the watcher asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    /// Something changed in watched directory `i`.
    Dir(usize),
    /// Something happened that cannot be tied to one directory (watcher error,
    /// kernel queue overflow): rescan everything.
    All,
}

/// Directories to rescan after a burst.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Dirty {
    /// Every directory.
    All,
    /// These directories.
    Dirs(BTreeSet<usize>),
}

impl Dirty {
    fn add(&mut self, s: Signal) {
        match (self, s) {
            (Dirty::All, _) => {}
            (me @ Dirty::Dirs(_), Signal::All) => *me = Dirty::All,
            (Dirty::Dirs(set), Signal::Dir(i)) => {
                set.insert(i);
            }
        }
    }
}

/// A notify watcher over the adapter's directories and the receiving end of its
/// signals.
pub(crate) struct DirWatcher {
    watcher: RecommendedWatcher,
    rx: mpsc::Receiver<Signal>,
    overflow: Arc<AtomicBool>,
}

impl DirWatcher {
    /// Creates the watcher (not yet watching anything; see [`DirWatcher::watch`]).
    pub(crate) fn new(dirs: Vec<PathBuf>) -> Result<Self> {
        let (tx, rx) = mpsc::channel(SIGNAL_CHANNEL_CAPACITY);
        let overflow = Arc::new(AtomicBool::new(false));
        let flag = overflow.clone();
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            for signal in signals(&dirs, res) {
                if let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(signal) {
                    flag.store(true, Ordering::Relaxed);
                }
            }
        })
        .map_err(|e| Error::Watch {
            path: None,
            reason: e.to_string(),
        })?;
        Ok(Self {
            watcher,
            rx,
            overflow,
        })
    }

    /// Watches `dir` (non-recursively). Idempotent: calling it again for a directory
    /// that was deleted and re-created watches the new one.
    pub(crate) fn watch(&mut self, dir: &Path) -> Result<()> {
        self.watcher
            .watch(dir, RecursiveMode::NonRecursive)
            .map_err(|e| Error::Watch {
                path: Some(dir.to_owned()),
                reason: e.to_string(),
            })
    }

    /// Waits for the first signal of a burst. Cancel-safe (it only receives), so it
    /// can sit in a `select!`. `None` once the watcher is gone.
    pub(crate) async fn first(&mut self) -> Option<Signal> {
        self.rx.recv().await
    }

    /// Collects the rest of a burst that began with `first`: signals keep coming
    /// until none arrives for `quiet`, or `max` has passed since the burst began,
    /// whichever is first, so a file written continuously still gets rescanned.
    pub(crate) async fn burst(&mut self, first: Signal, quiet: Duration, max: Duration) -> Dirty {
        let mut dirty = Dirty::Dirs(BTreeSet::new());
        dirty.add(first);
        let hard = Instant::now() + max;
        loop {
            let until = (Instant::now() + quiet).min(hard);
            match tokio::time::timeout_at(until, self.rx.recv()).await {
                Ok(Some(s)) => dirty.add(s),
                Ok(None) | Err(_) => break,
            }
            if Instant::now() >= hard {
                break;
            }
        }
        if self.overflow.swap(false, Ordering::Relaxed) {
            dirty = Dirty::All;
        }
        dirty
    }
}

/// Turns one notify callback into signals. Pure, so it is unit-tested.
fn signals(dirs: &[PathBuf], res: notify::Result<notify::Event>) -> Vec<Signal> {
    let ev = match res {
        Ok(ev) => ev,
        Err(_) => return vec![Signal::All],
    };
    if ev.need_rescan() {
        return vec![Signal::All];
    }
    // The adapter's own reads show up as opens and reads; only a close after
    // writing is a change.
    if let EventKind::Access(kind) = ev.kind
        && kind != AccessKind::Close(AccessMode::Write)
    {
        return Vec::new();
    }
    let mut out = Vec::new();
    for path in &ev.paths {
        let hit = dirs
            .iter()
            .position(|d| path.parent() == Some(d.as_path()) || path == d)
            .map_or(Signal::All, Signal::Dir);
        if !out.contains(&hit) {
            out.push(hit);
        }
    }
    if out.is_empty() {
        out.push(Signal::All);
    }
    out
}

#[cfg(test)]
mod tests {
    use notify::event::{CreateKind, Flag, ModifyKind, RenameMode};

    use super::*;

    fn mk_ev(kind: EventKind, paths: &[&str]) -> notify::Result<notify::Event> {
        let mut ev = notify::Event::new(kind);
        for p in paths {
            ev = ev.add_path(PathBuf::from(p));
        }
        Ok(ev)
    }

    #[test]
    fn events_map_to_their_directory_and_reads_are_ignored() {
        let dirs = vec![PathBuf::from("/a"), PathBuf::from("/b")];
        assert_eq!(
            signals(
                &dirs,
                mk_ev(EventKind::Create(CreateKind::File), &["/b/x.yaml"])
            ),
            [Signal::Dir(1)]
        );
        assert_eq!(
            signals(
                &dirs,
                mk_ev(
                    EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
                    &["/a/.x.tmp", "/a/x.yaml"]
                )
            ),
            [Signal::Dir(0)]
        );
        assert_eq!(
            signals(
                &dirs,
                mk_ev(
                    EventKind::Remove(notify::event::RemoveKind::Folder),
                    &["/a"]
                )
            ),
            [Signal::Dir(0)]
        );
        assert!(
            signals(
                &dirs,
                mk_ev(
                    EventKind::Access(AccessKind::Open(AccessMode::Any)),
                    &["/a/x.yaml"]
                )
            )
            .is_empty()
        );
        assert_eq!(
            signals(
                &dirs,
                mk_ev(
                    EventKind::Access(AccessKind::Close(AccessMode::Write)),
                    &["/a/x.yaml"]
                )
            ),
            [Signal::Dir(0)]
        );
        assert_eq!(
            signals(&dirs, mk_ev(EventKind::Any, &["/elsewhere/x"])),
            [Signal::All]
        );
        let overflow = notify::Event::new(EventKind::Other).set_flag(Flag::Rescan);
        assert_eq!(signals(&dirs, Ok(overflow)), [Signal::All]);
        assert_eq!(
            signals(&dirs, Err(notify::Error::generic("boom"))),
            [Signal::All]
        );
    }

    #[test]
    fn dirty_sets_coalesce() {
        let mut d = Dirty::Dirs(BTreeSet::new());
        d.add(Signal::Dir(1));
        d.add(Signal::Dir(1));
        d.add(Signal::Dir(0));
        assert_eq!(d, Dirty::Dirs([0, 1].into_iter().collect()));
        d.add(Signal::All);
        d.add(Signal::Dir(2));
        assert_eq!(d, Dirty::All);
    }

    #[tokio::test]
    async fn a_burst_coalesces_queued_signals_and_overflow_means_all() {
        let mut w = DirWatcher::new(vec![PathBuf::from("/nonexistent-for-test")]).expect("watcher");
        // The real sender lives in notify's callback; feed this receiver directly.
        let (tx, rx) = mpsc::channel(SIGNAL_CHANNEL_CAPACITY);
        w.rx = rx;
        for s in [Signal::Dir(0), Signal::Dir(1), Signal::Dir(0)] {
            tx.send(s).await.expect("send");
        }
        let first = w.first().await.expect("first");
        let dirty = w
            .burst(first, Duration::from_millis(20), Duration::from_secs(2))
            .await;
        assert_eq!(dirty, Dirty::Dirs([0, 1].into_iter().collect()));

        tx.send(Signal::Dir(1)).await.expect("send");
        w.overflow.store(true, Ordering::Relaxed);
        let first = w.first().await.expect("first");
        assert_eq!(
            w.burst(first, Duration::from_millis(20), Duration::from_secs(2))
                .await,
            Dirty::All
        );
    }
}
