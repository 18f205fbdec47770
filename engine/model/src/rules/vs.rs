//! The typed VirtualService (`networking.istio.io` v1, v1beta1 and v1alpha3 share
//! this schema), as its canonical spec JSON spells it (camelCase, proto3 JSON).
//!
//! Every field is optional, as in proto3: absent and `null` are the same. Fields
//! this build does not know are not dropped: `parse` finds them by comparing the
//! input with what these types read back (see `unknown`) and reports each one.
//! `tcp` routes are kept as raw JSON only so that they can be reported as not
//! yet supported; `tls` routes are typed (gateway PASSTHROUGH servers honour
//! them).
//!
//! What it does NOT do: decide what a field means for Envoy (the xDS crate
//! translates), or bind the rule to hosts (see `index`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::types::{Percent, PortSelector, StringMatch};

/// A VirtualService spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualService {
    /// The hosts the rule applies to: short names (resolved in the rule's
    /// namespace), FQDNs, ServiceEntry hosts or wildcards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// Gateways and `mesh` (the sidecars); absent means `mesh`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateways: Option<Vec<String>>,
    /// Namespaces the rule is exported to (`.`, `*`, names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export_to: Option<Vec<String>>,
    /// HTTP routes, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<Vec<HttpRoute>>,
    /// TCP routes, in order: on the sidecars' TCP ports of the rule's hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<Vec<TcpRoute>>,
    /// TLS routes by SNI: on gateway `PASSTHROUGH` servers, and on the
    /// sidecars' TLS (non-HTTP) ports of the rule's hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<Vec<TlsRoute>>,
}

/// One TCP route: L4 match blocks (any one matches; none matches every
/// connection) and weighted destinations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TcpRoute {
    /// Match blocks, ORed.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub matches: Option<Vec<L4Match>>,
    /// Weighted destinations (header edits do not apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<Vec<RouteDestination>>,
}

/// One TCP match block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct L4Match {
    /// Destination IPv4/IPv6 subnets (`a.b.c.d/n` or a bare address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_subnets: Option<Vec<String>>,
    /// Only on this port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    /// Source labels: reported as not yet supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_labels: Option<BTreeMap<String, String>>,
    /// Per-match gateways: reported as not yet supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateways: Option<Vec<String>>,
    /// Source namespace: reported as not yet supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_namespace: Option<String>,
    /// Source subnet (deprecated in Istio): reported as not yet supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_subnet: Option<String>,
}

/// One TLS route: SNI match blocks (any one matches) and weighted destinations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsRoute {
    /// Match blocks, ORed.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub matches: Option<Vec<TlsMatch>>,
    /// Weighted destinations (header edits do not apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<Vec<RouteDestination>>,
}

/// One TLS match block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsMatch {
    /// SNI names (wildcards allowed); required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni_hosts: Option<Vec<String>>,
    /// Only on this port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    /// Destination subnets: reported as not yet supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_subnets: Option<Vec<String>>,
    /// Source labels: reported as not yet supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_labels: Option<BTreeMap<String, String>>,
    /// Per-match gateways: reported as not yet supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateways: Option<Vec<String>>,
    /// Source namespace: reported as not yet supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_namespace: Option<String>,
}

/// One HTTP route: match blocks (any one matches) and what to do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRoute {
    /// Route name (for logs and stats).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Match blocks, ORed; absent matches everything.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub matches: Option<Vec<HttpMatch>>,
    /// Weighted destinations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<Vec<RouteDestination>>,
    /// Answer with a redirect instead of forwarding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect: Option<Redirect>,
    /// Answer directly instead of forwarding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct_response: Option<DirectResponse>,
    /// Delegation to another VirtualService: kept to be reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegate: Option<serde_json::Value>,
    /// URI and authority rewrite before forwarding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<Rewrite>,
    /// Request timeout (duration text, e.g. `"5s"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Retry policy; absent means Istio's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<Retries>,
    /// Fault injection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
    /// Mirror destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<Destination>,
    /// Several mirrors (newer Istio): kept to be reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirrors: Option<Vec<serde_json::Value>>,
    /// Share of traffic mirrored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_percentage: Option<Percent>,
    /// Deprecated integer form of `mirrorPercentage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_percent: Option<u32>,
    /// CORS policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors_policy: Option<CorsPolicy>,
    /// Header edits for the whole route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<Headers>,
}

/// One match block: every condition given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpMatch {
    /// Name (prefixed to the route name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Path match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<StringMatch>,
    /// `:scheme` match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<StringMatch>,
    /// `:method` match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<StringMatch>,
    /// `:authority` match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authority: Option<StringMatch>,
    /// Header matches by (lower-case) name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, StringMatch>>,
    /// Headers that must NOT match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub without_headers: Option<BTreeMap<String, StringMatch>>,
    /// Query parameter matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_params: Option<BTreeMap<String, StringMatch>>,
    /// Only on this port's route configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    /// Case-insensitive `uri` match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_uri_case: Option<bool>,
    /// Source workload labels: kept to be reported (needs per-proxy views).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_labels: Option<BTreeMap<String, String>>,
    /// Per-match gateways: kept to be reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateways: Option<Vec<String>>,
    /// Source namespace: kept to be reported (needs per-proxy views).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_namespace: Option<String>,
    /// Stats prefix: kept to be reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stat_prefix: Option<String>,
}

/// A weighted destination with its header edits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteDestination {
    /// Where to send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<Destination>,
    /// Share of traffic (percent; all of a route's must total 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i64>,
    /// Header edits when this destination is picked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<Headers>,
}

/// A destination service, subset and port.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    /// Service host (short names resolve in the rule's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// DestinationRule subset name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subset: Option<String>,
    /// Destination port (may be left out when the service has one port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<PortSelector>,
}

/// `headers.request` / `headers.response`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Headers {
    /// Request header edits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<HeaderOps>,
    /// Response header edits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<HeaderOps>,
}

/// Header edits: set (overwrite), add (append), remove.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeaderOps {
    /// Overwrite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<BTreeMap<String, String>>,
    /// Append.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add: Option<BTreeMap<String, String>>,
    /// Remove.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remove: Option<Vec<String>>,
}

/// `redirect`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Redirect {
    /// Replacement path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Replacement authority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authority: Option<String>,
    /// Replacement port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    /// `FROM_PROTOCOL_DEFAULT` or `FROM_REQUEST_PORT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derive_port: Option<String>,
    /// Replacement scheme.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// Status code (default 301).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect_code: Option<u32>,
}

/// `directResponse`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectResponse {
    /// Status code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u32>,
    /// Body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<ResponseBody>,
}

/// A direct response body: text or base64 bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseBody {
    /// Text body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,
    /// Base64 body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<String>,
}

/// `rewrite`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rewrite {
    /// Replaces the matched path or prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Replaces the authority (Host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authority: Option<String>,
    /// Regex rewrite of the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri_regex_rewrite: Option<RegexRewrite>,
}

/// `rewrite.uriRegexRewrite`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegexRewrite {
    /// RE2 pattern.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Substitution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<String>,
}

/// `retries`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Retries {
    /// Retries (0 turns retries off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<i64>,
    /// Timeout per attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_try_timeout: Option<String>,
    /// Envoy retry conditions, comma-separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_on: Option<String>,
    /// Retry on other localities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_remote_localities: Option<bool>,
}

/// `fault`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fault {
    /// Delay injection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<FaultDelay>,
    /// Abort injection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort: Option<FaultAbort>,
}

/// `fault.delay`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultDelay {
    /// Fixed delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed_delay: Option<String>,
    /// Share of requests delayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage: Option<Percent>,
    /// Deprecated integer share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<u32>,
    /// Exponential delay (unsupported by Istio too): kept to be reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exponential_delay: Option<String>,
}

/// `fault.abort`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultAbort {
    /// HTTP status to answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u32>,
    /// gRPC status name to answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_status: Option<String>,
    /// HTTP/2 error: kept to be reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http2_error: Option<String>,
    /// Share of requests aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage: Option<Percent>,
}

/// `corsPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CorsPolicy {
    /// Allowed origins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_origins: Option<Vec<StringMatch>>,
    /// Deprecated exact origins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_origin: Option<Vec<String>>,
    /// Allowed methods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_methods: Option<Vec<String>>,
    /// Allowed request headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_headers: Option<Vec<String>>,
    /// Exposed response headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expose_headers: Option<Vec<String>>,
    /// Preflight cache duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<String>,
    /// Whether credentials are allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_credentials: Option<bool>,
    /// `FORWARD` or `IGNORE` preflights that match no origin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmatched_preflights: Option<String>,
}
