//! Fuzzing the event decoder and the fold's validation of what it decodes: arbitrary
//! bytes and damaged real events are decoded as `deltapilot.events.v1.Event`, and
//! whatever decodes is folded into a state. Asserts no panic, bounded output (a
//! decoded event re-encodes no larger than its input; the fold's state grows by at
//! most one entity per event) and an error for bytes that are not protobuf.
//!
//! Cases per property: `DELTAPILOT_FUZZ_CASES` (default [`CI_CASES`]).

use deltapilot_model::fold::fold;
use deltapilot_model::state::ModelState;
use deltapilot_proto::event::Payload;
use deltapilot_proto::{self as pb, Event, SCHEMA_VERSION};
use deltapilot_types::RecordPos;
use proptest::prelude::*;
use proptest::test_runner::Config;
use prost::Message;

/// Cases per property in CI.
const CI_CASES: u32 = 256;
/// Largest arbitrary input.
const MAX_INPUT_BYTES: usize = 2048;

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

fn event(generation: u64, payload: Payload) -> Event {
    Event {
        schema_version: SCHEMA_VERSION,
        source: "fuzz".into(),
        generation,
        observed_at_unix_micros: 0,
        payload: Some(payload),
    }
}

/// Real events of every common payload, to damage.
fn seeds() -> Vec<Vec<u8>> {
    let svc = event(
        1,
        Payload::ServiceUpsert(pb::ServiceUpsert {
            service: Some(pb::Service {
                hostname: "a.ns.svc".into(),
                namespace: "ns".into(),
                ports: vec![pb::Port {
                    name: "http".into(),
                    number: 80,
                    protocol: pb::Protocol::Http as i32,
                }],
                labels: [("app".to_string(), "a".to_string())].into(),
                resolution: 0,
            }),
        }),
    );
    let ep = event(
        2,
        Payload::EndpointUpsert(pb::EndpointUpsert {
            key: "ep/fuzz/1".into(),
            endpoint: Some(pb::Endpoint {
                address: "10.0.0.1".into(),
                weight: 1,
                services: vec![pb::ServiceRef {
                    namespace: "ns".into(),
                    hostname: "a.ns.svc".into(),
                }],
                ..Default::default()
            }),
        }),
    );
    let cfg = event(
        3,
        Payload::ConfigUpsert(pb::ConfigUpsert {
            config: Some(pb::ConfigObject {
                kind: pb::ConfigKind::VirtualService as i32,
                namespace: "ns".into(),
                name: "vs".into(),
                spec_json: r#"{"hosts":["a.ns.svc"],"http":[{"route":[{"destination":{"host":"a.ns.svc"}}]}]}"#.into(),
                ..Default::default()
            }),
        }),
    );
    let del = event(
        4,
        Payload::ServiceDelete(pb::EntityDelete {
            key: pb::service_key("ns", "a.ns.svc"),
        }),
    );
    [svc, ep, cfg, del]
        .iter()
        .map(|e| e.encode_to_vec())
        .collect()
}

#[derive(Debug, Clone)]
enum Edit {
    Flip { at: usize, xor: u8 },
    Cut { keep: usize },
    Insert { at: usize, bytes: Vec<u8> },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(at, xor)| Edit::Flip { at, xor }),
        any::<usize>().prop_map(|keep| Edit::Cut { keep }),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(at, bytes)| Edit::Insert { at, bytes }),
    ]
}

fn apply(b: &mut Vec<u8>, e: &Edit) {
    match e {
        Edit::Flip { at, xor } if !b.is_empty() => {
            let i = at % b.len();
            b[i] ^= xor;
        }
        Edit::Flip { .. } => {}
        Edit::Cut { keep } => b.truncate(keep % (b.len() + 1)),
        Edit::Insert { at, bytes } => {
            let i = at % (b.len() + 1);
            b.splice(i..i, bytes.iter().copied());
        }
    }
}

/// Decodes each input and folds what decodes into one state, checking the bounds.
fn decode_and_fold(inputs: &[Vec<u8>]) -> Result<(), TestCaseError> {
    let mut batch = Vec::new();
    for (i, bytes) in inputs.iter().enumerate() {
        if let Ok(ev) = Event::decode(bytes.as_slice()) {
            prop_assert!(
                ev.encoded_len() <= bytes.len(),
                "{} bytes decoded to an event of {} bytes",
                bytes.len(),
                ev.encoded_len()
            );
            let pos = RecordPos {
                partition: 0,
                offset: i as u64,
            };
            batch.push((pos, ev));
        }
    }
    let out = fold(&ModelState::default(), &batch);
    let n = batch.len();
    prop_assert!(out.applied <= n);
    prop_assert!(out.state.services().len() <= n);
    prop_assert!(out.state.configs().len() <= n);
    // Folding the same batch again from the result must not panic either.
    let again = fold(&out.state, &batch);
    prop_assert!(again.state.services().len() <= n);
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    /// Arbitrary bytes: decode errs or yields a bounded event the fold copes with.
    #[test]
    fn arbitrary_bytes(inputs in proptest::collection::vec(
        proptest::collection::vec(any::<u8>(), 0..MAX_INPUT_BYTES), 1..8)) {
        decode_and_fold(&inputs)?;
    }

    /// Real events with a few byte edits each.
    #[test]
    fn damaged_real_events(edits in proptest::collection::vec(
        (0usize..4, proptest::collection::vec(edit(), 1..4)), 1..12)) {
        let seeds = seeds();
        let inputs: Vec<Vec<u8>> = edits
            .iter()
            .map(|(s, es)| {
                let mut b = seeds[*s].clone();
                for e in es {
                    apply(&mut b, e);
                }
                b
            })
            .collect();
        decode_and_fold(&inputs)?;
    }
}

/// Bytes that are not protobuf (a truncated varint, an invalid wire type) are an
/// error, not a default event.
#[test]
fn garbage_is_an_error() {
    for bad in [&[0x08u8, 0xff][..], &[0x0f], &[0x0a, 0x05, 0x01]] {
        assert!(Event::decode(bad).is_err(), "{bad:02x?} decoded");
    }
}
