//! Gateways → the listeners and route configurations of the router proxies they
//! select, as a pure function of the model and the Gateways that select one
//! proxy ([`gateway_resources`]).
//!
//! ## Merging (Istio's `MergeGateways`)
//! The servers of every selecting Gateway are taken in Gateway id order, then
//! spec order, and grouped by port. A port is either plain HTTP or TLS (SNI),
//! fixed by its first server; a later server of the other kind is dropped and
//! reported (`DP2101`).
//! - **Plain HTTP** servers of a port, from any Gateway, share one listener
//!   chain and one route configuration `http.<port>`.
//! - **HTTPS** (`SIMPLE`, `MUTUAL`) servers each get a filter chain matched on
//!   their hosts as SNI (`*` matches any), terminating TLS with the SDS secret
//!   `kubernetes://<credentialName>` (and, for `MUTUAL`, validating clients
//!   with the secret `kubernetes://<credentialName>-cacert`; Istio's names),
//!   and a route configuration of their own,
//!   `https.<port>.<portName>.<gateway>.<namespace>`. A server whose SNI
//!   names another server's on the port already uses is dropped (`DP2103`):
//!   Envoy refuses two chains with one match.
//! - **PASSTHROUGH** servers forward TLS untouched by SNI through the `tls`
//!   routes of the VirtualServices bound to them (see `passthrough`); they
//!   share TLS ports with HTTPS servers (SNI tells them apart).
//!
//! ## Virtual hosts (Istio's `buildGatewayHTTPRouteConfig`)
//! For each server, the VirtualServices bound to its Gateway are taken in merge
//! order (see `RuleIndex::virtual_services_for_gateway`). A VirtualService's
//! hosts (resolved in its namespace) meet the server's hosts that its
//! namespace may use (`ns/host` with `ns` its own, `*` or none); each
//! intersection is the more specific of the two. Each such host has one
//! virtual host `<host>:<port>` with domains `<host>` and `<host>:*`
//! (`<host>:<port>` for a wildcard, `*` alone for `*`). Several VirtualServices
//! meeting one host are **merged**: their routes are appended in merge order,
//! then catch-all routes move to the end (Istio's `SortVHostRoutes`). A
//! server with `httpsRedirect` sets `require_tls: ALL` on its virtual hosts
//! and adds one for each of its hosts no VirtualService meets. A route
//! configuration with no virtual host gets `blackhole:<port>` (domain `*`, no
//! routes: 404).
//!
//! Routes are translated exactly as for sidecars (`vs_routes`), with the
//! server's port as the route configuration's port; their problems are
//! reported with the VirtualService's key.
//!
//! ## Listeners
//! `0.0.0.0_<port>` at [`GenOptions::outbound_address`], always bound to its
//! port (a gateway has no capture in front of it, as in Istio). With
//! [`GenOptions::bind_outbound`] (Envoys sharing a host, as tests run them)
//! `enable_reuse_port: false`, so that a second Envoy on the same port fails
//! to bind instead of silently taking half the connections. TLS ports carry
//! the TLS inspector.
//!
//! Clusters and assignments: gateway routes name the same
//! `outbound|<port>|<subset>|<host>` clusters sidecars use, so a router's
//! view takes the snapshot's clusters and endpoints as they are.
//!
//! ## Problems (stable codes, with the key of the object they concern)
//! | code | severity | meaning | what happens |
//! | --- | --- | --- | --- |
//! | `DP2101` | error | a server whose port already serves the other kind (plain HTTP / TLS) | server dropped |
//! | `DP2103` | error | an HTTPS or PASSTHROUGH server whose SNI hosts overlap an earlier one's on the port | server dropped |
//! | `DP2104` | warning | MUTUAL `subjectAltNames` | not checked: any client the CA signed is accepted |
//! | `DP2105` | warning | a `tls` route SNI already routed on the port | left out of that route |
//! | `DP2106` | error | a `tls` route without a destination, or to a host without a service | route dropped |
//! | `DP2107` | error | a `tls` route destination without a port, to a service with several | route dropped |
//! | `DP2114` | warning | a TCP server no bound VirtualService `tcp` route serves | no listener on its port |
//! | `DP2112` | error | a sidecar `tcp` route `destinationSubnets` entry that is not a prefix (see `l4`) | subnet left out |
//! | `DP2113` | warning | a sidecar `tcp` route subnet set already routed on the port (see `l4`) | left out of that route |
//!
//! Route problems of the bound VirtualServices' `http` routes keep their
//! `vs_routes` codes.
//!
//! What it does NOT do: decide which Gateways select a proxy (the model:
//! `RuleIndex::gateways_selecting`) or read credentials (the server's SDS).
//!
//! TCP servers (one per port) forward through the bound VirtualServices'
//! `tcp` routes, as sidecars do (see `l4`).

mod listener;
mod passthrough;
mod routes;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use envoy_types::pb::envoy::config::listener::v3::FilterChain;

use deltapilot_model::rules::{
    GatewayServer, Problem, RuleIndex, ServerMode, VirtualService, host_matches, resolve_host,
};
use deltapilot_model::state::Touched;

use super::{GenOptions, ModelRead, l4, lds};
use crate::{Resource, ResourceMap};

/// What a router proxy selected by some Gateways receives, besides the
/// snapshot's clusters and assignments.
#[derive(Debug, Clone, Default)]
pub struct GatewayResources {
    /// Listeners `0.0.0.0_<port>`, one per server port.
    pub listeners: ResourceMap,
    /// Route configurations `http.<port>` and `https.<port>.<portName>.<gw>.<ns>`.
    pub routes: ResourceMap,
    /// The SDS secrets the listeners reference (certificates and CAs).
    pub secret_names: BTreeSet<Arc<str>>,
    /// What could not be generated as written, with the key of the object
    /// (Gateway or VirtualService) it concerns.
    pub problems: Vec<(Arc<str>, Problem)>,
}

/// Whether a batch may change some gateway's resources: a config object
/// changed (Gateways and VirtualServices are configs), or a service did (routes
/// resolve destinations against services).
pub fn gateway_touched(touched: &Touched) -> bool {
    touched.configs || !touched.services.is_empty() || !touched.rule_hosts.is_empty()
}

/// The prefix Istio gives a `credentialName`'s SDS secret
/// (`credentials.ToResourceName`): `kubernetes://NAME`.
pub const SECRET_PREFIX: &str = "kubernetes://";

/// The SDS secret of a SIMPLE or MUTUAL server with `credential`, as Istio
/// names it.
pub fn secret_name(credential: &str) -> Arc<str> {
    Arc::from(format!("{SECRET_PREFIX}{credential}"))
}

/// The CA secret of a MUTUAL server with `credential`, as Istio names it
/// (the credential's name with `-cacert`, then the prefix).
pub fn ca_secret_name(credential: &str) -> Arc<str> {
    Arc::from(format!("{SECRET_PREFIX}{credential}-cacert"))
}

/// One server kept for a port, with its Gateway.
#[derive(Debug, Clone)]
pub(crate) struct Placed<'a> {
    /// Gateway id (`<namespace>/<name>`).
    pub(crate) gateway: &'a Arc<str>,
    /// Gateway object key (for problems).
    pub(crate) key: &'a Arc<str>,
    /// Gateway name and namespace.
    pub(crate) name: &'a str,
    pub(crate) namespace: &'a str,
    pub(crate) server: &'a GatewayServer,
}

impl Placed<'_> {
    /// The route configuration this server's HTTP traffic uses.
    pub(crate) fn route_name(&self) -> String {
        match self.server.mode {
            ServerMode::Https { .. } => format!(
                "https.{}.{}.{}.{}",
                self.server.port, self.server.port_name, self.name, self.namespace
            ),
            _ => format!("http.{}", self.server.port),
        }
    }

    /// The SNI names of a TLS server (`*` matches any: none).
    pub(crate) fn sni(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .server
            .hosts
            .iter()
            .map(|h| h.host.as_str())
            .filter(|h| *h != "*")
            .map(str::to_string)
            .collect();
        if self.server.hosts.iter().any(|h| h.host.as_str() == "*") {
            out.clear();
        }
        out.sort();
        out.dedup();
        out
    }
}

/// The servers of one port, after merging.
#[derive(Debug, Clone, Default)]
pub(crate) struct PortServers<'a> {
    /// Whether the port is TLS (SNI chains) rather than plain HTTP.
    pub(crate) tls: bool,
    /// Whether the port is plain TCP (its one server's `tcp` routes).
    pub(crate) tcp: bool,
    pub(crate) servers: Vec<Placed<'a>>,
}

/// The listeners, route configurations and secret names for a router proxy
/// selected by `gateways` (ids `<namespace>/<name>`, as
/// `RuleIndex::gateways_selecting` answers; unknown ids are skipped). Pure:
/// the same model and ids give the same bytes.
pub fn gateway_resources<M: ModelRead + ?Sized>(
    model: &M,
    gateways: &[Arc<str>],
    opts: &GenOptions,
) -> GatewayResources {
    let mut out = GatewayResources::default();
    let Some(rules) = model.rules() else {
        return out;
    };
    let mut ids: Vec<&Arc<str>> = gateways.iter().collect();
    ids.sort();
    ids.dedup();
    let mut ports: BTreeMap<u16, PortServers<'_>> = BTreeMap::new();
    for id in ids {
        let Some((rule, gw)) = rules.gateway(id) else {
            continue;
        };
        for server in &gw.servers {
            let placed = Placed {
                gateway: id,
                key: &rule.key,
                name: &rule.name,
                namespace: &rule.namespace,
                server,
            };
            place(&mut ports, placed, &mut out.problems);
        }
    }
    for (port, servers) in &ports {
        if servers.tcp {
            let chains = servers
                .servers
                .iter()
                .flat_map(|p| tcp_chains(model, rules, p, &mut out.problems))
                .collect::<Vec<_>>();
            if !chains.is_empty() {
                let filters = lds::HttpFilters::default();
                let built = listener::listener(*port, servers, opts, filters, vec![chains]);
                out.listeners
                    .insert(Arc::new(Resource::new(built.0, built.1)));
            }
            continue;
        }
        let (listener, route_configs) = routes::port_routes(model, rules, *port, servers);
        out.problems.extend(route_configs.problems);
        for (name, bytes) in route_configs.configs {
            out.routes
                .insert(Arc::new(Resource::new(Arc::from(name), bytes)));
        }
        let mut taken: BTreeSet<String> = servers
            .servers
            .iter()
            .filter(|p| matches!(p.server.mode, ServerMode::Https { .. }))
            .flat_map(|p| p.sni())
            .collect();
        let passthrough: Vec<_> = servers
            .servers
            .iter()
            .map(|p| match p.server.mode {
                ServerMode::Passthrough => {
                    passthrough::chains(model, rules, p, &mut taken, &mut out.problems)
                }
                _ => Vec::new(),
            })
            .collect();
        let built = listener::listener(*port, servers, opts, listener.filters, passthrough);
        out.listeners
            .insert(Arc::new(Resource::new(built.0, built.1)));
        for p in &servers.servers {
            if let ServerMode::Https {
                credential, mutual, ..
            } = &p.server.mode
            {
                out.secret_names.insert(secret_name(credential));
                if *mutual {
                    out.secret_names.insert(ca_secret_name(credential));
                }
            }
        }
    }
    out
}

/// Adds one server to its port, or reports why it is dropped.
fn place<'a>(
    ports: &mut BTreeMap<u16, PortServers<'a>>,
    placed: Placed<'a>,
    problems: &mut Vec<(Arc<str>, Problem)>,
) {
    let s = placed.server;
    let path = format!("servers[{}]", s.index);
    let tls = matches!(s.mode, ServerMode::Https { .. } | ServerMode::Passthrough);
    let tcp = s.mode == ServerMode::Tcp;
    let kind = |tls: bool, tcp: bool| match (tls, tcp) {
        (true, _) => "TLS",
        (_, true) => "TCP",
        _ => "plain HTTP",
    };
    let entry = ports.entry(s.port).or_insert_with(|| PortServers {
        tls,
        tcp,
        servers: Vec::new(),
    });
    if entry.tcp && tcp && !entry.servers.is_empty() {
        problems.push((
            placed.key.clone(),
            Problem::error(
                "DP2103",
                path,
                format!(
                    "port {} already has a TCP server, and two cannot be told apart: \
                     server dropped",
                    s.port
                ),
            ),
        ));
        return;
    }
    if entry.tls != tls || entry.tcp != tcp {
        problems.push((
            placed.key.clone(),
            Problem::error(
                "DP2101",
                path,
                format!(
                    "port {} already serves {} from an earlier server; one port cannot mix \
                     plain HTTP, TLS and TCP: server dropped",
                    s.port,
                    kind(entry.tls, entry.tcp)
                ),
            ),
        ));
        return;
    }
    if tls {
        let mine = placed.sni();
        let clash = entry.servers.iter().find(|o| {
            let theirs = o.sni();
            (mine.is_empty() && theirs.is_empty()) || mine.iter().any(|n| theirs.contains(n))
        });
        if let Some(o) = clash {
            problems.push((
                placed.key.clone(),
                Problem::error(
                    "DP2103",
                    path,
                    format!(
                        "its SNI hosts on port {} overlap those of server {} of {}: \
                         server dropped",
                        s.port, o.server.index, o.gateway
                    ),
                ),
            ));
            return;
        }
        if let ServerMode::Https {
            subject_alt_names, ..
        } = &s.mode
            && !subject_alt_names.is_empty()
        {
            problems.push((
                placed.key.clone(),
                Problem::warning(
                    "DP2104",
                    format!("{path}.tls.subjectAltNames"),
                    "client subject alt names are not checked yet: any client certificate \
                     the CA signed is accepted",
                ),
            ));
        }
    }
    entry.servers.push(placed);
}

#[cfg(test)]
mod tests;

/// The chains of TCP server `p`: the `tcp` routes of the VirtualServices
/// bound to its Gateway whose hosts meet the server's hosts their namespace
/// may use (see `l4::gateway_chains`). None: the server is reported
/// (`DP2114`) and its port gets no listener.
fn tcp_chains<M: ModelRead + ?Sized>(
    model: &M,
    rules: &RuleIndex,
    p: &Placed<'_>,
    problems: &mut Vec<(Arc<str>, Problem)>,
) -> Vec<FilterChain> {
    let bound: Vec<(&Arc<str>, &str, &VirtualService)> = rules
        .virtual_services_for_gateway(p.gateway)
        .into_iter()
        .filter(|(rule, spec)| {
            let ns = &*rule.namespace;
            p.server
                .hosts
                .iter()
                .filter(|sh| sh.namespace.as_deref().is_none_or(|n| n == ns))
                .any(|sh| {
                    spec.hosts.iter().flatten().any(|h| {
                        let h = resolve_host(h, ns);
                        host_matches(sh.host.as_str(), h.as_str())
                            || host_matches(h.as_str(), sh.host.as_str())
                    })
                })
        })
        .map(|(rule, spec)| (&rule.key, &*rule.namespace, &**spec))
        .collect();
    let chains = l4::gateway_chains(model, p.gateway, &bound, p.server.port, problems);
    if chains.is_empty() {
        problems.push((
            p.key.clone(),
            Problem::warning(
                "DP2114",
                format!("servers[{}]", p.server.index),
                format!(
                    "TCP server on port {} has no VirtualService tcp route bound to it: \
                     nothing is served there",
                    p.server.port
                ),
            ),
        ));
    }
    chains
}
