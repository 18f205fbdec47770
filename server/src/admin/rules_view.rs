//! `/debug/rules`: every VirtualService and DestinationRule with its status
//! (applied, applied with warnings, rejected) and every problem, with its stable
//! code and path: the model's own (schema, hosts, binding) and those found
//! translating the rule's routes for each host and HTTP port it wins.
//!
//! What it does NOT do: change anything, or know file and line (the adapters
//! carry the object's name and namespace, which name the file's object).

use std::collections::BTreeSet;

use deltapilot_model::rules::{Problem, RuleStatus, Severity, host_matches, is_wildcard};
use deltapilot_model::state::ModelState;
use deltapilot_model::{Hostname, Protocol};
use deltapilot_xds::generate::route_problems;
use serde_json::{Value, json};

/// The hosts (with a service) where `key` is the winning VirtualService.
fn won_hosts(model: &ModelState, key: &str, patterns: &[Hostname]) -> Vec<Hostname> {
    let mut out = BTreeSet::new();
    for p in patterns {
        let hosts: Vec<Hostname> = if is_wildcard(p.as_str()) {
            model
                .services()
                .map(|s| s.hostname.clone())
                .filter(|h| host_matches(p.as_str(), h.as_str()))
                .collect()
        } else {
            vec![p.clone()]
        };
        for h in hosts {
            let wins = model
                .rules()
                .virtual_service_for(&h)
                .is_some_and(|b| &*b.rule.key == key);
            if wins && model.get_service(&h).is_some() {
                out.insert(h);
            }
        }
    }
    out.into_iter().collect()
}

fn problem_json(p: &Problem, host: Option<(&Hostname, u16, bool)>) -> Value {
    let mut v = json!({
        "code": p.code,
        "severity": p.severity.as_str(),
        "path": p.path,
        "message": p.message,
    });
    if let Some((h, port, grpc)) = host {
        v["host"] = json!(h.as_str());
        v["port"] = json!(port);
        v["client"] = json!(if grpc { "proxyless-grpc" } else { "sidecar" });
    }
    v
}

/// The status report of every rule, by key, and the count of problems by code.
pub fn rules_report(model: &ModelState) -> Value {
    let idx = model.rules();
    let mut rules = Vec::new();
    let mut by_code: std::collections::BTreeMap<&'static str, u64> = Default::default();
    for rule in idx.rules() {
        let status = idx.status(&rule.key).unwrap_or(RuleStatus::Applied);
        let mut problems: Vec<Value> = Vec::new();
        for p in status.problems() {
            *by_code.entry(p.code).or_default() += 1;
            problems.push(problem_json(p, None));
        }
        let mut route_trouble = false;
        if rule.virtual_service().is_some() {
            for h in won_hosts(model, &rule.key, &rule.hosts) {
                let Some(svc) = model.get_service(&h) else {
                    continue;
                };
                for port in svc.ports.iter().filter(|p| p.protocol.is_http()) {
                    for grpc in [false, true] {
                        if grpc && port.protocol == Protocol::Http {
                            continue;
                        }
                        for p in route_problems(model, &h, port.number, grpc) {
                            route_trouble |= p.severity == Severity::Error;
                            *by_code.entry(p.code).or_default() += 1;
                            problems.push(problem_json(&p, Some((&h, port.number, grpc))));
                        }
                    }
                }
            }
        }
        let status_name = match (&status, route_trouble) {
            (RuleStatus::Applied, true) => "applied_with_warnings",
            (s, _) => s.as_str(),
        };
        let status_name = if problems.is_empty() {
            "applied"
        } else {
            status_name
        };
        rules.push(json!({
            "key": rule.key.as_ref(),
            "kind": if rule.is_virtual_service() { "VirtualService" } else { "DestinationRule" },
            "namespace": rule.namespace.as_ref(),
            "name": rule.name.as_ref(),
            "status": status_name,
            "hosts": rule.hosts.iter().map(Hostname::as_str).collect::<Vec<_>>(),
            "problems": problems,
        }));
    }
    json!({ "rules": rules, "problems_by_code": by_code })
}
