//! VirtualService `tcp` and `tls` routes on the sidecars' non-HTTP ports
//! (Istio's `buildSidecarOutboundTCPTLSFilterChainOpts`), and the `tcp_proxy`
//! both these and the gateways' PASSTHROUGH servers forward with.
//!
//! For a TCP port `P` (no service serves HTTP on it), each service owning the
//! port, in hostname order, with a VirtualService bound to the sidecars:
//! - each `tls` route's match blocks on `P` (no `port`, or `P`) give one filter
//!   chain matched on their `sniHosts`, with the TLS inspector on the listener;
//!   an SNI name already matched on the port is left out (`DP2105`);
//! - each `tcp` route's match blocks on `P` with `destinationSubnets` give one
//!   chain matched on those prefixes (a bad prefix is left out, `DP2112`; a set
//!   of prefixes already matched, `DP2113`);
//! - the first `tcp` route with a match block on `P` without subnets (or with
//!   no match blocks at all) becomes the port's default chain; later ones
//!   are never reached, as in Istio.
//!
//! A route forwards to its destinations, weighted clusters for several (see
//! [`tcp_proxy`]). Without a default route, a port with exactly one owner
//! keeps its plain `tcp_proxy` to that owner's cluster as the default chain;
//! with several owners and no default, only the matched chains are served (a
//! connection matching none is closed).
//!
//! A gateway's TCP server takes the `tcp` routes of the VirtualServices bound
//! to it the same way ([`gateway_chains`]).
//!
//! A match block applies only where its `gateways` (absent: `mesh`),
//! `sourceLabels` and `sourceNamespace` say ([`BlockConditions`], as for HTTP
//! blocks): sidecars whose view key carries its selector; gateways never
//! satisfy one.
//!
//! What it does NOT do: `sourceSubnet` (reported by the model), or telling
//! TCP services apart by destination VIP (the model has no VIPs).

use std::collections::{BTreeSet, HashSet};

use envoy_types::pb::envoy::config::core::v3::CidrRange;
use envoy_types::pb::envoy::config::listener::v3::{
    Filter, FilterChain, FilterChainMatch, ListenerFilter, filter::ConfigType,
    listener_filter::ConfigType as ListenerFilterConfig,
};
use envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{
    TcpProxy,
    tcp_proxy::{ClusterSpecifier, WeightedCluster, weighted_cluster::ClusterWeight},
};
use envoy_types::pb::google::protobuf::UInt32Value;

use deltapilot_model::Hostname;
use deltapilot_model::rules::{
    L4Match, Problem, RouteDestination, TlsMatch, VirtualService, resolve_host,
};

use super::ModelRead;
use super::common::{cluster_name, to_any};
use super::policy::subset_cluster_name;

pub(crate) const TCP_PROXY_FILTER: &str = "envoy.filters.network.tcp_proxy";
pub(crate) const TLS_INSPECTOR: &str = "envoy.filters.listener.tls_inspector";

/// The conditions of a match block (any route kind) on who it applies to.
pub(crate) struct BlockConditions<'a> {
    pub(crate) labels: Option<&'a std::collections::BTreeMap<String, String>>,
    pub(crate) namespace: Option<&'a str>,
    pub(crate) gateways: Option<&'a [String]>,
}

impl<'a> From<&'a L4Match> for BlockConditions<'a> {
    fn from(m: &'a L4Match) -> Self {
        BlockConditions {
            labels: m.source_labels.as_ref(),
            namespace: m.source_namespace.as_deref(),
            gateways: m.gateways.as_deref(),
        }
    }
}

impl<'a> From<&'a TlsMatch> for BlockConditions<'a> {
    fn from(m: &'a TlsMatch) -> Self {
        BlockConditions {
            labels: m.source_labels.as_ref(),
            namespace: m.source_namespace.as_deref(),
            gateways: m.gateways.as_deref(),
        }
    }
}

impl BlockConditions<'_> {
    /// Whether the block applies to the proxies `model` generates for:
    /// `gateway` (`ns/name`) or, when `None`, sidecars (`mesh`); `rule_ns` is
    /// the rule's namespace (a bare gateway name resolves in it). Its
    /// selector must be one the proxies satisfy
    /// (`ModelRead::source_matches`), and its `gateways`, if any, must name
    /// `mesh` or that Gateway.
    pub(crate) fn apply<M: ModelRead + ?Sized>(
        &self,
        model: &M,
        rule_ns: &str,
        gateway: Option<&str>,
    ) -> bool {
        use deltapilot_model::rules::{resolve_gateway_ref, selector_from, selector_id};
        if let Some(sel) = selector_from(self.labels, self.namespace)
            && !model.source_matches(&selector_id(&sel))
        {
            return false;
        }
        let Some(list) = self.gateways.filter(|l| !l.is_empty()) else {
            return true;
        };
        list.iter()
            .any(|g| match (gateway, resolve_gateway_ref(g, rule_ns)) {
                (None, Ok(None)) => true,
                (Some(id), Ok(Some(named))) => *named == *id,
                _ => false,
            })
    }
}

/// The TLS inspector listener filter, for listeners matching on SNI.
pub(crate) fn tls_inspector() -> ListenerFilter {
    ListenerFilter {
        name: TLS_INSPECTOR.to_string(),
        config_type: Some(ListenerFilterConfig::TypedConfig(to_any(
            &TlsInspector::default(),
        ))),
        ..Default::default()
    }
}

/// The network filter of `proxy`.
pub(crate) fn tcp_filter(proxy: &TcpProxy) -> Filter {
    Filter {
        name: TCP_PROXY_FILTER.to_string(),
        config_type: Some(ConfigType::TypedConfig(to_any(proxy))),
    }
}

/// What the rules of a sidecar TCP port's owners give it (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct SidecarL4 {
    /// Chains matched on SNI or destination prefixes, in rule order.
    pub(crate) matched: Vec<FilterChain>,
    /// The first route without a condition on the port.
    pub(crate) default: Option<TcpProxy>,
    /// Whether some chain matches on SNI (the listener needs the TLS inspector).
    pub(crate) sni: bool,
}

/// The chains the VirtualServices of `owners` give TCP port `port`; each
/// problem with the key of its rule.
pub(crate) fn sidecar<M: ModelRead + ?Sized>(
    model: &M,
    owners: &BTreeSet<Hostname>,
    port: u16,
    problems: &mut Vec<(std::sync::Arc<str>, Problem)>,
) -> SidecarL4 {
    let mut out = SidecarL4::default();
    let Some(rules) = model.rules() else {
        return out;
    };
    let mut taken = Taken::default();
    for owner in owners {
        if let Some(vs) = rules.virtual_service_for(owner) {
            let mut mine = Vec::new();
            let rule = (&*vs.rule.namespace, &**vs.spec);
            one_rule(
                model,
                rule,
                (Kinds::TlsAndTcp, None),
                port,
                &mut taken,
                &mut out,
                &mut mine,
            );
            problems.extend(mine.into_iter().map(|p| (vs.rule.key.clone(), p)));
        }
    }
    out
}

/// The problems `host`'s VirtualService has on its TCP port `port`: what
/// reports show next to the model's own.
pub fn problems<M: ModelRead + ?Sized>(model: &M, host: &Hostname, port: u16) -> Vec<Problem> {
    let mut problems = Vec::new();
    if let Some(vs) = model.rules().and_then(|r| r.virtual_service_for(host)) {
        let mut out = SidecarL4::default();
        let rule = (&*vs.rule.namespace, &**vs.spec);
        let taken = &mut Taken::default();
        one_rule(
            model,
            rule,
            (Kinds::TlsAndTcp, None),
            port,
            taken,
            &mut out,
            &mut problems,
        );
    }
    problems
}

/// The filter chains of a gateway's TCP server on `port`: the `tcp` routes
/// of `bound` (the VirtualServices bound to the server, in merge order, each
/// with its rule's key and namespace), as on a sidecar, the first
/// unconditional route as the last chain; each problem with its rule's key.
pub(crate) fn gateway_chains<M: ModelRead + ?Sized>(
    model: &M,
    gateway: &str,
    bound: &[(&std::sync::Arc<str>, &str, &VirtualService)],
    port: u16,
    problems: &mut Vec<(std::sync::Arc<str>, Problem)>,
) -> Vec<FilterChain> {
    let (mut out, mut taken) = (SidecarL4::default(), Taken::default());
    for (key, ns, spec) in bound {
        let mut mine = Vec::new();
        one_rule(
            model,
            (ns, spec),
            (Kinds::Tcp, Some(gateway)),
            port,
            &mut taken,
            &mut out,
            &mut mine,
        );
        problems.extend(mine.into_iter().map(|p| ((*key).clone(), p)));
    }
    let mut chains = out.matched;
    chains.extend(out.default.map(|p| FilterChain {
        filters: vec![tcp_filter(&p)],
        ..Default::default()
    }));
    chains
}

/// What the port's chains already match.
#[derive(Default)]
struct Taken {
    sni: HashSet<String>,
    subnets: HashSet<Vec<(String, u32)>>,
}

fn on_port(p: Option<u32>, port: u16) -> bool {
    p.is_none_or(|p| p == u32::from(port))
}

/// Which routes of a VirtualService a port takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kinds {
    /// A sidecar's TCP port: `tls` and `tcp` routes.
    TlsAndTcp,
    /// A gateway's TCP server: `tcp` routes (its `tls` routes are for
    /// PASSTHROUGH servers).
    Tcp,
}

fn one_rule<M: ModelRead + ?Sized>(
    model: &M,
    (ns, spec): (&str, &VirtualService),
    (kinds, gateway): (Kinds, Option<&str>),
    port: u16,
    taken: &mut Taken,
    out: &mut SidecarL4,
    problems: &mut Vec<Problem>,
) {
    let proxy = |dests: &Option<Vec<RouteDestination>>, path: &str| {
        tcp_proxy(model, ns, dests.as_deref().unwrap_or_default(), path)
    };
    let tls = spec
        .tls
        .iter()
        .flatten()
        .filter(|_| kinds == Kinds::TlsAndTcp);
    for (i, route) in tls.enumerate() {
        let path = format!("tls[{i}]");
        let mut names = Vec::new();
        for (j, m) in route.matches.iter().flatten().enumerate() {
            let applies = BlockConditions::from(m).apply(model, ns, gateway);
            if !on_port(m.port, port) || !applies {
                continue;
            }
            for sni in m.sni_hosts.iter().flatten() {
                let sni = sni.trim().to_ascii_lowercase();
                if taken.sni.contains(&sni) || names.contains(&sni) {
                    problems.push(Problem::warning(
                        "DP2105",
                        format!("{path}.match[{j}].sniHosts"),
                        format!("SNI {sni:?} on port {port} is already routed: left out here"),
                    ));
                } else if !sni.is_empty() {
                    names.push(sni);
                }
            }
        }
        if names.is_empty() {
            continue;
        }
        match proxy(&route.route, &path) {
            Ok(p) => {
                taken.sni.extend(names.iter().cloned());
                out.sni = true;
                out.matched.push(chain(
                    FilterChainMatch {
                        server_names: names,
                        ..Default::default()
                    },
                    &p,
                ));
            }
            Err(p) => problems.push(p),
        }
    }
    for (i, route) in spec.tcp.iter().flatten().enumerate() {
        let path = format!("tcp[{i}]");
        let matches = route.matches.as_deref().unwrap_or_default();
        let mut unconditional = matches.is_empty();
        let mut prefix_sets = Vec::new();
        for (j, m) in matches.iter().enumerate() {
            let applies = BlockConditions::from(m).apply(model, ns, gateway);
            if !on_port(m.port, port) || !applies {
                continue;
            }
            let subnets = m.destination_subnets.as_deref().unwrap_or_default();
            if subnets.is_empty() {
                unconditional = true;
                continue;
            }
            let mut ranges = Vec::new();
            for (k, s) in subnets.iter().enumerate() {
                match cidr(s) {
                    Ok(r) => ranges.push(r),
                    Err(why) => problems.push(Problem::error(
                        "DP2112",
                        format!("{path}.match[{j}].destinationSubnets[{k}]"),
                        format!("{why}: subnet left out"),
                    )),
                }
            }
            ranges.sort();
            ranges.dedup();
            if ranges.is_empty() {
                continue;
            }
            if taken.subnets.contains(&ranges) || prefix_sets.contains(&ranges) {
                problems.push(Problem::warning(
                    "DP2113",
                    format!("{path}.match[{j}].destinationSubnets"),
                    format!("these subnets on port {port} are already routed: left out here"),
                ));
                continue;
            }
            prefix_sets.push(ranges);
        }
        let wanted_default = unconditional && out.default.is_none();
        if prefix_sets.is_empty() && !wanted_default {
            continue;
        }
        match proxy(&route.route, &path) {
            Ok(p) => {
                for ranges in prefix_sets {
                    taken.subnets.insert(ranges.clone());
                    let prefix_ranges = ranges
                        .into_iter()
                        .map(|(address_prefix, len)| CidrRange {
                            address_prefix,
                            prefix_len: Some(UInt32Value { value: len }),
                        })
                        .collect();
                    out.matched.push(chain(
                        FilterChainMatch {
                            prefix_ranges,
                            ..Default::default()
                        },
                        &p,
                    ));
                }
                if wanted_default {
                    out.default = Some(p);
                }
            }
            Err(p) => problems.push(p),
        }
    }
}

fn chain(m: FilterChainMatch, proxy: &TcpProxy) -> FilterChain {
    FilterChain {
        filter_chain_match: Some(m),
        filters: vec![tcp_filter(proxy)],
        ..Default::default()
    }
}

/// `a.b.c.d/n`, `x::y/n` or a bare address (the whole address), as Envoy's
/// prefix range: the address and the prefix length.
fn cidr(s: &str) -> Result<(String, u32), String> {
    let s = s.trim();
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let ip: std::net::IpAddr = addr
        .parse()
        .map_err(|_| format!("{s:?} is not an IP address or CIDR prefix"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => max,
        Some(l) => l
            .parse::<u32>()
            .ok()
            .filter(|l| *l <= max)
            .ok_or_else(|| format!("{s:?} has a prefix length outside 0..={max}"))?,
    };
    Ok((ip.to_string(), len))
}

/// The `tcp_proxy` to a route's destinations (weighted clusters for several).
/// A destination is `outbound|<port>|<subset>|<host>` with the given port, or
/// the service's only one; a destination without a service (`DP2106`) or
/// without a port to pick (`DP2107`) drops the route.
pub(crate) fn tcp_proxy<M: ModelRead + ?Sized>(
    model: &M,
    namespace: &str,
    dests: &[RouteDestination],
    path: &str,
) -> Result<TcpProxy, Problem> {
    let mut clusters = Vec::new();
    for (k, d) in dests.iter().enumerate() {
        let at = format!("{path}.route[{k}].destination");
        let dest = d.destination.as_ref();
        let host = dest
            .and_then(|d| d.host.as_deref())
            .filter(|h| !h.trim().is_empty())
            .map(|h| resolve_host(h, namespace))
            .ok_or_else(|| Problem::error("DP2106", &at, "the route needs a destination host"))?;
        let svc = model.service(&host).ok_or_else(|| {
            Problem::error("DP2106", &at, format!("no service {host}: route dropped"))
        })?;
        let port = match dest.and_then(|d| d.port.as_ref()).and_then(|p| p.number) {
            Some(n) => u16::try_from(n).ok(),
            None if svc.ports.len() == 1 => Some(svc.ports[0].number),
            None => None,
        }
        .ok_or_else(|| {
            Problem::error(
                "DP2107",
                &at,
                format!("{host} has several ports and the route names none: route dropped"),
            )
        })?;
        let name = match dest.and_then(|d| d.subset.as_deref()) {
            Some(s) => subset_cluster_name(port, s, &host),
            None => cluster_name(port, &host),
        };
        let weight = d.weight.unwrap_or(if dests.len() == 1 { 100 } else { 0 });
        clusters.push((name.to_string(), u32::try_from(weight).unwrap_or(0)));
    }
    let stat_prefix = clusters.first().map(|c| c.0.clone()).unwrap_or_default();
    let spec = match clusters.len() {
        0 => {
            return Err(Problem::error(
                "DP2106",
                format!("{path}.route"),
                "the route needs a destination: route dropped",
            ));
        }
        1 => ClusterSpecifier::Cluster(clusters.remove(0).0),
        _ => ClusterSpecifier::WeightedClusters(WeightedCluster {
            clusters: clusters
                .into_iter()
                .map(|(name, weight)| ClusterWeight {
                    name,
                    weight,
                    ..Default::default()
                })
                .collect(),
        }),
    };
    Ok(TcpProxy {
        stat_prefix,
        cluster_specifier: Some(spec),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltapilot_model::state::ModelState;
    use deltapilot_model::state::mk::{rule, svc};
    use deltapilot_proto::event::Payload;
    use deltapilot_proto::{self as pb, ConfigKind};

    /// A TCP service `host` on `port`.
    fn tcp_svc(host: &str, port: u32) -> pb::Event {
        let mut e = svc("k", 0, "ns", host, &[port]);
        if let Some(Payload::ServiceUpsert(u)) = e.payload.as_mut()
            && let Some(s) = u.service.as_mut()
        {
            s.ports[0].protocol = pb::Protocol::Tcp as i32;
        }
        e
    }

    fn model(spec: &str) -> ModelState {
        ModelState::from_events(&[
            tcp_svc("db.ns.svc.cluster.local", 5432),
            tcp_svc("v1.ns.svc.cluster.local", 5433),
            rule("k", 0, ConfigKind::VirtualService, "ns", "db", spec),
        ])
    }

    fn codes(problems: &[Problem]) -> Vec<(&str, &str)> {
        problems.iter().map(|p| (p.code, p.path.as_str())).collect()
    }

    #[test]
    fn routes_give_chains_a_default_and_report_what_they_cannot_do() {
        let m = model(
            r#"{"hosts":["db"],
                "tls":[{"match":[{"sniHosts":["a.example","a.example"]}],"route":[{"destination":{"host":"v1"}}]}],
                "tcp":[
                  {"match":[{"destinationSubnets":["10.0.0.0/8","bad/8"]}],"route":[{"destination":{"host":"v1"}}]},
                  {"match":[{"destinationSubnets":["10.0.0.0/8"]}],"route":[{"destination":{"host":"v1"}}]},
                  {"match":[{"port":9999}],"route":[{"destination":{"host":"nowhere"}}]},
                  {"route":[{"destination":{"host":"v1"},"weight":60},{"destination":{"host":"db"},"weight":40}]},
                  {"route":[{"destination":{"host":"nowhere"}}]}
                ]}"#,
        );
        let owners = [deltapilot_model::Hostname::new("db.ns.svc.cluster.local")].into();
        let mut problems = Vec::new();
        let l4 = sidecar(&m, &owners, 5432, &mut problems);
        let problems: Vec<Problem> = problems.into_iter().map(|(_, p)| p).collect();
        assert_eq!(
            codes(&problems),
            [
                ("DP2105", "tls[0].match[0].sniHosts"),
                ("DP2112", "tcp[0].match[0].destinationSubnets[1]"),
                ("DP2113", "tcp[1].match[0].destinationSubnets"),
            ],
            "a route on another port and the routes after the default are never reached"
        );
        assert!(l4.sni);
        assert_eq!(l4.matched.len(), 2, "one SNI chain, one subnet chain");
        let sni = l4.matched[0].filter_chain_match.as_ref().expect("match");
        assert_eq!(sni.server_names, ["a.example"]);
        let subnet = l4.matched[1].filter_chain_match.as_ref().expect("match");
        assert_eq!(subnet.prefix_ranges.len(), 1);
        assert_eq!(subnet.prefix_ranges[0].address_prefix, "10.0.0.0");
        let default = l4.default.expect("the first unconditional route");
        let Some(ClusterSpecifier::WeightedClusters(w)) = default.cluster_specifier else {
            panic!("weighted: {default:?}");
        };
        let got: Vec<(&str, u32)> = w
            .clusters
            .iter()
            .map(|c| (c.name.as_str(), c.weight))
            .collect();
        assert_eq!(
            got,
            [
                ("outbound|5433||v1.ns.svc.cluster.local", 60),
                ("outbound|5432||db.ns.svc.cluster.local", 40)
            ]
        );
        let reported = problems_of(&m);
        assert_eq!(codes(&reported), codes(&problems), "reports see the same");
    }

    fn problems_of(m: &ModelState) -> Vec<Problem> {
        problems(
            m,
            &deltapilot_model::Hostname::new("db.ns.svc.cluster.local"),
            5432,
        )
    }

    #[test]
    fn a_route_to_a_missing_service_is_dropped_and_reported() {
        let m = model(r#"{"hosts":["db"],"tcp":[{"route":[{"destination":{"host":"nowhere"}}]}]}"#);
        assert_eq!(
            codes(&problems_of(&m)),
            [("DP2106", "tcp[0].route[0].destination")]
        );
    }

    #[test]
    fn prefixes_parse_with_and_without_length() {
        assert_eq!(cidr("10.0.0.0/8"), Ok(("10.0.0.0".into(), 8)));
        assert_eq!(cidr(" 10.1.2.3 "), Ok(("10.1.2.3".into(), 32)));
        assert_eq!(cidr("fd00::/16"), Ok(("fd00::".into(), 16)));
        assert!(cidr("10.0.0.0/33").is_err());
        assert!(cidr("ten/8").is_err());
        assert!(cidr("fd00::/129").is_err());
    }
}
