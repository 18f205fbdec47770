//! The typed DestinationRule (`networking.istio.io` v1, v1beta1 and v1alpha3
//! share this schema), as its canonical spec JSON spells it.
//!
//! As for VirtualService, every field is optional and fields this build does not
//! know are found and reported by `parse`, never dropped silently.
//!
//! What it does NOT do: translate policies to clusters (the xDS crate does), or
//! decide which rule applies to a host (see `index`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::types::PortSelector;

/// A DestinationRule spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DestinationRule {
    /// The service host (short names resolve in the rule's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Policy for every port and subset unless overridden.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_policy: Option<TrafficPolicy>,
    /// Named subsets of the host's endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subsets: Option<Vec<Subset>>,
    /// Namespaces the rule is exported to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export_to: Option<Vec<String>>,
    /// Workloads the rule applies to: kept to be reported (needs per-proxy views).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_selector: Option<serde_json::Value>,
}

/// A named subset: endpoints whose labels include `labels`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subset {
    /// Name, unique within the rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Label selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Overrides of the rule's policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_policy: Option<TrafficPolicy>,
}

/// `trafficPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrafficPolicy {
    /// Load balancing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<LoadBalancer>,
    /// Connection pool limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_pool: Option<ConnectionPool>,
    /// Outlier detection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outlier_detection: Option<OutlierDetection>,
    /// Upstream TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ClientTls>,
    /// Per-port overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_level_settings: Option<Vec<PortTrafficPolicy>>,
    /// Tunnel settings: kept to be reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<serde_json::Value>,
    /// PROXY protocol: kept to be reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_protocol: Option<serde_json::Value>,
}

/// `portLevelSettings[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortTrafficPolicy {
    /// The port these settings apply to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<PortSelector>,
    /// Load balancing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<LoadBalancer>,
    /// Connection pool limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_pool: Option<ConnectionPool>,
    /// Outlier detection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outlier_detection: Option<OutlierDetection>,
    /// Upstream TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ClientTls>,
}

/// `loadBalancer`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancer {
    /// `ROUND_ROBIN`, `LEAST_REQUEST`, `RANDOM`, `PASSTHROUGH`, `UNSPECIFIED`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simple: Option<String>,
    /// Consistent hashing (ring hash or maglev).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistent_hash: Option<ConsistentHash>,
    /// Locality-aware distribution and failover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locality_lb_setting: Option<LocalityLb>,
    /// Slow start: kept to be reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_duration_secs: Option<String>,
    /// Slow start (newer form): kept to be reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<serde_json::Value>,
}

/// `loadBalancer.consistentHash`: one hash key, one ring kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsistentHash {
    /// Hash on this request header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_header_name: Option<String>,
    /// Hash on this cookie (generated when absent if `ttl` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_cookie: Option<HttpCookie>,
    /// Hash on the source IP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_source_ip: Option<bool>,
    /// Hash on this query parameter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_query_parameter_name: Option<String>,
    /// Ring hash with its minimum size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring_hash: Option<RingHash>,
    /// Maglev with its table size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maglev: Option<Maglev>,
    /// Deprecated ring size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum_ring_size: Option<u64>,
}

/// `consistentHash.httpCookie`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpCookie {
    /// Cookie name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Cookie path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Lifetime of a generated cookie.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
}

/// `consistentHash.ringHash`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RingHash {
    /// Minimum ring size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum_ring_size: Option<u64>,
}

/// `consistentHash.maglev`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Maglev {
    /// Table size (a prime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_size: Option<u64>,
}

/// `localityLbSetting`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalityLb {
    /// Weighted distribution from a locality to others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribute: Option<Vec<LocalityDistribute>>,
    /// Failover from a region to another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<Vec<LocalityFailover>>,
    /// Failover by label priority: kept to be reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover_priority: Option<Vec<String>>,
    /// Whether locality load balancing is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// `localityLbSetting.distribute[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalityDistribute {
    /// Origin locality (`region/zone/subzone`, `*` allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Destination localities with weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<BTreeMap<String, u32>>,
}

/// `localityLbSetting.failover[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalityFailover {
    /// Origin region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Failover region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

/// `connectionPool`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionPool {
    /// TCP limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpPool>,
    /// HTTP limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpPool>,
}

/// `connectionPool.tcp`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TcpPool {
    /// Most connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// Connect timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout: Option<String>,
    /// TCP keepalive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_keepalive: Option<TcpKeepalive>,
    /// Most connection lifetime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connection_duration: Option<String>,
    /// Idle timeout of TCP connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<String>,
}

/// `connectionPool.tcp.tcpKeepalive`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TcpKeepalive {
    /// Unanswered probes before the connection is dead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes: Option<u32>,
    /// Idle time before probes start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// Time between probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
}

/// `connectionPool.http`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpPool {
    /// Most pending requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http1_max_pending_requests: Option<u32>,
    /// Most active requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http2_max_requests: Option<u32>,
    /// Requests per connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests_per_connection: Option<u32>,
    /// Most concurrent retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// Idle timeout of upstream connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<String>,
    /// `DEFAULT`, `DO_NOT_UPGRADE` or `UPGRADE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub h2_upgrade_policy: Option<String>,
    /// Use the downstream protocol upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_client_protocol: Option<bool>,
    /// Most concurrent HTTP/2 streams per connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_streams: Option<u32>,
}

/// `outlierDetection`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutlierDetection {
    /// Tell local-origin failures apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_external_local_origin_errors: Option<bool>,
    /// Local-origin failures before ejection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_local_origin_failures: Option<u32>,
    /// 502/503/504 before ejection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_gateway_errors: Option<u32>,
    /// 5xx before ejection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_5xx_errors: Option<u32>,
    /// Deprecated form of `consecutiveGatewayErrors`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_errors: Option<u32>,
    /// Time between analyses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Minimum ejection time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_ejection_time: Option<String>,
    /// Most hosts ejected, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ejection_percent: Option<u32>,
    /// Healthy share below which detection stops (panic threshold).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_health_percent: Option<u32>,
}

/// `tls`: the upstream TLS settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientTls {
    /// `DISABLE`, `SIMPLE`, `MUTUAL` or `ISTIO_MUTUAL`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Client certificate file (MUTUAL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<String>,
    /// Client key file (MUTUAL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<String>,
    /// CA bundle file to verify the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_certificates: Option<String>,
    /// SDS credential: kept to be reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_name: Option<String>,
    /// Accepted server identities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_alt_names: Option<Vec<String>>,
    /// SNI to send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
    /// Skip server verification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_verify: Option<bool>,
    /// CRL file: kept to be reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_crl: Option<String>,
}
