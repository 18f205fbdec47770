//! The embedded log (stub; being built).
use std::path::Path;
use std::time::Duration;

use deltapilot_proto::Event;
use futures::stream::BoxStream;

use super::{EventLog, FollowItem, Position, Record, RecordPos};
use crate::{Error, Result};

/// When appended records are fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// After every append, before it is acknowledged.
    Always,
    /// At most this long after an append.
    Interval(Duration),
    /// Never explicitly; the OS decides.
    Never,
}

impl FsyncPolicy {
    /// Default interval for [`FsyncPolicy::Interval`].
    pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(10);

    /// The interval if this is `Interval`, else the default.
    pub fn interval_or_default(&self) -> Duration {
        match self {
            FsyncPolicy::Interval(d) => *d,
            _ => Self::DEFAULT_INTERVAL,
        }
    }
}

/// Options of the embedded log.
#[derive(Debug, Clone)]
pub struct FileLogOptions {
    /// When to fsync.
    pub fsync: FsyncPolicy,
    /// A segment rolls once it reaches this many bytes.
    pub segment_bytes: u64,
}

impl Default for FileLogOptions {
    fn default() -> Self {
        Self {
            fsync: FsyncPolicy::Interval(FsyncPolicy::DEFAULT_INTERVAL),
            segment_bytes: 64 * 1024 * 1024,
        }
    }
}

/// The embedded segmented file log.
pub struct FileLog {}

impl FileLog {
    /// Opens (creating if needed) the log in `dir`, recovering a torn tail.
    pub fn open(dir: &Path, _opts: FileLogOptions) -> Result<Self> {
        Err(Error::InvalidLogDir {
            path: dir.to_owned(),
            reason: "not built yet".into(),
        })
    }
}

impl EventLog for FileLog {
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
