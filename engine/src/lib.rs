//! The deltapilot engine: everything between the event log and the bytes a proxy is
//! sent, with no networking except the log clients.
//!
//! - [`log`]: the event log abstraction and its two backends (embedded segmented
//!   file log, the default; Kafka for fleets).
//!
//! What it does NOT do: serve gRPC or HTTP, watch registries, or parse CLI flags.
//! Those live in `server` and `adapters`, which depend on this crate.

pub mod checkpoint;
pub mod error;
pub mod fold;
pub mod log;
pub mod model;
mod par;
mod release;
pub mod replay;
pub mod snapshot;
pub mod state;
pub mod xds;

pub use error::{Error, Result};
