//! References between rules that cannot be honoured, found over the whole rule
//! set (not one rule): a VirtualService bound to a Gateway that does not exist
//! (`DP3003`), and a Sidecar that hides a host a VirtualService of its
//! namespace routes to (`DP3004`). `/debug/rules` lists them with the rule they
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

/// The problems of this kind, by the key of the rule they concern.
pub(crate) fn reference_problems(model: &ModelState) -> BTreeMap<Arc<str>, Vec<Problem>> {
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
    for sidecar in idx.sidecars() {
        let Some(scope) = sidecar.sidecar() else {
            continue;
        };
        for vs in idx
            .rules()
            .filter(|r| r.is_virtual_service() && r.namespace == sidecar.namespace)
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
                            "hides host {host}, which VirtualService {}/{} routes to: the \
                             sidecars it scopes have no cluster for it",
                            vs.namespace, vs.name
                        ),
                    ));
            }
        }
    }
    out
}
