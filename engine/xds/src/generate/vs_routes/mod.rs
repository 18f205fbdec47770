//! VirtualService HTTP routes → Envoy routes, for one host on one port.
//!
//! A host with a VirtualService (see `RuleIndex::virtual_service_for`) gets the
//! rule's routes instead of its default one, in order: one Envoy `Route` per
//! `match` block (one catch-all `prefix: /` when a route has none). Nothing is
//! appended, so a request that matches none gets 404 from the router, as in
//! Istio. A host without one keeps its default route, byte for byte.
//!
//! ## Policy for bad rules (written, so operators can rely on it)
//! - A problem in the object itself (schema, hosts, see `rules::Problem`) rejects
//!   the object in the model: the host keeps its default route.
//! - A problem in one HTTP route **drops that route** (the others stay, in order)
//!   and is reported with code `DP2xxx` and the route's path:
//!   - `DP2001` a regex Envoy's RE2 would refuse;
//!   - `DP2002` a `StringMatch` with none or several of exact/prefix/regex;
//!   - `DP2003` weights of several destinations that do not total 100;
//!   - `DP2004` a destination host with no service;
//!   - `DP2005` a subset no DestinationRule of that host defines;
//!   - `DP2006` a destination port the service does not serve (or no port, and
//!     the service has several and the route's port is not one of them);
//!   - `DP2007` a route with no destination, redirect or direct response;
//!   - `DP2008` a duration that does not parse.
//! - A field that is valid but not implemented, or that the client kind cannot
//!   take, is left out of that route and reported (`DP2010`); proxyless gRPC
//!   clients get only what gRPC's xDS client implements (see `Flavor::Grpc`).
//!
//! ## Defaults (Istio's)
//! - destination port: the given one; else the service's only port; else the
//!   port of the route configuration (Istio's `GetDestinationCluster`);
//! - `timeout`: absent means none (`0s`), not Envoy's 15 s;
//! - `retries`: absent means Istio's default policy: 2 retries on
//!   `connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes`
//!   with 503 retriable and the previous-hosts predicate; `attempts: 0` turns
//!   retries off. A host without a VirtualService keeps its default route, which
//!   has no retry policy (unlike Istio's), so that resources without rules stay
//!   exactly what they were.
//!
//! Fault injection: `fault` (fixed delay, HTTP abort, percentages) becomes the
//! fault filter's per-route config; the sidecar listeners carry the filter
//! ahead of the router while any rule injects faults. `corsPolicy` becomes the
//! CORS filter's per-route config likewise (see `cors`).
//!
//! Proxyless gRPC gets faults too (gRFC A33): its listener carries the fault
//! filter while the host's VirtualService injects faults (see
//! `lds::grpc_listener`).
//!
//! Per-match `gateways`: a match block that names gateways applies only where
//! it names them: to sidecars and proxyless clients when it lists `mesh`, to a
//! Gateway's routes when it lists that Gateway (`ns/name`, or `name` in the
//! rule's namespace). Without the field, the rule's own binding decides.
//!
//! `sourceLabels` and `sourceNamespace`: a block with a selector applies only when the
//! model read says the view's proxies satisfy it (`ModelRead::source_matches`:
//! a sidecar view keyed by the selectors its proxies satisfy; the snapshot's
//! own resources, and so routers and proxyless clients, satisfy none).
//!
//! What it does NOT do: `tcp`/`tls` routes, CORS for proxyless gRPC
//! (reported, `DP2010`).

mod action;
mod cors;
mod matching;

pub(crate) use cors::CORS_FILTER;

use envoy_types::pb::envoy::config::route::v3::{
    Route, RouteAction, RouteMatch, route::Action, route_action::ClusterSpecifier,
    route_match::PathSpecifier,
};
use envoy_types::pb::google::protobuf::Duration;

use deltapilot_model::rules::{BoundVirtualService, HttpRoute, Problem};
use deltapilot_model::{Hostname, Service};

use super::ModelRead;
use super::common::cluster_name;
use super::policy::hash_policies;

#[cfg(test)]
use super::policy::parse_duration;

/// Which client a route configuration is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// Envoy sidecars: everything this module implements.
    Sidecar,
    /// Proxyless gRPC: weighted clusters, path and header matching, timeouts as
    /// `max_stream_duration`, retries (gRFCs A28, A31, A44). Everything else is
    /// left out and reported, since gRPC NACKs or misroutes it.
    Grpc,
}

/// The routes of `host`'s virtual host on `port`: the VirtualService's, or the
/// default route.
pub(crate) fn routes_for<M: ModelRead + ?Sized>(
    model: &M,
    host: &Hostname,
    port: u16,
    flavor: Flavor,
) -> Vec<Route> {
    match model.rules().and_then(|r| r.virtual_service_for(host)) {
        Some(vs) => translate(model, &vs, port, flavor, None, &mut Vec::new()),
        None => {
            let mut route = default_route(host, port);
            if let Some(dr) = model.rules().and_then(|r| r.destination_rule_for(host))
                && let Some(Action::Route(ra)) = route.action.as_mut()
            {
                ra.hash_policy = action::for_flavor(hash_policies(&dr, port, None), flavor);
            }
            vec![route]
        }
    }
}

/// The problems translating `host`'s VirtualService on `port` finds (empty
/// without one): what reports and tools show next to the model's own.
pub fn route_problems<M: ModelRead + ?Sized>(
    model: &M,
    host: &Hostname,
    port: u16,
    grpc: bool,
) -> Vec<Problem> {
    let flavor = if grpc { Flavor::Grpc } else { Flavor::Sidecar };
    let mut problems = Vec::new();
    if let Some(vs) = model.rules().and_then(|r| r.virtual_service_for(host)) {
        translate(model, &vs, port, flavor, None, &mut problems);
    }
    problems
}

/// The default route: prefix `/` → the host's cluster, timeout disabled.
pub(crate) fn default_route(host: &Hostname, port: u16) -> Route {
    Route {
        name: "default".to_string(),
        r#match: Some(RouteMatch {
            path_specifier: Some(PathSpecifier::Prefix("/".to_string())),
            ..Default::default()
        }),
        action: Some(Action::Route(RouteAction {
            cluster_specifier: Some(ClusterSpecifier::Cluster(
                cluster_name(port, host).to_string(),
            )),
            timeout: Some(Duration::default()),
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// What translating one route needs to know.
pub(crate) struct Cx<'a, M: ?Sized> {
    pub(crate) model: &'a M,
    /// The rule's namespace (short destination hosts resolve in it).
    pub(crate) namespace: &'a str,
    /// The port of the route configuration.
    pub(crate) port: u16,
    pub(crate) flavor: Flavor,
    /// The Gateway (`ns/name`) whose routes these are; `None` for sidecars
    /// and proxyless clients (`mesh`).
    pub(crate) gateway: Option<&'a str>,
}

/// Whether match block `m` applies where `cx` generates (see the module doc).
fn block_applies<M: ModelRead + ?Sized>(
    cx: &Cx<'_, M>,
    m: Option<&deltapilot_model::rules::HttpMatch>,
) -> bool {
    let Some(m) = m else {
        return true;
    };
    let conditions = crate::generate::l4::BlockConditions {
        labels: m.source_labels.as_ref(),
        namespace: m.source_namespace.as_deref(),
        gateways: m.gateways.as_deref(),
    };
    conditions.apply(cx.model, cx.namespace, cx.gateway)
}

pub(crate) fn translate<M: ModelRead + ?Sized>(
    model: &M,
    vs: &BoundVirtualService<'_>,
    port: u16,
    flavor: Flavor,
    gateway: Option<&str>,
    problems: &mut Vec<Problem>,
) -> Vec<Route> {
    let cx = Cx {
        model,
        namespace: &vs.rule.namespace,
        port,
        flavor,
        gateway,
    };
    let mut out = Vec::new();
    for (i, route) in vs.spec.http.iter().flatten().enumerate() {
        let path = format!("http[{i}]");
        let before = problems.len();
        match one_route(&cx, route, &path, problems) {
            Ok(mut routes) => out.append(&mut routes),
            Err(p) => {
                problems.truncate(before);
                problems.push(p);
            }
        }
    }
    out
}

/// The Envoy routes of one HTTP route (one per match block on this port), or
/// the problem that drops it.
fn one_route<M: ModelRead + ?Sized>(
    cx: &Cx<'_, M>,
    route: &HttpRoute,
    path: &str,
    problems: &mut Vec<Problem>,
) -> Result<Vec<Route>, Problem> {
    let action = action::action(cx, route, path, problems)?;
    let fault = action::fault_config(route, path)?;
    let cors = cors::cors_config(cx, route, path, problems)?;
    let edits = action::route_headers(cx, route, path, problems);
    let mut out = Vec::new();
    let blocks: Vec<_> = match &route.matches {
        Some(list) if !list.is_empty() => list.iter().map(Some).enumerate().collect(),
        _ => vec![(0, None)],
    };
    for (j, m) in blocks {
        let mpath = format!("{path}.match[{j}]");
        if !block_applies(cx, m) {
            continue;
        }
        let Some(rm) = matching::route_match(cx, m, &mpath)? else {
            continue;
        };
        let mut name = route.name.clone().unwrap_or_default();
        if let Some(mname) = m.and_then(|m| m.name.as_deref()) {
            name = if name.is_empty() {
                mname.to_string()
            } else {
                format!("{mname}.{name}")
            };
        }
        let mut r = Route {
            name,
            r#match: Some(rm),
            action: Some(action.clone()),
            ..Default::default()
        };
        edits.apply(&mut r);
        // With two entries the map's order varies: `rds` encodes such routes
        // with their entries sorted.
        if let Some(f) = &fault {
            r.typed_per_filter_config
                .insert(super::lds::FAULT_FILTER.to_string(), f.clone());
        }
        if let Some(c) = &cors {
            r.typed_per_filter_config
                .insert(CORS_FILTER.to_string(), c.clone());
        }
        out.push(r);
    }
    Ok(out)
}

/// Whether the VirtualService bound to `host` injects faults in some route
/// (its proxyless listener then carries the fault filter).
pub(crate) fn host_injects_faults<M: ModelRead + ?Sized>(model: &M, host: &Hostname) -> bool {
    model
        .rules()
        .and_then(|r| r.virtual_service_for(host))
        .is_some_and(|vs| vs.spec.http.iter().flatten().any(|r| r.fault.is_some()))
}

/// The service of `host`, if one is defined.
pub(crate) fn service_of<M: ModelRead + ?Sized>(
    model: &M,
    host: &Hostname,
) -> Option<std::sync::Arc<Service>> {
    model.service(host)
}

#[cfg(test)]
mod tests;
