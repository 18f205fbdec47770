//! What a log handle knows about its own health, for metrics and readiness: is
//! the log (the broker) answering, when did an append and a read last succeed,
//! how many appends failed and why, and how often a Kafka producer was rebuilt
//! after a fatal error.
//!
//! Plain atomics, updated by the backend as a side effect of the work it does
//! (and of [`crate::Log::probe`]), read from any thread. The server exports them;
//! this crate depends on no metrics crate.
//!
//! What it does NOT do: decide readiness (the server does, from this and the
//! engine's position).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Why an append failed: a small, fixed set, so a metric label per reason stays
/// bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AppendFailure {
    /// Not acknowledged in time (`append_timeout`): the broker is down, cut off
    /// or too slow.
    Timeout,
    /// The client could not reach the broker or was refused by it (other than a
    /// timeout): connection errors, broker error codes.
    Broker,
    /// The Kafka producer hit a fatal error (fenced, sequence desynchronised, …);
    /// it is rebuilt.
    Fatal,
    /// The batch was refused before anything was sent (no key, too large).
    InvalidEvent,
    /// The embedded log's filesystem failed.
    Io,
    /// Anything else (the log was closed, an internal task failed).
    Other,
}

impl AppendFailure {
    /// Every reason, in label order.
    pub const ALL: [AppendFailure; 6] = [
        AppendFailure::Timeout,
        AppendFailure::Broker,
        AppendFailure::Fatal,
        AppendFailure::InvalidEvent,
        AppendFailure::Io,
        AppendFailure::Other,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            AppendFailure::Timeout => "timeout",
            AppendFailure::Broker => "broker",
            AppendFailure::Fatal => "fatal",
            AppendFailure::InvalidEvent => "invalid_event",
            AppendFailure::Io => "io",
            AppendFailure::Other => "other",
        }
    }

    /// Whether a failure for this reason says the log is unreachable.
    fn unreachable(self) -> bool {
        matches!(self, AppendFailure::Timeout | AppendFailure::Broker)
    }

    /// The reason of an error that does not say more (the Kafka backend
    /// classifies its own errors where it knows the client's error code).
    pub fn of(e: &crate::Error) -> Self {
        use crate::Error;
        match e {
            Error::Timeout { .. } => AppendFailure::Timeout,
            Error::Kafka { .. } => AppendFailure::Broker,
            Error::InvalidEvent(_) => AppendFailure::InvalidEvent,
            Error::Io { .. } | Error::Corrupt { .. } | Error::InvalidLogDir { .. } => {
                AppendFailure::Io
            }
            _ => AppendFailure::Other,
        }
    }
}

/// A log handle's health. See the module docs.
#[derive(Debug)]
pub struct LogHealth {
    connected: AtomicBool,
    last_append_ok_ms: AtomicU64,
    last_read_ok_ms: AtomicU64,
    append_failures: [AtomicU64; AppendFailure::ALL.len()],
    producer_rebuilds: AtomicU64,
}

impl Default for LogHealth {
    fn default() -> Self {
        Self::new()
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl LogHealth {
    /// A handle that was just opened (so the log answered).
    pub fn new() -> Self {
        Self {
            connected: AtomicBool::new(true),
            last_append_ok_ms: AtomicU64::new(0),
            last_read_ok_ms: AtomicU64::new(0),
            append_failures: Default::default(),
            producer_rebuilds: AtomicU64::new(0),
        }
    }

    /// Whether the log answered the last request that could tell (an append, a
    /// read, a follower's progress, a probe).
    pub fn connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// When an append last succeeded, in Unix milliseconds (0: never).
    pub fn last_append_ok_unix_ms(&self) -> u64 {
        self.last_append_ok_ms.load(Ordering::Relaxed)
    }

    /// When a read last succeeded (a `read`, or a follower that got
    /// records or reached the end), in Unix milliseconds (0: never). An idle
    /// follower that stays at the end does not move it; see [`LogHealth::connected`].
    pub fn last_read_ok_unix_ms(&self) -> u64 {
        self.last_read_ok_ms.load(Ordering::Relaxed)
    }

    /// Appends that failed for `reason`, since open.
    pub fn append_failures(&self, reason: AppendFailure) -> u64 {
        let i = AppendFailure::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        self.append_failures[i].load(Ordering::Relaxed)
    }

    /// Appends that failed, for any reason, since open.
    pub fn append_failures_total(&self) -> u64 {
        AppendFailure::ALL
            .iter()
            .map(|r| self.append_failures(*r))
            .sum()
    }

    /// Times the Kafka producer was rebuilt after a fatal error, since open.
    pub fn producer_rebuilds_total(&self) -> u64 {
        self.producer_rebuilds.load(Ordering::Relaxed)
    }

    pub(crate) fn append_ok(&self) {
        self.connected.store(true, Ordering::Relaxed);
        self.last_append_ok_ms.store(now_ms(), Ordering::Relaxed);
    }

    pub(crate) fn append_failed(&self, reason: AppendFailure) {
        if reason.unreachable() {
            self.connected.store(false, Ordering::Relaxed);
        }
        if let Some(i) = AppendFailure::ALL.iter().position(|r| *r == reason) {
            self.append_failures[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn read_ok(&self) {
        self.connected.store(true, Ordering::Relaxed);
        self.last_read_ok_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// The log answered something that is not a read or an append (a probe).
    pub(crate) fn reachable(&self, yes: bool) {
        self.connected.store(yes, Ordering::Relaxed);
    }

    pub(crate) fn producer_rebuilt(&self) {
        self.producer_rebuilds.fetch_add(1, Ordering::Relaxed);
    }
}
