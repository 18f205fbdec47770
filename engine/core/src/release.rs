//! Dropping large superseded values on a thread of their own.
//!
//! Why: a state the fold has moved past is freed node by node, and at 100k
//! endpoints that costs about as much per event as folding it did. On the
//! folding thread that is time the next batch waits; on a second core it
//! overlaps the next fold. The replay frees its decoded batches this way, and
//! the live engine the snapshots it replaces.
//!
//! Bounded: at most [`QUEUE`] values wait while one is being dropped; when the
//! queue is full (or the thread could not be started), the value is dropped in
//! place, exactly as without a releaser. The thread ends when its releaser is
//! dropped, after dropping what was queued.
//!
//! What it does NOT do: decide what is garbage. A value sent here may still be
//! shared (a snapshot a reader holds); dropping it then only drops a reference.

use std::sync::mpsc::{SyncSender, sync_channel};

/// Values that may wait for the thread while it drops another: one waiting is
/// enough to keep it busy, and bounds the memory awaiting release.
const QUEUE: usize = 1;

/// Drops values of type `T` on a thread named `name`, started on first use.
#[derive(Debug)]
pub(crate) struct Releaser<T: Send + 'static> {
    name: &'static str,
    tx: Option<SyncSender<T>>,
    started: bool,
}

impl<T: Send + 'static> Releaser<T> {
    /// A releaser whose thread (not started yet) is called `name`.
    pub(crate) fn new(name: &'static str) -> Self {
        Releaser {
            name,
            tx: None,
            started: false,
        }
    }

    /// Drops `garbage` on the releaser's thread, or here when that thread is
    /// busy with a full queue or could not be started.
    pub(crate) fn release(&mut self, garbage: T) {
        if !self.started {
            self.started = true;
            let (tx, rx) = sync_channel::<T>(QUEUE);
            let spawned = std::thread::Builder::new()
                .name(self.name.into())
                .spawn(move || while rx.recv().is_ok() {});
            if spawned.is_ok() {
                self.tx = Some(tx);
            }
        }
        match &self.tx {
            Some(tx) => {
                // Full or gone: the value comes back in the error and is
                // dropped here.
                let _ = tx.try_send(garbage);
            }
            None => drop(garbage),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::thread::ThreadId;

    use super::*;

    /// Records the thread it is dropped on.
    struct Tracked(Arc<Mutex<Vec<ThreadId>>>);

    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0
                .lock()
                .expect("drop log")
                .push(std::thread::current().id());
        }
    }

    #[test]
    fn values_are_dropped_on_the_releasers_thread_or_here_when_it_is_busy() {
        let drops = Arc::new(Mutex::new(Vec::new()));
        let mut r = Releaser::new("test-release");
        for _ in 0..50 {
            r.release(Tracked(drops.clone()));
        }
        // Dropping the releaser closes the channel; wait for the thread to
        // finish what it was sent.
        drop(r);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while drops.lock().expect("drop log").len() < 50 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let drops = drops.lock().expect("drop log");
        assert_eq!(drops.len(), 50, "every value is dropped exactly once");
        let here = std::thread::current().id();
        assert!(
            drops.iter().any(|t| *t != here),
            "at least one value was dropped on the releaser's thread"
        );
    }
}
