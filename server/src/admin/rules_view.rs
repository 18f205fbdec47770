//! `/debug/rules`: every VirtualService, DestinationRule and Gateway with its status
//! (applied, applied with warnings, rejected) and every problem, with its stable
//! code and path: the model's own (schema, hosts, binding) and those found
//! translating the rule's routes for each host and HTTP port it wins, and
//! those generating each Gateway on its own finds (`DP21xx`, and route
//! problems of the VirtualServices bound to it, with a `gateway` field).
//!
//! On top, references the registry cannot satisfy (codes from `DP3000` up, found
//! here because they concern the registry as a whole, not one rule):
//!
//! | code | severity | meaning | what happens |
//! | --- | --- | --- | --- |
//! | `DP3001` | warning | a VirtualService host (or wildcard) matches no service | the rule routes nothing until one appears |
//! | `DP3002` | warning | a DestinationRule host (or wildcard) matches no service | its subsets and policies make no cluster until one appears |
//! | `DP3003` | warning | a VirtualService is bound to a Gateway (`gateways: [ns/name]`) that does not exist | its routes reach no router until the Gateway appears |
//! | `DP3004` | warning | a Sidecar hides a host that a VirtualService of its namespace routes to | the sidecars it scopes have no cluster for that destination |
//!
//! File and line: the log carries objects, not where they were written, so the
//! report takes them from the in-process file adapter's status
//! ([`rules_report_placed`]); rules from other adapters, or from a file adapter
//! in another process, have none.
//!
//! What it does NOT do: change anything.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use deltapilot_model::rules::{Problem, RuleStatus, Severity, host_matches, is_wildcard};
use deltapilot_model::state::ModelState;
use deltapilot_model::{Hostname, Protocol};
use deltapilot_xds::generate::{GenOptions, gateway_resources, l4_route_problems, route_problems};
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

/// `DP3001`/`DP3002`: the rule's host patterns that match no service.
fn unresolved_hosts(model: &ModelState, rule: &deltapilot_model::rules::Rule) -> Vec<Problem> {
    let (code, what) = if rule.is_virtual_service() {
        ("DP3001", "the rule routes nothing for it until one appears")
    } else {
        (
            "DP3002",
            "its subsets and policies make no cluster until one appears",
        )
    };
    rule.hosts
        .iter()
        .filter(|h| {
            if is_wildcard(h.as_str()) {
                !model
                    .services()
                    .any(|s| host_matches(h.as_str(), s.hostname.as_str()))
            } else {
                model.get_service(*h).is_none()
            }
        })
        .map(|h| {
            Problem::warning(
                code,
                "hosts",
                format!("host {h} matches no service in the registry; {what}"),
            )
        })
        .collect()
}

/// How many rules have each status, and how many problems each code has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleCounts {
    /// Rules by status (`applied`, `applied_with_warnings`, `rejected`).
    pub by_status: BTreeMap<&'static str, u64>,
    /// Problems by code.
    pub by_code: BTreeMap<&'static str, u64>,
}

/// Where a rule was written, by config key: file and first line.
pub type Place<'a> = &'a dyn Fn(&str) -> Option<(String, Option<usize>)>;

/// The status report of every rule, by key, and the count of problems by code.
pub fn rules_report(model: &ModelState, opts: &GenOptions) -> Value {
    rules_report_placed(model, opts, &|_| None)
}

/// [`rules_report`] with each rule's `file` and `line` where `place` knows them
/// (the file adapter's origins: they are not in the log).
pub fn rules_report_placed(model: &ModelState, opts: &GenOptions, place: Place<'_>) -> Value {
    let (mut rules, counts) = collect(model, opts);
    for r in &mut rules {
        if let Some((file, line)) = r["key"].as_str().and_then(place) {
            r["file"] = json!(file);
            r["line"] = json!(line);
        }
    }
    json!({ "rules": rules, "problems_by_code": counts.by_code, "rules_by_status": counts.by_status })
}

/// The counts of [`rules_report`], for `/metrics`.
pub fn rule_counts(model: &ModelState, opts: &GenOptions) -> RuleCounts {
    collect(model, opts).1
}

/// The problems generating each Gateway on its own finds (merging servers,
/// translating the routes of the VirtualServices bound to it), by the key of
/// the object they concern, each with the Gateway it was found for.
fn gateway_problems(
    model: &ModelState,
    opts: &GenOptions,
) -> BTreeMap<Arc<str>, Vec<(Arc<str>, Problem)>> {
    let mut out: BTreeMap<Arc<str>, Vec<(Arc<str>, Problem)>> = BTreeMap::new();
    for (id, _, _) in model.rules().gateways() {
        let r = gateway_resources(model, std::slice::from_ref(id), opts);
        for (key, p) in r.problems {
            out.entry(key).or_default().push((id.clone(), p));
        }
    }
    out
}

fn collect(model: &ModelState, opts: &GenOptions) -> (Vec<Value>, RuleCounts) {
    let idx = model.rules();
    let mut by_gateway = gateway_problems(model, opts);
    let mut by_reference = super::rules_refs::reference_problems(model, &opts.root_namespace);
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
        let refs = by_reference.remove(&rule.key).unwrap_or_default();
        for p in unresolved_hosts(model, rule).into_iter().chain(refs) {
            *by_code.entry(p.code).or_default() += 1;
            problems.push(problem_json(&p, None));
        }
        let mut route_trouble = false;
        for (gw, p) in by_gateway.remove(&rule.key).unwrap_or_default() {
            route_trouble |= p.severity == Severity::Error;
            *by_code.entry(p.code).or_default() += 1;
            let mut v = problem_json(&p, None);
            v["gateway"] = json!(gw.as_ref());
            problems.push(v);
        }
        if rule.virtual_service().is_some() {
            for h in won_hosts(model, &rule.key, &rule.hosts) {
                let Some(svc) = model.get_service(&h) else {
                    continue;
                };
                for port in svc.ports.iter().filter(|p| !p.protocol.is_http()) {
                    for p in l4_route_problems(model, &h, port.number) {
                        route_trouble |= p.severity == Severity::Error;
                        *by_code.entry(p.code).or_default() += 1;
                        problems.push(problem_json(&p, Some((&h, port.number, false))));
                    }
                }
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
            "kind": kind_name(rule.kind()),
            "namespace": rule.namespace.as_ref(),
            "name": rule.name.as_ref(),
            "status": status_name,
            "hosts": rule.hosts.iter().map(Hostname::as_str).collect::<Vec<_>>(),
            "gateways": rule.gateways.iter().map(|g| g.as_ref()).collect::<Vec<&str>>(),
            "problems": problems,
        }));
    }
    (rules, counts)
}

/// Every problem of a [`rules_report`] (as `/debug/rules` serves it) as one flat
/// object each, with the rule's `key`, `kind`, `namespace` and `name` beside the
/// problem's own fields: the form `deltapilot analyze` and `/debug/impact`
/// report. Rules without problems yield nothing.
pub fn problem_list(report: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    let rules = report["rules"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    for rule in rules {
        let problems = rule["problems"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        for p in problems {
            let mut flat = json!({
                "key": rule["key"],
                "kind": rule["kind"],
                "namespace": rule["namespace"],
                "name": rule["name"],
            });
            for k in ["file", "line"] {
                if !rule[k].is_null() {
                    flat[k] = rule[k].clone();
                }
            }
            if let (Some(f), Some(p)) = (flat.as_object_mut(), p.as_object()) {
                for (k, v) in p {
                    f.insert(k.clone(), v.clone());
                }
            }
            out.push(flat);
        }
    }
    out
}

/// The Istio kind name of a rule object.
fn kind_name(kind: deltapilot_proto::ConfigKind) -> &'static str {
    use deltapilot_proto::ConfigKind;
    match kind {
        ConfigKind::VirtualService => "VirtualService",
        ConfigKind::DestinationRule => "DestinationRule",
        ConfigKind::Gateway => "Gateway",
        ConfigKind::Sidecar => "Sidecar",
        _ => "Other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltapilot_model::state::mk::{rule, svc};
    use deltapilot_proto::ConfigKind;

    #[test]
    fn gateways_and_their_problems_are_reported_by_code() {
        let model = ModelState::from_events(&[
            svc("k", 0, "web", "web.web.svc.cluster.local", &[80]),
            rule(
                "k",
                0,
                ConfigKind::Gateway,
                "edge",
                "gw",
                r#"{"servers":[
                  {"port":{"number":80,"protocol":"HTTP"},"hosts":["*"]},
                  {"port":{"number":80,"protocol":"HTTPS"},"hosts":["a.example.com"],
                   "tls":{"mode":"SIMPLE","credentialName":"c"}},
                  {"port":{"number":443,"protocol":"HTTPS"},"hosts":["b"],"tls":{"mode":"ISTIO_MUTUAL"}}
                ]}"#,
            ),
            rule(
                "k",
                0,
                ConfigKind::VirtualService,
                "web",
                "vs",
                r#"{"hosts":["a.example.com"],"gateways":["edge/gw"],
                    "http":[{"route":[{"destination":{"host":"nowhere"}}]}]}"#,
            ),
        ]);
        let report = rules_report(&model, &GenOptions::default());
        let text = report.to_string();
        let counts = rule_counts(&model, &GenOptions::default());
        for code in ["DP1204", "DP2101", "DP2004"] {
            assert_eq!(counts.by_code.get(code), Some(&1), "{code}: {text}");
        }
        let rules = report["rules"].as_array().expect("rules");
        let gw = rules
            .iter()
            .find(|r| r["kind"] == "Gateway")
            .expect("the Gateway is listed");
        assert_eq!(gw["status"], "applied_with_warnings", "{gw}");
        let vs = rules
            .iter()
            .find(|r| r["kind"] == "VirtualService")
            .expect("vs");
        assert_eq!(vs["gateways"], json!(["edge/gw"]));
        assert_eq!(vs["problems"][0]["gateway"], "edge/gw", "{vs}");
    }
}
