//! Unit tests of multi-copy resync markers: one `COMPLETED` copy per Kafka
//! partition, swept only once every copy is folded (see the `fold` module doc).

use deltapilot_proto::Event;
use deltapilot_proto::event::Payload;

use super::tests::{h, reasons};
use super::*;
use crate::state::SourceGen;
use crate::state::mk::*;
use deltapilot_types::RecordPos;

/// A `COMPLETED` marker at `generation` that says it was written to `copies`
/// partitions.
fn completed_copies(source: &str, generation: u64, copies: u32) -> Event {
    let mut ev = resync(source, generation, true);
    if let Some(Payload::Resync(m)) = &mut ev.payload {
        m.copies = copies;
    }
    ev
}

/// One event at `partition`:`offset`.
fn on(partition: u32, offset: u64, ev: Event) -> Vec<(RecordPos, Event)> {
    vec![(RecordPos { partition, offset }, ev)]
}

/// Source `a` at generation 1 (`h`, `gone`, `ep/keep`, `ep/drop`), then a relist at
/// generation 2 that re-upserts `h` and `ep/keep` only (its `COMPLETED` not yet
/// folded).
fn relisted_but_not_completed() -> ModelState {
    let st = ModelState::from_events(&[
        svc("a", 1, "ns", "h", &[80]),
        svc("a", 1, "ns", "gone", &[80]),
        ep("a", 1, "ep/keep", "10.0.0.1", &["h"]),
        ep("a", 1, "ep/drop", "10.0.0.2", &["h"]),
        resync("a", 2, false),
        svc("a", 2, "ns", "h", &[80]),
        ep("a", 2, "ep/keep", "10.0.0.1", &["h"]),
    ]);
    assert!(st.get_service("gone").is_some());
    st
}

/// Folds one event, asserting it was applied and the state stayed consistent.
fn fold_one(st: &ModelState, batch: Vec<(RecordPos, Event)>) -> FoldOutput {
    let out = fold(st, &batch);
    assert!(out.skipped.is_empty(), "{:?}", out.skipped);
    assert_eq!(out.state.hash(), out.state.recompute_hash());
    assert_eq!(
        out.state,
        out.state.rebuild(),
        "rebuild keeps the pending set"
    );
    assert_eq!(out.state.hash(), out.state.rebuild().hash());
    out
}

fn swept(st: &ModelState) -> bool {
    st.get_service("gone").is_none() && st.raw_endpoint("ep/drop").is_none()
}

#[test]
fn three_copies_sweep_only_after_the_third_distinct_partition() {
    let st = relisted_but_not_completed();
    let first = fold_one(&st, on(2, 7, completed_copies("a", 2, 3)));
    assert!(!swept(&first.state), "one copy of three does not sweep");
    assert!(first.touched.is_empty());
    assert_eq!(first.state.source_gen("a").completed, 0);
    let pending = first.state.pending_resync("a").expect("pending");
    assert_eq!((pending.generation, pending.copies), (2, 3), "{pending:?}");
    assert_eq!(pending.partitions, [2].into());
    assert_ne!(first.state.hash(), st.hash(), "the pending copy is state");

    let second = fold_one(&first.state, on(0, 3, completed_copies("a", 2, 3)));
    assert!(!swept(&second.state), "two copies of three do not sweep");
    assert_eq!(second.state.source_gen("a").completed, 0);

    let third = fold_one(&second.state, on(1, 9, completed_copies("a", 2, 3)));
    assert!(swept(&third.state), "the third partition's copy sweeps");
    assert!(third.state.get_service("h").is_some());
    assert!(third.state.raw_endpoint("ep/keep").is_some());
    assert_eq!(
        third.state.source_gen("a"),
        SourceGen {
            started: 2,
            completed: 2
        }
    );
    assert_eq!(third.state.pending_resync("a"), None);
    assert_eq!(third.touched.services, [h("gone")].into());

    // The same relist folded with single-copy markers ends in the same state.
    let single = fold_one(&st, on(0, 0, resync("a", 2, true)));
    assert_eq!(third.state, single.state);
    assert_eq!(third.state.hash(), single.state.hash());
}

#[test]
fn a_repeated_partition_counts_once() {
    let mut st = relisted_but_not_completed();
    for offset in 0..4 {
        st = fold_one(&st, on(1, offset, completed_copies("a", 2, 2))).state;
        assert!(!swept(&st), "copy {offset}, always from partition 1");
    }
    assert_eq!(st.pending_resync("a").map(|p| p.partitions.len()), Some(1));
    let done = fold_one(&st, on(0, 0, completed_copies("a", 2, 2)));
    assert!(
        swept(&done.state),
        "a second distinct partition completes it"
    );
}

#[test]
fn zero_or_one_copies_sweep_at_the_first_marker() {
    for copies in [0, 1] {
        let st = relisted_but_not_completed();
        let out = fold_one(&st, on(3, 0, completed_copies("a", 2, copies)));
        assert!(swept(&out.state), "copies {copies}");
        assert_eq!(out.state.source_gen("a").completed, 2);
        assert_eq!(out.state.pending_resync("a"), None);
    }
}

#[test]
fn the_stale_fence_rises_only_when_every_copy_is_folded() {
    let st = relisted_but_not_completed();
    let one = fold_one(&st, on(0, 0, completed_copies("a", 2, 2)));
    // While copies are missing, a generation-1 write is not stale: it may be a
    // write the relist has not yet superseded in the reader's view.
    let late = fold(&one.state, &on(1, 0, svc("a", 1, "ns", "late", &[80])));
    assert!(late.skipped.is_empty(), "{:?}", late.skipped);
    assert!(late.state.get_service("late").is_some());

    let done = fold_one(&late.state, on(1, 1, completed_copies("a", 2, 2)));
    assert!(swept(&done.state));
    assert!(
        done.state.get_service("late").is_none(),
        "swept with the rest of generation 1"
    );
    let stale = fold(&done.state, &on(0, 1, svc("a", 1, "ns", "late", &[80])));
    assert_eq!(reasons(&stale), [SkipReason::StaleGeneration]);

    // A late copy of the completed generation (a retried append) changes nothing.
    let again = fold_one(&done.state, on(0, 2, completed_copies("a", 2, 2)));
    assert_eq!(again.state, done.state);
    assert!(again.touched.is_empty());
}

#[test]
fn a_newer_generation_supersedes_a_pending_one() {
    let st = relisted_but_not_completed();
    let st = fold_one(&st, on(0, 0, completed_copies("a", 2, 3))).state;
    // Generation 3 re-upserts only `h` (so `ep/keep`, at 2, goes at its sweep).
    let st = fold_one(&st, on(0, 1, resync("a", 3, false))).state;
    let st = fold_one(&st, on(0, 2, svc("a", 3, "ns", "h", &[80]))).state;
    let st = fold_one(&st, on(1, 0, completed_copies("a", 3, 3))).state;
    let pending = st.pending_resync("a").expect("pending").clone();
    assert_eq!((pending.generation, pending.partitions.len()), (3, 1));

    // The rest of generation 2's copies no longer count.
    let mut st = st;
    for (p, o) in [(1, 1), (2, 0)] {
        st = fold_one(&st, on(p, o, completed_copies("a", 2, 3))).state;
    }
    assert!(!swept(&st), "generation 2 was superseded, not completed");
    assert_eq!(st.pending_resync("a"), Some(&pending));
    assert_eq!(st.source_gen("a").completed, 0);

    for (p, o) in [(0, 3), (2, 1)] {
        st = fold_one(&st, on(p, o, completed_copies("a", 3, 3))).state;
    }
    assert!(swept(&st));
    assert!(
        st.raw_endpoint("ep/keep").is_none(),
        "generation 3 sweeps everything below 3"
    );
    assert!(st.get_service("h").is_some());
    assert_eq!(st.source_gen("a").completed, 3);
    assert_eq!(st.pending_resync("a"), None);
}
