//! `loadBalancer` → the cluster's `lb_policy` (and ring/maglev config), and
//! `consistentHash` → the route's hash policy.
//!
//! - `simple`: ROUND_ROBIN, LEAST_REQUEST, RANDOM map to the Envoy policies of
//!   the same name; UNSPECIFIED keeps round robin; PASSTHROUGH (original
//!   destination) cannot be combined with an EDS cluster and is reported
//!   (`DP2101`), the cluster keeps round robin.
//! - `consistentHash`: `maglev` → MAGLEV with `table_size`; otherwise RING_HASH
//!   with `minimum_ring_size` (`ringHash.minimumRingSize`, else the deprecated
//!   `minimumRingSize`), as Istio does. The hash key goes on each route to the
//!   cluster ([`hash_policies`]).
//! - In the proxyless variant of a `GRPC` port's cluster (see the module doc
//!   of `policy`) only ROUND_ROBIN and RING_HASH are sent; the rest stays round
//!   robin (reported `DP1120`). Envoys get the policy asked for.
//!
//! What it does NOT do: locality settings (need the proxy's locality, hence
//! per-proxy views: reported `DP2102`).

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    LbConfig, LbPolicy, MaglevLbConfig, RingHashLbConfig,
};
use envoy_types::pb::envoy::config::route::v3::route_action::HashPolicy;
use envoy_types::pb::envoy::config::route::v3::route_action::hash_policy::{
    ConnectionProperties, Cookie, Header, PolicySpecifier, QueryParameter,
};
use envoy_types::pb::google::protobuf::UInt64Value;

use super::{effective, parse_duration};
use deltapilot_model::rules::{ConsistentHash, DestinationRule, LoadBalancer};

/// Sets the cluster's load balancing from `lb` (`grpc`: a proxyless port).
pub(super) fn apply(c: &mut Cluster, lb: &LoadBalancer, grpc: bool) {
    if let Some(ch) = &lb.consistent_hash {
        if let Some(m) = &ch.maglev {
            if grpc {
                return;
            }
            c.lb_policy = LbPolicy::Maglev as i32;
            c.lb_config = Some(LbConfig::MaglevLbConfig(MaglevLbConfig {
                table_size: m.table_size.map(|value| UInt64Value { value }),
            }));
        } else {
            c.lb_policy = LbPolicy::RingHash as i32;
            let size = ch
                .ring_hash
                .as_ref()
                .and_then(|r| r.minimum_ring_size)
                .or(ch.minimum_ring_size);
            c.lb_config = Some(LbConfig::RingHashLbConfig(RingHashLbConfig {
                minimum_ring_size: size.map(|value| UInt64Value { value }),
                ..Default::default()
            }));
        }
        return;
    }
    let policy = match lb.simple.as_deref() {
        Some("LEAST_REQUEST") if !grpc => LbPolicy::LeastRequest,
        Some("RANDOM") if !grpc => LbPolicy::Random,
        _ => LbPolicy::RoundRobin,
    };
    c.lb_policy = policy as i32;
}

/// The hash policies a route to the (`port`, `subset`) cluster of `dr`'s host
/// needs: one from the effective `consistentHash`, or none. Pure, so the
/// VirtualService routes call it for each destination as the default route
/// does.
pub fn hash_policies(dr: &DestinationRule, port: u16, subset: Option<&str>) -> Vec<HashPolicy> {
    effective(dr, port, subset)
        .lb
        .and_then(|lb| lb.consistent_hash.as_ref())
        .and_then(hash_policy)
        .into_iter()
        .collect()
}

/// The hash key of `ch` (`None`: no key set, Envoy then hashes nothing and
/// picks at random).
fn hash_policy(ch: &ConsistentHash) -> Option<HashPolicy> {
    let spec = if let Some(h) = ch.http_header_name.as_deref().filter(|h| !h.is_empty()) {
        PolicySpecifier::Header(Header {
            header_name: h.to_ascii_lowercase(),
            ..Default::default()
        })
    } else if let Some(cookie) = ch
        .http_cookie
        .as_ref()
        .filter(|c| c.name.as_deref().is_some_and(|n| !n.is_empty()))
    {
        PolicySpecifier::Cookie(Cookie {
            name: cookie.name.clone().unwrap_or_default(),
            ttl: cookie.ttl.as_deref().and_then(parse_duration),
            path: cookie.path.clone().unwrap_or_default(),
            ..Default::default()
        })
    } else if ch.use_source_ip == Some(true) {
        PolicySpecifier::ConnectionProperties(ConnectionProperties { source_ip: true })
    } else if let Some(q) = ch
        .http_query_parameter_name
        .as_deref()
        .filter(|q| !q.is_empty())
    {
        PolicySpecifier::QueryParameter(QueryParameter {
            name: q.to_string(),
        })
    } else {
        return None;
    };
    Some(HashPolicy {
        policy_specifier: Some(spec),
        terminal: false,
    })
}
