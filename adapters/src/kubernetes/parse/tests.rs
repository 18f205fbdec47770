//! Unit tests of the object parsers: one object in, facts or a reason out.

use serde_json::json;

use super::*;

fn obj(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("a dynamic object")
}

fn svc_facts(v: Value) -> (Result<ServiceFacts, String>, Vec<String>) {
    let p = parse(ResourceKind::Service, &obj(v), "cluster.local", "c1");
    let f = p.facts.map(|f| match f {
        Facts::Service(s) => s,
        other => panic!("not a service: {other:?}"),
    });
    (f, p.skipped)
}

#[test]
fn a_service_maps_hostname_ports_protocols_and_labels() {
    let (facts, skipped) = svc_facts(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "reviews", "namespace": "shop", "labels": {"app": "reviews"}},
        "spec": {"clusterIP": "10.0.0.9", "ports": [
            {"name": "http-web", "port": 80, "targetPort": 8080},
            {"name": "api", "port": 81, "appProtocol": "grpc"},
            {"name": "grpc-web", "port": 82},
            {"name": "h2", "port": 83, "appProtocol": "kubernetes.io/h2c"},
            {"name": "dns", "port": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
            {"name": "sctp", "port": 9, "protocol": "SCTP"},
            {"name": "plain", "port": 84}
        ]}
    }));
    let facts = facts.expect("valid");
    let s = facts.service;
    assert_eq!(s.hostname, "reviews.shop.svc.cluster.local");
    assert_eq!(s.namespace, "shop");
    assert_eq!(s.resolution(), pb::Resolution::StaticEndpoints);
    assert_eq!(s.labels.get("app").map(String::as_str), Some("reviews"));
    let ports: Vec<(&str, u32, pb::Protocol)> = s
        .ports
        .iter()
        .map(|p| (p.name.as_str(), p.number, p.protocol()))
        .collect();
    assert_eq!(
        ports,
        vec![
            ("http-web", 80, pb::Protocol::Http),
            ("api", 81, pb::Protocol::Grpc),
            ("grpc-web", 82, pb::Protocol::Http),
            ("h2", 83, pb::Protocol::Http2),
            ("dns", 53, pb::Protocol::Udp),
            ("plain", 84, pb::Protocol::Unspecified),
        ]
    );
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(skipped[0].contains("53/TCP"), "{skipped:?}");
    assert!(skipped[1].contains("SCTP"), "{skipped:?}");
    assert_eq!(facts.unnamed_port, None);
}

#[test]
fn headless_and_external_name_services_change_resolution_and_unnamed_ports_get_numbers() {
    let (facts, _) = svc_facts(json!({
        "metadata": {"name": "db", "namespace": "a"},
        "spec": {"clusterIP": "None", "ports": [{"port": 5432}]}
    }));
    let facts = facts.expect("valid");
    assert_eq!(facts.service.resolution(), pb::Resolution::Passthrough);
    assert_eq!(facts.service.ports[0].name, "5432");
    assert_eq!(facts.unnamed_port, Some(5432));
    let (facts, _) = svc_facts(json!({
        "metadata": {"name": "ext", "namespace": "a"},
        "spec": {"type": "ExternalName", "externalName": "example.com"}
    }));
    assert_eq!(
        facts.expect("valid").service.resolution(),
        pb::Resolution::Dns
    );
}

#[test]
fn a_service_with_an_invalid_port_or_wrong_types_is_malformed() {
    let (facts, _) = svc_facts(json!({
        "metadata": {"name": "bad", "namespace": "a"},
        "spec": {"ports": [{"name": "http", "port": 70000}]}
    }));
    assert!(facts.expect_err("out of range").contains("70000"));
    let (facts, _) = svc_facts(json!({
        "metadata": {"name": "bad", "namespace": "a"},
        "spec": {"ports": [{"name": "http", "port": "eighty"}]}
    }));
    assert!(facts.expect_err("wrong type").starts_with("spec:"));
    let (facts, _) = svc_facts(json!({
        "metadata": {"name": "bad", "namespace": "a"},
        "spec": {"ports": [{"name": "a", "port": 1}, {"name": "a", "port": 2}]}
    }));
    assert!(facts.expect_err("dup name").contains("twice"));
    let (facts, _) = svc_facts(json!({"metadata": {"name": "nons"}, "spec": {}}));
    assert!(facts.expect_err("no namespace").contains("namespace"));
}

#[test]
fn endpoint_conditions_map_to_health() {
    let c = |ready, serving, terminating| discovery::EndpointConditions {
        ready,
        serving,
        terminating,
    };
    assert_eq!(health(None), pb::Health::Healthy);
    assert_eq!(
        health(Some(&c(Some(true), None, None))),
        pb::Health::Healthy
    );
    assert_eq!(
        health(Some(&c(Some(false), Some(true), Some(true)))),
        pb::Health::Draining
    );
    assert_eq!(
        health(Some(&c(Some(false), Some(false), Some(true)))),
        pb::Health::NotReady
    );
    assert_eq!(
        health(Some(&c(Some(false), None, None))),
        pb::Health::NotReady
    );
    assert_eq!(
        health(Some(&c(Some(false), Some(true), Some(false)))),
        pb::Health::NotReady
    );
}

#[test]
fn a_slice_keeps_ports_and_ip_endpoints_by_pod_and_address() {
    let p = parse(
        ResourceKind::EndpointSlice,
        &obj(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "reviews-abc", "namespace": "shop",
                         "labels": {"kubernetes.io/service-name": "reviews"}},
            "addressType": "IPv4",
            "ports": [{"name": "http-web", "port": 8080, "protocol": "TCP"}, {"name": "all"}],
            "endpoints": [
                {"addresses": ["10.1.0.1"], "conditions": {"ready": true}, "nodeName": "n1",
                 "zone": "z1", "targetRef": {"kind": "Pod", "name": "reviews-1", "namespace": "shop"}},
                {"addresses": ["10.1.0.2"], "conditions": {"ready": false}},
                {"addresses": ["not-an-ip"]}
            ]
        })),
        "cluster.local",
        "c1",
    );
    let Ok(Facts::Slice(s)) = p.facts else {
        panic!("not a slice: {:?}", p.facts)
    };
    assert_eq!(s.service.as_deref(), Some("reviews"));
    assert_eq!(s.ports, vec![("http-web".to_owned(), 8080)]);
    let ids: Vec<(&str, String)> = s
        .endpoints
        .keys()
        .map(|k| (k.pod.as_str(), k.addr.to_string()))
        .collect();
    assert_eq!(
        ids,
        vec![
            ("", "10.1.0.2".to_owned()),
            ("reviews-1", "10.1.0.1".to_owned())
        ]
    );
    let first = s
        .endpoints
        .values()
        .find(|e| e.node.is_some())
        .expect("pod endpoint");
    assert_eq!(first.zone.as_deref(), Some("z1"));
    assert_eq!(p.skipped.len(), 1, "{:?}", p.skipped);
}

#[test]
fn pods_nodes_and_istio_objects_keep_what_endpoints_and_configs_need() {
    let p = parse(
        ResourceKind::Pod,
        &obj(json!({
            "metadata": {"name": "p", "namespace": "a", "labels": {"app": "x"}},
            "spec": {"serviceAccountName": "sa", "nodeName": "n1",
                     "containers": [{"name": "c", "livenessProbe": "garbage"}]}
        })),
        "cluster.local",
        "c1",
    );
    assert_eq!(
        p.facts,
        Ok(Facts::Pod(PodFacts {
            labels: [("app".to_owned(), "x".to_owned())].into(),
            service_account: "sa".into(),
            node: Some("n1".into()),
        })),
        "fields the adapter never reads do not matter"
    );
    let n = parse(
        ResourceKind::Node,
        &obj(json!({"metadata": {"name": "n1", "labels": {
            "topology.kubernetes.io/region": "r", "topology.kubernetes.io/zone": "z"}}})),
        "cluster.local",
        "c1",
    );
    assert_eq!(
        n.facts,
        Ok(Facts::Node(Some(pb::Locality {
            region: "r".into(),
            zone: "z".into(),
            subzone: String::new(),
        })))
    );
    let vs = parse(
        ResourceKind::Istio(pb::ConfigKind::VirtualService),
        &obj(json!({
            "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
            "metadata": {"name": "r", "namespace": "a", "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{...}", "keep": "me"}},
            "spec": {"http": [{"route": [{"destination": {"host": "b"}}]}], "hosts": ["b"]}
        })),
        "cluster.local",
        "c1",
    );
    let Ok(Facts::Config(c, None)) = vs.facts else {
        panic!("not a config: {:?}", vs.facts)
    };
    assert_eq!(c.kind(), pb::ConfigKind::VirtualService);
    assert_eq!(
        c.spec_json,
        r#"{"hosts":["b"],"http":[{"route":[{"destination":{"host":"b"}}]}]}"#
    );
    assert_eq!(c.annotations.len(), 1);
    let bad = parse(
        ResourceKind::Istio(pb::ConfigKind::Gateway),
        &obj(json!({"metadata": {"name": "g", "namespace": "a"}, "spec": [1]})),
        "cluster.local",
        "c1",
    );
    assert!(bad.facts.is_err());
}
