//! DestinationRule subsets and traffic policy through the real fold and the
//! incremental generator: subset clusters and their assignments of the
//! labelled endpoints, an endpoint that changes labels moving between subset
//! assignments in an endpoint-only batch (which touches nothing else), subsets
//! removed with their rule, the policy's override order on the clusters, and
//! proxyless `GRPC` ports kept to what gRPC accepts. Each step also equals the
//! from-scratch build byte for byte.

mod xds_support;

use std::net::IpAddr;

use deltapilot_model::state::ModelState;
use deltapilot_proto::ConfigKind;
use deltapilot_xds::generate::{GenOptions, Generator, build_all, hash_policies};
use deltapilot_xds::{ResourceSet, ResourceType};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{LbConfig, LbPolicy};
use envoy_types::pb::envoy::config::core::v3::address;
use envoy_types::pb::envoy::config::endpoint::v3::{ClusterLoadAssignment, lb_endpoint};
use envoy_types::pb::envoy::config::route::v3::route_action::hash_policy::PolicySpecifier;
use xds_support::*;

const HOST: &str = "reviews.ns.svc.cluster.local";

fn addresses(set: &ResourceSet, name: &str) -> Vec<IpAddr> {
    let cla: ClusterLoadAssignment = decode(&set.endpoints, name);
    let mut out: Vec<IpAddr> = cla
        .endpoints
        .iter()
        .flat_map(|l| &l.lb_endpoints)
        .filter_map(|e| match &e.host_identifier {
            Some(lb_endpoint::HostIdentifier::Endpoint(ep)) => {
                match ep.address.as_ref()?.address.as_ref()? {
                    address::Address::SocketAddress(s) => s.address.parse().ok(),
                    _ => None,
                }
            }
            _ => None,
        })
        .collect();
    out.sort();
    out
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

const DR: &str = r#"{"host":"reviews","trafficPolicy":{
  "loadBalancer":{"consistentHash":{"httpHeaderName":"X-User","ringHash":{"minimumRingSize":64}}},
  "outlierDetection":{"consecutive5xxErrors":2,"interval":"1s","baseEjectionTime":"30s","maxEjectionPercent":100},
  "connectionPool":{"tcp":{"maxConnections":10,"connectTimeout":"2s"},"http":{"http2MaxRequests":20}},
  "portLevelSettings":[{"port":{"number":8080},"loadBalancer":{"simple":"LEAST_REQUEST"}}]},
 "subsets":[
  {"name":"v1","labels":{"version":"v1"}},
  {"name":"v2","labels":{"version":"v2"},"trafficPolicy":{"loadBalancer":{"simple":"RANDOM"},
     "tls":{"mode":"SIMPLE","caCertificates":"/etc/ca.pem","sni":"reviews"}}}]}"#;

fn check_rebuild(state: &ModelState, set: &ResourceSet) {
    let (want, errors) = build_all(state, &GenOptions::default());
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(flatten(set), flatten(&want), "incremental equals rebuild");
}

#[test]
fn subsets_hold_their_labelled_endpoints_and_follow_label_changes() {
    let events = vec![
        svc(
            "src",
            0,
            "ns",
            HOST,
            vec![
                port("http", 8080, Protocol::Http),
                port("grpc", 9090, Protocol::Grpc),
            ],
            Resolution::StaticEndpoints,
        ),
        Ep::new("10.0.0.1", "ns", HOST)
            .label("version", "v1")
            .upsert("src", 0, "ep/1"),
        Ep::new("10.0.0.2", "ns", HOST)
            .label("version", "v2")
            .label("app", "reviews")
            .upsert("src", 0, "ep/2"),
        Ep::new("10.0.0.3", "ns", HOST).upsert("src", 0, "ep/3"),
        rule("src", 0, ConfigKind::DestinationRule, "ns", "reviews", DR),
    ];
    let (state, touched) = fold_all(&ModelState::default(), &events);
    let mut generator = Generator::new(GenOptions::default());
    let (set, _, errors) = generator.regenerate(&ResourceSet::default(), &state, &touched);
    assert!(errors.is_empty(), "{errors:?}");
    check_rebuild(&state, &set);

    let all = [ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.3")];
    for p in [8080, 9090] {
        assert_eq!(addresses(&set, &format!("outbound|{p}||{HOST}")), all);
        assert_eq!(
            addresses(&set, &format!("outbound|{p}|v1|{HOST}")),
            [ip("10.0.0.1")]
        );
        assert_eq!(
            addresses(&set, &format!("outbound|{p}|v2|{HOST}")),
            [ip("10.0.0.2")]
        );
    }

    // Override order: top level ring hash, port 8080 least request, subset v2
    // random (and TLS), all ports, for Envoys; proxyless clients' variant of
    // port 9090 keeps only what gRPC takes.
    let c = |name: String| -> Cluster { decode(&set.grpc_clusters, &name) };
    let envoy = |name: String| -> Cluster { decode(&set.clusters, &name) };
    let top = c(format!("outbound|9090||{HOST}"));
    assert_eq!(top.lb_policy, LbPolicy::RingHash as i32);
    let Some(LbConfig::RingHashLbConfig(ring)) = &top.lb_config else {
        panic!("ring hash config: {:?}", top.lb_config);
    };
    assert_eq!(ring.minimum_ring_size.map(|v| v.value), Some(64));
    let od = top.outlier_detection.as_ref().expect("outlier detection");
    assert_eq!(od.consecutive_5xx.map(|v| v.value), Some(2));
    assert_eq!(od.enforcing_consecutive_5xx.map(|v| v.value), Some(100));
    assert_eq!(
        od.enforcing_consecutive_gateway_failure.map(|v| v.value),
        Some(0)
    );
    let t = &top.circuit_breakers.as_ref().expect("breakers").thresholds[0];
    assert_eq!(t.max_requests.map(|v| v.value), Some(20));
    assert_eq!(t.max_connections, None, "gRPC reads only max_requests");
    let http = c(format!("outbound|8080||{HOST}"));
    assert_eq!(http.lb_policy, LbPolicy::LeastRequest as i32);
    let t = &http.circuit_breakers.as_ref().expect("breakers").thresholds[0];
    assert_eq!(t.max_connections.map(|v| v.value), Some(10));
    assert_eq!(t.max_retries.map(|v| v.value), Some(u32::MAX));
    assert_eq!(http.connect_timeout.map(|d| d.seconds), Some(2));
    let v2 = c(format!("outbound|8080|v2|{HOST}"));
    assert_eq!(v2.lb_policy, LbPolicy::Random as i32);
    assert!(
        v2.transport_socket.is_some(),
        "SIMPLE tls on the Envoy port"
    );
    assert_eq!(v2.outlier_detection, http.outlier_detection, "inherited");
    let v2_grpc = c(format!("outbound|9090|v2|{HOST}"));
    assert_eq!(
        v2_grpc.lb_policy,
        LbPolicy::RoundRobin as i32,
        "no RANDOM for gRPC"
    );
    assert!(v2_grpc.transport_socket.is_none(), "no TLS for gRPC");
    // Envoys get the full policy on the GRPC port (TLS above all).
    let v2_envoy = envoy(format!("outbound|9090|v2|{HOST}"));
    assert_eq!(v2_envoy.lb_policy, LbPolicy::Random as i32);
    assert!(
        v2_envoy.transport_socket.is_some(),
        "SIMPLE tls for Envoys on the GRPC port"
    );
    let top_envoy = envoy(format!("outbound|9090||{HOST}"));
    let t = &top_envoy
        .circuit_breakers
        .as_ref()
        .expect("breakers")
        .thresholds[0];
    assert_eq!(t.max_connections.map(|v| v.value), Some(10), "all limits");
    // Where the flavours are equal (the HTTP port) they are one resource.
    let name = format!("outbound|8080|v2|{HOST}");
    assert!(std::sync::Arc::ptr_eq(
        set.clusters.get(&name).expect("envoy"),
        set.grpc_clusters.get(&name).expect("grpc")
    ));

    // The route's hash policy: the header, lower-cased, on ring-hash clusters.
    let dr = state
        .rules()
        .destination_rule_for(&deltapilot_model::Hostname::new(HOST))
        .expect("bound");
    let hp = hash_policies(&dr, 9090, None);
    assert!(
        matches!(&hp[..], [h] if matches!(&h.policy_specifier, Some(PolicySpecifier::Header(x)) if x.header_name == "x-user"))
    );
    assert!(
        hash_policies(&dr, 8080, Some("v2")).is_empty(),
        "v2 is RANDOM"
    );

    // Endpoint 1 becomes v2: an endpoint-only batch moves it, touching only
    // the subset assignments (the host's own holds the same endpoints).
    let batch = [Ep::new("10.0.0.1", "ns", HOST)
        .label("version", "v2")
        .upsert("src", 0, "ep/1")];
    let (state2, touched2) = fold_all(&state, &batch);
    let (next, changes, errors) = generator.regenerate(&set, &state2, &touched2);
    assert!(errors.is_empty(), "{errors:?}");
    check_rebuild(&state2, &next);
    let mut eds: Vec<String> = changes
        .of(ResourceType::Endpoint)
        .upserted
        .iter()
        .map(|n| n.to_string())
        .collect();
    eds.sort();
    let mut want: Vec<String> = [8080, 9090]
        .iter()
        .flat_map(|p| ["v1", "v2"].map(|s| format!("outbound|{p}|{s}|{HOST}")))
        .collect();
    want.sort();
    assert_eq!(eds, want);
    for t in [
        ResourceType::Cluster,
        ResourceType::Listener,
        ResourceType::Route,
    ] {
        assert!(
            changes.of(t).is_empty(),
            "{t:?} untouched by a label change"
        );
    }
    assert!(addresses(&next, &format!("outbound|8080|v1|{HOST}")).is_empty());
    assert_eq!(
        addresses(&next, &format!("outbound|8080|v2|{HOST}")),
        [ip("10.0.0.1"), ip("10.0.0.2")]
    );

    // The rule loses subset v2: its clusters and assignments go.
    let edited = rule(
        "src",
        0,
        ConfigKind::DestinationRule,
        "ns",
        "reviews",
        r#"{"host":"reviews","subsets":[{"name":"v1","labels":{"version":"v1"}}]}"#,
    );
    let (state3, touched3) = fold_all(&state2, &[edited]);
    let (after, changes, errors) = generator.regenerate(&next, &state3, &touched3);
    assert!(errors.is_empty(), "{errors:?}");
    check_rebuild(&state3, &after);
    for t in [ResourceType::Cluster, ResourceType::Endpoint] {
        let mut removed: Vec<String> = changes
            .of(t)
            .removed
            .iter()
            .map(|n| n.to_string())
            .collect();
        removed.sort();
        assert_eq!(
            removed,
            [8080, 9090].map(|p| format!("outbound|{p}|v2|{HOST}")),
            "{t:?}"
        );
    }
    let top: Cluster = decode(&after.clusters, &format!("outbound|8080||{HOST}"));
    assert_eq!(top.lb_policy, LbPolicy::RoundRobin as i32, "policy gone");
    assert!(top.outlier_detection.is_none());

    // Deleting the rule removes the last subset; the host's own cluster stays.
    let del = rule_del("src", 0, ConfigKind::DestinationRule, "ns", "reviews");
    let (state4, touched4) = fold_all(&state3, &[del]);
    let (last, _, _) = generator.regenerate(&after, &state4, &touched4);
    check_rebuild(&state4, &last);
    assert!(last.clusters.keys().all(|n| !n.contains("|v1|")));
    assert!(
        last.clusters
            .get(&format!("outbound|8080||{HOST}"))
            .is_some()
    );
}

/// A rule whose subsets use duplicate names is rejected with DP1040 and
/// produces no subset cluster; problems of the policy carry their path.
#[test]
fn bad_subsets_are_rejected_and_policy_problems_reported() {
    let events = vec![
        simple_svc("ns", HOST, 8080, Protocol::Http),
        rule(
            "src",
            0,
            ConfigKind::DestinationRule,
            "ns",
            "dup",
            r#"{"host":"reviews","subsets":[{"name":"v1"},{"name":"v1"}]}"#,
        ),
        rule(
            "src",
            0,
            ConfigKind::DestinationRule,
            "ns",
            "zz-policy",
            r#"{"host":"other","trafficPolicy":{"loadBalancer":{"simple":"PASSTHROUGH",
               "localityLbSetting":{"enabled":true}},"outlierDetection":{"interval":"soon"}}}"#,
        ),
    ];
    let (state, _) = fold_all(&ModelState::default(), &events);
    let (set, errors) = build_all(&state, &GenOptions::default());
    assert!(errors.is_empty(), "{errors:?}");
    assert!(set.clusters.keys().all(|n| !n.contains("|v1|")));
    let statuses = state.rules().statuses();
    let of = |key_part: &str| {
        statuses
            .iter()
            .find(|(k, _)| k.contains(key_part))
            .map(|(_, s)| s.clone())
            .expect("status")
    };
    let dup = of("dup");
    assert_eq!(dup.as_str(), "rejected");
    assert!(
        dup.problems()
            .iter()
            .any(|p| p.code == "DP1040" && p.path == "subsets[1].name")
    );
    let pol = of("zz-policy");
    let codes: Vec<(&str, &str)> = pol
        .problems()
        .iter()
        .map(|p| (p.code, p.path.as_str()))
        .collect();
    for want in [
        ("DP1101", "trafficPolicy.loadBalancer.simple"),
        ("DP1102", "trafficPolicy.loadBalancer.localityLbSetting"),
        ("DP1104", "trafficPolicy.outlierDetection.interval"),
    ] {
        assert!(codes.contains(&want), "{want:?} in {codes:?}");
    }
}
