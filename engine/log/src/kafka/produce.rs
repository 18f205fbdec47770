//! `append`: keyed, idempotent produce of one batch, waiting for every delivery
//! report; `COMPLETED` resync markers are written once to every partition.
//!
//! Every event is sent with its entity key ([`Event::key`]) as the message key
//! (resync markers: per phase, see [`message_key`]), so
//! librdkafka's murmur2 partitioner puts all events of one entity on one partition,
//! in append order, and with its observed-at time as the message timestamp. A run
//! of events is enqueued whole before any report is awaited, so it travels in as
//! few produce requests as its size allows.
//!
//! # `COMPLETED` markers: one copy per partition
//!
//! On a topic of `N > 1` partitions, a `COMPLETED` resync marker is not sent by key.
//! The batch is cut at the marker: every event before it is sent and acknowledged
//! first, then one copy of the marker goes to each partition `0..N` by explicit
//! partition, with `ResyncMarker.copies = N`, and only once all copies are
//! acknowledged do the events after it go out. Per-partition order then puts each
//! copy after every event the writer had appended before the marker, on every
//! partition, and the fold sweeps only when it has folded all `N` copies (see the
//! `fold` module). The copies keep the marker's message key
//! (`resync/<source>/completed`), so compaction keeps the newest copy on every
//! partition. The marker's position in the returned
//! list is that of its copy on the last partition; the head covers all copies.
//!
//! `STARTED` markers are sent once, by key, as before: the fold only records their
//! generation, and nothing depends on their order against entity events on other
//! partitions, so copies would only cost writes. On a one-partition topic every
//! event, markers included, is sent by key and unchanged (`copies` stays as
//! written, 0 from adapters), exactly the embedded log's single order.
//!
//! # Bounds
//!
//! librdkafka retries each message until `append_timeout` (`message.timeout.ms`)
//! and then fails its delivery report. A message already in a produce request when
//! the time is up is only failed when that request times out (`request_timeout`),
//! so the report can come up to `request_timeout` late. An outer guard of
//! `append_timeout + request_timeout + 1 s` per run (the events before a marker,
//! the marker's copies, the events after it) turns a report that still has not come
//! into [`Error::Timeout`], so an append never hangs. Adapters put `COMPLETED` in an
//! append of its own, so their appends have at most two runs.
//!
//! # Fatal producer errors: rebuild and resend once
//!
//! librdkafka makes some errors fatal for the whole producer (a sequence
//! desynchronised with the broker, an authorization failure on InitProducerId),
//! and the broker can fence the producer's epoch: after an outage longer than
//! `append_timeout`, Tansu answers every produce of the old epoch with
//! `PRODUCER_FENCED`, per message, for good. Either way every later message of
//! that producer fails, so keeping it would fail every append until a restart.
//! After an append fails, `append` asks the producer (`fatal_error()`) and looks
//! at the failure's code (`breaks_the_producer`); when either says the producer
//! is done for, the producer is
//! replaced by a new one (a new producer id and epoch; appends that saw the same
//! fatal producer replace it once, by generation) and the whole batch is sent
//! again, once, on the new producer. The old one's queued messages are purged.
//! If the resend fails too, the error goes to the caller, whose next append uses
//! the new producer; adapters keep their state and re-plan (see
//! `adapters::common::append`). This producer is idempotent, not transactional,
//! so there is no `init_transactions` to redo: the new producer gets its id in the
//! background, as at connect.
//!
//! Why a resend is safe: every event is an entity-level upsert or delete, keyed by
//! entity, and the whole batch goes again in its order, so per key the log holds
//! the batch's order after whatever of the failed attempt got stored: the last
//! record of each key is the batch's last event for it, and folding a repeated
//! upsert again yields the same state (a repeated `COMPLETED` marker copy is
//! counted once per partition by the fold). Messages a fatal producer still had
//! queued were never sent, so in the usual case nothing is stored twice; a message
//! whose request was on the wire when the producer turned fatal may be, as a
//! duplicate of the same state, never as an older state after a newer one.
//!
//! What it does NOT do: retry after a failed report on a healthy producer (the
//! caller decides; a retried marker writes its copies again, which the fold counts
//! once per partition), or make a batch atomic on the broker (no transactions:
//! some events of a failed batch may be stored, which the trait allows; copies are
//! never sent unless every event before the marker was acknowledged).

use std::collections::VecDeque;
use std::time::Duration;

use deltapilot_proto::Event;
use deltapilot_proto::event::Payload;
use deltapilot_proto::resync_marker::Phase;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureRecord, Producer as _, PurgeConfig};
use tokio::time::Instant;

use super::config::Producer;
use super::{ProducerSlot, Shared, config};
use crate::health::AppendFailure;
use crate::{Error, Result};
use crate::{RecordPos, encode_event};

/// Slack on top of `append_timeout + request_timeout` before the outer guard fires:
/// librdkafka scans for timed-out messages on a timer, so its own report (which says
/// more than the guard's) can come a little late.
const GUARD_SLACK: Duration = Duration::from_secs(1);

/// Pause before re-enqueueing when librdkafka's local queue is full and none of this
/// run's own messages is in flight to wait for.
const QUEUE_FULL_BACKOFF: Duration = Duration::from_millis(10);

/// One event ready to send.
struct Prepared {
    key: String,
    bytes: Vec<u8>,
    timestamp_ms: Option<i64>,
    /// A `COMPLETED` marker on a multi-partition topic: `bytes` already carry
    /// `copies`, and one copy goes to every partition.
    to_every_partition: bool,
}

/// One message to send: event `index` of the batch, by key or to one partition.
#[derive(Clone, Copy)]
struct Outgoing {
    index: usize,
    partition: Option<i32>,
}

/// Appends `events` and returns where each landed, in input order; rebuilds the
/// producer and resends the batch once after a fatal producer error (see the
/// module docs). Every outcome is recorded in the log's health.
pub(super) async fn append(shared: &Shared, events: &[Event]) -> Result<Vec<RecordPos>> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let batch = prepare(events, shared.partitions).inspect_err(|_| {
        shared.health.append_failed(AppendFailure::InvalidEvent);
    })?;
    let mut resent = false;
    loop {
        let (generation, producer) = shared.producer();
        let failure = match append_on(shared, &producer, &batch).await {
            Ok(at) => {
                shared.health.append_ok();
                return Ok(at);
            }
            Err(f) => f,
        };
        let broken = producer.client().fatal_error().or_else(|| {
            failure
                .code
                .filter(|c| breaks_the_producer(*c))
                .map(|c| (c, failure.error.to_string()))
        });
        let Some((code, why)) = broken else {
            shared.health.append_failed(failure.reason);
            return Err(failure.error);
        };
        shared.health.append_failed(AppendFailure::Fatal);
        rebuild(shared, generation, code, &why)?;
        if resent {
            return Err(failure.error);
        }
        tracing::warn!(
            topic = %shared.target.topic,
            brokers = %shared.target.brokers,
            error = %failure.error,
            events = batch.len(),
            "kafka append: the producer hit a fatal error; resending the batch on a new producer"
        );
        resent = true;
    }
}

/// Replaces the producer of `generation` (fatal with `code`: `why`) by a new one,
/// unless another append already did; purges what the old one still queued, so
/// its delivery reports resolve now.
fn rebuild(shared: &Shared, generation: u64, code: RDKafkaErrorCode, why: &str) -> Result<()> {
    let mut slot = shared
        .producer
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if slot.generation != generation {
        return Ok(());
    }
    let fresh: Producer = config::producer(&shared.target, &shared.opts)
        .create_with_context(shared.target.last_error.clone())
        .map_err(|e| {
            shared
                .target
                .err("create producer", super::settings::client_error(e))
        })?;
    let old = std::mem::replace(
        &mut *slot,
        ProducerSlot {
            generation: generation + 1,
            producer: fresh,
        },
    );
    drop(slot);
    old.producer
        .purge(PurgeConfig::default().queue().inflight().non_blocking());
    shared.health.producer_rebuilt();
    tracing::warn!(
        topic = %shared.target.topic,
        brokers = %shared.target.brokers,
        fatal = %format!("{code}: {why}"),
        generation = generation + 1,
        "kafka: rebuilt the producer after a fatal error"
    );
    Ok(())
}

/// Delivery errors after which this producer's id and epoch are of no further
/// use: librdkafka's own fatal codes, and the broker's answers that fence the
/// epoch or disown the producer id. An idempotent (non-transactional) librdkafka
/// producer does not always raise these as a client-wide fatal error (Tansu's
/// `PRODUCER_FENCED` comes back per message, and every later message gets it
/// too), so they are treated as fatal here.
fn breaks_the_producer(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::Fatal
            | RDKafkaErrorCode::Fenced
            | RDKafkaErrorCode::Inconsistent
            | RDKafkaErrorCode::GaplessGuarantee
            | RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
            | RDKafkaErrorCode::InvalidProducerIdMapping
            | RDKafkaErrorCode::OutOfOrderSequenceNumber
            | RDKafkaErrorCode::UnknownProducerId
    )
}

/// A failed attempt and why, for the health counters and the fatal check.
struct Failure {
    error: Error,
    reason: AppendFailure,
    /// The client's error code, when the failure came from the client.
    code: Option<RDKafkaErrorCode>,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        let reason = AppendFailure::of(&error);
        Self {
            error,
            reason,
            code: None,
        }
    }
}

/// One attempt at the whole batch on `producer`.
async fn append_on(
    shared: &Shared,
    producer: &Producer,
    batch: &[Prepared],
) -> Result<Vec<RecordPos>, Failure> {
    let n = batch.len();
    let partitions = i32::try_from(shared.partitions).map_err(|_| {
        shared.target.err(
            "append",
            format!("{} partitions is beyond Kafka's range", shared.partitions),
        )
    })?;
    let mut landed: Vec<Option<RecordPos>> = vec![None; n];
    let mut head = shared.known_head();
    let mut start = 0;
    while start < n {
        let cut = batch[start..]
            .iter()
            .position(|p| p.to_every_partition)
            .map_or(n, |k| start + k);
        let keyed = (start..cut).map(|index| Outgoing {
            index,
            partition: None,
        });
        for (s, pos) in send_run(shared, producer, batch, keyed).await? {
            landed[s.index] = Some(pos);
            head.advance(pos);
        }
        if cut == n {
            break;
        }
        let copies = (0..partitions).map(|p| Outgoing {
            index: cut,
            partition: Some(p),
        });
        for (_, pos) in send_run(shared, producer, batch, copies).await? {
            landed[cut] = landed[cut].max(Some(pos));
            head.advance(pos);
        }
        start = cut + 1;
    }
    shared.observe_head(&head);
    landed
        .into_iter()
        .enumerate()
        .map(|(i, pos)| {
            pos.ok_or_else(|| {
                Failure::from(shared.target.err(
                    "append",
                    format!("event {i} of {n} got no position (a bug in the Kafka backend)"),
                ))
            })
        })
        .collect()
}

/// The largest encoded event a Kafka log accepts: librdkafka's and the broker's
/// default message size (`message.max.bytes`, `max.message.bytes`: 1,000,000
/// bytes) less room for the record's key, headers and framing. An event above it
/// is refused before anything of its batch is sent, instead of failing at the
/// broker after earlier events went out.
pub(crate) const MAX_EVENT_BYTES: usize = 900_000;

/// The Kafka message key of `e`: its entity key, except that a resync marker is
/// keyed per phase, `resync/<source>/started` and `resync/<source>/completed`.
/// Why: the broker's compaction keeps the newest record per key and partition.
/// Under the one key `resync/<source>`, a newer `STARTED` would let it drop the
/// `COMPLETED` copy before it on that partition; a replica reading the compacted
/// topic would then never count all copies of that generation, never sweep it,
/// and keep entities that the relist had removed. Per phase, the newest `COMPLETED`
/// copy on every partition and the newest `STARTED` stay, which is all the fold
/// needs: sweeps only remove and generations only grow, so the newest completed
/// generation removes everything an older one would have (among what compaction
/// left). `STARTED` is placed by this key; nothing depends on its partition.
pub(crate) fn message_key(e: &Event) -> Option<String> {
    match &e.payload {
        Some(Payload::Resync(m)) => {
            let phase = match m.phase() {
                Phase::Started => "started",
                Phase::Completed => "completed",
                Phase::Unspecified => "unspecified",
            };
            Some(format!(
                "{}/{phase}",
                deltapilot_proto::resync_key(&e.source)
            ))
        }
        _ => e.key(),
    }
}

/// Validates keys and sizes and encodes, so a bad event fails the batch before
/// anything is sent. On a topic of more than one partition, a `COMPLETED` marker is encoded
/// with `copies` set to the partition count.
fn prepare(events: &[Event], partitions: usize) -> Result<Vec<Prepared>> {
    let copies = u32::try_from(partitions).unwrap_or(u32::MAX);
    events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let key = message_key(e).ok_or_else(|| {
                Error::InvalidEvent(format!(
                    "event {i} of the batch ({}, source {:?}) has no entity key, so it has no partition; nothing was appended",
                    e.kind_name(),
                    e.source
                ))
            })?;
            let spread = partitions > 1
                && matches!(&e.payload, Some(Payload::Resync(m)) if m.phase() == Phase::Completed);
            let bytes = if spread {
                let mut copy = e.clone();
                if let Some(Payload::Resync(m)) = &mut copy.payload {
                    m.copies = copies;
                }
                encode_event(&copy)
            } else {
                encode_event(e)
            };
            if bytes.len() > MAX_EVENT_BYTES {
                return Err(Error::InvalidEvent(format!(
                    "event {i} of the batch ({}, key {key:?}) encodes to {} bytes, above the \
                     Kafka log's limit of {MAX_EVENT_BYTES}; nothing was appended",
                    e.kind_name(),
                    bytes.len()
                )));
            }
            Ok(Prepared {
                key,
                bytes,
                // Kafka timestamps are milliseconds; 0 (unset) lets the producer stamp
                // the send time instead of claiming 1970.
                timestamp_ms: (e.observed_at_unix_micros > 0)
                    .then(|| e.observed_at_unix_micros.div_euclid(1000)),
                to_every_partition: spread,
            })
        })
        .collect()
}

/// Enqueues every message of a run, then waits for all their delivery reports,
/// within one guard deadline. Returns each message with where it landed, in
/// enqueue order.
async fn send_run(
    shared: &Shared,
    producer: &Producer,
    batch: &[Prepared],
    sends: impl Iterator<Item = Outgoing>,
) -> Result<Vec<(Outgoing, RecordPos)>, Failure> {
    let deadline =
        Instant::now() + shared.opts.append_timeout + shared.opts.request_timeout + GUARD_SLACK;
    let mut in_flight: VecDeque<(Outgoing, DeliveryFuture)> = VecDeque::new();
    let mut landed = Vec::new();
    for s in sends {
        let ev = &batch[s.index];
        loop {
            let mut record = FutureRecord::to(&shared.target.topic)
                .key(ev.key.as_bytes())
                .payload(ev.bytes.as_slice());
            if let Some(p) = s.partition {
                record = record.partition(p);
            }
            if let Some(ts) = ev.timestamp_ms {
                record = record.timestamp(ts);
            }
            match producer.send_result(record) {
                Ok(report) => {
                    in_flight.push_back((s, report));
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    // Make room by settling our own oldest message, if any; enqueue
                    // order (and so per-partition order) is unchanged either way.
                    if let Some((done, report)) = in_flight.pop_front() {
                        let pos = settle(shared, batch, done, report, deadline).await?;
                        landed.push((done, pos));
                    } else if Instant::now() >= deadline {
                        return Err(Error::Timeout {
                            op: "kafka append (local producer queue full)",
                            after: shared.opts.append_timeout
                                + shared.opts.request_timeout
                                + GUARD_SLACK,
                        }
                        .into());
                    } else {
                        tokio::time::sleep(QUEUE_FULL_BACKOFF).await;
                    }
                }
                Err((e, _)) => {
                    return Err(Failure {
                        error: shared.target.err(
                            "append",
                            format!("could not enqueue {}: {e}", describe(batch, s)),
                        ),
                        reason: reason_of(&e),
                        code: e.rdkafka_error_code(),
                    });
                }
            }
        }
    }
    for (s, report) in in_flight {
        let pos = settle(shared, batch, s, report, deadline).await?;
        landed.push((s, pos));
    }
    Ok(landed)
}

/// Names a message in errors: which event of the batch, its key, and for a marker
/// copy, its partition.
fn describe(batch: &[Prepared], s: Outgoing) -> String {
    let n = batch.len();
    let key = &batch[s.index].key;
    match s.partition {
        None => format!("event {} of {n} (key {key:?})", s.index),
        Some(p) => format!(
            "the copy for partition {p} of resync marker event {} of {n} (key {key:?})",
            s.index
        ),
    }
}

/// Waits for one delivery report.
async fn settle(
    shared: &Shared,
    batch: &[Prepared],
    s: Outgoing,
    report: DeliveryFuture,
    deadline: Instant,
) -> Result<RecordPos, Failure> {
    let outcome = tokio::time::timeout_at(deadline, report)
        .await
        .map_err(|_| {
            // The error type has no room for where; say it here.
            tracing::warn!(
                topic = %shared.target.topic,
                brokers = %shared.target.brokers,
                message = %describe(batch, s),
                "kafka append: no delivery report within append_timeout + request_timeout + 1 s"
            );
            Error::Timeout {
                op: "kafka append (waiting for delivery reports)",
                after: shared.opts.append_timeout + shared.opts.request_timeout + GUARD_SLACK,
            }
        })?
        // The sender half lives in librdkafka's delivery callback; it is only dropped
        // unanswered when the producer itself is torn down.
        .map_err(|_| Failure::from(Error::Closed))?;
    match outcome {
        Ok(delivery) => {
            let partition = u32::try_from(delivery.partition);
            let offset = u64::try_from(delivery.offset);
            match (partition, offset) {
                (Ok(partition), Ok(offset))
                    if s.partition.is_none_or(|p| p == delivery.partition) =>
                {
                    Ok(RecordPos { partition, offset })
                }
                _ => Err(Failure::from(shared.target.err(
                    "append",
                    format!(
                        "{} was acknowledged at an unexpected position (partition {}, offset {})",
                        describe(batch, s),
                        delivery.partition,
                        delivery.offset
                    ),
                ))),
            }
        }
        Err((e, _)) => {
            let hint = match e.rdkafka_error_code() {
                Some(RDKafkaErrorCode::MessageTimedOut) => format!(
                    " (not acknowledged within append_timeout {:?}; is the broker down or unreachable?)",
                    shared.opts.append_timeout
                ),
                _ => String::new(),
            };
            Err(Failure {
                error: shared.target.err(
                    "append",
                    format!("{} was not stored: {e}{hint}", describe(batch, s)),
                ),
                reason: reason_of(&e),
                code: e.rdkafka_error_code(),
            })
        }
    }
}

/// The health reason of a client error (`fatal` is decided by the producer's own
/// state, in `append`).
fn reason_of(e: &KafkaError) -> AppendFailure {
    match e.rdkafka_error_code() {
        Some(RDKafkaErrorCode::MessageTimedOut | RDKafkaErrorCode::RequestTimedOut) => {
            AppendFailure::Timeout
        }
        Some(c) if breaks_the_producer(c) => AppendFailure::Fatal,
        _ => AppendFailure::Broker,
    }
}
