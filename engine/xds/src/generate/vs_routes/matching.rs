//! One `match` block → an Envoy `RouteMatch` (or none, when the block names
//! another port).
//!
//! Regexes: Envoy compiles `safe_regex` with RE2 and NACKs the whole route
//! configuration when one fails. Each one is compiled here with the `regex`
//! crate, whose syntax is RE2's (no look-around, no back-references); a pattern
//! it refuses is refused here (`DP2001`), dropping the route before Envoy sees it.

use envoy_types::pb::envoy::config::route::v3::{
    HeaderMatcher, QueryParameterMatcher, RouteMatch, header_matcher::HeaderMatchSpecifier,
    query_parameter_matcher::QueryParameterMatchSpecifier, route_match::PathSpecifier,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{
    RegexMatcher, StringMatcher, string_matcher::MatchPattern,
};
use envoy_types::pb::google::protobuf::BoolValue;

use deltapilot_model::rules::{HttpMatch, Problem, StringMatch, StringMatchKind};

use super::{Cx, Flavor};
use crate::generate::ModelRead;

/// The longest regex accepted: Envoy refuses RE2 programs above a size limit,
/// which a pattern this long may exceed; a longer one is refused here.
const MAX_REGEX_LEN: usize = 1024;

/// Checks `re` as Envoy's RE2 would, or the problem.
pub(crate) fn check_regex(re: &str, path: &str) -> Result<(), Problem> {
    if re.len() > MAX_REGEX_LEN {
        return Err(Problem::error(
            "DP2001",
            path,
            format!("regex longer than {MAX_REGEX_LEN} bytes: Envoy may refuse it; route dropped"),
        ));
    }
    regex::Regex::new(re).map(|_| ()).map_err(|e| {
        Problem::error(
            "DP2001",
            path,
            format!("regex {re:?} is not valid RE2: {e}; route dropped"),
        )
    })
}

/// The condition of `m`, or the problem.
fn kind<'a>(m: &'a StringMatch, path: &str) -> Result<StringMatchKind<'a>, Problem> {
    let k = m.kind().ok_or_else(|| {
        Problem::error(
            "DP2002",
            path,
            "a string match needs exactly one of exact, prefix or regex; route dropped",
        )
    })?;
    if let StringMatchKind::Regex(re) = k {
        check_regex(re, path)?;
    }
    Ok(k)
}

/// Envoy's `StringMatcher` for `m`.
pub(super) fn string_matcher(m: &StringMatch, path: &str) -> Result<StringMatcher, Problem> {
    let pattern = match kind(m, path)? {
        StringMatchKind::Exact(s) => MatchPattern::Exact(s.to_string()),
        StringMatchKind::Prefix(s) => MatchPattern::Prefix(s.to_string()),
        StringMatchKind::Regex(s) => MatchPattern::SafeRegex(regex_matcher(s)),
    };
    Ok(StringMatcher {
        match_pattern: Some(pattern),
        ignore_case: false,
    })
}

fn regex_matcher(re: &str) -> RegexMatcher {
    RegexMatcher {
        regex: re.to_string(),
        engine_type: None,
    }
}

fn header(name: &str, m: &StringMatch, invert: bool, path: &str) -> Result<HeaderMatcher, Problem> {
    Ok(HeaderMatcher {
        name: name.to_ascii_lowercase(),
        invert_match: invert,
        header_match_specifier: Some(HeaderMatchSpecifier::StringMatch(string_matcher(m, path)?)),
        ..Default::default()
    })
}

/// The `RouteMatch` of block `m` (`None`: a route without match blocks), or
/// `Ok(None)` when the block applies to another port.
pub(super) fn route_match<M: ModelRead + ?Sized>(
    cx: &Cx<'_, M>,
    m: Option<&HttpMatch>,
    path: &str,
) -> Result<Option<RouteMatch>, Problem> {
    let mut rm = RouteMatch {
        path_specifier: Some(PathSpecifier::Prefix("/".to_string())),
        ..Default::default()
    };
    let Some(m) = m else {
        return Ok(Some(rm));
    };
    if m.port.is_some_and(|p| p != u32::from(cx.port)) {
        return Ok(None);
    }
    if let Some(uri) = &m.uri {
        rm.path_specifier = Some(match kind(uri, &format!("{path}.uri"))? {
            StringMatchKind::Exact(s) => PathSpecifier::Path(s.to_string()),
            StringMatchKind::Prefix(s) => PathSpecifier::Prefix(s.to_string()),
            StringMatchKind::Regex(s) => PathSpecifier::SafeRegex(regex_matcher(s)),
        });
    }
    if m.ignore_uri_case == Some(true) {
        rm.case_sensitive = Some(BoolValue { value: false });
    }
    for (pseudo, sm, field) in [
        (":method", &m.method, "method"),
        (":authority", &m.authority, "authority"),
        (":scheme", &m.scheme, "scheme"),
    ] {
        if let Some(sm) = sm {
            rm.headers
                .push(header(pseudo, sm, false, &format!("{path}.{field}"))?);
        }
    }
    for (name, sm) in m.headers.iter().flatten() {
        rm.headers
            .push(header(name, sm, false, &format!("{path}.headers.{name}"))?);
    }
    for (name, sm) in m.without_headers.iter().flatten() {
        rm.headers.push(header(
            name,
            sm,
            true,
            &format!("{path}.withoutHeaders.{name}"),
        )?);
    }
    let queries = m.query_params.iter().flatten();
    if cx.flavor == Flavor::Grpc {
        if m.query_params.as_ref().is_some_and(|q| !q.is_empty()) {
            return Err(Problem::error(
                "DP2010",
                format!("{path}.queryParams"),
                "proxyless gRPC clients cannot match query parameters (gRPC has none); \
                 route dropped for them",
            ));
        }
    } else {
        for (name, sm) in queries {
            rm.query_parameters.push(QueryParameterMatcher {
                name: name.clone(),
                query_parameter_match_specifier: Some(QueryParameterMatchSpecifier::StringMatch(
                    string_matcher(sm, &format!("{path}.queryParams.{name}"))?,
                )),
            });
        }
    }
    Ok(Some(rm))
}
