//! The listener of one gateway port: one HCM chain for plain HTTP, or one
//! TLS-terminating chain per HTTPS server matched on SNI (see the parent
//! module for the rules).

use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::{
    Address, SocketAddress, TrafficDirection, TransportSocket, address,
    socket_address::{PortSpecifier, Protocol as SocketProtocol},
    transport_socket::ConfigType as SocketConfig,
};
use envoy_types::pb::envoy::config::listener::v3::{
    Filter, FilterChain, FilterChainMatch, Listener, ListenerFilter, filter::ConfigType,
    listener_filter::ConfigType as ListenerFilterConfig,
};
use envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CommonTlsContext, DownstreamTlsContext, SdsSecretConfig,
    common_tls_context::ValidationContextType,
};
use envoy_types::pb::google::protobuf::BoolValue;

use deltapilot_model::rules::ServerMode;

use super::super::GenOptions;
use super::super::common::{ads_config_source, encode, sidecar_listener_name, to_any};
use super::super::lds::{HCM_FILTER, HttpFilters, hcm};
use super::{Placed, PortServers, ca_secret_name, secret_name};

const TLS_INSPECTOR: &str = "envoy.filters.listener.tls_inspector";
const TLS_SOCKET: &str = "envoy.transport_sockets.tls";

/// The listener `0.0.0.0_<port>`: its name and bytes; `passthrough` holds
/// the chains of each PASSTHROUGH server, by position in `servers` (on a TCP
/// port: the chains of its one server).
pub(crate) fn listener(
    port: u16,
    servers: &PortServers<'_>,
    opts: &GenOptions,
    filters: HttpFilters,
    passthrough: Vec<Vec<FilterChain>>,
) -> (Arc<str>, Bytes) {
    let name = sidecar_listener_name(port);
    let filter_chains = if servers.tcp {
        passthrough.into_iter().flatten().collect()
    } else if servers.tls {
        servers
            .servers
            .iter()
            .zip(passthrough)
            .flat_map(|(p, chains)| match p.server.mode {
                ServerMode::Https { .. } => vec![tls_chain(p, filters)],
                _ => chains,
            })
            .collect()
    } else {
        let route = format!("http.{port}");
        vec![FilterChain {
            filters: vec![hcm_filter(
                format!("outbound_0.0.0.0_{port}"),
                route,
                filters,
            )],
            ..Default::default()
        }]
    };
    let listener_filters = if servers.tls {
        vec![ListenerFilter {
            name: TLS_INSPECTOR.to_string(),
            config_type: Some(ListenerFilterConfig::TypedConfig(to_any(
                &TlsInspector::default(),
            ))),
            ..Default::default()
        }]
    } else {
        Vec::new()
    };
    let bytes = encode(&Listener {
        name: name.to_string(),
        address: Some(Address {
            address: Some(address::Address::SocketAddress(SocketAddress {
                protocol: SocketProtocol::Tcp as i32,
                address: opts.outbound_address.clone(),
                port_specifier: Some(PortSpecifier::PortValue(u32::from(port))),
                ..Default::default()
            })),
        }),
        filter_chains,
        listener_filters,
        traffic_direction: TrafficDirection::Outbound as i32,
        bind_to_port: Some(BoolValue { value: true }),
        enable_reuse_port: opts.bind_outbound.then_some(BoolValue { value: false }),
        ..Default::default()
    });
    (name, bytes)
}

/// An HCM filter with RDS `route`, the optional `filters` its routes use, and
/// the client address taken from the connection (the gateway is the edge).
fn hcm_filter(stat_prefix: String, route: String, filters: HttpFilters) -> Filter {
    let mut h = hcm(stat_prefix, route);
    h.use_remote_address = Some(BoolValue { value: true });
    h.http_filters.splice(0..0, filters.before_router());
    Filter {
        name: HCM_FILTER.to_string(),
        config_type: Some(ConfigType::TypedConfig(to_any(&h))),
    }
}

/// The chain of one HTTPS server: matched on its SNI names, terminating TLS
/// with its credential over SDS.
fn tls_chain(p: &Placed<'_>, filters: HttpFilters) -> FilterChain {
    let ServerMode::Https {
        credential, mutual, ..
    } = &p.server.mode
    else {
        // Called for HTTPS servers only (see `listener`).
        return FilterChain::default();
    };
    let sds = |name: &str| SdsSecretConfig {
        name: name.to_string(),
        sds_config: Some(ads_config_source()),
    };
    let ctx = DownstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_certificate_sds_secret_configs: vec![sds(&secret_name(credential))],
            alpn_protocols: vec!["h2".to_string(), "http/1.1".to_string()],
            validation_context_type: mutual.then(|| {
                ValidationContextType::ValidationContextSdsSecretConfig(sds(&ca_secret_name(
                    credential,
                )))
            }),
            ..Default::default()
        }),
        require_client_certificate: Some(BoolValue { value: *mutual }),
        ..Default::default()
    };
    let stat = format!(
        "outbound_0.0.0.0_{}_{}",
        p.server.port,
        if p.server.port_name.is_empty() {
            "https"
        } else {
            &p.server.port_name
        }
    );
    FilterChain {
        filter_chain_match: Some(FilterChainMatch {
            server_names: p.sni(),
            ..Default::default()
        }),
        filters: vec![hcm_filter(stat, p.route_name(), filters)],
        transport_socket: Some(TransportSocket {
            name: TLS_SOCKET.to_string(),
            config_type: Some(SocketConfig::TypedConfig(to_any(&ctx))),
        }),
        ..Default::default()
    }
}
