//! Unit tests of the store: joins, incremental marking and relists.

use kube::core::DynamicObject;
use serde_json::{Value, json};

use super::*;
use crate::kubernetes::parse::parse;

fn parsed(kind: ResourceKind, v: Value) -> Parsed {
    let obj: DynamicObject = serde_json::from_value(v).expect("dynamic object");
    parse(kind, &obj, "cluster.local", "c1")
}

fn mk_svc(name: &str, port_name: &str) -> Parsed {
    parsed(
        ResourceKind::Service,
        json!({"metadata": {"name": name, "namespace": "shop"},
               "spec": {"ports": [{"name": port_name, "port": 80}]}}),
    )
}

fn mk_slice(name: &str, svc: &str, port_name: &str, eps: &[(&str, &str, bool)]) -> Parsed {
    let endpoints: Vec<Value> = eps
        .iter()
        .map(|(pod, ip, ready)| {
            json!({"addresses": [ip], "conditions": {"ready": ready}, "nodeName": "n1",
                   "targetRef": {"kind": "Pod", "name": pod, "namespace": "shop"}})
        })
        .collect();
    parsed(
        ResourceKind::EndpointSlice,
        json!({"metadata": {"name": name, "namespace": "shop",
                            "labels": {"kubernetes.io/service-name": svc}},
               "addressType": "IPv4",
               "ports": [{"name": port_name, "port": 8080}],
               "endpoints": endpoints}),
    )
}

fn mk_pod(name: &str, version: &str) -> Parsed {
    parsed(
        ResourceKind::Pod,
        json!({"metadata": {"name": name, "namespace": "shop", "labels": {"version": version}},
               "spec": {"serviceAccountName": "shop-sa", "nodeName": "n1"}}),
    )
}

fn mk_node(zone: &str) -> Parsed {
    parsed(
        ResourceKind::Node,
        json!({"metadata": {"name": "n1", "labels": {
            "topology.kubernetes.io/region": "eu", "topology.kubernetes.io/zone": zone}}}),
    )
}

fn endpoint<'a>(store: &'a Store, key: &str) -> &'a pb::Endpoint {
    match store.desired().get(key).map(Arc::as_ref) {
        Some(Entity::Endpoint(e)) => e,
        other => panic!("{key}: {other:?}"),
    }
}

fn changed(store: &mut Store) -> Vec<String> {
    store.refresh();
    let mut c = store.take_changed();
    c.sort();
    c
}

const EP1: &str = "ep/k8s/c1/shop/reviews/r-1/10.1.0.1";
const EP1_RATINGS: &str = "ep/k8s/c1/shop/ratings/r-1/10.1.0.1";

fn loaded() -> Store {
    let mut s = Store::new("c1".into(), "cluster.local".into());
    s.apply(ResourceKind::Node, mk_node("eu-1a"));
    s.apply(ResourceKind::Pod, mk_pod("r-1", "v1"));
    s.apply(ResourceKind::Service, mk_svc("reviews", "http"));
    s.apply(
        ResourceKind::EndpointSlice,
        mk_slice("reviews-a", "reviews", "http", &[("r-1", "10.1.0.1", true)]),
    );
    s.refresh();
    s.take_changed();
    s
}

#[test]
fn an_endpoint_joins_its_slice_service_pod_and_node() {
    let s = loaded();
    assert!(
        s.desired()
            .contains_key("svc/shop/reviews.shop.svc.cluster.local")
    );
    let e = endpoint(&s, EP1);
    assert_eq!(e.address, "10.1.0.1");
    assert_eq!(e.ports.get("http"), Some(&8080));
    assert_eq!(e.labels.get("version").map(String::as_str), Some("v1"));
    assert_eq!(e.service_account, "shop-sa");
    assert_eq!(e.health(), pb::Health::Healthy);
    let l = e.locality.as_ref().expect("locality");
    assert_eq!((l.region.as_str(), l.zone.as_str()), ("eu", "eu-1a"));
    assert_eq!(e.services.len(), 1);
    assert_eq!(e.services[0].hostname, "reviews.shop.svc.cluster.local");
}

#[test]
fn a_change_marks_only_the_entities_it_affects() {
    let mut s = loaded();
    s.apply(ResourceKind::Pod, mk_pod("r-1", "v2"));
    assert_eq!(changed(&mut s), vec![EP1.to_owned()]);
    assert_eq!(
        endpoint(&s, EP1).labels.get("version").map(String::as_str),
        Some("v2")
    );
    s.apply(
        ResourceKind::EndpointSlice,
        mk_slice(
            "reviews-a",
            "reviews",
            "http",
            &[("r-1", "10.1.0.1", false)],
        ),
    );
    assert_eq!(changed(&mut s), vec![EP1.to_owned()]);
    assert_eq!(endpoint(&s, EP1).health(), pb::Health::NotReady);
    s.apply(ResourceKind::Node, mk_node("eu-1b"));
    assert_eq!(changed(&mut s), vec![EP1.to_owned()]);
    // The same facts again change nothing.
    s.apply(ResourceKind::Node, mk_node("eu-1b"));
    s.apply(ResourceKind::Pod, mk_pod("r-1", "v2"));
    assert!(changed(&mut s).is_empty());
}

#[test]
fn a_pod_in_two_services_is_one_endpoint_per_service_each_with_its_own_ports() {
    let mut s = loaded();
    // The same port name as `reviews` uses, with another target port.
    s.apply(ResourceKind::Service, mk_svc("ratings", "http"));
    s.apply(
        ResourceKind::EndpointSlice,
        parsed(
            ResourceKind::EndpointSlice,
            json!({"metadata": {"name": "ratings-a", "namespace": "shop",
                                "labels": {"kubernetes.io/service-name": "ratings"}},
                   "addressType": "IPv4", "ports": [{"name": "http", "port": 9090}],
                   "endpoints": [{"addresses": ["10.1.0.1"], "nodeName": "n1",
                                  "targetRef": {"kind": "Pod", "name": "r-1"}}]}),
        ),
    );
    assert_eq!(
        changed(&mut s),
        vec![
            EP1_RATINGS.to_owned(),
            "svc/shop/ratings.shop.svc.cluster.local".to_owned()
        ]
    );
    assert_eq!(endpoint(&s, EP1).ports.get("http"), Some(&8080));
    assert_eq!(endpoint(&s, EP1_RATINGS).ports.get("http"), Some(&9090));
    assert_eq!(
        endpoint(&s, EP1_RATINGS).services[0].hostname,
        "ratings.shop.svc.cluster.local"
    );
    // A Pod change reaches both; deleting one Service removes only its entity.
    s.apply(ResourceKind::Pod, mk_pod("r-1", "v9"));
    assert_eq!(
        changed(&mut s),
        vec![EP1_RATINGS.to_owned(), EP1.to_owned()]
    );
    s.delete(
        ResourceKind::Service,
        &ObjId {
            ns: "shop".into(),
            name: "ratings".into(),
        },
    );
    assert_eq!(
        changed(&mut s),
        vec![
            EP1_RATINGS.to_owned(),
            "svc/shop/ratings.shop.svc.cluster.local".to_owned()
        ]
    );
    assert!(!s.desired().contains_key(EP1_RATINGS));
    assert!(s.desired().contains_key(EP1));
}

#[test]
fn relists_change_only_what_differs_and_malformed_objects_keep_their_last_state() {
    let mut s = loaded();
    let applied = s.relist(ResourceKind::Service, None, vec![mk_svc("reviews", "http")]);
    assert_eq!(applied, Applied::default());
    assert!(
        changed(&mut s).is_empty(),
        "an unchanged relist changes nothing"
    );

    let bad = parsed(
        ResourceKind::Service,
        json!({"metadata": {"name": "reviews", "namespace": "shop"},
               "spec": {"ports": [{"name": "http", "port": 0}]}}),
    );
    assert_eq!(s.apply(ResourceKind::Service, bad).malformed, 1);
    assert!(changed(&mut s).is_empty(), "the last good service stays");
    assert_eq!(s.problems(10).len(), 1);

    let applied = s.relist(ResourceKind::Service, Some("shop"), Vec::new());
    assert_eq!(applied.malformed, 0);
    assert_eq!(
        changed(&mut s),
        vec![
            EP1.to_owned(),
            "svc/shop/reviews.shop.svc.cluster.local".to_owned()
        ],
        "a service missing from the relist is deleted, with its endpoints"
    );
    assert!(s.problems(10).is_empty());
    assert_eq!(s.count(ResourceKind::Service, None), 0);
    assert_eq!(s.count(ResourceKind::EndpointSlice, Some("shop")), 1);
}

#[test]
fn unnamed_ports_are_named_by_number_and_endpoints_without_pods_are_keyed_by_address() {
    let mut s = Store::new("c1".into(), "cluster.local".into());
    s.apply(
        ResourceKind::Service,
        parsed(
            ResourceKind::Service,
            json!({"metadata": {"name": "db", "namespace": "shop"},
                   "spec": {"ports": [{"port": 5432}]}}),
        ),
    );
    s.apply(
        ResourceKind::EndpointSlice,
        parsed(
            ResourceKind::EndpointSlice,
            json!({"metadata": {"name": "db-x", "namespace": "shop",
                                "labels": {"kubernetes.io/service-name": "db"}},
                   "addressType": "IPv4", "ports": [{"port": 5433}],
                   "endpoints": [{"addresses": ["192.168.0.5"], "zone": "z9"}]}),
        ),
    );
    s.refresh();
    let e = endpoint(&s, "ep/k8s/c1/shop/db/-/192.168.0.5");
    assert_eq!(e.ports.get("5432"), Some(&5433));
    assert_eq!(e.locality.as_ref().map(|l| l.zone.as_str()), Some("z9"));
    assert!(e.labels.is_empty());
}

fn mk_entry(name: &str, host: &str, selector: Option<&str>) -> Parsed {
    let mut spec = json!({"hosts": [host], "resolution": "STATIC",
                          "ports": [{"number": 7000, "name": "tcp"}]});
    if let Some(app) = selector {
        spec["workloadSelector"] = json!({"labels": {"app": app}});
    }
    parsed(
        ResourceKind::Istio(pb::ConfigKind::ServiceEntry),
        json!({"metadata": {"name": name, "namespace": "shop"}, "spec": spec}),
    )
}

fn mk_workload(name: &str, app: &str) -> Parsed {
    parsed(
        ResourceKind::Istio(pb::ConfigKind::WorkloadEntry),
        json!({"metadata": {"name": name, "namespace": "shop", "labels": {"app": app}},
               "spec": {"address": "10.7.0.1"}}),
    )
}

#[test]
fn a_kubernetes_service_shadows_a_service_entry_host_in_either_order() {
    const HOST_KEY: &str = "svc/shop/reviews.shop.svc.cluster.local";
    let service_port = |s: &Store| match s.desired().get(HOST_KEY).map(Arc::as_ref) {
        Some(Entity::Service(svc)) => svc.ports[0].number,
        other => panic!("{other:?}"),
    };
    let se = ResourceKind::Istio(pb::ConfigKind::ServiceEntry);
    let mut s = loaded();
    s.apply(se, mk_entry("e", "reviews.shop.svc.cluster.local", None));
    s.refresh();
    assert_eq!(service_port(&s), 80, "the Service keeps its host");
    s.delete(
        ResourceKind::Service,
        &ObjId {
            ns: "shop".into(),
            name: "reviews".into(),
        },
    );
    s.refresh();
    assert_eq!(
        service_port(&s),
        7000,
        "the entry's host once the Service is gone"
    );
    s.apply(ResourceKind::Service, mk_svc("reviews", "http"));
    s.refresh();
    assert_eq!(
        service_port(&s),
        80,
        "and the Service's again when it is back"
    );
    s.delete(
        se,
        &ObjId {
            ns: "shop".into(),
            name: "e".into(),
        },
    );
    s.refresh();
    assert_eq!(
        service_port(&s),
        80,
        "deleting the entry leaves the Service alone"
    );
}

#[test]
fn workload_entries_join_entries_of_their_namespace_incrementally() {
    const WE: &str = "ep/k8s/c1/_we/shop/e/w";
    let mut s = loaded();
    s.apply(
        ResourceKind::Istio(pb::ConfigKind::ServiceEntry),
        mk_entry("e", "e.example", Some("a")),
    );
    s.apply(
        ResourceKind::Istio(pb::ConfigKind::WorkloadEntry),
        mk_workload("w", "a"),
    );
    let c = changed(&mut s);
    assert!(c.contains(&WE.to_owned()), "{c:?}");
    s.apply(
        ResourceKind::Istio(pb::ConfigKind::WorkloadEntry),
        mk_workload("w", "b"),
    );
    assert_eq!(
        changed(&mut s),
        vec!["cfg/workload_entry/shop/w".to_owned(), WE.to_owned()]
    );
    assert!(!s.desired().contains_key(WE));
    // A relist of the same objects changes nothing.
    s.relist(
        ResourceKind::Istio(pb::ConfigKind::WorkloadEntry),
        None,
        vec![mk_workload("w", "b")],
    );
    assert!(changed(&mut s).is_empty());
}
