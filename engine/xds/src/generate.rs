//! xDS resource generation: the folded model in, encoded Envoy resources out.
//!
//! - [`build_all`] builds every resource from scratch, with no state: the
//!   reference.
//! - [`Generator`] keeps reverse indexes so that a batch recomputes only the
//!   resources its [`Touched`] hostnames feed, and reports exactly the names whose
//!   bytes changed ([`ChangeSet`]). Incremental equals from-scratch byte for byte
//!   (property-tested).
//! - Each resource is encoded once into `Bytes`; its version is the hash of those
//!   bytes ([`Resource::new`](super::Resource::new)).
//!
//! The resources, named the way Istio names them (each module documents its rules):
//! - `cds`: one cluster per served service port, `outbound|<port>||<hostname>`;
//! - `eds`: one ClusterLoadAssignment per EDS cluster, by locality;
//! - `lds`: sidecar outbound listeners `0.0.0.0_<port>` and proxyless gRPC
//!   `api_listener`s `<hostname>:<port>`;
//! - `rds`: route configuration `<port>` per HTTP port (sidecars) and
//!   `<hostname>:<port>` per HTTP service port (proxyless gRPC);
//! - `vhds`: the same `<port>` configurations pointing at VHDS, and their
//!   virtual hosts `<port>/<hostname>:<port>`, for delta Envoys.
//!
//! Served ports: UDP ports are not proxied and produce nothing; `Passthrough`
//! services produce nothing (an ORIGINAL_DST cluster behind a directly bound
//! listener would loop back into Envoy, and proxyless gRPC cannot use one).
//!
//! A runner keeps one [`Generator`] next to the [`ResourceSet`] it produced and
//! feeds it every batch's [`Touched`]. The free [`regenerate`] needs no state but
//! rebuilds everything (O(resources)); it exists for tools that hold no generator.
//!
//! A resource that fails to build is reported as a [`GenError`] and left out of the
//! set (removed if it was there), so the set stays a pure function of the model.
//!
//! Traffic rules: a host's VirtualService shapes its routes (`vs_routes`); a
//! rule change reaches the generator as `Touched::rule_hosts`.
//!
//! Gateways: [`gateway_resources`] builds a router proxy's listeners and routes
//! from the Gateways that select it, on demand (see `gateway`).
//!
//! What it does NOT do: inbound listeners, or per-proxy filtering (see `view`).

mod cds;
mod common;
mod eds;
mod gateway;
mod incremental;
mod l4;
pub(crate) mod lds;
mod policy;
mod rds;
mod reference;
pub mod scoped;
mod source;
pub mod vhds;
mod vs_routes;
mod wire;

use std::sync::Arc;

pub use gateway::{
    GatewayResources, SECRET_PREFIX, ca_secret_name, gateway_resources, gateway_touched,
    secret_name,
};
pub use incremental::Generator;
pub use l4::problems as l4_route_problems;
pub use policy::hash_policies;
pub use reference::{AssignmentSlot, build_all, build_assignments};
pub use source::{ModelRead, WithRules};
pub use vs_routes::route_problems;

use deltapilot_model::state::{ModelState, Touched};
use deltapilot_model::{Port, Protocol, Resolution, Service};

use super::{ChangeSet, ResourceKind, ResourceSet, ResourceType};

/// Settings that shape generated resources.
#[derive(Debug, Clone)]
pub struct GenOptions {
    /// Address sidecar outbound listeners listen on.
    pub outbound_address: String,
    /// Whether sidecar outbound listeners bind their port directly (no iptables).
    pub bind_outbound: bool,
    /// Upstream connect timeout.
    pub connect_timeout: std::time::Duration,
    /// The namespace whose selector-less Sidecar is the mesh-wide default.
    pub root_namespace: String,
    /// The mesh's `exportTo` defaults (Istio's MeshConfig): the engine folds
    /// its state's rules under them (`ModelState::with_export_defaults`).
    pub export_defaults: deltapilot_model::rules::ExportDefaults,
}

impl Default for GenOptions {
    fn default() -> Self {
        Self {
            outbound_address: "0.0.0.0".into(),
            bind_outbound: false,
            connect_timeout: std::time::Duration::from_secs(5),
            root_namespace: deltapilot_model::rules::DEFAULT_ROOT_NAMESPACE.into(),
            export_defaults: Default::default(),
        }
    }
}

/// A resource that failed to build or encode; it is reported and not published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenError {
    /// The type of the resource.
    pub resource_type: ResourceType,
    /// Resource name.
    pub name: String,
    /// Why.
    pub reason: String,
}

impl GenError {
    fn new(resource_type: ResourceType, name: &str, reason: String) -> Self {
        GenError {
            resource_type,
            name: name.to_string(),
            reason,
        }
    }
}

impl std::fmt::Display for GenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.resource_type.short_name(),
            self.name,
            self.reason
        )
    }
}

/// The ports of `svc` that get resources: none for passthrough services, and never
/// UDP ports.
pub(crate) fn served_ports(svc: &Service) -> impl Iterator<Item = &Port> {
    let served = svc.resolution != Resolution::Passthrough;
    svc.ports
        .iter()
        .filter(move |p| served && p.protocol != Protocol::Udp)
}

/// Stateless regeneration: rebuilds everything (O(resources)) and compares with
/// `prev`. Correct, but a runner should keep a [`Generator`], which does
/// O(touched) work per batch; this exists for tools that hold no generator.
pub fn regenerate(
    prev: &ResourceSet,
    model: &ModelState,
    _touched: &Touched,
    opts: &GenOptions,
) -> (ResourceSet, ChangeSet, Vec<GenError>) {
    let (next, errors) = build_all(model, opts);
    let changes = changes_between(prev, &next);
    (next, changes, errors)
}

/// Every name whose bytes differ between two sets (O(resources)), per type;
/// a type's changes cover every map of it (both listener and cluster
/// flavours, inline and VHDS route configurations).
pub fn changes_between(prev: &ResourceSet, next: &ResourceSet) -> ChangeSet {
    let mut cs = ChangeSet::default();
    let pairs = ResourceKind::ALL
        .into_iter()
        .map(|k| (k.resource_type(), k.map(prev), k.map(next)));
    for (t, a, b) in pairs {
        let c = cs.of_mut(t);
        for (name, r) in b.iter() {
            if a.get(name).is_none_or(|o| o.bytes != r.bytes) {
                c.upserted.insert(Arc::clone(name));
            }
        }
        for name in a.keys() {
            if !b.contains_key(name) {
                c.removed.insert(Arc::clone(name));
            }
        }
    }
    cs
}

#[cfg(test)]
#[path = "generate/touched_tests.rs"]
mod touched_tests;
