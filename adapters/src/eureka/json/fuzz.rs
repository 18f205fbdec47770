//! Fuzzing the Eureka JSON reader and its mapping to entities: arbitrary bytes and
//! arbitrary documents in the shape of Eureka's `applications` responses. Asserts
//! no panic, an error for bytes that are not JSON or not an `applications`
//! document, bounded output (entries and entities no more than the input holds)
//! and that every valid instance has an address, an id and a VIP.
//!
//! Cases per property: `DELTAPILOT_FUZZ_CASES` (default [`CI_CASES`]).

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::json;

use super::*;
use crate::eureka::mapping::desired;

/// Cases per property in CI.
const CI_CASES: u32 = 256;

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

/// A value that is sometimes the right type for an instance field.
fn field() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (0u32..70000).prop_map(Value::from),
        "[A-Za-z0-9.:,_-]{0,16}".prop_map(Value::String),
        "10\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}".prop_map(Value::String),
        "(UP|DOWN|STARTING|OUT_OF_SERVICE|UNKNOWN|up)".prop_map(Value::String),
        ((0u32..70000), "(true|false|yes)").prop_map(|(p, e)| json!({"$": p, "@enabled": e})),
        proptest::collection::btree_map("[a-z@-]{1,8}", "[a-z0-9-]{0,8}", 0..4)
            .prop_map(|m| json!(m)),
        Just(json!({"name": "Amazon", "metadata": {"availability-zone": "eu-west-1b"}})),
    ]
}

const INSTANCE_FIELDS: &[&str] = &[
    "instanceId",
    "hostName",
    "app",
    "ipAddr",
    "status",
    "overriddenStatus",
    "port",
    "securePort",
    "vipAddress",
    "secureVipAddress",
    "metadata",
    "dataCenterInfo",
    "actionType",
];

fn instance() -> impl Strategy<Value = Value> {
    proptest::collection::vec((proptest::sample::select(INSTANCE_FIELDS), field()), 0..14)
        .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
}

fn application() -> impl Strategy<Value = Value> {
    (
        field(),
        prop_oneof![
            proptest::collection::vec(instance(), 0..4).prop_map(Value::Array),
            instance(),
            field(),
        ],
    )
        .prop_map(|(name, instance)| json!({"name": name, "instance": instance}))
}

fn document() -> impl Strategy<Value = (usize, Value)> {
    prop_oneof![
        proptest::collection::vec(application(), 0..4).prop_map(|a| (a.len(), json!(a))),
        application().prop_map(|a| (1, a)),
    ]
    .prop_map(|(n, apps)| {
        (
            n,
            json!({"applications": {"apps__hashcode": "UP_1_", "application": apps}}),
        )
    })
}

/// Parses `bytes`; on success checks the bounds and maps the valid instances.
fn check(bytes: &[u8]) -> Result<Option<Applications>, TestCaseError> {
    let doc = match parse(bytes) {
        Ok(d) => d,
        Err((_, msg)) => {
            prop_assert!(!msg.is_empty(), "an error without a message");
            return Ok(None);
        }
    };
    prop_assert!(
        doc.entries.len() <= bytes.len(),
        "{} entries",
        doc.entries.len()
    );
    let valid: Vec<&Instance> = doc
        .entries
        .iter()
        .filter_map(|e| e.instance.as_ref().ok())
        .collect();
    for i in &valid {
        prop_assert!(
            !i.id.is_empty() && !i.address.is_empty() && !i.vips.is_empty(),
            "{i:?}"
        );
        prop_assert!(
            i.address.parse::<IpAddr>().is_ok(),
            "address {:?}",
            i.address
        );
    }
    for e in &doc.entries {
        if let Err(why) = &e.instance {
            prop_assert!(!why.is_empty(), "a malformed instance without a reason");
        }
    }
    let vips: usize = valid.iter().map(|i| i.vips.len()).sum();
    let entities = desired(valid.iter().copied(), "eureka", "default");
    prop_assert!(
        entities.len() <= valid.len() + vips,
        "{} entities from {} instances",
        entities.len(),
        valid.len()
    );
    Ok(Some(doc))
}

proptest! {
    #![proptest_config(config())]

    /// Arbitrary bytes: an error unless they happen to be an `applications` document.
    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let is_json = serde_json::from_slice::<Value>(&bytes).is_ok();
        let got = check(&bytes)?;
        prop_assert!(is_json || got.is_none(), "non-JSON accepted");
    }

    /// Arbitrary `applications` documents: always parse (the shape is right); each
    /// instance entry is valid or carries a reason.
    #[test]
    fn arbitrary_documents((apps, doc) in document()) {
        let bytes = doc.to_string().into_bytes();
        let got = check(&bytes)?;
        prop_assert!(got.is_some() || apps > 0, "an empty applications document refused");
    }
}
