//! `/debug/rules`: every VirtualService and DestinationRule with its status
//! (applied, applied with warnings, rejected) and every problem, with its stable
//! code and path: the model's own (schema, hosts, binding) and those found
//! translating the rule's routes for each host and HTTP port it wins.
//!
//! What it does NOT do: change anything, or know file and line (the adapters
//! carry the object's name and namespace, which name the file's object).

use std::collections::{BTreeMap, BTreeSet};

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

/// How many rules have each status, and how many problems each code has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleCounts {
    /// Rules by status (`applied`, `applied_with_warnings`, `rejected`).
    pub by_status: BTreeMap<&'static str, u64>,
    /// Problems by code.
    pub by_code: BTreeMap<&'static str, u64>,
}

/// The status report of every rule, by key, and the count of problems by code.
pub fn rules_report(model: &ModelState) -> Value {
    let (rules, counts) = collect(model);
    json!({ "rules": rules, "problems_by_code": counts.by_code, "rules_by_status": counts.by_status })
}

/// The counts of [`rules_report`], for `/metrics`.
pub fn rule_counts(model: &ModelState) -> RuleCounts {
    collect(model).1
}

fn collect(model: &ModelState) -> (Vec<Value>, RuleCounts) {
    let idx = model.rules();
    let mut rules = Vec::new();
    let mut counts = RuleCounts::default();
    let by_code = &mut counts.by_code;
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
        *counts.by_status.entry(status_name).or_default() += 1;
        rules.push(json!({
            "key": rule.key.as_ref(),
            "kind": if rule.is_virtual_service() {
                "VirtualService"
            } else if rule.is_sidecar() {
                "Sidecar"
            } else {
                "DestinationRule"
            },
            "namespace": rule.namespace.as_ref(),
            "name": rule.name.as_ref(),
            "status": status_name,
            "hosts": rule.hosts.iter().map(Hostname::as_str).collect::<Vec<_>>(),
            "problems": problems,
        }));
    }
    (rules, counts)
}
