//! Fuzzing the delta and SotW state machines: arbitrary sequences of requests
//! (subscribe/unsubscribe any names, wildcards, ACK/NACK with current, stale or
//! made-up nonces, unknown type URLs) interleaved with snapshot changes and
//! response pulls, from a synthetic snapshot and from a real engine snapshot (the
//! example mesh through the file adapter, fold and generate). Asserts no panic and the protocol invariants on every response:
//! no duplicate names, no name both sent and removed, no empty delta response
//! (but the answer to a VHDS namespace),
//! nonces unique per stream, and a bounded number of responses per step.
//!
//! Cases: `DELTAPILOT_FUZZ_CASES` (default [`CI_CASES`]).

use std::collections::HashSet;

use deltapilot_adapters::file::load_paths;
use deltapilot_log::RecordPos;
use deltapilot_model::fold::fold_iter;
use deltapilot_model::state::ModelState;
use deltapilot_xds::ResourceType::{self, Cluster, Endpoint, Listener, Route, VirtualHost};
use deltapilot_xds::generate::{GenOptions, build_all};
use deltapilot_xds::snapshot::Snapshot;
use deltapilot_xds::view::RouteDelivery;
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use proptest::prelude::*;
use proptest::test_runner::Config;

use super::Limits;
use super::delta::DeltaStream;
use super::request::DeltaRequest;
use super::sotw::SotwStream;
use super::testutil::{map_mut, next};

/// Cases in CI.
const CI_CASES: u32 = 128;
/// Most responses pulled in one step; a state machine that keeps producing
/// responses with no new input fails the case.
const MAX_PULLS: usize = 32;

const TYPES: [ResourceType; 5] = [Cluster, Endpoint, Listener, Route, VirtualHost];
/// Names requests and snapshot edits draw from; `*` is the explicit wildcard,
/// `a/x` a VHDS name in namespace `a`.
const NAMES: [&str; 7] = ["a", "b", "c", "d", "*", "", "a/x"];

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

#[derive(Debug, Clone)]
enum Nonce {
    Empty,
    Last,
    Old(usize),
    Junk(String),
}

#[derive(Debug, Clone)]
enum Op {
    Request {
        t: usize,
        bad_type: bool,
        sub: Vec<usize>,
        unsub: Vec<usize>,
        nonce: Nonce,
        nack: bool,
    },
    Edit {
        t: usize,
        name: usize,
        body: Option<u8>,
    },
    Pull,
}

fn op() -> impl Strategy<Value = Op> {
    let names = || proptest::collection::vec(0..32usize, 0..4);
    let nonce = prop_oneof![
        Just(Nonce::Empty),
        Just(Nonce::Last),
        any::<usize>().prop_map(Nonce::Old),
        "[0-9a-z]{0,6}".prop_map(Nonce::Junk),
    ];
    prop_oneof![
        4 => (0..TYPES.len(), proptest::bool::weighted(0.05), names(), names(), nonce, any::<bool>())
            .prop_map(|(t, bad_type, sub, unsub, nonce, nack)| Op::Request { t, bad_type, sub, unsub, nonce, nack }),
        2 => (0..TYPES.len(), 0..32usize, proptest::option::of(any::<u8>()))
            .prop_map(|(t, name, body)| Op::Edit { t, name, body }),
        3 => Just(Op::Pull),
    ]
}

fn synthetic() -> Snapshot {
    let mut edits = Vec::new();
    for t in TYPES {
        for n in ["a", "b", "a/x"] {
            edits.push((t, n, Some("v0")));
        }
    }
    next(&Snapshot::default(), &edits)
}

/// A real engine snapshot: the example mesh read by the file adapter, folded and
/// generated as `deltapilot run` serves it.
fn real() -> Snapshot {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/mesh");
    let paths = ["hello.yaml", "vms.yaml"].map(|f| root.join(f));
    let events = load_paths(&paths, "fuzz")
        .expect("example mesh loads")
        .events;
    let out = fold_iter(
        &ModelState::default(),
        events.iter().enumerate().map(|(i, e)| {
            let pos = RecordPos {
                partition: 0,
                offset: i as u64,
            };
            (pos, e)
        }),
    );
    let (resources, _) = build_all(&out.state, &GenOptions::default());
    Snapshot {
        seq: 1,
        model: out.state,
        resources,
        ..Default::default()
    }
}

/// The snapshot a case starts from and the names its requests draw from: the
/// fixed [`NAMES`] plus, for a real snapshot, names it holds.
fn base(real_snapshot: bool) -> (Snapshot, Vec<String>) {
    let snap = if real_snapshot { real() } else { synthetic() };
    let mut pool: Vec<String> = NAMES.iter().map(|n| n.to_string()).collect();
    if real_snapshot {
        for t in TYPES {
            let mut s = snap.clone();
            let held: Vec<String> = map_mut(&mut s, t)
                .iter()
                .take(3)
                .map(|(n, _)| n.to_string())
                .collect();
            assert!(!held.is_empty(), "the example mesh has no {t:?}");
            pool.extend(held);
        }
    }
    (snap, pool)
}

/// Nonces a stream has sent, for picking ACK nonces and checking uniqueness.
#[derive(Default)]
struct Nonces {
    sent: Vec<String>,
    seen: HashSet<String>,
}

impl Nonces {
    fn pick(&self, n: &Nonce) -> String {
        match n {
            Nonce::Empty => String::new(),
            Nonce::Last => self.sent.last().cloned().unwrap_or_default(),
            Nonce::Old(i) if !self.sent.is_empty() => self.sent[i % self.sent.len()].clone(),
            Nonce::Old(_) => String::new(),
            Nonce::Junk(s) => s.clone(),
        }
    }

    fn record(&mut self, nonce: &str) -> Result<(), TestCaseError> {
        prop_assert!(!nonce.is_empty(), "a response without a nonce");
        prop_assert!(
            self.seen.insert(nonce.to_owned()),
            "nonce {nonce:?} sent twice"
        );
        self.sent.push(nonce.to_owned());
        Ok(())
    }
}

fn edit(snap: &Snapshot, pool: &[String], t: usize, name: usize, body: Option<u8>) -> Snapshot {
    let text = body.map(|b| format!("v{b}"));
    next(
        snap,
        &[(TYPES[t], pool[name % pool.len()].as_str(), text.as_deref())],
    )
}

fn type_url(t: usize, bad: bool) -> String {
    if bad {
        "type.googleapis.com/not.a.Type".into()
    } else {
        TYPES[t].type_url().into()
    }
}

fn names_of(ix: &[usize], pool: &[String]) -> Vec<String> {
    ix.iter().map(|i| pool[i % pool.len()].clone()).collect()
}

fn nack_detail(nack: bool) -> Option<RpcStatus> {
    nack.then(|| RpcStatus {
        code: 3,
        message: "rejected".into(),
        ..Default::default()
    })
}

fn run_delta(real_snapshot: bool, vhds: bool, ops: &[Op]) -> Result<usize, TestCaseError> {
    let (mut snap, pool) = base(real_snapshot);
    let limits = Limits {
        route_delivery: if vhds {
            RouteDelivery::Vhds
        } else {
            RouteDelivery::Inline
        },
        ..Limits::default()
    };
    let mut st = DeltaStream::new(None, limits, &snap);
    let mut nonces = Nonces::default();
    for op in ops {
        match op {
            Op::Request {
                t,
                bad_type,
                sub,
                unsub,
                nonce,
                nack,
            } => {
                let r = DeltaDiscoveryRequest {
                    type_url: type_url(*t, *bad_type),
                    resource_names_subscribe: names_of(sub, &pool),
                    resource_names_unsubscribe: names_of(unsub, &pool),
                    response_nonce: nonces.pick(nonce),
                    error_detail: nack_detail(*nack),
                    ..Default::default()
                };
                let out = st.on_request(&DeltaRequest::from(&r), &snap);
                prop_assert!(!*bad_type || out.is_err(), "unknown type URL accepted");
            }
            Op::Edit { t, name, body } => {
                snap = edit(&snap, &pool, *t, *name, *body);
                st.on_snapshot(&snap);
            }
            Op::Pull => {}
        }
        for pulls in 0.. {
            let Some(p) = st.next_response(&snap) else {
                break;
            };
            prop_assert!(pulls < MAX_PULLS, "responses without end");
            // Only a VHDS namespace is answered when it has nothing to say.
            prop_assert!(
                !p.out.resources.is_empty() || !p.out.removed.is_empty() || p.t == VirtualHost,
                "empty delta response"
            );
            let mut names = HashSet::new();
            for r in &p.out.resources {
                prop_assert!(names.insert(r.name.clone()), "{} sent twice", r.name);
            }
            for n in &p.out.removed {
                prop_assert!(
                    names.insert(n.clone()),
                    "{n} sent and removed, or removed twice"
                );
            }
            nonces.record(&p.out.nonce)?;
        }
    }
    Ok(nonces.sent.len())
}

fn run_sotw(real_snapshot: bool, ops: &[Op]) -> Result<usize, TestCaseError> {
    let (mut snap, pool) = base(real_snapshot);
    let mut st = SotwStream::new(None, Limits::default(), &snap);
    let mut nonces = Nonces::default();
    for op in ops {
        match op {
            Op::Request {
                t,
                bad_type,
                sub,
                nonce,
                nack,
                ..
            } => {
                let r = DiscoveryRequest {
                    type_url: type_url(*t, *bad_type),
                    resource_names: names_of(sub, &pool),
                    response_nonce: nonces.pick(nonce),
                    error_detail: nack_detail(*nack),
                    ..Default::default()
                };
                let out = st.on_request(&r);
                prop_assert!(!*bad_type || out.is_err(), "unknown type URL accepted");
            }
            Op::Edit { t, name, body } => {
                snap = edit(&snap, &pool, *t, *name, *body);
                st.on_snapshot(&snap);
            }
            Op::Pull => {}
        }
        for pulls in 0.. {
            let Some(p) = st.next_response(&snap) else {
                break;
            };
            prop_assert!(pulls < MAX_PULLS, "responses without end");
            let mut names = HashSet::new();
            for r in &p.out.resources {
                prop_assert!(names.insert(r.name.clone()), "{} sent twice", r.name);
            }
            nonces.record(&p.out.nonce)?;
        }
    }
    Ok(nonces.sent.len())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn delta_arbitrary_request_sequences(real in any::<bool>(), vhds in any::<bool>(), ops in proptest::collection::vec(op(), 1..40)) {
        run_delta(real, vhds, &ops)?;
    }

    #[test]
    fn sotw_arbitrary_request_sequences(real in any::<bool>(), ops in proptest::collection::vec(op(), 1..40)) {
        run_sotw(real, &ops)?;
    }
}

/// The harness is not vacuous: a wildcard subscription gets a response each way.
#[test]
fn a_subscription_gets_a_response() {
    let ops = [Op::Request {
        t: 0,
        bad_type: false,
        sub: vec![],
        unsub: vec![],
        nonce: Nonce::Empty,
        nack: false,
    }];
    for real in [false, true] {
        assert!(run_delta(real, false, &ops).expect("delta") >= 1);
        assert!(run_delta(real, true, &ops).expect("delta over VHDS") >= 1);
        assert!(run_sotw(real, &ops).expect("sotw") >= 1);
    }
}
