//! What a matched request gets: forward (destinations, weights, rewrite,
//! timeout, retries, mirror), redirect or direct response; and the header edits.

use envoy_types::pb::envoy::config::core::v3::{
    DataSource, HeaderValue, HeaderValueOption, RuntimeFractionalPercent, data_source::Specifier,
    header_value_option::HeaderAppendAction,
};
use envoy_types::pb::envoy::config::route::v3::{
    DirectResponseAction, RedirectAction, RetryPolicy, Route, RouteAction, WeightedCluster,
    redirect_action::{PathRewriteSpecifier, RedirectResponseCode, SchemeRewriteSpecifier},
    retry_policy::{RetryHostPredicate, retry_host_predicate},
    route::Action,
    route_action::{
        ClusterSpecifier, HashPolicy, HostRewriteSpecifier, MaxStreamDuration, RequestMirrorPolicy,
        hash_policy::PolicySpecifier,
    },
    weighted_cluster::ClusterWeight,
};
use envoy_types::pb::envoy::extensions::retry::host::previous_hosts::v3::PreviousHostsPredicate;
use envoy_types::pb::envoy::r#type::matcher::v3::RegexMatchAndSubstitute;
use envoy_types::pb::envoy::r#type::v3::{FractionalPercent, fractional_percent::DenominatorType};
use envoy_types::pb::google::protobuf::{Duration, UInt32Value};

use deltapilot_model::rules::{
    Destination, HeaderOps, Headers, HttpRoute, Percent, Problem, resolve_host,
};

use super::matching::check_regex;
use super::{Cx, Flavor, service_of};
use crate::generate::ModelRead;
use crate::generate::common::to_any;
use crate::generate::policy::{hash_policies, parse_duration};

/// Istio's default `retry_on` (also used when `retries.retryOn` is empty).
pub(crate) const DEFAULT_RETRY_ON: &str =
    "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes";

/// Istio's default number of retries.
pub(crate) const DEFAULT_RETRIES: u32 = 2;

/// `retry_on` conditions gRPC's xDS client implements (gRFC A44); others are
/// left out of proxyless routes.
const GRPC_RETRY_ON: [&str; 5] = [
    "cancelled",
    "deadline-exceeded",
    "internal",
    "resource-exhausted",
    "unavailable",
];

fn duration_at(text: &str, path: &str) -> Result<Duration, Problem> {
    parse_duration(text).ok_or_else(|| {
        Problem::error(
            "DP2008",
            path,
            format!(
                "duration {text:?} does not parse (use e.g. \"5s\" or \"250ms\"); route dropped"
            ),
        )
    })
}

/// A percentage as Envoy's fraction (per million, to keep Istio's decimals).
pub(crate) fn fraction(p: &Percent) -> FractionalPercent {
    let v = p.value.map_or(0.0, |v| v.0).clamp(0.0, 100.0);
    FractionalPercent {
        numerator: (v * 10_000.0).round() as u32,
        denominator: DenominatorType::Million as i32,
    }
}

/// The cluster a destination names on this route configuration's port, or the
/// problem that drops the route.
fn destination_cluster<M: ModelRead + ?Sized>(
    cx: &Cx<'_, M>,
    d: &Destination,
    path: &str,
) -> Result<String, Problem> {
    let host = d
        .host
        .as_deref()
        .filter(|h| !h.trim().is_empty())
        .ok_or_else(|| {
            Problem::error(
                "DP2004",
                format!("{path}.host"),
                "destination has no host; route dropped",
            )
        })?;
    let fqdn = resolve_host(host, cx.namespace);
    let svc = service_of(cx.model, &fqdn).ok_or_else(|| {
        Problem::error(
            "DP2004",
            format!("{path}.host"),
            format!("destination host {fqdn} has no service; route dropped"),
        )
    })?;
    let port = match d.port.as_ref().and_then(|p| p.number) {
        Some(n) => u16::try_from(n).ok().filter(|n| svc.port(*n).is_some()),
        None if svc.ports.len() == 1 => Some(svc.ports[0].number),
        None => svc.port(cx.port).map(|p| p.number),
    }
    .ok_or_else(|| {
        Problem::error(
            "DP2006",
            format!("{path}.port"),
            format!(
                "service {fqdn} does not serve the destination port (give one of {:?}); route dropped",
                svc.ports.iter().map(|p| p.number).collect::<Vec<_>>()
            ),
        )
    })?;
    let subset = d.subset.as_deref().unwrap_or_default();
    if !subset.is_empty() {
        let known = cx
            .model
            .rules()
            .and_then(|r| r.destination_rule_for(&fqdn))
            .is_some_and(|dr| {
                dr.subsets
                    .iter()
                    .flatten()
                    .any(|s| s.name.as_deref() == Some(subset))
            });
        if !known {
            return Err(Problem::error(
                "DP2005",
                format!("{path}.subset"),
                format!("no DestinationRule of {fqdn} defines subset {subset:?}; route dropped"),
            ));
        }
    }
    Ok(format!("outbound|{port}|{subset}|{fqdn}"))
}

/// The hash policies a route to `d` carries: those of the consistent hash its
/// DestinationRule gives the (port, subset) cluster, as Istio sets them on a
/// route with one destination. Proxyless gRPC implements only header hashing
/// (gRFC A42), so it gets only those.
fn destination_hash_policies<M: ModelRead + ?Sized>(
    cx: &Cx<'_, M>,
    d: &Destination,
) -> Vec<HashPolicy> {
    let Some(host) = d.host.as_deref().filter(|h| !h.trim().is_empty()) else {
        return Vec::new();
    };
    let fqdn = resolve_host(host, cx.namespace);
    let Some(svc) = service_of(cx.model, &fqdn) else {
        return Vec::new();
    };
    let port = match d.port.as_ref().and_then(|p| p.number) {
        Some(n) => u16::try_from(n).ok(),
        None if svc.ports.len() == 1 => Some(svc.ports[0].number),
        None => Some(cx.port),
    };
    let (Some(port), Some(dr)) = (
        port,
        cx.model.rules().and_then(|r| r.destination_rule_for(&fqdn)),
    ) else {
        return Vec::new();
    };
    let subset = d.subset.as_deref().filter(|s| !s.is_empty());
    for_flavor(hash_policies(&dr, port, subset), cx.flavor)
}

/// `policies` as `flavor` may receive them.
pub(crate) fn for_flavor(policies: Vec<HashPolicy>, flavor: Flavor) -> Vec<HashPolicy> {
    match flavor {
        Flavor::Sidecar => policies,
        Flavor::Grpc => policies
            .into_iter()
            .filter(|h| matches!(h.policy_specifier, Some(PolicySpecifier::Header(_))))
            .collect(),
    }
}

/// The route's action, or the problem that drops the route. Warnings about
/// parts left out go to `problems`.
pub(super) fn action<M: ModelRead + ?Sized>(
    cx: &Cx<'_, M>,
    r: &HttpRoute,
    path: &str,
    problems: &mut Vec<Problem>,
) -> Result<Action, Problem> {
    let grpc = cx.flavor == Flavor::Grpc;
    let left_out = |problems: &mut Vec<Problem>, field: &str, why: &str| {
        problems.push(Problem::warning(
            "DP2010",
            format!("{path}.{field}"),
            format!("{why}; left out of this route"),
        ));
    };
    if let Some(redirect) = &r.redirect {
        if grpc {
            return Err(Problem::error(
                "DP2010",
                format!("{path}.redirect"),
                "proxyless gRPC clients cannot follow redirects; route dropped for them",
            ));
        }
        let code = match redirect.redirect_code.unwrap_or(301) {
            301 => RedirectResponseCode::MovedPermanently,
            302 => RedirectResponseCode::Found,
            303 => RedirectResponseCode::SeeOther,
            307 => RedirectResponseCode::TemporaryRedirect,
            308 => RedirectResponseCode::PermanentRedirect,
            other => {
                return Err(Problem::error(
                    "DP2010",
                    format!("{path}.redirect.redirectCode"),
                    format!(
                        "redirect code {other} is not one Envoy sends (301, 302, 303, 307, 308); route dropped"
                    ),
                ));
            }
        };
        if redirect.derive_port.is_some() {
            left_out(
                problems,
                "redirect.derivePort",
                "derivePort is not yet implemented",
            );
        }
        return Ok(Action::Redirect(RedirectAction {
            host_redirect: redirect.authority.clone().unwrap_or_default(),
            port_redirect: redirect.port.unwrap_or(0),
            response_code: code as i32,
            scheme_rewrite_specifier: redirect
                .scheme
                .clone()
                .map(SchemeRewriteSpecifier::SchemeRedirect),
            path_rewrite_specifier: redirect.uri.clone().map(PathRewriteSpecifier::PathRedirect),
            ..Default::default()
        }));
    }
    if let Some(dr) = &r.direct_response {
        if grpc {
            return Err(Problem::error(
                "DP2010",
                format!("{path}.directResponse"),
                "proxyless gRPC clients cannot take direct responses; route dropped for them",
            ));
        }
        let body = dr.body.as_ref().and_then(|b| {
            b.string
                .clone()
                .map(Specifier::InlineString)
                .or_else(|| b.bytes.clone().map(Specifier::InlineString))
        });
        if dr.body.as_ref().is_some_and(|b| b.bytes.is_some()) {
            left_out(
                problems,
                "directResponse.body.bytes",
                "base64 bodies are sent as text",
            );
        }
        return Ok(Action::DirectResponse(DirectResponseAction {
            status: dr.status.unwrap_or(200),
            body: body.map(|s| DataSource {
                specifier: Some(s),
                ..Default::default()
            }),
            ..Default::default()
        }));
    }
    let dests = r.route.as_deref().unwrap_or_default();
    if dests.is_empty() {
        return Err(Problem::error(
            "DP2007",
            path,
            "a route needs a destination, a redirect or a direct response; route dropped",
        ));
    }
    let mut ra = RouteAction {
        timeout: Some(Duration::default()),
        ..Default::default()
    };
    if dests.len() == 1 {
        let dpath = format!("{path}.route[0].destination");
        let d = dests[0].destination.clone().unwrap_or_default();
        ra.cluster_specifier = Some(ClusterSpecifier::Cluster(destination_cluster(
            cx, &d, &dpath,
        )?));
        ra.hash_policy = destination_hash_policies(cx, &d);
    } else {
        let total: i64 = dests.iter().map(|d| d.weight.unwrap_or(0)).sum();
        if total != 100 || dests.iter().any(|d| d.weight.unwrap_or(0) < 0) {
            return Err(Problem::error(
                "DP2003",
                format!("{path}.route"),
                format!(
                    "weights of several destinations must total 100, not {total}; route dropped"
                ),
            ));
        }
        let mut clusters = Vec::new();
        for (k, d) in dests.iter().enumerate() {
            let w = d.weight.unwrap_or(0);
            if w == 0 {
                continue;
            }
            let dpath = format!("{path}.route[{k}]");
            let dest = d.destination.clone().unwrap_or_default();
            let mut cw = ClusterWeight {
                name: destination_cluster(cx, &dest, &format!("{dpath}.destination"))?,
                weight: Some(UInt32Value { value: w as u32 }),
                ..Default::default()
            };
            if let Some(h) = &d.headers {
                if grpc {
                    left_out(
                        problems,
                        &format!("route[{k}].headers"),
                        "proxyless gRPC clients do not edit headers",
                    );
                } else {
                    let e = Edits::of(h);
                    cw.request_headers_to_add = e.request_add;
                    cw.request_headers_to_remove = e.request_remove;
                    cw.response_headers_to_add = e.response_add;
                    cw.response_headers_to_remove = e.response_remove;
                }
            }
            clusters.push(cw);
        }
        ra.cluster_specifier = Some(ClusterSpecifier::WeightedClusters(WeightedCluster {
            clusters,
            ..Default::default()
        }));
    }
    if let Some(t) = &r.timeout {
        let d = duration_at(t, &format!("{path}.timeout"))?;
        if grpc {
            ra.timeout = None;
            ra.max_stream_duration = Some(MaxStreamDuration {
                max_stream_duration: Some(d),
                ..Default::default()
            });
        } else {
            ra.timeout = Some(d);
        }
    } else if grpc {
        ra.timeout = None;
    }
    ra.retry_policy = retry_policy(cx, r, path, problems)?;
    if !grpc {
        if let Some(rw) = &r.rewrite {
            if let Some(uri) = &rw.uri {
                ra.prefix_rewrite = uri.clone();
            }
            if let Some(re) = &rw.uri_regex_rewrite {
                let pattern = re.pattern.clone().unwrap_or_default();
                check_regex(&pattern, &format!("{path}.rewrite.uriRegexRewrite.match"))?;
                ra.regex_rewrite = Some(RegexMatchAndSubstitute {
                    pattern: Some(envoy_types::pb::envoy::r#type::matcher::v3::RegexMatcher {
                        regex: pattern,
                        engine_type: None,
                    }),
                    substitution: re.rewrite.clone().unwrap_or_default(),
                });
            }
            if let Some(a) = &rw.authority {
                ra.host_rewrite_specifier =
                    Some(HostRewriteSpecifier::HostRewriteLiteral(a.clone()));
            }
        }
        if let Some(m) = &r.mirror {
            let cluster = destination_cluster(cx, m, &format!("{path}.mirror"))?;
            let pct = r.mirror_percentage.clone().or_else(|| {
                r.mirror_percent.map(|p| Percent {
                    value: Some(deltapilot_model::rules::F64(f64::from(p))),
                })
            });
            ra.request_mirror_policies.push(RequestMirrorPolicy {
                cluster,
                runtime_fraction: Some(RuntimeFractionalPercent {
                    default_value: Some(pct.as_ref().map_or(
                        FractionalPercent {
                            numerator: 100,
                            denominator: DenominatorType::Hundred as i32,
                        },
                        fraction,
                    )),
                    runtime_key: String::new(),
                }),
                ..Default::default()
            });
        }
    } else {
        for (set, field) in [
            (r.rewrite.is_some(), "rewrite"),
            (r.mirror.is_some(), "mirror"),
        ] {
            if set {
                left_out(
                    problems,
                    field,
                    "proxyless gRPC clients do not implement it",
                );
            }
        }
    }
    Ok(Action::Route(ra))
}

/// The route's retry policy: Istio's default when absent, none for
/// `attempts: 0`.
fn retry_policy<M: ModelRead + ?Sized>(
    cx: &Cx<'_, M>,
    r: &HttpRoute,
    path: &str,
    problems: &mut Vec<Problem>,
) -> Result<Option<RetryPolicy>, Problem> {
    let grpc = cx.flavor == Flavor::Grpc;
    let attempts = r.retries.as_ref().and_then(|x| x.attempts);
    if attempts == Some(0) {
        return Ok(None);
    }
    let retry_on = r
        .retries
        .as_ref()
        .and_then(|x| x.retry_on.clone())
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_RETRY_ON.to_string());
    let per_try = match r
        .retries
        .as_ref()
        .and_then(|x| x.per_try_timeout.as_deref())
    {
        Some(t) => Some(duration_at(t, &format!("{path}.retries.perTryTimeout"))?),
        None => None,
    };
    let num = attempts.map_or(DEFAULT_RETRIES, |a| a.clamp(0, i64::from(u32::MAX)) as u32);
    if grpc {
        let kept: Vec<&str> = retry_on
            .split(',')
            .map(str::trim)
            .filter(|c| GRPC_RETRY_ON.contains(c))
            .collect();
        if r.retries.is_some() && per_try.is_some() {
            problems.push(Problem::warning(
                "DP2010",
                format!("{path}.retries.perTryTimeout"),
                "proxyless gRPC clients do not implement per-try timeouts; left out",
            ));
        }
        if kept.is_empty() {
            return Ok(None);
        }
        return Ok(Some(RetryPolicy {
            retry_on: kept.join(","),
            num_retries: Some(UInt32Value { value: num }),
            ..Default::default()
        }));
    }
    Ok(Some(RetryPolicy {
        retry_on,
        num_retries: Some(UInt32Value { value: num }),
        per_try_timeout: per_try,
        retry_host_predicate: vec![RetryHostPredicate {
            name: "envoy.retry_host_predicates.previous_hosts".to_string(),
            config_type: Some(retry_host_predicate::ConfigType::TypedConfig(to_any(
                &PreviousHostsPredicate {},
            ))),
        }],
        host_selection_retry_max_attempts: 5,
        retriable_status_codes: vec![503],
        ..Default::default()
    }))
}

/// Header edits, in Envoy's form.
#[derive(Debug, Clone, Default)]
pub(super) struct Edits {
    request_add: Vec<HeaderValueOption>,
    request_remove: Vec<String>,
    response_add: Vec<HeaderValueOption>,
    response_remove: Vec<String>,
}

impl Edits {
    fn of(h: &Headers) -> Self {
        let (request_add, request_remove) = ops(h.request.as_ref());
        let (response_add, response_remove) = ops(h.response.as_ref());
        Edits {
            request_add,
            request_remove,
            response_add,
            response_remove,
        }
    }

    /// Puts the edits on `r`.
    pub(super) fn apply(&self, r: &mut Route) {
        r.request_headers_to_add = self.request_add.clone();
        r.request_headers_to_remove = self.request_remove.clone();
        r.response_headers_to_add = self.response_add.clone();
        r.response_headers_to_remove = self.response_remove.clone();
    }
}

fn ops(o: Option<&HeaderOps>) -> (Vec<HeaderValueOption>, Vec<String>) {
    let Some(o) = o else {
        return (Vec::new(), Vec::new());
    };
    let mut add = Vec::new();
    let opt = |k: &String, v: &String, action: HeaderAppendAction| HeaderValueOption {
        header: Some(HeaderValue {
            key: k.clone(),
            value: v.clone(),
            ..Default::default()
        }),
        append_action: action as i32,
        ..Default::default()
    };
    for (k, v) in o.set.iter().flatten() {
        add.push(opt(k, v, HeaderAppendAction::OverwriteIfExistsOrAdd));
    }
    for (k, v) in o.add.iter().flatten() {
        add.push(opt(k, v, HeaderAppendAction::AppendIfExistsOrAdd));
    }
    (add, o.remove.clone().unwrap_or_default())
}

/// The route-level header edits (none for proxyless gRPC, reported).
pub(super) fn route_headers<M: ModelRead + ?Sized>(
    cx: &Cx<'_, M>,
    r: &HttpRoute,
    path: &str,
    problems: &mut Vec<Problem>,
) -> Edits {
    // A single destination's edits apply to the whole route, as Istio does.
    let single = match r.route.as_deref() {
        Some([only]) => only.headers.as_ref(),
        _ => None,
    };
    if cx.flavor == Flavor::Grpc && single.is_some() {
        problems.push(Problem::warning(
            "DP2010",
            format!("{path}.route[0].headers"),
            "proxyless gRPC clients do not edit headers; left out of this route",
        ));
    }
    let mut edits = match &r.headers {
        Some(_) if cx.flavor == Flavor::Grpc => {
            problems.push(Problem::warning(
                "DP2010",
                format!("{path}.headers"),
                "proxyless gRPC clients do not edit headers; left out of this route",
            ));
            Edits::default()
        }
        Some(h) => Edits::of(h),
        None => Edits::default(),
    };
    if let (Some(h), Flavor::Sidecar) = (single, cx.flavor) {
        let more = Edits::of(h);
        edits.request_add.extend(more.request_add);
        edits.request_remove.extend(more.request_remove);
        edits.response_add.extend(more.response_add);
        edits.response_remove.extend(more.response_remove);
    }
    edits
}

/// The route's fault injection as the fault filter's per-route config, or
/// `None`; a delay that does not parse drops the route.
pub(super) fn fault_config(
    r: &HttpRoute,
    path: &str,
) -> Result<Option<envoy_types::pb::google::protobuf::Any>, Problem> {
    use envoy_types::pb::envoy::extensions::filters::common::fault::v3::{
        FaultDelay as EnvoyDelay, fault_delay::FaultDelaySecifier,
    };
    use envoy_types::pb::envoy::extensions::filters::http::fault::v3::{
        FaultAbort as EnvoyAbort, HttpFault, fault_abort::ErrorType,
    };
    // Proxyless gRPC implements the same filter and per-route config (gRFC
    // A33), mapping an HTTP abort status to a gRPC status.
    let Some(f) = r.fault.as_ref() else {
        return Ok(None);
    };
    let pct = |p: &Option<Percent>, legacy: Option<u32>| {
        p.clone()
            .or_else(|| {
                legacy.map(|v| Percent {
                    value: Some(deltapilot_model::rules::F64(f64::from(v))),
                })
            })
            .map_or(
                FractionalPercent {
                    numerator: 100,
                    denominator: DenominatorType::Hundred as i32,
                },
                |p| fraction(&p),
            )
    };
    let delay = match &f.delay {
        Some(d) => {
            let fixed = d.fixed_delay.as_deref().ok_or_else(|| {
                Problem::error(
                    "DP2008",
                    format!("{path}.fault.delay.fixedDelay"),
                    "a delay needs fixedDelay; route dropped",
                )
            })?;
            Some(EnvoyDelay {
                percentage: Some(pct(&d.percentage, d.percent)),
                fault_delay_secifier: Some(FaultDelaySecifier::FixedDelay(duration_at(
                    fixed,
                    &format!("{path}.fault.delay.fixedDelay"),
                )?)),
            })
        }
        None => None,
    };
    let abort = match &f.abort {
        Some(a) => {
            let error = match (a.http_status, a.grpc_status.as_deref()) {
                (Some(code), None) if (200..600).contains(&code) => ErrorType::HttpStatus(code),
                (None, Some(name)) => match grpc_code(name) {
                    Some(code) => ErrorType::GrpcStatus(code),
                    None => {
                        return Err(Problem::error(
                            "DP2010",
                            format!("{path}.fault.abort.grpcStatus"),
                            format!(
                                "{name:?} is not a gRPC status name (e.g. UNAVAILABLE); route dropped"
                            ),
                        ));
                    }
                },
                _ => {
                    return Err(Problem::error(
                        "DP2010",
                        format!("{path}.fault.abort"),
                        "an abort needs one of httpStatus (200..599) or grpcStatus; route dropped",
                    ));
                }
            };
            Some(EnvoyAbort {
                percentage: Some(pct(&a.percentage, None)),
                error_type: Some(error),
                ..Default::default()
            })
        }
        None => None,
    };
    Ok(Some(to_any(&HttpFault {
        delay,
        abort,
        ..Default::default()
    })))
}

/// The code of a gRPC status name as Istio writes it (`UNAVAILABLE`), or a
/// number given as text.
fn grpc_code(name: &str) -> Option<u32> {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    let name = name.trim();
    NAMES
        .iter()
        .position(|n| n.eq_ignore_ascii_case(name))
        .and_then(|i| u32::try_from(i).ok())
        .or_else(|| name.parse().ok().filter(|c| *c < 17))
}
