//! Delta streams and Sidecar-scoped views, on snapshots the real engine
//! publishes: a proxy moving between views (a Sidecar appears, is edited, goes)
//! receives exactly the difference between the two views, and a reconnecting
//! proxy is judged against its own view.

use std::sync::Arc;

use deltapilot_engine::runner::Engine;
use deltapilot_log::RecordPos;
use deltapilot_proto::event::Payload;
use deltapilot_proto::{self as pb, Event};
use deltapilot_testkit::events::{ep, event};
use deltapilot_xds::ResourceType::{self, Cluster, Endpoint, Listener, Route};
use deltapilot_xds::generate::GenOptions;
use deltapilot_xds::snapshot::Snapshot;
use deltapilot_xds::view::ViewKey;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;

use super::*;
use crate::xds::request::DeltaRequest;

const NODE: &str = "sidecar~10.0.0.9~app-1.ns1~ns1.svc.cluster.local";

fn svc(ns: &str, host: &str, port: u32, protocol: pb::Protocol) -> Event {
    event(
        "src",
        0,
        Payload::ServiceUpsert(pb::ServiceUpsert {
            service: Some(pb::Service {
                hostname: host.into(),
                namespace: ns.into(),
                ports: vec![pb::Port {
                    name: format!("p{port}"),
                    number: port,
                    protocol: protocol as i32,
                }],
                resolution: pb::Resolution::StaticEndpoints as i32,
                ..Default::default()
            }),
        }),
    )
}

fn sidecar(ns: &str, spec: &str) -> Event {
    event(
        "src",
        0,
        Payload::ConfigUpsert(pb::ConfigUpsert {
            config: Some(pb::ConfigObject {
                kind: pb::ConfigKind::Sidecar as i32,
                namespace: ns.into(),
                name: "default".into(),
                spec_json: spec.into(),
                ..Default::default()
            }),
        }),
    )
}

fn sidecar_del(ns: &str) -> Event {
    event(
        "src",
        0,
        Payload::ConfigDelete(pb::EntityDelete {
            key: pb::config_key(pb::ConfigKind::Sidecar, ns, "default"),
        }),
    )
}

/// Folds `events` into `engine` (one batch) and returns the published snapshot.
fn apply(engine: &mut Engine, at: &mut u64, events: Vec<Event>) -> Arc<Snapshot> {
    let batch: Vec<(RecordPos, Event)> = events
        .into_iter()
        .map(|e| {
            *at += 1;
            (
                RecordPos {
                    partition: 0,
                    offset: *at,
                },
                e,
            )
        })
        .collect();
    engine.apply_events(&batch);
    engine.current()
}

fn req(t: ResourceType, nonce: &str, node: bool) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        type_url: t.type_url().into(),
        response_nonce: nonce.into(),
        node: node.then(|| Node {
            id: NODE.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn on(st: &mut DeltaStream, snap: &Snapshot, r: &DeltaDiscoveryRequest) {
    st.on_request(&DeltaRequest::from(r), snap)
        .expect("request");
}

/// Every response the stream sends for `snap`, each ACKed: (type, upserted
/// names, removed names), in order.
fn drain(st: &mut DeltaStream, snap: &Snapshot) -> Sent {
    let mut out = Vec::new();
    for _ in 0..64 {
        let Some(p) = st.next_response(snap) else {
            return out;
        };
        let mut up: Vec<String> = p.out.resources.iter().map(|r| r.name.to_string()).collect();
        let mut rm: Vec<String> = p.out.removed.iter().map(|r| r.to_string()).collect();
        up.sort();
        rm.sort();
        on(st, snap, &req(p.t, &p.out.nonce, false));
        out.push((p.t, up, rm));
    }
    panic!("the stream never ran out of responses");
}

type Sent = Vec<(ResourceType, Vec<String>, Vec<String>)>;

/// The responses in type order (their order is checked apart where it matters).
fn by_type(mut sent: Sent) -> Sent {
    sent.sort_by_key(|s| s.0);
    sent
}

fn mesh(engine: &mut Engine, at: &mut u64) -> Arc<Snapshot> {
    apply(
        engine,
        at,
        vec![
            svc("ns1", "a.ns1.svc.cluster.local", 80, pb::Protocol::Http),
            svc("ns2", "b.ns2.svc.cluster.local", 80, pb::Protocol::Http),
            svc("ns2", "c.ns2.svc.cluster.local", 9090, pb::Protocol::Tcp),
            ep(
                "src",
                0,
                "ep/a",
                "10.1.0.1",
                &["a.ns1.svc.cluster.local"],
                1,
            ),
            ep(
                "src",
                0,
                "ep/b",
                "10.1.0.2",
                &["b.ns2.svc.cluster.local"],
                1,
            ),
            ep(
                "src",
                0,
                "ep/c",
                "10.1.0.3",
                &["c.ns2.svc.cluster.local"],
                1,
            ),
        ],
    )
}

fn subscribe_all(st: &mut DeltaStream, snap: &Snapshot) {
    for t in ResourceType::ALL {
        on(st, snap, &req(t, "", true));
    }
}

#[test]
fn a_proxy_moving_between_views_gets_exactly_their_difference() {
    let mut engine = Engine::new(GenOptions::default());
    let mut at = 0;
    let s0 = mesh(&mut engine, &mut at);
    let mut st = DeltaStream::new(None, Limits::default(), &s0);
    subscribe_all(&mut st, &s0);
    let first = drain(&mut st, &s0);
    assert_eq!(first.len(), 4, "one response per type: {first:?}");
    assert_eq!(
        st.view_key(),
        Some(&ViewKey::Default(deltapilot_model::ProxyType::Sidecar))
    );

    // A Sidecar for ns1 that admits only its own namespace: the proxy moves.
    let s1 = apply(
        &mut engine,
        &mut at,
        vec![sidecar("ns1", r#"{"egress":[{"hosts":["./*"]}]}"#)],
    );
    assert!(s1.seq > s0.seq, "a Sidecar change is published");
    let moved = drain(&mut st, &s1);
    // Unreference before remove: the route and listener changes go first.
    let pos = |t: ResourceType| moved.iter().position(|m| m.0 == t);
    assert!(
        pos(Route) < pos(Cluster) && pos(Listener) < pos(Cluster),
        "{moved:?}"
    );
    let moved = by_type(moved);
    let b = "outbound|80||b.ns2.svc.cluster.local".to_string();
    let c = "outbound|9090||c.ns2.svc.cluster.local".to_string();
    let grpc_a = "a.ns1.svc.cluster.local:80".to_string();
    let grpc_b = "b.ns2.svc.cluster.local:80".to_string();
    assert_eq!(
        moved,
        [
            (Cluster, vec![], vec![b.clone(), c.clone()]),
            (Endpoint, vec![], vec![b.clone(), c.clone()]),
            (Listener, vec![], vec!["0.0.0.0_9090".to_string()]),
            // Route "80" loses b's virtual host; the proxyless gRPC route
            // configurations (which a wildcard RDS subscription got from the
            // default view) are not in a scoped sidecar view.
            (Route, vec!["80".to_string()], vec![]),
            (Route, vec![], vec![grpc_a.clone(), grpc_b.clone()]),
        ],
        "only the difference: nothing that both views hold is resent"
    );
    assert_eq!(
        st.view_key().map(ToString::to_string).as_deref(),
        Some("sidecar/cfg/sidecar/ns1/default")
    );

    // Editing the Sidecar keeps the key: its own change log carries the edit.
    let s2 = apply(
        &mut engine,
        &mut at,
        vec![sidecar(
            "ns1",
            r#"{"egress":[{"hosts":["./*","ns2/b.ns2.svc.cluster.local"]}],"outboundTrafficPolicy":{"mode":"REGISTRY_ONLY"}}"#,
        )],
    );
    let edited = by_type(drain(&mut st, &s2));
    assert_eq!(
        edited,
        vec![
            (Cluster, vec![b.clone()], vec![]),
            (Endpoint, vec![b.clone()], vec![]),
            (Route, vec!["80".to_string()], vec![]),
        ]
    );

    // An endpoint change of a hidden host reaches nobody in the view.
    let s3 = apply(
        &mut engine,
        &mut at,
        vec![ep(
            "src",
            0,
            "ep/c",
            "10.1.0.4",
            &["c.ns2.svc.cluster.local"],
            1,
        )],
    );
    assert_eq!(drain(&mut st, &s3), vec![]);

    // Removing the Sidecar restores the rest, and only the rest.
    let s4 = apply(&mut engine, &mut at, vec![sidecar_del("ns1")]);
    let back = by_type(drain(&mut st, &s4));
    assert_eq!(
        back,
        vec![
            (Cluster, vec![c.clone()], vec![]),
            (Endpoint, vec![c.clone()], vec![]),
            (Listener, vec!["0.0.0.0_9090".to_string()], vec![]),
            (Route, vec!["80".to_string(), grpc_a, grpc_b], vec![]),
        ]
    );
    assert_eq!(
        st.view_key(),
        Some(&ViewKey::Default(deltapilot_model::ProxyType::Sidecar))
    );
}

#[test]
fn a_reconnecting_proxy_is_judged_against_its_own_view() {
    let mut engine = Engine::new(GenOptions::default());
    let mut at = 0;
    mesh(&mut engine, &mut at);
    let s = apply(
        &mut engine,
        &mut at,
        vec![sidecar("ns1", r#"{"egress":[{"hosts":["./*"]}]}"#)],
    );
    let key = ViewKey::Sidecar {
        sidecar: Some(Arc::from("cfg/sidecar/ns1/default")),
        visible: Arc::from(Vec::new()),
        sources: Arc::from(Vec::new()),
    };
    // It reports exactly what its scoped view holds: nothing is resent.
    let mut st = DeltaStream::new(None, Limits::default(), &s);
    for t in ResourceType::ALL {
        let mut r = req(t, "", true);
        r.initial_resource_versions = s
            .view(&key, t)
            .iter()
            .map(|(n, res)| (n.to_string(), res.version.to_string()))
            .collect();
        on(&mut st, &s, &r);
    }
    assert_eq!(st.view_key(), Some(&key));
    assert_eq!(drain(&mut st, &s), vec![], "it already holds its view");

    // Reporting the global view instead: the hidden resources (and the
    // proxyless route configurations) are removed and the route the scope
    // changes is sent, nothing else.
    let mut st = DeltaStream::new(None, Limits::default(), &s);
    let global = ViewKey::Default(deltapilot_model::ProxyType::Sidecar);
    for t in ResourceType::ALL {
        let mut r = req(t, "", true);
        r.initial_resource_versions = s
            .view(&global, t)
            .iter()
            .map(|(n, res)| (n.to_string(), res.version.to_string()))
            .collect();
        on(&mut st, &s, &r);
    }
    let sent = drain(&mut st, &s);
    let upserts: Vec<&String> = sent.iter().flat_map(|(_, u, _)| u).collect();
    let removals: usize = sent.iter().map(|(_, _, r)| r.len()).sum();
    assert_eq!(upserts, [&"80".to_string()]);
    assert_eq!(
        removals, 7,
        "b and c (cluster, assignment), 0.0.0.0_9090, two proxyless routes: {sent:?}"
    );
}

/// A snapshot seen before the first request (no node yet) must not fix the
/// key: the proxyless client that then names itself gets its own view.
#[test]
fn a_key_is_never_guessed_before_the_node_is_known() {
    let mut engine = Engine::new(GenOptions::default());
    let mut at = 0;
    let s0 = mesh(&mut engine, &mut at);
    let mut st = DeltaStream::new(None, Limits::default(), &Snapshot::default());
    st.on_snapshot(&s0);
    assert_eq!(st.view_key(), None);
    let mut r = req(Listener, "", false);
    r.node = Some(Node {
        id: "grpc-client".into(),
        user_agent_name: "gRPC Go".into(),
        ..Default::default()
    });
    on(&mut st, &s0, &r);
    assert_eq!(
        st.view_key(),
        Some(&ViewKey::Default(
            deltapilot_model::ProxyType::ProxylessGrpc
        ))
    );
    let sent = drain(&mut st, &s0);
    assert_eq!(sent[0].0, Listener);
    assert!(
        sent[0].1.iter().all(|n| !n.starts_with("0.0.0.0_")),
        "api_listeners only: {sent:?}"
    );
}

fn export_rule(export: &str) -> Event {
    event(
        "src",
        0,
        Payload::ConfigUpsert(pb::ConfigUpsert {
            config: Some(pb::ConfigObject {
                kind: pb::ConfigKind::VirtualService as i32,
                namespace: "ns1".into(),
                name: "to-b".into(),
                spec_json: format!(
                    r#"{{"hosts":["a.ns1.svc.cluster.local"],"exportTo":{export},"http":[{{"route":[{{"destination":{{"host":"b.ns2.svc.cluster.local"}}}}]}}]}}"#
                ),
                ..Default::default()
            }),
        }),
    )
}

/// A VirtualService's `exportTo` moves a proxy between its namespace's
/// visibility classes with exactly the difference: nothing while exported
/// elsewhere, the re-routed route configuration when exported to it, and the
/// default view back when the rule goes.
#[test]
fn export_to_moves_a_proxy_between_views_with_the_difference() {
    let mut engine = Engine::new(GenOptions::default());
    let mut at = 0;
    let s0 = mesh(&mut engine, &mut at);
    let mut st = DeltaStream::new(None, Limits::default(), &s0);
    subscribe_all(&mut st, &s0);
    drain(&mut st, &s0);

    let s1 = apply(&mut engine, &mut at, vec![export_rule(r#"["ns2"]"#)]);
    assert_eq!(drain(&mut st, &s1), vec![], "exported elsewhere: nothing");
    assert_eq!(
        st.view_key(),
        Some(&ViewKey::Default(deltapilot_model::ProxyType::Sidecar))
    );

    let s2 = apply(&mut engine, &mut at, vec![export_rule(r#"["."]"#)]);
    let moved = by_type(drain(&mut st, &s2));
    let grpc = |h: &str| format!("{h}.svc.cluster.local:80");
    assert_eq!(
        moved,
        // As for any scoped view: no proxyless route configurations.
        [(
            Route,
            vec!["80".to_string()],
            vec![grpc("a.ns1"), grpc("b.ns2")]
        )],
        "only the re-routed route configuration"
    );
    assert_eq!(
        st.view_key().map(ToString::to_string).as_deref(),
        Some("default/sidecar+sees/ns1/to-b")
    );
    let rc: envoy_types::pb::envoy::config::route::v3::RouteConfiguration = prost::Message::decode(
        &s2.view(st.view_key().expect("key"), Route)
            .get("80")
            .expect("route 80")
            .bytes[..],
    )
    .expect("decodes");
    let a = rc
        .virtual_hosts
        .iter()
        .find(|v| v.name == "a.ns1.svc.cluster.local:80")
        .expect("a's virtual host");
    assert!(
        format!("{:?}", a.routes[0].action).contains("outbound|80||b.ns2.svc.cluster.local"),
        "{a:?}"
    );

    let s3 = apply(
        &mut engine,
        &mut at,
        vec![event(
            "src",
            0,
            Payload::ConfigDelete(pb::EntityDelete {
                key: pb::config_key(pb::ConfigKind::VirtualService, "ns1", "to-b"),
            }),
        )],
    );
    let back = by_type(drain(&mut st, &s3));
    assert_eq!(
        back,
        [(
            Route,
            vec!["80".to_string(), grpc("a.ns1"), grpc("b.ns2")],
            vec![]
        )]
    );
    assert_eq!(
        st.view_key(),
        Some(&ViewKey::Default(deltapilot_model::ProxyType::Sidecar))
    );
}
