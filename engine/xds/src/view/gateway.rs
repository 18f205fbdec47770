//! [`GatewayView`]: what the routers selected by one set of Gateways receive.
//!
//! Which sets get a view: the fold is pure and does not know which routers are
//! connected, so the keys must follow from config alone. A router with labels
//! `L` is selected by `S(L)`, the Gateways whose selectors are subsets of `L`
//! (plus the selector-less ones). Since every selector in `S(L)` lies in `L`,
//! `S(L)` equals `S(U)` for `U` the union of those selectors: every router's set
//! is the selection of a union of compatible Gateway selectors (no key with two
//! values). [`gateway_sets`] builds exactly these sets, as a closure: start
//! from each Gateway's own selector, and merge the label unions of two known
//! sets while a new set appears. So a router whose labels combine the
//! selectors of unrelated Gateways gets a view with all of them, never the
//! sidecar listeners of `default/router`.
//!
//! The closure is exponential in the worst case (n pairwise compatible,
//! unrelated selectors give 2^n - 1 sets); it stops at [`MAX_GATEWAY_SETS`]
//! and [`GatewaySets::truncated`] says so. A router whose set was then not
//! built falls back to `default/router`, and the server reports it
//! (`Views::missing_gateway_set`).
//!
//! A view holds the global clusters and assignments (the global maps
//! themselves, as Istio gives gateways every cluster) and the listeners and
//! route configurations of [`gateway_resources`] for its set. The listeners and
//! routes are rebuilt only when [`gateway_touched`] says the batch may change
//! them; the change log names exactly what changed in the view.
//!
//! Restricted DestinationRules: Istio looks a router's DestinationRules up from
//! the router's own namespace, so a view is keyed by its set and by the
//! restricted DestinationRules that namespace sees
//! (`RuleIndex::destination_rules_visible_from`, empty for most). Each set gets
//! a view per distinct such class (`RuleIndex::destination_rule_classes`),
//! built over the rules with those bound (`RuleIndex::with_visible`): its
//! routes, and, for each host whose DestinationRule there is not the global
//! one, its own clusters and assignments in place of the global ones (a
//! global resource whose bytes are equal is shared). Routers of namespaces
//! that see the same restricted rules share one view.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use imbl::Vector;

use super::scopes::Ids;
use crate::generate::scoped as build;
use crate::generate::{GenOptions, ModelRead, WithRules, gateway_resources, gateway_touched};
use crate::snapshot::RECENT_CHANGES;
use crate::{ChangeSet, Resource, ResourceMap, ResourceSet, ResourceType};
use deltapilot_model::rules::{host_matches, is_wildcard};
use deltapilot_model::state::{ModelState, Touched};
use deltapilot_model::{Hostname, Labels};

/// The sorted ids (`<namespace>/<name>`) of a set of Gateways.
pub type GatewaySet = Arc<[Arc<str>]>;

/// How many gateway views the fold builds at most. Real meshes have a few
/// Gateway families, so a handful of sets; the bound keeps a pathological
/// config (many compatible, unrelated selectors) from costing 2^n views.
pub const MAX_GATEWAY_SETS: usize = 256;

/// The sets of Gateways that get a view, with the label union that selects each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatewaySets {
    /// Each set (sorted ids), sorted, with the union of its members' selectors.
    pub sets: BTreeMap<GatewaySet, Labels>,
    /// Whether [`MAX_GATEWAY_SETS`] cut the closure short (some routers may
    /// then have no view).
    pub truncated: bool,
}

/// A Gateway's selector as a label set.
fn selector_labels(gw: &deltapilot_model::rules::BoundGateway) -> Labels {
    gw.spec
        .selector
        .iter()
        .flatten()
        .map(|(k, v)| (Arc::from(k.as_str()), Arc::from(v.as_str())))
        .collect()
}

/// `a ∪ b`, or `None` when a key has two values (no router carries both).
fn union(a: &Labels, b: &Labels) -> Option<Labels> {
    let mut out = a.clone();
    for (k, v) in b {
        match out.get(k) {
            Some(w) if w != v => return None,
            Some(_) => {}
            None => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Some(out)
}

/// Every set of Gateways that gets a view (see the module doc). O(sets² ×
/// Gateways) per round, at most [`MAX_GATEWAY_SETS`] sets.
pub fn gateway_sets(model: &ModelState) -> GatewaySets {
    let rules = model.rules();
    let select = |labels: &Labels| -> Option<GatewaySet> {
        let set = rules.gateways_selecting("", labels, false);
        (!set.is_empty()).then(|| GatewaySet::from(set))
    };
    let mut out = GatewaySets::default();
    // Each set's label union: the union of its members' selectors.
    let union_of = |set: &GatewaySet| -> Labels {
        let mut u = Labels::new();
        for (id, _, gw) in rules.gateways() {
            if set.contains(id) {
                u.extend(selector_labels(gw));
            }
        }
        u
    };
    let mut frontier: Vec<GatewaySet> = Vec::new();
    for (_, _, gw) in rules.gateways() {
        if let Some(set) = select(&selector_labels(gw))
            && !out.sets.contains_key(&set)
        {
            let u = union_of(&set);
            out.sets.insert(set.clone(), u);
            frontier.push(set);
        }
    }
    // Merge each new set with every known one until nothing new appears.
    while let Some(set) = frontier.pop() {
        let u = out.sets[&set].clone();
        let known: Vec<Labels> = out.sets.values().cloned().collect();
        for other in known {
            let Some(joined) = union(&u, &other) else {
                continue;
            };
            let Some(next) = select(&joined) else {
                continue;
            };
            if out.sets.contains_key(&next) {
                continue;
            }
            if out.sets.len() >= MAX_GATEWAY_SETS {
                out.truncated = true;
                return out;
            }
            let nu = union_of(&next);
            out.sets.insert(next.clone(), nu);
            frontier.push(next);
        }
    }
    out
}

/// What a gateway view is keyed by: its Gateways and the restricted
/// DestinationRules its routers' namespace sees (see the module doc).
pub type GatewayKey = (GatewaySet, Ids);

/// A cluster or assignment name that a view holds its own version of
/// (`Some`) or drops (`None`) instead of the global one.
type Overrides = BTreeMap<(ResourceType, Arc<str>), Option<bytes::Bytes>>;

/// The resources of the routers selected by exactly one set of Gateways, in
/// namespaces that see the same restricted DestinationRules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayView {
    /// The Gateways, sorted ids.
    pub gateways: GatewaySet,
    /// The restricted DestinationRules (keys, with `#own` markers) the view
    /// applies; empty: only public ones.
    pub visible: Ids,
    /// The global clusters (shared map), with the view's own in place.
    pub clusters: ResourceMap,
    /// The global assignments (shared map), with the view's own in place.
    pub endpoints: ResourceMap,
    /// The gateway listeners `0.0.0.0_<port>`.
    pub listeners: ResourceMap,
    /// The gateway route configurations.
    pub routes: ResourceMap,
    /// The cluster and assignment names where the view differs from the
    /// global set by construction (built itself, or dropped).
    own: Arc<[(ResourceType, Arc<str>)]>,
    recent: Vector<(u64, Arc<ChangeSet>)>,
    /// Changes at or before this seq are not in `recent`.
    horizon: u64,
}

impl GatewayView {
    /// The view of `gateways` over `model` and its global resources, from
    /// scratch: the reference the incremental update equals.
    pub fn build(
        model: &ModelState,
        global: &ResourceSet,
        (gateways, visible): &GatewayKey,
        opts: &GenOptions,
    ) -> Self {
        let mut v = GatewayView {
            gateways: gateways.clone(),
            visible: visible.clone(),
            clusters: global.clusters.clone(),
            endpoints: global.endpoints.clone(),
            listeners: ResourceMap::new(),
            routes: ResourceMap::new(),
            own: Arc::from(Vec::new()),
            recent: Vector::new(),
            horizon: 0,
        };
        let gr = match v.with_rules(model) {
            Some(vm) => {
                v.apply_own(global, own_resources(&vm, visible, opts), None);
                gateway_resources(&vm, gateways, opts)
            }
            None => gateway_resources(model, gateways, opts),
        };
        v.listeners = gr.listeners;
        v.routes = gr.routes;
        v
    }

    /// The model as the view's routers read it, when it applies restricted
    /// DestinationRules.
    fn with_rules<'a>(&self, model: &'a ModelState) -> Option<WithRules<'a>> {
        (!self.visible.is_empty()).then(|| WithRules {
            model,
            rules: model.rules().with_visible(&self.visible),
            sources: Arc::from(Vec::new()),
        })
    }

    /// Puts `over` in place of the global resources (the maps must hold the
    /// global ones), sharing the global resource, or `prev`'s, whose bytes
    /// are equal.
    fn apply_own(&mut self, global: &ResourceSet, over: Overrides, prev: Option<&GatewayView>) {
        for ((t, name), bytes) in &over {
            let (map, from, old) = match t {
                ResourceType::Cluster => (
                    &mut self.clusters,
                    &global.clusters,
                    prev.map(|p| &p.clusters),
                ),
                _ => (
                    &mut self.endpoints,
                    &global.endpoints,
                    prev.map(|p| &p.endpoints),
                ),
            };
            let Some(b) = bytes else {
                map.remove(name);
                continue;
            };
            let same = |r: &&Arc<Resource>| r.bytes == *b;
            let r = (from.get(name).filter(same).cloned())
                .or_else(|| old.and_then(|m| m.get(name)).filter(same).cloned())
                .unwrap_or_else(|| Arc::new(Resource::new(name.clone(), b.clone())));
            map.insert(r);
        }
        self.own = over.into_keys().collect();
    }

    /// The view's map of type `t` (secrets come from the credentials store).
    pub fn map(&self, t: ResourceType) -> &ResourceMap {
        match t {
            ResourceType::Cluster => &self.clusters,
            ResourceType::Endpoint => &self.endpoints,
            ResourceType::Listener => &self.listeners,
            ResourceType::Route => &self.routes,
            // Gateway routes stay inline (see `view::delivered`).
            ResourceType::VirtualHost | ResourceType::Secret => ResourceMap::empty(),
        }
    }

    /// The view after one batch, and what changed in it (possibly nothing,
    /// when only the global maps were replaced by equal ones); `None` when the
    /// old view can be kept as is.
    pub(crate) fn update(
        &self,
        model: &ModelState,
        global: &ResourceSet,
        changes: &ChangeSet,
        touched: &Touched,
        opts: &GenOptions,
    ) -> Option<(GatewayView, ChangeSet)> {
        let mut log = ChangeSet::default();
        let mut next = self.clone();
        next.clusters = global.clusters.clone();
        next.endpoints = global.endpoints.clone();
        let vm = self.with_rules(model);
        match &vm {
            None => {
                for t in [ResourceType::Cluster, ResourceType::Endpoint] {
                    *log.of_mut(t) = changes.of(t).clone();
                }
            }
            Some(vm) => {
                let quiet = changes.is_empty()
                    && !gateway_touched(touched)
                    && touched.endpoints.is_empty()
                    && touched.endpoint_keys.is_empty();
                if quiet {
                    return None;
                }
                next.apply_own(global, own_resources(vm, &self.visible, opts), Some(self));
                // What may differ: the global changes and the names either
                // version holds its own of.
                for t in [ResourceType::Cluster, ResourceType::Endpoint] {
                    let c = changes.of(t);
                    let names: BTreeSet<&Arc<str>> = (c.upserted.iter())
                        .chain(c.removed.iter())
                        .chain(
                            self.own
                                .iter()
                                .chain(next.own.iter())
                                .filter(|(u, _)| *u == t)
                                .map(|(_, n)| n),
                        )
                        .collect();
                    let (old, new) = (self.map(t), next.map(t));
                    for n in names {
                        match (old.get(n), new.get(n)) {
                            (Some(a), Some(b)) if Arc::ptr_eq(a, b) || a.bytes == b.bytes => {}
                            (_, Some(_)) => {
                                log.of_mut(t).upserted.insert(n.clone());
                            }
                            (Some(_), None) => {
                                log.of_mut(t).removed.insert(n.clone());
                            }
                            (None, None) => {}
                        }
                    }
                }
            }
        }
        if gateway_touched(touched) {
            let gr = match &vm {
                Some(vm) => gateway_resources(vm, &self.gateways, opts),
                None => gateway_resources(model, &self.gateways, opts),
            };
            next.listeners = merge(
                &self.listeners,
                gr.listeners,
                ResourceType::Listener,
                &mut log,
            );
            next.routes = merge(&self.routes, gr.routes, ResourceType::Route, &mut log);
        }
        let same_maps =
            next.clusters.ptr_eq(&self.clusters) && next.endpoints.ptr_eq(&self.endpoints);
        (!log.is_empty() || !same_maps).then_some((next, log))
    }

    /// Everything that changed in this view after snapshot `since`, merged, or
    /// `None` when that is not known (the caller then does a full diff).
    pub fn changes_since(&self, since: u64, now: u64) -> Option<ChangeSet> {
        if since >= now {
            return Some(ChangeSet::default());
        }
        if since < self.horizon {
            return None;
        }
        let mut merged = ChangeSet::default();
        for (seq, cs) in self.recent.iter() {
            if *seq > since {
                merged.merge(cs);
            }
        }
        Some(merged)
    }

    pub(crate) fn set_horizon(&mut self, seq: u64) {
        self.horizon = seq;
    }

    pub(crate) fn record(&mut self, seq: u64, cs: ChangeSet) {
        self.recent.push_back((seq, Arc::new(cs)));
        while self.recent.len() > RECENT_CHANGES {
            if let Some((s, _)) = self.recent.pop_front() {
                self.horizon = self.horizon.max(s);
            }
        }
    }
}

/// The clusters and assignments a view applying the restricted
/// DestinationRules `visible` holds instead of the global ones: for each host
/// of those rules (wildcards against the services) whose DestinationRule under
/// `vm`'s rules is not the global winner, the resources built over them, and
/// every other global name of the host dropped. O(rules' hosts) rebuilds.
fn own_resources(vm: &WithRules<'_>, visible: &Ids, opts: &GenOptions) -> Overrides {
    let global = vm.model.rules();
    let mut hosts: BTreeSet<Hostname> = BTreeSet::new();
    for k in visible.iter() {
        let Some(rule) = global.rule(k).filter(|r| r.is_destination_rule()) else {
            continue;
        };
        for p in &rule.hosts {
            if is_wildcard(p.as_str()) {
                vm.model.for_each_service(&mut |s| {
                    if host_matches(p.as_str(), s.hostname.as_str()) {
                        hosts.insert(s.hostname.clone());
                    }
                });
            } else {
                hosts.insert(p.clone());
            }
        }
    }
    let key = |r: Option<&Arc<deltapilot_model::rules::Rule>>| r.map(|r| r.key.clone());
    let mut out = Overrides::new();
    for h in hosts {
        if key(vm.rules.destination_rule_entry_for(&h))
            == key(global.destination_rule_entry_for(&h))
        {
            continue;
        }
        let Some(svc) = vm.model.get_service(&h) else {
            continue;
        };
        for n in build::host_resource_names(vm.model, &svc) {
            out.insert((ResourceType::Cluster, n.clone()), None);
            out.insert((ResourceType::Endpoint, n), None);
        }
        for (t, n, b) in build::host_resources(vm, &svc, opts) {
            out.insert((t, n), Some(b));
        }
    }
    out
}

/// `next`, keeping `prev`'s resource wherever the bytes are equal (so streams
/// see an unchanged pointer), and logging every name that differs.
fn merge(
    prev: &ResourceMap,
    next: ResourceMap,
    t: ResourceType,
    log: &mut ChangeSet,
) -> ResourceMap {
    let mut out = prev.clone();
    for (name, r) in next.iter() {
        if prev.get(name).is_some_and(|p| p.bytes == r.bytes) {
            continue;
        }
        out.insert(r.clone());
        log.of_mut(t).upserted.insert(name.clone());
    }
    for (name, _) in prev.iter() {
        if next.get(name).is_none() {
            out.remove(name);
            log.of_mut(t).removed.insert(name.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltapilot_model::state::mk::rule;
    use deltapilot_proto::ConfigKind;

    /// `n` Gateways with unrelated selectors (`gw-i: "on"`): every union of
    /// them selects a router that carries those labels, `2^n - 1` sets.
    fn unrelated(n: usize) -> ModelState {
        let events: Vec<_> = (0..n)
            .map(|i| {
                let spec = format!(
                    r#"{{"selector":{{"gw-{i}":"on"}},"servers":[{{"port":{{"number":8080,"protocol":"HTTP"}},"hosts":["*"]}}]}}"#
                );
                rule("k", 0, ConfigKind::Gateway, "edge", &format!("g{i}"), &spec)
            })
            .collect();
        ModelState::from_events(&events)
    }

    #[test]
    fn unrelated_selectors_close_over_every_union_until_the_cap() {
        let small = gateway_sets(&unrelated(4));
        assert_eq!(small.sets.len(), 15, "2^4 - 1 unions");
        assert!(!small.truncated);

        let big = gateway_sets(&unrelated(9));
        assert_eq!(
            big.sets.len(),
            MAX_GATEWAY_SETS,
            "2^9 - 1 = 511 unions, cut at the cap"
        );
        assert!(big.truncated, "the cut is reported, not silent");
    }
}
