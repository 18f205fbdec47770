//! The engine's one error type. Every variant says what failed, where, and why, so
//! that a CLI or an operator can act on it without reading code.

use std::path::PathBuf;

/// Result alias for the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the runner, a checkpoint or a replay.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The event log failed (see [`deltapilot_log::Error`]).
    #[error(transparent)]
    Log(#[from] deltapilot_log::Error),

    /// A filesystem operation on a checkpoint failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`"create"`, `"read"`, `"fsync"`, ...).
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A background task died.
    #[error("internal task failed: {0}")]
    Task(String),
}
