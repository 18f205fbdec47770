use envoy_types::pb::envoy::config::route::v3::{
    header_matcher::HeaderMatchSpecifier,
    route_action::{ClusterSpecifier, hash_policy::PolicySpecifier},
};
use envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;

use super::*;
use deltapilot_model::state::ModelState;
use deltapilot_model::state::mk::{rule, svc};
use deltapilot_proto::ConfigKind;

const NS: &str = "ns";

fn model(vs: &str, extra: &[deltapilot_proto::Event]) -> ModelState {
    let mut events = vec![
        svc("k", 0, NS, "a.ns.svc.cluster.local", &[80]),
        svc("k", 0, NS, "b.ns.svc.cluster.local", &[80, 81]),
        rule("k", 0, ConfigKind::VirtualService, NS, "vs", vs),
    ];
    events.extend_from_slice(extra);
    ModelState::from_events(&events)
}

fn routes(m: &ModelState, flavor: Flavor) -> Vec<Route> {
    routes_for(m, &Hostname::new("a.ns.svc.cluster.local"), 80, flavor)
}

fn cluster(r: &Route) -> Option<&str> {
    match &r.action {
        Some(Action::Route(RouteAction {
            cluster_specifier: Some(ClusterSpecifier::Cluster(c)),
            ..
        })) => Some(c),
        _ => None,
    }
}

#[test]
fn without_a_rule_the_default_route_stays() {
    let m = ModelState::from_events(&[svc("k", 0, NS, "a.ns.svc.cluster.local", &[80])]);
    let r = routes(&m, Flavor::Sidecar);
    assert_eq!(
        r,
        vec![default_route(&Hostname::new("a.ns.svc.cluster.local"), 80)]
    );
}

#[test]
fn one_route_per_match_block_in_order_with_no_catch_all() {
    let m = model(
        r#"{"hosts":["a"],"http":[
          {"match":[{"uri":{"prefix":"/x"},"headers":{"X-User":{"exact":"j"}}},{"uri":{"regex":"/y.*"}}],
           "route":[{"destination":{"host":"b","port":{"number":81}}}]},
          {"match":[{"port":8080}], "route":[{"destination":{"host":"b"}}]},
          {"route":[{"destination":{"host":"a"},"weight":70},{"destination":{"host":"b","port":{"number":80}},"weight":30}]}
        ]}"#,
        &[],
    );
    let r = routes(&m, Flavor::Sidecar);
    assert_eq!(
        r.len(),
        3,
        "two match blocks, the port-8080 block left out, one catch-all"
    );
    assert_eq!(cluster(&r[0]), Some("outbound|81||b.ns.svc.cluster.local"));
    let h = &r[0].r#match.as_ref().expect("match").headers[0];
    assert_eq!(h.name, "x-user");
    assert!(matches!(
        &h.header_match_specifier,
        Some(HeaderMatchSpecifier::StringMatch(s)) if s.match_pattern == Some(MatchPattern::Exact("j".into()))
    ));
    assert!(matches!(
        r[1].r#match.as_ref().and_then(|m| m.path_specifier.clone()),
        Some(PathSpecifier::SafeRegex(_))
    ));
    match &r[2].action {
        Some(Action::Route(RouteAction {
            cluster_specifier: Some(ClusterSpecifier::WeightedClusters(w)),
            retry_policy: Some(retry),
            ..
        })) => {
            let names: Vec<(&str, u32)> = w
                .clusters
                .iter()
                .map(|c| (c.name.as_str(), c.weight.as_ref().map_or(0, |w| w.value)))
                .collect();
            assert_eq!(
                names,
                [
                    ("outbound|80||a.ns.svc.cluster.local", 70),
                    ("outbound|80||b.ns.svc.cluster.local", 30)
                ]
            );
            assert_eq!(
                retry.retry_on,
                action::DEFAULT_RETRY_ON,
                "Istio's default retries"
            );
        }
        other => panic!("weighted route expected, got {other:?}"),
    }
}

#[test]
fn bad_routes_are_dropped_and_reported_while_good_ones_stay() {
    let vs = r#"{"hosts":["a"],"http":[
      {"match":[{"uri":{"regex":"(?=look)"}}],"route":[{"destination":{"host":"a"}}]},
      {"route":[{"destination":{"host":"a"},"weight":50},{"destination":{"host":"b","port":{"number":80}},"weight":40}]},
      {"route":[{"destination":{"host":"nowhere"}}]},
      {"route":[{"destination":{"host":"a","subset":"v9"}}]},
      {"route":[{"destination":{"host":"b"}}]},
      {"timeout":"soon","route":[{"destination":{"host":"a"}}]},
      {"route":[{"destination":{"host":"a"}}]}
    ]}"#;
    let m = model(vs, &[]);
    let r = routes(&m, Flavor::Sidecar);
    assert_eq!(r.len(), 2, "only the last two routes are valid");
    assert_eq!(
        cluster(&r[0]),
        Some("outbound|80||b.ns.svc.cluster.local"),
        "the route port picks b's port"
    );
    let codes: Vec<&str> = route_problems(&m, &Hostname::new("a.ns.svc.cluster.local"), 80, false)
        .iter()
        .map(|p| p.code)
        .collect();
    assert_eq!(codes, ["DP2001", "DP2003", "DP2004", "DP2005", "DP2008"]);
}

#[test]
fn a_known_subset_names_its_cluster() {
    let m = model(
        r#"{"hosts":["a"],"http":[{"route":[{"destination":{"host":"a","subset":"v1"}}]}]}"#,
        &[rule(
            "k",
            0,
            ConfigKind::DestinationRule,
            NS,
            "dr",
            r#"{"host":"a","subsets":[{"name":"v1","labels":{"v":"1"}}]}"#,
        )],
    );
    assert_eq!(
        cluster(&routes(&m, Flavor::Sidecar)[0]),
        Some("outbound|80|v1|a.ns.svc.cluster.local")
    );
}

#[test]
fn actions_translate_and_grpc_gets_only_what_it_supports() {
    let vs = r#"{"hosts":["a"],"http":[
      {"match":[{"uri":{"prefix":"/r"}}],"redirect":{"uri":"/new","authority":"x","redirectCode":302}},
      {"match":[{"uri":{"prefix":"/d"}}],"directResponse":{"status":418,"body":{"string":"tea"}}},
      {"match":[{"queryParams":{"q":{"exact":"1"}}}],"route":[{"destination":{"host":"a"}}]},
      {"route":[{"destination":{"host":"a"}}],"timeout":"1.5s","retries":{"attempts":0},
       "rewrite":{"uri":"/","authority":"up"},"mirror":{"host":"b","port":{"number":80}},
       "mirrorPercentage":{"value":25},"headers":{"request":{"set":{"x-a":"1"},"remove":["x-b"]}}}
    ]}"#;
    let m = model(vs, &[]);
    let side = routes(&m, Flavor::Sidecar);
    assert_eq!(side.len(), 4);
    assert!(
        matches!(&side[0].action, Some(Action::Redirect(r)) if r.host_redirect == "x" && r.response_code == 1)
    );
    assert!(matches!(&side[1].action, Some(Action::DirectResponse(d)) if d.status == 418));
    let Some(Action::Route(ra)) = &side[3].action else {
        panic!("route")
    };
    assert_eq!(
        ra.timeout,
        Some(Duration {
            seconds: 1,
            nanos: 500_000_000
        })
    );
    assert_eq!(ra.retry_policy, None, "attempts 0 turns retries off");
    assert_eq!(ra.prefix_rewrite, "/");
    assert_eq!(
        ra.request_mirror_policies[0].cluster,
        "outbound|80||b.ns.svc.cluster.local"
    );
    assert_eq!(side[3].request_headers_to_remove, ["x-b"]);

    let grpc = routes(&m, Flavor::Grpc);
    assert_eq!(
        grpc.len(),
        1,
        "redirect, direct response and query matches are not for gRPC"
    );
    let Some(Action::Route(ra)) = &grpc[0].action else {
        panic!("route")
    };
    assert_eq!(ra.timeout, None);
    assert!(ra.max_stream_duration.is_some());
    assert!(ra.request_mirror_policies.is_empty() && ra.prefix_rewrite.is_empty());
    assert!(grpc[0].request_headers_to_add.is_empty());
}

#[test]
fn durations_parse_as_istio_writes_them() {
    let d = |s| parse_duration(s).map(|d| (d.seconds, d.nanos));
    assert_eq!(d("5s"), Some((5, 0)));
    assert_eq!(d("250ms"), Some((0, 250_000_000)));
    assert_eq!(d("1m30s"), Some((90, 0)));
    assert_eq!(d("1h"), Some((3600, 0)));
    assert_eq!(d("soon"), None);
    assert_eq!(d("5"), None);
}

fn hash_headers(r: &Route) -> Vec<String> {
    match &r.action {
        Some(Action::Route(ra)) => ra
            .hash_policy
            .iter()
            .map(|h| match &h.policy_specifier {
                Some(PolicySpecifier::Header(h)) => format!("header:{}", h.header_name),
                Some(PolicySpecifier::Cookie(c)) => format!("cookie:{}", c.name),
                other => format!("{other:?}"),
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn consistent_hash_dr(host: &str, key: &str) -> deltapilot_proto::Event {
    rule(
        "k",
        0,
        ConfigKind::DestinationRule,
        NS,
        &format!("dr-{host}"),
        &format!(
            r#"{{"host":"{host}","trafficPolicy":{{"loadBalancer":{{"consistentHash":{key}}}}}}}"#
        ),
    )
}

/// A consistent hash needs the route's hash policy as well as the cluster's
/// ring: the default route of the host and a VirtualService route with one
/// destination both carry it; proxyless gRPC gets header hashing only.
#[test]
fn a_consistent_hash_puts_its_hash_policy_on_the_routes_to_the_host() {
    let m = ModelState::from_events(&[
        svc("k", 0, NS, "a.ns.svc.cluster.local", &[80]),
        consistent_hash_dr("a", r#"{"httpHeaderName":"x-user"}"#),
    ]);
    assert_eq!(
        hash_headers(&routes(&m, Flavor::Sidecar)[0]),
        ["header:x-user"]
    );
    assert_eq!(
        hash_headers(&routes(&m, Flavor::Grpc)[0]),
        ["header:x-user"]
    );

    let m = model(
        r#"{"hosts":["a"],"http":[{"route":[{"destination":{"host":"b","port":{"number":81}}}]}]}"#,
        &[consistent_hash_dr(
            "b",
            r#"{"httpCookie":{"name":"sticky","ttl":"0s"}}"#,
        )],
    );
    assert_eq!(
        hash_headers(&routes(&m, Flavor::Sidecar)[0]),
        ["cookie:sticky"]
    );
    assert!(hash_headers(&routes(&m, Flavor::Grpc)[0]).is_empty());

    // Without a consistent hash, no hash policy.
    let m = model(
        r#"{"hosts":["a"],"http":[{"route":[{"destination":{"host":"b","port":{"number":81}}}]}]}"#,
        &[],
    );
    assert!(hash_headers(&routes(&m, Flavor::Sidecar)[0]).is_empty());
}

#[test]
fn cors_policy_becomes_the_cors_filters_per_route_config() {
    use envoy_types::pb::envoy::extensions::filters::http::cors::v3::CorsPolicy as EnvoyCors;
    use prost::Message;
    let vs = r#"{"hosts":["a"],"http":[{"corsPolicy":{
        "allowOrigins":[{"exact":"https://a.example"},{"prefix":"https://p."},{"regex":"https://r[0-9]+\\.example"}],
        "allowMethods":["GET","POST"],"allowHeaders":["x-a","x-b"],"exposeHeaders":["x-c"],
        "maxAge":"24h","allowCredentials":true,"unmatchedPreflights":"IGNORE"},
        "route":[{"destination":{"host":"b"}}]}]}"#;
    let m = model(vs, &[]);
    let r = routes(&m, Flavor::Sidecar);
    let any = &r[0].typed_per_filter_config[CORS_FILTER];
    let c = EnvoyCors::decode(&any.value[..]).expect("cors policy");
    assert_eq!(c.allow_origin_string_match.len(), 3);
    assert!(matches!(
        &c.allow_origin_string_match[1].match_pattern,
        Some(MatchPattern::Prefix(p)) if p == "https://p."
    ));
    assert_eq!(
        (c.allow_methods.as_str(), c.allow_headers.as_str()),
        ("GET,POST", "x-a,x-b")
    );
    assert_eq!(
        (c.expose_headers.as_str(), c.max_age.as_str()),
        ("x-c", "86400")
    );
    assert_eq!(c.allow_credentials.map(|b| b.value), Some(true));
    assert_eq!(
        c.forward_not_matching_preflights.map(|b| b.value),
        Some(false)
    );
    assert!(m.rules().uses_cors());

    let mut problems = Vec::new();
    let grpc = translate_for(&m, Flavor::Grpc, &mut problems);
    assert!(
        grpc[0].typed_per_filter_config.is_empty(),
        "no CORS for gRPC"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.code == "DP2010" && p.path.ends_with("corsPolicy")),
        "{problems:?}"
    );

    let bad = model(
        r#"{"hosts":["a"],"http":[
          {"corsPolicy":{"allowOrigins":[{"regex":"(?=x)"}]},"route":[{"destination":{"host":"b"}}]},
          {"corsPolicy":{"maxAge":"soon"},"route":[{"destination":{"host":"b"}}]},
          {"route":[{"destination":{"host":"b"}}]}]}"#,
        &[],
    );
    let mut problems = Vec::new();
    let kept = translate_for(&bad, Flavor::Sidecar, &mut problems);
    assert_eq!(kept.len(), 1, "the two bad CORS routes are dropped");
    let codes: Vec<&str> = problems.iter().map(|p| p.code).collect();
    assert_eq!(codes, ["DP2001", "DP2008"], "{problems:?}");
}

fn translate_for(m: &ModelState, flavor: Flavor, problems: &mut Vec<Problem>) -> Vec<Route> {
    let host = Hostname::new("a.ns.svc.cluster.local");
    let vs = m.rules().virtual_service_for(&host).expect("a bound rule");
    translate(m, &vs, 80, flavor, None, problems)
}

#[test]
fn per_match_gateways_pick_where_a_block_applies() {
    let m = model(
        r#"{"hosts":["a"],"gateways":["mesh","edge"],"http":[
          {"match":[{"uri":{"prefix":"/mesh"},"gateways":["mesh"]},{"uri":{"prefix":"/edge"},"gateways":["ns/edge"]}],
           "route":[{"destination":{"host":"b","port":{"number":81}}}]},
          {"match":[{"uri":{"prefix":"/other"},"gateways":["other/edge"]}],"route":[{"destination":{"host":"b"}}]},
          {"route":[{"destination":{"host":"a"}}]}
        ]}"#,
        &[],
    );
    let prefixes = |rs: &[Route]| -> Vec<String> {
        rs.iter()
            .map(
                |r| match r.r#match.as_ref().and_then(|m| m.path_specifier.as_ref()) {
                    Some(PathSpecifier::Prefix(p)) => p.clone(),
                    other => format!("{other:?}"),
                },
            )
            .collect()
    };
    let sidecar = routes(&m, Flavor::Sidecar);
    assert_eq!(
        prefixes(&sidecar),
        ["/mesh", "/"],
        "sidecars: `mesh` blocks and unscoped ones"
    );
    let host = Hostname::new("a.ns.svc.cluster.local");
    let vs = m.rules().virtual_service_for(&host).expect("bound");
    let mut problems = Vec::new();
    let edge = translate(&m, &vs, 80, Flavor::Sidecar, Some("ns/edge"), &mut problems);
    assert_eq!(
        prefixes(&edge),
        ["/edge", "/"],
        "a bare name is the rule's namespace"
    );
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn a_route_with_a_fault_and_a_cors_policy_encodes_the_same_every_time() {
    use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
    use prost::Message;
    let m = model(
        r#"{"hosts":["a"],"http":[{"corsPolicy":{"allowOrigins":[{"exact":"https://a.example"}]},
          "fault":{"abort":{"httpStatus":503,"percentage":{"value":10}}},
          "route":[{"destination":{"host":"b"}}]}]}"#,
        &[],
    );
    let hosts = [
        Hostname::new("a.ns.svc.cluster.local"),
        Hostname::new("b.ns.svc.cluster.local"),
    ]
    .into_iter()
    .collect();
    let first = crate::generate::rds::port_route_config(&m, 80, &hosts);
    // Each encoding builds fresh maps with fresh random hashers.
    for _ in 0..32 {
        assert_eq!(
            crate::generate::rds::port_route_config(&m, 80, &hosts),
            first
        );
    }
    let grpc =
        crate::generate::rds::grpc_route_config(&m, &hosts.iter().next().cloned().expect("a"), 80);
    assert!(!grpc.is_empty());
    let rc = RouteConfiguration::decode(&first[..]).expect("decodes");
    let vh = rc
        .virtual_hosts
        .iter()
        .find(|v| v.name == "a.ns.svc.cluster.local:80")
        .expect("a's virtual host");
    let mut keys: Vec<&String> = vh.routes[0].typed_per_filter_config.keys().collect();
    keys.sort();
    assert_eq!(keys, [CORS_FILTER, crate::generate::lds::FAULT_FILTER]);
    assert_eq!(vh.domains[0], "a.ns.svc.cluster.local");
    // The hand-written encoding holds the route the translation gave.
    assert_eq!(vh.routes[0], routes(&m, Flavor::Sidecar)[0]);
}

#[test]
fn proxyless_grpc_gets_faults_and_its_listener_the_fault_filter() {
    use envoy_types::pb::envoy::config::listener::v3::Listener;
    use envoy_types::pb::envoy::extensions::filters::http::fault::v3::{
        HttpFault, fault_abort::ErrorType,
    };
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
    use prost::Message;
    let fault_of = |r: &Route| {
        let any = &r.typed_per_filter_config[crate::generate::lds::FAULT_FILTER];
        HttpFault::decode(&any.value[..]).expect("fault config")
    };
    let m = model(
        r#"{"hosts":["a"],"http":[
          {"match":[{"uri":{"prefix":"/h"}}],"fault":{"abort":{"httpStatus":503,"percentage":{"value":50}}},"route":[{"destination":{"host":"b"}}]},
          {"match":[{"uri":{"prefix":"/g"}}],"fault":{"abort":{"grpcStatus":"UNAVAILABLE"},"delay":{"fixedDelay":"1s"}},"route":[{"destination":{"host":"b"}}]},
          {"match":[{"uri":{"prefix":"/x"}}],"fault":{"abort":{"grpcStatus":"NOPE"}},"route":[{"destination":{"host":"b"}}]},
          {"route":[{"destination":{"host":"b"}}]}]}"#,
        &[],
    );
    let mut problems = Vec::new();
    let grpc = translate_for(&m, Flavor::Grpc, &mut problems);
    assert_eq!(grpc.len(), 3, "the bad grpcStatus drops its route");
    assert_eq!(
        fault_of(&grpc[0]).abort.and_then(|a| a.error_type),
        Some(ErrorType::HttpStatus(503))
    );
    let g = fault_of(&grpc[1]);
    assert_eq!(
        g.abort.and_then(|a| a.error_type),
        Some(ErrorType::GrpcStatus(14))
    );
    assert!(g.delay.is_some());
    assert!(grpc[2].typed_per_filter_config.is_empty());
    let codes: Vec<&str> = problems.iter().map(|p| p.code).collect();
    assert_eq!(codes, ["DP2010"], "{problems:?}");
    assert!(
        problems[0].path.ends_with("fault.abort.grpcStatus"),
        "{problems:?}"
    );

    let filters = |m: &ModelState, host: &str| {
        let l =
            Listener::decode(&crate::generate::lds::grpc_listener(m, &Hostname::new(host), 80)[..])
                .expect("listener");
        let any = l
            .api_listener
            .and_then(|a| a.api_listener)
            .expect("api listener");
        HttpConnectionManager::decode(&any.value[..])
            .expect("hcm")
            .http_filters
            .into_iter()
            .map(|f| f.name)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        filters(&m, "a.ns.svc.cluster.local"),
        [
            crate::generate::lds::FAULT_FILTER,
            "envoy.filters.http.router"
        ]
    );
    assert_eq!(
        filters(&m, "b.ns.svc.cluster.local"),
        ["envoy.filters.http.router"],
        "a host without faults keeps its listener"
    );
}
