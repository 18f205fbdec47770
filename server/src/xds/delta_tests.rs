use std::collections::HashMap;

use deltapilot_engine::snapshot::Snapshot;
use deltapilot_engine::xds::ResourceType::{self, Cluster, Endpoint, Listener, Route};
use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use envoy_types::pb::google::rpc::Status as RpcStatus;

use super::*;
use crate::xds::testutil::{next, version};

fn req(t: ResourceType, sub: &[&str], unsub: &[&str], nonce: &str) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        type_url: t.type_url().into(),
        resource_names_subscribe: sub.iter().map(|s| s.to_string()).collect(),
        resource_names_unsubscribe: unsub.iter().map(|s| s.to_string()).collect(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

fn base() -> Snapshot {
    next(
        &Snapshot::default(),
        &[
            (Cluster, "c1", Some("cluster-1")),
            (Cluster, "c2", Some("cluster-2")),
            (Endpoint, "c1", Some("cla-1")),
            (Endpoint, "c2", Some("cla-2")),
            (Listener, "l1", Some("listener-1")),
            (Route, "r1", Some("route-1")),
        ],
    )
}

fn names(p: &DeltaPush) -> Vec<String> {
    p.out.resources.iter().map(|r| r.name.to_string()).collect()
}

fn removed(p: &DeltaPush) -> Vec<String> {
    p.out.removed.iter().map(|r| r.to_string()).collect()
}

fn stream(s: &Snapshot) -> DeltaStream {
    DeltaStream::new(7, None, Limits::default(), s)
}

fn ack(st: &mut DeltaStream, p: &DeltaPush) -> RequestOutcome {
    st.on_request(&req(p.t, &[], &[], &p.out.nonce))
        .expect("ack")
}

#[test]
fn legacy_wildcard_then_explicit_eds_in_order() {
    let s = base();
    let mut st = stream(&s);
    st.on_request(&req(Cluster, &[], &[], "")).expect("cds");
    st.on_request(&req(Endpoint, &["c1"], &[], ""))
        .expect("eds");
    let p = st.next_response(&s).expect("cds first");
    assert_eq!(
        (p.t, names(&p)),
        (Cluster, vec!["c1".to_string(), "c2".into()])
    );
    assert!(st.next_response(&s).is_none(), "EDS waits for the CDS ACK");
    assert!(ack(&mut st, &p).ack.is_some());
    let e = st.next_response(&s).expect("eds");
    assert_eq!((e.t, names(&e)), (Endpoint, vec!["c1".to_string()]));
    assert_ne!(e.out.nonce, p.out.nonce, "every nonce is unique");
    ack(&mut st, &e);
    assert!(
        st.next_response(&s).is_none(),
        "nothing more, and never an empty response"
    );
}

#[test]
fn missing_name_is_removed_stays_subscribed_and_arrives_later() {
    let s = base();
    let mut st = stream(&s);
    st.on_request(&req(Route, &["r1", "nope"], &[], ""))
        .expect("rds");
    let p = st.next_response(&s).expect("rds");
    assert_eq!(
        (names(&p), removed(&p)),
        (vec!["r1".to_string()], vec!["nope".to_string()])
    );
    ack(&mut st, &p);
    let s2 = next(&s, &[(Route, "nope", Some("now-here"))]);
    let p2 = st.next_response(&s2).expect("appears");
    assert_eq!(names(&p2), ["nope"]);
}

#[test]
fn newly_subscribed_name_is_answered_even_if_unchanged() {
    let s = base();
    let mut st = stream(&s);
    st.on_request(&req(Endpoint, &["c1"], &[], ""))
        .expect("eds");
    let p = st.next_response(&s).expect("c1");
    ack(&mut st, &p);
    st.on_request(&req(Endpoint, &["c1"], &[], ""))
        .expect("again");
    let p = st.next_response(&s).expect("re-subscribe is answered");
    assert_eq!(names(&p), ["c1"]);
}

#[test]
fn nack_is_recorded_and_same_version_not_resent() {
    let s = base();
    let mut st = stream(&s);
    st.on_request(&req(Cluster, &[], &[], "")).expect("cds");
    let p = st.next_response(&s).expect("cds");
    let mut nack = req(Cluster, &[], &[], &p.out.nonce);
    nack.error_detail = Some(RpcStatus {
        code: 3,
        message: "bad cluster".into(),
        details: vec![],
    });
    let o = st.on_request(&nack).expect("nack");
    assert_eq!(o.nack.as_deref(), Some("bad cluster"));
    assert_eq!(
        (st.nacks(Cluster), st.last_nack(Cluster)),
        (1, Some("bad cluster"))
    );
    assert!(
        st.next_response(&s).is_none(),
        "the NACKed version is not resent"
    );
    let s2 = next(&s, &[(Cluster, "c1", Some("cluster-1-fixed"))]);
    let p2 = st.next_response(&s2).expect("a new version goes");
    assert_eq!(names(&p2), ["c1"]);
}

#[test]
fn stale_nonce_is_ignored_but_subscription_applies() {
    let s = base();
    let mut st = stream(&s);
    st.on_request(&req(Endpoint, &["c1"], &[], ""))
        .expect("eds");
    let p = st.next_response(&s).expect("c1");
    let o = st
        .on_request(&req(Endpoint, &["c2"], &[], "garbage-nonce"))
        .expect("stale");
    assert!(o.stale_nonce && o.ack.is_none());
    assert!(st.next_response(&s).is_none(), "c1 still in flight");
    ack(&mut st, &p);
    let p2 = st
        .next_response(&s)
        .expect("c2 honoured despite the stale nonce");
    assert_eq!(names(&p2), ["c2"]);
}

#[test]
fn reconnect_sends_only_differing_versions_and_removals() {
    let s = base();
    let mut st = stream(&s);
    let mut r = req(Cluster, &[], &[], "");
    r.initial_resource_versions = HashMap::from([
        ("c1".to_string(), version(&s, Cluster, "c1")),
        ("c2".to_string(), "old".to_string()),
        ("gone".to_string(), "v".to_string()),
    ]);
    assert_eq!(st.on_request(&r).expect("cds").initial_versions, 3);
    let p = st.next_response(&s).expect("cds");
    assert_eq!(
        (names(&p), removed(&p)),
        (vec!["c2".to_string()], vec!["gone".to_string()])
    );
    assert_eq!(p.resent_known, 0);
}

#[test]
fn cluster_update_resends_its_cla_and_removal_waits_for_routes() {
    let s = base();
    let mut st = stream(&s);
    st.on_request(&req(Cluster, &[], &[], "")).expect("cds");
    st.on_request(&req(Endpoint, &["c1", "c2"], &[], ""))
        .expect("eds");
    st.on_request(&req(Route, &["r1"], &[], "")).expect("rds");
    for _ in 0..3 {
        let p = st.next_response(&s).expect("initial");
        ack(&mut st, &p);
    }
    assert!(st.next_response(&s).is_none());
    // c1 changes; c2 is removed while r1 stops referencing it.
    let s2 = next(
        &s,
        &[
            (Cluster, "c1", Some("cluster-1b")),
            (Cluster, "c2", None),
            (Route, "r1", Some("route-1b")),
        ],
    );
    let p = st.next_response(&s2).expect("cds upsert");
    assert_eq!(
        (p.t, names(&p), removed(&p)),
        (Cluster, vec!["c1".to_string()], vec![])
    );
    ack(&mut st, &p);
    let e = st.next_response(&s2).expect("cla of the updated cluster");
    assert_eq!((e.t, names(&e)), (Endpoint, vec!["c1".to_string()]));
    ack(&mut st, &e);
    let r = st.next_response(&s2).expect("route");
    assert_eq!(r.t, Route);
    assert!(
        st.next_response(&s2).is_none(),
        "the cluster stays until the route is ACKed"
    );
    ack(&mut st, &r);
    let c = st.next_response(&s2).expect("now the removal");
    assert_eq!((c.t, removed(&c)), (Cluster, vec!["c2".to_string()]));
}

#[test]
fn laggard_gets_latest_state_coalesced() {
    let s = base();
    let mut st = stream(&s);
    st.on_request(&req(Endpoint, &["c1"], &[], ""))
        .expect("eds");
    let p = st.next_response(&s).expect("c1");
    let mut cur = s;
    for i in 0..100 {
        cur = next(&cur, &[(Endpoint, "c1", Some(&format!("cla-1-v{i}")))]);
        st.on_snapshot(&cur);
    }
    ack(&mut st, &p);
    let p = st.next_response(&cur).expect("latest");
    assert_eq!(names(&p), ["c1"]);
    assert_eq!(&*p.out.resources[0].version, version(&cur, Endpoint, "c1"));
    ack(&mut st, &p);
    assert!(
        st.next_response(&cur).is_none(),
        "one response, not a hundred"
    );
}

#[test]
fn unsubscribe_and_limits() {
    let s = base();
    let limits = Limits {
        max_names_per_stream: 3,
        ..Limits::default()
    };
    let mut st = DeltaStream::new(1, None, limits, &s);
    st.on_request(&req(Endpoint, &["c1", "c2"], &[], ""))
        .expect("eds");
    st.on_request(&req(Endpoint, &[], &["c2"], ""))
        .expect("unsub");
    let p = st.next_response(&s).expect("c1 only");
    assert_eq!(names(&p), ["c1"]);
    let many: Vec<String> = (0..5).map(|i| format!("n{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let e = st
        .on_request(&req(Route, &many, &[], ""))
        .expect_err("too many");
    assert!(matches!(e, Error::TooManyNames { limit: 3, .. }), "{e}");
    let e = st.on_request(&DeltaDiscoveryRequest {
        type_url: "type.googleapis.com/x.Y".into(),
        ..Default::default()
    });
    assert!(matches!(e, Err(Error::UnknownTypeUrl(_))));
}
