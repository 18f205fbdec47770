//! xDS resource generation (stub: being built). The signatures here are the
//! contract the runner codes against.

use crate::state::{ModelState, Touched};

use super::{ChangeSet, ResourceSet};

/// Settings that shape generated resources.
#[derive(Debug, Clone)]
pub struct GenOptions {
    /// Address sidecar outbound listeners listen on.
    pub outbound_address: String,
    /// Whether sidecar outbound listeners bind their port directly (no iptables).
    pub bind_outbound: bool,
    /// Upstream connect timeout.
    pub connect_timeout: std::time::Duration,
}

impl Default for GenOptions {
    fn default() -> Self {
        Self {
            outbound_address: "0.0.0.0".into(),
            bind_outbound: false,
            connect_timeout: std::time::Duration::from_secs(5),
        }
    }
}

/// A resource that failed to build or encode; it is reported and not published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenError {
    /// Resource name.
    pub name: String,
    /// Why.
    pub reason: String,
}

/// Regenerates only what `touched` affects, starting from `prev`.
pub fn regenerate(
    prev: &ResourceSet,
    _model: &ModelState,
    _touched: &Touched,
    _opts: &GenOptions,
) -> (ResourceSet, ChangeSet, Vec<GenError>) {
    (prev.clone(), ChangeSet::default(), Vec::new())
}

/// Builds every resource from scratch (the reference the incremental path must equal).
pub fn build_all(_model: &ModelState, _opts: &GenOptions) -> (ResourceSet, Vec<GenError>) {
    (ResourceSet::default(), Vec::new())
}
