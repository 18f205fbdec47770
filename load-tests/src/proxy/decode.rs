//! Just enough decoding of received resources to subscribe and to track
//! convergence, the way Envoy reads them: endpoint addresses from a
//! ClusterLoadAssignment, RDS route names from a Listener's HTTP connection
//! managers, and names from everything else.
//!
//! What it does NOT do: validate resources (the simulated proxies accept whatever
//! decodes; their NACKs are chosen by the scenario).

use envoy_types::pb::envoy::config::core::v3::address;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::listener::v3::filter::ConfigType;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::RouteSpecifier;
use envoy_types::pb::google::protobuf::Any;
use prost::Message;

const HCM_TYPE: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";

/// Field 1 of a message, which is the name of a Cluster, ClusterLoadAssignment,
/// Listener and RouteConfiguration alike; the rest is skipped unread.
#[derive(Clone, PartialEq, Message)]
struct NameOnly {
    #[prost(string, tag = "1")]
    name: String,
}

/// The name of a Cluster, Listener or RouteConfiguration (field 1).
pub fn name_of(value: &[u8]) -> Result<String, prost::DecodeError> {
    NameOnly::decode(value).map(|n| n.name)
}

/// A ClusterLoadAssignment's cluster name and its endpoint addresses, sorted.
pub fn cla_addresses(value: &[u8]) -> Result<(String, Vec<String>), prost::DecodeError> {
    let cla = ClusterLoadAssignment::decode(value)?;
    let mut addrs = Vec::new();
    for group in cla.endpoints {
        for lb in group.lb_endpoints {
            if let Some(HostIdentifier::Endpoint(ep)) = lb.host_identifier
                && let Some(a) = ep.address
                && let Some(address::Address::SocketAddress(sa)) = a.address
            {
                addrs.push(sa.address);
            }
        }
    }
    addrs.sort();
    Ok((cla.cluster_name, addrs))
}

fn hcm_route(any: &Any, out: &mut Vec<String>) -> Result<(), prost::DecodeError> {
    if any.type_url == HCM_TYPE {
        let hcm = HttpConnectionManager::decode(any.value.as_slice())?;
        if let Some(RouteSpecifier::Rds(rds)) = hcm.route_specifier {
            out.push(rds.route_config_name);
        }
    }
    Ok(())
}

/// Whether an encoded RouteConfiguration delivers its virtual hosts over
/// VHDS (its `vhds` field is set). Reads field keys only, skipping each
/// field's body, so an inline configuration of thousands of virtual hosts
/// is not decoded.
pub fn route_has_vhds(value: &[u8]) -> Result<bool, prost::DecodeError> {
    use prost::encoding::{DecodeContext, decode_key, skip_field};
    /// `RouteConfiguration.vhds`' field number.
    const VHDS: u32 = 9;
    let mut buf = value;
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf)?;
        if tag == VHDS {
            return Ok(true);
        }
        skip_field(wire, tag, &mut buf, DecodeContext::default())?;
    }
    Ok(false)
}

/// A Listener's name and the RDS route names its HTTP connection managers use.
pub fn listener_routes(value: &[u8]) -> Result<(String, Vec<String>), prost::DecodeError> {
    let l = Listener::decode(value)?;
    let mut routes = Vec::new();
    for chain in l.filter_chains.iter().chain(l.default_filter_chain.iter()) {
        for f in &chain.filters {
            if let Some(ConfigType::TypedConfig(any)) = &f.config_type {
                hcm_route(any, &mut routes)?;
            }
        }
    }
    if let Some(api) = l
        .api_listener
        .as_ref()
        .and_then(|a| a.api_listener.as_ref())
    {
        hcm_route(api, &mut routes)?;
    }
    routes.sort();
    routes.dedup();
    Ok((l.name, routes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::{Address, SocketAddress};
    use envoy_types::pb::envoy::config::endpoint::v3::{Endpoint, LbEndpoint, LocalityLbEndpoints};
    use envoy_types::pb::envoy::config::listener::v3::{Filter, FilterChain};
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::Rds;

    #[test]
    fn addresses_and_route_names_come_out() {
        let ep = |a: &str| LbEndpoint {
            host_identifier: Some(HostIdentifier::Endpoint(Endpoint {
                address: Some(Address {
                    address: Some(address::Address::SocketAddress(SocketAddress {
                        address: a.into(),
                        ..Default::default()
                    })),
                }),
                ..Default::default()
            })),
            ..Default::default()
        };
        let cla = ClusterLoadAssignment {
            cluster_name: "c".into(),
            endpoints: vec![LocalityLbEndpoints {
                lb_endpoints: vec![ep("10.0.0.2"), ep("10.0.0.1")],
                ..Default::default()
            }],
            ..Default::default()
        };
        let (name, addrs) = cla_addresses(&cla.encode_to_vec()).expect("cla");
        assert_eq!(
            (name.as_str(), addrs),
            ("c", vec!["10.0.0.1".to_string(), "10.0.0.2".into()])
        );
        assert_eq!(name_of(&cla.encode_to_vec()).expect("name"), "c");

        let hcm = HttpConnectionManager {
            route_specifier: Some(RouteSpecifier::Rds(Rds {
                route_config_name: "8080".into(),
                ..Default::default()
            })),
            ..Default::default()
        };
        let l = Listener {
            name: "0.0.0.0_8080".into(),
            filter_chains: vec![FilterChain {
                filters: vec![Filter {
                    name: "envoy.filters.network.http_connection_manager".into(),
                    config_type: Some(ConfigType::TypedConfig(Any {
                        type_url: HCM_TYPE.into(),
                        value: hcm.encode_to_vec(),
                    })),
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let (name, routes) = listener_routes(&l.encode_to_vec()).expect("listener");
        assert_eq!(
            (name.as_str(), routes),
            ("0.0.0.0_8080", vec!["8080".to_string()])
        );
    }
}
