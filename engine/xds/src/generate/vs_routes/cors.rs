//! `corsPolicy` → the CORS filter's per-route config
//! (`envoy.extensions.filters.http.cors.v3.CorsPolicy` under
//! `typed_per_filter_config["envoy.filters.http.cors"]`), as Istio emits it
//! for Envoy versions where the route-level `cors` field is deprecated. The
//! sidecar listeners carry the CORS filter ahead of the fault filter and the
//! router while any rule has a CORS policy (see `lds::sidecar_listener`).
//!
//! What it does NOT do: CORS for proxyless gRPC (browsers do not call them
//! directly; gRPC's xDS client has no CORS filter), reported `DP2010`.

use envoy_types::pb::envoy::config::core::v3::RuntimeFractionalPercent;
use envoy_types::pb::envoy::extensions::filters::http::cors::v3::CorsPolicy as EnvoyCors;
use envoy_types::pb::envoy::r#type::matcher::v3::{StringMatcher, string_matcher::MatchPattern};
use envoy_types::pb::envoy::r#type::v3::{FractionalPercent, fractional_percent::DenominatorType};
use envoy_types::pb::google::protobuf::{Any, BoolValue};

use deltapilot_model::rules::{HttpRoute, Problem};

use super::matching::string_matcher;
use super::{Cx, Flavor};
use crate::generate::ModelRead;
use crate::generate::common::to_any;
use crate::generate::policy::parse_duration;

/// The CORS filter's name (routes carry their policy as its per-route config).
pub(crate) const CORS_FILTER: &str = "envoy.filters.http.cors";

/// The route's CORS policy as the CORS filter's per-route config, or `None`.
/// A bad origin match (`DP2001`, `DP2002`), a `maxAge` that does not parse
/// (`DP2008`) or an unknown `unmatchedPreflights` (`DP2010`) drops the route,
/// as a bad match does; proxyless gRPC gets none, reported.
pub(super) fn cors_config<M: ModelRead + ?Sized>(
    cx: &Cx<'_, M>,
    r: &HttpRoute,
    path: &str,
    problems: &mut Vec<Problem>,
) -> Result<Option<Any>, Problem> {
    let Some(c) = &r.cors_policy else {
        return Ok(None);
    };
    if cx.flavor == Flavor::Grpc {
        problems.push(Problem::warning(
            "DP2010",
            format!("{path}.corsPolicy"),
            "proxyless gRPC clients have no CORS filter; left out of this route",
        ));
        return Ok(None);
    }
    let mut origins = Vec::new();
    for (i, m) in c.allow_origins.iter().flatten().enumerate() {
        origins.push(string_matcher(
            m,
            &format!("{path}.corsPolicy.allowOrigins[{i}]"),
        )?);
    }
    // The deprecated `allowOrigin` list is exact origins (Istio reads it only
    // when `allowOrigins` is empty).
    if origins.is_empty() {
        origins.extend(c.allow_origin.iter().flatten().map(|o| StringMatcher {
            match_pattern: Some(MatchPattern::Exact(o.clone())),
            ignore_case: false,
        }));
    }
    let max_age = match &c.max_age {
        Some(t) => parse_duration(t)
            .map(|d| d.seconds.to_string())
            .ok_or_else(|| {
                Problem::error(
                    "DP2008",
                    format!("{path}.corsPolicy.maxAge"),
                    format!("duration {t:?} does not parse (use e.g. \"24h\"); route dropped"),
                )
            })?,
        None => String::new(),
    };
    let forward = match c.unmatched_preflights.as_deref() {
        None | Some("UNSPECIFIED") => None,
        Some("FORWARD") => Some(true),
        Some("IGNORE") => Some(false),
        Some(other) => {
            return Err(Problem::error(
                "DP2010",
                format!("{path}.corsPolicy.unmatchedPreflights"),
                format!("unmatchedPreflights {other:?} is not FORWARD or IGNORE; route dropped"),
            ));
        }
    };
    let join = |v: &Option<Vec<String>>| v.as_deref().unwrap_or_default().join(",");
    Ok(Some(to_any(&EnvoyCors {
        allow_origin_string_match: origins,
        allow_methods: join(&c.allow_methods),
        allow_headers: join(&c.allow_headers),
        expose_headers: join(&c.expose_headers),
        max_age,
        allow_credentials: c.allow_credentials.map(|value| BoolValue { value }),
        filter_enabled: Some(RuntimeFractionalPercent {
            default_value: Some(FractionalPercent {
                numerator: 100,
                denominator: DenominatorType::Hundred as i32,
            }),
            runtime_key: String::new(),
        }),
        forward_not_matching_preflights: forward.map(|value| BoolValue { value }),
        ..Default::default()
    })))
}
