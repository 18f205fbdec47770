//! `append`: keyed, idempotent produce of one batch, waiting for every delivery report.
//!
//! Every event is sent with its entity key ([`Event::key`]) as the message key, so
//! librdkafka's murmur2 partitioner puts all events of one entity on one partition,
//! in append order, and with its observed-at time as the message timestamp. The whole
//! batch is enqueued before any report is awaited, so it travels in as few produce
//! requests as the batch size allows.
//!
//! Bounds: librdkafka retries each message until `append_timeout`
//! (`message.timeout.ms`) and then fails its delivery report. A message already in
//! a produce request when the time is up is only failed when that request times out
//! (`request_timeout`), so the report can come up to `request_timeout` late. An
//! outer guard of `append_timeout + request_timeout + 1 s` turns a report that still
//! has not come into [`Error::Timeout`], so an append never hangs.
//!
//! What it does NOT do: retry after a failed report (the caller decides), or make a
//! batch atomic on the broker (no transactions: some events of a failed batch may be
//! stored, which the trait allows).

use std::collections::VecDeque;
use std::time::Duration;

use deltapilot_proto::Event;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureRecord};
use tokio::time::Instant;

use super::Shared;
use crate::log::{RecordPos, encode_event};
use crate::{Error, Result};

/// Slack on top of `append_timeout + request_timeout` before the outer guard fires:
/// librdkafka scans for timed-out messages on a timer, so its own report (which says
/// more than the guard's) can come a little late.
const GUARD_SLACK: Duration = Duration::from_secs(1);

/// Pause before re-enqueueing when librdkafka's local queue is full and none of this
/// batch's own messages is in flight to wait for.
const QUEUE_FULL_BACKOFF: Duration = Duration::from_millis(10);

/// One event ready to send.
struct Prepared {
    key: String,
    bytes: Vec<u8>,
    timestamp_ms: Option<i64>,
}

/// Appends `events` and returns where each landed, in input order.
pub(super) async fn append(shared: &Shared, events: &[Event]) -> Result<Vec<RecordPos>> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let batch = prepare(events)?;
    let n = batch.len();
    let deadline =
        Instant::now() + shared.opts.append_timeout + shared.opts.request_timeout + GUARD_SLACK;
    let mut in_flight: VecDeque<(usize, DeliveryFuture)> = VecDeque::with_capacity(n);
    let mut landed = Vec::with_capacity(n);

    for (i, ev) in batch.iter().enumerate() {
        loop {
            let mut record = FutureRecord::to(&shared.target.topic)
                .key(ev.key.as_bytes())
                .payload(ev.bytes.as_slice());
            if let Some(ts) = ev.timestamp_ms {
                record = record.timestamp(ts);
            }
            match shared.producer.send_result(record) {
                Ok(report) => {
                    in_flight.push_back((i, report));
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    // Make room by settling our own oldest message, if any; enqueue
                    // order (and so per-partition order) is unchanged either way.
                    if let Some((j, report)) = in_flight.pop_front() {
                        landed.push(settle(shared, &batch, j, report, deadline).await?);
                    } else if Instant::now() >= deadline {
                        return Err(Error::Timeout {
                            op: "kafka append (local producer queue full)",
                            after: shared.opts.append_timeout
                                + shared.opts.request_timeout
                                + GUARD_SLACK,
                        });
                    } else {
                        tokio::time::sleep(QUEUE_FULL_BACKOFF).await;
                    }
                }
                Err((e, _)) => {
                    return Err(shared.target.err(
                        "append",
                        format!("could not enqueue event {i} of {n} (key {:?}): {e}", ev.key),
                    ));
                }
            }
        }
    }
    for (j, report) in in_flight {
        landed.push(settle(shared, &batch, j, report, deadline).await?);
    }

    let mut head = shared.known_head();
    for pos in &landed {
        head.advance(*pos);
    }
    shared.observe_head(&head);
    Ok(landed)
}

/// Validates keys and encodes, so a bad event fails the batch before anything is sent.
fn prepare(events: &[Event]) -> Result<Vec<Prepared>> {
    events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let key = e.key().ok_or_else(|| {
                Error::InvalidEvent(format!(
                    "event {i} of the batch ({}, source {:?}) has no entity key, so it has no partition; nothing was appended",
                    e.kind_name(),
                    e.source
                ))
            })?;
            Ok(Prepared {
                key,
                bytes: encode_event(e),
                // Kafka timestamps are milliseconds; 0 (unset) lets the producer stamp
                // the send time instead of claiming 1970.
                timestamp_ms: (e.observed_at_unix_micros > 0)
                    .then(|| e.observed_at_unix_micros.div_euclid(1000)),
            })
        })
        .collect()
}

/// Waits for one delivery report.
async fn settle(
    shared: &Shared,
    batch: &[Prepared],
    i: usize,
    report: DeliveryFuture,
    deadline: Instant,
) -> Result<RecordPos> {
    let n = batch.len();
    let key = &batch[i].key;
    let outcome = tokio::time::timeout_at(deadline, report)
        .await
        .map_err(|_| {
            // The error type has no room for where; say it here.
            tracing::warn!(
                topic = %shared.target.topic,
                brokers = %shared.target.brokers,
                event = i,
                batch = n,
                key = %key,
                "kafka append: no delivery report within append_timeout + request_timeout + 1 s"
            );
            Error::Timeout {
                op: "kafka append (waiting for delivery reports)",
                after: shared.opts.append_timeout + shared.opts.request_timeout + GUARD_SLACK,
            }
        })?
        // The sender half lives in librdkafka's delivery callback; it is only dropped
        // unanswered when the producer itself is torn down.
        .map_err(|_| Error::Closed)?;
    match outcome {
        Ok(delivery) => {
            let partition = u32::try_from(delivery.partition);
            let offset = u64::try_from(delivery.offset);
            match (partition, offset) {
                (Ok(partition), Ok(offset)) => Ok(RecordPos { partition, offset }),
                _ => Err(shared.target.err(
                    "append",
                    format!(
                        "event {i} of {n} was acknowledged without a position (partition {}, offset {})",
                        delivery.partition, delivery.offset
                    ),
                )),
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
            Err(shared.target.err(
                "append",
                format!("event {i} of {n} (key {key:?}) was not stored: {e}{hint}"),
            ))
        }
    }
}
