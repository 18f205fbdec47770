//! Binding a rule's host text to hostnames, as Istio does.
//!
//! - A name without a dot is a short name: `reviews` in namespace `default` is
//!   `reviews.default.svc.cluster.local` (Istio's `ResolveShortnameToFQDN`; the
//!   domain suffix is `cluster.local`, as in a default Istio install).
//! - Anything with a dot (an FQDN, a ServiceEntry host, `reviews.default`) is taken
//!   as written, lower-cased: Istio does the same, so `reviews.default` names no
//!   Kubernetes service.
//! - A wildcard `*.example.com` matches every host ending in `.example.com`, at
//!   any depth, and `*` matches every host. For one host, an exact pattern beats
//!   any wildcard, and a longer wildcard beats a shorter one (Istio's
//!   `mostSpecificHostWildcardMatch`).

use crate::model::Hostname;

/// The DNS suffix of Kubernetes service hostnames that short names resolve to.
pub const DOMAIN_SUFFIX: &str = "cluster.local";

/// The hostname (or wildcard pattern) `host` names in a rule of `namespace`.
pub fn resolve_host(host: &str, namespace: &str) -> Hostname {
    let h = host.trim().to_ascii_lowercase();
    if h.starts_with('*') || h.contains('.') {
        Hostname::new(&h)
    } else {
        Hostname::new(&format!("{h}.{namespace}.svc.{DOMAIN_SUFFIX}"))
    }
}

/// Why `host` cannot be bound, if it cannot: empty, or a `*` other than a
/// whole leading label.
pub fn host_error(host: &str) -> Option<&'static str> {
    let h = host.trim();
    if h.is_empty() {
        return Some("is empty");
    }
    if h.contains('/') {
        return Some("has a namespace prefix (`ns/host`), which only gateway hosts take");
    }
    let rest = h
        .strip_prefix("*.")
        .unwrap_or(if h == "*" { "" } else { h });
    if rest.contains('*') {
        return Some("has a `*` other than a whole leading label (`*` or `*.example.com`)");
    }
    if rest.split('.').any(str::is_empty) && !rest.is_empty() {
        return Some("has an empty label");
    }
    None
}

/// Whether `pattern` is a wildcard.
pub fn is_wildcard(pattern: &str) -> bool {
    pattern.starts_with('*')
}

/// Whether `pattern` (exact or wildcard) matches `host` (which may itself be a
/// wildcard ServiceEntry host: `*.example.com` matches `*.a.example.com`).
pub fn host_matches(pattern: &str, host: &str) -> bool {
    if pattern == host {
        return true;
    }
    match pattern.strip_prefix('*') {
        Some(suffix) => host.len() > suffix.len() && host.ends_with(suffix),
        None => false,
    }
}

/// The wildcard patterns that match `host`, most specific first, ending with `*`
/// (the exact pattern `host` itself is not included).
pub fn wildcards_of(host: &str) -> impl Iterator<Item = String> + '_ {
    host.char_indices()
        .filter(|(i, c)| *c == '.' && *i > 0)
        .map(move |(i, _)| format!("*{}", &host[i..]))
        .filter(move |p| p != host)
        .chain(std::iter::once("*".to_string()).filter(move |_| host != "*"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_resolve_in_the_rule_namespace_and_fqdns_stay() {
        assert_eq!(
            resolve_host("reviews", "default").as_str(),
            "reviews.default.svc.cluster.local"
        );
        assert_eq!(
            resolve_host("reviews.default", "x").as_str(),
            "reviews.default"
        );
        assert_eq!(
            resolve_host("API.Example.com", "x").as_str(),
            "api.example.com"
        );
        assert_eq!(resolve_host("*.example.com", "x").as_str(), "*.example.com");
        assert_eq!(resolve_host("*", "x").as_str(), "*");
    }

    #[test]
    fn wildcards_match_suffixes_at_any_depth() {
        assert!(host_matches("*.example.com", "a.example.com"));
        assert!(host_matches("*.example.com", "a.b.example.com"));
        assert!(host_matches("*.example.com", "*.b.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
        assert!(host_matches("*", "anything"));
        assert!(!host_matches("a.example.com", "b.example.com"));
        let w: Vec<String> = wildcards_of("a.b.example.com").collect();
        assert_eq!(w, ["*.b.example.com", "*.example.com", "*.com", "*"]);
        let w: Vec<String> = wildcards_of("*.b.example.com").collect();
        assert_eq!(w, ["*.example.com", "*.com", "*"]);
        for p in wildcards_of("a.b.example.com") {
            assert!(host_matches(&p, "a.b.example.com"), "{p}");
        }
    }

    #[test]
    fn malformed_hosts_are_named() {
        assert!(host_error("").is_some());
        assert!(host_error("a.*.com").is_some());
        assert!(host_error("ns/a.com").is_some());
        assert!(host_error("a..com").is_some());
        assert!(host_error("*").is_none());
        assert!(host_error("*.a.com").is_none());
        assert!(host_error("reviews").is_none());
    }
}
