//! Reading a checkpoint ahead: [`CheckpointStore::prefetch`] reads and decodes
//! the newest file at or before a position on a blocking thread while the
//! caller opens the log, and the next [`super::load_verified`] on that store
//! takes the result if it is a file it would read.
//!
//! Why: a replay from a checkpoint near the head is mostly these two steps, and
//! they are independent until the checkpoint is checked against the log.
//! Opening an embedded log scans its newest segment on one core, and a
//! checkpoint's first steps (header, section table, reading and framing the
//! state section) run on one core too: one after the other they leave a core
//! idle for both.
//!
//! What it does NOT do: check the checkpoint against the log (its head and
//! fingerprints are not known yet). `load_verified` checks a prefetched
//! checkpoint exactly as one it reads itself, and reads the file again if the
//! prefetch is not the file it wants.

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::task::JoinHandle;

use super::Checkpoint;
use super::store::{CheckpointStore, read_checked};
use deltapilot_log::Position;

/// A file read ahead.
#[derive(Debug)]
pub(super) struct Decoded {
    /// The file.
    pub(super) path: PathBuf,
    /// The position its header gives (`None` when the header is damaged).
    pub(super) peeked: Option<Position>,
    /// What reading it gave: the reason when it is unusable.
    pub(super) read: Result<Checkpoint, String>,
}

impl Decoded {
    /// What a load wanting a state at or before `at_most` from a log whose head
    /// is `head` gets from this file: the same answer, and the same reason,
    /// as when it reads the file itself (see `read_checked`).
    pub(super) fn for_load(
        self,
        at_most: Option<&Position>,
        head: &Position,
    ) -> Result<Checkpoint, String> {
        match &self.peeked {
            Some(p) => usable(p, at_most, Some(head)).and(self.read),
            None => self.read,
        }
    }
}

/// Where a store keeps its prefetch until a load takes it. Shared by the
/// store's clones, so a prefetch started on one is found by a load on another.
#[derive(Debug, Default, Clone)]
pub(super) struct Slot(Arc<Mutex<Option<JoinHandle<Option<Decoded>>>>>);

impl Slot {
    /// The prefetch started last, if no load took it yet.
    pub(super) fn take(&self) -> Option<JoinHandle<Option<Decoded>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    pub(super) fn put(&self, task: JoinHandle<Option<Decoded>>) {
        // A prefetch replaced before any load took it finishes on its own and
        // its result is dropped.
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(task);
    }
}

/// Whether a checkpoint taken at `p` may serve a load that wants a state at or
/// before `at_most` (any, when `None`) from a log whose head is `head` (not
/// checked when `None`); `Err` says why not.
pub(super) fn usable(
    p: &Position,
    at_most: Option<&Position>,
    head: Option<&Position>,
) -> Result<(), String> {
    if let Some(limit) = at_most
        && !limit.covers(p)
    {
        return Err(format!("taken at {p}, after the wanted position {limit}"));
    }
    if let Some(head) = head
        && !head.covers(p)
    {
        return Err(format!("taken at {p}, beyond the log's head {head}"));
    }
    Ok(())
}

impl CheckpointStore {
    /// Starts reading the newest checkpoint at or before `at_most` (any, when
    /// `None`) on a blocking thread, for the next [`super::load_verified`] on
    /// this store to take (see the module documentation). Outside a Tokio
    /// runtime it does nothing, and the load reads the file itself.
    pub fn prefetch(&self, at_most: Option<&Position>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, at_most) = (self.clone(), at_most.cloned());
        self.slot().put(rt.spawn_blocking(move || {
            let files = store.list().ok()?;
            // The first file whose header says it is early enough: the one the
            // load reads first, unless the log's head is before it.
            files.into_iter().rev().find_map(|f| {
                let peeked = RefCell::new(None);
                let read = read_checked(&f.path, &|p| {
                    *peeked.borrow_mut() = Some(p.clone());
                    usable(p, at_most.as_ref(), None)
                });
                let peeked = peeked.into_inner();
                match &peeked {
                    Some(p) if usable(p, at_most.as_ref(), None).is_err() => None,
                    _ => Some(Decoded {
                        path: f.path,
                        peeked,
                        read,
                    }),
                }
            })
        }));
    }
}
