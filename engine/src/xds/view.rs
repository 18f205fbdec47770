//! Per-proxy views and diffs (stub: being built). The signatures here are the
//! contract the xDS server codes against.

use std::collections::HashMap;
use std::sync::Arc;

use crate::model::ProxyType;

use super::{Resource, ResourceMap, ResourceSet, ResourceType};

/// The resources of one type a proxy of `proxy_type` should see.
pub fn resources_for(set: &ResourceSet, proxy_type: ProxyType, t: ResourceType) -> &ResourceMap {
    match t {
        ResourceType::Cluster => &set.clusters,
        ResourceType::Endpoint => &set.endpoints,
        ResourceType::Route => &set.routes,
        ResourceType::Listener => match proxy_type {
            ProxyType::ProxylessGrpc => &set.grpc_listeners,
            ProxyType::Sidecar | ProxyType::Router => &set.sidecar_listeners,
        },
    }
}

/// What a proxy must be sent to hold exactly `view`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    /// Resources to send (new, or a different version than the proxy has), by name.
    pub upserts: Vec<Arc<Resource>>,
    /// Names the proxy holds that no longer exist.
    pub removals: Vec<Arc<str>>,
}

/// The one diff function, for live pushes and reconnects alike: compares the view
/// with what the proxy holds (`known`: name → version).
pub fn diff(view: &ResourceMap, known: &HashMap<Arc<str>, Arc<str>>) -> Diff {
    let mut d = Diff::default();
    for (name, r) in view.iter() {
        if known.get(name) != Some(&r.version) {
            d.upserts.push(r.clone());
        }
    }
    for name in known.keys() {
        if !view.contains_key(name) {
            d.removals.push(name.clone());
        }
    }
    d.removals.sort();
    d
}
