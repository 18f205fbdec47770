//! The event log: the single source of truth (invariant 1).
//!
//! Adapters append entity-level events; engine replicas read and follow them. Two
//! backends implement [`EventLog`]:
//!
//! - [`file::FileLog`], the embedded default: a segmented, append-only file log with
//!   length-prefixed, CRC-checked records, for one machine with no external service.
//! - [`kafka::KafkaLog`]: a Kafka topic keyed by entity key, for fleets. Every replica
//!   reads every partition by assignment (never a consumer group).
//!
//! [`Log`] picks one at run time from a URI (`file://DIR` or `kafka://HOST:PORT/TOPIC`).
//!
//! The log stores encoded [`Event`] bytes and hands back [`Record`]s; decoding (and the
//! schema-version check) is separate, so the engine can skip and count a bad record
//! while a CLI reports it as an error.
//!
//! What it does NOT do: interpret events (that is the fold's job in
//! `deltapilot-model`), or decide when to compact the embedded log (the process
//! that knows a safe position, e.g. its oldest checkpoint, calls
//! [`file::FileLog::compact`]). It depends on the event schema and the
//! Kafka client only, so an adapter that appends events compiles no fold and no
//! xDS.

mod error;
pub mod file;
mod health;
pub mod kafka;
mod record;
mod uri;

use std::future::Future;

use deltapilot_proto::Event;
use futures::stream::BoxStream;

pub use deltapilot_types::{Position, RecordPos};
pub use error::{Error, Result};
pub use health::{AppendFailure, LogHealth};
pub use kafka::settings::redact_uri;
pub use record::{Record, decode_event, encode_event};
pub use uri::{DEFAULT_LOG_URI, LogOptions, LogUri, parse as parse_uri};

/// Most records a follower yields in one [`FollowItem::Records`] batch. Large enough
/// that the fold amortises its per-batch work (snapshot publish, change-set merge);
/// small enough that a batch of ~200-byte events stays around a megabyte.
pub const FOLLOW_BATCH_MAX: usize = 4096;

/// What a follower yields.
#[derive(Debug, Clone)]
pub enum FollowItem {
    /// The next records, in log order within each partition. Never empty.
    Records(Vec<Record>),
    /// The follower has delivered everything the log held when it last looked; the
    /// position is where it now stands. Emitted each time the follower catches up
    /// after delivering records (and once at the start if the log is already read).
    /// A replica is ready once it has seen this.
    CaughtUp(Position),
}

/// An append-only, readable, followable log of events.
///
/// Implementations are cheap to share (`&self` methods, internally synchronised) and
/// every method is bounded in time: a backend that cannot make progress returns an
/// error after its configured timeout rather than hanging.
pub trait EventLog: Send + Sync {
    /// Appends `events` as one batch, in order, and returns where each one landed.
    ///
    /// Either the whole batch is accepted or an error is returned. On error, events
    /// of the batch may or may not be durable (as with any log after a crash), but no
    /// event that was acknowledged before is ever lost.
    fn append(&self, events: &[Event]) -> impl Future<Output = Result<Vec<RecordPos>>> + Send;

    /// Reads up to `limit` records at or after `from`, in log order within each
    /// partition. Returns fewer (possibly none) at the end of the log; never waits
    /// for new records.
    fn read(
        &self,
        from: &Position,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Record>>> + Send;

    /// Follows the log from `from`: yields everything already there, then new records
    /// as they are appended, with [`FollowItem::CaughtUp`] whenever it reaches the
    /// head. The stream is pulled, so a slow consumer only slows itself.
    fn follow(&self, from: Position) -> BoxStream<'static, Result<FollowItem>>;

    /// The head: one past the last record, per partition.
    fn head(&self) -> impl Future<Output = Result<Position>> + Send;

    /// The position a reader starts from to read the whole log.
    fn start(&self) -> Position;

    /// The oldest position at which folding from [`EventLog::start`] gives exactly
    /// the state the log's writers produced: below it, compaction removed
    /// superseded records (the embedded log's [`file::FileLog::horizon_offset`]). A replay
    /// of an earlier position cannot be exact, and a checkpoint taken earlier must
    /// not be resumed from. The start for a log that was never compacted.
    fn horizon(&self) -> Position {
        self.start()
    }

    /// The largest encoded event this log accepts. `append` refuses a batch holding
    /// a larger one before writing any of it; callers that must not fail halfway
    /// (an adapter, `log append`) check each event against it first.
    fn max_event_bytes(&self) -> usize;
}

/// A log backend chosen at run time.
pub enum Log {
    /// The embedded file log.
    File(file::FileLog),
    /// A Kafka topic.
    Kafka(kafka::KafkaLog),
}

impl Log {
    /// Opens the log a URI names, creating it (directory or topic) on first use.
    pub async fn open(uri: &LogUri, opts: &LogOptions) -> Result<Self> {
        Ok(match uri {
            LogUri::File { dir } => {
                // Opening scans (and may repair) the whole log: keep it off the async
                // workers so other tasks keep running while a large log is checked.
                let (dir, fopts) = (dir.clone(), opts.file.clone());
                let opened = tokio::task::spawn_blocking(move || file::FileLog::open(&dir, fopts))
                    .await
                    .map_err(|e| crate::Error::Task(format!("opening the file log: {e}")))?;
                Log::File(opened?)
            }
            LogUri::Kafka { brokers, topic } => {
                Log::Kafka(kafka::KafkaLog::connect(brokers, topic, opts.kafka.clone()).await?)
            }
        })
    }
}

impl Log {
    /// This handle's health: reachability, last good append and read, append
    /// failures by reason (see [`LogHealth`]).
    pub fn health(&self) -> std::sync::Arc<LogHealth> {
        match self {
            Log::File(l) => l.health(),
            Log::Kafka(l) => l.health(),
        }
    }

    /// Asks the log for its head, bounded by the backend's timeouts, so that
    /// health is current even while nothing is appended or read (a broker lost
    /// while a follower idles at the end shows here first). For the embedded log a
    /// probe also counts as a read.
    pub async fn probe(&self) -> Result<Position> {
        match self {
            Log::File(l) => {
                let head = l.head().await;
                if head.is_ok() {
                    l.health.read_ok();
                }
                head
            }
            Log::Kafka(l) => l.probe().await,
        }
    }
}

impl EventLog for Log {
    async fn append(&self, events: &[Event]) -> Result<Vec<RecordPos>> {
        match self {
            Log::File(l) => l.append(events).await,
            Log::Kafka(l) => l.append(events).await,
        }
    }

    async fn read(&self, from: &Position, limit: usize) -> Result<Vec<Record>> {
        match self {
            Log::File(l) => l.read(from, limit).await,
            Log::Kafka(l) => l.read(from, limit).await,
        }
    }

    fn follow(&self, from: Position) -> BoxStream<'static, Result<FollowItem>> {
        match self {
            Log::File(l) => l.follow(from),
            Log::Kafka(l) => l.follow(from),
        }
    }

    async fn head(&self) -> Result<Position> {
        match self {
            Log::File(l) => l.head().await,
            Log::Kafka(l) => l.head().await,
        }
    }

    fn start(&self) -> Position {
        match self {
            Log::File(l) => l.start(),
            Log::Kafka(l) => l.start(),
        }
    }

    fn horizon(&self) -> Position {
        match self {
            Log::File(l) => l.horizon(),
            Log::Kafka(l) => l.horizon(),
        }
    }

    fn max_event_bytes(&self) -> usize {
        match self {
            Log::File(l) => l.max_event_bytes(),
            Log::Kafka(l) => l.max_event_bytes(),
        }
    }
}
