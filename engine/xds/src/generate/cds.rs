//! CDS: one cluster per served service port, named `outbound|<port>||<hostname>`.
//!
//! - `StaticEndpoints` services get an `EDS` cluster whose endpoints come over ADS
//!   (`eds_config.ads`, which proxyless gRPC requires) in a ClusterLoadAssignment of
//!   the same name.
//! - `Dns` services get a `LOGICAL_DNS` cluster with an inline load assignment to
//!   `<hostname>:<port>`. LOGICAL_DNS rather than Istio's STRICT_DNS because it is
//!   the DNS cluster type proxyless gRPC also accepts (gRFC A37), so one resource
//!   serves both client kinds; Envoy connects to the first resolved address, which
//!   suits the external hosts DNS services usually are. A wildcard hostname cannot
//!   be resolved and is reported as an error.
//! - HTTP2 and GRPC ports carry explicit HTTP/2 upstream options through
//!   `typed_extension_protocol_options` (the non-deprecated way).
//! - Panic mode is off (`healthy_panic_threshold: 0%`): the registry's health is
//!   authoritative, and Envoy's default would send traffic to endpoints the
//!   registry reports as down once fewer than half are healthy.
//!
//! What it does NOT do: decide which ports are served (see `served_ports`), or
//! apply DestinationRule traffic policy and subsets (see `policy`).

use std::collections::HashMap;

use envoy_types::pb::envoy::config::cluster::v3::{
    Cluster,
    cluster::{ClusterDiscoveryType, CommonLbConfig, DiscoveryType, EdsClusterConfig, LbPolicy},
};
use envoy_types::pb::envoy::config::core::v3::{Http2ProtocolOptions, Locality as PbLocality};
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, LbEndpoint, LocalityLbEndpoints, lb_endpoint::HostIdentifier,
};
use envoy_types::pb::envoy::extensions::upstreams::http::v3::{
    HttpProtocolOptions,
    http_protocol_options::{
        ExplicitHttpConfig, UpstreamProtocolOptions, explicit_http_config::ProtocolConfig,
    },
};
use envoy_types::pb::envoy::r#type::v3::Percent;
use envoy_types::pb::google::protobuf::UInt32Value;

use super::GenOptions;
use super::common::{ads_config_source, duration, to_any};
use super::eds::socket_endpoint;
use deltapilot_model::{Port, Resolution, Service};

/// The key Envoy looks up upstream HTTP protocol options under.
pub(crate) const HTTP_PROTOCOL_OPTIONS_KEY: &str =
    "envoy.extensions.upstreams.http.v3.HttpProtocolOptions";

/// The cluster `name` for one served port of `svc`, before any
/// DestinationRule policy (see `policy`) is applied to it.
pub(crate) fn build(
    svc: &Service,
    port: &Port,
    name: String,
    opts: &GenOptions,
) -> Result<Cluster, String> {
    let mut c = Cluster {
        name: name.clone(),
        connect_timeout: Some(duration(opts.connect_timeout)),
        lb_policy: LbPolicy::RoundRobin as i32,
        common_lb_config: Some(CommonLbConfig {
            healthy_panic_threshold: Some(Percent { value: 0.0 }),
            ..Default::default()
        }),
        ..Default::default()
    };
    match svc.resolution {
        Resolution::StaticEndpoints => {
            c.cluster_discovery_type = Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32));
            c.eds_cluster_config = Some(EdsClusterConfig {
                eds_config: Some(ads_config_source()),
                service_name: name,
            });
        }
        Resolution::Dns => {
            if svc.hostname.as_str().contains('*') {
                return Err(format!(
                    "service {} resolves by DNS but its hostname is a wildcard",
                    svc.hostname
                ));
            }
            c.cluster_discovery_type =
                Some(ClusterDiscoveryType::Type(DiscoveryType::LogicalDns as i32));
            c.load_assignment = Some(ClusterLoadAssignment {
                cluster_name: name,
                endpoints: vec![LocalityLbEndpoints {
                    locality: Some(PbLocality::default()),
                    lb_endpoints: vec![LbEndpoint {
                        host_identifier: Some(HostIdentifier::Endpoint(socket_endpoint(
                            svc.hostname.to_string(),
                            port.number,
                        ))),
                        load_balancing_weight: Some(UInt32Value { value: 1 }),
                        ..Default::default()
                    }],
                    load_balancing_weight: Some(UInt32Value { value: 1 }),
                    ..Default::default()
                }],
                ..Default::default()
            });
        }
        Resolution::Passthrough => {
            return Err(format!(
                "service {} is passthrough and has no cluster",
                svc.hostname
            ));
        }
    }
    if port.protocol.is_http2() {
        let options = HttpProtocolOptions {
            upstream_protocol_options: Some(UpstreamProtocolOptions::ExplicitHttpConfig(
                ExplicitHttpConfig {
                    protocol_config: Some(ProtocolConfig::Http2ProtocolOptions(
                        Http2ProtocolOptions::default(),
                    )),
                },
            )),
            ..Default::default()
        };
        // A single entry: prost encodes a HashMap in iteration order, which is only
        // deterministic with one key.
        c.typed_extension_protocol_options =
            HashMap::from([(HTTP_PROTOCOL_OPTIONS_KEY.to_string(), to_any(&options))]);
    }
    Ok(c)
}
