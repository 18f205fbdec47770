//! The shape of generated resources, decoded back into Envoy's messages: the
//! fields real Envoy and proxyless gRPC clients insist on (see
//! `shared/ENVIRONMENT.md`), built from a model folded from real events.

mod xds_support;

use std::collections::BTreeSet;

use deltapilot_xds::ResourceType;
use deltapilot_xds::generate::{GenOptions, build_all};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use envoy_types::pb::envoy::config::core::v3::{
    ApiVersion, HealthStatus, address, config_source::ConfigSourceSpecifier,
    socket_address::PortSpecifier,
};
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, LbEndpoint, lb_endpoint::HostIdentifier,
};
use envoy_types::pb::envoy::config::listener::v3::{Listener, filter::ConfigType as FilterConfig};
use envoy_types::pb::envoy::config::route::v3::{
    RouteConfiguration, route::Action, route_action::ClusterSpecifier, route_match::PathSpecifier,
};
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, http_connection_manager::RouteSpecifier,
    http_filter::ConfigType as HttpFilterConfig,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{TcpProxy, tcp_proxy};
use envoy_types::pb::envoy::extensions::upstreams::http::v3::HttpProtocolOptions;
use envoy_types::pb::envoy::extensions::upstreams::http::v3::http_protocol_options::{
    UpstreamProtocolOptions, explicit_http_config::ProtocolConfig,
};
use envoy_types::pb::google::protobuf::Any;
use prost::{Message, Name};
use xds_support::*;

const REVIEWS: &str = "reviews.bookinfo.svc.cluster.local";
const RATINGS: &str = "ratings.bookinfo.svc.cluster.local";

fn unpack<M: Message + Name + Default>(any: &Any) -> M {
    assert_eq!(any.type_url, M::type_url());
    M::decode(any.value.as_slice()).expect("Any decodes as its type")
}

fn assert_ads(cs: Option<&envoy_types::pb::envoy::config::core::v3::ConfigSource>) {
    let cs = cs.expect("config source set");
    assert!(
        matches!(
            cs.config_source_specifier,
            Some(ConfigSourceSpecifier::Ads(_))
        ),
        "ADS"
    );
    assert_eq!(cs.resource_api_version, ApiVersion::V3 as i32);
}

fn socket(lb: &LbEndpoint) -> (String, u32) {
    let Some(HostIdentifier::Endpoint(e)) = &lb.host_identifier else {
        panic!("endpoint")
    };
    let Some(address::Address::SocketAddress(sa)) =
        e.address.as_ref().and_then(|a| a.address.as_ref())
    else {
        panic!("socket address")
    };
    let Some(PortSpecifier::PortValue(p)) = sa.port_specifier else {
        panic!("port value")
    };
    (sa.address.clone(), p)
}

fn hcm_of(l: &Listener) -> HttpConnectionManager {
    if let Some(api) = &l.api_listener {
        return unpack(api.api_listener.as_ref().expect("api_listener Any"));
    }
    let f = &l.filter_chains[0].filters[0];
    assert_eq!(f.name, "envoy.filters.network.http_connection_manager");
    let Some(FilterConfig::TypedConfig(any)) = &f.config_type else {
        panic!("typed config")
    };
    unpack(any)
}

fn assert_rds_with_router(h: &HttpConnectionManager, route: &str) {
    let Some(RouteSpecifier::Rds(rds)) = &h.route_specifier else {
        panic!("RDS")
    };
    assert_eq!(rds.route_config_name, route);
    assert_ads(rds.config_source.as_ref());
    let last = h
        .http_filters
        .last()
        .expect("at least one HTTP filter (grpcio NACKs none)");
    assert_eq!(last.name, "envoy.filters.http.router");
    let Some(HttpFilterConfig::TypedConfig(any)) = &last.config_type else {
        panic!("router typed config")
    };
    let _: Router = unpack(any);
}

#[test]
fn eds_clusters_use_ads_and_http2_only_where_needed() {
    let m = model(&[svc(
        "src",
        0,
        "bookinfo",
        REVIEWS,
        vec![
            port("http", 9080, Protocol::Http),
            port("grpc", 9090, Protocol::Grpc),
            port("h2", 9091, Protocol::Http2),
            port("db", 3306, Protocol::Mysql),
            port("dns", 53, Protocol::Udp),
        ],
        Resolution::StaticEndpoints,
    )]);
    let opts = GenOptions {
        connect_timeout: std::time::Duration::from_millis(250),
        ..Default::default()
    };
    let (set, errors) = build_all(&m, &opts);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        names(&set.clusters),
        [3306, 9080, 9090, 9091].map(|p| format!("outbound|{p}||{REVIEWS}")),
        "one cluster per port, none for UDP"
    );
    for p in [3306, 9080, 9090, 9091] {
        let name = format!("outbound|{p}||{REVIEWS}");
        let c: Cluster = decode(&set.clusters, &name);
        assert_eq!(c.name, name);
        assert_eq!(
            c.cluster_discovery_type,
            Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32))
        );
        let eds = c.eds_cluster_config.as_ref().expect("eds config");
        assert_ads(eds.eds_config.as_ref());
        let timeout = c.connect_timeout.expect("connect timeout");
        assert_eq!((timeout.seconds, timeout.nanos), (0, 250_000_000));
        let panic = c
            .common_lb_config
            .as_ref()
            .and_then(|l| l.healthy_panic_threshold);
        assert_eq!(panic.map(|p| p.value), Some(0.0), "panic mode off");
        let opts = c
            .typed_extension_protocol_options
            .get("envoy.extensions.upstreams.http.v3.HttpProtocolOptions");
        if p == 9090 || p == 9091 {
            let o: HttpProtocolOptions = unpack(opts.expect("http2 options for grpc/http2"));
            let Some(UpstreamProtocolOptions::ExplicitHttpConfig(e)) = o.upstream_protocol_options
            else {
                panic!("explicit http config")
            };
            assert!(matches!(
                e.protocol_config,
                Some(ProtocolConfig::Http2ProtocolOptions(_))
            ));
        } else {
            assert!(opts.is_none(), "no protocol options on {p}");
        }
    }
}

#[test]
fn dns_services_get_logical_dns_and_passthrough_gets_nothing() {
    let m = model(&[
        svc(
            "src",
            0,
            "ext",
            "api.example.com",
            vec![port("https", 443, Protocol::Tls)],
            Resolution::Dns,
        ),
        svc(
            "src",
            0,
            "ext",
            "*.wild.example.com",
            vec![port("https", 8443, Protocol::Tls)],
            Resolution::Dns,
        ),
        svc(
            "src",
            0,
            "ext",
            "db.example.com",
            vec![port("tcp", 5432, Protocol::Tcp)],
            Resolution::Passthrough,
        ),
    ]);
    let (set, errors) = build_all(&m, &GenOptions::default());
    let c: Cluster = decode(&set.clusters, "outbound|443||api.example.com");
    assert_eq!(
        c.cluster_discovery_type,
        Some(ClusterDiscoveryType::Type(DiscoveryType::LogicalDns as i32))
    );
    let la = c.load_assignment.expect("inline assignment");
    assert_eq!(
        socket(&la.endpoints[0].lb_endpoints[0]),
        ("api.example.com".into(), 443)
    );
    assert!(la.endpoints[0].locality.is_some());
    assert!(
        set.endpoints.is_empty(),
        "DNS and passthrough clusters have no EDS assignment"
    );
    assert!(
        !set.clusters.keys().any(|k| k.contains("db.example.com")),
        "passthrough is skipped"
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].resource_type, ResourceType::Cluster);
    assert_eq!(errors[0].name, "outbound|8443||*.wild.example.com");
}

#[test]
fn assignments_group_by_locality_with_weights_and_health() {
    let mut events = vec![svc(
        "src",
        0,
        "bookinfo",
        REVIEWS,
        vec![port("http", 9080, Protocol::Http)],
        Resolution::StaticEndpoints,
    )];
    let eps = [
        Ep::new("10.0.0.3", "bookinfo", REVIEWS)
            .locality("us-east", "b")
            .weight(3),
        Ep::new("10.0.0.1", "bookinfo", REVIEWS)
            .locality("us-east", "a")
            .target("http", 8080),
        Ep::new("10.0.0.2", "bookinfo", REVIEWS)
            .locality("us-east", "a")
            .health(Health::Unhealthy)
            .weight(2),
        Ep::new("10.0.0.4", "bookinfo", REVIEWS).health(Health::Draining),
        Ep::new("10.0.0.5", "bookinfo", REVIEWS).health(Health::NotReady),
        // Same socket as 10.0.0.3 under another key: deduplicated, smallest key wins.
        Ep::new("10.0.0.3", "bookinfo", REVIEWS)
            .locality("eu", "x")
            .weight(7),
    ];
    for (i, e) in eps.iter().enumerate() {
        events.push(e.upsert("src", 0, &format!("ep/{i}")));
    }
    events.push(svc(
        "src",
        0,
        "bookinfo",
        RATINGS,
        vec![port("http", 9080, Protocol::Http)],
        Resolution::StaticEndpoints,
    ));
    let (set, errors) = build_all(&model(&events), &GenOptions::default());
    assert!(errors.is_empty(), "{errors:?}");

    let cla: ClusterLoadAssignment = decode(&set.endpoints, &format!("outbound|9080||{REVIEWS}"));
    assert_eq!(cla.cluster_name, format!("outbound|9080||{REVIEWS}"));
    // (region, zone, group weight, [(socket, health, weight)])
    type Group = (String, String, u32, Vec<((String, u32), i32, u32)>);
    let groups: Vec<Group> = cla
        .endpoints
        .iter()
        .map(|g| {
            let l = g.locality.clone().expect("locality always set");
            let w = g.load_balancing_weight.expect("group weight").value;
            let eps = g
                .lb_endpoints
                .iter()
                .map(|e| {
                    (
                        socket(e),
                        e.health_status,
                        e.load_balancing_weight.expect("weight").value,
                    )
                })
                .collect();
            (l.region, l.zone, w, eps)
        })
        .collect();
    let healthy = HealthStatus::Healthy as i32;
    let unhealthy = HealthStatus::Unhealthy as i32;
    let draining = HealthStatus::Draining as i32;
    assert_eq!(
        groups,
        vec![
            (
                String::new(),
                String::new(),
                2,
                vec![
                    (("10.0.0.4".into(), 9080), draining, 1),
                    (("10.0.0.5".into(), 9080), unhealthy, 1)
                ]
            ),
            (
                "us-east".into(),
                "a".into(),
                3,
                vec![
                    (("10.0.0.1".into(), 8080), healthy, 1),
                    (("10.0.0.2".into(), 9080), unhealthy, 2)
                ]
            ),
            (
                "us-east".into(),
                "b".into(),
                3,
                vec![(("10.0.0.3".into(), 9080), healthy, 3)]
            ),
        ]
    );
    for g in &cla.endpoints {
        assert!(g.load_balancing_weight.is_some_and(|w| w.value > 0));
        assert!(
            g.lb_endpoints
                .iter()
                .all(|e| e.load_balancing_weight.is_some_and(|w| w.value > 0))
        );
    }

    let empty: ClusterLoadAssignment = decode(&set.endpoints, &format!("outbound|9080||{RATINGS}"));
    assert!(
        empty.endpoints.is_empty(),
        "a cluster without endpoints still gets an assignment"
    );
}

#[test]
fn overflowing_weights_fail_one_assignment_and_nothing_else() {
    let events = vec![
        simple_svc("ns", "big.ns.svc.cluster.local", 80, Protocol::Http),
        Ep::new("10.0.0.1", "ns", "big.ns.svc.cluster.local")
            .weight(u32::MAX)
            .upsert("src", 0, "ep/1"),
        Ep::new("10.0.0.2", "ns", "big.ns.svc.cluster.local")
            .weight(u32::MAX)
            .upsert("src", 0, "ep/2"),
    ];
    let (set, errors) = build_all(&model(&events), &GenOptions::default());
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].resource_type, ResourceType::Endpoint);
    assert!(errors[0].reason.contains("sum to"), "{}", errors[0]);
    assert!(
        set.endpoints.is_empty(),
        "the failing assignment is not published"
    );
    assert_eq!(set.clusters.len(), 1, "everything else still is");
    assert_eq!(set.sidecar_listeners.len(), 1);
    assert_eq!(set.routes.len(), 2);
}

#[test]
fn sidecar_listeners_per_port_with_hcm_or_tcp_proxy() {
    let m = model(&[
        simple_svc("bookinfo", REVIEWS, 9080, Protocol::Http),
        simple_svc("bookinfo", RATINGS, 9080, Protocol::Grpc),
        simple_svc("db", "mysql.db.svc.cluster.local", 3306, Protocol::Mysql),
        simple_svc("a", "redis.a.svc.cluster.local", 6379, Protocol::Redis),
        simple_svc("b", "redis.b.svc.cluster.local", 6379, Protocol::Redis),
        simple_svc("c", "mixed.c.svc.cluster.local", 8000, Protocol::Tcp),
        simple_svc("d", "mixed.d.svc.cluster.local", 8000, Protocol::Http),
    ]);
    let opts = GenOptions {
        outbound_address: "127.0.0.1".into(),
        bind_outbound: true,
        ..Default::default()
    };
    let (set, errors) = build_all(&m, &opts);
    assert_eq!(
        names(&set.sidecar_listeners),
        ["0.0.0.0_3306", "0.0.0.0_8000", "0.0.0.0_9080"]
    );

    let http: Listener = decode(&set.sidecar_listeners, "0.0.0.0_9080");
    assert_eq!(http.bind_to_port.map(|b| b.value), Some(true));
    let Some(address::Address::SocketAddress(sa)) = http.address.and_then(|a| a.address) else {
        panic!("address")
    };
    assert_eq!(
        (sa.address.as_str(), sa.port_specifier),
        ("127.0.0.1", Some(PortSpecifier::PortValue(9080)))
    );
    assert_rds_with_router(
        &hcm_of(&decode(&set.sidecar_listeners, "0.0.0.0_9080")),
        "9080",
    );

    let mixed: Listener = decode(&set.sidecar_listeners, "0.0.0.0_8000");
    assert_rds_with_router(&hcm_of(&mixed), "8000");

    let tcp: Listener = decode(&set.sidecar_listeners, "0.0.0.0_3306");
    let f = &tcp.filter_chains[0].filters[0];
    assert_eq!(f.name, "envoy.filters.network.tcp_proxy");
    let Some(FilterConfig::TypedConfig(any)) = &f.config_type else {
        panic!("typed config")
    };
    let proxy: TcpProxy = unpack(any);
    assert_eq!(
        proxy.cluster_specifier,
        Some(tcp_proxy::ClusterSpecifier::Cluster(
            "outbound|3306||mysql.db.svc.cluster.local".into()
        ))
    );

    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        (errors[0].resource_type, errors[0].name.as_str()),
        (ResourceType::Listener, "0.0.0.0_6379")
    );
    assert!(
        errors[0]
            .reason
            .contains("redis.a.svc.cluster.local, redis.b.svc.cluster.local"),
        "{}",
        errors[0]
    );

    let unbound: Listener = decode(
        &build_all(&m, &GenOptions::default()).0.sidecar_listeners,
        "0.0.0.0_9080",
    );
    assert_eq!(
        unbound.bind_to_port.map(|b| b.value),
        Some(false),
        "capture mode says so explicitly"
    );
}

#[test]
fn proxyless_grpc_listeners_find_their_virtual_host() {
    let m = model(&[
        simple_svc("bookinfo", REVIEWS, 9080, Protocol::Grpc),
        simple_svc("db", "mysql.db.svc.cluster.local", 3306, Protocol::Mysql),
    ]);
    let (set, _) = build_all(&m, &GenOptions::default());
    let target = format!("{REVIEWS}:9080");
    assert_eq!(
        names(&set.grpc_listeners),
        std::slice::from_ref(&target),
        "only HTTP-like ports"
    );
    let l: Listener = decode(&set.grpc_listeners, &target);
    assert!(l.address.is_none() && l.filter_chains.is_empty());
    assert_rds_with_router(&hcm_of(&l), &target);

    let rc: RouteConfiguration = decode(&set.routes, &target);
    let vh = rc
        .virtual_hosts
        .iter()
        .find(|v| v.domains.contains(&target))
        .expect("a vhost for the xds:/// target");
    let Some(Action::Route(ra)) = &vh.routes[0].action else {
        panic!("route action")
    };
    assert_eq!(
        ra.cluster_specifier,
        Some(ClusterSpecifier::Cluster(format!(
            "outbound|9080||{REVIEWS}"
        )))
    );
}

#[test]
fn port_routes_have_one_vhost_per_service_and_unique_domains() {
    let hosts = [
        ("ns1", "web.ns1.svc.cluster.local"),
        ("ns2", "web.ns2.svc.cluster.local"),
        ("ns1", "api.ns1.svc.cluster.local"),
        ("ns1", "web.ns1"),
        ("ns3", "web.ns3.svc.corp.local"),
        ("ext", "web"),
        ("ext", "www.example.com"),
        ("ext", "*.example.com"),
    ];
    let events: Vec<_> = hosts
        .iter()
        .map(|(ns, h)| simple_svc(ns, h, 80, Protocol::Http))
        .collect();
    let (set, errors) = build_all(&model(&events), &GenOptions::default());
    assert!(errors.is_empty(), "{errors:?}");
    let rc: RouteConfiguration = decode(&set.routes, "80");
    assert_eq!(rc.name, "80");
    let mut sorted: Vec<&str> = hosts.iter().map(|(_, h)| *h).collect();
    sorted.sort();
    let vnames: Vec<String> = rc.virtual_hosts.iter().map(|v| v.name.clone()).collect();
    assert_eq!(
        vnames,
        sorted.iter().map(|h| format!("{h}:80")).collect::<Vec<_>>()
    );

    let mut seen = BTreeSet::new();
    for vh in &rc.virtual_hosts {
        for d in &vh.domains {
            assert!(
                seen.insert(d.clone()),
                "domain {d} appears twice in route 80"
            );
        }
        let host = vh.name.trim_end_matches(":80");
        assert!(
            vh.domains.contains(&host.to_string()) && vh.domains.contains(&vh.name),
            "exact forms kept"
        );
        let Some(PathSpecifier::Prefix(p)) = vh.routes[0]
            .r#match
            .as_ref()
            .and_then(|m| m.path_specifier.clone())
        else {
            panic!("prefix match")
        };
        assert_eq!(p, "/");
        let Some(Action::Route(ra)) = &vh.routes[0].action else {
            panic!("route action")
        };
        assert_eq!(
            ra.cluster_specifier,
            Some(ClusterSpecifier::Cluster(format!("outbound|80||{host}")))
        );
        assert_eq!(
            ra.timeout.map(|t| (t.seconds, t.nanos)),
            Some((0, 0)),
            "stream timeout disabled"
        );
    }
    let api = rc
        .virtual_hosts
        .iter()
        .find(|v| v.name.starts_with("api."))
        .expect("api");
    assert_eq!(
        api.domains,
        [
            "api.ns1.svc.cluster.local",
            "api.ns1.svc.cluster.local:80",
            "api.ns1.svc.cluster",
            "api.ns1.svc.cluster:80",
            "api.ns1.svc",
            "api.ns1.svc:80",
            "api.ns1",
            "api.ns1:80",
            "api",
            "api:80"
        ],
        "a unique service gets every Istio short form"
    );
    let web_ns1 = rc
        .virtual_hosts
        .iter()
        .find(|v| v.name == "web.ns1.svc.cluster.local:80")
        .expect("web.ns1");
    assert!(
        web_ns1.domains.contains(&"web.ns1.svc.cluster".to_string()),
        "unique short form kept"
    );
    assert!(
        !web_ns1.domains.contains(&"web.ns1".to_string()),
        "another service's exact hostname wins"
    );
    let bare = rc
        .virtual_hosts
        .iter()
        .find(|v| v.name == "web:80")
        .expect("web");
    assert_eq!(
        bare.domains,
        ["web", "web:80"],
        "the explicit hostname `web` owns the bare name"
    );
    let web_ns2 = rc
        .virtual_hosts
        .iter()
        .find(|v| v.name == "web.ns2.svc.cluster.local:80")
        .expect("web.ns2");
    assert!(
        web_ns2.domains.contains(&"web.ns2".to_string())
            && !web_ns2.domains.contains(&"web".to_string())
    );
}
