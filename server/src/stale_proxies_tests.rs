use std::time::{Duration, Instant, SystemTime};

use deltapilot_model::Proxy;
use deltapilot_xds::ResourceType;

use super::*;
use crate::xds::registry::{StreamStatus, TypeStatus};

fn mk_type(in_flight: bool, pending: bool, nacked: bool) -> TypeStatus {
    TypeStatus {
        resource_type: ResourceType::Cluster,
        requested: true,
        wildcard: true,
        names: Vec::new(),
        held: 1,
        sent_nonce: Some("1-1".into()),
        sent_seq: Some(1),
        sent_version: None,
        acked_nonce: None,
        acked_seq: Some(1),
        acked_version: None,
        in_flight: in_flight.then(|| "1-2".to_string()),
        pending,
        nacks: u64::from(nacked),
        last_nack: nacked.then(|| "bad".to_string()),
        route_delivery: Default::default(),
    }
}

fn mk_stream(id: u64, seq: u64, types: Vec<TypeStatus>) -> StreamStatus {
    StreamStatus {
        stream: id,
        api: "delta",
        service: "ads",
        proxy: Some(Proxy::default()),
        connected_at: SystemTime::now(),
        seq,
        types,
    }
}

#[test]
fn waiting_for_an_ack_a_push_or_a_new_snapshot_is_out_of_date() {
    assert!(!out_of_date(
        &mk_stream(1, 5, vec![mk_type(false, false, false)]),
        5
    ));
    assert!(out_of_date(
        &mk_stream(1, 5, vec![mk_type(true, false, false)]),
        5
    ));
    assert!(out_of_date(
        &mk_stream(1, 5, vec![mk_type(false, true, false)]),
        5
    ));
    assert!(out_of_date(
        &mk_stream(1, 4, vec![mk_type(false, false, false)]),
        5
    ));
    // A NACKed type is counted by the NACK metrics, not here.
    assert!(!out_of_date(
        &mk_stream(1, 5, vec![mk_type(true, false, true)]),
        5
    ));
    // No node yet, or nothing requested: not a proxy to judge.
    let mut anonymous = mk_stream(1, 4, vec![mk_type(true, false, false)]);
    anonymous.proxy = None;
    assert!(!out_of_date(&anonymous, 5));
    assert!(!out_of_date(&mk_stream(1, 4, Vec::new()), 5));
}

#[test]
fn a_proxy_counts_as_stale_only_after_the_threshold_and_is_forgotten_once_synced() {
    let after = Duration::from_secs(60);
    let t0 = Instant::now();
    let behind = mk_stream(7, 5, vec![mk_type(true, false, false)]);
    let synced = mk_stream(8, 5, vec![mk_type(false, false, false)]);
    let mut tracker = Tracker::default();
    let both = [behind.clone(), synced.clone()];
    assert_eq!(tracker.update(&both, 5, t0, after), 0);
    assert_eq!(
        tracker.update(&both, 5, t0 + Duration::from_secs(59), after),
        0
    );
    assert_eq!(tracker.update(&both, 5, t0 + after, after), 1);
    // It catches up: forgotten, and its clock starts over if it falls behind again.
    let caught_up = mk_stream(7, 5, vec![mk_type(false, false, false)]);
    assert_eq!(
        tracker.update(&[caught_up, synced.clone()], 5, t0 + after, after),
        0
    );
    let later = t0 + Duration::from_secs(120);
    assert_eq!(
        tracker.update(std::slice::from_ref(&behind), 5, later, after),
        0
    );
    assert_eq!(tracker.update(&[behind], 5, later + after, after), 1);
    // A closed stream is forgotten.
    assert_eq!(tracker.update(&[synced], 5, later + after, after), 0);
}
