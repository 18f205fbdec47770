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
//! Destinations as `l4::tcp_proxy` makes them (`DP2106`, `DP2107`).

use std::collections::BTreeSet;
use std::sync::Arc;

use envoy_types::pb::envoy::config::listener::v3::{FilterChain, FilterChainMatch};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::TcpProxy;

use deltapilot_model::Hostname;
use deltapilot_model::rules::{Problem, RuleIndex, host_matches};

use super::super::ModelRead;
use super::super::l4::{tcp_filter, tcp_proxy};
use super::Placed;

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
                let applies = crate::generate::l4::BlockConditions::from(m).apply(
                    model,
                    ns,
                    Some(&**p.gateway),
                );
                if m.port.is_some_and(|port| port != u32::from(p.server.port)) || !applies {
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
                            filters: vec![tcp_filter(proxy)],
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
