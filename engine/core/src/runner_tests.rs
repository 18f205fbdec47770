//! Unit tests of the runner: decoding records, skipping what does not decode,
//! publishing, readiness (the fold's own rules are tested in `deltapilot-model`).

use bytes::Bytes;
use deltapilot_log::{Position, Record, RecordPos, encode_event};
use deltapilot_model::fold::SkipReason;
use deltapilot_model::state::mk::*;
use deltapilot_proto::{Event, SCHEMA_VERSION};
use deltapilot_xds::generate::GenOptions;

use super::Engine;

/// An endpoint of a service that does not exist yet is held by the fold and
/// served by the engine as soon as the service appears.
#[test]
fn a_held_endpoint_is_served_once_its_service_appears() {
    let mut engine = Engine::new(GenOptions::default());
    let early = ep("a", 1, "ep/early", "10.0.0.7", &["later"]);
    engine.apply_records(&[record(0, encode_event(&early))]);
    assert!(engine.current().resources.endpoints.is_empty());
    let service = svc("a", 1, "ns", "later", &[80]);
    engine.apply_records(&[record(1, encode_event(&service))]);
    let snap = engine.current();
    let cla = snap
        .resources
        .endpoints
        .get("outbound|80||later")
        .expect("assignment once the service exists");
    assert!(
        cla.bytes.windows(8).any(|w| w == b"10.0.0.7"),
        "the held endpoint is served"
    );
    assert_eq!(snap.model.held_endpoints(), 0, "no longer held");
}

fn record(offset: u64, bytes: Vec<u8>) -> Record {
    Record {
        pos: RecordPos {
            partition: 0,
            offset,
        },
        bytes: Bytes::from(bytes),
    }
}

fn records(events: &[Event]) -> Vec<Record> {
    events
        .iter()
        .enumerate()
        .map(|(i, e)| record(i as u64, encode_event(e)))
        .collect()
}

#[test]
fn runner_skips_undecodable_records_counts_them_and_moves_on() {
    let mut engine = Engine::new(GenOptions::default());
    let newer = Event {
        schema_version: SCHEMA_VERSION + 1,
        ..svc("a", 0, "ns", "x", &[80])
    };
    let recs = vec![
        record(0, encode_event(&svc("a", 0, "ns", "h", &[80]))),
        record(1, vec![0xff, 0xff, 0xff]),
        record(2, encode_event(&newer)),
        record(3, encode_event(&ep("a", 0, "ep/1", "10.0.0.1", &["h"]))),
    ];
    let report = engine.apply_records(&recs);
    let rs: Vec<SkipReason> = report.skipped.iter().map(|s| s.reason).collect();
    assert_eq!(rs, [SkipReason::Decode, SkipReason::SchemaTooNew]);
    assert_eq!(report.applied, 2);
    assert_eq!(report.records, 4);
    let stats = engine.stats();
    assert_eq!(stats.skipped(SkipReason::Decode), 1);
    assert_eq!(stats.skipped(SkipReason::SchemaTooNew), 1);
    assert_eq!(stats.events_applied(), 2);
    assert_eq!(engine.position().offsets(), &[4]);
    let snap = engine.current();
    assert_eq!(
        snap.position.offsets(),
        &[4],
        "published even without xDS changes"
    );
    assert_eq!(snap.model.endpoint_count("h"), 1);
    assert_eq!(snap.hash, report.hash);

    let again = engine.apply_records(&recs);
    assert_eq!(again.records, 0, "re-delivered records are ignored");
    assert_eq!(stats.events_applied(), 2);
}

#[test]
fn runner_seq_moves_only_with_changes() {
    let mut engine = Engine::new(GenOptions::default());
    let reader = engine.reader();
    let r = engine.apply_records(&records(&[svc("a", 0, "ns", "h", &[80])]));
    assert_eq!(r.seq, u64::from(!r.changes.is_empty()));
    assert_eq!(engine.current().seq, r.seq);
    assert_eq!(reader.load().seq, r.seq);
    let before = engine.current().hash;
    let r2 = engine.apply_records(&[record(1, encode_event(&svc("a", 0, "ns", "h", &[80])))]);
    assert!(r2.changes.is_empty(), "identical rewrite");
    assert_eq!(r2.seq, r.seq);
    assert_eq!(r2.hash, before);
    assert_eq!(reader.load().seq, r.seq);
}

#[test]
fn caught_up_makes_the_engine_ready_and_moves_position() {
    let mut engine = Engine::new(GenOptions::default());
    let ready = engine.ready();
    assert!(!*ready.borrow());
    engine.mark_caught_up(&Position::from_offsets(vec![5, 7]));
    assert!(*ready.borrow() && engine.stats().caught_up());
    assert_eq!(engine.current().position.offsets(), &[5, 7]);
}

#[test]
fn every_batch_reports_its_times_to_the_observer() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut engine = Engine::new(GenOptions::default());
    let sink = seen.clone();
    engine.observe_steps(super::StepObserver::new(move |t| {
        sink.lock().expect("lock").push(t);
    }));
    let r1 = engine.apply_records(&records(&[svc("a", 0, "ns", "h", &[80])]));
    let r2 = engine.apply_records(&[record(1, encode_event(&svc("b", 0, "ns", "h2", &[80])))]);
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen, vec![r1.times, r2.times]);
}
