//! What of a DestinationRule's traffic policy the xDS translation cannot
//! honour, found when the rule is parsed so that it lands in the rule's status
//! with its path (codes `DP11xx`, see `problem`).
//!
//! Each finding names a field that is left out of the clusters (for
//! `DP1120`, of the proxyless gRPC clients' clusters only); nothing here
//! rejects the rule (the rest of it applies).
//!
//! What it does NOT do: translate (the xDS crate's `policy`), or look at the
//! host's service (the proxyless findings are worded for the host's `GRPC`
//! ports, wherever they are).

use super::dr::{ConnectionPool, DestinationRule, LoadBalancer, OutlierDetection};
use super::problem::Problem;
use super::{ClientTls, TrafficPolicy};

/// The parts of one place a policy can be set.
struct Parts<'a> {
    path: String,
    lb: Option<&'a LoadBalancer>,
    pool: Option<&'a ConnectionPool>,
    outlier: Option<&'a OutlierDetection>,
    tls: Option<&'a ClientTls>,
}

fn places<'a>(tp: &'a TrafficPolicy, path: &str, out: &mut Vec<Parts<'a>>) {
    out.push(Parts {
        path: path.to_string(),
        lb: tp.load_balancer.as_ref(),
        pool: tp.connection_pool.as_ref(),
        outlier: tp.outlier_detection.as_ref(),
        tls: tp.tls.as_ref(),
    });
    for (i, s) in tp.port_level_settings.iter().flatten().enumerate() {
        out.push(Parts {
            path: format!("{path}.portLevelSettings[{i}]"),
            lb: s.load_balancer.as_ref(),
            pool: s.connection_pool.as_ref(),
            outlier: s.outlier_detection.as_ref(),
            tls: s.tls.as_ref(),
        });
    }
}

/// Appends the problems of `dr`'s traffic policies (see the module doc).
pub(super) fn check(dr: &DestinationRule, problems: &mut Vec<Problem>) {
    let mut all = Vec::new();
    if let Some(tp) = &dr.traffic_policy {
        places(tp, "trafficPolicy", &mut all);
    }
    for (j, s) in dr.subsets.iter().flatten().enumerate() {
        if let Some(tp) = &s.traffic_policy {
            places(tp, &format!("subsets[{j}].trafficPolicy"), &mut all);
        }
    }
    for p in &all {
        if let Some(lb) = p.lb {
            check_lb(lb, &format!("{}.loadBalancer", p.path), problems);
        }
        if let Some(pool) = p.pool {
            check_pool(pool, &format!("{}.connectionPool", p.path), problems);
        }
        if let Some(od) = p.outlier {
            let at = format!("{}.outlierDetection", p.path);
            for (field, v) in [
                ("interval", &od.interval),
                ("baseEjectionTime", &od.base_ejection_time),
            ] {
                bad_duration(v.as_deref(), &format!("{at}.{field}"), problems);
            }
        }
        if let Some(tls) = p.tls {
            check_tls(tls, &format!("{}.tls", p.path), problems);
        }
    }
}

fn bad_duration(v: Option<&str>, path: &str, problems: &mut Vec<Problem>) {
    if let Some(v) = v
        && super::parse_duration(v).is_none()
    {
        problems.push(Problem::warning(
            "DP1104",
            path,
            format!("{v:?} is not a duration (e.g. 1s, 500ms, 1m30s): the field is ignored"),
        ));
    }
}

fn grpc_left_out(what: &str, path: &str, problems: &mut Vec<Problem>) {
    problems.push(Problem::warning(
        "DP1120",
        path,
        format!(
            "{what} is left out for proxyless gRPC clients only, on the host's GRPC ports \
             if it has any: they would reject it (Envoy sidecars and gateways get it)"
        ),
    ));
}

fn check_lb(lb: &LoadBalancer, path: &str, problems: &mut Vec<Problem>) {
    match lb.simple.as_deref() {
        None | Some("ROUND_ROBIN" | "UNSPECIFIED") => {}
        Some("PASSTHROUGH") => problems.push(Problem::warning(
            "DP1101",
            format!("{path}.simple"),
            "PASSTHROUGH (original destination) cannot be combined with an EDS cluster: \
             the cluster keeps round robin",
        )),
        Some(s @ ("LEAST_REQUEST" | "RANDOM")) => grpc_left_out(
            &format!("loadBalancer.simple {s} (gRPC clients get round robin)"),
            &format!("{path}.simple"),
            problems,
        ),
        Some(other) => problems.push(Problem::warning(
            "DP1105",
            format!("{path}.simple"),
            format!("unknown load balancer {other:?}: the cluster keeps round robin"),
        )),
    }
    if let Some(ch) = &lb.consistent_hash {
        let at = format!("{path}.consistentHash");
        if ch.maglev.is_some() {
            grpc_left_out(
                "maglev (gRPC clients get round robin; use ringHash for them)",
                &format!("{at}.maglev"),
                problems,
            );
        }
        if let Some(c) = &ch.http_cookie {
            bad_duration(c.ttl.as_deref(), &format!("{at}.httpCookie.ttl"), problems);
        }
        let keys = [
            ch.http_header_name.is_some(),
            ch.http_cookie.is_some(),
            ch.use_source_ip == Some(true),
            ch.http_query_parameter_name.is_some(),
        ];
        if keys.iter().filter(|k| **k).count() > 1 {
            problems.push(Problem::warning(
                "DP1106",
                at.clone(),
                "several hash keys: the first of httpHeaderName, httpCookie, useSourceIp, \
                 httpQueryParameterName is used",
            ));
        }
    }
    if let Some(l) = &lb.locality_lb_setting
        && (l.distribute.is_some() || l.failover.is_some() || l.enabled.is_some())
    {
        problems.push(Problem::warning(
            "DP1102",
            format!("{path}.localityLbSetting"),
            "locality weights and failover are relative to each proxy's own locality, \
             which needs per-proxy views (and, as in Istio, outlier detection to act): \
             not applied, every endpoint stays at priority 0",
        ));
    }
}

fn check_pool(pool: &ConnectionPool, path: &str, problems: &mut Vec<Problem>) {
    let unsupported = |field: &str, problems: &mut Vec<Problem>| {
        problems.push(Problem::warning(
            "DP1103",
            format!("{path}.{field}"),
            "not implemented: the field is ignored",
        ));
    };
    if let Some(tcp) = &pool.tcp {
        if tcp.idle_timeout.is_some() {
            unsupported("tcp.idleTimeout", problems);
        }
        bad_duration(
            tcp.connect_timeout.as_deref(),
            &format!("{path}.tcp.connectTimeout"),
            problems,
        );
        bad_duration(
            tcp.max_connection_duration.as_deref(),
            &format!("{path}.tcp.maxConnectionDuration"),
            problems,
        );
        if let Some(k) = &tcp.tcp_keepalive {
            bad_duration(
                k.time.as_deref(),
                &format!("{path}.tcp.tcpKeepalive.time"),
                problems,
            );
            bad_duration(
                k.interval.as_deref(),
                &format!("{path}.tcp.tcpKeepalive.interval"),
                problems,
            );
        }
    }
    if let Some(http) = &pool.http {
        if http.use_client_protocol.is_some() {
            unsupported("http.useClientProtocol", problems);
        }
        if http.max_concurrent_streams.is_some() {
            unsupported("http.maxConcurrentStreams", problems);
        }
        bad_duration(
            http.idle_timeout.as_deref(),
            &format!("{path}.http.idleTimeout"),
            problems,
        );
    }
    let only_requests = pool.tcp.is_none()
        && pool.http.as_ref().is_none_or(|h| {
            h.http1_max_pending_requests.is_none()
                && h.max_requests_per_connection.is_none()
                && h.max_retries.is_none()
                && h.idle_timeout.is_none()
                && h.h2_upgrade_policy.is_none()
        });
    if !only_requests {
        grpc_left_out(
            "every connection pool setting but http.http2MaxRequests",
            path,
            problems,
        );
    }
}

fn check_tls(tls: &ClientTls, path: &str, problems: &mut Vec<Problem>) {
    let mode = tls.mode.as_deref().unwrap_or("DISABLE");
    if !matches!(mode, "SIMPLE" | "MUTUAL") {
        return;
    }
    grpc_left_out(
        "upstream TLS (gRPC needs its own certificate providers)",
        path,
        problems,
    );
    if mode == "MUTUAL" && (tls.client_certificate.is_none() || tls.private_key.is_none()) {
        problems.push(Problem::warning(
            "DP1110",
            path,
            "MUTUAL without clientCertificate and privateKey: no client certificate is sent",
        ));
    }
    if tls.ca_certificates.as_deref().is_none_or(str::is_empty)
        && tls.insecure_skip_verify != Some(true)
    {
        problems.push(Problem::warning(
            "DP1111",
            path,
            "no caCertificates: the server's certificate is not verified \
             (and subjectAltNames not checked)",
        ));
    }
}
