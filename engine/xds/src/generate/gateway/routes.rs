//! The route configurations of one gateway port: virtual hosts from the
//! VirtualServices bound to its servers' Gateways, merged per host (see the
//! parent module for the rules).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::config::route::v3::{
    Route, RouteConfiguration, VirtualHost, route_match::PathSpecifier,
    virtual_host::TlsRequirementType,
};
use envoy_types::pb::google::protobuf::BoolValue;

use deltapilot_model::Hostname;
use deltapilot_model::rules::{
    BoundVirtualService, Problem, RuleIndex, ServerMode, host_matches, resolve_host,
};

use super::super::ModelRead;
use super::super::common::encode;
use super::super::lds::{FAULT_FILTER, HttpFilters};
use super::super::rds;
use super::super::vs_routes::CORS_FILTER;
use super::super::vs_routes::{Flavor, translate};
use super::{Placed, PortServers};

/// What one port's route configurations came to.
#[derive(Debug, Default)]
pub(crate) struct PortRouteConfigs {
    /// Route configuration name → encoded bytes.
    pub(crate) configs: BTreeMap<String, Bytes>,
    /// Problems translating the bound VirtualServices, by object key.
    pub(crate) problems: Vec<(Arc<str>, Problem)>,
}

/// What the listener of the port needs to know about its routes: which
/// optional HTTP filters its connection managers must carry (a route's fault
/// or CORS config does nothing without its filter in the chain).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ListenerNeeds {
    /// The optional filters some route of the port uses.
    pub(crate) filters: HttpFilters,
}

/// One virtual host being assembled.
struct VHost {
    routes: Vec<Route>,
    require_tls: bool,
}

/// The route configurations of `port` and what its listener needs.
pub(crate) fn port_routes<M: ModelRead + ?Sized>(
    model: &M,
    rules: &RuleIndex,
    port: u16,
    servers: &PortServers<'_>,
) -> (ListenerNeeds, PortRouteConfigs) {
    let mut out = PortRouteConfigs::default();
    let mut needs = ListenerNeeds::default();
    // Route configuration name → its servers, in merge order.
    let mut by_route: BTreeMap<String, Vec<&Placed<'_>>> = BTreeMap::new();
    for p in &servers.servers {
        if p.server.mode != ServerMode::Passthrough {
            by_route.entry(p.route_name()).or_default().push(p);
        }
    }
    // Routes of one VirtualService for one Gateway, translated once.
    let mut cache: HashMap<(Arc<str>, Arc<str>), Vec<Route>> = HashMap::new();
    for (name, placed) in by_route {
        let mut vhosts: BTreeMap<Hostname, VHost> = BTreeMap::new();
        for p in placed {
            let redirect = matches!(
                p.server.mode,
                ServerMode::Http {
                    https_redirect: true
                }
            );
            for (rule, spec) in rules.virtual_services_for_gateway(p.gateway) {
                let meets = intersect(p, &rule.namespace, spec.hosts.iter().flatten());
                if meets.is_empty() {
                    continue;
                }
                let routes = cache
                    .entry((p.gateway.clone(), rule.key.clone()))
                    .or_insert_with(|| {
                        let pattern = Hostname::new("*");
                        let bound = BoundVirtualService {
                            rule,
                            spec,
                            pattern: &pattern,
                        };
                        let mut problems = Vec::new();
                        let gw: Option<&str> = Some(p.gateway);
                        let routes =
                            translate(model, &bound, port, Flavor::Sidecar, gw, &mut problems);
                        out.problems.extend(
                            problems
                                .into_iter()
                                .map(|pr| (rule.key.clone(), with_port(pr, port))),
                        );
                        routes
                    });
                for r in routes.iter() {
                    let f = &r.typed_per_filter_config;
                    needs.filters.fault |= f.contains_key(FAULT_FILTER);
                    needs.filters.cors |= f.contains_key(CORS_FILTER);
                }
                for h in meets {
                    let v = vhosts.entry(h).or_insert_with(|| VHost {
                        routes: Vec::new(),
                        require_tls: false,
                    });
                    v.routes.extend(routes.iter().cloned());
                    v.require_tls |= redirect;
                }
            }
            if redirect {
                for sh in &p.server.hosts {
                    vhosts
                        .entry(sh.host.clone())
                        .or_insert_with(|| VHost {
                            routes: Vec::new(),
                            require_tls: true,
                        })
                        .require_tls = true;
                }
            }
        }
        let mut list: Vec<VirtualHost> = vhosts
            .into_iter()
            .map(|(h, v)| VirtualHost {
                name: format!("{h}:{port}"),
                domains: domains(&h, port),
                routes: catch_all_last(v.routes),
                require_tls: if v.require_tls {
                    TlsRequirementType::All as i32
                } else {
                    TlsRequirementType::None as i32
                },
                include_request_attempt_count: true,
                ..Default::default()
            })
            .collect();
        if list.is_empty() {
            list.push(VirtualHost {
                name: format!("blackhole:{port}"),
                domains: vec!["*".to_string()],
                ..Default::default()
            });
        }
        list.sort_by(|a, b| a.name.cmp(&b.name));
        // Through rds's field writer: a route with a fault and a CORS policy
        // has two per-filter entries, which a plain encode writes in a varying
        // order. Fields in tag order (name, virtual_hosts, validate_clusters)
        // concatenate to the whole message's encoding.
        let head = rds::assemble(name.clone(), list.into_iter().map(rds::vhost_field));
        let tail = encode(&RouteConfiguration {
            validate_clusters: Some(BoolValue { value: false }),
            ..Default::default()
        });
        let bytes = Bytes::from([&head[..], &tail[..]].concat());
        out.configs.insert(name, bytes);
    }
    (needs, out)
}

/// The hosts where a VirtualService of `vs_namespace` with `vs_hosts` meets
/// server `p`: for each pair that matches, the more specific (sorted, each once).
fn intersect<'h>(
    p: &Placed<'_>,
    vs_namespace: &str,
    vs_hosts: impl Iterator<Item = &'h String>,
) -> Vec<Hostname> {
    let usable: Vec<&Hostname> = p
        .server
        .hosts
        .iter()
        .filter(|sh| sh.namespace.as_deref().is_none_or(|n| n == vs_namespace))
        .map(|sh| &sh.host)
        .collect();
    let mut out = Vec::new();
    for vh in vs_hosts {
        let vh = resolve_host(vh, vs_namespace);
        for sh in &usable {
            if host_matches(sh.as_str(), vh.as_str()) {
                out.push(vh.clone());
            } else if host_matches(vh.as_str(), sh.as_str()) {
                out.push((*sh).clone());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Istio's gateway domains: the host and the host with any port (a wildcard
/// host keeps its own port, since a domain takes one wildcard; `*` alone).
fn domains(h: &Hostname, port: u16) -> Vec<String> {
    let h = h.as_str();
    if h == "*" {
        vec!["*".to_string()]
    } else if h.starts_with('*') {
        vec![h.to_string(), format!("{h}:{port}")]
    } else {
        vec![h.to_string(), format!("{h}:*")]
    }
}

/// Moves catch-all routes (prefix `/` with no other condition) after the
/// others, keeping the order within each group (Istio's `SortVHostRoutes`):
/// a merged VirtualService's catch-all must not hide the next one's routes.
fn catch_all_last(routes: Vec<Route>) -> Vec<Route> {
    let (all, specific): (Vec<Route>, Vec<Route>) = routes.into_iter().partition(is_catch_all);
    specific.into_iter().chain(all).collect()
}

fn is_catch_all(r: &Route) -> bool {
    let Some(m) = &r.r#match else {
        return false;
    };
    let path = match &m.path_specifier {
        Some(PathSpecifier::Prefix(p)) => p == "/",
        Some(PathSpecifier::SafeRegex(re)) => re.regex == "*" || re.regex == ".*",
        _ => false,
    };
    path && m.headers.is_empty() && m.query_parameters.is_empty() && m.grpc.is_none()
}

/// A route problem, with the gateway port in its message.
fn with_port(mut p: Problem, port: u16) -> Problem {
    p.message = format!("on gateway port {port}: {}", p.message);
    p
}
