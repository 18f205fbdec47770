//! Following the log: a pull stream of record batches and caught-up markers.
//!
//! In the writing process a follower sleeps on the head's `watch` channel and wakes
//! only when an append publishes a new head. A read-only handle cannot be told by
//! another process, so its followers also wake every [`POLL_INTERVAL`] and re-scan
//! the files (one refresh at a time, shared by all followers of the handle).
//!
//! What it does NOT do: buffer ahead. Records are read when the consumer pulls,
//! at most [`FOLLOW_BATCH_MAX`] records or [`FOLLOW_BATCH_BYTES`] at a time, so a
//! slow consumer costs nothing but its own lag.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, BoxStream};
use tokio::sync::watch;

use super::recovery;
use super::shared::Shared;
use crate::{Error, Result};
use crate::{FOLLOW_BATCH_MAX, FollowItem, Position};

/// How often a read-only follower looks at the files for records another process
/// appended: the bound on its added latency. Each look is a directory listing and
/// one `stat`, so polling costs little.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Payload bytes above which a follower batch stops early (it always holds at least
/// one record), so that large events cannot make a batch of [`FOLLOW_BATCH_MAX`]
/// records unreasonably big.
pub(crate) const FOLLOW_BATCH_BYTES: usize = 4 * 1024 * 1024;

struct Follower {
    shared: Arc<Shared>,
    rx: watch::Receiver<u64>,
    /// Where the consumer asked to start; checked on the first pull.
    from: Option<Position>,
    next: u64,
    /// Whether a `CaughtUp` is owed: at the start and after each delivery.
    caught_up_due: bool,
    done: bool,
}

/// Follows the log from `from`.
pub(crate) fn follow(
    shared: Arc<Shared>,
    from: Position,
) -> BoxStream<'static, Result<FollowItem>> {
    let rx = shared.subscribe();
    let f = Follower {
        shared,
        rx,
        from: Some(from),
        next: 0,
        caught_up_due: true,
        done: false,
    };
    Box::pin(stream::unfold(f, |mut f| async move {
        let item = f.pull().await?;
        Some((item, f))
    }))
}

/// Runs blocking log I/O off the async workers.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Cancelled: the runtime is shutting down.
        Err(_) => Err(Error::Closed),
    }
}

impl Follower {
    async fn pull(&mut self) -> Option<Result<FollowItem>> {
        if self.done {
            return None;
        }
        let item = self.step().await;
        if item.is_err() {
            self.done = true;
        }
        Some(item)
    }

    async fn step(&mut self) -> Result<FollowItem> {
        if let Some(from) = self.from.take() {
            if self.shared.read_only() {
                self.refresh().await?;
            }
            self.next = self.shared.check_position(&from)?;
        }
        loop {
            if self.shared.is_closed() {
                return Err(Error::Closed);
            }
            let head = *self.rx.borrow_and_update();
            if self.next < head {
                // Retention may have deleted what a slow follower had yet to read.
                self.shared.check_position(&Position::single(self.next))?;
                let (shared, next) = (self.shared.clone(), self.next);
                let recs =
                    blocking(move || shared.read(next, FOLLOW_BATCH_MAX, FOLLOW_BATCH_BYTES))
                        .await?;
                if let Some(last) = recs.last() {
                    self.next = last.pos.offset + 1;
                    self.caught_up_due = true;
                    return Ok(FollowItem::Records(recs));
                }
            } else if self.caught_up_due {
                self.caught_up_due = false;
                return Ok(FollowItem::CaughtUp(Position::single(self.next)));
            }
            self.wait().await?;
        }
    }

    /// Waits until the head may have moved.
    async fn wait(&mut self) -> Result<()> {
        if !self.shared.read_only() {
            return self.rx.changed().await.map_err(|_| Error::Closed);
        }
        match tokio::time::timeout(POLL_INTERVAL, self.rx.changed()).await {
            Ok(changed) => changed.map_err(|_| Error::Closed),
            Err(_elapsed) => self.refresh().await,
        }
    }

    async fn refresh(&self) -> Result<()> {
        let shared = self.shared.clone();
        blocking(move || recovery::refresh(&shared)).await
    }
}
