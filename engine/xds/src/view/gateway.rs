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

use std::collections::BTreeMap;
use std::sync::Arc;

use imbl::Vector;

use crate::generate::{GenOptions, gateway_resources, gateway_touched};
use crate::snapshot::RECENT_CHANGES;
use crate::{ChangeSet, ResourceMap, ResourceSet, ResourceType};
use deltapilot_model::Labels;
use deltapilot_model::state::{ModelState, Touched};

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

/// The resources of the routers selected by exactly one set of Gateways.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayView {
    /// The Gateways, sorted ids.
    pub gateways: GatewaySet,
    /// The global clusters (shared map).
    pub clusters: ResourceMap,
    /// The global assignments (shared map).
    pub endpoints: ResourceMap,
    /// The gateway listeners `0.0.0.0_<port>`.
    pub listeners: ResourceMap,
    /// The gateway route configurations.
    pub routes: ResourceMap,
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
        gateways: &GatewaySet,
        opts: &GenOptions,
    ) -> Self {
        let gr = gateway_resources(model, gateways, opts);
        GatewayView {
            gateways: gateways.clone(),
            clusters: global.clusters.clone(),
            endpoints: global.endpoints.clone(),
            listeners: gr.listeners,
            routes: gr.routes,
            recent: Vector::new(),
            horizon: 0,
        }
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
        for t in [ResourceType::Cluster, ResourceType::Endpoint] {
            *log.of_mut(t) = changes.of(t).clone();
        }
        let mut next = self.clone();
        next.clusters = global.clusters.clone();
        next.endpoints = global.endpoints.clone();
        if gateway_touched(touched) {
            let gr = gateway_resources(model, &self.gateways, opts);
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
