//! Builders for a Sidecar-scoped view (see `view::scoped`): a port's listener
//! and route configuration over the hosts the Sidecar lets its proxies see, the
//! catch-all virtual host of `outboundTrafficPolicy`, and `PassthroughCluster`.
//!
//! - The listener of a port is `lds::sidecar_listener` over the visible hosts,
//!   so it is byte-equal to the global one whenever the same services own the
//!   port (the view then shares the global resource).
//! - The route configuration `<port>` is `rds::port_route_config` over the
//!   visible hosts (domains are claimed among them only, so a short name hidden
//!   hosts made ambiguous is served), followed by the catch-all:
//!   `block_all` (REGISTRY_ONLY: every other `:authority` gets 502, Istio's
//!   `BlackHole` route) or `allow_any` (ALLOW_ANY: to `PassthroughCluster`).
//!   Appended as one more encoded `virtual_hosts` field: protobuf writes fields
//!   in tag order and nothing follows `virtual_hosts`, so the concatenation is
//!   the encoding of the whole message.
//! - `PassthroughCluster` is an ORIGINAL_DST cluster. Under `--bind-outbound`
//!   there is no iptables capture, so the connection's original destination is
//!   the listener itself: the cluster then takes the destination from the
//!   `x-envoy-original-dst-host` header (`use_http_header`), and `allow_any`
//!   routes only requests that carry it; the rest get 502 instead of looping
//!   back into the listener.
//!
//! What it does NOT do: decide visibility or keep anything incremental (the
//! view does).

use std::collections::BTreeSet;

use bytes::{Bytes, BytesMut};
use envoy_types::pb::envoy::config::cluster::v3::{
    Cluster,
    cluster::{ClusterDiscoveryType, DiscoveryType, LbConfig, LbPolicy, OriginalDstLbConfig},
};
use envoy_types::pb::envoy::config::route::v3::{
    DirectResponseAction, HeaderMatcher, Route, RouteAction, RouteConfiguration, RouteMatch,
    VirtualHost, header_matcher::HeaderMatchSpecifier, route::Action, route_action,
    route_match::PathSpecifier,
};

use super::common::{cluster_name, duration, encode};
use super::{GenOptions, ModelRead, lds, policy, rds};
use deltapilot_model::Hostname;
use deltapilot_model::rules::OutboundMode;

/// Istio's name of the original-destination cluster.
pub const PASSTHROUGH_CLUSTER: &str = "PassthroughCluster";
/// Istio's name of the REGISTRY_ONLY catch-all virtual host.
pub const BLOCK_ALL: &str = "block_all";
/// Istio's name of the ALLOW_ANY catch-all virtual host.
pub const ALLOW_ANY: &str = "allow_any";
/// The header an ORIGINAL_DST cluster with `use_http_header` reads.
pub const ORIGINAL_DST_HEADER: &str = "x-envoy-original-dst-host";

/// The listener of `port` over the visible hosts (see `lds`).
pub(crate) fn listener<M: ModelRead + ?Sized>(
    model: &M,
    port: u16,
    http: &BTreeSet<Hostname>,
    tcp: &BTreeSet<Hostname>,
    opts: &GenOptions,
    filters: lds::HttpFilters,
) -> Option<Result<Bytes, String>> {
    lds::sidecar_listener(model, port, !http.is_empty(), tcp, opts, filters)
}

/// Route configuration `<port>` over the visible HTTP hosts, with the catch-all
/// of `mode` last; `None` without visible HTTP hosts.
pub(crate) fn route_config<M: ModelRead + ?Sized>(
    model: &M,
    port: u16,
    http: &BTreeSet<Hostname>,
    mode: Option<OutboundMode>,
    opts: &GenOptions,
) -> Option<Bytes> {
    if http.is_empty() {
        return None;
    }
    let base = rds::port_route_config(model, port, http);
    // A visible host `*` already claims every authority (Envoy NACKs a
    // domain claimed twice): it is the catch-all then.
    let Some(mode) = mode.filter(|_| !http.iter().any(|h| h.as_str() == "*")) else {
        return Some(base);
    };
    let tail = encode(&RouteConfiguration {
        virtual_hosts: vec![catch_all(mode, opts)],
        ..Default::default()
    });
    let mut out = BytesMut::with_capacity(base.len() + tail.len());
    out.extend_from_slice(&base);
    out.extend_from_slice(&tail);
    Some(out.freeze())
}

fn prefix_all() -> RouteMatch {
    RouteMatch {
        path_specifier: Some(PathSpecifier::Prefix("/".into())),
        ..Default::default()
    }
}

fn blocked(name: &str) -> Route {
    Route {
        name: name.to_string(),
        r#match: Some(prefix_all()),
        action: Some(Action::DirectResponse(DirectResponseAction {
            status: 502,
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// The catch-all virtual host (domain `*`) of an outbound mode.
fn catch_all(mode: OutboundMode, opts: &GenOptions) -> VirtualHost {
    let routes = match mode {
        OutboundMode::RegistryOnly => vec![blocked(BLOCK_ALL)],
        OutboundMode::AllowAny => {
            let mut m = prefix_all();
            if opts.bind_outbound {
                m.headers.push(HeaderMatcher {
                    name: ORIGINAL_DST_HEADER.into(),
                    header_match_specifier: Some(HeaderMatchSpecifier::PresentMatch(true)),
                    ..Default::default()
                });
            }
            let pass = Route {
                name: ALLOW_ANY.into(),
                r#match: Some(m),
                action: Some(Action::Route(RouteAction {
                    cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(
                        PASSTHROUGH_CLUSTER.into(),
                    )),
                    timeout: Some(duration(std::time::Duration::ZERO)),
                    ..Default::default()
                })),
                ..Default::default()
            };
            let mut routes = vec![pass];
            if opts.bind_outbound {
                routes.push(blocked("allow_any_without_destination"));
            }
            routes
        }
    };
    VirtualHost {
        name: match mode {
            OutboundMode::RegistryOnly => BLOCK_ALL,
            OutboundMode::AllowAny => ALLOW_ANY,
        }
        .into(),
        domains: vec!["*".into()],
        routes,
        ..Default::default()
    }
}

/// Every cluster (and assignment) name `svc` can have: one per served port, and
/// one per subset of its DestinationRule on each.
pub(crate) fn host_resource_names<M: ModelRead + ?Sized>(
    model: &M,
    svc: &deltapilot_model::Service,
) -> Vec<std::sync::Arc<str>> {
    let h = &svc.hostname;
    let dr = policy::rule_for(model, h);
    let subsets = policy::subset_names(dr.as_deref());
    let mut out = Vec::new();
    for port in super::served_ports(svc) {
        out.push(cluster_name(port.number, h));
        for s in &subsets {
            out.push(policy::subset_cluster_name(port.number, s, h));
        }
    }
    out
}

/// Every cluster (full flavour: sidecars read no proxyless one) and
/// assignment of `svc` as `model` reads its DestinationRule: a view whose
/// restricted DestinationRule wins for the host builds its own (see
/// `view::scoped`). A resource that fails to build is left out (the global
/// build reports the host's errors).
pub(crate) fn host_resources<M: ModelRead + ?Sized>(
    model: &M,
    svc: &deltapilot_model::Service,
    opts: &GenOptions,
) -> Vec<(crate::ResourceType, std::sync::Arc<str>, Bytes)> {
    use crate::ResourceType::{Cluster as C, Endpoint as E};
    let h = &svc.hostname;
    let mut buffers = super::eds::HostEndpoints::new();
    let mut eps = (svc.resolution == deltapilot_model::Resolution::StaticEndpoints).then(|| {
        buffers.refill(model, h);
        &mut buffers
    });
    let dr = policy::rule_for(model, h);
    let dr = dr.as_deref();
    let subsets = policy::subset_names(dr);
    let mut out = Vec::new();
    for port in super::served_ports(svc) {
        let name = cluster_name(port.number, h);
        if let Ok(b) = policy::cluster(svc, port, None, dr, opts).0 {
            out.push((C, name.clone(), b));
        }
        if let Some(eps) = &mut eps
            && let Ok(b) = super::eds::load_assignment(eps, &name, port)
        {
            out.push((E, name, b));
        }
        for s in &subsets {
            let Some((cluster, assignment)) =
                policy::subset_resources(svc, port, s, dr, eps.as_deref_mut(), opts)
            else {
                continue;
            };
            let name = policy::subset_cluster_name(port.number, s, h);
            if let Ok(b) = cluster.0 {
                out.push((C, name.clone(), b));
            }
            if let Some(Ok(b)) = assignment {
                out.push((E, name, b));
            }
        }
    }
    out
}

/// `PassthroughCluster`: original destination, from the header under
/// `--bind-outbound` (see the module doc).
pub(crate) fn passthrough_cluster(opts: &GenOptions) -> Bytes {
    encode(&Cluster {
        name: PASSTHROUGH_CLUSTER.into(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(
            DiscoveryType::OriginalDst as i32,
        )),
        lb_policy: LbPolicy::ClusterProvided as i32,
        connect_timeout: Some(duration(opts.connect_timeout)),
        lb_config: opts.bind_outbound.then(|| {
            LbConfig::OriginalDstLbConfig(OriginalDstLbConfig {
                use_http_header: true,
                ..Default::default()
            })
        }),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltapilot_model::state::ModelState;
    use prost::Message;

    #[test]
    fn the_catch_all_is_appended_as_the_last_virtual_host() {
        let hosts: BTreeSet<Hostname> = [Hostname::new("a.ns.svc.cluster.local")].into();
        let m = ModelState::default();
        let opts = GenOptions::default();
        let bytes = route_config(&m, 80, &hosts, Some(OutboundMode::RegistryOnly), &opts)
            .expect("one host");
        let rc = RouteConfiguration::decode(&bytes[..]).expect("decodes");
        assert_eq!(rc.name, "80");
        let names: Vec<&str> = rc.virtual_hosts.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["a.ns.svc.cluster.local:80", BLOCK_ALL]);
        assert_eq!(
            bytes,
            encode(&rc),
            "the concatenation is the message's encoding"
        );
        let plain = route_config(&m, 80, &hosts, None, &opts).expect("one host");
        assert_eq!(plain, rds::port_route_config(&m, 80, &hosts));
    }

    #[test]
    fn allow_any_needs_the_header_when_listeners_bind_directly() {
        let opts = GenOptions {
            bind_outbound: true,
            ..Default::default()
        };
        let vh = catch_all(OutboundMode::AllowAny, &opts);
        assert_eq!(vh.routes.len(), 2);
        let m = vh.routes[0].r#match.as_ref().expect("match");
        assert_eq!(m.headers[0].name, ORIGINAL_DST_HEADER);
        let c = Cluster::decode(&passthrough_cluster(&opts)[..]).expect("decodes");
        assert!(matches!(
            c.lb_config,
            Some(LbConfig::OriginalDstLbConfig(OriginalDstLbConfig {
                use_http_header: true,
                ..
            }))
        ));
        let c = Cluster::decode(&passthrough_cluster(&GenOptions::default())[..]).expect("ok");
        assert!(c.lb_config.is_none());
    }
}
