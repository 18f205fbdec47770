//! Snapshot builders for the state-machine unit tests.

use std::sync::Arc;

use bytes::Bytes;
use deltapilot_xds::snapshot::Snapshot;
use deltapilot_xds::{ChangeSet, Resource, ResourceMap, ResourceType};
use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;

use super::delta::DeltaPush;

/// A delta request of type `t` subscribing `sub`, unsubscribing `unsub`,
/// answering `nonce`.
pub(crate) fn delta_req(
    t: ResourceType,
    sub: &[&str],
    unsub: &[&str],
    nonce: &str,
) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        type_url: t.type_url().into(),
        resource_names_subscribe: sub.iter().map(|s| s.to_string()).collect(),
        resource_names_unsubscribe: unsub.iter().map(|s| s.to_string()).collect(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

/// The names a delta response upserts.
pub(crate) fn names(p: &DeltaPush) -> Vec<String> {
    p.out.resources.iter().map(|r| r.name.to_string()).collect()
}

/// The names a delta response removes.
pub(crate) fn removed(p: &DeltaPush) -> Vec<String> {
    p.out.removed.iter().map(|r| r.to_string()).collect()
}

pub(crate) fn map_mut(s: &mut Snapshot, t: ResourceType) -> &mut ResourceMap {
    match t {
        ResourceType::Cluster => &mut s.resources.clusters,
        ResourceType::Endpoint => &mut s.resources.endpoints,
        ResourceType::Listener => &mut s.resources.sidecar_listeners,
        ResourceType::Route => &mut s.resources.routes,
        ResourceType::VirtualHost => &mut s.resources.virtual_hosts,
        ResourceType::Secret => unreachable!("secrets are not in snapshots"),
    }
}

/// The next snapshot after `prev`: `edits` are `(type, name, Some(content) | None)`.
pub(crate) fn next(prev: &Snapshot, edits: &[(ResourceType, &str, Option<&str>)]) -> Snapshot {
    let mut s = prev.clone();
    s.seq += 1;
    let mut cs = ChangeSet::default();
    for (t, name, body) in edits {
        let n: Arc<str> = Arc::from(*name);
        match body {
            Some(b) => {
                let r = Resource::new(n.clone(), Bytes::from(b.to_string()));
                map_mut(&mut s, *t).insert(Arc::new(r));
                cs.of_mut(*t).upserted.insert(n);
            }
            None => {
                map_mut(&mut s, *t).remove(&n);
                cs.of_mut(*t).removed.insert(n);
            }
        }
    }
    s.recent.push_back((s.seq, Arc::new(cs)));
    while s.recent.len() > deltapilot_xds::snapshot::RECENT_CHANGES {
        s.recent.pop_front();
    }
    s
}

pub(crate) fn version(s: &Snapshot, t: ResourceType, name: &str) -> String {
    let mut s = s.clone();
    map_mut(&mut s, t)
        .get(name)
        .map(|r| r.version.to_string())
        .unwrap_or_default()
}
