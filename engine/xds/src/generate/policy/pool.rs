//! `connectionPool` → circuit breakers, connect timeout, keepalive and HTTP
//! protocol options; `outlierDetection` → the cluster's outlier detection.
//!
//! ## connectionPool
//! - `tcp.maxConnections`, `http.http1MaxPendingRequests`,
//!   `http.http2MaxRequests`, `http.maxRetries` → the default-priority circuit
//!   breaker thresholds `max_connections`, `max_pending_requests`,
//!   `max_requests`, `max_retries`. An unset limit is unlimited (`u32::MAX`),
//!   as Istio sets it, rather than Envoy's 1024 / 3.
//! - `tcp.connectTimeout` → `connect_timeout`; `tcp.tcpKeepalive` → the
//!   upstream socket's keepalive (`probes`, `time`, `interval`).
//! - HTTP ports: `http.idleTimeout`, `http.maxRequestsPerConnection` and
//!   `tcp.maxConnectionDuration` → the common HTTP protocol options;
//!   `http.h2UpgradePolicy: UPGRADE` → HTTP/2 upstream on an HTTP/1 port.
//! - Proxyless ports: only `max_requests` (what gRPC reads, gRFC A32).
//!
//! ## outlierDetection (as Istio maps it)
//! `consecutive5xxErrors` → `consecutive_5xx` with enforcement 100 (0 when
//! unset, so Envoy's default of 5 does not apply); `consecutiveGatewayErrors`
//! (or the deprecated `consecutiveErrors`) → `consecutive_gateway_failure`
//! enforced at 100; `interval`, `baseEjectionTime`, `maxEjectionPercent` → the
//! fields of the same meaning; success-rate ejection off;
//! `splitExternalLocalOriginErrors` and `consecutiveLocalOriginFailures` →
//! the local-origin fields; `minHealthPercent` → the panic threshold.
//!
//! What it does NOT do: `tcp.idleTimeout`, `http.useClientProtocol`,
//! `http.maxConcurrentStreams` (reported by the model, `DP2103`).

use std::collections::HashMap;

use envoy_types::pb::envoy::config::cluster::v3::circuit_breakers::Thresholds;
use envoy_types::pb::envoy::config::cluster::v3::{
    CircuitBreakers, Cluster, OutlierDetection as PbOutlier, UpstreamConnectionOptions,
    cluster::CommonLbConfig,
};
use envoy_types::pb::envoy::config::core::v3::{
    Http1ProtocolOptions, Http2ProtocolOptions, HttpProtocolOptions as CommonHttp, TcpKeepalive,
};
use envoy_types::pb::envoy::extensions::upstreams::http::v3::{
    HttpProtocolOptions,
    http_protocol_options::{
        ExplicitHttpConfig, UpstreamProtocolOptions, explicit_http_config::ProtocolConfig,
    },
};
use envoy_types::pb::envoy::r#type::v3::Percent;
use envoy_types::pb::google::protobuf::UInt32Value;

use super::super::cds::HTTP_PROTOCOL_OPTIONS_KEY;
use super::super::common::to_any;
use super::parse_duration;
use deltapilot_model::rules::{ConnectionPool, OutlierDetection};
use deltapilot_model::{Port, Protocol};

fn u32v(v: u32) -> UInt32Value {
    UInt32Value { value: v }
}

/// Seconds of an Istio duration, for the keepalive fields (whole seconds).
fn seconds(s: Option<&str>) -> Option<UInt32Value> {
    let d = parse_duration(s?)?;
    Some(u32v(u32::try_from(d.seconds).unwrap_or(u32::MAX)))
}

/// Sets circuit breakers, timeouts, keepalive and HTTP options from `pool`.
pub(super) fn apply_pool(c: &mut Cluster, pool: &ConnectionPool, port: &Port, grpc: bool) {
    let tcp = pool.tcp.as_ref();
    let http = pool.http.as_ref();
    let limit = |v: Option<u32>| Some(u32v(v.unwrap_or(u32::MAX)));
    let mut t = Thresholds {
        max_requests: limit(http.and_then(|h| h.http2_max_requests)),
        ..Default::default()
    };
    if grpc {
        c.circuit_breakers = Some(CircuitBreakers {
            thresholds: vec![t],
            ..Default::default()
        });
        return;
    }
    t.max_connections = limit(tcp.and_then(|t| t.max_connections));
    t.max_pending_requests = limit(http.and_then(|h| h.http1_max_pending_requests));
    t.max_retries = limit(http.and_then(|h| h.max_retries));
    c.circuit_breakers = Some(CircuitBreakers {
        thresholds: vec![t],
        ..Default::default()
    });
    if let Some(d) = tcp
        .and_then(|t| t.connect_timeout.as_deref())
        .and_then(parse_duration)
    {
        c.connect_timeout = Some(d);
    }
    if let Some(k) = tcp.and_then(|t| t.tcp_keepalive.as_ref()) {
        c.upstream_connection_options = Some(UpstreamConnectionOptions {
            tcp_keepalive: Some(TcpKeepalive {
                keepalive_probes: k.probes.map(u32v),
                keepalive_time: seconds(k.time.as_deref()),
                keepalive_interval: seconds(k.interval.as_deref()),
            }),
            ..Default::default()
        });
    }
    if !port.protocol.is_http() {
        return;
    }
    let common = CommonHttp {
        idle_timeout: http
            .and_then(|h| h.idle_timeout.as_deref())
            .and_then(parse_duration),
        max_connection_duration: tcp
            .and_then(|t| t.max_connection_duration.as_deref())
            .and_then(parse_duration),
        max_requests_per_connection: http
            .and_then(|h| h.max_requests_per_connection)
            .filter(|n| *n > 0)
            .map(u32v),
        ..Default::default()
    };
    let upgrade = port.protocol == Protocol::Http
        && http.and_then(|h| h.h2_upgrade_policy.as_deref()) == Some("UPGRADE");
    let has_common = common != CommonHttp::default();
    if !has_common && !upgrade {
        return;
    }
    let options = HttpProtocolOptions {
        common_http_protocol_options: has_common.then_some(common),
        // Envoy requires the upstream protocol whenever the options are set
        // (a cluster with only common options is NACKed).
        upstream_protocol_options: Some(UpstreamProtocolOptions::ExplicitHttpConfig(
            ExplicitHttpConfig {
                protocol_config: Some(if port.protocol.is_http2() || upgrade {
                    ProtocolConfig::Http2ProtocolOptions(Http2ProtocolOptions::default())
                } else {
                    ProtocolConfig::HttpProtocolOptions(Http1ProtocolOptions::default())
                }),
            },
        )),
        ..Default::default()
    };
    // A single entry, as in `cds` (deterministic encoding).
    c.typed_extension_protocol_options =
        HashMap::from([(HTTP_PROTOCOL_OPTIONS_KEY.to_string(), to_any(&options))]);
}

/// Sets outlier detection (and the panic threshold) from `od`.
pub(super) fn apply_outlier(c: &mut Cluster, od: &OutlierDetection) {
    let enforce = |on: bool| Some(u32v(if on { 100 } else { 0 }));
    let gateway = od.consecutive_gateway_errors.or(od.consecutive_errors);
    let five = od.consecutive_5xx_errors;
    let split = od.split_external_local_origin_errors == Some(true);
    let local = od.consecutive_local_origin_failures.filter(|_| split);
    c.outlier_detection = Some(PbOutlier {
        consecutive_5xx: five.map(u32v),
        enforcing_consecutive_5xx: enforce(five.is_some_and(|n| n > 0)),
        consecutive_gateway_failure: gateway.map(u32v),
        enforcing_consecutive_gateway_failure: enforce(gateway.is_some_and(|n| n > 0)),
        interval: od.interval.as_deref().and_then(parse_duration),
        base_ejection_time: od.base_ejection_time.as_deref().and_then(parse_duration),
        max_ejection_percent: od.max_ejection_percent.map(|p| u32v(p.min(100))),
        enforcing_success_rate: enforce(false),
        split_external_local_origin_errors: split,
        consecutive_local_origin_failure: local.map(u32v),
        enforcing_consecutive_local_origin_failure: local.map(|_| u32v(100)),
        ..Default::default()
    });
    if let Some(p) = od.min_health_percent {
        let lb = c
            .common_lb_config
            .get_or_insert_with(CommonLbConfig::default);
        lb.healthy_panic_threshold = Some(Percent {
            value: f64::from(p.min(100)),
        });
    }
}
