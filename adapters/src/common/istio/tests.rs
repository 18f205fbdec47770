//! ServiceEntry → services and endpoints, WorkloadEntry → joined endpoints,
//! without files, API servers or a log.

use std::collections::BTreeMap;

use deltapilot_proto as pb;
use serde::Deserialize;

use super::*;

#[derive(Deserialize)]
struct TestMeta {
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(bound(deserialize = "S: Deserialize<'de> + Default"))]
struct TestDoc<S> {
    metadata: TestMeta,
    #[serde(default)]
    spec: S,
    #[serde(default)]
    status: Option<serde_yaml::Value>,
}

fn ns(m: &TestMeta) -> &str {
    m.namespace.as_deref().unwrap_or("default")
}

fn mk_map(yaml: &str) -> Result<ServiceEntryFacts, String> {
    let d: TestDoc<ServiceEntrySpec> =
        serde_yaml::from_str(yaml).expect("valid ServiceEntry document");
    map_service_entry(
        ns(&d.metadata),
        &d.metadata.name,
        &d.metadata.labels,
        &d.spec,
        &KeyScheme::file(),
    )
}

fn mk_we(yaml: &str) -> Result<(String, WorkloadFacts), String> {
    let d: TestDoc<WorkloadSpec> =
        serde_yaml::from_str(yaml).expect("valid WorkloadEntry document");
    let status: WorkloadStatus = match d.status {
        Some(v) => WorkloadStatus::deserialize(v).expect("status"),
        None => WorkloadStatus::default(),
    };
    map_workload_entry(
        &d.metadata.labels,
        &d.metadata.annotations,
        &d.spec,
        &status,
    )
    .map(|w| (d.metadata.name, w))
}

const FULL: &str = r#"
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: payments
  namespace: shop
  labels: {team: pay}
spec:
  hosts: [Payments.Shop.Internal, pay.example.com]
  location: MESH_INTERNAL
  resolution: STATIC
  ports:
  - {number: 8080, name: http-api, protocol: HTTP, targetPort: 18080}
  - {number: 9090, name: grpc, protocol: grpc}
  - {number: 5432, name: tcp-db}
  endpoints:
  - address: 10.0.0.1
    ports: {grpc: 19090}
    labels: {version: v1}
    locality: us-east1/us-east1-b/rack1
    weight: 3
    serviceAccount: payments-sa
  - address: "2001:DB8::1"
"#;

#[test]
fn service_entry_maps_hosts_ports_and_resolution() {
    let m = mk_map(FULL).expect("maps");
    let hosts: Vec<&str> = m.services.iter().map(|s| s.hostname.as_str()).collect();
    assert_eq!(
        hosts,
        ["payments.shop.internal", "pay.example.com"],
        "one service per host, lower-cased"
    );
    let s = &m.services[0];
    assert_eq!(s.namespace, "shop");
    assert_eq!(s.resolution, pb::Resolution::StaticEndpoints as i32);
    assert_eq!(s.labels.get("team").map(String::as_str), Some("pay"));
    let ports: Vec<(&str, u32, i32)> = s
        .ports
        .iter()
        .map(|p| (p.name.as_str(), p.number, p.protocol))
        .collect();
    assert_eq!(
        ports,
        [
            ("http-api", 8080, pb::Protocol::Http as i32),
            ("grpc", 9090, pb::Protocol::Grpc as i32),
            // No protocol: Istio's port-name convention decides.
            ("tcp-db", 5432, pb::Protocol::Tcp as i32),
        ]
    );
}

#[test]
fn endpoints_carry_locality_weight_account_and_all_hosts() {
    let m = mk_map(FULL).expect("maps");
    assert_eq!(m.endpoints.len(), 2);
    let (key, ep) = &m.endpoints[0];
    assert_eq!(key, "ep/file/se/shop/payments/10.0.0.1");
    assert_eq!(ep.address, "10.0.0.1");
    let loc = ep.locality.as_ref().expect("locality");
    assert_eq!(
        (loc.region.as_str(), loc.zone.as_str(), loc.subzone.as_str()),
        ("us-east1", "us-east1-b", "rack1")
    );
    assert_eq!(ep.weight, 3);
    assert_eq!(ep.service_account, "payments-sa");
    assert_eq!(ep.labels.get("version").map(String::as_str), Some("v1"));
    // Its own port for grpc; targetPort fills http-api; tcp-db uses the service port.
    let ports: Vec<(&str, u32)> = ep.ports.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(ports, [("grpc", 19090), ("http-api", 18080)]);
    let refs: Vec<&str> = ep.services.iter().map(|r| r.hostname.as_str()).collect();
    assert_eq!(refs, ["payments.shop.internal", "pay.example.com"]);
    assert!(ep.services.iter().all(|r| r.namespace == "shop"));

    let (key6, ep6) = &m.endpoints[1];
    assert_eq!(
        key6, "ep/file/se/shop/payments/2001:db8::1",
        "IPv6 is normalised"
    );
    assert_eq!(
        ep6.weight, 0,
        "absent weight stays 0 (the engine reads it as 1)"
    );
    assert!(ep6.locality.is_none());
}

#[test]
fn defaults_namespace_and_resolution_follow_istio() {
    let m = mk_map("metadata: {name: ext}\nspec: {hosts: [api.example.com], ports: [{number: 443, name: https}]}\n")
        .expect("maps");
    assert_eq!(m.services[0].namespace, "default");
    assert_eq!(
        m.services[0].resolution,
        pb::Resolution::Passthrough as i32,
        "absent resolution is NONE"
    );
    assert_eq!(m.services[0].ports[0].protocol, pb::Protocol::Https as i32);
    let dns = mk_map("metadata: {name: d}\nspec: {hosts: [a.b], resolution: DNS}\n").expect("maps");
    assert_eq!(dns.services[0].resolution, pb::Resolution::Dns as i32);
}

#[test]
fn endpoint_keys_ignore_order_and_split_shared_addresses_by_port() {
    let a = mk_map(
        "metadata: {name: s}\nspec:\n  hosts: [a.b]\n  ports: [{number: 80, name: http}]\n  endpoints:\n  \
         - {address: 10.0.0.2, ports: {http: 8081}}\n  - {address: 10.0.0.1}\n  - {address: 10.0.0.2, ports: {http: 8080}}\n",
    )
    .expect("maps");
    let b = mk_map(
        "metadata: {name: s}\nspec:\n  hosts: [a.b]\n  ports: [{number: 80, name: http}]\n  endpoints:\n  \
         - {address: 10.0.0.1}\n  - {address: 10.0.0.2, ports: {http: 8080}}\n  - {address: 10.0.0.2, ports: {http: 8081}}\n",
    )
    .expect("maps");
    let keys = |m: &ServiceEntryFacts| {
        let mut k: Vec<String> = m.endpoints.iter().map(|(k, _)| k.clone()).collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(&a),
        [
            "ep/file/se/default/s/10.0.0.1",
            "ep/file/se/default/s/10.0.0.2/http=8080",
            "ep/file/se/default/s/10.0.0.2/http=8081",
        ]
    );
    assert_eq!(
        keys(&a),
        keys(&b),
        "order of endpoints does not change keys"
    );

    let dup = mk_map("metadata: {name: s}\nspec: {hosts: [a.b], endpoints: [{address: 10.0.0.1}, {address: 10.0.0.1}]}\n")
        .expect_err("identical endpoints");
    assert!(dup.contains("spec.endpoints[1]"), "{dup}");
}

#[test]
fn non_ip_endpoints_are_skipped_not_fatal() {
    let m = mk_map(
        "metadata: {name: s}\nspec: {hosts: [a.b], resolution: DNS, endpoints: [{address: db.example.com}, {address: 10.1.1.1}]}\n",
    )
    .expect("maps");
    assert_eq!(m.endpoints.len(), 1);
    assert_eq!(m.skipped.len(), 1);
    assert!(m.skipped[0].contains("db.example.com"), "{:?}", m.skipped);
}

#[test]
fn malformed_entries_say_which_field() {
    let cases = [
        ("metadata: {name: s}\nspec: {hosts: []}\n", "spec.hosts"),
        (
            "metadata: {name: s}\nspec: {hosts: ['bad host']}\n",
            "spec.hosts[0]",
        ),
        (
            "metadata: {name: s}\nspec: {hosts: [a.b], resolution: MAGIC}\n",
            "MAGIC",
        ),
        (
            "metadata: {name: s}\nspec: {hosts: [a.b], location: MARS}\n",
            "MARS",
        ),
        (
            "metadata: {name: s}\nspec: {hosts: [a.b], ports: [{number: 80, name: a}, {number: 80, name: b}]}\n",
            "80",
        ),
        (
            "metadata: {name: s}\nspec: {hosts: [a.b], ports: [{number: 80, name: a, protocol: SMTP}]}\n",
            "SMTP",
        ),
        (
            "metadata: {name: s}\nspec: {hosts: [a.b], endpoints: [{address: 10.0.0.1, locality: a/b/c/d}]}\n",
            "locality",
        ),
    ];
    for (yaml, needle) in cases {
        let e = mk_map(yaml).expect_err(yaml);
        assert!(e.contains(needle), "{yaml} -> {e}");
    }
}

#[test]
fn kubernetes_keys_are_scoped_by_cluster_and_never_look_like_slice_keys() {
    let k = KeyScheme::kubernetes("c1");
    let ip: std::net::IpAddr = "10.0.0.1".parse().expect("ip");
    assert_eq!(
        k.inline_key("ns", "e", ip, None),
        "ep/k8s/c1/_se/ns/e/10.0.0.1"
    );
    assert_eq!(k.workload_key("ns", "e", "vm1"), "ep/k8s/c1/_we/ns/e/vm1");
    assert_eq!(
        KeyScheme::file().workload_key("ns", "e", "vm1"),
        "ep/file/we/ns/e/vm1"
    );
}

const SELECTING: &str = r#"
metadata: {name: pay, namespace: shop}
spec:
  hosts: [pay.shop.internal, pay.example.com]
  resolution: STATIC
  ports:
  - {number: 8080, name: http, targetPort: 18080}
  - {number: 9090, name: grpc}
  - {number: 5432, name: tcp-db}
  workloadSelector:
    labels: {app: pay}
"#;

fn selector() -> Selector {
    mk_map(SELECTING).expect("maps").selector.expect("selector")
}

#[test]
fn selected_workload_becomes_an_endpoint_of_every_host() {
    let (name, we) = mk_we(
        r#"
metadata: {name: vm-1, namespace: shop, labels: {app: pay, version: v2}}
spec:
  address: 10.2.0.1
  ports: {grpc: 19090}
  labels: {app: other, tier: back}
  locality: eu/eu-1a
  weight: 4
  network: net-2
  serviceAccount: pay-sa
"#,
    )
    .expect("maps");
    let sel = selector();
    let (eps, problems) = joined_endpoints(
        "shop",
        [("pay", &sel)],
        &[(name.as_str(), &we)],
        &KeyScheme::file(),
    );
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(eps.len(), 1);
    let (key, ep) = &eps[0];
    assert_eq!(key, "ep/file/we/shop/pay/vm-1");
    assert_eq!(ep.address, "10.2.0.1");
    let ports: Vec<(&str, u32)> = ep.ports.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(
        ports,
        [("grpc", 19090), ("http", 18080), ("tcp-db", 5432)],
        "workload port, else targetPort, else the port number"
    );
    assert_eq!(
        ep.labels.get("app").map(String::as_str),
        Some("pay"),
        "metadata labels win"
    );
    assert_eq!(ep.labels.get("tier").map(String::as_str), Some("back"));
    assert_eq!(
        ep.labels
            .get("topology.istio.io/network")
            .map(String::as_str),
        Some("net-2")
    );
    let loc = ep.locality.as_ref().expect("locality");
    assert_eq!((loc.region.as_str(), loc.zone.as_str()), ("eu", "eu-1a"));
    assert_eq!(ep.weight, 4);
    assert_eq!(ep.service_account, "pay-sa");
    assert_eq!(ep.health, pb::Health::Healthy as i32);
    let hosts: Vec<&str> = ep.services.iter().map(|s| s.hostname.as_str()).collect();
    assert_eq!(hosts, ["pay.shop.internal", "pay.example.com"]);
}

#[test]
fn unselected_and_non_ip_workloads_are_not_endpoints() {
    let (other, other_we) = mk_we(
        "metadata: {name: vm-2, namespace: shop, labels: {app: cart}}\nspec: {address: 10.2.0.2}\n",
    )
    .expect("maps");
    let (dns, dns_we) =
        mk_we("metadata: {name: vm-3, namespace: shop, labels: {app: pay}}\nspec: {address: vm3.example.com}\n")
            .expect("maps");
    let sel = selector();
    let (eps, problems) = joined_endpoints(
        "shop",
        [("pay", &sel)],
        &[(other.as_str(), &other_we), (dns.as_str(), &dns_we)],
        &KeyScheme::file(),
    );
    assert!(eps.is_empty(), "{eps:?}");
    assert_eq!(
        problems.len(),
        1,
        "only the selected one is a problem: {problems:?}"
    );
    assert_eq!(problems[0].workload, "vm-3");
    assert!(
        problems[0].reason.contains("vm3.example.com"),
        "{problems:?}"
    );
}

#[test]
fn health_follows_the_health_check_annotation_and_condition() {
    let base = "metadata: {name: w, labels: {app: pay}";
    let plain = mk_we(&format!("{base}}}\nspec: {{address: 10.0.0.1}}\n"))
        .expect("maps")
        .1;
    assert_eq!(
        plain.health,
        pb::Health::Healthy,
        "no health checks: healthy"
    );
    let checked = format!(
        "{base}, annotations: {{proxy.istio.io/health-checks-enabled: 'true'}}}}\nspec: {{address: 10.0.0.1}}\n"
    );
    assert_eq!(
        mk_we(&checked).expect("maps").1.health,
        pb::Health::Unhealthy,
        "checked, no probe yet"
    );
    let ok = format!("{checked}status: {{conditions: [{{type: Healthy, status: 'True'}}]}}\n");
    assert_eq!(mk_we(&ok).expect("maps").1.health, pb::Health::Healthy);
    let bad = format!("{checked}status: {{conditions: [{{type: Healthy, status: 'False'}}]}}\n");
    assert_eq!(mk_we(&bad).expect("maps").1.health, pb::Health::Unhealthy);
}

#[test]
fn selector_and_inline_endpoints_together_are_malformed() {
    let e = mk_map(
        "metadata: {name: s}\nspec: {hosts: [a.b], workloadSelector: {labels: {app: a}}, endpoints: [{address: 10.0.0.1}]}\n",
    )
    .expect_err("both");
    assert!(e.contains("workloadSelector"), "{e}");
    let bad_loc = mk_we("metadata: {name: w}\nspec: {address: 10.0.0.1, locality: a/b/c/d}\n")
        .expect_err("locality");
    assert!(bad_loc.contains("spec.locality"), "{bad_loc}");
}
