//! Builders of real k8s-openapi objects (and Istio objects as JSON, which have no
//! k8s-openapi type) for the tests, so every payload is what a real API server
//! serialises.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, ObjectReference, Pod, PodSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

fn meta(ns: Option<&str>, name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: ns.map(str::to_owned),
        labels: (!labels.is_empty()).then(|| {
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>()
        }),
        ..Default::default()
    }
}

/// A ClusterIP Service with named TCP ports.
pub fn service(ns: &str, name: &str, ports: &[(&str, i32)], labels: &[(&str, &str)]) -> Service {
    Service {
        metadata: meta(Some(ns), name, labels),
        spec: Some(ServiceSpec {
            cluster_ip: Some("10.96.0.10".into()),
            ports: Some(
                ports
                    .iter()
                    .map(|(n, p)| ServicePort {
                        name: Some((*n).to_owned()),
                        port: *p,
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    })
                    .collect(),
            ),
            selector: Some([("app".to_owned(), name.to_owned())].into()),
            ..Default::default()
        }),
        status: None,
    }
}

/// One endpoint of a slice: Pod name, IP, node, and conditions.
#[derive(Debug, Clone)]
pub struct Ep {
    pub pod: String,
    pub ip: String,
    pub node: String,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
}

impl Ep {
    /// A ready endpoint of `pod` at `ip` on `node`.
    pub fn ready(pod: &str, ip: &str, node: &str) -> Self {
        Self {
            pod: pod.to_owned(),
            ip: ip.to_owned(),
            node: node.to_owned(),
            ready: true,
            serving: true,
            terminating: false,
        }
    }
}

/// An IPv4 EndpointSlice of Service `svc`, as the EndpointSlice controller writes it.
pub fn slice(ns: &str, name: &str, svc: &str, ports: &[(&str, i32)], eps: &[Ep]) -> EndpointSlice {
    EndpointSlice {
        metadata: meta(
            Some(ns),
            name,
            &[
                ("kubernetes.io/service-name", svc),
                (
                    "endpointslice.kubernetes.io/managed-by",
                    "endpointslice-controller.k8s.io",
                ),
            ],
        ),
        address_type: "IPv4".into(),
        ports: Some(
            ports
                .iter()
                .map(|(n, p)| EndpointPort {
                    name: Some((*n).to_owned()),
                    port: Some(*p),
                    protocol: Some("TCP".into()),
                    app_protocol: None,
                })
                .collect(),
        ),
        endpoints: eps
            .iter()
            .map(|e| Endpoint {
                addresses: vec![e.ip.clone()],
                conditions: Some(EndpointConditions {
                    ready: Some(e.ready),
                    serving: Some(e.serving),
                    terminating: Some(e.terminating),
                }),
                node_name: Some(e.node.clone()),
                target_ref: Some(ObjectReference {
                    kind: Some("Pod".into()),
                    name: Some(e.pod.clone()),
                    namespace: Some(ns.to_owned()),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect(),
    }
}

/// A Pod with labels, a service account and a node.
pub fn pod(ns: &str, name: &str, labels: &[(&str, &str)], sa: &str, node: &str) -> Pod {
    Pod {
        metadata: meta(Some(ns), name, labels),
        spec: Some(PodSpec {
            service_account_name: Some(sa.to_owned()),
            node_name: Some(node.to_owned()),
            containers: vec![k8s_openapi::api::core::v1::Container {
                name: "app".into(),
                image: Some("example/app:1".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

/// A Node in a region and zone.
pub fn node(name: &str, region: &str, zone: &str) -> Node {
    Node {
        metadata: meta(
            None,
            name,
            &[
                ("topology.kubernetes.io/region", region),
                ("topology.kubernetes.io/zone", zone),
            ],
        ),
        spec: None,
        status: None,
    }
}

/// An Istio `networking.istio.io/v1` object.
pub fn istio(kind: &str, ns: &str, name: &str, labels: &[(&str, &str)], spec: Value) -> Value {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": spec,
    })
}
