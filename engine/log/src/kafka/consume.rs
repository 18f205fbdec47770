//! Reading by assignment: the assigned consumer shared by `read`, `head` and
//! `follow`, and the two bounded scans, `read` and `head`.
//!
//! Both scans assign every partition at once and stop on partition-EOF events
//! (`enable.partition.eof`), which librdkafka raises when a fetch response shows the
//! consumer at the partition's high watermark. Unlike ListOffsets-based watermark
//! queries this is right on Tansu as well as on Apache Kafka (see the module docs
//! of [`crate::kafka`] for what was measured).
//!
//! What it does NOT do: join a consumer group, commit offsets, or decode events.

use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};
use tokio::time::Instant;

use super::config::{self, ConsumerRole};
use super::{Shared, Target};
use crate::{Error, Result};
use crate::{Position, Record, RecordPos};

/// One thing a consumer reported.
#[derive(Debug)]
pub(super) enum Polled {
    /// The next record of its partition.
    Record(Record),
    /// The partition is at its end (every record up to the high watermark read).
    Eof(u32),
    /// A client error that librdkafka recovers from by itself (a broker connection
    /// dropped, ...). Kept only to explain a later stall.
    Transient(String),
}

/// A consumer assigned to every partition of the topic at given offsets.
pub(super) struct Assigned {
    /// Always `Some` until drop (taken there to close it off the async runtime).
    consumer: Option<StreamConsumer>,
    target: Target,
}

impl Assigned {
    /// Creates the consumer and assigns partition `p` at `from[p]`. Offset 0 means
    /// "the earliest record the broker still has", so a topic whose oldest records
    /// were removed by retention reads from its new start instead of failing.
    pub(super) fn new(target: &Target, role: ConsumerRole, from: &[u64]) -> Result<Self> {
        let consumer: StreamConsumer = config::consumer(&target.brokers, role)
            .create()
            .map_err(|e| target.err("create consumer", e))?;
        let mut tpl = TopicPartitionList::with_capacity(from.len());
        for (p, &o) in from.iter().enumerate() {
            let offset = match o {
                0 => Offset::Beginning,
                o => Offset::Offset(i64::try_from(o).map_err(|_| {
                    target.err("assign", format!("offset {o} of partition {p} exceeds i64"))
                })?),
            };
            let partition = i32::try_from(p)
                .map_err(|_| target.err("assign", format!("partition {p} exceeds i32")))?;
            tpl.add_partition_offset(&target.topic, partition, offset)
                .map_err(|e| target.err("assign", e))?;
        }
        consumer.assign(&tpl).map_err(|e| target.err("assign", e))?;
        Ok(Self {
            consumer: Some(consumer),
            target: target.clone(),
        })
    }

    /// Waits for the next report; `None` if nothing came within `within` (never
    /// `None` when `within` is `None`, which waits as long as it takes).
    pub(super) async fn next(&self, within: Option<Duration>) -> Result<Option<Polled>> {
        let Some(consumer) = &self.consumer else {
            return Err(Error::Closed);
        };
        let polled = match within {
            None => consumer.recv().await,
            Some(d) => match tokio::time::timeout(d, consumer.recv()).await {
                Ok(r) => r,
                Err(_) => return Ok(None),
            },
        };
        self.classify(polled).map(Some)
    }

    /// The next report if one is already buffered locally; never waits.
    pub(super) fn try_next(&self) -> Result<Option<Polled>> {
        let Some(consumer) = &self.consumer else {
            return Err(Error::Closed);
        };
        match consumer.recv().now_or_never() {
            Some(polled) => self.classify(polled).map(Some),
            None => Ok(None),
        }
    }

    fn classify(&self, polled: Result<BorrowedMessage<'_>, KafkaError>) -> Result<Polled> {
        match polled {
            Ok(m) => self.record(&m).map(Polled::Record),
            Err(KafkaError::PartitionEOF(p)) => u32::try_from(p)
                .map(Polled::Eof)
                .map_err(|_| self.target.err("read", format!("EOF for partition {p}"))),
            Err(KafkaError::MessageConsumptionFatal(code)) => {
                Err(self.target.err("read", format!("fatal consumer error: {code}")))
            }
            Err(KafkaError::MessageConsumption(
                code @ (RDKafkaErrorCode::AutoOffsetReset | RDKafkaErrorCode::OffsetOutOfRange),
            )) => Err(self.target.err(
                "read",
                format!(
                    "a requested offset is not in the partition ({code}); the position is past the end of the log or older than its retention"
                ),
            )),
            Err(e) => Ok(Polled::Transient(e.to_string())),
        }
    }

    fn record(&self, m: &BorrowedMessage<'_>) -> Result<Record> {
        let (p, o) = (m.partition(), m.offset());
        match (u32::try_from(p), u64::try_from(o)) {
            (Ok(partition), Ok(offset)) => Ok(Record {
                pos: RecordPos { partition, offset },
                // A record without a value (a tombstone some other writer produced)
                // reads as empty bytes, which fail to decode and get reported.
                bytes: Bytes::copy_from_slice(m.payload().unwrap_or_default()),
            }),
            _ => Err(self
                .target
                .err("read", format!("record with partition {p}, offset {o}"))),
        }
    }
}

impl Drop for Assigned {
    /// Closing a consumer blocks while librdkafka tears its assignment down, so it
    /// is done on the blocking pool when there is a runtime to offload to.
    fn drop(&mut self) {
        if let Some(consumer) = self.consumer.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn_blocking(move || drop(consumer));
        }
    }
}

/// Per-partition next offsets of `from`, checked against the topic: a position of
/// more partitions than the topic has belongs to another log.
pub(super) fn start_offsets(shared: &Shared, from: &Position) -> Result<Vec<u64>> {
    let n = shared.partitions;
    if from.partitions() > n {
        return Err(Error::InvalidPosition {
            text: from.to_string(),
            reason: format!(
                "it has {} partitions but topic {:?} has {n}",
                from.partitions(),
                shared.target.topic
            ),
        });
    }
    Ok((0..n as u32).map(|p| from.offset(p)).collect())
}

/// Explains which partitions have not finished, for stall and timeout errors.
fn unfinished(start: &[u64], next: &[u64], done: &[bool]) -> String {
    let list: Vec<String> = (0..start.len())
        .filter(|&p| !done[p])
        .map(|p| format!("{p}@{}", next[p].max(start[p])))
        .collect();
    list.join(",")
}

/// Tracks one scan's waiting: the scan fails if no partition makes progress (a
/// record or an end-of-partition) for `request_timeout`, which means a dead broker or
/// an offset past the end, and in any case after `read_timeout` in total. Client
/// errors librdkafka reports while it retries are not progress.
struct Bounds {
    idle: Duration,
    last_progress: Instant,
    deadline: Instant,
    total: Duration,
    last_client_error: Option<String>,
}

impl Bounds {
    fn new(shared: &Shared) -> Self {
        let now = Instant::now();
        Self {
            idle: shared.opts.request_timeout,
            last_progress: now,
            deadline: now + shared.opts.read_timeout,
            total: shared.opts.read_timeout,
            last_client_error: None,
        }
    }

    /// The next report, or an error saying which partitions stalled.
    async fn next(
        &mut self,
        op: &'static str,
        c: &Assigned,
        progress: impl Fn() -> String,
    ) -> Result<Polled> {
        loop {
            let now = Instant::now();
            if now >= self.deadline {
                return Err(c.target.err(
                    op,
                    format!(
                        "did not reach the end of every partition within read_timeout {:?} (unfinished partition@offset: {}){}",
                        self.total,
                        progress(),
                        self.hint()
                    ),
                ));
            }
            let stall_at = self.last_progress + self.idle;
            if now >= stall_at {
                return Err(c.target.err(
                    op,
                    format!(
                        "no record and no end-of-partition for {:?} (request_timeout) from partition@offset {}; the broker may be down, or an offset is past the end of its partition{}",
                        self.idle,
                        progress(),
                        self.hint()
                    ),
                ));
            }
            let wait = stall_at.min(self.deadline) - now;
            match c.next(Some(wait)).await? {
                Some(Polled::Transient(e)) => self.last_client_error = Some(e),
                Some(p) => {
                    self.last_progress = Instant::now();
                    return Ok(p);
                }
                None => {}
            }
        }
    }

    fn hint(&self) -> String {
        self.last_client_error
            .as_ref()
            .map(|e| format!("; last client error: {e}"))
            .unwrap_or_default()
    }
}

/// `read`: up to `limit` records at or after `from`, partition by partition
/// (all of partition 0's, then partition 1's, ...), each in offset order.
///
/// All partitions are fetched at once, so while an earlier partition is still
/// being read, later ones are buffered: at most `limit` records each.
pub(super) async fn read(shared: &Shared, from: &Position, limit: usize) -> Result<Vec<Record>> {
    let start = start_offsets(shared, from)?;
    if limit == 0 {
        return Ok(Vec::new());
    }
    let n = start.len();
    let consumer = Assigned::new(&shared.target, ConsumerRole::Scan, &start)?;
    let mut bounds = Bounds::new(shared);
    // Records per partition, a contiguous run from `start`; a partition is done at
    // its EOF or once it alone holds `limit` records. Records that arrive after a
    // partition's EOF are left for the next read, so the answer depends only on
    // what the log held when each partition reported its end.
    let mut bufs: Vec<Vec<Record>> = vec![Vec::new(); n];
    let mut done = vec![false; n];
    while !decided(&bufs, &done, limit) {
        let next: Vec<u64> = bufs
            .iter()
            .map(|b| b.last().map_or(0, |r| r.pos.offset + 1))
            .collect();
        match bounds
            .next("read", &consumer, || unfinished(&start, &next, &done))
            .await?
        {
            Polled::Record(r) => {
                let p = r.pos.partition as usize;
                if p < n && !done[p] {
                    bufs[p].push(r);
                    done[p] = bufs[p].len() >= limit;
                }
            }
            Polled::Eof(p) => {
                if let Some(d) = done.get_mut(p as usize) {
                    *d = true;
                }
            }
            Polled::Transient(_) => {}
        }
    }
    let mut out: Vec<Record> = bufs.into_iter().flatten().take(limit).collect();
    out.shrink_to_fit();
    Ok(out)
}

/// Whether the first `limit` records in partition-major order are known: every
/// partition before the one that fills `limit` is done.
fn decided(bufs: &[Vec<Record>], done: &[bool], limit: usize) -> bool {
    let mut total = 0;
    for (buf, &d) in bufs.iter().zip(done) {
        total += buf.len();
        if total >= limit {
            return true;
        }
        if !d {
            return false;
        }
    }
    true
}

/// `head`: reads every partition from the last known head to its EOF and returns one
/// past the last record seen (or the starting offset where there was none).
pub(super) async fn head(shared: &Shared) -> Result<Position> {
    let start = start_offsets(shared, &shared.known_head())?;
    let consumer = Assigned::new(&shared.target, ConsumerRole::Scan, &start)?;
    let mut bounds = Bounds::new(shared);
    let mut next = start.clone();
    let mut done = vec![false; start.len()];
    while done.iter().any(|d| !d) {
        match bounds
            .next("head", &consumer, || unfinished(&start, &next, &done))
            .await?
        {
            Polled::Record(r) => {
                if let Some(o) = next.get_mut(r.pos.partition as usize) {
                    *o = (*o).max(r.pos.offset + 1);
                }
            }
            Polled::Eof(p) => {
                if let Some(d) = done.get_mut(p as usize) {
                    *d = true;
                }
            }
            Polled::Transient(_) => {}
        }
    }
    let head = Position::from_offsets(next);
    shared.observe_head(&head);
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(p: u32, o: u64) -> Record {
        Record {
            pos: RecordPos {
                partition: p,
                offset: o,
            },
            bytes: Bytes::new(),
        }
    }

    #[test]
    fn decided_needs_every_earlier_partition_done() {
        let bufs = vec![vec![rec(0, 0)], vec![rec(1, 0), rec(1, 1)]];
        // Partition 0 may still have more records: its later ones come first.
        assert!(!decided(&bufs, &[false, true], 3));
        assert!(decided(&bufs, &[true, false], 3));
        // Partition 0 alone fills the limit.
        assert!(decided(&bufs, &[false, false], 1));
        // Everything done, fewer than limit.
        assert!(decided(&bufs, &[true, true], 10));
        assert!(!decided(&bufs, &[true, false], 10));
    }

    #[test]
    fn unfinished_lists_partitions_with_offsets() {
        assert_eq!(
            unfinished(&[0, 5, 9], &[3, 0, 0], &[false, true, false]),
            "0@3,2@9"
        );
    }
}
