//! Fuzzing the file adapter's parse (YAML documents, Kubernetes and Istio objects)
//! through `load_paths`, as `deltapilot` reads a file: arbitrary text, and
//! arbitrary Kubernetes-shaped objects of the kinds the adapter knows. Asserts no
//! panic, bounded output (events and problems no more than the file's size allows)
//! and an error for garbage: a file with content that yields no entity reports a
//! problem, never silence.
//!
//! Cases per property: `DELTAPILOT_FUZZ_CASES` (default [`CI_CASES`]).

use deltapilot_adapters::file::load_paths;
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Map, Value, json};

/// Cases per property in CI.
const CI_CASES: u32 = 128;
/// Events of a resync besides its entities (`STARTED`, `COMPLETED`).
const RESYNC_FRAME: usize = 2;

const KINDS: &[(&str, &str)] = &[
    ("v1", "Service"),
    ("v1", "Endpoints"),
    ("discovery.k8s.io/v1", "EndpointSlice"),
    ("networking.istio.io/v1", "ServiceEntry"),
    ("networking.istio.io/v1", "WorkloadEntry"),
    ("networking.istio.io/v1", "VirtualService"),
    ("networking.istio.io/v1", "DestinationRule"),
    ("networking.istio.io/v1", "Gateway"),
    ("networking.istio.io/v1", "Sidecar"),
    ("deltapilot.io/v1", "Mesh"),
    ("v1", "ConfigMap"),
];

const FIELDS: &[&str] = &[
    "hosts",
    "ports",
    "port",
    "number",
    "name",
    "protocol",
    "targetPort",
    "endpoints",
    "addresses",
    "address",
    "location",
    "resolution",
    "workloadSelector",
    "labels",
    "selector",
    "subsets",
    "ip",
    "clusterIP",
    "type",
    "http",
    "route",
    "destination",
    "host",
    "weight",
    "trafficPolicy",
    "network",
    "locality",
    "serviceAccount",
];

fn config() -> Config {
    let cases = std::env::var("DELTAPILOT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CI_CASES);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (0i64..70000).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-z0-9.*/_-]{0,12}".prop_map(Value::String),
        "10\\.0\\.[0-9]{1,3}\\.[0-9]{1,3}".prop_map(Value::String),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((proptest::sample::select(FIELDS), inner), 0..5).prop_map(
                |kv| { Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()) }
            ),
        ]
    })
}

/// A Kubernetes-shaped object: a known kind, a name, an arbitrary spec.
fn object() -> impl Strategy<Value = Value> {
    (
        proptest::sample::select(KINDS),
        "[a-z][a-z0-9-]{0,8}",
        proptest::option::of("[a-z][a-z0-9-]{0,8}"),
        proptest::collection::vec((proptest::sample::select(FIELDS), value()), 0..6),
    )
        .prop_map(|((api, kind), name, ns, spec)| {
            let mut meta = Map::new();
            meta.insert("name".into(), json!(name));
            if let Some(ns) = ns {
                meta.insert("namespace".into(), json!(ns));
            }
            let spec: Map<String, Value> =
                spec.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            json!({"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec})
        })
}

/// Writes `text` as a file, loads it and checks the bounds; returns (entities,
/// problems).
fn load(text: &str, ext: &str) -> Result<(usize, usize), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(format!("fuzz.{ext}"));
    std::fs::write(&path, text).expect("write");
    let loaded = load_paths(&[path], "fuzz").map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(loaded.events.len() >= RESYNC_FRAME, "no resync frame");
    let entities = loaded.events.len() - RESYNC_FRAME;
    let bound = text.len() + 1;
    prop_assert!(
        entities <= bound,
        "{entities} entities from {} bytes",
        text.len()
    );
    prop_assert!(loaded.problems.len() <= bound);
    for p in &loaded.problems {
        prop_assert!(
            !p.reason.is_empty(),
            "problem {:?} without a reason",
            p.kind
        );
    }
    Ok((entities, loaded.problems.len()))
}

proptest! {
    #![proptest_config(config())]

    /// Arbitrary text as a YAML file.
    #[test]
    fn arbitrary_text(text in "\\PC{0,256}") {
        load(&text, "yaml")?;
    }

    /// Arbitrary YAML-ish lines (keys, dashes, indentation, document markers).
    #[test]
    fn arbitrary_yaml_lines(lines in proptest::collection::vec(
        "( {0,4})(- )?([a-zA-Z]{1,8}: ?)?([a-z0-9.{}\\[\\]\"',:-]{0,10})|---|\\.\\.\\.", 0..24)) {
        load(&lines.join("\n"), "yaml")?;
    }

    /// Arbitrary objects of known kinds, several documents to a file, as YAML (JSON
    /// is YAML) and as a JSON list. An object of a kind the adapter reads yields an
    /// entity or a problem: none is dropped in silence.
    #[test]
    fn arbitrary_objects(objs in proptest::collection::vec(object(), 1..5)) {
        let yaml: Vec<String> = objs.iter().map(Value::to_string).collect();
        let (entities, problems) = load(&yaml.join("\n---\n"), "yaml")?;
        prop_assert!(entities + problems > 0, "{} objects, no entity and no problem", objs.len());
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objs}).to_string();
        load(&list, "json")?;
    }
}

/// Text that is not YAML at all is a problem with a position, not an empty file.
#[test]
fn garbage_is_a_problem() {
    for text in ["key: [unclosed", "\t- :\n  : - ]", "a: b\n c: d: e"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bad.yaml");
        std::fs::write(&path, text).expect("write");
        let loaded = load_paths(&[path], "fuzz").expect("load");
        assert!(!loaded.problems.is_empty(), "{text:?} gave no problem");
    }
}
