//! Istio's `Sidecar` resource: which hosts a namespace's sidecars receive
//! (`egress[].hosts`), which of its workloads it applies to
//! (`workloadSelector`), and what happens to traffic for hosts outside the
//! registry (`outboundTrafficPolicy`).
//!
//! ## Hosts
//! Each `egress[].hosts` entry is `namespace/dnsName`:
//! - the namespace part is `*` (any), `.` (the Sidecar's own), `~` (none) or a
//!   namespace name, compared with the namespace of the service that defines the
//!   host;
//! - the host part is `*`, a wildcard `*.example.com` or an FQDN, matched as rule
//!   hosts are (`host_matches`); it is not resolved as a short name (Istio wants
//!   FQDNs here).
//!
//! Entries without a `/` are rejected (`DP1301`), as Istio's validation rejects
//! them; an egress listener without hosts is rejected too (`DP1003`), and a
//! Sidecar without `egress` admits every host (`*/*`), as Istio's default. The hosts of every egress listener are united: port-scoped egress
//! listeners (`egress[].port`), `bind`, `captureMode`, `ingress`,
//! `inboundConnectionPool` and `outboundTrafficPolicy.egressProxy` are not
//! implemented and each is reported (`DP1020`), never silently dropped.
//!
//! ## Selection (Istio's order)
//! A sidecar proxy of namespace `N` with labels `L` is scoped by the first of:
//! a Sidecar of `N` whose `workloadSelector.labels` are all in `L`; the Sidecar
//! of `N` without a selector; the root namespace's Sidecar without a selector.
//! Several candidates at one step: the first by (name) wins, as Istio takes the
//! oldest and the model has no creation time (see `RuleIndex::sidecar_for`).
//!
//! What it does NOT do: compute which resources a proxy receives (the xDS
//! crate's `view`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::host::host_matches;
use super::parse::{Rule, unsupported};
use super::problem::Problem;

/// The namespace Istio calls the root namespace by default: its selector-less
/// Sidecar is the mesh-wide default.
pub const DEFAULT_ROOT_NAMESPACE: &str = "istio-system";

/// The `Sidecar` spec, as far as deltapilot reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sidecar {
    /// Which workloads of the namespace it applies to (none: all of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_selector: Option<WorkloadSelector>,
    /// Outbound listeners and the hosts they may reach.
    #[serde(default)]
    pub egress: Vec<EgressListener>,
    /// Inbound listeners (not implemented, reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<Value>,
    /// Inbound connection pool (not implemented, reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbound_connection_pool: Option<Value>,
    /// What happens to traffic for hosts outside the registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outbound_traffic_policy: Option<OutboundTrafficPolicy>,
}

/// `workloadSelector`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSelector {
    /// Labels a workload must all carry.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// One `egress` listener.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressListener {
    /// `namespace/dnsName` entries.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Port of a port-scoped listener (not implemented, reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<Value>,
    /// Bind address (not implemented, reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind: Option<Value>,
    /// Capture mode (not implemented, reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture_mode: Option<Value>,
}

/// `outboundTrafficPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboundTrafficPolicy {
    /// `REGISTRY_ONLY` or `ALLOW_ANY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Egress proxy (not implemented, reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_proxy: Option<Value>,
}

/// The outbound traffic mode, as the view applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OutboundMode {
    /// Unknown hosts get 502 from a catch-all virtual host (`block_all`).
    RegistryOnly,
    /// Unknown hosts pass through to their original destination (`allow_any`).
    AllowAny,
}

/// Which namespaces an egress host entry admits.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EgressNamespace {
    /// `*`: any namespace.
    Any,
    /// `~`: none.
    Nothing,
    /// A namespace by name (`.` is resolved to the Sidecar's own).
    Named(String),
}

/// One parsed `namespace/dnsName` entry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EgressHost {
    /// The namespace part.
    pub namespace: EgressNamespace,
    /// The host part, lower-cased (`*`, `*.suffix` or an FQDN).
    pub host: String,
}

impl EgressHost {
    /// Whether this entry admits `host`, defined in namespace `ns`.
    pub fn admits(&self, host: &str, ns: &str) -> bool {
        let ns_ok = match &self.namespace {
            EgressNamespace::Any => true,
            EgressNamespace::Nothing => false,
            EgressNamespace::Named(n) => n == ns,
        };
        ns_ok && host_matches(&self.host, host)
    }
}

/// A Sidecar, parsed: what the view needs, resolved against its namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SidecarScope {
    /// The spec as written.
    pub spec: Sidecar,
    /// The selector labels (empty: the namespace's default).
    pub selector: BTreeMap<String, String>,
    /// Every egress host entry, united over listeners, sorted, each once.
    pub hosts: Vec<EgressHost>,
    /// The outbound mode, when the Sidecar sets one.
    pub outbound: Option<OutboundMode>,
}

impl SidecarScope {
    /// Whether a sidecar sees `host`, defined in namespace `ns`.
    pub fn admits(&self, host: &str, ns: &str) -> bool {
        self.hosts.iter().any(|e| e.admits(host, ns))
    }

    /// Whether a workload with `labels` is selected (always, without selector).
    pub fn selects<'a>(&self, mut labels: impl FnMut(&str) -> Option<&'a str>) -> bool {
        self.selector
            .iter()
            .all(|(k, v)| labels(k).is_some_and(|l| l == v))
    }
}

/// Parses `entry` (`namespace/dnsName`) of a Sidecar in `own_ns`.
fn egress_host(entry: &str, own_ns: &str) -> Result<EgressHost, &'static str> {
    let Some((ns, host)) = entry.trim().split_once('/') else {
        return Err("must be `namespace/dnsName` (`*/`, `./`, `~/` or a namespace)");
    };
    let host = host.trim().to_ascii_lowercase();
    if host.is_empty() {
        return Err("has an empty host part");
    }
    let rest = host
        .strip_prefix("*.")
        .unwrap_or(if host == "*" { "" } else { &host });
    if rest.contains('*') || rest.contains('/') {
        return Err("has a `*` other than a whole leading label, or a second `/`");
    }
    let namespace = match ns.trim() {
        "*" => EgressNamespace::Any,
        "~" => EgressNamespace::Nothing,
        "." => EgressNamespace::Named(own_ns.to_string()),
        "" => return Err("has an empty namespace part"),
        n => EgressNamespace::Named(n.to_string()),
    };
    Ok(EgressHost { namespace, host })
}

/// Binds a typed Sidecar into `rule`: problems for what is wrong or not
/// implemented; `None` when the object cannot apply (rejected).
pub(super) fn bind_sidecar(sc: &Sidecar, raw: &Value, rule: &mut Rule) -> Option<SidecarScope> {
    for (pattern, why) in [
        (&["ingress"][..], "Sidecar ingress listeners"),
        (
            &["inboundConnectionPool"][..],
            "Sidecar inboundConnectionPool",
        ),
        (
            &["egress", "*", "port"][..],
            "port-scoped egress listeners (the hosts apply to every port)",
        ),
        (
            &["egress", "*", "bind"][..],
            "egress listener bind addresses",
        ),
        (
            &["egress", "*", "captureMode"][..],
            "egress listener captureMode",
        ),
        (
            &["outboundTrafficPolicy", "egressProxy"][..],
            "outboundTrafficPolicy.egressProxy",
        ),
    ] {
        unsupported(raw, pattern, why, &mut rule.problems);
    }
    let mut ok = true;
    let mut hosts = Vec::new();
    if sc.egress.is_empty() {
        // As Istio: without egress listeners every host stays visible (a
        // Sidecar that only sets `outboundTrafficPolicy` is common).
        hosts.push(EgressHost {
            namespace: EgressNamespace::Any,
            host: "*".into(),
        });
    }
    for (i, e) in sc.egress.iter().enumerate() {
        if e.hosts.is_empty() {
            rule.problems.push(Problem::error(
                "DP1003",
                format!("egress[{i}].hosts"),
                "an egress listener needs at least one host",
            ));
            ok = false;
        }
        for (j, h) in e.hosts.iter().enumerate() {
            match egress_host(h, &rule.namespace) {
                Ok(eh) => hosts.push(eh),
                Err(why) => {
                    rule.problems.push(Problem::error(
                        "DP1301",
                        format!("egress[{i}].hosts[{j}]"),
                        format!("host {h:?} {why}"),
                    ));
                    ok = false;
                }
            }
        }
    }
    hosts.sort();
    hosts.dedup();
    let outbound = match sc
        .outbound_traffic_policy
        .as_ref()
        .and_then(|p| p.mode.as_deref())
    {
        None => None,
        Some("REGISTRY_ONLY") => Some(OutboundMode::RegistryOnly),
        Some("ALLOW_ANY") => Some(OutboundMode::AllowAny),
        Some(other) => {
            rule.problems.push(Problem::error(
                "DP1302",
                "outboundTrafficPolicy.mode",
                format!("unknown mode {other:?} (REGISTRY_ONLY or ALLOW_ANY)"),
            ));
            ok = false;
            None
        }
    };
    ok.then(|| SidecarScope {
        spec: sc.clone(),
        selector: sc
            .workload_selector
            .as_ref()
            .map(|w| w.labels.clone())
            .unwrap_or_default(),
        hosts,
        outbound,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn egress_hosts_parse_as_istio_writes_them() {
        let h = |s| egress_host(s, "shop");
        assert_eq!(
            h("./*").expect("ok").namespace,
            EgressNamespace::Named("shop".into())
        );
        assert_eq!(
            h("*/api.example.com").expect("ok").namespace,
            EgressNamespace::Any
        );
        assert_eq!(h("~/*").expect("ok").namespace, EgressNamespace::Nothing);
        assert!(h("reviews").is_err(), "no namespace part");
        assert!(h("ns/a.*.com").is_err());
        assert!(h("ns/").is_err());
        let e = h("istio-system/*.Example.com").expect("ok");
        assert!(e.admits("a.b.example.com", "istio-system"));
        assert!(!e.admits("a.b.example.com", "shop"));
        assert!(!h("~/*").expect("ok").admits("x", "shop"));
    }

    fn cfg(ns: &str, name: &str, spec: &str) -> crate::model::Config {
        crate::model::Config {
            key: deltapilot_proto::config_key(crate::model::ConfigKind::Sidecar, ns, name).into(),
            kind: crate::model::ConfigKind::Sidecar,
            namespace: ns.into(),
            name: name.into(),
            labels: Default::default(),
            annotations: Default::default(),
            spec_json: spec.into(),
        }
    }

    fn codes(r: &Rule) -> Vec<(&'static str, String)> {
        r.problems
            .iter()
            .map(|p| (p.code, p.path.clone()))
            .collect()
    }

    #[test]
    fn unsupported_fields_are_reported_and_bad_hosts_reject() {
        let r = super::super::parse(&cfg(
            "shop",
            "s",
            r#"{"ingress":[{"port":{"number":80}}],"inboundConnectionPool":{"http":{}},
                "egress":[{"port":{"number":9080},"hosts":["./*"]}],
                "outboundTrafficPolicy":{"mode":"REGISTRY_ONLY","egressProxy":{"host":"x"}}}"#,
        ));
        assert!(!r.rejected);
        let sc = r.sidecar().expect("valid");
        assert_eq!(sc.outbound, Some(OutboundMode::RegistryOnly));
        assert_eq!(
            codes(&r),
            [
                ("DP1020", "egress[0].port".to_string()),
                ("DP1020", "inboundConnectionPool".to_string()),
                ("DP1020", "ingress".to_string()),
                ("DP1020", "outboundTrafficPolicy.egressProxy".to_string()),
            ]
        );
        let bad = super::super::parse(&cfg("shop", "s", r#"{"egress":[{"hosts":["reviews"]}]}"#));
        assert!(bad.rejected && bad.sidecar().is_none());
        assert_eq!(codes(&bad), [("DP1301", "egress[0].hosts[0]".to_string())]);
        let mode = super::super::parse(&cfg(
            "shop",
            "s",
            r#"{"egress":[{"hosts":["*/*"]}],"outboundTrafficPolicy":{"mode":"SOMETIMES"}}"#,
        ));
        assert!(mode.rejected);
        assert_eq!(codes(&mode)[0].0, "DP1302");
        let unknown = super::super::parse(&cfg(
            "shop",
            "s",
            r#"{"egress":[{"hosts":["*/*"]}],"nope":1}"#,
        ));
        assert_eq!(codes(&unknown), [("DP1002", "nope".to_string())]);
    }

    #[test]
    fn selection_follows_istios_order() {
        let mut idx = super::super::RuleIndex::default();
        for (ns, name, spec) in [
            ("shop", "b-default", r#"{"egress":[{"hosts":["./*"]}]}"#),
            ("shop", "a-default", r#"{"egress":[{"hosts":["./*"]}]}"#),
            (
                "shop",
                "pay",
                r#"{"workloadSelector":{"labels":{"app":"pay"}},"egress":[{"hosts":["*/*"]}]}"#,
            ),
            (
                DEFAULT_ROOT_NAMESPACE,
                "default",
                r#"{"egress":[{"hosts":["*/*"]}]}"#,
            ),
        ] {
            idx.upsert(&cfg(ns, name, spec));
        }
        let pick = |idx: &super::super::RuleIndex, ns: &str, app: Option<&'static str>| {
            idx.sidecar_for(
                ns,
                |k| (k == "app").then_some(app).flatten(),
                DEFAULT_ROOT_NAMESPACE,
            )
            .map(|r| r.name.to_string())
        };
        assert_eq!(pick(&idx, "shop", Some("pay")).as_deref(), Some("pay"));
        assert_eq!(
            pick(&idx, "shop", Some("cart")).as_deref(),
            Some("a-default"),
            "first by name"
        );
        assert_eq!(pick(&idx, "shop", None).as_deref(), Some("a-default"));
        assert_eq!(
            pick(&idx, "other", None).as_deref(),
            Some("default"),
            "the root namespace's"
        );
        let status = idx.status("cfg/sidecar/shop/b-default").expect("stored");
        assert!(
            matches!(&status, super::super::RuleStatus::AppliedWithWarnings(p) if p[0].code == "DP1303"),
            "{status:?}"
        );
        idx.remove("cfg/sidecar/istio-system/default");
        assert_eq!(pick(&idx, "other", None), None);
    }
}
