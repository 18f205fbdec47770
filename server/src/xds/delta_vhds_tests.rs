//! VHDS on the delta state machine: a route configuration's virtual hosts
//! are subscribed by namespace, pushed unasked within it, and a rule edit
//! (new virtual host bytes, new inline configuration) sends the virtual host
//! only.

use std::sync::Arc;

use bytes::Bytes;
use deltapilot_xds::ResourceType::{Route, VirtualHost};
use deltapilot_xds::snapshot::Snapshot;
use deltapilot_xds::view::RouteDelivery;
use deltapilot_xds::{Resource, ResourceMap};
use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;

use super::*;
use crate::xds::request::DeltaRequest;
use crate::xds::testutil::{delta_req as req, names, next, removed};

fn on(st: &mut DeltaStream, snap: &Snapshot, r: &DeltaDiscoveryRequest) {
    st.on_request(&DeltaRequest::from(r), snap)
        .expect("request");
}

fn ack(st: &mut DeltaStream, p: &DeltaPush) {
    on(st, &Snapshot::default(), &req(p.t, &[], &[], &p.out.nonce));
}

fn res(name: &str, body: &str) -> Arc<Resource> {
    Arc::new(Resource::new(
        Arc::from(name),
        Bytes::from(body.to_string()),
    ))
}

/// Two route configurations, inline and in VHDS form, and their virtual hosts.
fn base() -> Snapshot {
    let mut s = next(
        &Snapshot::default(),
        &[
            (Route, "8080", Some("inline-8080-a-b")),
            (Route, "9090", Some("inline-9090-c")),
            (VirtualHost, "8080/a:8080", Some("vh-a")),
            (VirtualHost, "8080/b:8080", Some("vh-b")),
            (VirtualHost, "9090/c:9090", Some("vh-c")),
        ],
    );
    s.resources.vhds_routes =
        ResourceMap::from_iter([res("8080", "vhds-8080"), res("9090", "vhds-9090")]);
    s
}

fn stream(s: &Snapshot, delivery: RouteDelivery) -> DeltaStream {
    let limits = Limits {
        route_delivery: delivery,
        ..Limits::default()
    };
    DeltaStream::new(None, limits, s)
}

/// A VHDS stream holding route configuration 8080 and its virtual hosts.
fn synced(s: &Snapshot) -> DeltaStream {
    let mut st = stream(s, RouteDelivery::Vhds);
    on(&mut st, s, &req(Route, &["8080"], &[], ""));
    let p = st.next_response(s).expect("rds");
    ack(&mut st, &p);
    on(&mut st, s, &req(VirtualHost, &["8080"], &[], ""));
    let p = st.next_response(s).expect("vhds");
    ack(&mut st, &p);
    assert!(st.next_response(s).is_none());
    st
}

#[test]
fn a_namespace_brings_every_virtual_host_of_its_route_configuration() {
    let s = base();
    let mut st = stream(&s, RouteDelivery::Vhds);
    on(&mut st, &s, &req(Route, &["8080"], &[], ""));
    let p = st.next_response(&s).expect("rds");
    assert_eq!(names(&p), ["8080"]);
    assert_eq!(&p.out.resources[0].bytes[..], b"vhds-8080", "the VHDS form");
    ack(&mut st, &p);
    on(&mut st, &s, &req(VirtualHost, &["8080"], &[], ""));
    let p = st.next_response(&s).expect("vhds");
    assert_eq!(p.t, VirtualHost);
    assert_eq!(names(&p), ["8080/a:8080", "8080/b:8080"]);
    assert!(
        removed(&p).is_empty(),
        "the namespace itself is no resource"
    );
    ack(&mut st, &p);
    assert!(st.next_response(&s).is_none());
}

/// What the generator makes of a rule edit of host `b`: a new inline
/// configuration `8080` and a new virtual host `8080/b:8080`.
fn rule_edit(s: &Snapshot) -> Snapshot {
    next(
        s,
        &[
            (Route, "8080", Some("inline-8080-a-b2")),
            (VirtualHost, "8080/b:8080", Some("vh-b2")),
        ],
    )
}

#[test]
fn a_rule_edit_sends_the_virtual_host_and_not_the_route_configuration() {
    let s = base();
    let mut st = synced(&s);
    let s2 = next(
        &rule_edit(&s),
        &[(VirtualHost, "9090/c:9090", Some("vh-c2"))],
    );
    let p = st.next_response(&s2).expect("the virtual host");
    assert_eq!(
        (p.t, names(&p)),
        (VirtualHost, vec!["8080/b:8080".to_string()])
    );
    ack(&mut st, &p);
    assert!(
        st.next_response(&s2).is_none(),
        "no route configuration, nothing of an unsubscribed namespace"
    );
}

#[test]
fn virtual_hosts_come_and_go_within_a_subscribed_namespace() {
    let s = base();
    let mut st = synced(&s);
    let s2 = next(
        &s,
        &[
            (VirtualHost, "8080/d:8080", Some("vh-d")),
            (VirtualHost, "8080/a:8080", None),
        ],
    );
    let p = st.next_response(&s2).expect("pushed unasked");
    assert_eq!(names(&p), ["8080/d:8080"]);
    ack(&mut st, &p);
    let p = match p.out.removed.is_empty() {
        true => st.next_response(&s2).expect("the removal"),
        false => p,
    };
    assert_eq!(removed(&p), ["8080/a:8080"]);
}

#[test]
fn unsubscribing_a_namespace_stops_its_virtual_hosts() {
    let s = base();
    let mut st = synced(&s);
    on(&mut st, &s, &req(VirtualHost, &[], &["8080"], ""));
    let s2 = next(&s, &[(VirtualHost, "8080/b:8080", Some("vh-b2"))]);
    assert!(
        st.next_response(&s2).is_none(),
        "nothing after unsubscribing"
    );
    on(&mut st, &s2, &req(VirtualHost, &["8080"], &[], ""));
    let p = st.next_response(&s2).expect("subscribed again");
    assert_eq!(names(&p), ["8080/a:8080", "8080/b:8080"]);
}

#[test]
fn an_empty_namespace_is_answered_with_an_empty_response() {
    let s = base();
    let mut st = stream(&s, RouteDelivery::Vhds);
    on(&mut st, &s, &req(VirtualHost, &["7070"], &[], ""));
    let p = st
        .next_response(&s)
        .expect("an answer: Envoy's route waits for it");
    assert_eq!(p.t, VirtualHost);
    assert!(p.out.resources.is_empty() && p.out.removed.is_empty());
    ack(&mut st, &p);
    assert!(st.next_response(&s).is_none(), "answered once");
}

#[test]
fn a_reconnect_holding_its_virtual_hosts_is_sent_nothing() {
    let s = base();
    let mut st = stream(&s, RouteDelivery::Vhds);
    let mut r = req(VirtualHost, &["8080"], &[], "");
    for n in ["8080/a:8080", "8080/b:8080"] {
        let v = s
            .resources
            .virtual_hosts
            .get(n)
            .expect("held")
            .version
            .to_string();
        r.initial_resource_versions.insert(n.to_string(), v);
    }
    on(&mut st, &s, &r);
    let p = st.next_response(&s).expect("the empty answer");
    assert!(
        p.out.resources.is_empty() && p.out.removed.is_empty(),
        "{p:?}"
    );
}

#[test]
fn inline_delivery_sends_the_inline_configuration_and_no_virtual_host() {
    let s = base();
    let mut st = stream(&s, RouteDelivery::Inline);
    on(&mut st, &s, &req(Route, &["8080"], &[], ""));
    let p = st.next_response(&s).expect("rds");
    assert_eq!(&p.out.resources[0].bytes[..], b"inline-8080-a-b");
    ack(&mut st, &p);
    on(&mut st, &s, &req(VirtualHost, &["8080"], &[], ""));
    let p = st.next_response(&s).expect("an empty answer");
    assert!(p.out.resources.is_empty(), "{:?}", names(&p));
}

/// `/debug/syncz` judges a VHDS stream by the maps it is sent from: a rule
/// edit is a change behind for its virtual hosts (found through the
/// namespace), and once the stream has sent it every type is synced (the
/// unchanged VHDS route configuration included).
#[test]
fn syncz_judges_a_vhds_stream_against_its_own_maps() {
    use crate::admin::syncz::{Sync, syncz};
    use crate::xds::registry::StreamStatus;
    let s = base();
    let mut st = synced(&s);
    let s2 = rule_edit(&s);
    let status = |st: &DeltaStream| StreamStatus {
        stream: 1,
        api: "delta",
        service: "ads",
        proxy: None,
        connected_at: std::time::SystemTime::now(),
        seq: st.seq(),
        types: st.type_statuses(),
    };
    let view = syncz(&[status(&st)], &s2);
    let vhds = &view.proxies[0].types["vhds"];
    assert_eq!(vhds.behind.changes, Some(1), "{vhds:?}");
    let p = st.next_response(&s2).expect("the virtual host");
    ack(&mut st, &p);
    let view = syncz(&[status(&st)], &s2);
    for t in ["rds", "vhds"] {
        let v = &view.proxies[0].types[t];
        assert!(matches!(v.status, Sync::Synced), "{t}: {v:?}");
    }
}
