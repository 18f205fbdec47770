//! What every adapter shares: the emitted view and its resync-bracketed plan
//! (`emit`), the append loop with backoff (`append`), the canonical JSON of Istio
//! specs (`json`), and the Istio ServiceEntry/WorkloadEntry mapping (`istio`)
//! used by the file and Kubernetes adapters.
//!
//! What it does NOT do: talk to a registry, or hold any adapter's state.

pub(crate) mod append;
pub(crate) mod emit;
pub(crate) mod istio;
pub(crate) mod json;
