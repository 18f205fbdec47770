use envoy_types::pb::envoy::config::listener::v3::{Listener, filter::ConfigType};
use envoy_types::pb::envoy::config::route::v3::{
    RouteConfiguration, route::Action, route_action::ClusterSpecifier,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, http_connection_manager::RouteSpecifier,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    DownstreamTlsContext, common_tls_context::ValidationContextType,
};
use prost::Message;

use super::*;
use deltapilot_model::state::ModelState;
use deltapilot_model::state::mk::{rule, svc};
use deltapilot_proto::ConfigKind;

const GW: &str = r#"{
  "selector": {"istio": "ingressgateway"},
  "servers": [
    {"port": {"number": 8080, "name": "http", "protocol": "HTTP"},
     "hosts": ["*/a.example.com", "web/*.web.example.com"]},
    {"port": {"number": 8081, "name": "redirect", "protocol": "HTTP"},
     "hosts": ["a.example.com"], "tls": {"httpsRedirect": true}},
    {"port": {"number": 8443, "name": "https", "protocol": "HTTPS"},
     "hosts": ["a.example.com"],
     "tls": {"mode": "SIMPLE", "credentialName": "kubernetes://a-cert"}},
    {"port": {"number": 8443, "name": "mtls", "protocol": "HTTPS"},
     "hosts": ["m.example.com"],
     "tls": {"mode": "MUTUAL", "credentialName": "kubernetes://m-cert"}},
    {"port": {"number": 8443, "name": "again", "protocol": "HTTPS"},
     "hosts": ["m.example.com"],
     "tls": {"mode": "SIMPLE", "credentialName": "dup"}},
    {"port": {"number": 8080, "name": "tls", "protocol": "HTTPS"},
     "hosts": ["b.example.com"],
     "tls": {"mode": "SIMPLE", "credentialName": "b"}}
  ]
}"#;

fn model(extra: &[deltapilot_proto::Event]) -> ModelState {
    let mut events = vec![
        svc("k", 0, "web", "a.web.svc.cluster.local", &[80]),
        svc("k", 0, "web", "b.web.svc.cluster.local", &[80]),
        rule("k", 0, ConfigKind::Gateway, "edge", "ingress", GW),
        rule(
            "k",
            0,
            ConfigKind::VirtualService,
            "web",
            "a",
            r#"{"hosts":["a.example.com","x.web.example.com"],"gateways":["edge/ingress"],
                "http":[{"route":[{"destination":{"host":"a"}}]}]}"#,
        ),
        rule(
            "k",
            0,
            ConfigKind::VirtualService,
            "web",
            "b",
            r#"{"hosts":["*.example.com"],"gateways":["edge/ingress"],
                "http":[{"match":[{"uri":{"prefix":"/b"}}],"route":[{"destination":{"host":"b"}}]}]}"#,
        ),
        rule(
            "k",
            0,
            ConfigKind::VirtualService,
            "other",
            "c",
            r#"{"hosts":["q.web.example.com"],"gateways":["edge/ingress"],
                "http":[{"route":[{"destination":{"host":"a.web.svc.cluster.local"}}]}]}"#,
        ),
    ];
    events.extend_from_slice(extra);
    ModelState::from_events(&events)
}

fn ids() -> Vec<Arc<str>> {
    vec![Arc::from("edge/ingress")]
}

fn route_config(r: &GatewayResources, name: &str) -> RouteConfiguration {
    let res = r.routes.get(name).unwrap_or_else(|| panic!("route {name}"));
    RouteConfiguration::decode(res.bytes.clone()).expect("decode")
}

fn listener(r: &GatewayResources, name: &str) -> Listener {
    let res = r
        .listeners
        .get(name)
        .unwrap_or_else(|| panic!("listener {name}"));
    Listener::decode(res.bytes.clone()).expect("decode")
}

fn cluster_of(r: &envoy_types::pb::envoy::config::route::v3::Route) -> &str {
    match &r.action {
        Some(Action::Route(ra)) => match &ra.cluster_specifier {
            Some(ClusterSpecifier::Cluster(c)) => c,
            _ => "",
        },
        _ => "",
    }
}

#[test]
fn http_servers_get_merged_virtual_hosts_matched_against_server_hosts() {
    let m = model(&[]);
    let r = gateway_resources(&m, &ids(), &GenOptions::default());
    let rc = route_config(&r, "http.8080");
    let names: Vec<&str> = rc.virtual_hosts.iter().map(|v| v.name.as_str()).collect();
    // a.example.com: both VS (a's host, b's wildcard meets the server's exact
    // host); *.web.example.com: b's wildcard meets the server's narrower one;
    // x.web.example.com: a's host inside web/*.web.example.com; the VS of
    // namespace `other` cannot use `web/` hosts.
    assert_eq!(
        names,
        [
            "*.web.example.com:8080",
            "a.example.com:8080",
            "x.web.example.com:8080"
        ]
    );
    assert_eq!(
        rc.virtual_hosts[0].domains,
        ["*.web.example.com", "*.web.example.com:8080"]
    );
    let a = &rc.virtual_hosts[1];
    assert_eq!(a.domains, ["a.example.com", "a.example.com:*"]);
    assert_eq!(a.routes.len(), 2, "merged");
    assert_eq!(
        cluster_of(&a.routes[0]),
        "outbound|80||b.web.svc.cluster.local",
        "b's /b route comes before a's catch-all"
    );
    assert_eq!(
        cluster_of(&a.routes[1]),
        "outbound|80||a.web.svc.cluster.local"
    );
    let l = listener(&r, "0.0.0.0_8080");
    assert_eq!(l.filter_chains.len(), 1);
    assert!(l.listener_filters.is_empty());
    assert_eq!(l.bind_to_port.map(|b| b.value), Some(true));
    assert_eq!(l.enable_reuse_port, None);
    let hcm = hcm_of(&l.filter_chains[0]);
    assert!(matches!(
        hcm.route_specifier,
        Some(RouteSpecifier::Rds(ref rds)) if rds.route_config_name == "http.8080"
    ));
}

#[test]
fn https_redirect_requires_tls_even_without_a_virtual_service() {
    let m = model(&[]);
    let r = gateway_resources(&m, &ids(), &GenOptions::default());
    let rc = route_config(&r, "http.8081");
    assert_eq!(rc.virtual_hosts.len(), 1);
    let v = &rc.virtual_hosts[0];
    assert_eq!(v.name, "a.example.com:8081");
    assert_eq!(v.require_tls, 2, "ALL");
    assert_eq!(v.routes.len(), 2, "the bound VirtualServices still route");
}

#[test]
fn https_servers_terminate_with_sds_secrets_by_sni() {
    let m = model(&[]);
    let opts = GenOptions {
        outbound_address: "127.0.0.1".into(),
        bind_outbound: true,
        ..Default::default()
    };
    let r = gateway_resources(&m, &ids(), &opts);
    let l = listener(&r, "0.0.0.0_8443");
    assert_eq!(l.enable_reuse_port.map(|b| b.value), Some(false));
    assert_eq!(l.listener_filters.len(), 1, "tls inspector");
    assert_eq!(
        l.filter_chains.len(),
        2,
        "the duplicate SNI server is dropped"
    );
    let sni: Vec<&Vec<String>> = l
        .filter_chains
        .iter()
        .map(|c| &c.filter_chain_match.as_ref().expect("present").server_names)
        .collect();
    assert_eq!(
        sni,
        [
            &vec!["a.example.com".to_string()],
            &vec!["m.example.com".to_string()]
        ]
    );
    let tls = |i: usize| {
        let ts = l.filter_chains[i]
            .transport_socket
            .as_ref()
            .expect("present");
        let Some(
            envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType::TypedConfig(a),
        ) = &ts.config_type
        else {
            panic!("typed config")
        };
        DownstreamTlsContext::decode(a.value.as_slice()).expect("present")
    };
    let simple = tls(0);
    let c = simple.common_tls_context.expect("present");
    assert_eq!(
        c.tls_certificate_sds_secret_configs[0].name,
        "kubernetes://a-cert"
    );
    assert!(c.validation_context_type.is_none());
    let mutual = tls(1);
    assert_eq!(
        mutual.require_client_certificate.map(|b| b.value),
        Some(true)
    );
    match mutual
        .common_tls_context
        .expect("present")
        .validation_context_type
    {
        Some(ValidationContextType::ValidationContextSdsSecretConfig(s)) => {
            assert_eq!(s.name, "kubernetes://m-cert-cacert")
        }
        other => panic!("{other:?}"),
    }
    let rc = route_config(&r, "https.8443.https.ingress.edge");
    assert_eq!(rc.virtual_hosts[0].name, "a.example.com:8443");
    let rc = route_config(&r, "https.8443.mtls.ingress.edge");
    assert_eq!(rc.virtual_hosts[0].name, "m.example.com:8443");
    let secrets: Vec<&str> = r.secret_names.iter().map(|s| &**s).collect();
    assert_eq!(
        secrets,
        [
            "kubernetes://a-cert",
            "kubernetes://m-cert",
            "kubernetes://m-cert-cacert"
        ]
    );
    let codes: Vec<&str> = r.problems.iter().map(|(_, p)| p.code).collect();
    assert_eq!(codes, ["DP2103", "DP2101"], "{:?}", r.problems);
    // mTLS routes: m.example.com is met by VS b's wildcard.
    assert_eq!(
        hcm_of(&l.filter_chains[1]).stat_prefix,
        "outbound_0.0.0.0_8443_mtls"
    );
}

#[test]
fn no_virtual_service_gives_the_blackhole_and_unknown_ids_nothing() {
    let m = ModelState::from_events(&[rule(
        "k",
        0,
        ConfigKind::Gateway,
        "edge",
        "g",
        r#"{"servers":[{"port":{"number":80},"hosts":["*"]}]}"#,
    )]);
    let r = gateway_resources(&m, &[Arc::from("edge/g")], &GenOptions::default());
    let rc = route_config(&r, "http.80");
    assert_eq!(rc.virtual_hosts.len(), 1);
    assert_eq!(rc.virtual_hosts[0].name, "blackhole:80");
    assert!(rc.virtual_hosts[0].routes.is_empty());
    let none = gateway_resources(&m, &[Arc::from("edge/missing")], &GenOptions::default());
    assert!(none.listeners.is_empty() && none.routes.is_empty());
}

#[test]
fn the_result_is_a_pure_function_of_the_model_and_ids() {
    let m = model(&[]);
    let a = gateway_resources(&m, &ids(), &GenOptions::default());
    let b = gateway_resources(
        &m,
        &[Arc::from("edge/ingress"), Arc::from("edge/ingress")],
        &GenOptions::default(),
    );
    for (x, y) in [(&a.listeners, &b.listeners), (&a.routes, &b.routes)] {
        let xs: Vec<_> = x
            .iter()
            .map(|(n, r)| (n.clone(), r.version.clone()))
            .collect();
        let ys: Vec<_> = y
            .iter()
            .map(|(n, r)| (n.clone(), r.version.clone()))
            .collect();
        assert_eq!(xs, ys);
    }
}

fn hcm_of(
    chain: &envoy_types::pb::envoy::config::listener::v3::FilterChain,
) -> HttpConnectionManager {
    match &chain.filters[0].config_type {
        Some(ConfigType::TypedConfig(a)) => {
            HttpConnectionManager::decode(a.value.as_slice()).expect("present")
        }
        _ => panic!("hcm"),
    }
}

#[test]
fn passthrough_servers_forward_by_sni_through_tls_routes() {
    let m = ModelState::from_events(&[
        svc("k", 0, "web", "a.web.svc.cluster.local", &[8443]),
        svc("k", 0, "web", "b.web.svc.cluster.local", &[8443, 9443]),
        rule(
            "k",
            0,
            ConfigKind::Gateway,
            "edge",
            "pt",
            r#"{"servers":[
              {"port":{"number":443,"protocol":"TLS"},"hosts":["*.example.com"],"tls":{"mode":"PASSTHROUGH"}},
              {"port":{"number":443,"protocol":"HTTPS"},"hosts":["t.example.com"],
               "tls":{"mode":"SIMPLE","credentialName":"t"}}
            ]}"#,
        ),
        rule(
            "k",
            0,
            ConfigKind::VirtualService,
            "web",
            "pt",
            r#"{"hosts":["*.example.com"],"gateways":["edge/pt"],"tls":[
              {"match":[{"sniHosts":["a.example.com","t.example.com"]}],
               "route":[{"destination":{"host":"a"}}]},
              {"match":[{"sniHosts":["b.example.com"],"port":443}],
               "route":[{"destination":{"host":"b"}}]},
              {"match":[{"sniHosts":["w.example.com"]}],
               "route":[{"destination":{"host":"a"},"weight":50},
                        {"destination":{"host":"b","port":{"number":9443}},"weight":50}]}
            ]}"#,
        ),
    ]);
    let r = gateway_resources(&m, &[Arc::from("edge/pt")], &GenOptions::default());
    let l = listener(&r, "0.0.0.0_443");
    let sni: Vec<Vec<String>> = l
        .filter_chains
        .iter()
        .map(|c| {
            c.filter_chain_match
                .as_ref()
                .expect("match")
                .server_names
                .clone()
        })
        .collect();
    assert_eq!(
        sni,
        [
            vec!["a.example.com".to_string()],
            vec!["w.example.com".to_string()],
            vec!["t.example.com".to_string()],
        ],
        "t.example.com stays the HTTPS server's; b has two ports and names none"
    );
    assert_eq!(l.listener_filters.len(), 1, "tls inspector");
    let codes: Vec<&str> = r.problems.iter().map(|(_, p)| p.code).collect();
    assert_eq!(codes, ["DP2105", "DP2107"], "{:?}", r.problems);
    assert!(r.routes.get("http.443").is_none());
    assert!(r.routes.get("https.443..pt.edge").is_some());
}

/// A route with two per-filter configs (fault and CORS) is written with its
/// entries in one order, so its bytes (and version) never depend on a hash
/// map's iteration order; the bytes are still the message's encoding.
#[test]
fn a_route_with_fault_and_cors_encodes_to_the_same_bytes_every_time() {
    let vs = rule(
        "k",
        0,
        ConfigKind::VirtualService,
        "web",
        "both",
        r#"{"hosts":["z.example.com"],"gateways":["edge/ingress"],
            "http":[{"fault":{"abort":{"httpStatus":503,"percentage":{"value":10}}},
                     "corsPolicy":{"allowOrigins":[{"exact":"https://a.example.com"}]},
                     "route":[{"destination":{"host":"a"}}]}]}"#,
    );
    let gw = rule(
        "k",
        0,
        ConfigKind::Gateway,
        "edge",
        "ingress",
        r#"{"selector":{"istio":"ingressgateway"},
            "servers":[{"port":{"number":8080,"name":"http","protocol":"HTTP"},"hosts":["*/z.example.com"]}]}"#,
    );
    let m =
        ModelState::from_events(&[svc("k", 0, "web", "a.web.svc.cluster.local", &[80]), gw, vs]);
    let first = gateway_resources(&m, &ids(), &GenOptions::default());
    let bytes = first.routes.get("http.8080").expect("route").bytes.clone();
    let rc = RouteConfiguration::decode(bytes.clone()).expect("decode");
    let route = &rc.virtual_hosts[0].routes[0];
    assert_eq!(route.typed_per_filter_config.len(), 2, "{route:?}");
    assert_eq!(rc.validate_clusters.map(|b| b.value), Some(false));
    for _ in 0..32 {
        let again = gateway_resources(&m, &ids(), &GenOptions::default());
        assert_eq!(again.routes.get("http.8080").expect("route").bytes, bytes);
    }
}

/// A gateway route with a CORS policy gets the CORS filter in its connection
/// manager (without it Envoy ignores the route's CORS config), ahead of the
/// fault filter and the router.
#[test]
fn cors_and_fault_routes_put_their_filters_in_the_gateway_chain() {
    let m = model(&[rule(
        "k",
        0,
        ConfigKind::VirtualService,
        "web",
        "both",
        r#"{"hosts":["a.example.com"],"gateways":["edge/ingress"],
            "http":[{"fault":{"abort":{"httpStatus":503,"percentage":{"value":10}}},
                     "corsPolicy":{"allowOrigins":[{"exact":"https://a.example.com"}]},
                     "route":[{"destination":{"host":"a"}}]}]}"#,
    )]);
    let r = gateway_resources(&m, &ids(), &GenOptions::default());
    let l = listener(&r, "0.0.0.0_8080");
    let hcm = hcm_of(&l.filter_chains[0]);
    let names: Vec<&str> = hcm.http_filters.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [
            crate::generate::vs_routes::CORS_FILTER,
            crate::generate::lds::FAULT_FILTER,
            "envoy.filters.http.router"
        ]
    );
}

#[test]
fn tcp_servers_forward_through_tcp_routes() {
    let tcp_gw = r#"{"selector": {"istio": "tcpgateway"}, "servers": [
        {"port": {"number": 9000, "name": "tcp", "protocol": "TCP"}, "hosts": ["*/db.example.com"]},
        {"port": {"number": 9000, "name": "again", "protocol": "TCP"}, "hosts": ["*/x.example.com"]},
        {"port": {"number": 9001, "name": "none", "protocol": "TCP"}, "hosts": ["*/nothing.example.com"]}
    ]}"#;
    let m = ModelState::from_events(&[
        svc("k", 0, "web", "a.web.svc.cluster.local", &[80]),
        rule("k", 0, ConfigKind::Gateway, "edge", "tcp", tcp_gw),
        rule(
            "k",
            0,
            ConfigKind::VirtualService,
            "web",
            "db",
            r#"{"hosts":["db.example.com"],"gateways":["edge/tcp"],
                "tcp":[{"match":[{"port":9000}],"route":[{"destination":{"host":"a"}}]}]}"#,
        ),
    ]);
    let r = gateway_resources(&m, &[Arc::from("edge/tcp")], &GenOptions::default());
    let codes: Vec<(&str, &str)> = r
        .problems
        .iter()
        .map(|(_, p)| (p.code, p.path.as_str()))
        .collect();
    assert_eq!(
        codes,
        [("DP2103", "servers[1]"), ("DP2114", "servers[2]")],
        "{:?}",
        r.problems
    );
    let l = listener(&r, "0.0.0.0_9000");
    assert_eq!(l.filter_chains.len(), 1);
    let f = &l.filter_chains[0].filters[0];
    assert_eq!(f.name, "envoy.filters.network.tcp_proxy");
    assert!(
        r.listeners.get("0.0.0.0_9001").is_none(),
        "nothing to serve"
    );
    assert!(r.routes.is_empty(), "a TCP port has no route configuration");
}
