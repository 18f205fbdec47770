//! TLS `PASSTHROUGH` servers: the VirtualServices bound to the server's
//! Gateway forward TLS connections untouched, chosen by SNI, through their
//! `tls` routes (Istio's `buildGatewayNetworkFiltersFromTLSRoutes`).
//!
//! For each bound VirtualService (merge order), each `tls` route and each of
//! its match blocks on this port (no `port`, or the server's): the match's
//! `sniHosts` meet the server's hosts its namespace may use (the more
//! specific of each matching pair), and the names not already taken on the
//! listener become one filter chain matched on them, with a `tcp_proxy` to
//! the route's destination (weighted clusters for several). A name already
//! taken is left out (`DP2105`): the first rule keeps it, as in Istio.
//!
//! A destination is `outbound|<port>|<subset>|<host>` with the given port, or
//! the service's only one; a destination without a service (`DP2106`) or
//! without a port to pick (`DP2107`) drops the route.

use std::collections::BTreeSet;
use std::sync::Arc;

use envoy_types::pb::envoy::config::listener::v3::{
    Filter, FilterChain, FilterChainMatch, filter::ConfigType,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{
    TcpProxy,
    tcp_proxy::{ClusterSpecifier, WeightedCluster, weighted_cluster::ClusterWeight},
};

use deltapilot_model::Hostname;
use deltapilot_model::rules::{Problem, RouteDestination, RuleIndex, host_matches, resolve_host};

use super::super::ModelRead;
use super::super::common::{cluster_name, to_any};
use super::super::policy::subset_cluster_name;
use super::Placed;

const TCP_PROXY_FILTER: &str = "envoy.filters.network.tcp_proxy";

/// The filter chains of passthrough server `p`; `taken` holds the SNI names
/// already matched on the listener (and gains these chains').
pub(crate) fn chains<M: ModelRead + ?Sized>(
    model: &M,
    rules: &RuleIndex,
    p: &Placed<'_>,
    taken: &mut BTreeSet<String>,
    problems: &mut Vec<(Arc<str>, Problem)>,
) -> Vec<FilterChain> {
    let mut out = Vec::new();
    for (rule, spec) in rules.virtual_services_for_gateway(p.gateway) {
        let ns = &*rule.namespace;
        let usable: Vec<&Hostname> = p
            .server
            .hosts
            .iter()
            .filter(|sh| sh.namespace.as_deref().is_none_or(|n| n == ns))
            .map(|sh| &sh.host)
            .collect();
        for (i, route) in spec.tls.iter().flatten().enumerate() {
            let path = format!("tls[{i}]");
            let mut tcp: Option<Result<TcpProxy, Problem>> = None;
            for (j, m) in route.matches.iter().flatten().enumerate() {
                if m.port.is_some_and(|port| port != u32::from(p.server.port)) {
                    continue;
                }
                let mut names = BTreeSet::new();
                for sni in m.sni_hosts.iter().flatten() {
                    let sni = Hostname::new(&sni.trim().to_ascii_lowercase());
                    for sh in &usable {
                        if host_matches(sh.as_str(), sni.as_str()) {
                            names.insert(sni.to_string());
                        } else if host_matches(sni.as_str(), sh.as_str()) {
                            names.insert(sh.to_string());
                        }
                    }
                }
                let (free, dup): (Vec<String>, Vec<String>) =
                    names.into_iter().partition(|n| !taken.contains(n));
                if !dup.is_empty() {
                    problems.push((
                        rule.key.clone(),
                        Problem::warning(
                            "DP2105",
                            format!("{path}.match[{j}].sniHosts"),
                            format!(
                                "SNI {dup:?} on gateway port {} is already routed by an \
                                 earlier rule or server: left out here",
                                p.server.port
                            ),
                        ),
                    ));
                }
                if free.is_empty() {
                    continue;
                }
                let proxy = tcp.get_or_insert_with(|| {
                    tcp_proxy(model, ns, route.route.as_deref().unwrap_or_default(), &path)
                });
                match proxy {
                    Ok(proxy) => {
                        taken.extend(free.iter().cloned());
                        out.push(FilterChain {
                            filter_chain_match: Some(FilterChainMatch {
                                server_names: free,
                                ..Default::default()
                            }),
                            filters: vec![Filter {
                                name: TCP_PROXY_FILTER.to_string(),
                                config_type: Some(ConfigType::TypedConfig(to_any(&*proxy))),
                            }],
                            ..Default::default()
                        });
                    }
                    Err(_) => break,
                }
            }
            if let Some(Err(problem)) = tcp {
                problems.push((rule.key.clone(), problem));
            }
        }
    }
    out
}

/// The `tcp_proxy` to a route's destinations.
fn tcp_proxy<M: ModelRead + ?Sized>(
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
            .ok_or_else(|| Problem::error("DP2106", &at, "a TLS route needs a destination host"))?;
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
                "a TLS route needs a destination: route dropped",
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
