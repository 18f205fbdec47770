//! The log's one error type. Every variant says what failed, where, and why, so
//! that a CLI or an operator can act on it without reading code.

use std::path::PathBuf;

/// Result alias for the log.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong reading or writing the event log.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A filesystem operation on the embedded log failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What we were doing ("open segment", "fsync", ...).
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// A record in the middle of the embedded log failed its checks. Never skipped:
    /// the log up to `offset` is trustworthy, everything after it is not.
    #[error(
        "corrupt record in segment {segment} at byte {byte_offset} (log offset {offset}): {reason}"
    )]
    Corrupt {
        /// The segment file.
        segment: PathBuf,
        /// Byte offset of the bad record within the segment.
        byte_offset: u64,
        /// Log offset the bad record would have had.
        offset: u64,
        /// What check failed (CRC mismatch, impossible length, ...).
        reason: String,
    },

    /// The log's on-disk layout is not one this build can open.
    #[error("invalid log directory {path}: {reason}")]
    InvalidLogDir {
        /// The data directory.
        path: PathBuf,
        /// Why it is not usable.
        reason: String,
    },

    /// A `--log` URI could not be understood.
    #[error("invalid log URI {uri:?}: {reason}")]
    InvalidUri {
        /// The URI as given.
        uri: String,
        /// What is wrong and what is expected.
        reason: String,
    },

    /// A textual log position could not be parsed or does not fit this log.
    #[error("invalid log position {text:?}: {reason}")]
    InvalidPosition {
        /// The position as given.
        text: String,
        /// What is wrong.
        reason: String,
    },

    /// A position lies outside the records the log holds.
    #[error("position {requested} is outside the log (valid range {start}..={head})")]
    PositionOutOfRange {
        /// The requested position.
        requested: String,
        /// The first readable position.
        start: String,
        /// The head (one past the last record).
        head: String,
    },

    /// A position below the oldest record the log still holds: retention deleted
    /// the records before it, so nothing there can be read or replayed.
    #[error(
        "position {requested} is older than the log's retention: the records below {oldest} were deleted; the oldest position still available is {oldest}"
    )]
    BeforeRetention {
        /// The requested position.
        requested: String,
        /// The log's start: its oldest readable position.
        oldest: String,
    },

    /// A record's bytes are not a valid event.
    #[error("record at {position} does not decode as an event: {reason}")]
    Decode {
        /// Where the record sits.
        position: String,
        /// The decoder's complaint.
        reason: String,
    },

    /// A record was written by a newer schema than this build understands.
    #[error(
        "record at {position} has schema version {found}, newer than the newest this build reads ({supported}); upgrade deltapilot to read it"
    )]
    SchemaTooNew {
        /// Where the record sits.
        position: String,
        /// The version in the record.
        found: u32,
        /// The newest version this build knows.
        supported: u32,
    },

    /// An event failed validation before it was appended.
    #[error("invalid event: {0}")]
    InvalidEvent(String),

    /// The Kafka backend failed (broker unreachable after retries, topic errors, ...).
    #[error("kafka {op}: {reason}")]
    Kafka {
        /// What we were doing ("produce", "create topic", ...).
        op: &'static str,
        /// The client's error, with context.
        reason: String,
    },

    /// A follower made no progress for a while (the broker is down or cut off).
    /// Not fatal: the stream that yielded it goes on and keeps trying, so a caller
    /// should report it and keep reading (see [`Error::is_transient`]).
    #[error("kafka {op}: {reason}")]
    Stalled {
        /// What stalled ("follow").
        op: &'static str,
        /// Which partitions, since when, and the client's last error.
        reason: String,
    },

    /// An operation did not finish within its bounded time.
    #[error("{op} timed out after {after:?}")]
    Timeout {
        /// What timed out.
        op: &'static str,
        /// The bound that was hit.
        after: std::time::Duration,
    },

    /// The embedded log could not be compacted; nothing was changed, or what was
    /// changed is complete (compaction rewrites one segment at a time, atomically).
    #[error("cannot compact the log in {path}: {reason}")]
    Compact {
        /// The log directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },

    /// A background task the engine relies on panicked or was cancelled.
    #[error("internal task failed: {0}")]
    Task(String),

    /// The log was closed while an operation was in progress.
    #[error("the event log is closed")]
    Closed,
}

impl Error {
    /// Whether the stream that yielded this error goes on by itself (a stall),
    /// so a reader should keep reading rather than give up.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Stalled { .. })
    }
}

impl From<deltapilot_types::Error> for Error {
    fn from(e: deltapilot_types::Error) -> Self {
        match e {
            deltapilot_types::Error::InvalidPosition { text, reason } => {
                Error::InvalidPosition { text, reason }
            }
        }
    }
}
