//! `follow`: a pulled stream of record batches and catch-up marks.
//!
//! One assigned consumer per follower. Records are yielded in arrival order, which
//! keeps each partition's offset order but interleaves partitions as the broker
//! answers fetches (a live tail has no better cross-partition order to offer). A
//! batch is whatever is already buffered locally, up to
//! [`FOLLOW_BATCH_MAX`], and never empty.
//!
//! The first [`FollowItem::CaughtUp`] (readiness) comes once the follower has read
//! up to the high watermarks it measured with ListOffsets when it started (one
//! round trip), or once every partition has reported end-of-partition, whichever
//! is first; a follower started at the head is caught up without a fetch. After
//! that, `CaughtUp` is emitted once every partition has reported end-of-partition
//! since it last delivered records: librdkafka raises that event when a fetch
//! response's high watermark shows the consumer at the end, so it is the same
//! measure without another round trip. That is
//! "each partition was at its end at some moment since the last batch", not a
//! consistent cut across partitions: a record appended to partition 1 just before
//! partition 0's last record was read may not have been seen yet. Readiness can
//! use it; a cross-partition barrier needs more (see the resync notes in the module
//! docs of [`crate::kafka`]).
//!
//! Bounds: while catching up, a wait with no record and no end-of-partition for
//! `request_timeout` yields an `Err` item naming the stalled partitions
//! (`Error::Stalled`, which `is_transient`), and the
//! stream goes on (the consumer keeps retrying); the caller may drop it instead.
//! A fatal client error or an offset the broker rejects as out of range is yielded
//! as an `Err` too, and ends the stream.
//! Once caught up the follower waits for new records without a bound, since an idle
//! log is normal; a broker lost while idle is logged, not yielded.
//!
//! What it does NOT do: decode events, commit offsets, or notice partitions added
//! to the topic after `connect`.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::time::Instant;

use super::Shared;
use super::config::ConsumerRole;
use super::consume::{Assigned, Polled, high_watermarks, start_offsets};
use crate::{Error, Result};
use crate::{FOLLOW_BATCH_MAX, FollowItem, Position, Record};

/// Where a follow stream is.
enum State {
    /// Not started: the consumer is created on the first poll, inside the runtime
    /// (a `StreamConsumer` spawns a task when it is created).
    Start(Arc<Shared>, Position),
    /// Following.
    Running(Box<Follower>),
    /// Ended after an error that cannot be recovered.
    Done,
}

struct Follower {
    shared: Arc<Shared>,
    consumer: Assigned,
    /// Next offset per partition, advanced past every record yielded or pending.
    pos: Position,
    /// Per partition: reported EOF since it last delivered a record.
    at_eof: Vec<bool>,
    /// The high watermarks measured at the start, until the first `CaughtUp`: the
    /// follower is caught up once its position covers them. `None` after that, or
    /// when they could not be measured (then only end-of-partition events count).
    target: Option<Vec<u64>>,
    /// Records have been delivered (or nothing was reported yet) since the last
    /// `CaughtUp`, so one is due once every partition is at EOF.
    owe_caught_up: bool,
    pending: Vec<Record>,
    /// When a partition last delivered a record or reported its end; client errors
    /// while librdkafka retries do not count.
    last_progress: Instant,
    last_client_error: Option<String>,
}

/// The stream behind [`KafkaLog::follow`](super::KafkaLog).
pub(super) fn follow(
    shared: Arc<Shared>,
    from: Position,
) -> BoxStream<'static, Result<FollowItem>> {
    futures::stream::unfold(State::Start(shared, from), |state| async move {
        let mut f = match state {
            State::Done => return None,
            State::Start(shared, from) => match Follower::start(shared, &from).await {
                Ok(f) => Box::new(f),
                Err(e) => return Some((Err(e), State::Done)),
            },
            State::Running(f) => f,
        };
        match f.next_item().await {
            Ok(item) => Some((Ok(item), State::Running(f))),
            Err(Stop::Stalled(e)) => Some((Err(e), State::Running(f))),
            Err(Stop::Fatal(e)) => Some((Err(e), State::Done)),
        }
    })
    .boxed()
}

/// Why `next_item` yields an error instead of an item.
enum Stop {
    /// No progress for a while; the stream goes on (the consumer keeps retrying).
    Stalled(Error),
    /// The consumer cannot go on (fatal client error, position out of range); the
    /// stream ends after yielding it.
    Fatal(Error),
}

impl Follower {
    async fn start(shared: Arc<Shared>, from: &Position) -> Result<Self> {
        let start = start_offsets(&shared, from)?;
        let consumer = Assigned::new(&shared.target, ConsumerRole::Follow, &start)?;
        let n = start.len();
        // Not fatal: a broker that is down now may be back soon, and the consumer
        // retries by itself; end-of-partition events then say when it caught up.
        let mut last_client_error = None;
        let target = match high_watermarks(&shared, "follow").await {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(
                    topic = %shared.target.topic,
                    brokers = %shared.target.brokers,
                    error = %e,
                    "kafka follower: could not measure the high watermarks; caught up at end-of-partition instead"
                );
                last_client_error = Some(e.to_string());
                None
            }
        };
        Ok(Self {
            shared,
            consumer,
            pos: Position::from_offsets(start),
            at_eof: vec![false; n],
            target,
            owe_caught_up: true,
            pending: Vec::new(),
            last_progress: Instant::now(),
            last_client_error,
        })
    }

    async fn next_item(&mut self) -> Result<FollowItem, Stop> {
        loop {
            if self.pending.len() >= FOLLOW_BATCH_MAX {
                let rest = self.pending.split_off(FOLLOW_BATCH_MAX);
                self.shared.health.read_ok();
                return Ok(FollowItem::Records(std::mem::replace(
                    &mut self.pending,
                    rest,
                )));
            }
            if !self.pending.is_empty() {
                // Drain what is already buffered into this batch; yield when dry.
                match self.consumer.try_next().map_err(Stop::Fatal)? {
                    Some(p) => self.apply(p),
                    None => {
                        self.shared.health.read_ok();
                        return Ok(FollowItem::Records(std::mem::take(&mut self.pending)));
                    }
                }
                continue;
            }
            if self.owe_caught_up && (self.at_eof.iter().all(|&e| e) || self.reached_target()) {
                self.owe_caught_up = false;
                self.target = None;
                self.last_client_error = None;
                self.shared.health.read_ok();
                return Ok(FollowItem::CaughtUp(self.pos.clone()));
            }
            if !self.owe_caught_up {
                // Caught up and idle: wait for the next record however long it takes.
                if let Some(p) = self.consumer.next(None).await.map_err(Stop::Fatal)? {
                    self.apply(p);
                }
                continue;
            }
            let idle = self.shared.opts.request_timeout;
            let left = (self.last_progress + idle).saturating_duration_since(Instant::now());
            if left.is_zero() {
                // Report once per `idle` of no progress, then keep trying.
                self.last_progress = Instant::now();
                self.shared.health.reachable(false);
                return Err(Stop::Stalled(self.stalled(idle)));
            }
            if let Some(p) = self.consumer.next(Some(left)).await.map_err(Stop::Fatal)? {
                self.apply(p);
            }
        }
    }

    /// Whether the position covers the high watermarks measured at the start.
    fn reached_target(&self) -> bool {
        self.target.as_ref().is_some_and(|t| {
            t.iter()
                .enumerate()
                .all(|(p, &high)| self.pos.offset(p as u32) >= high)
        })
    }

    fn apply(&mut self, polled: Polled) {
        match polled {
            Polled::Record(r) => {
                self.last_progress = Instant::now();
                let p = r.pos.partition as usize;
                if let Some(e) = self.at_eof.get_mut(p) {
                    *e = false;
                }
                self.pos.advance(r.pos);
                self.owe_caught_up = true;
                self.pending.push(r);
            }
            Polled::Eof(p) => {
                self.last_progress = Instant::now();
                if let Some(e) = self.at_eof.get_mut(p as usize) {
                    *e = true;
                }
            }
            Polled::Transient(e) => {
                // librdkafka repeats a failing reconnect's error; log each new one.
                if !self.owe_caught_up && self.last_client_error.as_ref() != Some(&e) {
                    tracing::warn!(
                        topic = %self.shared.target.topic,
                        brokers = %self.shared.target.brokers,
                        error = %e,
                        "kafka follower: client error while idle (librdkafka keeps retrying)"
                    );
                }
                self.last_client_error = Some(e);
            }
        }
    }

    fn stalled(&self, idle: std::time::Duration) -> Error {
        let waiting: Vec<String> = self
            .at_eof
            .iter()
            .enumerate()
            .filter(|(_, e)| !**e)
            .map(|(p, _)| format!("{p}@{}", self.pos.offset(p as u32)))
            .collect();
        let hint = self
            .last_client_error
            .as_ref()
            .map(|e| format!("; last client error: {e}"))
            .unwrap_or_default();
        Error::Stalled {
            op: "follow",
            reason: format!(
                "catching up: no record and no end-of-partition for {idle:?} (request_timeout) from partition@offset {}; still trying{hint}",
                waiting.join(",")
            ) + &format!(
                " [topic {:?}, brokers {}]",
                self.shared.target.topic, self.shared.target.brokers
            ),
        }
    }
}
