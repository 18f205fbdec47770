//! deltapilot's registry adapters. Each adapter turns one platform registry's state
//! into entity-level events appended to the event log; adapters never talk to the
//! engine directly (invariant 1: the log is the truth).
//!
//! - [`file`](mod@file): directories of Istio networking YAML (ServiceEntry and friends).
//! - [`eureka`]: a Eureka server's registry (full fetch, then deltas reconciled by
//!   hashcode), one service per VIP and one endpoint per instance.
//! - [`kubernetes`]: a cluster's Services, EndpointSlices, Pods, Nodes and Istio
//!   networking objects, watched with kube-rs.
//!
//! What the adapters share lives in `common`: the emitted view and its
//! resync-bracketed plan, the append loop with backoff, canonical JSON, and the
//! Istio ServiceEntry/WorkloadEntry mapping (one copy for files and Kubernetes).
//!
//! What it does NOT do: fold events, build xDS or serve anything (engine and server
//! do), or parse CLI flags (the `deltapilot` binary maps its flags onto each
//! adapter's options).

mod common;
pub mod error;
pub mod eureka;
pub mod file;
mod generation;
pub mod kubernetes;

pub use error::{Error, Result};
