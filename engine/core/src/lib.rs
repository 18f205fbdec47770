//! The deltapilot engine: the runner that wires log → fold → generate → publish,
//! plus checkpoints and replay.
//!
//! - [`runner`]: [`runner::Engine`] follows a log, folds each batch
//!   (`deltapilot-model`), regenerates the touched xDS resources
//!   (`deltapilot-xds`) and publishes the next snapshot.
//! - [`checkpoint`]: checksummed snapshots of the folded state on disk, so a
//!   restart does not re-fold the whole log.
//! - [`replay`]: re-folding a range of the log to rebuild any past moment.
//!
//! What it does NOT do: serve gRPC or HTTP, watch registries, or parse CLI flags.
//! Those live in `server` and `adapters`. The log backends, the model and the xDS
//! translation are crates of their own (`deltapilot-log`, `deltapilot-model`,
//! `deltapilot-xds`).

pub mod checkpoint;
pub mod error;
mod release;
pub mod replay;
pub mod runner;

pub use error::{Error, Result};
