//! [`Views`]: the Sidecar-scoped views of a snapshot, derived from the model and
//! the global resources, and updated incrementally by the fold.
//!
//! A [`ScopedView`] is keyed by a scope: an optional Sidecar and a visibility
//! class (the sorted keys of the restricted VirtualServices a namespace sees,
//! see `RuleIndex::visible_from`). Its routes and listeners are generated over
//! the model's rules with those VirtualServices bound too
//! (`RuleIndex::with_visible`); without a Sidecar it admits every host. Which
//! scopes exist is a function of the rules ([`scope_keys`]): each Sidecar with
//! its namespace's class (the root namespace's selector-less one with every
//! class, since it is any namespace's default), and each non-empty class
//! without a Sidecar. A namespace no `exportTo` names sees only public rules,
//! so a mesh without restricted VirtualServices has exactly the Sidecar views
//! it had. Restricted ServiceEntries are in the classes too: a view leaves out
//! the hosts they hide from it (`RuleIndex::hidden_hosts`), so once one
//! exists, sidecars of namespaces it is not exported to share the view of
//! the empty class (`default/sidecar+sees/none`) instead of the default.
//!
//! A [`ScopedView`] holds the clusters and assignments of the
//! hosts it admits (the global `Arc<Resource>`s themselves: nothing re-encoded,
//! except for a host whose DestinationRule in the view is a restricted one
//! other than the global winner: the view builds that host's clusters and
//! assignments over its rules, sharing those whose bytes are equal),
//! and the listeners and route configurations generated over those hosts only
//! (shared with the global resource whenever the bytes are equal; the
//! proxyless gRPC route configurations `<host>:<port>` are not in a sidecar's
//! view), plus its own
//! change log, so that streams of the view do O(changed) work per push exactly
//! as streams of the default views do with the snapshot's.
//!
//! Incremental step ([`Views::update`]), per Sidecar:
//! - new or changed Sidecar: build from scratch ([`ScopedView::build`]); a
//!   changed one logs the difference to its previous maps, so its proxies get
//!   the minimal delta through the ordinary path;
//! - otherwise: the hosts whose services the batch touched are re-indexed
//!   (visible or not, on which ports), the global names that changed are
//!   re-judged (shared or dropped), and the ports whose visible hosts, global
//!   listener or global route configuration changed are rebuilt;
//! - nothing touched: the view is shared with the previous snapshot as is.
//!
//! The property test `engine/core/tests/xds_views.rs` checks that the
//! incremental view equals the one built from scratch, byte for byte.
//!
//! What it does NOT do: choose a proxy's view (`key`) or judge what a proxy
//! holds (`view`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use imbl::{OrdMap, OrdSet, Vector};

use crate::generate::scoped::{self as build, PASSTHROUGH_CLUSTER};
use crate::generate::{GenOptions, ModelRead, WithRules, changes_between};
use crate::snapshot::RECENT_CHANGES;
use crate::{ChangeSet, Resource, ResourceMap, ResourceSet, ResourceType};
use deltapilot_model::rules::{OutboundMode, Rule, SidecarScope, is_restricted};
use deltapilot_model::state::{ModelState, Touched};
use deltapilot_model::{Hostname, Proxy, ProxyType, Service};

use super::gateway::{GatewayKey, GatewayView, gateway_sets};

mod own;
use super::key::{ViewKey, key_for};
pub use super::scopes::{Ids, MAX_SOURCE_SETS, ScopeKey, scope_keys, source_sets};

/// The visible hosts on one port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct PortHosts {
    http: BTreeSet<Hostname>,
    tcp: BTreeSet<Hostname>,
}

/// The cluster and assignment names a view built for one host itself.
type OwnNames = Arc<[(ResourceType, Arc<str>)]>;

/// The resources of one scope's proxies (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopedView {
    /// The Sidecar object, if one scopes the view.
    pub rule: Option<Arc<Rule>>,
    /// The keys of the restricted VirtualServices the view binds.
    pub visible: Arc<[Arc<str>]>,
    /// The `sourceLabels` selectors its proxies satisfy.
    pub sources: Arc<[Arc<str>]>,
    /// Those VirtualServices as the view was built with them (a change to any
    /// rebuilds the view).
    seen: Vec<Arc<Rule>>,
    /// The hosts restricted ServiceEntries hide from the view
    /// (`RuleIndex::hidden_hosts`; a change rebuilds the view).
    hidden: OrdSet<Hostname>,
    /// The view's maps (`grpc_listeners` stays empty: only sidecars are scoped).
    pub resources: ResourceSet,
    ports: OrdMap<u16, PortHosts>,
    /// Visible host → its served ports (and whether each is HTTP).
    hosts: OrdMap<Hostname, Arc<[(u16, bool)]>>,
    /// Visible host whose DestinationRule in the view is a restricted one
    /// other than the global winner → the cluster and assignment names the
    /// view built for it itself (the rest are the global resources).
    own: OrdMap<Hostname, OwnNames>,
    recent: Vector<(u64, Arc<ChangeSet>)>,
    /// Changes at or before this seq are not in `recent`.
    horizon: u64,
}

fn scope(rule: &Rule) -> &SidecarScope {
    static NONE: std::sync::OnceLock<SidecarScope> = std::sync::OnceLock::new();
    rule.sidecar()
        .map(|s| &**s)
        .unwrap_or_else(|| NONE.get_or_init(SidecarScope::default))
}

/// Whether a view scoped by `rule` (none: every host) admits `host` of `ns`.
fn admits(rule: Option<&Arc<Rule>>, host: &str, ns: &str) -> bool {
    rule.is_none_or(|r| scope(r).admits(host, ns))
}

/// The restricted VirtualServices under `keys` as `model` holds them now.
fn seen_rules(model: &ModelState, keys: &[Arc<str>]) -> Vec<Arc<Rule>> {
    let rules = model.rules();
    keys.iter()
        .filter_map(|k| rules.rule(k).filter(|r| is_restricted(r)).cloned())
        .collect()
}

/// The host of a cluster or assignment name `outbound|<port>|<subset>|<host>`.
fn host_of(name: &str) -> Option<&str> {
    let mut it = name.splitn(4, '|');
    (it.next()? == "outbound").then_some(())?;
    it.next()?;
    it.next()?;
    it.next()
}

/// The port a listener (`0.0.0.0_<port>`) or route configuration (`<port>`)
/// name is for.
fn port_of(t: ResourceType, name: &str) -> Option<u16> {
    match t {
        ResourceType::Listener => name.strip_prefix("0.0.0.0_")?.parse().ok(),
        ResourceType::Route => name.parse().ok(),
        _ => None,
    }
}

impl ScopedView {
    /// The view of `rule` (a valid Sidecar) over `model` and its global
    /// resources, from scratch: the reference the incremental update equals.
    pub fn build(
        model: &ModelState,
        global: &ResourceSet,
        rule: Option<&Arc<Rule>>,
        (visible, sources): (&Ids, &Ids),
        opts: &GenOptions,
    ) -> Self {
        let mut v = ScopedView {
            rule: rule.cloned(),
            visible: visible.clone(),
            sources: sources.clone(),
            seen: seen_rules(model, visible),
            hidden: model.rules().hidden_hosts(visible),
            resources: ResourceSet::default(),
            ports: OrdMap::new(),
            hosts: OrdMap::new(),
            own: OrdMap::new(),
            recent: Vector::new(),
            horizon: 0,
        };
        for svc in model.services() {
            if admits(rule, svc.hostname.as_str(), &svc.namespace)
                && !v.hidden.contains(&svc.hostname)
            {
                v.index(svc);
            }
        }
        let vm = v.view_model(model);
        let mut scratch = ChangeSet::default();
        // Without a Sidecar or hidden hosts every host is visible: the view
        // starts from the global maps themselves (structural sharing: only
        // the tree paths later batches change are copied).
        let every_host = v.rule.is_none() && v.hidden.is_empty();
        for (t, from) in [
            (ResourceType::Cluster, &global.clusters),
            (ResourceType::Endpoint, &global.endpoints),
        ] {
            let hosts = v.hosts.clone();
            let visible = |name: &str| host_of(name).is_some_and(|h| hosts.contains_key(h));
            if every_host {
                let stray: Vec<Arc<str>> = from.keys().filter(|n| !visible(n)).cloned().collect();
                if let Some(map) = v.map_mut(t) {
                    *map = from.clone();
                    for n in stray {
                        map.remove(&n);
                    }
                }
                continue;
            }
            for (name, r) in from.iter() {
                if visible(name)
                    && let Some(map) = v.map_mut(t)
                {
                    map.insert(r.clone());
                }
            }
        }
        if vm.rules.has_visible_destination_rules() {
            let hosts: Vec<Hostname> = v.hosts.keys().cloned().collect();
            for h in &hosts {
                v.refresh_host(&vm, global, (h, &[]), opts, &mut scratch);
            }
        }
        v.passthrough(opts, &mut scratch);
        let ports: Vec<u16> = v.ports.keys().copied().collect();
        for p in ports {
            v.rebuild_port(&vm, global, p, opts, &mut scratch);
        }
        v
    }

    /// `model` as this view's routes are generated from: its rules with the
    /// visible restricted VirtualServices bound too.
    fn view_model<'m>(&self, model: &'m ModelState) -> WithRules<'m> {
        WithRules {
            model,
            rules: model.rules().with_visible(&self.visible),
            sources: self.sources.clone(),
        }
    }

    /// The outbound mode of the view's Sidecar, if it sets one.
    fn outbound(&self) -> Option<OutboundMode> {
        self.rule.as_ref().and_then(|r| scope(r).outbound)
    }

    /// The view's map of type `t`; `None` for secrets, which no view holds
    /// (they are served from the credentials store, never from snapshots),
    /// and for virtual hosts, which it keeps inline.
    fn map_mut(&mut self, t: ResourceType) -> Option<&mut ResourceMap> {
        match t {
            ResourceType::Cluster => Some(&mut self.resources.clusters),
            ResourceType::Endpoint => Some(&mut self.resources.endpoints),
            ResourceType::Listener => Some(&mut self.resources.sidecar_listeners),
            ResourceType::Route => Some(&mut self.resources.routes),
            // Scoped views keep their routes inline (see `view::delivered`).
            ResourceType::VirtualHost | ResourceType::Secret => None,
        }
    }

    /// Adds a visible service to the port index.
    fn index(&mut self, svc: &Service) {
        let ports: Vec<(u16, bool)> = crate::generate::served_ports(svc)
            .map(|p| (p.number, p.protocol.is_http()))
            .collect();
        for (p, http) in &ports {
            let e = self.ports.entry(*p).or_default();
            if *http {
                e.http.insert(svc.hostname.clone());
            } else {
                e.tcp.insert(svc.hostname.clone());
            }
        }
        self.hosts.insert(svc.hostname.clone(), ports.into());
    }

    /// Drops a host from the port index; returns the ports it was on.
    fn unindex(&mut self, host: &Hostname) -> Vec<u16> {
        let Some(ports) = self.hosts.remove(host) else {
            return Vec::new();
        };
        for (p, _) in ports.iter() {
            if let Some(e) = self.ports.get_mut(p) {
                e.http.remove(host);
                e.tcp.remove(host);
                if e.http.is_empty() && e.tcp.is_empty() {
                    self.ports.remove(p);
                }
            }
        }
        ports.iter().map(|(p, _)| *p).collect()
    }

    /// Sets `name` in the map of `t` to `bytes` (or removes it), sharing
    /// `global`'s resource when the bytes are equal; logs a real change.
    fn put(
        &mut self,
        t: ResourceType,
        name: Arc<str>,
        bytes: Option<bytes::Bytes>,
        global: Option<&Arc<Resource>>,
        log: &mut ChangeSet,
    ) {
        let Some(map) = self.map_mut(t) else {
            return;
        };
        match bytes {
            Some(b) => {
                if let Some(cur) = map.get(&name).filter(|r| r.bytes == b) {
                    // Unchanged; share the global resource if it became equal.
                    if let Some(g) = global.filter(|g| g.bytes == b && !Arc::ptr_eq(g, cur)) {
                        map.insert(g.clone());
                    }
                    return;
                }
                let r = match global {
                    Some(g) if g.bytes == b => g.clone(),
                    _ => Arc::new(Resource::new(name.clone(), b)),
                };
                map.insert(r);
                log.of_mut(t).upserted.insert(name);
            }
            None => {
                if map.remove(&name).is_some() {
                    log.of_mut(t).removed.insert(name);
                }
            }
        }
    }

    fn passthrough(&mut self, opts: &GenOptions, log: &mut ChangeSet) {
        let bytes = (self.outbound() == Some(OutboundMode::AllowAny))
            .then(|| build::passthrough_cluster(opts));
        self.put(
            ResourceType::Cluster,
            Arc::from(PASSTHROUGH_CLUSTER),
            bytes,
            None,
            log,
        );
    }

    /// Rebuilds the listener and route configuration of `port`.
    fn rebuild_port<M: ModelRead + ?Sized>(
        &mut self,
        model: &M,
        global: &ResourceSet,
        port: u16,
        opts: &GenOptions,
        log: &mut ChangeSet,
    ) {
        let empty = PortHosts::default();
        let hosts = self.ports.get(&port).cloned().unwrap_or(empty);
        let filters = crate::generate::lds::HttpFilters::of(model);
        let lname: Arc<str> = Arc::from(format!("0.0.0.0_{port}"));
        let listener = match build::listener(model, port, &hosts.http, &hosts.tcp, opts, filters) {
            Some(Ok(b)) => Some(b),
            _ => None,
        };
        let g = global.sidecar_listeners.get(&lname).cloned();
        self.put(ResourceType::Listener, lname, listener, g.as_ref(), log);
        let rname: Arc<str> = Arc::from(port.to_string());
        let mode = self.outbound();
        let route = build::route_config(model, port, &hosts.http, mode, opts);
        let g = global.routes.get(&rname).cloned();
        self.put(ResourceType::Route, rname, route, g.as_ref(), log);
    }

    /// Folds one batch into the view; returns what changed in it.
    fn update(
        &mut self,
        model: &ModelState,
        global: &ResourceSet,
        changes: &ChangeSet,
        touched: &Touched,
        opts: &GenOptions,
    ) -> ChangeSet {
        let mut log = ChangeSet::default();
        let mut ports: BTreeSet<u16> = BTreeSet::new();
        let mut names: BTreeMap<ResourceType, BTreeSet<Arc<str>>> = BTreeMap::new();
        let rule = self.rule.clone();
        for h in &touched.services {
            ports.extend(self.unindex(h));
            if let Some(svc) = model.get_service(h) {
                if admits(rule.as_ref(), h.as_str(), &svc.namespace) && !self.hidden.contains(h) {
                    self.index(&svc);
                    ports.extend(
                        self.hosts
                            .get(h)
                            .into_iter()
                            .flat_map(|p| p.iter().map(|(p, _)| *p)),
                    );
                }
                for n in build::host_resource_names(model, &svc) {
                    names
                        .entry(ResourceType::Cluster)
                        .or_default()
                        .insert(n.clone());
                    names.entry(ResourceType::Endpoint).or_default().insert(n);
                }
            }
        }
        for t in ResourceType::ALL {
            let tc = changes.of(t);
            for n in tc.upserted.iter().chain(tc.removed.iter()) {
                match t {
                    ResourceType::Cluster | ResourceType::Endpoint => {
                        names.entry(t).or_default().insert(n.clone());
                    }
                    _ => ports.extend(port_of(t, n)),
                }
            }
        }
        if !self.visible.is_empty() || !self.sources.is_empty() {
            // A host whose rules changed may have a restricted VirtualService,
            // or blocks for these proxies' labels, that the global routes do
            // not show.
            for h in &touched.rule_hosts {
                ports.extend(
                    self.hosts
                        .get(h)
                        .into_iter()
                        .flat_map(|p| p.iter().map(|(p, _)| *p)),
                );
            }
        }
        // Hosts the view may build clusters for itself (see `refresh_host`):
        // those it does, whose resources changed, and any whose service or
        // rules changed while it sees restricted DestinationRules.
        // Their changed names are judged there, not shared first.
        let mut refresh: BTreeMap<Hostname, Vec<(ResourceType, Arc<str>)>> = BTreeMap::new();
        if self.seen.iter().any(|r| r.is_destination_rule()) {
            for h in touched.services.iter().chain(touched.rule_hosts.iter()) {
                refresh.entry(h.clone()).or_default();
            }
        }
        for (t, ns) in &names {
            for n in ns {
                if &**n == PASSTHROUGH_CLUSTER {
                    continue;
                }
                let Some(h) = host_of(n) else {
                    self.rejudge(global, *t, n, &mut log);
                    continue;
                };
                if let Some(extra) = refresh.get_mut(h) {
                    extra.push((*t, n.clone()));
                } else if self.own.contains_key(h) {
                    refresh.insert(Hostname::new(h), vec![(*t, n.clone())]);
                } else {
                    self.rejudge(global, *t, n, &mut log);
                }
            }
        }
        if !ports.is_empty() || !refresh.is_empty() {
            let vm = self.view_model(model);
            for (h, extra) in &refresh {
                self.refresh_host(&vm, global, (h, extra), opts, &mut log);
            }
            for p in ports {
                self.rebuild_port(&vm, global, p, opts, &mut log);
            }
        }
        log
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

    fn record(&mut self, seq: u64, cs: ChangeSet) {
        self.recent.push_back((seq, Arc::new(cs)));
        while self.recent.len() > RECENT_CHANGES {
            if let Some((s, _)) = self.recent.pop_front() {
                self.horizon = self.horizon.max(s);
            }
        }
    }
}

/// Every gateway view key of `model`: each set of Gateways (see `gateway`)
/// with no restricted DestinationRule and with each class of them some
/// namespace sees; and whether `MAX_GATEWAY_SETS` cut the sets short.
fn gateway_keys(model: &ModelState) -> (BTreeSet<GatewayKey>, bool) {
    let sets = gateway_sets(model);
    let none: Ids = Arc::from(Vec::new());
    let classes = model.rules().destination_rule_classes();
    let mut out = BTreeSet::new();
    for set in sets.sets.into_keys() {
        out.insert((set.clone(), none.clone()));
        for c in &classes {
            out.insert((set.clone(), c.clone()));
        }
    }
    (out, sets.truncated)
}

/// Every Sidecar-scoped view of a snapshot, by the Sidecar's config key, every
/// gateway view, by its set of Gateways (see `gateway`), and the root namespace
/// that key computation uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Views {
    root_namespace: Arc<str>,
    scoped: OrdMap<ScopeKey, Arc<ScopedView>>,
    gateways: OrdMap<GatewayKey, Arc<GatewayView>>,
    /// Whether `MAX_GATEWAY_SETS` cut the gateway sets short.
    gateway_sets_truncated: bool,
}

impl Views {
    /// Every view of `model`, from scratch (restores, replay, the reference).
    pub fn build(model: &ModelState, global: &ResourceSet, opts: &GenOptions) -> Self {
        let scoped = scope_keys(model, &opts.root_namespace)
            .into_iter()
            .map(|(k, r)| {
                let v = ScopedView::build(model, global, r.as_ref(), (&k.1, &k.2), opts);
                (k, Arc::new(v))
            })
            .collect();
        let (keys, truncated) = gateway_keys(model);
        let gateways = keys
            .into_iter()
            .map(|g| {
                let v = GatewayView::build(model, global, &g, opts);
                (g, Arc::new(v))
            })
            .collect();
        Views {
            root_namespace: Arc::from(opts.root_namespace.as_str()),
            scoped,
            gateways,
            gateway_sets_truncated: truncated,
        }
    }

    /// The views after one batch (see the module doc). `seq` is the sequence
    /// the batch is published at if anything changes; the `bool` says whether
    /// any view changed (or appeared, or went), in which case the caller must
    /// publish at `seq` even if the global resources did not change.
    pub fn update(
        &self,
        model: &ModelState,
        global: &ResourceSet,
        changes: &ChangeSet,
        touched: &Touched,
        opts: &GenOptions,
        seq: u64,
    ) -> (Views, bool) {
        let rules = model.rules();
        let (gateways, truncated, gw_any) =
            self.update_gateways(model, global, changes, touched, opts, seq);
        if !rules.has_sidecars()
            && !rules.has_restricted()
            && !rules.has_sources()
            && self.scoped.is_empty()
        {
            let mut next = self.clone();
            next.gateways = gateways;
            next.gateway_sets_truncated = truncated;
            return (next, gw_any);
        }
        let quiet =
            changes.is_empty() && touched.services.is_empty() && touched.rule_hosts.is_empty();
        let mut any = false;
        let mut scoped = OrdMap::new();
        let root = if self.root_namespace.is_empty() {
            opts.root_namespace.as_str()
        } else {
            &self.root_namespace
        };
        let keys = if touched.configs || self.scoped.is_empty() {
            scope_keys(model, root)
        } else {
            self.scoped
                .iter()
                .map(|(k, v)| (k.clone(), v.rule.clone()))
                .collect()
        };
        for (key, rule) in keys {
            let rule = rule.as_ref();
            let same = |old: &ScopedView| {
                let same_rule = match (&old.rule, rule) {
                    (None, None) => true,
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
                    _ => false,
                };
                same_rule
                    && (!touched.configs
                        || (old.seen == seen_rules(model, &key.1)
                            && old.hidden == rules.hidden_hosts(&key.1)))
            };
            let view = match self.scoped.get(&key) {
                Some(old) if same(old) && quiet => old.clone(),
                Some(old) if same(old) => {
                    let mut v = (**old).clone();
                    let log = v.update(model, global, changes, touched, opts);
                    if !log.is_empty() {
                        v.record(seq, log);
                        any = true;
                        Arc::new(v)
                    } else if v.hosts == old.hosts
                        && v.ports == old.ports
                        && v.own == old.own
                        // An equal resource may have become the global one.
                        && v.resources.clusters.ptr_eq(&old.resources.clusters)
                        && v.resources.endpoints.ptr_eq(&old.resources.endpoints)
                    {
                        old.clone()
                    } else {
                        // Only the index moved (a hidden host changed), or an equal
                        // resource became the global one: keep it.
                        Arc::new(v)
                    }
                }
                Some(old) => {
                    let mut v = ScopedView::build(model, global, rule, (&key.1, &key.2), opts);
                    let log = changes_between(&old.resources, &v.resources);
                    v.recent = old.recent.clone();
                    v.horizon = old.horizon;
                    v.record(seq, log);
                    any = true;
                    Arc::new(v)
                }
                None => {
                    let mut v = ScopedView::build(model, global, rule, (&key.1, &key.2), opts);
                    v.horizon = seq;
                    any = true;
                    Arc::new(v)
                }
            };
            scoped.insert(key, view);
        }
        any |= self.scoped.keys().any(|k| !scoped.contains_key(k)) || gw_any;
        let root_namespace = if self.root_namespace.is_empty() {
            Arc::from(opts.root_namespace.as_str())
        } else {
            self.root_namespace.clone()
        };
        (
            Views {
                root_namespace,
                scoped,
                gateways,
                gateway_sets_truncated: truncated,
            },
            any,
        )
    }

    /// The gateway views after one batch, whether `MAX_GATEWAY_SETS` cut the
    /// sets short, and whether any view changed, appeared or went. The sets
    /// are recomputed only when a config changed.
    fn update_gateways(
        &self,
        model: &ModelState,
        global: &ResourceSet,
        changes: &ChangeSet,
        touched: &Touched,
        opts: &GenOptions,
        seq: u64,
    ) -> (OrdMap<GatewayKey, Arc<GatewayView>>, bool, bool) {
        let (sets, truncated): (BTreeSet<GatewayKey>, bool) = if touched.configs {
            gateway_keys(model)
        } else {
            (
                self.gateways.keys().cloned().collect(),
                self.gateway_sets_truncated,
            )
        };
        let mut any = self.gateways.keys().any(|k| !sets.contains(k));
        let mut out = OrdMap::new();
        for set in sets {
            let view = match self.gateways.get(&set) {
                Some(old) => match old.update(model, global, changes, touched, opts) {
                    Some((mut v, log)) => {
                        if !log.is_empty() {
                            v.record(seq, log);
                            any = true;
                        }
                        Arc::new(v)
                    }
                    None => old.clone(),
                },
                None => {
                    let mut v = GatewayView::build(model, global, &set, opts);
                    v.set_horizon(seq);
                    any = true;
                    Arc::new(v)
                }
            };
            out.insert(set, view);
        }
        (out, truncated, any)
    }

    /// The key of `proxy`'s view in `model` (the model these views were derived
    /// from).
    pub fn key_for(&self, proxy: &Proxy, model: &ModelState) -> ViewKey {
        let root = if self.root_namespace.is_empty() {
            deltapilot_model::rules::DEFAULT_ROOT_NAMESPACE
        } else {
            &self.root_namespace
        };
        match key_for(proxy, model, root) {
            ViewKey::Sidecar {
                sidecar,
                visible,
                sources,
            } if !self.scoped.contains_key(&(
                sidecar.clone(),
                visible.clone(),
                sources.clone(),
            )) =>
            {
                // `MAX_SOURCE_SETS` cut its set of selectors: the view
                // without them, if there is one.
                let none: Arc<[Arc<str>]> = Arc::from(Vec::new());
                if self
                    .scoped
                    .contains_key(&(sidecar.clone(), visible.clone(), none.clone()))
                {
                    ViewKey::Sidecar {
                        sidecar,
                        visible,
                        sources: none,
                    }
                } else {
                    ViewKey::Default(ProxyType::Sidecar)
                }
            }
            ViewKey::Gateway { gateways, visible }
                if !self
                    .gateways
                    .contains_key(&(gateways.clone(), visible.clone())) =>
            {
                ViewKey::Default(ProxyType::Router)
            }
            k => k,
        }
    }

    /// The scoped view of a Sidecar's config key (if any), a visibility
    /// class and a set of satisfied `sourceLabels` selectors.
    pub fn get(
        &self,
        sidecar: &Option<Arc<str>>,
        visible: &Arc<[Arc<str>]>,
        sources: &Arc<[Arc<str>]>,
    ) -> Option<&Arc<ScopedView>> {
        self.scoped
            .get(&(sidecar.clone(), visible.clone(), sources.clone()))
    }

    /// The gateway view of a set of Gateways (sorted ids) for routers that see
    /// the restricted DestinationRules `visible`.
    pub fn gateway(&self, gateways: &Ids, visible: &Ids) -> Option<&Arc<GatewayView>> {
        self.gateways.get(&(gateways.clone(), visible.clone()))
    }

    /// Every gateway view, by its set of Gateways and restricted
    /// DestinationRules.
    pub fn gateways(&self) -> impl Iterator<Item = (&GatewayKey, &Arc<GatewayView>)> + '_ {
        self.gateways.iter()
    }

    /// Whether `proxy` is a router selected by Gateways whose set has no view
    /// (it then gets `Default(Router)`): only when `MAX_GATEWAY_SETS` cut the
    /// sets short (see `gateway`'s module doc).
    pub fn missing_gateway_set(&self, proxy: &Proxy, model: &ModelState) -> bool {
        matches!(
            key_for(proxy, model, ""),
            ViewKey::Gateway { gateways, visible }
                if !self.gateways.contains_key(&(gateways.clone(), visible.clone()))
        )
    }

    /// Whether `MAX_GATEWAY_SETS` cut the gateway sets short.
    pub fn gateway_sets_truncated(&self) -> bool {
        self.gateway_sets_truncated
    }

    /// How many scoped views exist.
    pub fn len(&self) -> usize {
        self.scoped.len()
    }

    /// Whether there is no scoped view.
    pub fn is_empty(&self) -> bool {
        self.scoped.is_empty()
    }

    /// Every scoped view, by scope.
    pub fn iter(&self) -> impl Iterator<Item = (&ScopeKey, &Arc<ScopedView>)> + '_ {
        self.scoped.iter()
    }
}
