//! The adapters crate's one error type.
//!
//! These are the failures that stop an adapter or one of its calls: bad options, a
//! watched directory that cannot be set up, the event log refusing an append, the
//! adapter's own state file. Bad *input* (a broken YAML file, a malformed object) is
//! NOT an error here: it is reported in the adapter's status and skipped, because one
//! bad object must never stop the watch.

use std::path::PathBuf;

/// Result alias for the adapters crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can stop an adapter call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The adapter was configured with options that cannot work. Reported before
    /// anything runs, so an operator sees it at startup.
    #[error("invalid adapter configuration: {0}")]
    InvalidConfig(String),

    /// A filesystem operation the adapter itself needs failed (not reading one
    /// watched file: that is a per-file problem in the status).
    #[error("{op} {path}: {source}")]
    Io {
        /// What we were doing ("read directory", "write state file", ...).
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// The filesystem watcher could not be created or could not watch a directory.
    #[error("watch {}: {reason}", path.as_ref().map_or_else(|| "(watcher)".to_owned(), |p| p.display().to_string()))]
    Watch {
        /// The directory, when the failure concerns one.
        path: Option<PathBuf>,
        /// The watcher's complaint.
        reason: String,
    },

    /// The event log failed (append refused, closed, timed out).
    #[error("event log: {0}")]
    Log(#[from] deltapilot_log::Error),

    /// The adapter's persisted state (generation, last good objects) is unusable.
    #[error("adapter state file {path}: {reason}")]
    State {
        /// The state file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// A request to a Eureka server failed or its answer was unusable: refused,
    /// timed out, an HTTP error status, not JSON, too large, or not an
    /// `applications` document. The Eureka adapter keeps its last state, shows
    /// this in its status and retries with backoff.
    #[error("eureka {url}: {reason}")]
    Eureka {
        /// The request URL.
        url: String,
        /// What kind of failure, for metrics and tests.
        kind: crate::eureka::FetchErrorKind,
        /// What happened, in words an operator can act on.
        reason: String,
    },

    /// The Kubernetes client could not be set up: no kubeconfig or in-cluster
    /// environment found, an unreadable kubeconfig, bad credentials or TLS
    /// material. (API server failures while running are not errors: the adapter
    /// keeps its last state, shows them in its status and retries.)
    #[error("kubernetes client: {0}")]
    KubeClient(String),

    /// A background task of the adapter died (a panic in a blocking scan).
    #[error("adapter task failed: {0}")]
    Task(String),
}
