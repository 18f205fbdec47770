//! Reading by assignment: the assigned consumer shared by `read`, `head` and
//! `follow`; the high watermarks (ListOffsets) that say where each partition ends;
//! and the two bounded operations, `read` and `head`.
//!
//! `head` is the high watermark of every partition: one ListOffsets round trip
//! (per partition, in parallel), never a scan. `read` measures the high watermarks
//! first and reads each partition up to the one it measured, so its answer depends
//! only on what the log held at that moment; a partition also counts as finished at
//! a partition-EOF event (`enable.partition.eof`), which librdkafka raises when a
//! fetch response shows the consumer at the high watermark, so trailing offsets that
//! hold no record cannot make it wait.
//!
//! What it does NOT do: join a consumer group, commit offsets, or decode events.

use std::time::Duration;

use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use rdkafka::consumer::Consumer as _;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::Producer;
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
    consumer: Option<config::Consumer>,
    target: Target,
}

impl Assigned {
    /// Creates the consumer and assigns partition `p` at `from[p]`. Offset 0 means
    /// "the earliest record the broker still has", so a topic whose oldest records
    /// were removed by retention reads from its new start instead of failing.
    pub(super) fn new(target: &Target, role: ConsumerRole, from: &[u64]) -> Result<Self> {
        let consumer: config::Consumer = config::consumer(target, role)
            .create_with_context(target.last_error.clone())
            .map_err(|e| target.err("create consumer", super::settings::client_error(e)))?;
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

/// Most ListOffsets requests [`high_watermarks`] has in flight at once. Each one
/// blocks a thread of the blocking pool until the broker answers.
const WATERMARK_CONCURRENCY: usize = 16;

/// Slack on top of the watermark queries' own timeouts before the outer guard fires.
const WATERMARK_GUARD_SLACK: Duration = Duration::from_secs(1);

/// The high watermark (one past the last stored offset) of every partition, from
/// ListOffsets (`fetch_watermarks`) on the log's producer connection. Partitions are
/// asked in parallel, so this costs one round trip for up to
/// [`WATERMARK_CONCURRENCY`] partitions. Bounded: each query by `request_timeout`,
/// all of them by `read_timeout`.
pub(super) async fn high_watermarks(shared: &Shared, op: &'static str) -> Result<Vec<u64>> {
    let n = shared.partitions;
    let each = shared.opts.request_timeout;
    let queries = (0..n).map(|p| {
        let producer = shared.producer().1;
        let topic = shared.target.topic.clone();
        async move {
            let partition = i32::try_from(p).unwrap_or(i32::MAX);
            let answer = tokio::task::spawn_blocking(move || {
                producer.client().fetch_watermarks(&topic, partition, each)
            })
            .await;
            (p, answer)
        }
    });
    let all = async {
        let mut high = vec![0u64; n];
        let mut answers = futures::stream::iter(queries).buffer_unordered(WATERMARK_CONCURRENCY);
        while let Some((p, answer)) = answers.next().await {
            let (_low, hw) = answer
                .map_err(|e| shared.target.err(op, format!("watermark query task: {e}")))?
                .map_err(|e| {
                    shared.target.err(
                        op,
                        format!("ListOffsets (high watermark) of partition {p}: {e}"),
                    )
                })?;
            high[p] = u64::try_from(hw).map_err(|_| {
                shared
                    .target
                    .err(op, format!("partition {p} reported high watermark {hw}"))
            })?;
        }
        Ok(high)
    };
    let bound = shared.opts.read_timeout.max(each) + WATERMARK_GUARD_SLACK;
    tokio::time::timeout(bound, all)
        .await
        .map_err(|_| Error::Timeout {
            op: "kafka high watermarks (ListOffsets)",
            after: bound,
        })?
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
/// (all of partition 0's, then partition 1's, ...), each in offset order, up to
/// the high watermarks measured when it starts.
///
/// All partitions are fetched at once, so while an earlier partition is still
/// being read, later ones are buffered: at most `limit` records each.
pub(super) async fn read(shared: &Shared, from: &Position, limit: usize) -> Result<Vec<Record>> {
    let start = start_offsets(shared, from)?;
    if limit == 0 {
        return Ok(Vec::new());
    }
    let n = start.len();
    // Where each partition ends for this read. Records appended after this are
    // left for the next read, so the answer depends only on what the log held.
    let end = high_watermarks(shared, "read").await?;
    // A partition read from exactly its end is done without a fetch. One read from
    // beyond its end is not: the fetch gets OFFSET_OUT_OF_RANGE, reported as such.
    let mut done: Vec<bool> = start.iter().zip(&end).map(|(s, e)| s == e).collect();
    if done.iter().all(|&d| d) {
        return Ok(Vec::new());
    }
    let consumer = Assigned::new(&shared.target, ConsumerRole::Scan, &start)?;
    let mut bounds = Bounds::new(shared);
    // Records per partition, a contiguous run from `start`; a partition is done at
    // its measured end, at its EOF, or once it alone holds `limit` records.
    let mut bufs: Vec<Vec<Record>> = vec![Vec::new(); n];
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
                    if r.pos.offset >= end[p] {
                        done[p] = true;
                        continue;
                    }
                    let last = r.pos.offset + 1 >= end[p];
                    bufs[p].push(r);
                    done[p] = last || bufs[p].len() >= limit;
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

/// `head`: the high watermark of every partition (one ListOffsets round trip), and
/// never below what this handle has already seen (its own acknowledged appends,
/// earlier heads).
pub(super) async fn head(shared: &Shared) -> Result<Position> {
    let high = high_watermarks(shared, "head").await?;
    let known = shared.known_head();
    let next: Vec<u64> = high
        .iter()
        .enumerate()
        .map(|(p, &h)| h.max(known.offset(p as u32)))
        .collect();
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
