//! References between rules that cannot be honoured, found over the whole rule
//! set (not one rule): a VirtualService bound to a Gateway that does not exist
//! (`DP3003`), and a Sidecar that hides a host a VirtualService of its
//! namespace routes to (`DP3004`). A Sidecar is judged for each namespace it
//! scopes, as the views pick it: its own namespace's default, each selecting
//! Sidecar that some workload gets, and the root namespace's default for every
//! namespace without a default of its own (so a Sidecar shadowed by another
//! never reports). `/debug/rules` lists them with the rule they
//! concern, so `deltapilot analyze` reports them for files and servers alike.
//!
//! What it does NOT do: decide what the proxies receive (the rules apply as
//! written; these are warnings for the operator).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use deltapilot_model::Hostname;
use deltapilot_model::rules::{Problem, Rule, gateway_id, resolve_host};
use deltapilot_model::state::ModelState;
use deltapilot_proto::ConfigKind;

/// The destination hosts a VirtualService routes to (HTTP and TLS routes),
/// resolved in its namespace, sorted, each once.
fn destination_hosts(rule: &Rule) -> BTreeSet<Hostname> {
    let Some(vs) = rule.virtual_service() else {
        return BTreeSet::new();
    };
    let http = vs
        .http
        .iter()
        .flatten()
        .flat_map(|r| r.route.iter().flatten());
    let tls = vs
        .tls
        .iter()
        .flatten()
        .flat_map(|r| r.route.iter().flatten());
    http.chain(tls)
        .filter_map(|d| d.destination.as_ref()?.host.as_deref())
        .map(|h| resolve_host(h, &rule.namespace))
        .collect()
}

/// Each Sidecar that scopes some sidecar of a namespace holding
/// VirtualServices, picked as the views pick them (`RuleIndex::sidecar_for`):
/// the one a workload without labels gets (the namespace's default, else the
/// root namespace's), and each selecting Sidecar that a workload carrying
/// exactly its selector gets (one shadowed by an earlier selector never
/// applies). With the namespace, and whom it scopes there, for the message.
fn applying_sidecars(
    model: &ModelState,
    root_namespace: &str,
) -> Vec<(Arc<Rule>, Arc<str>, String)> {
    let idx = model.rules();
    let namespaces: BTreeSet<Arc<str>> = idx
        .rules()
        .filter(|r| r.is_virtual_service())
        .map(|r| r.namespace.clone())
        .collect();
    let mut selecting: BTreeMap<Arc<str>, Vec<&Arc<Rule>>> = BTreeMap::new();
    for sc in idx.sidecars() {
        if sc.sidecar().is_some_and(|s| !s.selector.is_empty()) {
            selecting.entry(sc.namespace.clone()).or_default().push(sc);
        }
    }
    let mut out = Vec::new();
    for ns in namespaces {
        if let Some(sc) = idx.sidecar_for(&ns, |_| None, root_namespace) {
            let whom = if sc.namespace == ns {
                format!("the sidecars of namespace {ns} that no selecting Sidecar scopes")
            } else {
                format!(
                    "the sidecars of namespace {ns} that no Sidecar of their own scopes (this is \
                     the mesh default of root namespace {root_namespace})"
                )
            };
            out.push((sc.clone(), ns.clone(), whom));
        }
        for sc in selecting.get(&ns).into_iter().flatten() {
            let Some(selector) = sc.sidecar().map(|s| &s.selector) else {
                continue;
            };
            let labels = |k: &str| selector.get(k).map(String::as_str);
            let applies = idx
                .sidecar_for(&ns, labels, root_namespace)
                .is_some_and(|r| r.key == sc.key);
            if applies {
                let wanted: Vec<String> =
                    selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
                let whom = format!(
                    "the sidecars of namespace {ns} it selects ({})",
                    wanted.join(",")
                );
                out.push(((*sc).clone(), ns.clone(), whom));
            }
        }
    }
    out
}

/// The problems of this kind, by the key of the rule they concern.
pub(crate) fn reference_problems(
    model: &ModelState,
    root_namespace: &str,
) -> BTreeMap<Arc<str>, Vec<Problem>> {
    let idx = model.rules();
    let mut out: BTreeMap<Arc<str>, Vec<Problem>> = BTreeMap::new();
    let gateways: BTreeSet<Arc<str>> = idx
        .rules()
        .filter(|r| r.kind() == ConfigKind::Gateway)
        .map(|r| gateway_id(&r.namespace, &r.name))
        .collect();
    for rule in idx.rules().filter(|r| r.is_virtual_service()) {
        for g in rule.gateways.iter().filter(|g| !gateways.contains(*g)) {
            out.entry(rule.key.clone()).or_default().push(Problem::warning(
                "DP3003",
                "gateways",
                format!(
                    "gateway {g} does not exist: the routes bound to it reach no router until a \
                     Gateway {g} appears"
                ),
            ));
        }
    }
    for (sidecar, ns, whom) in applying_sidecars(model, root_namespace) {
        let Some(scope) = sidecar.sidecar() else {
            continue;
        };
        // Only rules that bind sidecars (not gateways alone) need the cluster.
        for vs in idx
            .rules()
            .filter(|r| r.is_virtual_service() && *r.namespace == *ns && !r.hosts.is_empty())
        {
            for host in destination_hosts(vs) {
                let Some(svc) = model.get_service(&host) else {
                    continue;
                };
                if scope.admits(host.as_str(), &svc.namespace) {
                    continue;
                }
                out.entry(sidecar.key.clone())
                    .or_default()
                    .push(Problem::warning(
                        "DP3004",
                        "egress",
                        format!(
                            "hides host {host}, which VirtualService {}/{} routes to: {whom} \
                             have no cluster for it",
                            vs.namespace, vs.name
                        ),
                    ));
            }
        }
    }
    out
}
