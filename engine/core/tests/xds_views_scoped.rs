//! Sidecar and Gateway views on small models folded by the real fold: a
//! Sidecar scopes its namespace and the root namespace's Sidecar the rest, a
//! replay following a proxy reports its own view's changes, and a router of two
//! unrelated Gateways gets both Gateways' listeners, and routers apply the
//! restricted DestinationRules their namespace sees. The incremental == rebuilt
//! property over random histories lives in `xds_views`.

mod xds_support;

use std::sync::Arc;

use deltapilot_model::{Proxy, ProxyType};
use deltapilot_proto::{ConfigKind, Event};
use deltapilot_xds::generate::{GenOptions, Generator};
use deltapilot_xds::view::{ViewKey, Views};
use xds_support::*;

/// A Sidecar that scopes `ns1` sees only its hosts; REGISTRY_ONLY appends the
/// catch-all; the root namespace's Sidecar is the default elsewhere.
#[test]
fn a_sidecar_scopes_its_namespace_and_the_root_one_the_rest() {
    let evs = vec![
        simple_svc("ns1", "a.ns1.svc.cluster.local", 80, Protocol::Http),
        simple_svc("ns2", "a.ns2.svc.cluster.local", 80, Protocol::Http),
        simple_svc("ns2", "c.ns2.svc.cluster.local", 9090, Protocol::Http),
        rule(
            "src",
            0,
            ConfigKind::Sidecar,
            "ns1",
            "default",
            r#"{"egress":[{"hosts":["./*"]}],"outboundTrafficPolicy":{"mode":"REGISTRY_ONLY"}}"#,
        ),
        rule(
            "src",
            0,
            ConfigKind::Sidecar,
            "istio-system",
            "default",
            r#"{"egress":[{"hosts":["*/*"]}]}"#,
        ),
    ];
    let state = model(&evs);
    let opts = GenOptions::default();
    let (_, set, _) = Generator::build(&state, opts.clone());
    let views = Views::build(&state, &set, &opts);
    let proxy = |ns: &str| Proxy {
        namespace: Arc::from(ns),
        ..Default::default()
    };
    let k1 = views.key_for(&proxy("ns1"), &state);
    let ViewKey::Sidecar {
        sidecar,
        visible,
        sources,
    } = &k1
    else {
        panic!("ns1 is scoped: {k1:?}")
    };
    assert_eq!(sidecar.as_deref(), Some("cfg/sidecar/ns1/default"));
    let v = views.get(sidecar, visible, sources).expect("view");
    assert_eq!(
        names(&v.resources.clusters),
        ["outbound|80||a.ns1.svc.cluster.local"]
    );
    assert_eq!(names(&v.resources.sidecar_listeners), ["0.0.0.0_80"]);
    let rc: envoy_types::pb::envoy::config::route::v3::RouteConfiguration =
        decode(&v.resources.routes, "80");
    let vhosts: Vec<&str> = rc.virtual_hosts.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(vhosts, ["a.ns1.svc.cluster.local:80", "block_all"]);
    assert!(
        Arc::ptr_eq(
            v.resources.sidecar_listeners.get("0.0.0.0_80").expect("l"),
            set.sidecar_listeners.get("0.0.0.0_80").expect("g")
        ),
        "an equal listener is the global one"
    );
    // ns2 falls back to the root namespace's Sidecar, which admits everything.
    let k2 = views.key_for(&proxy("ns2"), &state);
    assert_eq!(k2.to_string(), "sidecar/cfg/sidecar/istio-system/default");
    let ViewKey::Sidecar {
        sidecar,
        visible,
        sources,
    } = &k2
    else {
        panic!("ns2 is scoped by the root Sidecar")
    };
    let all = views.get(sidecar, visible, sources).expect("view");
    assert_eq!(names(&all.resources.clusters), names(&set.clusters));
    assert_eq!(names(&all.resources.endpoints), names(&set.endpoints));
    assert_eq!(
        names(&all.resources.routes),
        ["80", "9090"],
        "no proxyless routes"
    );
    for n in ["80", "9090"] {
        assert!(Arc::ptr_eq(
            all.resources.routes.get(n).expect("scoped"),
            set.routes.get(n).expect("global")
        ));
    }
    // Routers and proxyless clients keep their default views.
    let router = Proxy {
        proxy_type: ProxyType::Router,
        ..proxy("ns1")
    };
    assert_eq!(
        views.key_for(&router, &state),
        ViewKey::Default(ProxyType::Router)
    );
}

/// A replay following a proxy reports its own view's changes: the move into
/// a Sidecar's view as the difference of the two views, and nothing for a
/// hidden host's endpoints (which the global changes do list).
#[test]
fn a_replay_following_a_proxy_reports_its_view() {
    use deltapilot_engine::replay::Replayer;
    use deltapilot_log::RecordPos;
    let mut r = Replayer::new(GenOptions::default());
    let mut at = 0u64;
    let mut step = |r: &mut Replayer, e: Event| {
        at += 1;
        r.apply_event(
            RecordPos {
                partition: 0,
                offset: at,
            },
            &e,
        )
    };
    for e in [
        simple_svc("ns1", "a.ns1.svc.cluster.local", 80, Protocol::Http),
        simple_svc("ns2", "b.ns2.svc.cluster.local", 80, Protocol::Http),
    ] {
        step(&mut r, e);
    }
    r.follow_proxy(Proxy {
        namespace: Arc::from("ns1"),
        ..Default::default()
    });
    let moved = step(
        &mut r,
        rule(
            "src",
            0,
            ConfigKind::Sidecar,
            "ns1",
            "default",
            r#"{"egress":[{"hosts":["./*"]}]}"#,
        ),
    );
    assert!(moved.changes.is_empty(), "no global resource changed");
    let mut got: Vec<(String, bool)> = moved
        .proxy_changes
        .expect("followed")
        .iter()
        .map(|c| (c.name.to_string(), c.new.is_some()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("80".to_string(), true),
            ("a.ns1.svc.cluster.local:80".to_string(), false),
            ("b.ns2.svc.cluster.local:80".to_string(), false),
            ("outbound|80||b.ns2.svc.cluster.local".to_string(), false),
            ("outbound|80||b.ns2.svc.cluster.local".to_string(), false),
        ]
    );
    let hidden = step(
        &mut r,
        Ep::new("10.0.0.7", "ns2", "b.ns2.svc.cluster.local").upsert("src", 0, "ep/b"),
    );
    assert!(!hidden.changes.is_empty(), "the global assignment changed");
    assert_eq!(hidden.proxy_changes.expect("followed"), vec![]);
}

/// A router whose labels match the selectors of two unrelated Gateways gets
/// one view with both Gateways' listeners, never the sidecar listeners.
#[test]
fn a_router_of_two_unrelated_gateways_gets_both() {
    let gw = |ns: &str, name: &str, selector: &str, port: u16| {
        rule(
            "src",
            0,
            ConfigKind::Gateway,
            ns,
            name,
            &format!(
                r#"{{"selector":{selector},"servers":[{{"port":{{"number":{port},"name":"http","protocol":"HTTP"}},"hosts":["*/*"]}}]}}"#
            ),
        )
    };
    let evs = [
        simple_svc("ns1", "a.ns1.svc.cluster.local", 80, Protocol::Http),
        gw(
            "istio-system",
            "public",
            r#"{"istio":"ingressgateway"}"#,
            8080,
        ),
        gw("ns1", "internal", r#"{"app":"internal-gw"}"#, 9090),
    ];
    let state = model(&evs);
    let opts = GenOptions::default();
    let (_, set, _) = Generator::build(&state, opts.clone());
    let views = Views::build(&state, &set, &opts);
    let mut router = Proxy {
        namespace: Arc::from("istio-system"),
        proxy_type: ProxyType::Router,
        ..Default::default()
    };
    for (k, v) in [("istio", "ingressgateway"), ("app", "internal-gw")] {
        router.labels.insert(Arc::from(k), Arc::from(v));
    }
    let key = views.key_for(&router, &state);
    assert_eq!(key.to_string(), "gateway/istio-system/public,ns1/internal");
    assert!(!views.missing_gateway_set(&router, &state));
    let ViewKey::Gateway { gateways, visible } = &key else {
        panic!("router key {key:?}")
    };
    let v = views
        .gateway(gateways, visible)
        .expect("the key's view exists");
    assert_eq!(names(&v.listeners), ["0.0.0.0_8080", "0.0.0.0_9090"]);
    for (n, r) in v.listeners.iter() {
        assert!(
            !set_has_same(&set.sidecar_listeners, n, r),
            "sidecar listener {n} in the gateway view"
        );
    }
    // Each Gateway alone still has its own view, for routers of one family.
    assert_eq!(views.gateways().count(), 3);
}

/// Routers read the restricted DestinationRules their own namespace sees, as
/// Istio looks them up: routers of two namespaces a rule is exported to share
/// one view holding its subset cluster (every other cluster the global
/// resource itself); a router of another namespace keeps the public view.
#[test]
fn routers_apply_the_restricted_destination_rules_of_their_namespace() {
    let evs = [
        simple_svc("ns1", "a.ns1.svc.cluster.local", 80, Protocol::Http),
        rule(
            "src",
            0,
            ConfigKind::Gateway,
            "istio-system",
            "public",
            r#"{"selector":{"istio":"ingressgateway"},"servers":[{"port":{"number":8080,"name":"http","protocol":"HTTP"},"hosts":["*/*"]}]}"#,
        ),
        rule(
            "src",
            0,
            ConfigKind::DestinationRule,
            "ns1",
            "a",
            r#"{"host":"a.ns1.svc.cluster.local","exportTo":["edge1","edge2"],"subsets":[{"name":"v2","labels":{"version":"v2"}}]}"#,
        ),
    ];
    let state = model(&evs);
    let opts = GenOptions::default();
    let (_, set, _) = Generator::build(&state, opts.clone());
    let views = Views::build(&state, &set, &opts);
    let router = |ns: &str| {
        let mut p = Proxy {
            namespace: Arc::from(ns),
            proxy_type: ProxyType::Router,
            ..Default::default()
        };
        p.labels
            .insert(Arc::from("istio"), Arc::from("ingressgateway"));
        views.key_for(&p, &state)
    };
    let (k1, k2, k3) = (router("edge1"), router("edge2"), router("edge3"));
    assert_eq!(k1, k2, "namespaces that see the same rules share a view");
    assert_eq!(
        k1.to_string(),
        "gateway/istio-system/public+sees/destination_rule/ns1/a"
    );
    assert_eq!(k3.to_string(), "gateway/istio-system/public");
    let view = |k: &ViewKey| match k {
        ViewKey::Gateway { gateways, visible } => {
            views.gateway(gateways, visible).expect("view").clone()
        }
        other => panic!("router key {other:?}"),
    };
    let (seeing, public) = (view(&k1), view(&k3));
    let subset = "outbound|80|v2|a.ns1.svc.cluster.local";
    assert!(seeing.clusters.get(subset).is_some(), "the rule's subset");
    assert!(public.clusters.get(subset).is_none());
    assert!(set.clusters.get(subset).is_none(), "not a global cluster");
    let base = "outbound|80||a.ns1.svc.cluster.local";
    let shared = |v: &deltapilot_xds::view::GatewayView| {
        Arc::ptr_eq(
            v.clusters.get(base).expect("base cluster"),
            set.clusters.get(base).expect("global base cluster"),
        )
    };
    assert!(shared(&seeing) && shared(&public), "equal bytes are shared");
    assert!(public.clusters.ptr_eq(&set.clusters));
}
