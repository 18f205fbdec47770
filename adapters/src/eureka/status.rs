//! What the Eureka adapter reports about itself: whether the registry answers,
//! fetch and append counters, view sizes and the malformed instances it skips,
//! published through a `tokio::sync::watch` channel so the server renders metrics
//! and `/readyz` detail by borrowing the latest value, never by asking the task.
//!
//! What it does NOT do: register metrics or serve HTTP (the server does that from
//! these numbers).

use std::fmt;

/// Why a fetch failed, so dashboards and tests can tell a dead registry from a
/// broken answer without parsing messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FetchErrorKind {
    /// The TCP connection could not be made (refused, unreachable, DNS).
    Connect,
    /// The request (connect, headers or body) took longer than the request timeout.
    Timeout,
    /// The server answered with a non-2xx HTTP status.
    HttpStatus,
    /// The answer was not JSON by its `Content-Type` (XML, HTML, none).
    ContentType,
    /// The body was larger than the configured maximum.
    TooLarge,
    /// The body was not valid JSON.
    InvalidJson,
    /// The body was JSON but not an `applications` document.
    InvalidShape,
    /// Any other transport failure (connection reset mid-body, protocol error).
    Transport,
}

impl FetchErrorKind {
    /// A stable snake-case name, for metric labels and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            FetchErrorKind::Connect => "connect",
            FetchErrorKind::Timeout => "timeout",
            FetchErrorKind::HttpStatus => "http_status",
            FetchErrorKind::ContentType => "content_type",
            FetchErrorKind::TooLarge => "too_large",
            FetchErrorKind::InvalidJson => "invalid_json",
            FetchErrorKind::InvalidShape => "invalid_shape",
            FetchErrorKind::Transport => "transport",
        }
    }
}

impl fmt::Display for FetchErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One instance the adapter skips (or keeps at its last good state), as an operator
/// needs it to find the culprit in the registry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct InstanceProblem {
    /// The application, when the entry names one.
    pub app: Option<String>,
    /// The instance id, when the entry has one.
    pub instance_id: Option<String>,
    /// Why, in words.
    pub reason: String,
    /// Whether the instance's last good version is still in force.
    pub kept_last_good: bool,
}

impl fmt::Display for InstanceProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}: {}",
            self.app.as_deref().unwrap_or("(no app)"),
            self.instance_id.as_deref().unwrap_or("(no id)"),
            self.reason
        )?;
        if self.kept_last_good {
            f.write_str(" [last good state kept]")?;
        }
        Ok(())
    }
}

/// The adapter's state as the server exports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EurekaAdapterStatus {
    /// The source id stamped on every event.
    pub source: String,
    /// The registry's `/apps` URL.
    pub url: String,
    /// The resync generation in force (0 before the adapter runs).
    pub generation: u64,
    /// Whether the start-up resync has been fully appended (`resync COMPLETED`):
    /// the adapter's contribution to readiness. Stays `false` while the registry
    /// has never answered, since the log then still holds the previous run's view.
    pub resync_completed: bool,
    /// The log position just past that marker and everything the adapter
    /// appended before it: a reader that covers it has folded the start-up view.
    pub resync_completed_at: Option<deltapilot_log::Position>,
    /// Whether the last fetch succeeded.
    pub registry_reachable: bool,
    /// Fetches failed in a row (0 once one succeeds); the retry delay grows with it.
    pub consecutive_fetch_failures: u32,
    /// The last fetch error, cleared by the next successful fetch.
    pub last_fetch_error: Option<String>,
    /// The kind of [`Self::last_fetch_error`].
    pub last_fetch_error_kind: Option<FetchErrorKind>,
    /// Successful full fetches (`GET /apps`).
    pub full_fetches_total: u64,
    /// Successful delta fetches (`GET /apps/delta`).
    pub delta_fetches_total: u64,
    /// Failed fetches of either kind.
    pub fetch_failures_total: u64,
    /// Deltas after which the local copy's hashcode differed from the server's
    /// `apps__hashcode` (each is followed by a full fetch).
    pub hashcode_mismatches_total: u64,
    /// The last `apps__hashcode` the server sent.
    pub last_hashcode: Option<String>,
    /// Applications in the local copy of the registry.
    pub applications: usize,
    /// Instances in the local copy (malformed ones included).
    pub instances: usize,
    /// Malformed instance entries met, counted each time a response carrying one is
    /// read.
    pub malformed_instances_total: u64,
    /// Entities the adapter has appended and believes current (its view size).
    pub entities_in_view: usize,
    /// Events appended since start, resync markers included.
    pub events_emitted_total: u64,
    /// Appends the log refused (each is retried with backoff).
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
    /// Instances currently skipped or held at their last good state, sorted.
    pub problems: Vec<InstanceProblem>,
}
