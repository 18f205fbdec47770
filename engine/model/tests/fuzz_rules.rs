//! Fuzzing the Istio rule parser (`rules::parse`): arbitrary text and arbitrary JSON
//! built from Istio's field names, for every rule kind. Asserts no panic, bounded
//! output (problems and bound hosts no more than the spec's size allows) and an
//! error for garbage: text that is not JSON is rejected with `DP1001`, never
//! accepted as an empty rule.
//!
//! Cases per property: `DELTAPILOT_FUZZ_CASES` (default [`CI_CASES`]).

use std::sync::Arc;

use deltapilot_model::Config;
use deltapilot_model::rules::parse;
use deltapilot_proto::ConfigKind;
use proptest::prelude::*;
use proptest::test_runner::Config as RunConfig;
use serde_json::{Map, Value};

/// Cases per property in CI.
const CI_CASES: u32 = 256;

const KINDS: [ConfigKind; 4] = [
    ConfigKind::VirtualService,
    ConfigKind::DestinationRule,
    ConfigKind::Gateway,
    ConfigKind::Sidecar,
];

/// Field names of the Istio specs, so arbitrary JSON reaches the typed readers.
const FIELDS: &[&str] = &[
    "hosts",
    "gateways",
    "http",
    "tcp",
    "tls",
    "match",
    "route",
    "destination",
    "host",
    "subset",
    "port",
    "number",
    "weight",
    "timeout",
    "retries",
    "attempts",
    "perTryTimeout",
    "fault",
    "delay",
    "abort",
    "percentage",
    "value",
    "fixedDelay",
    "httpStatus",
    "uri",
    "prefix",
    "exact",
    "regex",
    "headers",
    "rewrite",
    "redirect",
    "mirror",
    "corsPolicy",
    "trafficPolicy",
    "loadBalancer",
    "simple",
    "consistentHash",
    "connectionPool",
    "outlierDetection",
    "subsets",
    "name",
    "labels",
    "selector",
    "servers",
    "protocol",
    "egress",
    "ingress",
    "workloadSelector",
    "exportTo",
    "sniHosts",
    "portLevelSettings",
    "consecutive5xxErrors",
    "interval",
    "baseEjectionTime",
    "maxEjectionPercent",
];

fn config() -> RunConfig {
    let cases = std::env::var("DELTAPILOT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CI_CASES);
    RunConfig {
        cases,
        failure_persistence: None,
        ..RunConfig::default()
    }
}

fn cfg(kind: ConfigKind, spec: &str) -> Config {
    Config {
        key: Arc::from(deltapilot_proto::config_key(kind, "ns", "fuzz").as_str()),
        kind,
        namespace: Arc::from("ns"),
        name: Arc::from("fuzz"),
        labels: Default::default(),
        annotations: Default::default(),
        spec_json: Arc::from(spec),
    }
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "[a-z0-9.*/_-]{0,12}".prop_map(Value::String),
        "[0-9]{1,4}(ms|s|m|h)?".prop_map(Value::String),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((proptest::sample::select(FIELDS), inner), 0..6).prop_map(
                |kv| {
                    Value::Object(
                        kv.into_iter()
                            .map(|(k, v)| (k.to_string(), v))
                            .collect::<Map<_, _>>(),
                    )
                }
            ),
        ]
    })
}

/// Parses `spec` as each kind and checks the bounds.
fn check(spec: &str) -> Result<(), TestCaseError> {
    let is_json = serde_json::from_str::<Value>(spec).is_ok();
    for kind in KINDS {
        let rule = parse(&cfg(kind, spec));
        // Each problem names a distinct input part; a spec cannot yield more
        // problems (or hosts) than it has bytes, plus the kind-level ones.
        let bound = spec.len() + 8;
        prop_assert!(
            rule.problems.len() <= bound,
            "{} problems",
            rule.problems.len()
        );
        prop_assert!(rule.hosts.len() <= bound);
        prop_assert!(rule.destinations.len() <= bound);
        for p in &rule.problems {
            prop_assert!(
                !p.message.is_empty(),
                "problem {} without a message",
                p.code
            );
        }
        if !is_json {
            prop_assert!(rule.rejected, "non-JSON accepted as {kind:?}");
            prop_assert!(rule.problems.iter().any(|p| p.code == "DP1001"));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    /// Arbitrary text as the spec.
    #[test]
    fn arbitrary_text(spec in "\\PC{0,256}") {
        check(&spec)?;
    }

    /// Arbitrary JSON over Istio's field names, as an object at the top.
    #[test]
    fn arbitrary_istio_json(fields in proptest::collection::vec(
        (proptest::sample::select(FIELDS), json()), 0..8)) {
        let obj: Map<String, Value> =
            fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        check(&Value::Object(obj).to_string())?;
    }
}
