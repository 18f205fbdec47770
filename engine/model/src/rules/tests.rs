use std::sync::Arc;

use deltapilot_proto::ConfigKind;

use super::*;
use crate::fold::fold;
use crate::model::{Config, Hostname};
use crate::state::{ModelState, mk};

fn cfg(kind: ConfigKind, ns: &str, name: &str, spec: &str) -> Config {
    Config {
        key: Arc::from(deltapilot_proto::config_key(kind, ns, name).as_str()),
        kind,
        namespace: Arc::from(ns),
        name: Arc::from(name),
        labels: Default::default(),
        annotations: Default::default(),
        spec_json: Arc::from(spec),
    }
}

fn vs(ns: &str, name: &str, spec: &str) -> Config {
    cfg(ConfigKind::VirtualService, ns, name, spec)
}

fn dr(ns: &str, name: &str, spec: &str) -> Config {
    cfg(ConfigKind::DestinationRule, ns, name, spec)
}

fn codes(r: &Rule) -> Vec<(&'static str, &str)> {
    r.problems
        .iter()
        .map(|p| (p.code, p.path.as_str()))
        .collect()
}

fn h(s: &str) -> Hostname {
    Hostname::new(s)
}

const FULL_VS: &str = r#"{
  "hosts": ["reviews", "api.example.com"],
  "http": [{
    "name": "v2",
    "match": [{"uri": {"prefix": "/v2"}, "ignoreUriCase": true,
               "headers": {"x-user": {"exact": "jason"}},
               "withoutHeaders": {"x-skip": {"regex": "y.*"}},
               "queryParams": {"q": {"exact": "1"}},
               "method": {"exact": "GET"}, "authority": {"prefix": "api"},
               "scheme": {"exact": "http"}, "port": 9080}],
    "route": [
      {"destination": {"host": "reviews", "subset": "v2", "port": {"number": 9080}}, "weight": 75,
       "headers": {"request": {"set": {"a": "b"}}, "response": {"remove": ["c"]}}},
      {"destination": {"host": "ratings.other.svc.cluster.local"}, "weight": 25}
    ],
    "rewrite": {"uri": "/", "authority": "x"},
    "timeout": "5s",
    "retries": {"attempts": 3, "perTryTimeout": "1s", "retryOn": "5xx"},
    "fault": {"delay": {"fixedDelay": "1s", "percentage": {"value": 12.5}},
              "abort": {"httpStatus": 503, "percentage": {"value": 1}}},
    "mirror": {"host": "shadow"}, "mirrorPercentage": {"value": 50.0},
    "corsPolicy": {"allowOrigins": [{"exact": "https://a"}], "allowMethods": ["GET"],
                   "maxAge": "1h", "allowCredentials": true},
    "headers": {"request": {"add": {"x": "y"}}}
  }, {
    "redirect": {"uri": "/new", "redirectCode": 302}
  }, {
    "directResponse": {"status": 418, "body": {"string": "teapot"}}
  }]
}"#;

#[test]
fn a_full_virtual_service_parses_without_problems() {
    let r = parse(&vs("default", "reviews", FULL_VS));
    assert_eq!(codes(&r), []);
    assert!(!r.rejected);
    assert_eq!(
        r.hosts,
        [h("api.example.com"), h("reviews.default.svc.cluster.local")]
    );
    assert_eq!(
        r.destinations,
        [
            h("ratings.other.svc.cluster.local"),
            h("reviews.default.svc.cluster.local"),
            h("shadow.default.svc.cluster.local"),
        ]
    );
    let spec = r.virtual_service().expect("typed");
    let route = &spec.http.as_ref().expect("http")[0];
    assert_eq!(route.route.as_ref().expect("route")[0].weight, Some(75));
    let m = &route.matches.as_ref().expect("match")[0];
    assert_eq!(
        m.uri.as_ref().and_then(StringMatch::kind),
        Some(StringMatchKind::Prefix("/v2"))
    );
    assert_eq!(
        route
            .fault
            .as_ref()
            .and_then(|f| f.delay.as_ref())
            .and_then(|d| d.percentage.as_ref()),
        Some(&Percent {
            value: Some(F64(12.5))
        })
    );
}

#[test]
fn unknown_fields_are_reported_with_their_path_not_dropped() {
    let r = parse(&vs(
        "ns",
        "a",
        r#"{"hosts":["a"],"htp":[],"http":[{"route":[{"destination":{"host":"a"},"wieght":5}]}]}"#,
    ));
    assert_eq!(
        codes(&r),
        [("DP1002", "htp"), ("DP1002", "http[0].route[0].wieght")]
    );
    assert_eq!(r.problems[0].severity, Severity::Warning);
    assert!(!r.rejected, "unknown fields alone do not reject");
}

#[test]
fn a_schema_mismatch_rejects_with_the_path() {
    let r = parse(&vs(
        "ns",
        "a",
        r#"{"hosts":["a"],"http":[{"route":[{"weight":"ten"}]}]}"#,
    ));
    assert!(r.rejected);
    assert!(r.hosts.is_empty());
    assert_eq!(codes(&r), [("DP1001", "http[0].route[0].weight")]);
    assert!(matches!(
        r.spec,
        RuleSpec::Invalid(ConfigKind::VirtualService)
    ));
}

#[test]
fn gateways_export_and_unsupported_parts_are_reported() {
    let gw_only = parse(&vs("ns", "a", r#"{"hosts":["a"],"gateways":["ingress"]}"#));
    assert!(gw_only.hosts.is_empty(), "not bound to sidecars");
    assert_eq!(gw_only.gateways, [Arc::<str>::from("ns/ingress")]);
    assert_eq!(codes(&gw_only), []);

    let both = parse(&vs(
        "ns",
        "a",
        r#"{"hosts":["a"],"gateways":["mesh","other/ingress","x/y/z"]}"#,
    ));
    assert_eq!(both.hosts, [h("a.ns.svc.cluster.local")]);
    assert_eq!(both.gateways, [Arc::<str>::from("other/ingress")]);
    assert_eq!(codes(&both), [("DP1013", "gateways[2]")]);

    let dot = parse(&vs(
        "ns",
        "a",
        r#"{"hosts":["a"],"exportTo":[".","b","b"]}"#,
    ));
    assert_eq!(codes(&dot), [], "a VirtualService's exportTo is honoured");
    assert_eq!(dot.hosts.len(), 1);
    let names: Vec<&str> = dot
        .export_to
        .iter()
        .flat_map(|l| l.iter())
        .map(|n| &**n)
        .collect();
    assert_eq!(names, ["b", "ns"], "`.` is its own namespace; sorted, once");
    let star = parse(&vs("ns", "a", r#"{"hosts":["a"],"exportTo":["*","."]}"#));
    assert_eq!(codes(&star), []);
    assert_eq!(star.export_to, None, "`*` anywhere is public");
    let none = parse(&vs("ns", "a", r#"{"hosts":["a"],"exportTo":["~"]}"#));
    assert!(none.hosts.is_empty());
    assert_eq!(codes(&none), [("DP1012", "exportTo")]);
    let dr_dot = parse(&dr("ns", "a", r#"{"host":"a","exportTo":["."]}"#));
    assert_eq!(
        codes(&dr_dot),
        [("DP1011", "exportTo")],
        "a DestinationRule's is honoured for sidecars and gateways; that proxyless clients do not apply it is said"
    );
    assert_eq!(
        dr_dot.export_to.as_deref(),
        Some(&[Arc::<str>::from("ns")][..])
    );
    assert!(is_restricted(&dr_dot));
    let dr_star = parse(&dr("ns", "a", r#"{"host":"a","exportTo":["*"]}"#));
    assert_eq!(codes(&dr_star), []);
    assert!(!is_restricted(&dr_star));
    let to_gw = parse(&vs(
        "ns",
        "a",
        r#"{"hosts":["a"],"gateways":["gw","other/gw"],"exportTo":["."]}"#,
    ));
    assert_eq!(
        to_gw.gateways,
        [Arc::<str>::from("ns/gw")],
        "a gateway in a namespace it is not exported to does not bind it"
    );

    let tcp = parse(&vs(
        "ns",
        "a",
        r#"{"hosts":["a"],"tcp":[{"match":[{"port":5432,"sourceLabels":{"a":"b"}}],"route":[{"destination":{"host":"b"},"headers":{}}]}],"tls":[{}],"http":[{"match":[{"sourceLabels":{"a":"b"}}]}]}"#,
    ));
    assert_eq!(
        codes(&tcp),
        [("DP1020", "tcp[0].route[0].headers")],
        "tcp and tls routes are served (source matches too); what they cannot do is reported"
    );
    assert!(
        tcp.destinations
            .iter()
            .any(|h| h.as_str() == "b.ns.svc.cluster.local"),
        "a tcp route's destination counts as one: {:?}",
        tcp.destinations
    );
    assert!(!tcp.rejected);
}

#[test]
fn missing_or_malformed_hosts_reject() {
    assert_eq!(codes(&parse(&vs("ns", "a", "{}"))), [("DP1003", "hosts")]);
    let bad = parse(&vs("ns", "a", r#"{"hosts":["a.*.com"]}"#));
    assert!(bad.rejected);
    assert_eq!(codes(&bad), [("DP1004", "hosts[0]")]);
    assert_eq!(codes(&parse(&dr("ns", "a", "{}"))), [("DP1003", "host")]);
}

#[test]
fn a_full_destination_rule_parses_and_bad_subsets_reject() {
    let full = r#"{
      "host": "reviews",
      "trafficPolicy": {
        "loadBalancer": {"consistentHash": {"httpCookie": {"name": "u", "path": "/", "ttl": "10s"},
                         "ringHash": {"minimumRingSize": 1024}},
                         "localityLbSetting": {"distribute": [{"from": "r1/*", "to": {"r1/*": 80, "r2/*": 20}}]}},
        "connectionPool": {"tcp": {"maxConnections": 10, "connectTimeout": "1s",
                                   "tcpKeepalive": {"probes": 3, "time": "10s", "interval": "5s"}},
                           "http": {"http1MaxPendingRequests": 1, "http2MaxRequests": 5,
                                    "maxRequestsPerConnection": 2, "maxRetries": 3,
                                    "idleTimeout": "30s", "h2UpgradePolicy": "UPGRADE"}},
        "outlierDetection": {"consecutive5xxErrors": 5, "interval": "10s",
                             "baseEjectionTime": "30s", "maxEjectionPercent": 50, "minHealthPercent": 10},
        "tls": {"mode": "SIMPLE", "caCertificates": "/ca.pem", "sni": "r", "subjectAltNames": ["r"]},
        "portLevelSettings": [{"port": {"number": 9080}, "loadBalancer": {"simple": "LEAST_REQUEST"}}]
      },
      "subsets": [{"name": "v1", "labels": {"version": "v1"}},
                  {"name": "v2", "labels": {"version": "v2"},
                   "trafficPolicy": {"loadBalancer": {"simple": "RANDOM"}}}],
      "exportTo": ["*"]
    }"#;
    let r = parse(&dr("default", "reviews", full));
    // What the translation cannot honour (see `dr_check`): locality needs
    // per-proxy views; on GRPC ports the parts proxyless gRPC rejects, left out
    // of the proxyless clients' clusters only.
    assert_eq!(
        codes(&r),
        [
            ("DP1102", "trafficPolicy.loadBalancer.localityLbSetting"),
            ("DP1120", "subsets[1].trafficPolicy.loadBalancer.simple"),
            ("DP1120", "trafficPolicy.connectionPool"),
            (
                "DP1120",
                "trafficPolicy.portLevelSettings[0].loadBalancer.simple"
            ),
            ("DP1120", "trafficPolicy.tls"),
        ]
    );
    assert!(r.problems.iter().all(|p| p.severity == Severity::Warning));
    let grpc: Vec<&str> = (r.problems.iter())
        .filter(|p| p.code == "DP1120")
        .map(|p| &*p.message)
        .collect();
    assert_eq!(grpc.len(), 4);
    for m in grpc {
        assert!(
            m.contains("left out for proxyless gRPC clients only")
                && m.contains("Envoy sidecars and gateways get it"),
            "{m}"
        );
    }
    assert_eq!(r.hosts, [h("reviews.default.svc.cluster.local")]);
    let d = r.destination_rule().expect("typed");
    assert_eq!(d.subsets.as_ref().map(Vec::len), Some(2));
    let tp = d.traffic_policy.as_ref().expect("policy");
    assert_eq!(
        tp.outlier_detection
            .as_ref()
            .and_then(|o| o.consecutive_5xx_errors),
        Some(5)
    );

    let dup = parse(&dr(
        "ns",
        "a",
        r#"{"host":"a","subsets":[{"name":"v1"},{"name":"v1"},{"labels":{}}]}"#,
    ));
    assert!(dup.rejected);
    assert_eq!(
        codes(&dup),
        [("DP1040", "subsets[1].name"), ("DP1041", "subsets[2].name")]
    );

    let mutual = parse(&dr(
        "ns",
        "a",
        r#"{"host":"a","subsets":[{"name":"v1","trafficPolicy":{"tls":{"mode":"ISTIO_MUTUAL"}}}]}"#,
    ));
    assert_eq!(
        codes(&mutual),
        [("DP1042", "subsets[0].trafficPolicy.tls.mode")]
    );
    assert!(!mutual.rejected);
}

#[test]
fn exact_beats_wildcard_and_the_first_by_name_then_namespace_wins() {
    let mut idx = RuleIndex::default();
    idx.upsert(&vs("ns", "wild", r#"{"hosts":["*.example.com"]}"#));
    idx.upsert(&vs("ns", "deeper", r#"{"hosts":["*.b.example.com"]}"#));
    idx.upsert(&vs("z", "a-first", r#"{"hosts":["x.example.com"]}"#));
    idx.upsert(&vs("a", "b-second", r#"{"hosts":["x.example.com"]}"#));
    let name = |idx: &RuleIndex, host: &str| {
        idx.virtual_service_for(&h(host))
            .map(|b| b.rule.name.to_string())
    };
    assert_eq!(name(&idx, "x.example.com").as_deref(), Some("a-first"));
    assert_eq!(name(&idx, "y.example.com").as_deref(), Some("wild"));
    assert_eq!(name(&idx, "y.b.example.com").as_deref(), Some("deeper"));
    assert_eq!(name(&idx, "example.com"), None);
    let statuses: std::collections::BTreeMap<_, _> = idx.statuses().into_iter().collect();
    let second = &statuses["cfg/virtual_service/a/b-second"];
    assert_eq!(second.problems()[0].code, "DP1030");
    assert_eq!(
        statuses["cfg/virtual_service/z/a-first"],
        RuleStatus::Applied
    );
    assert_eq!(
        idx.rule_keys_for(&h("x.b.example.com")).len(),
        2,
        "both wildcards bind it"
    );

    idx.remove("cfg/virtual_service/z/a-first");
    assert_eq!(name(&idx, "x.example.com").as_deref(), Some("b-second"));
    idx.remove("cfg/virtual_service/a/b-second");
    assert_eq!(name(&idx, "x.example.com").as_deref(), Some("wild"));
}

#[test]
fn the_index_is_a_function_of_the_set_of_rules() {
    let objs = [
        vs(
            "ns",
            "a",
            r#"{"hosts":["a"],"http":[{"route":[{"destination":{"host":"b"}}]}]}"#,
        ),
        vs("ns", "c", r#"{"hosts":["a", "*.x.com"]}"#),
        dr("ns", "d", r#"{"host":"b","subsets":[{"name":"v1"}]}"#),
        vs("ns", "bad", r#"{"hosts":[]}"#),
    ];
    let mut fwd = RuleIndex::default();
    for o in &objs {
        fwd.upsert(o);
    }
    let mut rev = RuleIndex::default();
    for o in objs.iter().rev() {
        rev.upsert(o);
        rev.upsert(o);
    }
    assert_eq!(fwd, rev);
    assert_eq!(
        fwd.hosts_routing_to(&h("b.ns.svc.cluster.local")),
        [h("a.ns.svc.cluster.local")]
    );
    assert!(
        fwd.destination_rule_for(&h("b.ns.svc.cluster.local"))
            .is_some()
    );
    assert!(matches!(
        fwd.status("cfg/virtual_service/ns/bad"),
        Some(RuleStatus::Rejected(_))
    ));
}

/// The fold keeps the index and names the hosts a rule change touches.
#[test]
fn the_fold_touches_rule_hosts_and_rebuild_agrees() {
    use ConfigKind::{DestinationRule as Dr, VirtualService as Vs};
    let st = ModelState::default();
    let out = fold(
        &st,
        &mk::at(
            0,
            vec![
                mk::svc("k", 0, "ns", "a.ns.svc.cluster.local", &[80]),
                mk::svc("k", 0, "ns", "b.ns.svc.cluster.local", &[80]),
                mk::svc("k", 0, "ns", "w1.x.com", &[80]),
                mk::svc("k", 0, "ns", "w2.x.com", &[80]),
            ],
        ),
    );
    assert!(out.touched.rule_hosts.is_empty(), "no rules, no rule hosts");
    let st = out.state;

    let out = fold(
        &st,
        &mk::at(
            10,
            vec![mk::rule(
                "k",
                0,
                Vs,
                "ns",
                "to-b",
                r#"{"hosts":["a"],"http":[{"route":[{"destination":{"host":"b"}}]}]}"#,
            )],
        ),
    );
    assert_eq!(
        out.touched
            .rule_hosts
            .iter()
            .map(Hostname::as_str)
            .collect::<Vec<_>>(),
        ["a.ns.svc.cluster.local"]
    );
    assert!(
        out.state
            .rules()
            .virtual_service_for(&h("a.ns.svc.cluster.local"))
            .is_some()
    );
    let st = out.state;

    // A DestinationRule of b touches b and a (a routes to b).
    let out = fold(
        &st,
        &mk::at(20, vec![mk::rule("k", 0, Dr, "ns", "b", r#"{"host":"b"}"#)]),
    );
    assert_eq!(
        out.touched
            .rule_hosts
            .iter()
            .map(Hostname::as_str)
            .collect::<Vec<_>>(),
        ["a.ns.svc.cluster.local", "b.ns.svc.cluster.local"]
    );
    let st = out.state;

    // A wildcard rule expands against services; a service change of b
    // touches a through its route.
    let out = fold(
        &st,
        &mk::at(
            30,
            vec![
                mk::rule("k", 0, Vs, "ns", "wild", r#"{"hosts":["*.x.com"]}"#),
                mk::svc("k", 0, "ns", "b.ns.svc.cluster.local", &[80, 81]),
            ],
        ),
    );
    assert_eq!(
        out.touched
            .rule_hosts
            .iter()
            .map(Hostname::as_str)
            .collect::<Vec<_>>(),
        ["a.ns.svc.cluster.local", "w1.x.com", "w2.x.com"]
    );
    assert_eq!(
        out.state,
        out.state.rebuild(),
        "rebuild reproduces the index"
    );
    let st = out.state;

    // Deleting touches the old hosts.
    let out = fold(
        &st,
        &mk::at(40, vec![mk::rule_del("k", 0, Vs, "ns", "wild")]),
    );
    assert_eq!(out.touched.rule_hosts.len(), 2);
    assert_eq!(out.state.rules().len(), 2);
    assert_eq!(out.state, out.state.rebuild());
}

#[test]
fn a_restricted_virtual_service_binds_only_in_the_views_that_see_it() {
    let mut idx = RuleIndex::default();
    idx.upsert(&vs(
        "ns",
        "b-public",
        r#"{"hosts":["a.ns.svc.cluster.local"]}"#,
    ));
    idx.upsert(&vs(
        "ns",
        "a-local",
        r#"{"hosts":["a.ns.svc.cluster.local"],"exportTo":[".","x"]}"#,
    ));
    let host = h("a.ns.svc.cluster.local");
    let winner = |i: &RuleIndex| {
        i.virtual_service_for(&host)
            .map(|b| b.rule.name.to_string())
    };
    assert_eq!(winner(&idx).as_deref(), Some("b-public"), "mesh-wide");
    assert!(idx.has_restricted());
    let seen = idx.visible_from("ns");
    assert_eq!(seen, [Arc::<str>::from("cfg/virtual_service/ns/a-local")]);
    assert_eq!(idx.visible_from("x"), seen);
    assert!(idx.visible_from("y").is_empty());
    let ns_view = idx.with_visible(&seen);
    assert_eq!(
        winner(&ns_view).as_deref(),
        Some("a-local"),
        "seen from ns, it takes precedence by name"
    );
    let status = idx.status("cfg/virtual_service/ns/a-local");
    assert!(
        matches!(status, Some(RuleStatus::Applied)),
        "not reported shadowed: {status:?}"
    );
    idx.remove("cfg/virtual_service/ns/a-local");
    assert!(!idx.has_restricted());
    assert!(idx.visible_from("ns").is_empty());
}

#[test]
fn a_restricted_service_entry_hides_its_hosts_from_other_namespaces() {
    let se = |ns: &str, name: &str, spec: &str| cfg(ConfigKind::ServiceEntry, ns, name, spec);
    let mut idx = RuleIndex::default();
    assert_eq!(
        idx.upsert(&se(
            "ns",
            "api",
            r#"{"hosts":["API.example.com"],"exportTo":["."]}"#
        )),
        None,
        "not a rule: nothing to regenerate by host"
    );
    assert!(idx.has_restricted_entries());
    let key: Arc<str> = Arc::from("cfg/service_entry/ns/api");
    assert_eq!(idx.visible_from("ns"), std::slice::from_ref(&key));
    let api = h("api.example.com");
    assert!(idx.hidden_hosts(&[]).contains(&api), "lower-cased, hidden");
    assert!(idx.hidden_hosts(std::slice::from_ref(&key)).is_empty());
    // A public entry for the same host shows it everywhere.
    idx.upsert(&se("other", "api", r#"{"hosts":["api.example.com"]}"#));
    assert!(idx.hidden_hosts(&[]).is_empty());
    idx.remove("cfg/service_entry/other/api");
    assert!(idx.hidden_hosts(&[]).contains(&api));
    // Re-exported everywhere: public again.
    idx.upsert(&se(
        "ns",
        "api",
        r#"{"hosts":["api.example.com"],"exportTo":["*"]}"#,
    ));
    assert!(!idx.has_restricted_entries());
    assert!(idx.visible_from("ns").is_empty());
    idx.upsert(&se(
        "ns",
        "api",
        r#"{"hosts":["api.example.com"],"exportTo":["~"]}"#,
    ));
    assert!(idx.hidden_hosts(&[]).contains(&api), "exported nowhere");
    idx.remove("cfg/service_entry/ns/api");
    assert!(!idx.has_restricted());
}

#[test]
fn source_label_selectors_are_indexed_and_matched() {
    let mut idx = RuleIndex::default();
    idx.upsert(&vs(
        "ns",
        "a",
        r#"{"hosts":["a"],"http":[{"match":[{"sourceLabels":{"app":"x","v":"1"}},{"sourceLabels":{}}],"route":[{"destination":{"host":"a"}}]}]}"#,
    ));
    assert!(idx.has_sources());
    assert_eq!(
        selector_id(&[("v".into(), "1".into()), ("app".into(), "x".into())].into()),
        Arc::from("app=x,v=1")
    );
    let labels = |pairs: &[(&str, &str)]| -> crate::model::Labels {
        pairs
            .iter()
            .map(|(k, v)| (Arc::from(*k), Arc::from(*v)))
            .collect()
    };
    assert_eq!(
        idx.sources_matching(&labels(&[("app", "x"), ("v", "1"), ("z", "q")])),
        [Arc::<str>::from("app=x,v=1")]
    );
    assert!(idx.sources_matching(&labels(&[("app", "x")])).is_empty());
    idx.remove("cfg/virtual_service/ns/a");
    assert!(!idx.has_sources());
}

#[test]
fn a_restricted_destination_rule_applies_only_in_the_views_that_see_it() {
    let mut idx = RuleIndex::default();
    idx.upsert(&dr(
        "other",
        "a-public",
        r#"{"host":"a.ns.svc.cluster.local"}"#,
    ));
    idx.upsert(&dr(
        "ns",
        "z-local",
        r#"{"host":"a.ns.svc.cluster.local","exportTo":[".","x","y"]}"#,
    ));
    let host = h("a.ns.svc.cluster.local");
    let winner = |i: &RuleIndex| {
        i.destination_rule_entry_for(&host)
            .map(|r| r.key.to_string())
    };
    assert_eq!(
        winner(&idx).as_deref(),
        Some("cfg/destination_rule/other/a-public"),
        "mesh-wide (gateways, proxyless clients, other namespaces) the public one"
    );
    let key: Arc<str> = Arc::from("cfg/destination_rule/ns/z-local");
    let own: Arc<str> = Arc::from("cfg/destination_rule/ns/z-local#own");
    assert_eq!(idx.visible_from("ns"), [key.clone(), own.clone()]);
    assert_eq!(idx.visible_from("x"), std::slice::from_ref(&key));
    assert_eq!(
        idx.visible_from("x"),
        idx.visible_from("y"),
        "x and y share"
    );
    assert!(idx.visible_from("other").is_empty());
    for ns in ["ns", "x"] {
        let view = idx.with_visible(&idx.visible_from(ns));
        assert!(view.has_visible_destination_rules());
        assert_eq!(
            winner(&view).as_deref(),
            Some(&*key),
            "seen from {ns}, the restricted one goes ahead of the public one, though its name sorts later"
        );
    }
    // Two restricted ones seen from ns: ns's own goes first, whatever the names.
    idx.upsert(&dr(
        "x",
        "a-shared",
        r#"{"host":"a.ns.svc.cluster.local","exportTo":["ns","x"]}"#,
    ));
    let from_ns = idx.with_visible(&idx.visible_from("ns"));
    assert_eq!(winner(&from_ns).as_deref(), Some(&*key), "ns's own");
    let from_x = idx.with_visible(&idx.visible_from("x"));
    assert_eq!(
        winner(&from_x).as_deref(),
        Some("cfg/destination_rule/x/a-shared"),
        "x's own"
    );
    assert!(
        !idx.has_visible_destination_rules(),
        "the index itself binds none"
    );
    idx.remove("cfg/destination_rule/x/a-shared");
    idx.remove(&key);
    assert!(!idx.has_restricted());
    assert!(idx.visible_from("ns").is_empty());
}

#[test]
fn mesh_export_defaults_apply_to_objects_that_set_none() {
    let defaults = ExportDefaults {
        service: vec![".".into()],
        virtual_service: vec!["ns".into(), "other".into()],
        destination_rule: vec!["~".into()],
    };
    let given = parse_with(
        &vs("ns", "a", r#"{"hosts":["a"],"exportTo":["*"]}"#),
        &defaults,
    );
    assert_eq!(given.export_to, None, "a given `exportTo` wins");
    let empty = parse_with(
        &vs("ns", "a", r#"{"hosts":["a"],"exportTo":[]}"#),
        &defaults,
    );
    let absent = parse_with(&vs("ns", "a", r#"{"hosts":["a"]}"#), &defaults);
    for r in [&empty, &absent] {
        let want: Vec<Arc<str>> = vec![Arc::from("ns"), Arc::from("other")];
        assert_eq!(r.export_to.as_deref(), Some(&want[..]), "empty or absent");
    }
    let d = parse_with(&dr("ns", "a", r#"{"host":"a"}"#), &defaults);
    assert_eq!(codes(&d), [("DP1012", "exportTo")], "defaulted to none");
    assert_eq!(parse(&dr("ns", "a", r#"{"host":"a"}"#)).export_to, None);

    let se = cfg(
        ConfigKind::ServiceEntry,
        "ns",
        "api",
        r#"{"hosts":["api.example.com"]}"#,
    );
    let mut idx = RuleIndex::with_defaults(defaults.clone());
    idx.upsert(&se);
    assert!(idx.hidden_hosts(&[]).contains(&h("api.example.com")));
    assert_eq!(idx.export_defaults(), &defaults);
    let mut public = RuleIndex::default();
    public.upsert(&se);
    assert!(!public.has_restricted_entries());
}
