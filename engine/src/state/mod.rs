//! The folded registry state (stub: being built by the fold work). The types and
//! signatures here are the contract the xDS generator and the runner code against.

use std::collections::BTreeSet;

use crate::model::Hostname;

/// The merged registry state a snapshot holds.
#[derive(Debug, Clone, Default)]
pub struct ModelState {}

/// What a fold step touched, so only dependent xDS resources are regenerated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Touched {
    /// Hostnames whose merged service definition was created, changed or removed.
    pub services: BTreeSet<Hostname>,
    /// Hostnames whose set of endpoints (or any endpoint's content) changed.
    pub endpoints: BTreeSet<Hostname>,
    /// Whether any config object changed (traffic rules may affect any resource).
    pub configs: bool,
}
