//! What the Kubernetes adapter reports about itself: per-watch sync state, counters
//! and current problems, published through a `tokio::sync::watch` channel so the
//! server renders metrics and `/readyz` detail by borrowing the latest value, never
//! by asking the adapter task.
//!
//! What it does NOT do: register metrics or serve HTTP (the server does that from
//! these numbers).

use std::fmt;
use std::time::Duration;

use super::kinds::ResourceKind;

/// Where one watch stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SyncState {
    /// The first list has not completed yet.
    Pending,
    /// Listed and watching; the adapter's view of this kind is current.
    Synced,
    /// The last list or watch failed; the adapter keeps the last state it saw and
    /// retries with backoff. `last_error` says why.
    Retrying,
    /// The API server does not serve this kind (404: the CRD is not installed). It
    /// counts as empty, and the adapter keeps retrying in case it gets installed.
    Absent,
}

impl SyncState {
    /// A stable snake-case name, for metric labels and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncState::Pending => "pending",
            SyncState::Synced => "synced",
            SyncState::Retrying => "retrying",
            SyncState::Absent => "absent",
        }
    }
}

/// One watch (a kind in a namespace, or in all namespaces).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchStatus {
    /// The watched kind.
    pub kind: ResourceKind,
    /// The namespace, or `None` for all namespaces (and cluster-scoped kinds).
    pub namespace: Option<String>,
    /// Where the watch stands.
    pub state: SyncState,
    /// Whether the first list has completed (or the kind was found absent), which
    /// the start-up resync waits for.
    pub initial_sync_done: bool,
    /// Objects of this watch in the adapter's store.
    pub objects: usize,
    /// Full lists completed after the first one (410 Gone and other relists).
    pub relists_total: u64,
    /// List and watch failures (each followed by a backoff).
    pub errors_total: u64,
    /// Consecutive failures since the last success.
    pub consecutive_failures: u32,
    /// The most recent failure, kept after recovery so it can be inspected.
    pub last_error: Option<String>,
    /// The delay chosen before the current retry, while retrying.
    pub retry_in: Option<Duration>,
}

impl fmt::Display for WatchStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} in {}: {}",
            self.kind,
            self.namespace.as_deref().unwrap_or("all namespaces"),
            self.state.as_str()
        )?;
        if matches!(self.state, SyncState::Retrying | SyncState::Absent)
            && let Some(e) = &self.last_error
        {
            write!(f, " ({e})")?;
        }
        Ok(())
    }
}

/// A Kubernetes object the adapter skipped because it could not be mapped; its last
/// good state (if any) stays in force until it is fixed or deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectProblem {
    /// The object's kind.
    pub kind: ResourceKind,
    /// Its namespace (empty for cluster-scoped kinds).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Why it was skipped.
    pub reason: String,
}

impl fmt::Display for ObjectProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.kind)?;
        if !self.namespace.is_empty() {
            write!(f, "{}/", self.namespace)?;
        }
        write!(f, "{}: {}", self.name, self.reason)
    }
}

/// The adapter's state as the server exports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubernetesAdapterStatus {
    /// The source id stamped on every event.
    pub source: String,
    /// The resync generation in force (0 until every watch has listed once and the
    /// resync has begun).
    pub generation: u64,
    /// Whether the start-up resync has been fully appended (`resync COMPLETED`): the
    /// adapter's contribution to readiness.
    pub resync_completed: bool,
    /// The log position just past that marker and everything the adapter
    /// appended before it: a reader that covers it has folded the start-up view.
    pub resync_completed_at: Option<deltapilot_log::Position>,
    /// Entities the adapter has appended and believes current (its view size).
    pub entities_in_view: usize,
    /// Events appended since start, resync markers included.
    pub events_emitted_total: u64,
    /// Objects skipped as malformed, counted each time one is received.
    pub malformed_objects_total: u64,
    /// Parts of otherwise good objects left out (an SCTP port, an FQDN or non-IP
    /// endpoint address), counted each time the object is received.
    pub skipped_parts_total: u64,
    /// Appends the log refused (each retried with backoff).
    pub append_failures_total: u64,
    /// Objects left out because their event is larger than the log accepts (each
    /// version counted once, when it is planned); the log keeps the last version
    /// that fit.
    pub oversized_objects_total: u64,
    /// Events planned but not yet durably appended: entities whose change is
    /// still to go out (an upper bound) and resync markers still to write.
    /// Grows while the log refuses appends; 0 once the log matches the view.
    pub append_backlog: usize,
    /// The last object left out for its size, and why.
    pub last_oversized_object: Option<String>,
    /// The last append error, cleared by the next successful append.
    pub last_append_error: Option<String>,
    /// The most recent list or watch failure of any watch.
    pub last_registry_error: Option<String>,
    /// Every watch, in a fixed order.
    pub watches: Vec<WatchStatus>,
    /// Objects currently skipped as malformed (at most
    /// [`KubernetesAdapterStatus::MAX_PROBLEMS`], sorted).
    pub problems: Vec<ObjectProblem>,
}

impl KubernetesAdapterStatus {
    /// Most problems listed in [`Self::problems`]: enough to diagnose, bounded so
    /// a cluster full of broken objects cannot bloat every status copy.
    pub const MAX_PROBLEMS: usize = 100;

    /// Whether every watch is listed and watching (or its kind absent): the
    /// registry side of `/readyz`. `false` while any watch is pending or retrying.
    pub fn registry_healthy(&self) -> bool {
        self.watches
            .iter()
            .all(|w| matches!(w.state, SyncState::Synced | SyncState::Absent))
    }

    /// The sync state of a kind over all its watches: the worst of them
    /// (`Retrying` over `Pending` over `Absent` over `Synced`).
    pub fn kind_state(&self, kind: ResourceKind) -> Option<SyncState> {
        let rank = |s: SyncState| match s {
            SyncState::Synced => 0,
            SyncState::Absent => 1,
            SyncState::Pending => 2,
            SyncState::Retrying => 3,
        };
        self.watches
            .iter()
            .filter(|w| w.kind == kind)
            .map(|w| w.state)
            .max_by_key(|s| rank(*s))
    }
}
