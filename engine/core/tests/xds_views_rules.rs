//! Views keyed by what traffic rules restrict, on models folded by the real
//! fold: a VirtualService `exportTo: ["."]` routes only its namespace's
//! sidecars (alone and with a Sidecar, equal classes sharing one view), a
//! ServiceEntry's `exportTo` hides its host elsewhere, and `sourceLabels` and
//! `sourceNamespace` match blocks route only the proxies that satisfy them,
//! and a mesh `exportTo` default restricts the rules that set none.
//! The incremental == rebuilt property over these lives in `xds_views`.

mod xds_support;

use std::sync::Arc;

use deltapilot_model::{Proxy, ProxyType};
use deltapilot_proto::ConfigKind;
use deltapilot_xds::generate::{GenOptions, Generator};
use deltapilot_xds::view::{ViewKey, Views};
use xds_support::*;

/// The cluster the virtual host `vhost` of route configuration `rc` routes to.
fn routed_to(
    rc: &envoy_types::pb::envoy::config::route::v3::RouteConfiguration,
    vhost: &str,
) -> String {
    use envoy_types::pb::envoy::config::route::v3::{
        route::Action, route_action::ClusterSpecifier,
    };
    let vh = rc
        .virtual_hosts
        .iter()
        .find(|v| v.name == vhost)
        .unwrap_or_else(|| panic!("no virtual host {vhost}"));
    match vh.routes[0].action.as_ref() {
        Some(Action::Route(a)) => match a.cluster_specifier.as_ref() {
            Some(ClusterSpecifier::Cluster(c)) => c.clone(),
            other => panic!("{vhost}: cluster specifier {other:?}"),
        },
        other => panic!("{vhost}: action {other:?}"),
    }
}

/// A VirtualService exported to its own namespace routes that namespace's
/// sidecars only; the others keep the default view (no copy); a Sidecar of
/// the namespace composes with it; and equal classes share one view.
#[test]
fn export_to_dot_routes_only_its_own_namespace() {
    let local = rule(
        "src",
        0,
        ConfigKind::VirtualService,
        "ns1",
        "to-b",
        r#"{"hosts":["a.ns1.svc.cluster.local"],"exportTo":["."],"http":[{"route":[{"destination":{"host":"b.ns1.svc.cluster.local"}}]}]}"#,
    );
    let mut evs = vec![
        simple_svc("ns1", "a.ns1.svc.cluster.local", 80, Protocol::Http),
        simple_svc("ns1", "b.ns1.svc.cluster.local", 80, Protocol::Http),
        local,
    ];
    let state = model(&evs);
    let opts = GenOptions::default();
    let (_, set, _) = Generator::build(&state, opts.clone());
    let views = Views::build(&state, &set, &opts);
    let proxy = |ns: &str| Proxy {
        namespace: Arc::from(ns),
        ..Default::default()
    };
    let a = "a.ns1.svc.cluster.local:80";
    let global: envoy_types::pb::envoy::config::route::v3::RouteConfiguration =
        decode(&set.routes, "80");
    assert_eq!(
        routed_to(&global, a),
        "outbound|80||a.ns1.svc.cluster.local",
        "mesh-wide, the restricted rule does not apply"
    );
    assert_eq!(
        views.key_for(&proxy("ns2"), &state),
        ViewKey::Default(ProxyType::Sidecar)
    );
    let k1 = views.key_for(&proxy("ns1"), &state);
    assert_eq!(k1.to_string(), "default/sidecar+sees/ns1/to-b");
    let ViewKey::Sidecar {
        sidecar,
        visible,
        sources,
    } = &k1
    else {
        panic!("ns1 sees a restricted rule: {k1:?}")
    };
    assert_eq!(views.len(), 1, "one view for the one class");
    let v = views.get(sidecar, visible, sources).expect("view");
    let rc: envoy_types::pb::envoy::config::route::v3::RouteConfiguration =
        decode(&v.resources.routes, "80");
    assert_eq!(routed_to(&rc, a), "outbound|80||b.ns1.svc.cluster.local");
    assert!(
        v.resources.clusters.ptr_eq(&set.clusters) && v.resources.endpoints.ptr_eq(&set.endpoints),
        "every host is seen: the global maps themselves"
    );
    assert!(
        Arc::ptr_eq(
            v.resources
                .sidecar_listeners
                .get("0.0.0.0_80")
                .expect("view"),
            set.sidecar_listeners.get("0.0.0.0_80").expect("global")
        ),
        "an equal listener is shared"
    );

    // A Sidecar of ns1 composes: its scope, with ns1's class.
    evs.push(rule(
        "src",
        0,
        ConfigKind::Sidecar,
        "ns1",
        "default",
        r#"{"egress":[{"hosts":["./a.ns1.svc.cluster.local"]}]}"#,
    ));
    let state = model(&evs);
    let (_, set, _) = Generator::build(&state, opts.clone());
    let views = Views::build(&state, &set, &opts);
    let k = views.key_for(&proxy("ns1"), &state);
    assert_eq!(
        k.to_string(),
        "sidecar/cfg/sidecar/ns1/default+sees/ns1/to-b"
    );
    let ViewKey::Sidecar {
        sidecar,
        visible,
        sources,
    } = &k
    else {
        panic!("{k:?}")
    };
    let v = views.get(sidecar, visible, sources).expect("view");
    let rc: envoy_types::pb::envoy::config::route::v3::RouteConfiguration =
        decode(&v.resources.routes, "80");
    let vhosts: Vec<&str> = rc.virtual_hosts.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(vhosts, [a], "the Sidecar hides b");
    assert_eq!(routed_to(&rc, a), "outbound|80||b.ns1.svc.cluster.local");
    assert_eq!(views.len(), 2, "the Sidecar's and the class's alone");

    // Two namespaces exported to by the same rule share one view.
    let shared = rule(
        "src",
        0,
        ConfigKind::VirtualService,
        "ns1",
        "to-b",
        r#"{"hosts":["a.ns1.svc.cluster.local"],"exportTo":["ns3","ns4"],"http":[{"route":[{"destination":{"host":"b.ns1.svc.cluster.local"}}]}]}"#,
    );
    let evs = vec![evs[0].clone(), evs[1].clone(), shared];
    let state = model(&evs);
    let (_, set, _) = Generator::build(&state, opts.clone());
    let views = Views::build(&state, &set, &opts);
    assert_eq!(
        views.key_for(&proxy("ns3"), &state),
        views.key_for(&proxy("ns4"), &state)
    );
    assert_eq!(views.len(), 1);
    assert_eq!(
        views.key_for(&proxy("ns1"), &state),
        ViewKey::Default(ProxyType::Sidecar),
        "not exported to its own namespace"
    );
}

/// A ServiceEntry exported to its own namespace: that namespace's sidecars get
/// its host; every other namespace shares one view without it.
#[test]
fn a_service_entry_exported_to_its_namespace_is_hidden_elsewhere() {
    let evs = vec![
        simple_svc("ns1", "a.ns1.svc.cluster.local", 80, Protocol::Http),
        simple_svc("ns1", "api.example.com", 80, Protocol::Http),
        rule(
            "src",
            0,
            ConfigKind::ServiceEntry,
            "ns1",
            "api",
            r#"{"hosts":["api.example.com"],"exportTo":["."]}"#,
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
    let view_of = |ns: &str| {
        let k = views.key_for(&proxy(ns), &state);
        let ViewKey::Sidecar {
            sidecar,
            visible,
            sources,
        } = &k
        else {
            panic!("{ns}: {k:?}")
        };
        (
            k.to_string(),
            views.get(sidecar, visible, sources).expect("view").clone(),
        )
    };
    let (k1, v1) = view_of("ns1");
    assert_eq!(k1, "default/sidecar+sees/service_entry/ns1/api");
    assert_eq!(names(&v1.resources.clusters), names(&set.clusters));
    let (k2, v2) = view_of("ns2");
    assert_eq!(k2, "default/sidecar+sees/none");
    assert_eq!(
        names(&v2.resources.clusters),
        ["outbound|80||a.ns1.svc.cluster.local"]
    );
    let rc: envoy_types::pb::envoy::config::route::v3::RouteConfiguration =
        decode(&v2.resources.routes, "80");
    let vhosts: Vec<&str> = rc.virtual_hosts.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(vhosts, ["a.ns1.svc.cluster.local:80"]);
    assert_eq!(view_of("ns3").0, k2, "every other namespace shares it");
    assert_eq!(views.len(), 2);
}

/// A `sourceLabels` match routes only the proxies whose labels satisfy it;
/// proxies with equal match sets share one view.
#[test]
fn source_labels_route_by_the_proxys_labels() {
    let evs = vec![
        simple_svc("ns1", "a.ns1.svc.cluster.local", 80, Protocol::Http),
        simple_svc("ns1", "b.ns1.svc.cluster.local", 80, Protocol::Http),
        rule(
            "src",
            0,
            ConfigKind::VirtualService,
            "ns1",
            "by-label",
            r#"{"hosts":["a.ns1.svc.cluster.local"],"http":[
              {"match":[{"sourceLabels":{"app":"canary"}}],"route":[{"destination":{"host":"b.ns1.svc.cluster.local"}}]},
              {"route":[{"destination":{"host":"a.ns1.svc.cluster.local"}}]}]}"#,
        ),
    ];
    let state = model(&evs);
    let opts = GenOptions::default();
    let (_, set, _) = Generator::build(&state, opts.clone());
    let views = Views::build(&state, &set, &opts);
    let proxy = |ns: &str, labels: &[(&str, &str)]| {
        let mut p = Proxy {
            namespace: Arc::from(ns),
            ..Default::default()
        };
        for (k, v) in labels {
            p.labels.insert(Arc::from(*k), Arc::from(*v));
        }
        p
    };
    let a = "a.ns1.svc.cluster.local:80";
    let plain = views.key_for(&proxy("ns1", &[("app", "web")]), &state);
    assert_eq!(plain, ViewKey::Default(ProxyType::Sidecar));
    let global: envoy_types::pb::envoy::config::route::v3::RouteConfiguration =
        decode(&set.routes, "80");
    assert_eq!(
        routed_to(&global, a),
        "outbound|80||a.ns1.svc.cluster.local"
    );
    let canary = proxy("ns1", &[("app", "canary"), ("pod", "1")]);
    let k = views.key_for(&canary, &state);
    assert_eq!(k.to_string(), "default/sidecar+labels/app=canary");
    assert_eq!(
        views.key_for(&proxy("ns2", &[("app", "canary")]), &state),
        k,
        "any namespace, same match set, same view"
    );
    let ViewKey::Sidecar {
        sidecar,
        visible,
        sources,
    } = &k
    else {
        panic!("{k:?}")
    };
    let v = views.get(sidecar, visible, sources).expect("view");
    let rc: envoy_types::pb::envoy::config::route::v3::RouteConfiguration =
        decode(&v.resources.routes, "80");
    assert_eq!(routed_to(&rc, a), "outbound|80||b.ns1.svc.cluster.local");
    assert_eq!(views.len(), 1);
}

/// A `sourceNamespace` match routes only the sidecars of that namespace.
#[test]
fn source_namespace_routes_only_that_namespace() {
    let evs = vec![
        simple_svc("ns1", "a.ns1.svc.cluster.local", 80, Protocol::Http),
        simple_svc("ns1", "b.ns1.svc.cluster.local", 80, Protocol::Http),
        rule(
            "src",
            0,
            ConfigKind::VirtualService,
            "ns1",
            "by-ns",
            r#"{"hosts":["a.ns1.svc.cluster.local"],"http":[
              {"match":[{"sourceNamespace":"ns2"}],"route":[{"destination":{"host":"b.ns1.svc.cluster.local"}}]},
              {"route":[{"destination":{"host":"a.ns1.svc.cluster.local"}}]}]}"#,
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
    assert_eq!(
        views.key_for(&proxy("ns1"), &state),
        ViewKey::Default(ProxyType::Sidecar)
    );
    let k = views.key_for(&proxy("ns2"), &state);
    assert_eq!(k.to_string(), "default/sidecar+labels/:namespace=ns2");
    let ViewKey::Sidecar {
        sidecar,
        visible,
        sources,
    } = &k
    else {
        panic!("{k:?}")
    };
    let v = views.get(sidecar, visible, sources).expect("view");
    let rc: envoy_types::pb::envoy::config::route::v3::RouteConfiguration =
        decode(&v.resources.routes, "80");
    assert_eq!(
        routed_to(&rc, "a.ns1.svc.cluster.local:80"),
        "outbound|80||b.ns1.svc.cluster.local"
    );
    assert_eq!(views.len(), 1, "one namespace selector, one view");
}

/// The scoped view sidecar key `k` names in `views`.
fn view_of(views: &Views, k: &ViewKey) -> Arc<deltapilot_xds::view::ScopedView> {
    let ViewKey::Sidecar {
        sidecar,
        visible,
        sources,
    } = k
    else {
        panic!("not a scoped key: {k:?}")
    };
    views.get(sidecar, visible, sources).expect("view").clone()
}

/// The lb policy of cluster `name` in `map`.
fn lb_of(map: &deltapilot_xds::ResourceMap, name: &str) -> i32 {
    let c: envoy_types::pb::envoy::config::cluster::v3::Cluster = decode(map, name);
    c.lb_policy
}

/// The endpoint addresses of assignment `name` in `map`, sorted.
fn members(map: &deltapilot_xds::ResourceMap, name: &str) -> Vec<String> {
    use envoy_types::pb::envoy::config::core::v3::address::Address;
    use envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
    let cla: envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment =
        decode(map, name);
    let mut out: Vec<String> = (cla.endpoints.iter())
        .flat_map(|l| l.lb_endpoints.iter())
        .filter_map(|e| match e.host_identifier.as_ref()? {
            HostIdentifier::Endpoint(ep) => match ep.address.as_ref()?.address.as_ref()? {
                Address::SocketAddress(s) => Some(s.address.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    out.sort();
    out
}

/// A DestinationRule exported to `.` (and to ns3 and ns4) gives its subsets
/// and policy to the sidecars of those namespaces only, ahead of a public
/// one for the host; ns3 and ns4 share one view, ns1 (whose own rule it is)
/// has its own; the view's subset assignments follow endpoint changes
/// incrementally, equal to a rebuild; other hosts' resources stay shared.
#[test]
fn a_destination_rule_exported_to_dot_applies_only_where_it_is_seen() {
    let a = "a.ns1.svc.cluster.local";
    let mut evs = vec![
        simple_svc("ns1", a, 80, Protocol::Http),
        simple_svc("ns1", "b.ns1.svc.cluster.local", 80, Protocol::Http),
        Ep::new("10.0.0.1", "ns1", a)
            .label("version", "v1")
            .upsert("src", 0, "ep/1"),
        Ep::new("10.0.0.2", "ns1", a)
            .label("version", "v2")
            .upsert("src", 0, "ep/2"),
        rule(
            "src",
            0,
            ConfigKind::DestinationRule,
            "ns2",
            "a-public",
            r#"{"host":"a.ns1.svc.cluster.local","subsets":[{"name":"v2","labels":{"version":"v2"}}]}"#,
        ),
        rule(
            "src",
            0,
            ConfigKind::DestinationRule,
            "ns1",
            "z-local",
            r#"{"host":"a.ns1.svc.cluster.local","exportTo":[".","ns3","ns4"],"trafficPolicy":{"loadBalancer":{"simple":"LEAST_REQUEST"}},"subsets":[{"name":"v1","labels":{"version":"v1"}}]}"#,
        ),
    ];
    let state = model(&evs);
    let opts = GenOptions::default();
    let (mut generator, set, _) = Generator::build(&state, opts.clone());
    let views = Views::build(&state, &set, &opts);
    let proxy = |ns: &str| Proxy {
        namespace: Arc::from(ns),
        ..Default::default()
    };
    let (plain, v1, v2) = (
        format!("outbound|80||{a}"),
        format!("outbound|80|v1|{a}"),
        format!("outbound|80|v2|{a}"),
    );
    use envoy_types::pb::envoy::config::cluster::v3::cluster::LbPolicy;
    assert_eq!(lb_of(&set.clusters, &plain), LbPolicy::RoundRobin as i32);
    assert!(set.clusters.get(&v1).is_none() && set.clusters.get(&v2).is_some());
    assert_eq!(
        views.key_for(&proxy("ns2"), &state),
        ViewKey::Default(ProxyType::Sidecar),
        "ns2 sees only the public rule: the global resources"
    );
    let k1 = views.key_for(&proxy("ns1"), &state);
    assert_eq!(
        k1.to_string(),
        "default/sidecar+sees/destination_rule/ns1/z-local,destination_rule/ns1/z-local#own"
    );
    let k3 = views.key_for(&proxy("ns3"), &state);
    assert_eq!(k3, views.key_for(&proxy("ns4"), &state), "one view, shared");
    assert_ne!(k1, k3, "the owner's namespace has its own");
    assert_eq!(views.len(), 2);
    for k in [&k1, &k3] {
        let v = view_of(&views, k);
        let r = &v.resources;
        assert_eq!(lb_of(&r.clusters, &plain), LbPolicy::LeastRequest as i32);
        assert!(r.clusters.get(&v2).is_none() && r.endpoints.get(&v2).is_none());
        assert_eq!(members(&r.endpoints, &v1), ["10.0.0.1"]);
        assert_eq!(members(&r.endpoints, &plain), ["10.0.0.1", "10.0.0.2"]);
        assert!(
            Arc::ptr_eq(
                r.endpoints.get(&plain).expect("view"),
                set.endpoints.get(&plain).expect("global")
            ),
            "an equal assignment is shared"
        );
        let b = "outbound|80||b.ns1.svc.cluster.local";
        assert!(
            Arc::ptr_eq(
                r.clusters.get(b).expect("view"),
                set.clusters.get(b).expect("global")
            ),
            "other hosts keep the global resources"
        );
    }

    // Incrementally: a new v1 endpoint reaches the views' subset.
    let more = vec![
        Ep::new("10.0.0.3", "ns1", a)
            .label("version", "v1")
            .upsert("src", 0, "ep/3"),
    ];
    let (next_state, touched, _) = fold_batch(&state, &more);
    let (next, changes, _) = generator.regenerate(&set, &next_state, &touched);
    let (next_views, changed) = views.update(&next_state, &next, &changes, &touched, &opts, 2);
    assert!(changed);
    let v = view_of(&next_views, &k3);
    assert_eq!(
        members(&v.resources.endpoints, &v1),
        ["10.0.0.1", "10.0.0.3"]
    );
    let log = v.changes_since(1, 2).expect("logged");
    assert!(
        log.of(deltapilot_xds::ResourceType::Endpoint)
            .upserted
            .contains(v1.as_str()),
        "{log:?}"
    );
    let rebuilt = Views::build(&next_state, &next, &opts);
    for ((k, got), (rk, want)) in next_views.iter().zip(rebuilt.iter()) {
        assert_eq!(k, rk);
        assert_eq!(flatten(&got.resources), flatten(&want.resources), "{k:?}");
    }

    // Exported everywhere again: every namespace has the global resources,
    // which now carry the rule (it sorts after the public one: v2 wins).
    evs.push(rule(
        "src",
        0,
        ConfigKind::DestinationRule,
        "ns1",
        "z-local",
        r#"{"host":"a.ns1.svc.cluster.local","exportTo":["*"]}"#,
    ));
    let state = model(&evs);
    let (_, set, _) = Generator::build(&state, opts.clone());
    let views = Views::build(&state, &set, &opts);
    assert_eq!(
        views.key_for(&proxy("ns1"), &state),
        ViewKey::Default(ProxyType::Sidecar)
    );
    assert!(views.is_empty());
}

/// The clusters the `tcp_proxy` filters of listener `name` forward to, in
/// chain order (the default chain last).
fn tcp_targets(map: &deltapilot_xds::ResourceMap, name: &str) -> Vec<String> {
    use envoy_types::pb::envoy::config::listener::v3::{Listener, filter::ConfigType};
    use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{
        TcpProxy, tcp_proxy::ClusterSpecifier,
    };
    use prost::Message;
    let l: Listener = decode(map, name);
    (l.filter_chains.iter())
        .chain(l.default_filter_chain.iter())
        .flat_map(|c| c.filters.iter())
        .filter_map(|f| match f.config_type.as_ref()? {
            ConfigType::TypedConfig(any) => TcpProxy::decode(&any.value[..]).ok(),
            _ => None,
        })
        .filter_map(|p| match p.cluster_specifier? {
            ClusterSpecifier::Cluster(c) => Some(c),
            _ => None,
        })
        .collect()
}

/// A `tcp` route whose match block has `sourceLabels` (or a
/// `sourceNamespace`) forwards only the sidecars that satisfy it; the others
/// fall through to the next route. A block naming only a Gateway never
/// applies to sidecars.
#[test]
fn tcp_source_matches_route_by_the_proxys_labels() {
    let db = "db.ns1.svc.cluster.local";
    let evs = vec![
        simple_svc("ns1", db, 3306, Protocol::Tcp),
        simple_svc("ns1", "replica.ns1.svc.cluster.local", 3306, Protocol::Tcp),
        simple_svc("ns1", "gw-only.ns1.svc.cluster.local", 3306, Protocol::Tcp),
        rule(
            "src",
            0,
            ConfigKind::VirtualService,
            "ns1",
            "db",
            r#"{"hosts":["db.ns1.svc.cluster.local"],"tcp":[
                {"match":[{"gateways":["ns1/edge"]}],"route":[{"destination":{"host":"gw-only.ns1.svc.cluster.local"}}]},
                {"match":[{"port":3306,"sourceLabels":{"app":"reader"}},{"sourceNamespace":"ns2"}],"route":[{"destination":{"host":"replica.ns1.svc.cluster.local"}}]},
                {"route":[{"destination":{"host":"db.ns1.svc.cluster.local"}}]}]}"#,
        ),
    ];
    let state = model(&evs);
    let status = state.rules().status("cfg/virtual_service/ns1/db");
    assert!(
        matches!(status, Some(deltapilot_model::rules::RuleStatus::Applied)),
        "source matches are no longer reported: {status:?}"
    );
    let opts = GenOptions::default();
    let (_, set, _) = Generator::build(&state, opts.clone());
    let views = Views::build(&state, &set, &opts);
    let (plain, replica) = (
        format!("outbound|3306||{db}"),
        "outbound|3306||replica.ns1.svc.cluster.local".to_string(),
    );
    let global = tcp_targets(&set.sidecar_listeners, "0.0.0.0_3306");
    assert!(
        global.contains(&plain) && !global.contains(&replica),
        "mesh-wide, no proxy satisfies the blocks: {global:?}"
    );
    assert!(
        !global.iter().any(|c| c.contains("gw-only")),
        "a gateway-only block is not for sidecars: {global:?}"
    );
    let proxy = |ns: &str, app: Option<&str>| {
        let mut p = Proxy {
            namespace: Arc::from(ns),
            ..Default::default()
        };
        if let Some(a) = app {
            p.labels.insert(Arc::from("app"), Arc::from(a));
        }
        p
    };
    assert_eq!(
        views.key_for(&proxy("ns1", Some("writer")), &state),
        ViewKey::Default(ProxyType::Sidecar)
    );
    for p in [proxy("ns1", Some("reader")), proxy("ns2", None)] {
        let k = views.key_for(&p, &state);
        let v = view_of(&views, &k);
        let got = tcp_targets(&v.resources.sidecar_listeners, "0.0.0.0_3306");
        assert!(
            got.contains(&replica) && !got.contains(&plain),
            "{k}: the satisfied block forwards to the replica: {got:?}"
        );
    }
}

/// The mesh's `defaultVirtualServiceExportTo: ["."]` makes a VirtualService
/// without `exportTo` its own namespace's, exactly as if it said `["."]`; one
/// that says `["*"]` stays public.
#[test]
fn a_mesh_export_default_restricts_rules_that_set_none() {
    let vs = |name: &str, host: &str, export: &str| {
        rule(
            "src",
            0,
            ConfigKind::VirtualService,
            "ns1",
            name,
            &format!(
                r#"{{"hosts":["{host}"]{export},"http":[{{"route":[{{"destination":{{"host":"b.ns1.svc.cluster.local"}}}}]}}]}}"#
            ),
        )
    };
    let evs = vec![
        simple_svc("ns1", "a.ns1.svc.cluster.local", 80, Protocol::Http),
        simple_svc("ns1", "b.ns1.svc.cluster.local", 80, Protocol::Http),
        simple_svc("ns1", "c.ns1.svc.cluster.local", 80, Protocol::Http),
        vs("to-b", "a.ns1.svc.cluster.local", ""),
        vs("public", "c.ns1.svc.cluster.local", r#","exportTo":["*"]"#),
    ];
    let defaults = deltapilot_model::rules::ExportDefaults {
        virtual_service: vec![".".into()],
        ..Default::default()
    };
    let opts = GenOptions {
        export_defaults: defaults.clone(),
        ..GenOptions::default()
    };
    let plain = model(&evs);
    let state = plain.with_export_defaults(&defaults);
    assert_eq!(state.rebuild(), state, "a rebuild keeps the defaults");
    let (_, set, _) = Generator::build(&state, opts.clone());
    let views = Views::build(&state, &set, &opts);
    let proxy = |ns: &str| Proxy {
        namespace: Arc::from(ns),
        ..Default::default()
    };
    let (a, c) = ("a.ns1.svc.cluster.local:80", "c.ns1.svc.cluster.local:80");
    let global: envoy_types::pb::envoy::config::route::v3::RouteConfiguration =
        decode(&set.routes, "80");
    assert_eq!(
        routed_to(&global, a),
        "outbound|80||a.ns1.svc.cluster.local"
    );
    assert_eq!(
        routed_to(&global, c),
        "outbound|80||b.ns1.svc.cluster.local"
    );
    assert_eq!(
        views.key_for(&proxy("ns2"), &state),
        ViewKey::Default(ProxyType::Sidecar)
    );
    let k1 = views.key_for(&proxy("ns1"), &state);
    assert_eq!(k1.to_string(), "default/sidecar+sees/ns1/to-b");
    let ViewKey::Sidecar {
        sidecar,
        visible,
        sources,
    } = &k1
    else {
        panic!("ns1 sees the defaulted rule: {k1:?}")
    };
    let v = views.get(sidecar, visible, sources).expect("view");
    let rc: envoy_types::pb::envoy::config::route::v3::RouteConfiguration =
        decode(&v.resources.routes, "80");
    assert_eq!(routed_to(&rc, a), "outbound|80||b.ns1.svc.cluster.local");

    // Without the default, the same objects are public.
    let (_, set, _) = Generator::build(&plain, GenOptions::default());
    let global: envoy_types::pb::envoy::config::route::v3::RouteConfiguration =
        decode(&set.routes, "80");
    assert_eq!(
        routed_to(&global, a),
        "outbound|80||b.ns1.svc.cluster.local"
    );
    assert_eq!(
        plain
            .with_export_defaults(&defaults)
            .with_export_defaults(&Default::default()),
        plain
    );
}
