//! From a stored [`Config`] to a [`Rule`]: the typed spec, the hostnames it binds
//! and every problem found, as a pure function of the object (so the index is a
//! pure function of the set of objects, whatever order they arrived in).
//!
//! Unknown fields: the spec is read into the typed structs (which skip what they
//! do not know), written back to JSON, and compared with the input; each key of
//! the input that did not come back is reported (`DP1002`) with its path. One
//! generic walk instead of an `extra` map on every struct, and it cannot miss a
//! struct.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::export::{ExportDefaults, or_default};
use super::gateway::{BoundGateway, Gateway, check_servers, resolve_gateway_ref};
use super::host::{host_error, resolve_host};
use super::problem::Problem;
use super::sidecar::{Sidecar, SidecarScope, bind_sidecar};
use super::{DestinationRule, VirtualService};
use crate::model::{Config, ConfigKind, Hostname};

/// The typed spec of a rule object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleSpec {
    /// A VirtualService.
    VirtualService(Arc<VirtualService>),
    /// A DestinationRule.
    DestinationRule(Arc<DestinationRule>),
    /// A Gateway, with its checked servers.
    Gateway(Arc<BoundGateway>),
    /// A Sidecar, resolved against its namespace.
    Sidecar(Arc<SidecarScope>),
    /// A spec that does not fit its kind's schema (see the problems).
    Invalid(ConfigKind),
}

/// One VirtualService or DestinationRule object, parsed and bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Config entity key (`cfg/<kind>/<namespace>/<name>`).
    pub key: Arc<str>,
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
    /// The typed spec.
    pub spec: RuleSpec,
    /// The host patterns it applies to for sidecars and proxyless clients
    /// (resolved; may be wildcards). Empty when it applies to none (rejected,
    /// bound only to gateways, or exported nowhere).
    pub hosts: Vec<Hostname>,
    /// For a VirtualService: the Gateways it binds to (`<namespace>/<name>`,
    /// sorted, each once; `mesh` is not one of them). Empty when rejected.
    pub gateways: Vec<Arc<str>>,
    /// For a VirtualService: every destination host its routes and mirrors name
    /// (resolved, sorted, each once).
    pub destinations: Vec<Hostname>,
    /// Everything found wrong with the object itself.
    pub problems: Vec<Problem>,
    /// Whether the object is rejected as a whole.
    pub rejected: bool,
    /// For a VirtualService: the namespaces whose sidecars see it (`exportTo`
    /// resolved: `.` is its own namespace, `~` none; sorted, each once), or
    /// `None` when it is public (absent, empty, or listing `*`: Istio's
    /// default without a mesh-config `defaultVirtualServiceExportTo`).
    pub export_to: Option<Arc<[Arc<str>]>>,
}

impl Rule {
    /// The VirtualService, if this is a valid one.
    pub fn virtual_service(&self) -> Option<&Arc<VirtualService>> {
        match &self.spec {
            RuleSpec::VirtualService(v) => Some(v),
            _ => None,
        }
    }

    /// The DestinationRule, if this is a valid one.
    pub fn destination_rule(&self) -> Option<&Arc<DestinationRule>> {
        match &self.spec {
            RuleSpec::DestinationRule(d) => Some(d),
            _ => None,
        }
    }

    /// The Gateway, if this is a valid one.
    pub fn gateway(&self) -> Option<&Arc<BoundGateway>> {
        match &self.spec {
            RuleSpec::Gateway(g) => Some(g),
            _ => None,
        }
    }

    /// The kind of object (valid or not).
    pub fn kind(&self) -> ConfigKind {
        match &self.spec {
            RuleSpec::VirtualService(_) => ConfigKind::VirtualService,
            RuleSpec::DestinationRule(_) => ConfigKind::DestinationRule,
            RuleSpec::Gateway(_) => ConfigKind::Gateway,
            RuleSpec::Sidecar(_) => ConfigKind::Sidecar,
            RuleSpec::Invalid(k) => *k,
        }
    }

    /// Whether this is a VirtualService object (valid or not).
    pub fn is_virtual_service(&self) -> bool {
        self.kind() == ConfigKind::VirtualService
    }

    /// Whether this is a Gateway object (valid or not).
    pub fn is_gateway(&self) -> bool {
        self.kind() == ConfigKind::Gateway
    }

    /// Whether this is a DestinationRule object (valid or not).
    pub fn is_destination_rule(&self) -> bool {
        self.kind() == ConfigKind::DestinationRule
    }

    /// The Sidecar, if this is a valid one.
    pub fn sidecar(&self) -> Option<&Arc<SidecarScope>> {
        match &self.spec {
            RuleSpec::Sidecar(s) => Some(s),
            _ => None,
        }
    }

    /// Whether this is a Sidecar object (valid or not).
    pub fn is_sidecar(&self) -> bool {
        self.kind() == ConfigKind::Sidecar
    }
}

/// Whether the index keeps objects of this kind.
pub fn is_rule_kind(kind: ConfigKind) -> bool {
    matches!(
        kind,
        ConfigKind::VirtualService
            | ConfigKind::DestinationRule
            | ConfigKind::Gateway
            | ConfigKind::Sidecar
    )
}

/// Parses and binds `cfg` (a VirtualService, DestinationRule or Gateway; see
/// [`is_rule_kind`]).
pub fn parse(cfg: &Config) -> Rule {
    parse_with(cfg, &ExportDefaults::default())
}

/// [`parse`], with `defaults` as the `exportTo` of a VirtualService or
/// DestinationRule that sets none (the typed spec then carries it).
pub fn parse_with(cfg: &Config, defaults: &ExportDefaults) -> Rule {
    let mut rule = Rule {
        key: cfg.key.clone(),
        namespace: cfg.namespace.clone(),
        name: cfg.name.clone(),
        spec: RuleSpec::Invalid(cfg.kind),
        hosts: Vec::new(),
        gateways: Vec::new(),
        destinations: Vec::new(),
        problems: Vec::new(),
        rejected: false,
        export_to: None,
    };
    let raw: Value = match serde_json::from_str(&cfg.spec_json) {
        Ok(v) => v,
        Err(e) => {
            rule.problems.push(Problem::error(
                "DP1001",
                "",
                format!("spec is not JSON: {e}"),
            ));
            rule.rejected = true;
            return rule;
        }
    };
    match cfg.kind {
        ConfigKind::VirtualService => {
            if let Some(mut vs) = typed::<VirtualService>(&raw, &mut rule.problems) {
                or_default(&mut vs.export_to, &defaults.virtual_service);
                bind_virtual_service(&vs, &mut rule);
                rule.spec = RuleSpec::VirtualService(Arc::new(vs));
            }
        }
        ConfigKind::DestinationRule => {
            if let Some(mut dr) = typed::<DestinationRule>(&raw, &mut rule.problems) {
                or_default(&mut dr.export_to, &defaults.destination_rule);
                bind_destination_rule(&dr, &mut rule);
                rule.spec = RuleSpec::DestinationRule(Arc::new(dr));
            }
        }
        ConfigKind::Gateway => {
            if let Some(gw) = typed::<Gateway>(&raw, &mut rule.problems) {
                bind_gateway(gw, &mut rule);
            }
        }
        ConfigKind::Sidecar => {
            if let Some(sc) = typed::<Sidecar>(&raw, &mut rule.problems)
                && let Some(scope) = bind_sidecar(&sc, &raw, &mut rule)
            {
                rule.spec = RuleSpec::Sidecar(Arc::new(scope));
            }
        }
        other => {
            rule.problems.push(Problem::error(
                "DP1001",
                "",
                format!("kind {other:?} is not a traffic rule the index keeps"),
            ));
        }
    }
    if matches!(rule.spec, RuleSpec::Invalid(_)) {
        rule.rejected = true;
    }
    if rule.rejected {
        rule.hosts.clear();
        rule.gateways.clear();
    }
    rule.problems.sort();
    rule.problems.dedup();
    rule
}

/// Reads `raw` as `T`, reporting a schema mismatch (with its path) or every
/// field that did not survive the round trip.
fn typed<T: DeserializeOwned + Serialize>(raw: &Value, problems: &mut Vec<Problem>) -> Option<T> {
    let value: T = match serde_path_to_error::deserialize(raw.clone()) {
        Ok(v) => v,
        Err(e) => {
            let path = e.path().to_string();
            let path = if path == "." { String::new() } else { path };
            problems.push(Problem::error(
                "DP1001",
                path,
                format!("does not fit the schema: {}", e.inner()),
            ));
            return None;
        }
    };
    match serde_json::to_value(&value) {
        Ok(back) => unknown_fields(raw, &back, "", problems),
        Err(e) => problems.push(Problem::error(
            "DP1001",
            "",
            format!("could not be read back: {e}"),
        )),
    }
    Some(value)
}

/// Reports every non-null key of `raw` missing from `back`, recursively.
fn unknown_fields(raw: &Value, back: &Value, path: &str, problems: &mut Vec<Problem>) {
    match (raw, back) {
        (Value::Object(r), Value::Object(b)) => {
            for (k, v) in r {
                if v.is_null() {
                    continue;
                }
                let at = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match b.get(k) {
                    Some(bv) => unknown_fields(v, bv, &at, problems),
                    None => problems.push(Problem::warning(
                        "DP1002",
                        at,
                        format!("unknown field {k:?} is ignored"),
                    )),
                }
            }
        }
        (Value::Array(r), Value::Array(b)) => {
            for (i, (rv, bv)) in r.iter().zip(b).enumerate() {
                unknown_fields(rv, bv, &format!("{path}[{i}]"), problems);
            }
        }
        _ => {}
    }
}

/// Reports each path of `raw` given by `pattern` (`*` walks every array
/// element) as a field not yet supported.
pub(super) fn unsupported(raw: &Value, pattern: &[&str], why: &str, problems: &mut Vec<Problem>) {
    fn walk(v: &Value, rest: &[&str], path: String, why: &str, out: &mut Vec<Problem>) {
        let Some((head, tail)) = rest.split_first() else {
            if !v.is_null() {
                out.push(Problem::warning(
                    "DP1020",
                    path,
                    format!("not yet supported: {why}; ignored"),
                ));
            }
            return;
        };
        if *head == "*" {
            if let Value::Array(items) = v {
                for (i, item) in items.iter().enumerate() {
                    walk(item, tail, format!("{path}[{i}]"), why, out);
                }
            }
        } else if let Some(next) = v.get(head) {
            let at = if path.is_empty() {
                (*head).to_string()
            } else {
                format!("{path}.{head}")
            };
            walk(next, tail, at, why, out);
        }
    }
    walk(raw, pattern, String::new(), why, problems);
}

/// `exportTo` resolved against the object's namespace `ns`: `None` when public
/// (absent, empty, or listing `*`), else the namespaces it is exported to
/// (`.` is `ns`; `~` adds none), sorted, each once.
pub fn resolve_export(export_to: Option<&[String]>, ns: &str) -> Option<Arc<[Arc<str>]>> {
    let list = export_to.filter(|l| !l.is_empty())?;
    if list.iter().any(|e| e.trim() == "*") {
        return None;
    }
    let set: BTreeSet<&str> = list
        .iter()
        .map(|e| e.trim())
        .filter(|e| *e != "~")
        .map(|e| if e == "." { ns } else { e })
        .collect();
    Some(set.into_iter().map(Arc::from).collect())
}

/// `exportTo` of a VirtualService: stored on the rule (the views honour it,
/// see `RuleIndex`); exported nowhere (`~` alone) is reported. Returns whether
/// the object is exported to any namespace.
fn check_export(export_to: Option<&Vec<String>>, rule: &mut Rule) -> bool {
    rule.export_to = resolve_export(export_to.map(|v| &v[..]), &rule.namespace);
    if rule.export_to.as_ref().is_some_and(|l| l.is_empty()) {
        rule.problems.push(Problem::error(
            "DP1012",
            "exportTo",
            "exported to no namespace (`~`): applies to no proxy",
        ));
        return false;
    }
    true
}

/// `exportTo` of a DestinationRule: stored on the rule like a
/// VirtualService's (the sidecar and gateway views of the namespaces it is
/// exported to apply it, see `RuleIndex`). Proxyless gRPC clients read only
/// public DestinationRules, so a restricted one is reported as not reaching
/// them (`DP1011`).
fn check_dr_export(export_to: Option<&Vec<String>>, rule: &mut Rule) -> bool {
    if !check_export(export_to, rule) {
        return false;
    }
    if let Some(list) = &rule.export_to {
        rule.problems.push(Problem::warning(
            "DP1011",
            "exportTo",
            format!(
                "DestinationRule exported to {list:?}: applied by the sidecars and gateways \
                 of those namespaces only; proxyless gRPC clients there do not apply it"
            ),
        ));
    }
    true
}

fn bind_virtual_service(vs: &VirtualService, rule: &mut Rule) {
    let raw = serde_json::to_value(vs).unwrap_or(Value::Null);
    let hosts = vs.hosts.as_deref().unwrap_or_default();
    if hosts.is_empty() {
        rule.problems.push(Problem::error(
            "DP1003",
            "hosts",
            "a VirtualService needs at least one host",
        ));
        rule.rejected = true;
    }
    for (i, h) in hosts.iter().enumerate() {
        if let Some(why) = host_error(h) {
            rule.problems.push(Problem::error(
                "DP1004",
                format!("hosts[{i}]"),
                format!("host {h:?} {why}"),
            ));
            rule.rejected = true;
        }
    }
    let gateways = vs.gateways.as_deref().unwrap_or_default();
    let mesh = gateways.is_empty() || gateways.iter().any(|g| g.trim() == "mesh");
    let mut named = BTreeSet::new();
    for (i, g) in gateways.iter().enumerate() {
        match resolve_gateway_ref(g, &rule.namespace) {
            Ok(Some(id)) => {
                named.insert(id);
            }
            Ok(None) => {}
            Err(why) => rule.problems.push(Problem::error(
                "DP1013",
                format!("gateways[{i}]"),
                format!("{why}: entry ignored"),
            )),
        }
    }
    let exported = check_export(vs.export_to.as_ref(), rule);
    for (pattern, why) in [
        (
            &["tcp", "*", "match", "*", "sourceSubnet"][..],
            "TCP matching on source subnet",
        ),
        (
            &["tcp", "*", "route", "*", "headers"][..],
            "header edits on TCP routes (they do not apply)",
        ),
        (&["http", "*", "delegate"][..], "delegation"),
        (
            &["http", "*", "mirrors"][..],
            "several mirrors (use `mirror`)",
        ),
        (
            &["http", "*", "match", "*", "statPrefix"][..],
            "per-match stats prefix",
        ),
        (
            &["http", "*", "fault", "delay", "exponentialDelay"][..],
            "exponential delay",
        ),
        (
            &["http", "*", "fault", "abort", "http2Error"][..],
            "HTTP/2 error aborts",
        ),
        (
            &["tls", "*", "match", "*", "destinationSubnets"][..],
            "TLS matching on destination subnets",
        ),
        (
            &["tls", "*", "route", "*", "headers"][..],
            "header edits on TLS routes (they do not apply)",
        ),
    ] {
        unsupported(&raw, pattern, why, &mut rule.problems);
    }
    let ns = &*rule.namespace;
    if mesh && exported && !rule.rejected {
        let set: BTreeSet<Hostname> = hosts.iter().map(|h| resolve_host(h, ns)).collect();
        rule.hosts = set.into_iter().collect();
    }
    if exported && !rule.rejected {
        // A gateway sees the rule when it is exported to the Gateway object's
        // namespace (Istio judges it from the router's namespace, which is
        // usually the same; a gateway view is keyed by its Gateways only).
        let visible = |id: &Arc<str>| match (&rule.export_to, id.split_once('/')) {
            (None, _) => true,
            (Some(list), Some((gw_ns, _))) => list.iter().any(|n| &**n == gw_ns),
            (Some(_), None) => false,
        };
        rule.gateways = named.into_iter().filter(visible).collect();
    }
    let mut dests = BTreeSet::new();
    let tls_dests = (vs.tls.iter().flatten())
        .flat_map(|t| t.route.iter().flatten())
        .chain((vs.tcp.iter().flatten()).flat_map(|t| t.route.iter().flatten()))
        .filter_map(|d| d.destination.as_ref());
    for d in tls_dests {
        if let Some(h) = d.host.as_deref().filter(|h| !h.trim().is_empty()) {
            dests.insert(resolve_host(h, ns));
        }
    }
    for route in vs.http.iter().flatten() {
        let named = route
            .route
            .iter()
            .flatten()
            .filter_map(|d| d.destination.as_ref())
            .chain(route.mirror.as_ref());
        for d in named {
            if let Some(h) = d.host.as_deref().filter(|h| !h.trim().is_empty()) {
                dests.insert(resolve_host(h, ns));
            }
        }
    }
    rule.destinations = dests.into_iter().collect();
}

fn bind_destination_rule(dr: &DestinationRule, rule: &mut Rule) {
    let raw = serde_json::to_value(dr).unwrap_or(Value::Null);
    let host = dr.host.as_deref().unwrap_or_default();
    if host.trim().is_empty() {
        rule.problems.push(Problem::error(
            "DP1003",
            "host",
            "a DestinationRule needs a host",
        ));
        rule.rejected = true;
    } else if let Some(why) = host_error(host) {
        rule.problems.push(Problem::error(
            "DP1004",
            "host",
            format!("host {host:?} {why}"),
        ));
        rule.rejected = true;
    }
    let mut names = BTreeSet::new();
    for (i, s) in dr.subsets.iter().flatten().enumerate() {
        match s.name.as_deref().filter(|n| !n.is_empty()) {
            None => {
                rule.problems.push(Problem::error(
                    "DP1041",
                    format!("subsets[{i}].name"),
                    "a subset needs a name",
                ));
                rule.rejected = true;
            }
            Some(n) if !names.insert(n) => {
                rule.problems.push(Problem::error(
                    "DP1040",
                    format!("subsets[{i}].name"),
                    format!("subset name {n:?} is used twice"),
                ));
                rule.rejected = true;
            }
            Some(_) => {}
        }
    }
    let exported = check_dr_export(dr.export_to.as_ref(), rule);
    let policies: [&[&str]; 4] = [
        &["trafficPolicy"],
        &["trafficPolicy", "portLevelSettings", "*"],
        &["subsets", "*", "trafficPolicy"],
        &["subsets", "*", "trafficPolicy", "portLevelSettings", "*"],
    ];
    let mut warn = |tail: &[&str], why: &str| {
        for head in policies {
            let pattern: Vec<&str> = head.iter().chain(tail).copied().collect();
            unsupported(&raw, &pattern, why, &mut rule.problems);
        }
    };
    warn(&["tunnel"], "tunnel settings");
    warn(&["proxyProtocol"], "PROXY protocol");
    warn(&["loadBalancer", "warmupDurationSecs"], "slow start");
    warn(&["loadBalancer", "warmup"], "slow start");
    warn(
        &["loadBalancer", "localityLbSetting", "failoverPriority"],
        "failover by label priority",
    );
    warn(
        &["tls", "credentialName"],
        "SDS credentials (use file paths)",
    );
    warn(&["tls", "caCrl"], "certificate revocation lists");
    unsupported(
        &raw,
        &["workloadSelector"],
        "workload selectors (needs per-proxy views; the rule applies to every workload)",
        &mut rule.problems,
    );
    super::dr_check::check(dr, &mut rule.problems);
    let mut istio_mutual = Vec::new();
    collect_tls_modes(&raw, "", &mut istio_mutual);
    for path in istio_mutual {
        rule.problems.push(Problem::warning(
            "DP1042",
            path,
            "ISTIO_MUTUAL needs Istio's CA and SDS, which deltapilot does not run; \
             this tls setting is ignored",
        ));
    }
    if exported && !rule.rejected {
        rule.hosts = vec![resolve_host(host, &rule.namespace)];
    }
}

fn bind_gateway(gw: Gateway, rule: &mut Rule) {
    let raw = serde_json::to_value(&gw).unwrap_or(Value::Null);
    for (pattern, why) in [
        (
            &["servers", "*", "bind"][..],
            "binding a server to an address",
        ),
        (
            &["servers", "*", "defaultEndpoint"][..],
            "default endpoints",
        ),
        (&["servers", "*", "port", "targetPort"][..], "target ports"),
        (
            &["servers", "*", "tls", "serverCertificate"][..],
            "certificate file paths (use credentialName)",
        ),
        (
            &["servers", "*", "tls", "privateKey"][..],
            "key file paths (use credentialName)",
        ),
        (
            &["servers", "*", "tls", "caCertificates"][..],
            "CA file paths (use credentialName with ca.crt)",
        ),
        (
            &["servers", "*", "tls", "credentialNames"][..],
            "several credentials (use credentialName)",
        ),
        (
            &["servers", "*", "tls", "minProtocolVersion"][..],
            "TLS version bounds",
        ),
        (
            &["servers", "*", "tls", "maxProtocolVersion"][..],
            "TLS version bounds",
        ),
        (
            &["servers", "*", "tls", "cipherSuites"][..],
            "cipher suites",
        ),
    ] {
        unsupported(&raw, pattern, why, &mut rule.problems);
    }
    let servers = check_servers(&gw, &rule.namespace, &mut rule.problems);
    rule.spec = RuleSpec::Gateway(Arc::new(BoundGateway { spec: gw, servers }));
}

/// Paths of every `tls.mode: ISTIO_MUTUAL` in a DestinationRule.
fn collect_tls_modes(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let at = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                if k == "tls" && child.get("mode").and_then(Value::as_str) == Some("ISTIO_MUTUAL") {
                    out.push(format!("{at}.mode"));
                }
                collect_tls_modes(child, &at, out);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                collect_tls_modes(item, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}
