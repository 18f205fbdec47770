//! Per-proxy views and diffs: which resources a proxy sees, and what it must be
//! sent to hold exactly them.
//!
//! ## Views: design
//! - [`ViewKey`] (`key`): what decides a proxy's resources, a pure and cheap
//!   function of (proxy, model): `Default(<type>)`, or `Sidecar { key }` for a
//!   sidecar selected by a `Sidecar` object, `Gateway { gateways }` for a
//!   router selected by Gateways (one [`GatewayView`] per set, see `gateway`
//!   for which sets exist); a router selected by none stays `Default(Router)`.
//! - Where views live: in the snapshot, derived by the fold. Default keys read
//!   the snapshot's own maps through [`resources_for`] (no copy; every proxy of
//!   a type shares one persistent map). Each valid Sidecar has one
//!   [`ScopedView`] in [`Views`] (`scoped`), updated incrementally with every
//!   batch and carrying its own change log, so proxies with equal keys share one
//!   set of maps, and memory grows with distinct views, not proxies. Being
//!   derived from the model and the global resources, a view at any log
//!   position is rebuilt by replay ([`Views::build`]), and the incremental
//!   update is property-tested against that rebuild.
//! - [`Snapshot::view`](crate::snapshot::Snapshot::view) and
//!   [`Snapshot::view_changes_since`](crate::snapshot::Snapshot::view_changes_since)
//!   give a stream its maps and what changed in them (O(changed) pushes). A
//!   stream whose key changes (a Sidecar appears, is deleted or stops selecting
//!   it) diffs the new view against what the proxy holds ([`diff`], the
//!   minimal delta); a reconnecting proxy is judged against its own view.
//! - [`judge`]: the one comparison, name by name, of the view with what a proxy
//!   holds. The server's delta state machine judges each name it must
//!   re-examine with it, on live pushes and on reconnects alike.
//! - [`diff`]: `judge` over the whole view, for reconnects
//!   (`initial_resource_versions`) and for streams too far behind to use a
//!   change set. O(view + known).
//! - [`diff_changed`]: the same answer restricted to the names of a [`TypeChanges`],
//!   for live pushes. O(changed): independent of the total size.
//!
//! What it does NOT do: track subscriptions, nonces or ACKs (that is the server's
//! per-stream state machine); it answers "what differs", the server decides what
//! it is allowed to send.

mod gateway;
mod key;
mod scoped;
mod scopes;

pub use gateway::{
    GatewayKey, GatewaySet, GatewaySets, GatewayView, MAX_GATEWAY_SETS, gateway_sets,
};
pub use key::{ViewKey, key_for};
pub use scoped::{Ids, MAX_SOURCE_SETS, ScopeKey, ScopedView, Views, scope_keys, source_sets};

use std::sync::Arc;

use deltapilot_model::ProxyType;

use super::{Resource, ResourceMap, ResourceSet, ResourceType, TypeChanges};

/// The resources of one type a proxy of `proxy_type` sees in `set` (a
/// snapshot's global set, or a scoped view's own).
pub fn resources_for(set: &ResourceSet, proxy_type: ProxyType, t: ResourceType) -> &ResourceMap {
    match t {
        ResourceType::Cluster => match proxy_type {
            ProxyType::ProxylessGrpc => &set.grpc_clusters,
            ProxyType::Sidecar | ProxyType::Router => &set.clusters,
        },
        ResourceType::Endpoint => &set.endpoints,
        ResourceType::Route => &set.routes,
        // Views deliver routes inline; VHDS is a stream's choice (see
        // [`delivered`]).
        ResourceType::VirtualHost | ResourceType::Secret => ResourceMap::empty(),
        ResourceType::Listener => match proxy_type {
            ProxyType::ProxylessGrpc => &set.grpc_listeners,
            ProxyType::Sidecar | ProxyType::Router => &set.sidecar_listeners,
        },
    }
}

/// How a delta Envoy is sent its HTTP route configurations (the server's
/// `--route-delivery`; see `docs/vhds.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RouteDelivery {
    /// Virtual hosts inline in each route configuration: what every proxy
    /// can take, and what SotW streams and proxyless clients always get.
    #[default]
    Inline,
    /// Route configurations that point at VHDS, and their virtual hosts as
    /// `VirtualHost` resources, so a rule edit resends one virtual host.
    Vhds,
}

/// The resources of type `t` a stream delivering routes as `delivery` is
/// sent from `view` (the map [`Snapshot::view`](crate::snapshot::Snapshot::view)
/// gives for the proxy's key, which is always inline). VHDS applies to the
/// default views of Envoys only: proxyless clients cannot take it, and
/// Sidecar-scoped and Gateway views keep their own inline configurations
/// (not split yet). Elsewhere the `VirtualHost` type is empty, so an Envoy
/// asking for it gets nothing.
pub fn delivered<'a>(
    set: &'a ResourceSet,
    key: &ViewKey,
    t: ResourceType,
    delivery: RouteDelivery,
    view: &'a ResourceMap,
) -> &'a ResourceMap {
    let vhds = delivery == RouteDelivery::Vhds
        && matches!(
            key,
            ViewKey::Default(ProxyType::Sidecar | ProxyType::Router)
        );
    match (t, vhds) {
        (ResourceType::Route, true) => &set.vhds_routes,
        (ResourceType::VirtualHost, true) => &set.virtual_hosts,
        _ => view,
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

/// What one name needs so that a proxy holding `known` holds `view`'s entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict<'v> {
    /// The view has it and the proxy does not hold that version: send it.
    Upsert(&'v Arc<Resource>),
    /// The view lacks it and the proxy holds it: remove it.
    Remove,
    /// The proxy already holds what the view has (or neither has the name).
    Nothing,
}

/// The one comparison every diff is made of, for live pushes and reconnects
/// alike: the server's per-stream state machine judges each changed (or, on a
/// reconnect, each reported and each viewed) name with it, and [`diff`] and
/// [`diff_changed`] are it applied to a whole view or a change set.
///
/// `known` is what the proxy holds, name → version: the resources sent to it,
/// or [`Resource::stand_in`]s carrying the versions it reported in
/// `initial_resource_versions`. A proxy in sync usually holds the very
/// resources of the view (often the snapshot's own map), so the same
/// resource is recognised by pointer before versions are compared.
pub fn judge<'v>(view: &'v ResourceMap, known: &ResourceMap, name: &str) -> Verdict<'v> {
    match view.get(name) {
        Some(r) => match known.get(name) {
            Some(k) if Arc::ptr_eq(k, r) || k.version == r.version => Verdict::Nothing,
            _ => Verdict::Upsert(r),
        },
        None if known.contains_key(name) => Verdict::Remove,
        None => Verdict::Nothing,
    }
}

impl Diff {
    /// Judges each of `names` (none twice: a change set's upserted and removed
    /// names are disjoint) with [`judge`], then sorts by name.
    fn of_names<'n>(
        view: &ResourceMap,
        known: &ResourceMap,
        names: impl IntoIterator<Item = &'n Arc<str>>,
    ) -> Diff {
        let mut d = Diff::default();
        for name in names {
            match judge(view, known, name) {
                Verdict::Upsert(r) => d.upserts.push(r.clone()),
                Verdict::Remove => d.removals.push(name.clone()),
                Verdict::Nothing => {}
            }
        }
        // The map iterates in hash order (see `ResourceMap`).
        d.upserts.sort_by(|a, b| a.name.cmp(&b.name));
        d.removals.sort();
        d
    }
}

/// The whole diff, for a reconnect (`initial_resource_versions`) or a stream
/// too far behind to use a change set: [`judge`] over every name of the view
/// and of `known`. Upserts come in name order. O(view + known).
pub fn diff(view: &ResourceMap, known: &ResourceMap) -> Diff {
    let gone = known.keys().filter(|n| !view.contains_key(n));
    Diff::of_names(view, known, view.keys().chain(gone))
}

/// [`diff`] restricted to the names in `changes` (both upserted and removed):
/// equal to `diff` whenever the proxy already held the view the changes were made
/// against, and O(changed) whatever the view's size. Each name is judged by the
/// view as it is now, so merged (coalesced) change sets work unchanged.
pub fn diff_changed(view: &ResourceMap, known: &ResourceMap, changes: &TypeChanges) -> Diff {
    Diff::of_names(
        view,
        known,
        changes.upserted.iter().chain(changes.removed.iter()),
    )
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

    /// What a proxy that reported `view`'s versions on reconnect holds.
    fn known_of(view: &ResourceMap) -> ResourceMap {
        view.iter()
            .map(|(n, r)| Arc::new(Resource::stand_in(n.clone(), r.version.clone())))
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
    fn judge_sends_what_differs_and_removes_what_is_gone() {
        let view: ResourceMap = [res("same", "1").1, res("moved", "2").1, res("new", "1").1]
            .into_iter()
            .collect();
        let mut known = known_of(&view);
        // The client holds an older "moved", and a "gone" the view no longer has.
        known.insert(Arc::new(Resource::stand_in(
            Arc::from("moved"),
            Arc::from("old"),
        )));
        known.insert(Arc::new(Resource::stand_in(
            Arc::from("gone"),
            Arc::from("v"),
        )));
        known.remove("new");
        let verdict = |name: &str| match judge(&view, &known, name) {
            Verdict::Upsert(r) => format!("upsert {}", r.name),
            Verdict::Remove => "remove".into(),
            Verdict::Nothing => "nothing".into(),
        };
        assert_eq!(verdict("same"), "nothing", "a stand-in at the same version");
        assert_eq!(verdict("moved"), "upsert moved");
        assert_eq!(verdict("new"), "upsert new");
        assert_eq!(verdict("gone"), "remove");
        assert_eq!(verdict("never"), "nothing");
        // The very resource (a stream sharing the snapshot's map) is held too.
        assert!(matches!(judge(&view, &view, "moved"), Verdict::Nothing));
    }

    #[test]
    fn names_outside_the_view_are_ignored_unless_held() {
        let view: ResourceMap = [res("a", "1").1].into_iter().collect();
        let mut changes = TypeChanges::default();
        changes.upserted.insert(Arc::from("grpc-only"));
        assert!(diff_changed(&view, &ResourceMap::default(), &changes).is_empty());
        let mut known = ResourceMap::default();
        known.insert(Arc::new(Resource::stand_in(
            Arc::from("grpc-only"),
            Arc::from("v"),
        )));
        assert_eq!(diff_changed(&view, &known, &changes).removals.len(), 1);
    }
}
