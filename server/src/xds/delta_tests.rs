use std::collections::HashMap;

use deltapilot_xds::ResourceType::{self, Cluster, Endpoint, Listener, Route};
use deltapilot_xds::snapshot::Snapshot;
use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use envoy_types::pb::google::rpc::Status as RpcStatus;

use super::*;
use crate::xds::request::DeltaRequest;
use crate::xds::testutil::{delta_req as req, names, next, removed, version};

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

fn stream(s: &Snapshot) -> DeltaStream {
    DeltaStream::new(None, Limits::default(), s)
}

/// Applies an envoy-types request, as the stream would after decoding it leanly.
fn on(
    st: &mut DeltaStream,
    snap: &Snapshot,
    r: &DeltaDiscoveryRequest,
) -> Result<RequestOutcome, Error> {
    st.on_request(&DeltaRequest::from(r), snap)
}

fn ack(st: &mut DeltaStream, p: &DeltaPush) -> RequestOutcome {
    on(st, &Snapshot::default(), &req(p.t, &[], &[], &p.out.nonce)).expect("ack")
}

/// A stream that subscribed (`[]` is a wildcard) and ACKed everything `s` holds.
fn synced(s: &Snapshot, subs: &[(ResourceType, &[&str])]) -> DeltaStream {
    let mut st = stream(s);
    for (t, names) in subs {
        on(&mut st, s, &req(*t, names, &[], "")).expect("subscribe");
    }
    while let Some(p) = st.next_response(s) {
        ack(&mut st, &p);
    }
    st
}

#[test]
fn legacy_wildcard_then_explicit_eds_in_order() {
    let s = base();
    let mut st = stream(&s);
    on(&mut st, &s, &req(Cluster, &[], &[], "")).expect("cds");
    on(&mut st, &s, &req(Endpoint, &["c1"], &[], "")).expect("eds");
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
    on(&mut st, &s, &req(Route, &["r1", "nope"], &[], "")).expect("rds");
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
    on(&mut st, &s, &req(Endpoint, &["c1"], &[], "")).expect("eds");
    let p = st.next_response(&s).expect("c1");
    ack(&mut st, &p);
    on(&mut st, &s, &req(Endpoint, &["c1"], &[], "")).expect("again");
    let p = st.next_response(&s).expect("re-subscribe is answered");
    assert_eq!(names(&p), ["c1"]);
}

#[test]
fn nack_is_recorded_and_same_version_not_resent() {
    let s = base();
    let mut st = stream(&s);
    on(&mut st, &s, &req(Cluster, &[], &[], "")).expect("cds");
    let p = st.next_response(&s).expect("cds");
    let mut nack = req(Cluster, &[], &[], &p.out.nonce);
    nack.error_detail = Some(RpcStatus {
        code: 3,
        message: "bad cluster".into(),
        details: vec![],
    });
    let o = on(&mut st, &s, &nack).expect("nack");
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
    on(&mut st, &s, &req(Endpoint, &["c1"], &[], "")).expect("eds");
    let p = st.next_response(&s).expect("c1");
    let o = on(&mut st, &s, &req(Endpoint, &["c2"], &[], "garbage-nonce")).expect("stale");
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
    assert_eq!(on(&mut st, &s, &r).expect("cds").initial_versions, 3);
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
    on(&mut st, &s, &req(Cluster, &[], &[], "")).expect("cds");
    on(&mut st, &s, &req(Endpoint, &["c1", "c2"], &[], "")).expect("eds");
    on(&mut st, &s, &req(Route, &["r1"], &[], "")).expect("rds");
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

/// A slow proxy under route churn: the cluster's removal waits for the route
/// change that stopped referencing it, but not for route changes made after it,
/// which cannot reference it. (Waiting until routes were idle starved removals
/// for seconds in `slow-proxies.yaml`.)
#[test]
fn cluster_removal_waits_only_for_the_route_work_current_with_it() {
    let s = base();
    let mut st = synced(&s, &[(Cluster, &[]), (Route, &["r1"])]);
    let s2 = next(
        &s,
        &[(Cluster, "c2", None), (Route, "r1", Some("route-1b"))],
    );
    let r = st.next_response(&s2).expect("the route first");
    assert_eq!((r.t, names(&r)), (Route, vec!["r1".to_string()]));
    assert!(
        st.next_response(&s2).is_none(),
        "c2 waits for the route that dropped it"
    );
    // The route changes again before the proxy ACKs.
    let mut cur = next(&s2, &[(Route, "r1", Some("route-1c"))]);
    assert!(
        st.next_response(&cur).is_none(),
        "the route change of s2 is not ACKed yet"
    );
    ack(&mut st, &r);
    let mut removed_c2 = false;
    let mut in_flight = Vec::new();
    for i in 0..5 {
        while let Some(p) = st.next_response(&cur) {
            match p.t {
                Cluster => {
                    assert_eq!((names(&p), removed(&p)), (vec![], vec!["c2".to_string()]));
                    removed_c2 = true;
                    ack(&mut st, &p);
                }
                Route => in_flight.push(p),
                t => panic!("unexpected {t:?}"),
            }
        }
        // Routes keep changing, and each push is ACKed only after the next change.
        cur = next(&cur, &[(Route, "r1", Some(&format!("route-1-v{i}")))]);
        for p in in_flight.drain(..) {
            ack(&mut st, &p);
        }
    }
    assert!(
        removed_c2,
        "c2 goes while routes keep changing after its removal"
    );
}

/// A removal waiting for its ACK from a slow proxy does not hold back later
/// types' changes: they cannot reference what it removes.
#[test]
fn a_removal_in_flight_does_not_hold_back_later_upserts() {
    let s = base();
    let mut st = synced(&s, &[(Cluster, &[]), (Route, &["r1"])]);
    let s2 = next(&s, &[(Cluster, "c2", None)]);
    let c = st.next_response(&s2).expect("the removal");
    assert_eq!((c.t, removed(&c)), (Cluster, vec!["c2".to_string()]));
    let s3 = next(&s2, &[(Route, "r1", Some("route-1b"))]);
    let r = st
        .next_response(&s3)
        .expect("the route goes while the removal is unACKed");
    assert_eq!((r.t, names(&r)), (Route, vec!["r1".to_string()]));
    // A cluster upsert in flight still holds routes back.
    ack(&mut st, &c);
    ack(&mut st, &r);
    let s4 = next(
        &s3,
        &[
            (Cluster, "c3", Some("cluster-3")),
            (Route, "r1", Some("route-1c")),
        ],
    );
    let c = st.next_response(&s4).expect("the new cluster");
    assert_eq!((c.t, names(&c)), (Cluster, vec!["c3".to_string()]));
    assert!(
        st.next_response(&s4).is_none(),
        "the route waits for the new cluster's ACK"
    );
}

#[test]
fn laggard_gets_latest_state_coalesced() {
    let s = base();
    let mut st = stream(&s);
    on(&mut st, &s, &req(Endpoint, &["c1"], &[], "")).expect("eds");
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
    let mut st = DeltaStream::new(None, limits, &s);
    on(&mut st, &s, &req(Endpoint, &["c1", "c2"], &[], "")).expect("eds");
    on(&mut st, &s, &req(Endpoint, &[], &["c2"], "")).expect("unsub");
    let p = st.next_response(&s).expect("c1 only");
    assert_eq!(names(&p), ["c1"]);
    let many: Vec<String> = (0..5).map(|i| format!("n{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let e = on(&mut st, &s, &req(Route, &many, &[], "")).expect_err("too many");
    assert!(matches!(e, Error::TooManyNames { limit: 3, .. }), "{e}");
    let e = on(
        &mut st,
        &s,
        &DeltaDiscoveryRequest {
            type_url: "type.googleapis.com/x.Y".into(),
            ..Default::default()
        },
    );
    assert!(matches!(e, Err(Error::UnknownTypeUrl(_))));
}

#[test]
fn route_update_and_new_cluster_order_hold_under_endpoint_churn() {
    let s = base();
    let mut st = stream(&s);
    on(&mut st, &s, &req(Cluster, &[], &[], "")).expect("cds");
    on(&mut st, &s, &req(Endpoint, &["c1", "c2"], &[], "")).expect("eds");
    on(&mut st, &s, &req(Route, &["r1"], &[], "")).expect("rds");
    for _ in 0..3 {
        let p = st.next_response(&s).expect("initial");
        ack(&mut st, &p);
    }
    // Churn on c1 keeps an EDS push in flight; r1 changes meanwhile.
    let s2 = next(&s, &[(Endpoint, "c1", Some("cla-1b"))]);
    let e = st.next_response(&s2).expect("eds");
    assert_eq!(e.t, Endpoint);
    let s3 = next(&s2, &[(Route, "r1", Some("route-1b"))]);
    let r = st
        .next_response(&s3)
        .expect("the route does not wait for c1's churn");
    assert_eq!(r.t, Route);
    ack(&mut st, &r);
    ack(&mut st, &e);
    // A new cluster: its assignment still goes before a route that may use it.
    let s4 = next(
        &s3,
        &[
            (Cluster, "c3", Some("cluster-3")),
            (Endpoint, "c3", Some("cla-3")),
            (Route, "r1", Some("route-1c")),
        ],
    );
    on(&mut st, &s4, &req(Endpoint, &["c3"], &[], "")).expect("eds c3");
    let c = st.next_response(&s4).expect("cds first");
    assert_eq!((c.t, names(&c)), (Cluster, vec!["c3".to_string()]));
    assert!(st.next_response(&s4).is_none(), "all wait for the CDS ACK");
    ack(&mut st, &c);
    let e = st.next_response(&s4).expect("c3's assignment");
    assert_eq!((e.t, names(&e)), (Endpoint, vec!["c3".to_string()]));
    assert!(
        st.next_response(&s4).is_none(),
        "the route waits for the new cluster's assignment"
    );
    ack(&mut st, &e);
    assert_eq!(st.next_response(&s4).expect("route").t, Route);
}

#[test]
fn cluster_removal_is_not_starved_by_endpoint_churn() {
    let s = base();
    let mut st = synced(&s, &[(Cluster, &[]), (Endpoint, &["c1", "c2"])]);
    let mut cur = next(&s, &[(Cluster, "c2", None), (Endpoint, "c2", None)]);
    let mut eds_in_flight: Option<DeltaPush> = None;
    let mut cluster_removed = false;
    for i in 0..20 {
        // c1's endpoints change every round, and the previous EDS push is ACKed only
        // after that: EDS always has a push in flight or one pending.
        cur = next(&cur, &[(Endpoint, "c1", Some(&format!("cla-1-v{i}")))]);
        if let Some(p) = eds_in_flight.take() {
            ack(&mut st, &p);
        }
        while let Some(p) = st.next_response(&cur) {
            match p.t {
                Cluster => {
                    assert_eq!((names(&p), removed(&p)), (vec![], vec!["c2".to_string()]));
                    cluster_removed = true;
                    ack(&mut st, &p);
                }
                Endpoint => eds_in_flight = Some(p),
                t => panic!("unexpected {t:?}"),
            }
        }
    }
    assert!(
        cluster_removed,
        "the removal of c2 must go out while c1's endpoints keep changing"
    );
}

#[test]
fn subscribed_and_reconnect_names_share_the_snapshot_strings() {
    let s = base();
    let mut st = stream(&s);
    let mut r = req(Endpoint, &["c1", "other"], &[], "");
    r.initial_resource_versions = HashMap::from([
        ("c1".to_string(), version(&s, Endpoint, "c1")),
        ("c2".to_string(), "old".to_string()),
    ]);
    on(&mut st, &s, &r).expect("eds");
    let snap_c1 = s.resources.endpoints.get("c1").expect("c1");
    let eds = &st.types[Endpoint.index()];
    let held = eds.held.get("c1").expect("known");
    assert!(Arc::ptr_eq(held, snap_c1), "the snapshot's own resource");
    let sub = eds.names.get("c1").expect("subscribed");
    assert!(Arc::ptr_eq(sub, &snap_c1.name));
    assert_eq!(
        &*eds.held.get("c2").expect("c2").version,
        "old",
        "a differing version is kept as reported"
    );
    assert!(
        eds.names.contains("other"),
        "names the snapshot lacks still subscribe"
    );
    let p = st.next_response(&s).expect("eds");
    assert_eq!(
        (names(&p), removed(&p), p.resent_known),
        (vec![], vec!["other".to_string()], 0)
    );
    let eds = &st.types[Endpoint.index()];
    assert!(
        eds.reported_on_reconnect.is_empty(),
        "reconnect versions are dropped once answered"
    );
    assert!(
        eds.held.get("c2").is_none(),
        "an unsubscribed name reported on reconnect is not tracked"
    );
}

#[test]
fn a_synced_stream_shares_the_snapshot_maps() {
    let s = base();
    let mut st = stream(&s);
    on(&mut st, &s, &req(Cluster, &[], &[], "")).expect("cds");
    on(&mut st, &s, &req(Endpoint, &["c1", "c2"], &[], "")).expect("eds");
    for _ in 0..2 {
        let p = st.next_response(&s).expect("initial");
        ack(&mut st, &p);
    }
    let shared = |st: &DeltaStream, s: &Snapshot| {
        st.types[Cluster.index()].held.ptr_eq(&s.resources.clusters)
            && st.types[Endpoint.index()]
                .held
                .ptr_eq(&s.resources.endpoints)
    };
    assert!(shared(&st, &s), "synced: no private copy");
    let s2 = next(&s, &[(Endpoint, "c2", Some("cla-2b"))]);
    let p = st.next_response(&s2).expect("push");
    assert_eq!(names(&p), ["c2"]);
    assert!(shared(&st, &s2), "shared again right after the push");
    ack(&mut st, &p);
    assert!(st.next_response(&s2).is_none());
    // A stream subscribed to part of the view keeps its own map, and still works.
    let mut part = stream(&s2);
    on(&mut part, &s2, &req(Endpoint, &["c1"], &[], "")).expect("eds");
    let p = part.next_response(&s2).expect("c1");
    assert_eq!(names(&p), ["c1"]);
    assert!(
        !part.types[Endpoint.index()]
            .held
            .ptr_eq(&s2.resources.endpoints)
    );
    ack(&mut part, &p);
    let s3 = next(&s2, &[(Endpoint, "c2", Some("cla-2c"))]);
    assert!(part.next_response(&s3).is_none(), "c2 is not subscribed");
}

#[test]
fn reconnect_holding_the_whole_view_shares_it_and_gets_nothing() {
    let s = base();
    let mut st = stream(&s);
    let mut r = req(Cluster, &[], &[], "");
    r.initial_resource_versions = HashMap::from([
        ("c1".to_string(), version(&s, Cluster, "c1")),
        ("c2".to_string(), version(&s, Cluster, "c2")),
    ]);
    assert_eq!(on(&mut st, &s, &r).expect("cds").initial_versions, 2);
    assert!(st.types[Cluster.index()].held.ptr_eq(&s.resources.clusters));
    assert!(
        st.next_response(&s).is_none(),
        "nothing changed: nothing sent"
    );
    // It still follows changes from there.
    let s2 = next(&s, &[(Cluster, "c2", Some("cluster-2b"))]);
    let p = st.next_response(&s2).expect("change");
    assert_eq!((names(&p), p.resent_known), (vec!["c2".to_string()], 0));
}

/// A reconnect whose repeated map entries add up to the view's size without
/// covering it is not taken for one holding the whole view: what it lacks is
/// sent.
#[test]
fn repeated_reconnect_entries_do_not_pass_for_the_whole_view() {
    let s = base();
    let mut st = stream(&s);
    let mut r = req(Cluster, &[], &[], "");
    r.initial_resource_versions = HashMap::from([("c1".to_string(), version(&s, Cluster, "c1"))]);
    let mut lean = DeltaRequest::from(&r);
    let again = lean.initial_resource_versions[0].clone();
    lean.initial_resource_versions.push(again);
    assert_eq!(
        lean.initial_resource_versions.len(),
        s.resources.clusters.len(),
        "as many entries as the view has resources"
    );
    st.on_request(&lean, &s).expect("cds");
    assert!(!st.types[Cluster.index()].held.ptr_eq(&s.resources.clusters));
    let p = st.next_response(&s).expect("c2 is owed");
    assert_eq!((names(&p), p.resent_known), (vec!["c2".to_string()], 0));
}

/// A client holding the wildcard that also subscribed to a name, then
/// unsubscribes it, is answered (spec: the resource if the wildcard includes it,
/// its removal if not), never left without a response.
#[test]
fn unsubscribing_a_name_under_a_wildcard_is_answered() {
    let s = base();
    let mut st = synced(&s, &[(Cluster, &["*", "c1", "ghost"])]);
    on(&mut st, &s, &req(Cluster, &[], &["c1"], "")).expect("unsubscribe c1");
    let p = st
        .next_response(&s)
        .expect("c1 is still in the wildcard: resent");
    assert_eq!(
        (p.t, names(&p), removed(&p)),
        (Cluster, vec!["c1".to_string()], vec![])
    );
    ack(&mut st, &p);
    on(&mut st, &s, &req(Cluster, &[], &["ghost"], "")).expect("unsubscribe ghost");
    let p = st
        .next_response(&s)
        .expect("ghost is in no wildcard: removed");
    assert_eq!(
        (names(&p), removed(&p)),
        (vec![], vec!["ghost".to_string()])
    );
    ack(&mut st, &p);
    assert!(st.next_response(&s).is_none());
}

/// A client that NACKs every EDS response still gets every later EDS change
/// (each a new version), with clusters changing in between; nothing is left
/// in flight that would stall the stream silently.
#[test]
fn nacking_every_eds_response_still_gets_every_later_change() {
    let s = base();
    let mut st = synced(&s, &[(Cluster, &[]), (Endpoint, &["c1", "c2"])]);
    let mut snap = s;
    let mut eds_pushes = 0;
    for i in 0..20u32 {
        let mut edits = vec![(Endpoint, if i % 2 == 0 { "c1" } else { "c2" }, None)];
        let body = format!("cla-{i}");
        edits[0].2 = Some(body.as_str());
        let cluster_body = format!("cluster-{i}");
        if i % 3 == 0 {
            edits.push((Cluster, "c1", Some(cluster_body.as_str())));
        }
        snap = next(&snap, &edits);
        let mut sent_eds = false;
        for _ in 0..10 {
            let Some(p) = st.next_response(&snap) else {
                break;
            };
            if p.t == Endpoint {
                sent_eds = true;
                eds_pushes += 1;
                let mut nack = req(Endpoint, &[], &[], &p.out.nonce);
                nack.error_detail = Some(RpcStatus {
                    code: 3,
                    message: "rejected on purpose".into(),
                    details: vec![],
                });
                on(&mut st, &snap, &nack).expect("nack");
            } else {
                ack(&mut st, &p);
            }
        }
        assert!(
            sent_eds,
            "change {i}: an EDS push after the NACKs before it"
        );
        assert_eq!(st.in_flight(), 0, "change {i}: nothing left unanswered");
    }
    assert!(eds_pushes >= 20);
}
