//! The Kafka event log: one topic, keyed by entity key, read by assignment.
//!
//! # What it does
//!
//! - **Keyed placement.** Every event is produced with its entity key
//!   ([`Event::key`]) as the message key (a `COMPLETED` resync marker is also
//!   copied to every partition, see below); an event without a key is refused with
//!   [`Error::InvalidEvent`] before anything is sent. The partitioner is set
//!   explicitly to librdkafka's `murmur2_random`: `(murmur2(key) & 0x7fffffff) %
//!   partitions`, the Java client's default for keyed messages (the `_random` part only
//!   affects keyless messages, which never occur here). So a writer in any language
//!   puts an entity on the same partition (checked against Kafka's own test vectors in
//!   the tests). Hence per-key order holds, and log compaction (keep the latest event
//!   per key) is safe.
//! - **Durable, bounded appends.** The producer is idempotent (`enable.idempotence`,
//!   `acks=all`, ≤5 requests in flight): retries never duplicate or reorder, and an
//!   append returns only when every event is acknowledged by all in-sync replicas, so
//!   nothing acknowledged is lost. librdkafka retries each message for at most
//!   `append_timeout` (`message.timeout.ms`), after which the append fails; an outer
//!   guard (`append_timeout + request_timeout + 1 s`) makes sure it never hangs.
//!   A producer that hits a fatal error (or is fenced by the broker) is rebuilt and
//!   the batch resent once, so appends recover after an outage without a restart.
//!   See `produce`.
//! - **Health.** Appends, reads, followers and [`KafkaLog::probe`] record whether
//!   the broker answers, when an append and a read last succeeded, and append
//!   failures by reason ([`LogHealth`]), for metrics and readiness.
//! - **Every replica reads everything.** Readers `assign()` every partition at explicit
//!   offsets and never subscribe to a consumer group (every replica needs every
//!   event). librdkafka still demands a `group.id`: each consumer gets a unique
//!   throwaway one, with auto-commit off, and never joins or commits. A [`Position`] is
//!   the next offset per partition, index = partition; offset 0 reads from the
//!   earliest record the broker still has.
//! - **The topic is created on first use** by [`KafkaLog::connect`] with
//!   `partitions` partitions, `cleanup.policy=compact` (the latest event per key is
//!   all a fold from the start needs) and the cluster's default replication. If it exists, its
//!   real partition count (from metadata) is used, with a warning when it differs from
//!   the option. See `topic`.
//!
//! # The end of the log: high watermarks
//!
//! `head` is the high watermark of every partition, from ListOffsets
//! (`fetch_watermarks`): one round trip, whatever the topic's size. `read` measures
//! them first and reads each partition up to them, and a follower's first
//! [`FollowItem::CaughtUp`] (readiness) comes once it has read up to the watermarks
//! it measured when it started. Partition-EOF events (`enable.partition.eof`,
//! raised when a fetch response shows the consumer at the high watermark) also end
//! a partition, so offsets at a partition's end that hold no record (transaction
//! markers other writers left) never make a reader wait; later `CaughtUp`s of a
//! follower come from them. This is Apache Kafka's contract, and the product relies
//! on nothing else.
//!
//! Tansu 0.6 (the broker these tests used before Apache Kafka) answers ListOffsets
//! wrongly: with the base offset of the last stored batch plus one, too low
//! whenever that batch held more than one record. On Tansu, `head` and `read` are
//! therefore short; only the Tansu smoke test still runs there.
//!
//! A fetch past the end of a partition is answered with `OFFSET_OUT_OF_RANGE` by
//! Kafka (reported as an error, since `auto.offset.reset=error`), but Tansu never
//! answers it. Either way the caller gets an error: the immediate one, or a stall
//! error after `request_timeout`.
//!
//! # Order across partitions
//!
//! Within a partition, records always come in offset order. Across partitions:
//! - `read` returns partition-major order: everything it takes from partition 0, then
//!   partition 1, and so on. It is deterministic given the log's contents, and paging
//!   (advance the position past the records, read again) works.
//! - `follow` yields records in arrival order, so partitions interleave as fetches
//!   come back.
//!
//! A fold must not depend on cross-partition order. That is why events are
//! entity-level and keyed.
//!
//! # Resync markers and partitions
//!
//! A resync marker's message key is `resync/<source>/<phase>` (per phase, so
//! compaction keeps the newest `COMPLETED` copies: see `produce::message_key`),
//! but the entity events of that resync
//! generation are keyed by entity and spread over all partitions. A single
//! `completed` marker on one partition would not be ordered after the generation's
//! events: a follower could read the marker before events the adapter appended (and
//! saw acknowledged) before it, and sweeping there would delete live entities for a
//! moment (a removal pushed to every proxy after an adapter restart).
//!
//! So on a topic of `N > 1` partitions, `append` writes a `COMPLETED` marker once to
//! **every** partition, by explicit partition (not key hash), with
//! `ResyncMarker.copies = N`, after every event before it in the same append has
//! been acknowledged (see `produce`). Adapters append `COMPLETED` only after every
//! entity append of the relist was acknowledged, so each copy sits after all of the
//! relist's events on its partition. The fold sweeps a generation only once it has
//! folded a copy from `N` distinct partitions (see the `fold` module, "Multi-partition
//! logs"), which by per-partition order means every event of the relist has been
//! folded, whatever order the partitions are read in. Compaction keeps it (it is per
//! partition and the copies share the `COMPLETED` key), and with one partition nothing
//! changes: the marker is written once, by key, with `copies` as the writer set it.
//! `STARTED` is always written once, by key: the fold only records its generation.
//! [`FollowItem::CaughtUp`] is no substitute for the copies: it is not a consistent
//! cut across partitions (see `follow`).
//!
//! # What it does NOT do
//!
//! Transactions (a failed batch may be partly stored, which the trait allows);
//! topic configuration beyond creating a compacted topic (retention, compaction
//! tuning, `min.insync.replicas` and an existing topic's policy are the operator's); noticing partitions added after
//! `connect` (adding partitions moves keys and breaks per-key order, so don't);
//! committing offsets (the engine keeps its own [`Position`]); Kerberos (GSSAPI).
//!
//! # Security and tuning
//!
//! TLS, SASL (PLAIN, SCRAM-SHA-256/512; OAUTHBEARER without OIDC) and tuning are librdkafka
//! properties given in the URI or a `config=FILE`, applied to every client of the
//! log; secrets come from files or environment variables, never the URI. The
//! effective producer configuration is logged at connect with secrets redacted.
//! See `settings`.

mod config;
mod consume;
mod follow;
mod produce;
pub mod settings;
mod topic;

use std::fmt;
use std::sync::{Arc, Mutex, RwLock};

use deltapilot_proto::Event;
use futures::stream::BoxStream;

pub use config::KafkaOptions;
use config::{LastError, Producer};
pub use settings::ClientSettings;

use super::{EventLog, FollowItem, Position, Record, RecordPos};
use crate::health::LogHealth;
use crate::{Error, Result};

/// A Kafka topic as an event log. Cheap to share: clones of the inner state are
/// handed to follow streams.
pub struct KafkaLog {
    shared: Arc<Shared>,
}

/// Broker list and topic, carried into every error, with what every client of
/// the log is configured with.
#[derive(Debug, Clone)]
struct Target {
    brokers: String,
    topic: String,
    /// The operator's librdkafka settings, files and variables read.
    settings: Arc<settings::Resolved>,
    /// The last error any client of this log reported.
    last_error: LastError,
}

impl Target {
    fn new(brokers: &str, topic: &str, settings: settings::Resolved) -> Self {
        Self {
            brokers: brokers.to_owned(),
            topic: topic.to_owned(),
            settings: Arc::new(settings),
            last_error: LastError::default(),
        }
    }

    /// A [`Error::Kafka`] that says which cluster and topic it is about.
    fn err(&self, op: &'static str, what: impl fmt::Display) -> Error {
        Error::Kafka {
            op,
            reason: format!("{what} [topic {:?}, brokers {}]", self.topic, self.brokers),
        }
    }

    /// `what`, with the last error librdkafka reported (the cause of a timeout
    /// when TLS or authentication fails) if there is one.
    fn with_cause(&self, what: impl fmt::Display) -> String {
        let Some(cause) = self.last_error.get() else {
            return what.to_string();
        };
        // The broker closes a plaintext client's first request on a TLS listener
        // without a word; say what that usually means.
        let plaintext = self
            .settings
            .get("security.protocol")
            .is_none_or(|p| p.eq_ignore_ascii_case("plaintext"));
        let hint = if plaintext && cause.contains("APIVERSION_QUERY") {
            " (the broker closed the connection at the first request: if this is a TLS \
             or SASL listener, set security.protocol=SSL, SASL_SSL or SASL_PLAINTEXT)"
        } else {
            ""
        };
        format!("{what}; the client's last error: {cause}{hint}")
    }
}

/// What the log handle and its follow streams share.
struct Shared {
    target: Target,
    opts: KafkaOptions,
    /// The topic's partition count, from metadata at connect.
    partitions: usize,
    /// One producer per handle (librdkafka batches concurrent appends together),
    /// replaced by a new one after a fatal error (see `produce`).
    producer: RwLock<ProducerSlot>,
    /// What appends, reads and probes learned about the broker.
    health: Arc<LogHealth>,
    /// The furthest head this handle has observed (its own appends, earlier `head`
    /// calls); `head` never reports less.
    known_head: Mutex<Position>,
}

/// The current producer and how many were built before it, so that appends that
/// saw the same fatal producer rebuild it once.
struct ProducerSlot {
    generation: u64,
    producer: Producer,
}

impl Shared {
    /// The current producer (a cheap handle) and its generation.
    fn producer(&self) -> (u64, Producer) {
        let slot = self
            .producer
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        (slot.generation, slot.producer.clone())
    }

    fn known_head(&self) -> Position {
        self.known_head
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Raises the known head to cover `seen` (never lowers it).
    fn observe_head(&self, seen: &Position) {
        let mut head = self
            .known_head
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for (p, &next) in seen.offsets().iter().enumerate() {
            if next > 0 {
                head.advance(RecordPos {
                    partition: p as u32,
                    offset: next - 1,
                });
            }
        }
    }
}

impl KafkaLog {
    /// Connects to `brokers` (comma-separated `host:port`), creating `topic` with
    /// `opts.partitions` partitions on first use, and learns its partition count.
    ///
    /// Fails within about `opts.request_timeout` if the brokers cannot be reached.
    pub async fn connect(brokers: &str, topic: &str, opts: KafkaOptions) -> Result<Self> {
        opts.validate()?;
        let unconfigured = Target::new(brokers, topic, settings::Resolved::default());
        if brokers.trim().is_empty() || topic.is_empty() {
            return Err(unconfigured.err("connect", "broker list and topic must not be empty"));
        }
        let resolved = opts
            .client
            .resolve()
            .map_err(|why| unconfigured.err("configure", why))?;
        let target = Target::new(brokers, topic, resolved);
        // Created first: the idempotent producer fetches its producer id in the
        // background, overlapping the topic set-up below.
        let producer_config = config::producer(&target, &opts);
        tracing::info!(
            %brokers,
            %topic,
            given = %target.settings.describe(),
            effective = %settings::describe_config(&producer_config),
            "kafka client configuration (secrets redacted; readers and the admin client \
             share the given settings)"
        );
        let producer: Producer = producer_config
            .create_with_context(target.last_error.clone())
            .map_err(|e| target.err("create producer", settings::client_error(e)))?;
        let partitions = topic::ensure(&target, &opts, &producer).await?;
        Ok(Self {
            shared: Arc::new(Shared {
                target,
                opts,
                partitions,
                producer: RwLock::new(ProducerSlot {
                    generation: 0,
                    producer,
                }),
                health: Arc::new(LogHealth::new()),
                known_head: Mutex::new(Position::start(partitions)),
            }),
        })
    }

    /// The topic's partition count (the existing topic's, if it was not created here).
    pub fn partitions(&self) -> usize {
        self.shared.partitions
    }

    /// The topic name.
    pub fn topic(&self) -> &str {
        &self.shared.target.topic
    }

    /// The bootstrap broker list.
    pub fn brokers(&self) -> &str {
        &self.shared.target.brokers
    }

    /// This handle's view of the broker's health (see [`LogHealth`]).
    pub fn health(&self) -> Arc<LogHealth> {
        self.shared.health.clone()
    }

    /// Asks the broker for the head (one ListOffsets round trip), which tells
    /// whether it answers even while nothing is appended or read; updates
    /// [`KafkaLog::health`] either way.
    pub async fn probe(&self) -> Result<Position> {
        let head = consume::head(&self.shared).await;
        self.shared.health.reachable(head.is_ok());
        head
    }
}

impl fmt::Debug for KafkaLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaLog")
            .field("brokers", &self.shared.target.brokers)
            .field("topic", &self.shared.target.topic)
            .field("partitions", &self.shared.partitions)
            .field("opts", &self.shared.opts)
            .finish_non_exhaustive()
    }
}

impl EventLog for KafkaLog {
    async fn append(&self, events: &[Event]) -> Result<Vec<RecordPos>> {
        produce::append(&self.shared, events).await
    }

    async fn read(&self, from: &Position, limit: usize) -> Result<Vec<Record>> {
        let records = consume::read(&self.shared, from, limit).await?;
        self.shared.health.read_ok();
        Ok(records)
    }

    fn follow(&self, from: Position) -> BoxStream<'static, Result<FollowItem>> {
        follow::follow(self.shared.clone(), from)
    }

    async fn head(&self) -> Result<Position> {
        consume::head(&self.shared).await
    }

    fn start(&self) -> Position {
        Position::start(self.shared.partitions)
    }

    fn max_event_bytes(&self) -> usize {
        produce::MAX_EVENT_BYTES
    }
}
