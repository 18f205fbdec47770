//! Unit tests of what a rewrite touches and admits. The rewrite path reads
//! only an endpoint's plain record, which holds its first hostname's key, not
//! its text: the fold touches that hostname by key, and checks that it has a
//! service, at the end of the run of endpoint events (see
//! `Folding::admit_later`); whoever needs the name looks it up
//! (`Touched::endpoint_names`, or the generator's own index). These tests pin
//! down every way a hostname is named, including the ones whose service or
//! endpoint goes away within the batch, and that a run reports and counts
//! exactly what log order does.

use std::collections::BTreeSet;

use super::tests::{h, reasons};
use super::*;
use crate::model::Hostname;
use crate::state::mk::*;

/// Services `h`, `h2` and `g`; endpoints `ep/1` (of `h`), `ep/two` (of `h`
/// and `h2`), `ep/g` (of `g`) and `ep/held` (of `nosvc`, which no source
/// defines, so it is held).
fn base() -> ModelState {
    let out = fold(
        &ModelState::default(),
        &at(
            0,
            vec![
                svc("a", 1, "ns", "h", &[80]),
                svc("a", 1, "ns", "h2", &[80]),
                svc("a", 1, "ns", "g", &[80]),
                ep("a", 1, "ep/1", "10.0.0.1", &["h"]),
                ep("a", 1, "ep/two", "10.0.0.2", &["h", "h2"]),
                ep("a", 1, "ep/g", "10.0.0.3", &["g"]),
                ep("a", 1, "ep/held", "10.0.0.4", &["nosvc"]),
            ],
        ),
    );
    assert_eq!(reasons(&out), [SkipReason::UnknownService]);
    out.state
}

fn touched_by(st: &ModelState, events: Vec<Event>) -> (BTreeSet<Hostname>, ModelState) {
    let out = fold(st, &at(10, events));
    assert_eq!(out.state, out.state.rebuild(), "incremental equals rebuilt");
    (out.touched.endpoint_names(&out.state), out.state)
}

#[test]
fn a_rewrite_touches_every_hostname_it_lists_served_or_held() {
    let st = base();
    // Address changes only: every one takes the rewrite path (same owner and
    // shape).
    let (touched, after) = touched_by(
        &st,
        vec![
            ep("a", 1, "ep/1", "10.1.0.1", &["h"]),
            ep("a", 1, "ep/two", "10.1.0.2", &["h", "h2"]),
            ep("a", 1, "ep/held", "10.1.0.4", &["nosvc"]),
        ],
    );
    assert_eq!(touched, [h("h"), h("h2"), h("nosvc")].into());
    assert_eq!(
        after.raw_endpoint("ep/held").map(|w| w.value.address),
        "10.1.0.4".parse().ok(),
        "a held endpoint is rewritten too"
    );
}

#[test]
fn a_rewritten_hostname_is_named_when_its_service_or_endpoint_goes_away() {
    let st = base();
    // Its service deleted after the rewrite: named when rewritten.
    let (touched, _) = touched_by(
        &st,
        vec![
            ep("a", 1, "ep/g", "10.1.0.3", &["g"]),
            svc_del("a", 1, "ns", "g"),
        ],
    );
    assert!(touched.contains(&h("g")), "{touched:?}");
    // A held endpoint rewritten and then deleted: the delete names it.
    let (touched, after) = touched_by(
        &st,
        vec![
            ep("a", 1, "ep/held", "10.1.0.4", &["nosvc"]),
            ep_del("a", 1, "ep/held"),
        ],
    );
    assert_eq!(touched, [h("nosvc")].into());
    assert!(after.raw_endpoint("ep/held").is_none());
    // A held endpoint rewritten, then its service defined: named by it.
    let (touched, _) = touched_by(
        &st,
        vec![
            ep("a", 1, "ep/held", "10.1.0.4", &["nosvc"]),
            svc("a", 1, "ns", "nosvc", &[80]),
        ],
    );
    assert_eq!(touched, [h("nosvc")].into());
}

/// The same, with each batch long enough to be applied as a sorted run (see
/// `SORTED_RUN_MIN`): the touches must not depend on the order of the run.
#[test]
fn a_sorted_run_touches_what_log_order_touches() {
    let st = base();
    let mut events = Vec::new();
    for i in 0..SORTED_RUN_MIN as u32 {
        let (key, hosts): (&str, &[&str]) = match i % 3 {
            0 => ("ep/1", &["h"]),
            1 => ("ep/two", &["h", "h2"]),
            _ => ("ep/held", &["nosvc"]),
        };
        events.push(ep(
            "a",
            1,
            key,
            &format!("10.2.{}.{}", i / 200, i % 200),
            hosts,
        ));
    }
    let (touched, after) = touched_by(&st, events.clone());
    assert_eq!(touched, [h("h"), h("h2"), h("nosvc")].into());
    let one_by_one = events
        .iter()
        .fold(st.clone(), |s, e| fold(&s, &at(10, vec![e.clone()])).state);
    assert_eq!(after, one_by_one);
}

/// A run long enough to be sorted, mixing every kind of endpoint event the
/// run may leave to check later and the ones it checks at once: held and
/// served rewrites, a held restamp (generation only), an endpoint of two
/// hostnames, new held endpoints (general path) and a delete of a held one
/// after its rewrites. Its reports (position, key, reason, text), count of
/// applied events, touches and state must be those of the same events folded
/// one at a time, in log order.
#[test]
fn a_sorted_run_reports_and_counts_what_log_order_does() {
    let st = base();
    let mut events = Vec::new();
    let mut held_addr = String::from("10.0.0.4");
    for i in 0..(2 * SORTED_RUN_MIN) as u32 {
        let addr = format!("10.3.{}.{}", i / 200, i % 200);
        events.push(match i % 6 {
            0 => {
                held_addr = addr.clone();
                ep("a", 1, "ep/held", &addr, &["nosvc"])
            }
            1 => ep("a", 1, "ep/1", &addr, &["h"]),
            2 => ep("a", 2, "ep/held", &held_addr, &["nosvc"]),
            3 => ep("a", 1, "ep/g", &addr, &["g"]),
            4 => ep("a", 1, "ep/two", &addr, &["h", "h2"]),
            _ => ep("a", 1, &format!("ep/new{i}"), &addr, &["nosvc", "other"]),
        });
    }
    events.push(ep_del("a", 1, "ep/held"));
    let batched = fold(&st, &at(10, events.clone()));
    assert_eq!(
        batched.applied + batched.skipped.len(),
        events.len(),
        "every event is either counted or reported"
    );

    let (mut state, mut applied) = (st, 0);
    let (mut skipped, mut touched) = (Vec::new(), BTreeSet::new());
    for (i, e) in events.into_iter().enumerate() {
        let out = fold(&state, &at(10 + i as u64, vec![e]));
        applied += out.applied;
        skipped.extend(out.skipped);
        touched.extend(out.touched.endpoint_names(&out.state));
        state = out.state;
    }
    let held = skipped
        .iter()
        .filter(|s| s.reason == SkipReason::UnknownService)
        .count();
    let held_events = (0..2 * SORTED_RUN_MIN)
        .filter(|i| [0, 2, 5].contains(&(i % 6)))
        .count();
    assert_eq!(held, held_events, "held rewrites, restamps and new");
    assert_eq!(batched.skipped, skipped);
    assert_eq!(batched.applied, applied);
    assert_eq!(batched.touched.endpoint_names(&batched.state), touched);
    assert_eq!(batched.state, state);
    assert!(
        skipped[0]
            .detail
            .contains("none of its services exists yet: nosvc;"),
        "{:?}",
        skipped[0]
    );
}
