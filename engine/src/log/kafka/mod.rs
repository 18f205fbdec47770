//! The Kafka log (stub; being built).
use std::time::Duration;

use deltapilot_proto::Event;
use futures::stream::BoxStream;

use super::{EventLog, FollowItem, Position, Record, RecordPos};
use crate::{Error, Result};

/// Options of the Kafka backend.
#[derive(Debug, Clone)]
pub struct KafkaOptions {
    /// Partition count used when the topic is created on first use.
    pub partitions: i32,
    /// How long one append may retry before it fails.
    pub append_timeout: Duration,
    /// Bound on one metadata/admin request.
    pub request_timeout: Duration,
}

impl Default for KafkaOptions {
    fn default() -> Self {
        Self {
            partitions: 1,
            append_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// A Kafka topic as an event log.
pub struct KafkaLog {}

impl KafkaLog {
    /// Connects, creating the topic on first use.
    pub async fn connect(_brokers: &str, _topic: &str, _opts: KafkaOptions) -> Result<Self> {
        Err(Error::Kafka { op: "connect", reason: "not built yet".into() })
    }
}

impl EventLog for KafkaLog {
    async fn append(&self, _events: &[Event]) -> Result<Vec<RecordPos>> {
        Err(Error::Closed)
    }
    async fn read(&self, _from: &Position, _limit: usize) -> Result<Vec<Record>> {
        Err(Error::Closed)
    }
    fn follow(&self, _from: Position) -> BoxStream<'static, Result<FollowItem>> {
        Box::pin(futures::stream::empty())
    }
    async fn head(&self) -> Result<Position> {
        Err(Error::Closed)
    }
    fn start(&self) -> Position {
        Position::start(1)
    }
}
