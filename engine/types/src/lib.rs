//! The ground floor of deltapilot: the vocabulary every other crate shares.
//!
//! - [`Position`]: where a reader of the event log is (per partition, the next
//!   offset), and [`RecordPos`]: where one record sits.
//!
//! What it does NOT do: read or write a log (see `deltapilot-log`), or know what an
//! event means (see `deltapilot-model`). It depends on nothing of deltapilot's, so
//! the log, the model and the xDS crates can all name positions without depending
//! on one another.

mod position;

pub use position::{Position, RecordPos};

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong with a position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A textual log position could not be parsed.
    #[error("invalid log position {text:?}: {reason}")]
    InvalidPosition {
        /// The position as given.
        text: String,
        /// What is wrong.
        reason: String,
    },
}
