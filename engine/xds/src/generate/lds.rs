//! LDS: sidecar outbound listeners and proxyless gRPC `api_listener`s.
//!
//! ## Sidecars
//! One listener per distinct served port number, named `0.0.0.0_<port>` (the name
//! identifies the outbound port, whatever address it binds), at
//! `<outbound_address>:<port>`, outbound direction, with `bind_to_port` set from
//! [`GenOptions::bind_outbound`]. With `false` the listener only receives
//! connections handed over by an iptables-capture virtual listener (Istio's
//! `15001`), which deltapilot does not generate yet; `true` is for tests and simple
//! deployments where applications dial the sidecar's ports directly.
//! - If any service has an HTTP-like protocol on the port: one filter chain with an
//!   HCM (codec AUTO, so HTTP/1.1 and prior-knowledge HTTP/2 and gRPC all work)
//!   fetching route configuration `<port>` over ADS, and the router filter. HTTP
//!   wins a port shared with TCP services: without destination VIPs there is
//!   nothing to tell their connections apart, and HTTP services at least route by
//!   `:authority`.
//! - Otherwise the owners' VirtualService `tcp` and `tls` routes give filter
//!   chains matched on destination subnets and SNI, and a default chain (see
//!   `l4`); without a default route, a port with exactly one owner forwards
//!   the rest with a tcp_proxy to its cluster.
//! - Several TCP services and no chain at all: no listener, and a [`GenError`]
//!   saying why. Istio separates them with filter-chain matches on destination
//!   IP, and the model has no VIPs yet.
//!
//! ## Proxyless gRPC
//! One `api_listener` per HTTP-like service port, named `<hostname>:<port>` (the
//! `xds:///` target), holding an HCM with RDS over ADS for route configuration
//! `<hostname>:<port>` and the router filter (grpcio NACKs an HCM without an HTTP
//! filter), behind the fault filter while the host's rule injects faults.
//!
//! What it does NOT do: inbound listeners, the virtual outbound listener, TLS
//! termination or gateways.
//!
//! [`GenError`]: super::GenError

use std::collections::BTreeSet;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::{
    Address, SocketAddress, TrafficDirection, address,
    socket_address::{PortSpecifier, Protocol as SocketProtocol},
};
use envoy_types::pb::envoy::config::listener::v3::{
    ApiListener, Filter, FilterChain, Listener, filter::ConfigType as FilterConfig,
};
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, HttpFilter, Rds, http_connection_manager::CodecType,
    http_connection_manager::RouteSpecifier, http_filter::ConfigType as HttpFilterConfig,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{
    TcpProxy, tcp_proxy::ClusterSpecifier,
};
use envoy_types::pb::google::protobuf::BoolValue;

use super::common::{
    ads_config_source, cluster_name, encode, grpc_name, port_route_name, sidecar_listener_name,
    to_any,
};
use super::{GenOptions, l4};
use deltapilot_model::Hostname;

pub(crate) const HCM_FILTER: &str = "envoy.filters.network.http_connection_manager";
const ROUTER_FILTER: &str = "envoy.filters.http.router";

/// The HTTP fault filter's name (routes carry their faults as its per-route
/// config).
pub(crate) const FAULT_FILTER: &str = "envoy.filters.http.fault";

/// The fault filter, empty: it acts only where a route's per-route config
/// says so.
pub(crate) fn fault_filter() -> HttpFilter {
    HttpFilter {
        name: FAULT_FILTER.to_string(),
        config_type: Some(HttpFilterConfig::TypedConfig(to_any(
            &envoy_types::pb::envoy::extensions::filters::http::fault::v3::HttpFault::default(),
        ))),
        ..Default::default()
    }
}

/// An HCM that fetches `route_name` over ADS and ends in the router filter.
pub(crate) fn hcm(stat_prefix: String, route_name: String) -> HttpConnectionManager {
    HttpConnectionManager {
        codec_type: CodecType::Auto as i32,
        stat_prefix,
        route_specifier: Some(RouteSpecifier::Rds(Rds {
            config_source: Some(ads_config_source()),
            route_config_name: route_name,
        })),
        http_filters: vec![HttpFilter {
            name: ROUTER_FILTER.to_string(),
            config_type: Some(HttpFilterConfig::TypedConfig(to_any(&Router::default()))),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn outbound_listener(port: u16, opts: &GenOptions, chains: Vec<FilterChain>, sni: bool) -> Bytes {
    encode(&Listener {
        name: sidecar_listener_name(port).to_string(),
        address: Some(Address {
            address: Some(address::Address::SocketAddress(SocketAddress {
                protocol: SocketProtocol::Tcp as i32,
                address: opts.outbound_address.clone(),
                port_specifier: Some(PortSpecifier::PortValue(u32::from(port))),
                ..Default::default()
            })),
        }),
        filter_chains: chains,
        listener_filters: if sni {
            vec![l4::tls_inspector()]
        } else {
            Vec::new()
        },
        traffic_direction: TrafficDirection::Outbound as i32,
        bind_to_port: Some(BoolValue {
            value: opts.bind_outbound,
        }),
        ..Default::default()
    })
}

/// Which optional HTTP filters the sidecar HCMs carry: each while any rule
/// needs it, so that without such rules the listeners stay exactly what they
/// were. Each acts only where a route's per-route config says so.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct HttpFilters {
    /// The fault filter (some route injects faults).
    pub(crate) fault: bool,
    /// The CORS filter (some route has a CORS policy).
    pub(crate) cors: bool,
}

impl HttpFilters {
    /// The filters to put ahead of the router, in Istio's order (CORS, then
    /// fault), so a preflight is answered before a fault applies.
    pub(crate) fn before_router(self) -> Vec<HttpFilter> {
        let mut out = Vec::new();
        if self.cors {
            out.push(http_filter(
                super::vs_routes::CORS_FILTER,
                &envoy_types::pb::envoy::extensions::filters::http::cors::v3::Cors::default(),
            ));
        }
        if self.fault {
            out.push(fault_filter());
        }
        out
    }

    /// What `model`'s rules need.
    pub(crate) fn of<M: super::ModelRead + ?Sized>(model: &M) -> Self {
        let rules = model.rules();
        HttpFilters {
            fault: rules.is_some_and(|r| r.uses_fault()),
            cors: rules.is_some_and(|r| r.uses_cors()),
        }
    }
}

/// An HTTP filter with an empty typed config.
fn http_filter<T: prost::Name>(name: &str, config: &T) -> HttpFilter {
    HttpFilter {
        name: name.to_string(),
        config_type: Some(HttpFilterConfig::TypedConfig(to_any(config))),
        ..Default::default()
    }
}

/// The sidecar listener for `port`, given which services are on it (see module
/// docs for the rules); `None` when no service serves the port.
///
/// `filters`: the optional HTTP filters, ahead of the router in Istio's order
/// (CORS, then fault), so a preflight is answered before a fault applies.
pub(crate) fn sidecar_listener<M: super::ModelRead + ?Sized>(
    model: &M,
    port: u16,
    any_http: bool,
    tcp: &BTreeSet<Hostname>,
    opts: &GenOptions,
    filters: HttpFilters,
) -> Option<Result<Bytes, String>> {
    if any_http {
        let mut h = hcm(
            format!("outbound_0.0.0.0_{port}"),
            port_route_name(port).to_string(),
        );
        h.http_filters.splice(0..0, filters.before_router());
        let filter = Filter {
            name: HCM_FILTER.to_string(),
            config_type: Some(FilterConfig::TypedConfig(to_any(&h))),
        };
        let chain = FilterChain {
            filters: vec![filter],
            ..Default::default()
        };
        return Some(Ok(outbound_listener(port, opts, vec![chain], false)));
    }
    let l4 = l4::sidecar(model, tcp, port, &mut Vec::new());
    let only = match (tcp.first(), tcp.len()) {
        (Some(owner), 1) => Some(owner),
        _ => None,
    };
    let default = l4.default.or_else(|| {
        let cluster = cluster_name(port, only?).to_string();
        Some(TcpProxy {
            stat_prefix: cluster.clone(),
            cluster_specifier: Some(ClusterSpecifier::Cluster(cluster)),
            ..Default::default()
        })
    });
    let mut chains = l4.matched;
    if let Some(proxy) = default {
        chains.push(FilterChain {
            filters: vec![l4::tcp_filter(&proxy)],
            ..Default::default()
        });
    } else if chains.is_empty() {
        if tcp.is_empty() {
            return None;
        }
        let names: Vec<&str> = tcp.iter().map(Hostname::as_str).collect();
        return Some(Err(format!(
            "TCP port {port} is served by {} services ({}); without VIPs, or TCP/TLS \
             routes matching on SNI or destination subnets, their connections cannot be \
             told apart, so no listener is generated",
            names.len(),
            names.join(", ")
        )));
    }
    Some(Ok(outbound_listener(port, opts, chains, l4.sni)))
}

/// The proxyless gRPC listener for an HTTP-like `port` of `host`.
///
/// While the host's VirtualService injects faults, the fault filter goes ahead
/// of the router (gRFC A33: gRPC's xDS client runs it, with the routes'
/// per-route config); otherwise the listener stays exactly what it was.
pub(crate) fn grpc_listener<M: super::ModelRead + ?Sized>(
    model: &M,
    host: &Hostname,
    port: u16,
) -> Bytes {
    let name = grpc_name(host, port).to_string();
    let mut h = hcm(name.clone(), name.clone());
    if super::vs_routes::host_injects_faults(model, host) {
        h.http_filters.insert(0, fault_filter());
    }
    encode(&Listener {
        name,
        api_listener: Some(ApiListener {
            api_listener: Some(to_any(&h)),
        }),
        ..Default::default()
    })
}
