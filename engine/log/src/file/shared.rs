//! State shared by the writer, readers and followers of one open log.
//!
//! The segment list sits behind a `RwLock` held only to copy out what a read needs
//! or to apply what an append did: no I/O happens under it. The head is published
//! on a `tokio::sync::watch` channel so in-process followers wake exactly when it
//! moves.
//!
//! What it does NOT do: any I/O of its own; the writer, the read path and the
//! read-only refresh do that.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::sync::watch;

use super::segment::{self, Segments};
use crate::{Error, Result};
use crate::{Position, Record};

/// What the writer, readers and followers of one open log share.
#[derive(Debug)]
pub(crate) struct Shared {
    dir: PathBuf,
    read_only: bool,
    segments: RwLock<Segments>,
    head_tx: watch::Sender<u64>,
    closed: AtomicBool,
    /// Serialises read-only refreshes (several followers may poll at once).
    refresh: Mutex<()>,
    /// The compaction horizon (see `compact.rs`): state is exact from here on.
    horizon: AtomicU64,
    /// The first offset still stored (see `retain.rs`): 0 until segments are
    /// deleted.
    start: AtomicU64,
}

impl Shared {
    /// State for a log in `dir` whose segments are already verified.
    pub(crate) fn new(dir: PathBuf, read_only: bool, segments: Segments) -> Self {
        let (head_tx, _) = watch::channel(segments.head);
        Self {
            dir,
            read_only,
            segments: RwLock::new(segments),
            head_tx,
            closed: AtomicBool::new(false),
            refresh: Mutex::new(()),
            horizon: AtomicU64::new(0),
            start: AtomicU64::new(0),
        }
    }

    /// The first offset still stored: positions below it were deleted.
    pub(crate) fn start(&self) -> u64 {
        self.start.load(Ordering::Acquire)
    }

    /// Raises the start (it never goes down).
    pub(crate) fn set_start(&self, start: u64) {
        self.start.fetch_max(start, Ordering::AcqRel);
    }

    /// The compaction horizon: positions below it are inside a compacted range.
    pub(crate) fn horizon(&self) -> u64 {
        self.horizon.load(Ordering::Acquire)
    }

    /// Raises the horizon (it never goes down).
    pub(crate) fn set_horizon(&self, horizon: u64) {
        self.horizon.fetch_max(horizon, Ordering::AcqRel);
    }

    /// Sets the horizon from the directory's record and the compacted segments
    /// (the larger: a log whose `COMPACTED` file was lost still knows where its
    /// compacted segments end).
    pub(crate) fn load_horizon(&self) -> Result<()> {
        let recorded = super::compact::read_horizon(&self.dir)?;
        let from_segments = self
            .segments()
            .list
            .iter()
            .filter(|s| s.compacted)
            .map(|s| s.end_offset)
            .max()
            .unwrap_or(0);
        self.set_horizon(recorded.max(from_segments));
        Ok(())
    }

    /// The log directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether this handle only reads (no lock held, nothing truncated).
    pub(crate) fn read_only(&self) -> bool {
        self.read_only
    }

    /// Shared access to the segments.
    pub(crate) fn segments(&self) -> RwLockReadGuard<'_, Segments> {
        self.segments.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Exclusive access to the segments, for the writer and the refresh.
    pub(crate) fn segments_mut(&self) -> RwLockWriteGuard<'_, Segments> {
        self.segments
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the refresh lock (read-only handles).
    pub(crate) fn refresh_guard(&self) -> MutexGuard<'_, ()> {
        self.refresh.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The published head.
    pub(crate) fn head(&self) -> u64 {
        self.segments().head
    }

    /// Sets the head readers may see and wakes followers if it moved.
    pub(crate) fn publish(&self, head: u64) {
        self.segments_mut().head = head;
        self.head_tx.send_if_modified(|h| {
            let moved = *h != head;
            *h = head;
            moved
        });
    }

    /// A receiver of head changes, for a follower.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.head_tx.subscribe()
    }

    /// Marks the log closed and wakes every follower so it can end.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.head_tx.send_modify(|_| {});
    }

    /// Whether the owning `FileLog` was dropped.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Checks that `from` is a position of this log and returns its offset.
    pub(crate) fn check_position(&self, from: &Position) -> Result<u64> {
        let head = self.head();
        let off = from.offset(0);
        let start = self.start();
        if from.partitions() > 1 || off > head {
            return Err(Error::PositionOutOfRange {
                requested: from.to_string(),
                start: start.to_string(),
                head: head.to_string(),
            });
        }
        if off < start {
            return Err(Error::BeforeRetention {
                requested: from.to_string(),
                oldest: start.to_string(),
            });
        }
        Ok(off)
    }

    /// Reads up to `limit` records from offset `from` (blocking I/O).
    pub(crate) fn read(&self, from: u64, limit: usize, max_bytes: usize) -> Result<Vec<Record>> {
        segment::read(&self.segments, from, limit, max_bytes)
    }
}
