//! Per-proxy views and diffs: which resources a proxy sees, and what it must be
//! sent to hold exactly them.
//!
//! - [`ViewKey`]: everything that decides a proxy's view. Today only the proxy type
//!   (sidecars and routers see sidecar listeners, proxyless gRPC clients see
//!   `api_listener`s; all other types are shared). Namespace and `Sidecar`-resource
//!   scoping will become fields of the key (e.g. the proxy's namespace and the
//!   key of the Sidecar config selecting it), and [`View::new`] will filter by them;
//!   the server already groups proxies by key, so nothing else changes.
//! - [`View`] and [`ViewCache`]: proxies whose keys are equal share one computed
//!   view per snapshot.
//! - [`diff`]: the one full diff, for reconnects (`initial_resource_versions`) and
//!   for streams too far behind to use a change set. O(view + known).
//! - [`diff_changed`]: the same answer restricted to the names of a [`TypeChanges`],
//!   for live pushes. O(changed · log view): independent of the total size.
//!
//! What it does NOT do: track subscriptions, nonces or ACKs (that is the server's
//! per-stream state machine); it answers "what differs", the server decides what
//! it is allowed to send.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::model::{Proxy, ProxyType};
use crate::snapshot::Snapshot;

use super::{Resource, ResourceMap, ResourceSet, ResourceType, TypeChanges};

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

/// The inputs of a proxy's view: two proxies with equal keys see exactly the same
/// resources, so they share one [`View`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ViewKey {
    /// Which listener flavour the proxy gets.
    pub proxy_type: ProxyType,
}

impl ViewKey {
    /// The key of a connected proxy.
    pub fn of(proxy: &Proxy) -> Self {
        ViewKey {
            proxy_type: proxy.proxy_type,
        }
    }
}

/// The resources one [`ViewKey`] sees in one resource set, per type. Building it
/// costs O(1) today (persistent maps are shared, not copied).
#[derive(Debug, Clone)]
pub struct View {
    key: ViewKey,
    maps: [ResourceMap; 4],
}

impl View {
    /// The view of `set` for `key`.
    pub fn new(set: &ResourceSet, key: ViewKey) -> Self {
        let maps = ResourceType::ALL.map(|t| resources_for(set, key.proxy_type, t).clone());
        View { key, maps }
    }

    /// Whose view this is.
    pub fn key(&self) -> &ViewKey {
        &self.key
    }

    /// The resources of one type in this view.
    pub fn resources(&self, t: ResourceType) -> &ResourceMap {
        &self.maps[t.index()]
    }
}

/// The views of the current snapshot, one per [`ViewKey`], computed on first use
/// and shared by every proxy with that key. A newer snapshot replaces an entry on
/// first use. The lock is held only to look up or insert an `Arc`, never across an
/// await or a diff.
#[derive(Debug, Default)]
pub struct ViewCache {
    views: Mutex<HashMap<ViewKey, (u64, Arc<View>)>>,
}

impl ViewCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The view of `snapshot` for `key`, shared with every caller asking for the
    /// same snapshot and key.
    pub fn get(&self, snapshot: &Snapshot, key: &ViewKey) -> Arc<View> {
        let mut views = self
            .views
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match views.get(key) {
            Some((seq, v)) if *seq == snapshot.seq => v.clone(),
            _ => {
                let v = Arc::new(View::new(&snapshot.resources, key.clone()));
                views.insert(key.clone(), (snapshot.seq, v.clone()));
                v
            }
        }
    }
}

/// What a proxy must be sent to hold exactly `view`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    /// Resources to send (new, or a different version than the proxy has), by name.
    pub upserts: Vec<Arc<Resource>>,
    /// Names the proxy holds that no longer exist, sorted.
    pub removals: Vec<Arc<str>>,
}

impl Diff {
    /// Whether there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.upserts.is_empty() && self.removals.is_empty()
    }
}

/// The one diff function, for live pushes and reconnects alike: compares the view
/// with what the proxy holds (`known`: name → version). Upserts come in name order.
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
    // The map iterates in hash order (see `ResourceMap`).
    d.upserts.sort_by(|a, b| a.name.cmp(&b.name));
    d.removals.sort();
    d
}

/// [`diff`] restricted to the names in `changes` (both upserted and removed):
/// equal to `diff` whenever the proxy already held the view the changes were made
/// against, and O(changed) whatever the view's size. Each name is judged by the
/// view as it is now, so merged (coalesced) change sets work unchanged.
pub fn diff_changed(
    view: &ResourceMap,
    known: &HashMap<Arc<str>, Arc<str>>,
    changes: &TypeChanges,
) -> Diff {
    let mut d = Diff::default();
    for name in changes.upserted.iter().chain(changes.removed.iter()) {
        match view.get(name) {
            Some(r) if known.get(name) != Some(&r.version) => d.upserts.push(r.clone()),
            Some(_) => {}
            None if known.contains_key(name) => d.removals.push(name.clone()),
            None => {}
        }
    }
    d.upserts.sort_by(|a, b| a.name.cmp(&b.name));
    d.removals.sort();
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn res(name: &str, body: &str) -> (Arc<str>, Arc<Resource>) {
        let n: Arc<str> = Arc::from(name);
        (
            n.clone(),
            Arc::new(Resource::new(n, Bytes::from(body.to_string()))),
        )
    }

    fn known_of(view: &ResourceMap) -> HashMap<Arc<str>, Arc<str>> {
        view.iter()
            .map(|(n, r)| (n.clone(), r.version.clone()))
            .collect()
    }

    #[test]
    fn diff_changed_equals_full_diff_for_an_in_sync_proxy() {
        let before: ResourceMap = [res("a", "1"), res("b", "1"), res("c", "1")]
            .into_iter()
            .map(|(_, r)| r)
            .collect();
        let known = known_of(&before);
        let mut after = before.clone();
        after.insert(res("b", "2").1);
        after.remove("c");
        after.insert(res("d", "1").1);
        let mut changes = TypeChanges::default();
        changes.upserted.extend([Arc::from("b"), Arc::from("d")]);
        changes.removed.insert(Arc::from("c"));

        let full = diff(&after, &known);
        let quick = diff_changed(&after, &known, &changes);
        assert_eq!(full, quick);
        let names: Vec<&str> = quick.upserts.iter().map(|r| &*r.name).collect();
        assert_eq!(names, ["b", "d"]);
        assert_eq!(quick.removals, [Arc::<str>::from("c")]);
    }

    #[test]
    fn names_outside_the_view_are_ignored_unless_held() {
        let view: ResourceMap = [res("a", "1").1].into_iter().collect();
        let mut changes = TypeChanges::default();
        changes.upserted.insert(Arc::from("grpc-only"));
        assert!(diff_changed(&view, &HashMap::new(), &changes).is_empty());
        let mut known = HashMap::new();
        known.insert(Arc::from("grpc-only"), Arc::from("v"));
        assert_eq!(diff_changed(&view, &known, &changes).removals.len(), 1);
    }

    #[test]
    fn views_are_shared_per_key_and_snapshot() {
        let cache = ViewCache::new();
        let mut snap = Snapshot::default();
        let key = ViewKey {
            proxy_type: ProxyType::Sidecar,
        };
        let a = cache.get(&snap, &key);
        let b = cache.get(&snap, &key);
        assert!(Arc::ptr_eq(&a, &b));
        snap.seq = 1;
        let c = cache.get(&snap, &key);
        assert!(!Arc::ptr_eq(&a, &c), "a newer snapshot gets a new view");
        let grpc = cache.get(
            &snap,
            &ViewKey {
                proxy_type: ProxyType::ProxylessGrpc,
            },
        );
        assert_eq!(grpc.key().proxy_type, ProxyType::ProxylessGrpc);
    }
}
