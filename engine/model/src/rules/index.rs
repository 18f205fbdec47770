//! [`RuleIndex`]: every VirtualService and DestinationRule, parsed, with the
//! indexes that answer "which rule applies to this host" and "which hosts does a
//! change affect".
//!
//! ## Precedence (several rules for one host)
//! For a host `H`, the candidate rules of a kind are those bound to `H` exactly;
//! if there are none, those bound to the most specific wildcard matching `H`
//! (`*.b.example.com` before `*.example.com` before `*`). Among the candidates of
//! one pattern, **one wins and nothing is merged**, as Istio's sidecars do: Istio
//! takes the oldest by creation time, then orders by name, then namespace. The
//! model carries no creation time (no adapter writes one), so the order is
//! `(name, namespace)`, compared as byte strings: a pure function of the set of
//! rules, so replay and checkpoint restore pick the same winner. The losers are
//! reported `DP1030` in [`RuleIndex::statuses`].
//!
//! DestinationRules follow the same rule (Istio merges several DestinationRules
//! of one host only in special cases; deltapilot does not merge), except that
//! in a sidecar view the restricted ones it sees go first (see
//! [`RuleIndex::with_visible`]).
//!
//! What it does NOT do: look at services (an unknown host is kept: its service may
//! come later) or translate anything to Envoy config.

use std::collections::BTreeSet;
use std::sync::Arc;

use imbl::{OrdMap, OrdSet};

use super::export::{Entries, EntryExport, ExportDefaults};
use super::gateway::BoundGateway;
use super::gateway::gateway_id;
use super::host::{host_matches, wildcards_of};
use super::parse::{Rule, is_rule_kind, parse_with};
use super::problem::{Problem, RuleStatus, Severity};
use super::source::Selectors;
use super::{DestinationRule, VirtualService};
use crate::model::{Config, Hostname, Labels};

/// The precedence order of rules bound to one pattern (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Claim {
    name: Arc<str>,
    namespace: Arc<str>,
    key: Arc<str>,
}

impl Claim {
    fn of(rule: &Rule) -> Self {
        Claim {
            name: rule.name.clone(),
            namespace: rule.namespace.clone(),
            key: rule.key.clone(),
        }
    }
}

/// Hosts whose rules an upsert or delete may have changed, before wildcard
/// expansion: the patterns of the old and the new version of the object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleTouch {
    /// Patterns of VirtualServices.
    pub virtual_service: Vec<Hostname>,
    /// Patterns of DestinationRules (callers also touch the hosts whose
    /// VirtualService routes to them).
    pub destination_rule: Vec<Hostname>,
    /// Gateways (`<namespace>/<name>`) whose resources may have changed: the
    /// Gateway object itself, or a VirtualService bound to it.
    pub gateways: Vec<Arc<str>>,
}

impl RuleTouch {
    fn add(&mut self, rule: &Rule) {
        if rule.is_gateway() {
            self.gateways.push(gateway_id(&rule.namespace, &rule.name));
            return;
        }
        let to = if rule.is_virtual_service() {
            &mut self.virtual_service
        } else {
            &mut self.destination_rule
        };
        to.extend(rule.hosts.iter().cloned());
        self.gateways.extend(rule.gateways.iter().cloned());
    }
}

/// A VirtualService that applies to a host, with where it comes from.
#[derive(Debug, Clone, Copy)]
pub struct BoundVirtualService<'a> {
    /// The object.
    pub rule: &'a Arc<Rule>,
    /// Its spec.
    pub spec: &'a Arc<VirtualService>,
    /// The pattern that bound it (the host itself, or a wildcard).
    pub pattern: &'a Hostname,
}

/// Every VirtualService and DestinationRule, parsed and indexed. Persistent maps
/// throughout, so that cloning a snapshot's state stays O(1). A pure function of
/// the set of objects stored (see the module doc), so two states with the same
/// objects have equal indexes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleIndex {
    rules: OrdMap<Arc<str>, Arc<Rule>>,
    /// Bound pattern → the VirtualServices bound to it, in precedence order.
    vs_hosts: OrdMap<Hostname, OrdSet<Claim>>,
    /// Bound pattern → the DestinationRules bound to it, in precedence order.
    dr_hosts: OrdMap<Hostname, OrdSet<Claim>>,
    /// Destination host → the VirtualServices (by key) whose routes name it.
    routes_to: OrdMap<Hostname, OrdSet<Arc<str>>>,
    /// Gateway id (`<namespace>/<name>`) → the key of its object.
    gateways: OrdMap<Arc<str>, Arc<str>>,
    /// Gateway id → the VirtualServices bound to it, in merge order.
    gateway_vs: OrdMap<Arc<str>, OrdSet<Claim>>,
    /// How many bound VirtualServices have a route with `fault` (the sidecar
    /// HCMs carry the fault filter while any does).
    faults: usize,
    /// How many bound VirtualServices have a route with `corsPolicy` (the
    /// sidecar HCMs carry the CORS filter while any does).
    cors: usize,
    /// Namespace → its valid Sidecars, in precedence order.
    sidecars: OrdMap<Arc<str>, OrdSet<Claim>>,
    /// Namespace → the keys of the restricted VirtualServices (see
    /// [`is_restricted`]) exported to it. Those are not in `vs_hosts`: the
    /// views of the namespaces that see them bind them ([`RuleIndex::with_visible`]).
    exported_to: OrdMap<Arc<str>, OrdSet<Arc<str>>>,
    /// Every ServiceEntry's hosts and `exportTo` (see `export`); the keys of
    /// the restricted ones are in `exported_to` too.
    entries: Entries,
    /// The `sourceLabels` selectors of the stored VirtualServices.
    sources: Selectors,
    /// Bound pattern → the restricted DestinationRules a view sees, ordered
    /// own namespace's first (`0`), then by the usual precedence; empty but
    /// in [`RuleIndex::with_visible`]'s output.
    dr_visible: OrdMap<Hostname, OrdSet<(u8, Claim)>>,
    /// The mesh's `exportTo` defaults, for objects that set none.
    defaults: Arc<ExportDefaults>,
}

/// Whether `rule` is a VirtualService or DestinationRule bound to hosts whose
/// `exportTo` is not public: sidecars see it only from the namespaces it is
/// exported to.
pub fn is_restricted(rule: &Rule) -> bool {
    (rule.is_virtual_service() || rule.is_destination_rule())
        && rule.export_to.is_some()
        && !rule.hosts.is_empty()
}

/// The suffix of the visibility-class member that says "this restricted
/// DestinationRule is the class's own namespace's" (see [`own_marker`]).
const OWN_SUFFIX: &str = "#own";

/// The class member a namespace gets, besides the key itself, for a restricted
/// DestinationRule of its own that it sees: Istio looks up a proxy's own
/// namespace's DestinationRules first, so two namespaces that see the same
/// rules but own different ones pick differently and must not share a view.
fn own_marker(rule: &Rule) -> Option<Arc<str>> {
    let own = rule.is_destination_rule()
        && (rule.export_to.iter())
            .flat_map(|l| l.iter())
            .any(|n| *n == rule.namespace);
    own.then(|| Arc::from(format!("{}{OWN_SUFFIX}", rule.key)))
}

/// Whether `rule` is a bound VirtualService with a `corsPolicy` in some route.
fn has_cors(rule: &Rule) -> bool {
    !rule.hosts.is_empty()
        && rule
            .virtual_service()
            .is_some_and(|v| v.http.iter().flatten().any(|r| r.cors_policy.is_some()))
}

/// Whether `rule` is a bound VirtualService with a `fault` in some route.
fn has_fault(rule: &Rule) -> bool {
    !rule.hosts.is_empty()
        && rule
            .virtual_service()
            .is_some_and(|v| v.http.iter().flatten().any(|r| r.fault.is_some()))
}

impl RuleIndex {
    /// Whether no rule is stored.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// An empty index whose objects without `exportTo` get `defaults`.
    pub fn with_defaults(defaults: ExportDefaults) -> RuleIndex {
        RuleIndex {
            defaults: Arc::new(defaults),
            ..RuleIndex::default()
        }
    }

    /// The `exportTo` defaults the index applies.
    pub fn export_defaults(&self) -> &ExportDefaults {
        &self.defaults
    }

    /// How many rule objects are stored (rejected ones included).
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Stores (or replaces) `cfg` if it is a rule kind; returns the patterns the
    /// old and new versions bound, or `None` for other kinds.
    pub fn upsert(&mut self, cfg: &Config) -> Option<RuleTouch> {
        if cfg.kind == crate::model::ConfigKind::ServiceEntry {
            let (new, old) = self.entries.upsert(cfg, &self.defaults.service);
            if let Some(old) = old {
                self.unexport(&old);
            }
            if let Some(new) = new {
                for ns in new.export.iter().flat_map(|l| l.iter()) {
                    self.exported_to
                        .entry(ns.clone())
                        .or_default()
                        .insert(new.key.clone());
                }
            }
            return None;
        }
        if !is_rule_kind(cfg.kind) {
            return None;
        }
        let mut touch = self.remove(&cfg.key).unwrap_or_default();
        let rule = Arc::new(parse_with(cfg, &self.defaults));
        if rule.is_sidecar() {
            if rule.sidecar().is_some() {
                self.sidecars
                    .entry(rule.namespace.clone())
                    .or_default()
                    .insert(Claim::of(&rule));
            }
            self.rules.insert(rule.key.clone(), rule);
            return Some(touch);
        }
        touch.add(&rule);
        let claim = Claim::of(&rule);
        if rule.is_gateway() {
            self.gateways
                .insert(gateway_id(&rule.namespace, &rule.name), rule.key.clone());
        }
        for g in &rule.gateways {
            self.gateway_vs
                .entry(g.clone())
                .or_default()
                .insert(claim.clone());
        }
        if is_restricted(&rule) {
            for ns in rule.export_to.iter().flat_map(|l| l.iter()) {
                self.exported_to
                    .entry(ns.clone())
                    .or_default()
                    .insert(rule.key.clone());
            }
            if let Some(m) = own_marker(&rule) {
                self.exported_to
                    .entry(rule.namespace.clone())
                    .or_default()
                    .insert(m);
            }
        } else {
            let by_host = if rule.is_virtual_service() {
                &mut self.vs_hosts
            } else {
                &mut self.dr_hosts
            };
            for h in &rule.hosts {
                by_host.entry(h.clone()).or_default().insert(claim.clone());
            }
        }
        for d in &rule.destinations {
            self.routes_to
                .entry(d.clone())
                .or_default()
                .insert(rule.key.clone());
        }
        if has_fault(&rule) {
            self.faults += 1;
        }
        self.sources.add(&rule);
        if has_cors(&rule) {
            self.cors += 1;
        }
        self.rules.insert(rule.key.clone(), rule);
        Some(touch)
    }

    /// Forgets the rule under `key`; returns the patterns it bound, or `None`
    /// when no rule is stored under it.
    pub fn remove(&mut self, key: &str) -> Option<RuleTouch> {
        if key.starts_with("cfg/service_entry/") {
            if let Some(old) = self.entries.remove(key) {
                self.unexport(&old);
            }
            return None;
        }
        let rule = self.rules.remove(key)?;
        if rule.is_sidecar() {
            drop_member(&mut self.sidecars, &rule.namespace, &Claim::of(&rule));
            return Some(RuleTouch::default());
        }
        if has_fault(&rule) {
            self.faults -= 1;
        }
        self.sources.remove(&rule);
        if has_cors(&rule) {
            self.cors -= 1;
        }
        let claim = Claim::of(&rule);
        if rule.is_gateway() {
            self.gateways
                .remove(gateway_id(&rule.namespace, &rule.name).as_ref());
        }
        for g in &rule.gateways {
            drop_member(&mut self.gateway_vs, g, &claim);
        }
        if is_restricted(&rule) {
            for ns in rule.export_to.iter().flat_map(|l| l.iter()) {
                drop_member(&mut self.exported_to, ns, &rule.key);
            }
            if let Some(m) = own_marker(&rule) {
                drop_member(&mut self.exported_to, &rule.namespace, &m);
            }
        } else {
            let by_host = if rule.is_virtual_service() {
                &mut self.vs_hosts
            } else {
                &mut self.dr_hosts
            };
            for h in &rule.hosts {
                drop_member(by_host, h, &claim);
            }
        }
        for d in &rule.destinations {
            drop_member(&mut self.routes_to, d, &rule.key);
        }
        let mut touch = RuleTouch::default();
        touch.add(&rule);
        Some(touch)
    }

    /// The rule object stored under `key`.
    pub fn rule(&self, key: &str) -> Option<&Arc<Rule>> {
        self.rules.get(key)
    }

    /// Every rule object, by key.
    pub fn rules(&self) -> impl Iterator<Item = &Arc<Rule>> + '_ {
        self.rules.values()
    }

    /// Whether any VirtualService matches on `sourceLabels`.
    pub fn has_sources(&self) -> bool {
        !self.sources.is_empty()
    }

    /// The ids (`rules::selector_id`) of the `sourceLabels` selectors in use
    /// that `labels` satisfies, sorted (a proxy's labels carry its namespace
    /// as `SOURCE_NAMESPACE_KEY`, see `source`).
    pub fn sources_matching(&self, labels: &Labels) -> Vec<Arc<str>> {
        self.sources.matching(labels)
    }

    /// Every `sourceLabels` selector in use, by id, with its labels.
    pub fn source_selectors(&self) -> impl Iterator<Item = (&Arc<str>, &Labels)> + '_ {
        self.sources.iter()
    }

    fn unexport(&mut self, old: &EntryExport) {
        for ns in old.export.iter().flat_map(|l| l.iter()) {
            drop_member(&mut self.exported_to, ns, &old.key);
        }
    }

    /// Whether some ServiceEntry is restricted by `exportTo`: then a sidecar
    /// of a namespace it is not exported to cannot have the default view.
    pub fn has_restricted_entries(&self) -> bool {
        self.entries.has_restricted()
    }

    /// The hosts hidden from a namespace of visibility class `visible` (see
    /// [`RuleIndex::visible_from`]) by restricted ServiceEntries.
    pub fn hidden_hosts(&self, visible: &[Arc<str>]) -> OrdSet<Hostname> {
        self.entries.hidden_from(visible)
    }

    /// The keys of the restricted VirtualServices, DestinationRules and
    /// ServiceEntries exported to namespace `ns` (with the marker of each
    /// restricted DestinationRule of `ns` itself it sees), sorted: its
    /// visibility class. Empty for a namespace no `exportTo` names.
    pub fn visible_from(&self, ns: &str) -> Vec<Arc<str>> {
        self.exported_to
            .get(ns)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The part of `ns`'s class its routers read: the restricted
    /// DestinationRules exported to it, with `#own` markers (Istio looks a
    /// gateway's up from its namespace; VirtualServices bind by the Gateway's).
    pub fn destination_rules_visible_from(&self, ns: &str) -> Vec<Arc<str>> {
        let is_dr = |k: &&Arc<str>| {
            let base = k.strip_suffix(OWN_SUFFIX).unwrap_or(k);
            self.rules
                .get(base)
                .is_some_and(|r| r.is_destination_rule())
        };
        (self.exported_to.get(ns).into_iter().flatten())
            .filter(is_dr)
            .cloned()
            .collect()
    }

    /// Every distinct non-empty [`RuleIndex::destination_rules_visible_from`].
    pub fn destination_rule_classes(&self) -> BTreeSet<Arc<[Arc<str>]>> {
        (self.exported_to.keys())
            .map(|ns| self.destination_rules_visible_from(ns))
            .filter(|c| !c.is_empty())
            .map(Arc::from)
            .collect()
    }

    /// Every namespace some `exportTo` names, with the keys of the restricted
    /// VirtualServices exported to it, in namespace order.
    pub fn export_namespaces(&self) -> impl Iterator<Item = (&Arc<str>, &OrdSet<Arc<str>>)> + '_ {
        self.exported_to.iter()
    }

    /// Whether any VirtualService or ServiceEntry is restricted by `exportTo`.
    pub fn has_restricted(&self) -> bool {
        !self.exported_to.is_empty() || self.entries.has_restricted()
    }

    /// This index as the sidecars of a namespace that sees the restricted
    /// VirtualServices and DestinationRules `keys` (its visibility class) read
    /// it. VirtualServices are bound to their hosts with the usual precedence
    /// among all bound ones. DestinationRules go first, ahead of the public
    /// ones (as Istio prefers a proxy's own namespace's rules and those
    /// exported to it over the mesh's), the class's own namespace's first,
    /// then by the usual order. O(keys × hosts × log n) over persistent
    /// maps; a key that is not a restricted rule is skipped.
    pub fn with_visible(&self, keys: &[Arc<str>]) -> RuleIndex {
        let mut out = self.clone();
        for k in keys {
            let Some(rule) = self.rules.get(k).filter(|r| is_restricted(r)) else {
                continue;
            };
            let claim = Claim::of(rule);
            if rule.is_destination_rule() {
                let marker = format!("{k}{OWN_SUFFIX}");
                let own = keys
                    .binary_search_by(|m| (**m).cmp(marker.as_str()))
                    .is_ok();
                let tier = if own { 0 } else { 1 };
                for h in &rule.hosts {
                    out.dr_visible
                        .entry(h.clone())
                        .or_default()
                        .insert((tier, claim.clone()));
                }
                continue;
            }
            for h in &rule.hosts {
                out.vs_hosts
                    .entry(h.clone())
                    .or_default()
                    .insert(claim.clone());
            }
        }
        out
    }

    /// Whether this index (a view's, see [`RuleIndex::with_visible`]) applies
    /// any restricted DestinationRule.
    pub fn has_visible_destination_rules(&self) -> bool {
        !self.dr_visible.is_empty()
    }

    /// The VirtualService that applies to `host` for sidecars and proxyless
    /// clients (see the module doc for precedence).
    pub fn virtual_service_for(&self, host: &Hostname) -> Option<BoundVirtualService<'_>> {
        let (pattern, claim) = winner(&self.vs_hosts, host)?;
        let rule = self.rules.get(&claim.key)?;
        let spec = rule.virtual_service()?;
        Some(BoundVirtualService {
            rule,
            spec,
            pattern,
        })
    }

    /// The DestinationRule that applies to `host`.
    pub fn destination_rule_for(&self, host: &Hostname) -> Option<Arc<DestinationRule>> {
        self.destination_rule_entry_for(host)
            .and_then(|r| r.destination_rule().cloned())
    }

    /// The DestinationRule object that applies to `host`, with its name and
    /// namespace.
    pub fn destination_rule_entry_for(&self, host: &Hostname) -> Option<&Arc<Rule>> {
        let claim = match winner(&self.dr_visible, host) {
            Some((_, (_, c))) => c,
            None => winner(&self.dr_hosts, host)?.1,
        };
        self.rules.get(&claim.key)
    }

    /// The keys of every rule bound to a pattern matching `host` (winners and
    /// shadowed ones, both kinds), sorted.
    pub fn rule_keys_for(&self, host: &Hostname) -> Vec<Arc<str>> {
        let mut keys: Vec<Arc<str>> = [&self.vs_hosts, &self.dr_hosts]
            .into_iter()
            .flat_map(|m| {
                std::iter::once(host.as_str().to_string())
                    .chain(wildcards_of(host.as_str()))
                    .filter_map(|p| m.get(p.as_str()))
                    .flat_map(|set| set.iter().map(|c| c.key.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// The patterns of the VirtualServices whose routes or mirrors name `dest`
    /// (sorted, each once): those hosts' routes change when `dest`'s service or
    /// DestinationRule does.
    pub fn hosts_routing_to(&self, dest: &Hostname) -> Vec<Hostname> {
        let Some(keys) = self.routes_to.get(dest) else {
            return Vec::new();
        };
        let mut out: Vec<Hostname> = keys
            .iter()
            .filter_map(|k| self.rules.get(k))
            .flat_map(|r| r.hosts.iter().cloned())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Whether any bound VirtualService injects faults: sidecar HTTP
    /// connection managers then carry the fault filter ahead of the router.
    pub fn uses_fault(&self) -> bool {
        self.faults > 0
    }

    /// Whether any bound VirtualService has a route with `corsPolicy`.
    pub fn uses_cors(&self) -> bool {
        self.cors > 0
    }

    /// Whether any VirtualService routes to some host (so a service change may
    /// touch other hosts' routes).
    pub fn has_routes(&self) -> bool {
        !self.routes_to.is_empty()
    }

    /// The status of every rule object, by key: its own problems, plus `DP1030`
    /// for each host it is bound to where another rule takes precedence.
    pub fn statuses(&self) -> Vec<(Arc<str>, RuleStatus)> {
        self.rules
            .values()
            .map(|rule| (rule.key.clone(), self.status_of(rule)))
            .collect()
    }

    /// The status of one rule object (see [`RuleIndex::statuses`]).
    pub fn status(&self, key: &str) -> Option<RuleStatus> {
        self.rules.get(key).map(|r| self.status_of(r))
    }

    /// The Sidecar that scopes a sidecar proxy of namespace `ns` whose labels
    /// `labels` answers, in Istio's order (see `sidecar`'s module doc): a
    /// selecting Sidecar of `ns`, else `ns`'s selector-less one, else the
    /// selector-less one of `root_ns`. O(Sidecars of the two namespaces).
    pub fn sidecar_for<'a>(
        &self,
        ns: &str,
        labels: impl Fn(&str) -> Option<&'a str>,
        root_ns: &str,
    ) -> Option<&Arc<Rule>> {
        let scope = |c: &Claim| self.rules.get(&c.key).filter(|r| r.sidecar().is_some());
        if let Some(set) = self.sidecars.get(ns) {
            let selecting = set.iter().filter_map(scope).find(|r| {
                r.sidecar()
                    .is_some_and(|s| !s.selector.is_empty() && s.selects(&labels))
            });
            if selecting.is_some() {
                return selecting;
            }
        }
        let default_of = |n: &str| {
            self.sidecars
                .get(n)?
                .iter()
                .filter_map(scope)
                .find(|r| r.sidecar().is_some_and(|s| s.selector.is_empty()))
        };
        default_of(ns).or_else(|| default_of(root_ns))
    }

    /// Every valid Sidecar, by key.
    pub fn sidecars(&self) -> impl Iterator<Item = &Arc<Rule>> + '_ {
        self.sidecars
            .values()
            .flat_map(|set| set.iter())
            .filter_map(|c| self.rules.get(&c.key))
    }

    /// Whether any valid Sidecar is stored.
    pub fn has_sidecars(&self) -> bool {
        !self.sidecars.is_empty()
    }

    fn status_of(&self, rule: &Rule) -> RuleStatus {
        if rule.is_sidecar() {
            return self.sidecar_status(rule);
        }
        let mut problems = rule.problems.clone();
        let by_host = if rule.is_virtual_service() {
            &self.vs_hosts
        } else {
            &self.dr_hosts
        };
        let me = Claim::of(rule);
        let mut shadowed = 0;
        // A restricted rule competes only in the views that see it.
        let judged: &[Hostname] = if is_restricted(rule) {
            &[]
        } else {
            &rule.hosts
        };
        for h in judged {
            let Some(first) = by_host.get(h).and_then(|s| s.get_min()) else {
                continue;
            };
            if *first != me {
                shadowed += 1;
                problems.push(Problem::warning(
                    "DP1030",
                    "",
                    format!(
                        "for host {h}, {}/{} takes precedence (ordered by name, then \
                         namespace; no merge): this rule is ignored there",
                        first.namespace, first.name
                    ),
                ));
            }
        }
        let nowhere = if rule.is_gateway() {
            rule.gateway().is_none_or(|g| g.servers.is_empty())
        } else {
            (rule.hosts.is_empty() || shadowed == rule.hosts.len()) && rule.gateways.is_empty()
        };
        if rule.rejected || (problems.iter().any(|p| p.severity == Severity::Error) && nowhere) {
            RuleStatus::Rejected(problems)
        } else if problems.is_empty() {
            RuleStatus::Applied
        } else {
            RuleStatus::AppliedWithWarnings(problems)
        }
    }

    /// The Gateway `<namespace>/<name>`, if it is stored and valid.
    pub fn gateway(&self, id: &str) -> Option<(&Arc<Rule>, &Arc<BoundGateway>)> {
        let rule = self.rules.get(self.gateways.get(id)?)?;
        Some((rule, rule.gateway()?))
    }

    /// Every valid Gateway, by id (`<namespace>/<name>`), in id order.
    pub fn gateways(&self) -> impl Iterator<Item = (&Arc<str>, &Arc<Rule>, &Arc<BoundGateway>)> {
        self.gateways.iter().filter_map(|(id, key)| {
            let rule = self.rules.get(key)?;
            Some((id, rule, rule.gateway()?))
        })
    }

    /// The ids of the Gateways that select a router proxy of `namespace` with
    /// `labels`, sorted (see `gateway` for the rule; `scope_to_namespace` is
    /// Istio's `PILOT_SCOPE_GATEWAY_TO_NAMESPACE`, `false` by default).
    /// O(gateways).
    pub fn gateways_selecting(
        &self,
        namespace: &str,
        labels: &Labels,
        scope_to_namespace: bool,
    ) -> Vec<Arc<str>> {
        self.gateways()
            .filter(|(_, rule, gw)| {
                gw.selects(&rule.namespace, namespace, labels, scope_to_namespace)
            })
            .map(|(id, _, _)| id.clone())
            .collect()
    }

    /// The VirtualServices bound to Gateway `id` (valid, not rejected), in merge
    /// order: `(name, namespace)`, as for sidecar precedence (Istio merges
    /// oldest first; the model has no creation time). The Gateway itself need
    /// not exist.
    pub fn virtual_services_for_gateway(
        &self,
        id: &str,
    ) -> Vec<(&Arc<Rule>, &Arc<VirtualService>)> {
        let Some(set) = self.gateway_vs.get(id) else {
            return Vec::new();
        };
        set.iter()
            .filter_map(|c| {
                let rule = self.rules.get(&c.key)?;
                Some((rule, rule.virtual_service()?))
            })
            .collect()
    }

    fn sidecar_status(&self, rule: &Rule) -> RuleStatus {
        let mut problems = rule.problems.clone();
        if let Some(sc) = rule.sidecar() {
            // Only selector-less Sidecars compete as a whole; selecting ones
            // may still apply to other workloads.
            let first_default = self.sidecars.get(&rule.namespace).and_then(|set| {
                set.iter().find(|c| {
                    self.rules
                        .get(&c.key)
                        .and_then(|r| r.sidecar())
                        .is_some_and(|s| s.selector.is_empty())
                })
            });
            if let Some(first) =
                first_default.filter(|f| sc.selector.is_empty() && f.key != rule.key)
            {
                problems.push(Problem::warning(
                    "DP1303",
                    "",
                    format!(
                        "{}/{} is the namespace's Sidecar without workloadSelector (ordered \
                         by name): this one selects nothing",
                        first.namespace, first.name
                    ),
                ));
            }
        }
        if rule.rejected || rule.sidecar().is_none() {
            RuleStatus::Rejected(problems)
        } else if problems.is_empty() {
            RuleStatus::Applied
        } else {
            RuleStatus::AppliedWithWarnings(problems)
        }
    }

    /// Whether `pattern` binds any rule of either kind.
    pub fn binds(&self, pattern: &Hostname) -> bool {
        self.vs_hosts.contains_key(pattern) || self.dr_hosts.contains_key(pattern)
    }

    /// Every bound wildcard pattern matching `host` (for tests and tools).
    pub fn wildcards_matching(&self, host: &Hostname) -> Vec<Hostname> {
        [&self.vs_hosts, &self.dr_hosts]
            .into_iter()
            .flat_map(|m| m.keys())
            .filter(|p| p.as_str().starts_with('*') && host_matches(p.as_str(), host.as_str()))
            .cloned()
            .collect()
    }
}

/// The first claim on the most specific pattern matching `host`.
fn winner<'a, C: Ord + Clone>(
    by_host: &'a OrdMap<Hostname, OrdSet<C>>,
    host: &Hostname,
) -> Option<(&'a Hostname, &'a C)> {
    if by_host.is_empty() {
        return None;
    }
    if let Some((k, set)) = by_host.get_key_value(host.as_str()) {
        return set.get_min().map(|c| (k, c));
    }
    wildcards_of(host.as_str()).find_map(|p| {
        let (k, set) = by_host.get_key_value(p.as_str())?;
        set.get_min().map(|c| (k, c))
    })
}

/// Removes `member` from the set under `key`, dropping the set when empty.
fn drop_member<K: Ord + Clone, V: Ord + Clone>(
    map: &mut OrdMap<K, OrdSet<V>>,
    key: &K,
    member: &V,
) {
    if let Some(set) = map.get_mut(key) {
        set.remove(member);
        if set.is_empty() {
            map.remove(key);
        }
    }
}
