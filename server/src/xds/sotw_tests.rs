use deltapilot_xds::ResourceType::{self, Cluster, Endpoint, Listener, Route};
use deltapilot_xds::snapshot::Snapshot;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::google::rpc::Status as RpcStatus;

use super::*;
use crate::xds::testutil::next;

fn req(t: ResourceType, names: &[&str], nonce: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        type_url: t.type_url().into(),
        resource_names: names.iter().map(|s| s.to_string()).collect(),
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

/// The names a push carries, sorted (a wildcard push lists the map's hash order).
fn names(p: &SotwPush) -> Vec<String> {
    let mut names: Vec<String> = p.out.resources.iter().map(|r| r.name.to_string()).collect();
    names.sort();
    names
}

fn ack(st: &mut SotwStream, p: &SotwPush, names: &[&str]) -> RequestOutcome {
    st.on_request(&req(p.t, names, &p.out.nonce)).expect("ack")
}

#[test]
fn wildcard_cds_gets_full_state_with_version() {
    let s = base();
    let mut st = SotwStream::new(None, Limits::default(), &s);
    st.on_request(&req(Cluster, &[], "")).expect("cds");
    let p = st.next_response(&s).expect("cds");
    assert_eq!(names(&p), ["c1", "c2"]);
    assert!(!p.out.version_info.is_empty());
    assert!(ack(&mut st, &p, &[]).ack.is_some());
    assert!(st.next_response(&s).is_none());
    let s2 = next(&s, &[(Cluster, "c3", Some("cluster-3"))]);
    let p2 = st.next_response(&s2).expect("full state again");
    assert_eq!(names(&p2), ["c1", "c2", "c3"]);
    assert_ne!(p2.out.version_info, p.out.version_info);
}

#[test]
fn grpc_named_requests_get_exactly_what_exists_and_node_is_remembered() {
    let s = base();
    let mut st = SotwStream::new(None, Limits::default(), &s);
    let mut first = req(Endpoint, &["c2", "missing"], "");
    first.node = Some(Node {
        id: "grpc-client".into(),
        user_agent_name: "gRPC Python".into(),
        ..Default::default()
    });
    st.on_request(&first).expect("eds");
    let p = st.next_response(&s).expect("eds");
    assert_eq!(names(&p), ["c2"]);
    ack(&mut st, &p, &["c2", "missing"]);
    assert_eq!(
        st.proxy().map(|p| &*p.id),
        Some("grpc-client"),
        "node from the first request only"
    );
    let p2 = {
        st.on_request(&req(Endpoint, &["c1", "c2"], &p.out.nonce))
            .expect("more names");
        st.next_response(&s).expect("answered on a names change")
    };
    assert_eq!(names(&p2), ["c1", "c2"]);
}

#[test]
fn nack_not_answered_with_same_state_and_stale_ignored() {
    let s = base();
    let mut st = SotwStream::new(None, Limits::default(), &s);
    st.on_request(&req(Route, &["r1"], "")).expect("rds");
    let p = st.next_response(&s).expect("rds");
    let mut nack = req(Route, &["r1"], &p.out.nonce);
    nack.error_detail = Some(RpcStatus {
        code: 3,
        message: "no".into(),
        details: vec![],
    });
    assert!(st.on_request(&nack).expect("nack").nack.is_some());
    assert_eq!(st.nacks(Route), 1);
    assert!(st.next_response(&s).is_none());
    let o = st
        .on_request(&req(Route, &["zzz"], "bogus"))
        .expect("stale");
    assert!(o.stale_nonce);
    assert!(st.next_response(&s).is_none(), "stale request ignored");
}

#[test]
fn cluster_resend_makes_eds_answer_again() {
    let s = base();
    let mut st = SotwStream::new(None, Limits::default(), &s);
    st.on_request(&req(Cluster, &[], "")).expect("cds");
    st.on_request(&req(Endpoint, &["c1"], "")).expect("eds");
    let c = st.next_response(&s).expect("cds");
    ack(&mut st, &c, &[]);
    let e = st.next_response(&s).expect("eds");
    ack(&mut st, &e, &["c1"]);
    let s2 = next(&s, &[(Cluster, "c1", Some("cluster-1b"))]);
    let c2 = st.next_response(&s2).expect("cds");
    assert_eq!(c2.t, Cluster);
    ack(&mut st, &c2, &[]);
    let e2 = st.next_response(&s2).expect("eds again though unchanged");
    assert_eq!((e2.t, names(&e2)), (Endpoint, vec!["c1".to_string()]));
}

/// Once the client named `*`, an empty list unsubscribes: the legacy meaning of
/// an empty list (wildcard) is gone for that type, as the spec says.
#[test]
fn an_empty_list_after_an_explicit_wildcard_unsubscribes() {
    let s = base();
    let mut st = SotwStream::new(None, Limits::default(), &s);
    st.on_request(&req(Cluster, &["*"], "")).expect("cds *");
    let p = st.next_response(&s).expect("cds");
    assert_eq!(names(&p), ["c1", "c2"]);
    ack(&mut st, &p, &["*"]);
    st.on_request(&req(Cluster, &[], &p.out.nonce))
        .expect("cds []");
    let p = st
        .next_response(&s)
        .expect("the unsubscription is answered");
    assert!(names(&p).is_empty(), "{:?}", names(&p));
    ack(&mut st, &p, &[]);
    let s2 = next(&s, &[(Cluster, "c3", Some("cluster-3"))]);
    assert!(
        st.next_response(&s2).is_none(),
        "nothing is pushed to a type with no subscription"
    );
}

/// The first request of a type carrying a nonce this stream never sent (from an
/// earlier stream, or of another type) is treated as initial and answered.
#[test]
fn a_first_request_with_a_foreign_nonce_is_answered() {
    let s = base();
    let mut st = SotwStream::new(None, Limits::default(), &s);
    let out = st
        .on_request(&req(Cluster, &[], "nonce-of-an-earlier-stream"))
        .expect("cds");
    assert!(!out.stale_nonce, "{out:?}");
    let p = st.next_response(&s).expect("answered");
    assert_eq!(names(&p), ["c1", "c2"]);
    ack(&mut st, &p, &[]);
    // A nonce sent for CDS does not make the first EDS request stale either.
    st.on_request(&req(Endpoint, &["c1"], &p.out.nonce))
        .expect("eds");
    let e = st.next_response(&s).expect("eds answered");
    assert_eq!(names(&e), ["c1"]);
}
