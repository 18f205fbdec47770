//! Unit tests of the fold rules (see `state::mk` for the builders; the runner's
//! own tests are in `deltapilot-engine`).

use std::sync::Arc;

use deltapilot_proto::{self as pb, Event};

use super::*;
use crate::model::Hostname;
use crate::state::SourceGen;
use crate::state::mk::*;

pub(super) fn h(s: &str) -> Hostname {
    Hostname::new(s)
}

pub(super) fn reasons(out: &FoldOutput) -> Vec<SkipReason> {
    out.skipped.iter().map(|s| s.reason).collect()
}

fn base() -> ModelState {
    ModelState::from_events(&[
        svc("a", 1, "ns", "h", &[80]),
        ep("a", 1, "ep/1", "10.0.0.1", &["h"]),
    ])
}

#[test]
fn touched_names_what_changed_and_nothing_else() {
    let st = ModelState::default();
    let out = fold(
        &st,
        &at(
            0,
            vec![
                svc("a", 0, "ns", "h", &[80]),
                ep("a", 0, "ep/1", "10.0.0.1", &["h"]),
            ],
        ),
    );
    assert_eq!(out.touched.services, [h("h")].into());
    assert_eq!(out.touched.endpoint_names(&out.state), [h("h")].into());
    assert!(!out.touched.configs);
    assert_eq!(out.applied, 2);

    let again = fold(
        &out.state,
        &at(
            2,
            vec![
                svc("a", 0, "ns", "h", &[80]),
                ep("a", 0, "ep/1", "10.0.0.1", &["h"]),
            ],
        ),
    );
    assert!(
        again.touched.is_empty(),
        "identical rewrites touch nothing: {:?}",
        again.touched
    );
    assert_eq!(again.state.hash(), out.state.hash());

    let cfg_out = fold(&out.state, &at(4, vec![cfg("a", 0, "vs", "{}")]));
    assert!(cfg_out.touched.configs && cfg_out.touched.services.is_empty());
}

#[test]
fn losing_definition_changes_touch_no_service() {
    let st =
        ModelState::from_events(&[svc("a", 0, "ns", "h", &[80]), svc("b", 0, "ns", "h", &[81])]);
    let out = fold(&st, &at(0, vec![svc("b", 0, "ns", "h", &[82])]));
    assert!(
        out.touched.services.is_empty(),
        "b's definition is shadowed by a's"
    );
    let out = fold(&st, &at(0, vec![svc_del("a", 0, "ns", "h")]));
    assert_eq!(out.touched.services, [h("h")].into(), "b takes over");
    assert_eq!(out.state.get_service("h").expect("b").ports[0].number, 81);
}

#[test]
fn service_changed_and_changed_back_in_one_batch_is_not_touched() {
    let st = base();
    let out = fold(
        &st,
        &at(
            0,
            vec![svc("a", 1, "ns", "h", &[81]), svc("a", 1, "ns", "h", &[80])],
        ),
    );
    assert!(out.touched.services.is_empty());
}

#[test]
fn each_kind_of_bad_input_is_skipped_and_later_events_still_apply() {
    let st = base();
    let mut empty = svc("a", 1, "ns", "x", &[80]);
    empty.payload = None;
    let batch = at(
        10,
        vec![
            empty,
            svc("a", 1, "ns", "bad-port", &[70000]),
            ep("a", 1, "ep/bad-ip", "not-an-ip", &["h"]),
            ep("a", 1, "ep/orphan", "10.0.0.5", &["unknown"]),
            ep("b", 1, "ep/1", "10.0.0.9", &["h"]),
            ep_del("b", 1, "ep/1"),
            resync("a", 1, false),
            ep("a", 1, "ep/2", "10.0.0.2", &["h"]),
        ],
    );
    let out = fold(&st, &batch);
    assert_eq!(
        reasons(&out),
        [
            SkipReason::EmptyPayload,
            SkipReason::Invalid,
            SkipReason::Invalid,
            SkipReason::UnknownService,
            SkipReason::KeyConflict,
            SkipReason::KeyConflict,
        ]
    );
    let offsets: Vec<u64> = out.skipped.iter().map(|s| s.pos.offset).collect();
    assert_eq!(
        offsets,
        [10, 11, 12, 13, 14, 15],
        "each skip carries its log position"
    );
    assert_eq!(out.skipped[3].key.as_deref(), Some("ep/orphan"));
    assert!(
        out.skipped[1].detail.contains("70000"),
        "{}",
        out.skipped[1].detail
    );
    assert_eq!(out.applied, 2);
    let ep1 = out.state.raw_endpoint("ep/1").expect("kept");
    assert_eq!(
        (&*ep1.source, ep1.value.address.to_string()),
        ("a", "10.0.0.1".into())
    );
    assert_eq!(
        out.state.endpoint_count("h"),
        2,
        "the good endpoint after the bad ones applied"
    );
    assert_eq!(out.state.get_service("bad-port"), None);
    assert_eq!(out.state.hash(), out.state.recompute_hash());
    assert_eq!(out.state, out.state.rebuild());
}

#[test]
fn a_skipped_event_leaves_state_untouched() {
    let st = base();
    let out = fold(&st, &at(0, vec![ep("a", 1, "ep/1", "not-an-ip", &["h"])]));
    assert_eq!(reasons(&out), [SkipReason::Invalid]);
    assert_eq!(out.state, st);
    assert!(out.touched.is_empty());
}

/// An endpoint folded before its service (on a multi-partition log, a reader can
/// see them in that order) is reported but held, and is in the service's
/// assignment once the service arrives, without being written again.
#[test]
fn an_endpoint_of_an_unknown_service_is_held_until_the_service_appears() {
    let held = fold(
        &ModelState::default(),
        &at(0, vec![ep("a", 1, "ep/early", "10.0.0.7", &["later"])]),
    );
    assert_eq!(reasons(&held), [SkipReason::UnknownService]);
    assert!(
        held.skipped[0].detail.contains("held"),
        "{:?}",
        held.skipped
    );
    assert_eq!(held.applied, 0);
    assert!(held.state.raw_endpoint("ep/early").is_some(), "stored");
    assert_eq!(held.state.held_endpoints(), 1);
    let half = ModelState::from_events(&[
        svc("a", 1, "ns", "known", &[80]),
        ep("a", 1, "ep/half", "10.0.0.8", &["known", "later"]),
    ]);
    assert!(half.raw_endpoint("ep/half").is_some());
    assert_eq!(half.held_endpoints(), 0, "one of its services exists");
    assert_eq!(held.state.hash(), held.state.recompute_hash());
    assert_eq!(held.state, held.state.rebuild());
}

/// The admission check is answered once per shape within a run of endpoint
/// events; a service event between two endpoints of one shape must be seen by
/// the second (the answers are dropped at every other event).
#[test]
fn the_admission_check_sees_services_written_between_endpoints_of_one_shape() {
    let out = fold(
        &ModelState::default(),
        &at(
            0,
            vec![
                ep("a", 1, "ep/1", "10.0.0.1", &["later"]),
                ep("a", 1, "ep/2", "10.0.0.2", &["later"]),
                svc("a", 1, "ns", "later", &[80]),
                ep("a", 1, "ep/3", "10.0.0.3", &["later"]),
                svc_del("a", 1, "ns", "later"),
                ep("a", 1, "ep/4", "10.0.0.4", &["later"]),
            ],
        ),
    );
    let held: Vec<u64> = out
        .skipped
        .iter()
        .filter(|s| s.reason == SkipReason::UnknownService)
        .map(|s| s.pos.offset)
        .collect();
    assert_eq!(held, [0, 1, 5], "{:?}", out.skipped);
    assert_eq!(out.state.held_endpoints(), 4);
}

#[test]
fn completed_resync_sweeps_older_generations_of_that_source_only() {
    let st = ModelState::from_events(&[
        svc("a", 1, "ns", "h", &[80]),
        svc("a", 1, "ns", "gone", &[80]),
        svc("b", 1, "ns", "b-svc", &[80]),
        ep("a", 1, "ep/keep", "10.0.0.1", &["h"]),
        ep("a", 1, "ep/drop", "10.0.0.2", &["h"]),
        ep("b", 1, "ep/b", "10.0.0.3", &["b-svc"]),
        cfg("a", 1, "vs", "{}"),
    ]);
    let started = fold(&st, &at(0, vec![resync("a", 2, false)]));
    assert!(started.touched.is_empty());
    assert_eq!(
        started.state.source_gen("a"),
        SourceGen {
            started: 2,
            completed: 0
        }
    );

    let relist = vec![
        svc("a", 2, "ns", "h", &[80]),
        ep("a", 2, "ep/keep", "10.0.0.1", &["h"]),
        resync("a", 2, true),
    ];
    let out = fold(&started.state, &at(1, relist));
    assert!(out.skipped.is_empty(), "{:?}", out.skipped);
    let st2 = out.state;
    assert_eq!(st2.get_service("gone"), None);
    assert!(st2.get_service("h").is_some());
    assert!(
        st2.get_service("b-svc").is_some(),
        "other sources are not swept"
    );
    assert_eq!(
        st2.endpoints_of("h")
            .map(|e| e.key.to_string())
            .collect::<Vec<_>>(),
        ["ep/keep"]
    );
    assert!(st2.raw_endpoint("ep/b").is_some());
    assert_eq!(st2.configs().count(), 0);
    assert_eq!(out.touched.services, [h("gone")].into());
    assert_eq!(out.touched.endpoint_names(&st2), [h("h")].into());
    assert!(out.touched.configs);
    assert_eq!(
        st2.source_gen("a"),
        SourceGen {
            started: 2,
            completed: 2
        }
    );
    assert_eq!(st2, st2.rebuild());
}

#[test]
fn resync_of_an_unchanged_registry_touches_nothing() {
    let st = base();
    let out = fold(
        &st,
        &at(
            0,
            vec![
                resync("a", 2, false),
                svc("a", 2, "ns", "h", &[80]),
                ep("a", 2, "ep/1", "10.0.0.1", &["h"]),
                resync("a", 2, true),
            ],
        ),
    );
    assert!(out.touched.is_empty(), "{:?}", out.touched);
    assert_ne!(out.state.hash(), st.hash(), "generations moved");
}

#[test]
fn events_older_than_a_completed_resync_are_stale() {
    let st = fold(&base(), &at(0, vec![resync("a", 3, true)])).state;
    assert_eq!(st.counts().endpoints, 0, "gen-1 entities swept");
    let out = fold(
        &st,
        &at(
            1,
            vec![
                svc("a", 2, "ns", "h", &[80]),
                ep_del("a", 1, "ep/1"),
                resync("a", 2, true),
                svc("a", 3, "ns", "h", &[80]),
            ],
        ),
    );
    assert_eq!(
        reasons(&out),
        [
            SkipReason::StaleGeneration,
            SkipReason::StaleGeneration,
            SkipReason::StaleGeneration
        ]
    );
    assert!(
        out.state.get_service("h").is_some(),
        "the current-generation write applied"
    );
}

#[test]
fn endpoint_stays_when_its_service_goes_and_serves_again_when_it_returns() {
    let st = fold(&base(), &at(0, vec![svc_del("a", 1, "ns", "h")])).state;
    assert_eq!(st.get_service("h"), None);
    assert_eq!(
        st.endpoint_count("h"),
        1,
        "stored endpoints are not dropped with the service"
    );
    let back = fold(&st, &at(1, vec![svc("b", 1, "ns", "h", &[80])]));
    assert_eq!(back.touched.services, [h("h")].into());
    assert_eq!(back.state.instances_by_port("h", 80, &[]).len(), 1);
}

/// The rewrite path copies the tree path to a record before it compares (see
/// `ModelState::rewrite_endpoint`): an exact repeat must still leave an equal
/// state with an equal hash, and touch nothing.
#[test]
fn an_exact_repeat_of_an_endpoint_event_changes_nothing() {
    let st = base();
    let out = fold(&st, &at(0, vec![ep("a", 1, "ep/1", "10.0.0.1", &["h"])]));
    assert!(out.skipped.is_empty() && out.touched.is_empty());
    assert_eq!(out.applied, 1);
    assert_eq!(out.state, st);
    assert_eq!(out.state.hash(), st.hash());
    assert_eq!(out.state, out.state.rebuild());
}

#[test]
fn deleting_an_unknown_key_is_a_no_op() {
    let out = fold(
        &base(),
        &at(
            0,
            vec![ep_del("a", 1, "ep/none"), svc_del("a", 1, "ns", "none")],
        ),
    );
    assert!(out.skipped.is_empty() && out.touched.is_empty());
    assert_eq!(out.applied, 2);
}

/// A long run of endpoint events, applied by `fold_iter` in key-hash order, must
/// leave exactly the state, hash, touched set and skip list (in log order) that
/// applying them one at a time in log order leaves: rewrites and deletes of one
/// key, a key owned by another source, an unknown service and an invalid address
/// all inside the run.
#[test]
fn a_sorted_run_of_endpoint_events_equals_log_order() {
    let mut events = vec![
        svc("a", 0, "ns", "h1", &[80]),
        svc("a", 0, "ns", "h2", &[80]),
        ep("b", 0, "ep/owned-by-b", "10.9.0.1", &["h1"]),
    ];
    for i in 0..300u32 {
        let key = format!("ep/{}", i % 97);
        let addr = format!("10.0.{}.{}", i / 200, i % 200);
        let ev = match i % 11 {
            3 => ep_del("a", 0, &key),
            5 => ep("a", 0, "ep/owned-by-b", "10.9.0.2", &["h2"]),
            7 => ep("a", 0, &key, "10.0.0.1", &["nowhere"]),
            9 => ep("a", 0, &key, "not-an-ip", &["h1"]),
            _ => ep("a", 0, &key, &addr, &[if i % 2 == 0 { "h1" } else { "h2" }]),
        };
        events.push(ev);
    }
    let batch = at(0, events);
    let sorted = fold(&ModelState::default(), &batch);

    let mut one_by_one = ModelState::default();
    let mut skipped = Vec::new();
    let mut touched_eps = std::collections::BTreeSet::new();
    for e in &batch {
        let out = fold(&one_by_one, std::slice::from_ref(e));
        skipped.extend(out.skipped);
        touched_eps.extend(out.touched.endpoint_names(&out.state));
        one_by_one = out.state;
    }
    assert_eq!(sorted.state, one_by_one);
    assert_eq!(sorted.state.hash(), one_by_one.hash());
    assert_eq!(sorted.skipped, skipped, "skips are reported in log order");
    assert_eq!(sorted.touched.endpoint_names(&sorted.state), touched_eps);
    let reasons: std::collections::BTreeSet<_> = sorted.skipped.iter().map(|s| s.reason).collect();
    assert_eq!(
        reasons,
        [
            SkipReason::Invalid,
            SkipReason::UnknownService,
            SkipReason::KeyConflict
        ]
        .into(),
        "the run exercised every skip a run can produce"
    );
}

/// The admission check answers from the key of the shape's first hostname
/// when it names a service, and from all of its hostnames otherwise: an
/// endpoint whose first (sorted) hostname is not a service, or that writes its
/// hostname in capitals, is still admitted when one of its services exists,
/// whether its parts were prepared on a decoding thread or not, and on the
/// rewrite path too.
#[test]
fn admission_looks_past_the_first_hostname() {
    let base = ModelState::from_events(&[svc("a", 0, "ns", "h1", &[80])]);
    let batch = |addr: &str| {
        at(
            0,
            vec![
                ep(
                    "a",
                    0,
                    "ep/1",
                    &format!("10.0.1.{addr}"),
                    &["nowhere", "h1"],
                ),
                ep(
                    "a",
                    0,
                    "ep/4",
                    &format!("10.0.4.{addr}"),
                    &["a-missing", "h1"],
                ),
                ep("a", 0, "ep/2", &format!("10.0.2.{addr}"), &["H1"]),
                ep("a", 0, "ep/3", &format!("10.0.3.{addr}"), &["nowhere"]),
            ],
        )
    };
    let (first, rewrite) = (batch("1"), batch("9"));
    let prepare = |b: &[(RecordPos, Event)]| -> Vec<Prepared> {
        b.iter().map(|(_, e)| Prepared::of(e)).collect()
    };
    let only_ep3 = |out: &FoldOutput| {
        let skips: Vec<_> = out
            .skipped
            .iter()
            .map(|s| (s.key.as_deref(), s.reason))
            .collect();
        assert_eq!(skips, [(Some("ep/3"), SkipReason::UnknownService)]);
    };
    let plain = fold(&base, &first);
    let prepared = fold_prepared(&base, &first, &prepare(&first));
    only_ep3(&plain);
    only_ep3(&prepared);
    assert_eq!(plain.state, prepared.state);
    // The same shapes at new addresses take the rewrite path.
    only_ep3(&fold(&plain.state, &rewrite));
    only_ep3(&fold_prepared(&plain.state, &rewrite, &prepare(&rewrite)));
}

/// Folding with each event's [`Prepared`] part computed ahead (a replay does it on
/// its decoding thread) gives exactly what folding without it gives: state, hash,
/// touched sets and skips, invalid addresses included. A `prepared` of the wrong
/// length is ignored.
#[test]
fn prepared_events_fold_exactly_like_plain_ones() {
    let mut events = vec![
        svc("a", 0, "ns", "h1", &[80]),
        svc("a", 0, "ns", "h2", &[80]),
    ];
    for i in 0..200u32 {
        let key = format!("ep/{}", i % 41);
        let ev = match i % 7 {
            2 => ep_del("a", 0, &key),
            4 => ep("a", 0, &key, "not-an-ip", &["h1"]),
            5 => ep("a", 0, &key, "10.0.0.1", &["nowhere"]),
            // The shape changes under a key now and then: a stale digest would
            // share the old one.
            _ => {
                let hosts: &[&str] = if i % 3 == 0 { &["h1"] } else { &["h1", "h2"] };
                ep("a", 0, &key, &format!("10.1.0.{}", i % 13), hosts)
            }
        };
        events.push(ev);
    }
    events.push(svc("a", 0, "ns", "h2", &[81]));
    events.push(ep("a", 0, "ep/late", "fd00::7", &["h2"]));
    let batch = at(0, events);
    let prepared: Vec<Prepared> = batch.iter().map(|(_, e)| Prepared::of(e)).collect();
    let base = ModelState::from_events(&[svc("a", 0, "ns", "h1", &[80])]);
    let plain = fold(&base, &batch);
    for prep in [&prepared[..], &prepared[1..]] {
        let with = fold_prepared(&base, &batch, prep);
        assert_eq!(with.state, plain.state);
        assert_eq!(with.state.hash(), plain.state.hash());
        assert_eq!(with.touched, plain.touched);
        assert_eq!(with.skipped, plain.skipped);
        assert_eq!(with.applied, plain.applied);
    }
    // Folded in place (the caller gives the state up): the same state, hash,
    // skips and endpoint touches; touched services may only be a superset.
    for prep in [&prepared[..], &prepared[1..]] {
        let owned = fold_prepared_owned(base.clone(), &batch, prep);
        assert_eq!(owned.state, plain.state);
        assert_eq!(owned.state.hash(), plain.state.hash());
        assert_eq!(owned.state.hash(), owned.state.recompute_hash());
        assert_eq!(owned.skipped, plain.skipped);
        assert_eq!(owned.applied, plain.applied);
        assert_eq!(
            owned.touched.endpoint_names(&owned.state),
            plain.touched.endpoint_names(&plain.state)
        );
        assert!(owned.touched.services.is_superset(&plain.touched.services));
    }
    assert!(
        plain
            .skipped
            .iter()
            .any(|s| s.reason == SkipReason::Invalid && s.detail.contains("not-an-ip")),
        "{:?}",
        plain.skipped
    );
}

/// `ev` (an endpoint upsert) with its weight and health set.
fn weighted(mut ev: Event, weight: u32, health: pb::Health) -> Event {
    if let Some(Payload::EndpointUpsert(u)) = &mut ev.payload
        && let Some(e) = &mut u.endpoint
    {
        e.weight = weight;
        e.health = health as i32;
    }
    ev
}

/// Rewrites that keep an endpoint's shape are written in place when nothing else
/// holds the record, and by replacement when a kept state still does: both leave
/// the state, hash, skips and touches the general path leaves, and the kept state
/// is not changed through shared records. Covered: a restamp (same content, new
/// generation), weight, health and address changes, a shape change, another
/// source's write, and several rewrites of one key in one batch.
#[test]
fn endpoint_rewrites_in_place_equal_rewrites_by_replacement() {
    let mut registry = vec![
        svc("a", 1, "ns", "h1", &[80]),
        svc("a", 1, "ns", "h2", &[80]),
    ];
    for i in 0..10 {
        registry.push(ep(
            "a",
            1,
            &format!("ep/{i}"),
            &format!("10.0.0.{i}"),
            &["h1"],
        ));
    }
    let mut rewrites = Vec::new();
    for round in 0..3u32 {
        for i in 0..10u32 {
            let key = format!("ep/{i}");
            let addr = format!("10.0.0.{i}");
            let moved = format!("10.0.1.{}", i + round);
            rewrites.push(match (i + round) % 6 {
                0 => ep("a", 2 + u64::from(round), &key, &addr, &["h1"]),
                1 => weighted(
                    ep("a", 1, &key, &addr, &["h1"]),
                    3 + round,
                    pb::Health::Healthy,
                ),
                2 => weighted(ep("a", 1, &key, &addr, &["h1"]), 1, pb::Health::Draining),
                3 => ep("a", 1, &key, &moved, &["h1"]),
                4 => ep("a", 1, &key, &addr, &["h1", "h2"]),
                _ => ep("b", 1, &key, &addr, &["h1"]),
            });
        }
    }
    let base = ModelState::from_events(&registry);
    let kept = base.clone();
    let replaced = fold(&base, &at(100, rewrites.clone()));
    assert_eq!(base, kept, "the kept state is unchanged");
    assert_eq!(base.hash(), base.recompute_hash());

    let owned_base = fold_prepared_owned(ModelState::default(), &at(0, registry), &[]).state;
    let in_place = fold_prepared_owned(owned_base, &at(100, rewrites), &[]);
    assert_eq!(in_place.state, replaced.state);
    assert_eq!(in_place.state.hash(), replaced.state.hash());
    assert_eq!(in_place.state.hash(), in_place.state.recompute_hash());
    assert_eq!(in_place.state, in_place.state.rebuild());
    assert_eq!(in_place.skipped, replaced.skipped);
    assert_eq!(
        in_place.touched.endpoint_names(&in_place.state),
        replaced.touched.endpoint_names(&replaced.state)
    );
    assert_eq!(
        reasons(&replaced)
            .iter()
            .collect::<std::collections::BTreeSet<_>>(),
        [&SkipReason::KeyConflict].into()
    );
    // ep/1 moved in the last round; the address index follows it.
    let at_addr = |st: &ModelState, a: &str| -> Vec<String> {
        let addr = a.parse().expect("ip");
        st.endpoints_at(addr).map(|e| e.key.to_string()).collect()
    };
    assert_eq!(at_addr(&in_place.state, "10.0.1.3"), ["ep/1"]);
    assert!(at_addr(&in_place.state, "10.0.0.1").is_empty());
}

/// A new endpoint whose payload converts to a shape that an endpoint of its
/// hostname already has takes that shape instead of a copy; another shape (other
/// labels), or a payload naming the hostname in upper case (found under its
/// lowercased form only), is converted on its own. The state's content is the
/// same as folding every event in one batch into a fresh state.
#[test]
fn a_new_endpoint_shares_an_equal_shape_of_a_sibling() {
    let first = vec![
        svc("a", 1, "ns", "h1", &[80]),
        ep_labeled("a", 1, "ep/1", "10.0.0.1", &["h1"], &[("app", "x")]),
    ];
    let then = vec![
        ep_labeled("a", 1, "ep/2", "10.0.0.2", &["h1"], &[("app", "x")]),
        ep_labeled("a", 1, "ep/3", "10.0.0.3", &["h1"], &[("app", "y")]),
        ep_labeled("a", 1, "ep/4", "10.0.0.4", &["H1"], &[("app", "x")]),
    ];
    let st = fold(&ModelState::default(), &at(0, first.clone())).state;
    let out = fold(&st, &at(10, then.clone()));
    assert!(out.skipped.is_empty(), "{:?}", reasons(&out));
    let st = out.state;
    let shape = |k: &str| st.raw_endpoint(k).expect(k).value.shape.clone();
    assert!(
        Arc::ptr_eq(&shape("ep/1"), &shape("ep/2")),
        "the sibling's shape is shared"
    );
    assert!(!Arc::ptr_eq(&shape("ep/1"), &shape("ep/3")));
    assert!(!Arc::ptr_eq(&shape("ep/1"), &shape("ep/4")));
    assert_eq!(shape("ep/4").services, shape("ep/1").services);

    let all: Vec<_> = first.into_iter().chain(then).collect();
    let at_once = fold(&ModelState::default(), &at(0, all)).state;
    assert_eq!(st, at_once);
    assert_eq!(st.hash(), st.recompute_hash());
}

/// Both ways [`ServiceHosts`] answers (a walk of the claims map, for many
/// probes; a lookup each, for few) say which hostnames have a service, for a
/// key asked twice too.
#[test]
fn service_hosts_walk_and_lookups_agree() {
    let services: Vec<Event> = (0..40)
        .map(|i| svc("a", 1, "ns", &format!("h{i}"), &[80]))
        .collect();
    let st = ModelState::from_events(&services);
    let mut keys: Vec<(HKey, String)> = (0..60)
        .map(|i| {
            let name = format!("h{i}");
            (HKey::of(&name), name)
        })
        .collect();
    keys.sort();
    let mut walk = ServiceHosts::new(&st, keys.len());
    let mut lookups = ServiceHosts::new(&st, 1);
    assert!(walk.walk.is_some() && lookups.walk.is_none());
    for (key, name) in &keys {
        let served = name[1..].parse::<u32>().is_ok_and(|i| i < 40);
        assert_eq!(walk.served(key), served, "{name}");
        assert_eq!(walk.served(key), served, "{name} asked twice");
        assert_eq!(lookups.served(key), served, "{name}");
    }
}
