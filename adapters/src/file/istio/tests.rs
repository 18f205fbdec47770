//! ServiceEntry → services and endpoints, without files or a log.

use super::*;

fn mk_doc(yaml: &str) -> Doc<ServiceEntrySpec> {
    serde_yaml::from_str(yaml).expect("valid ServiceEntry document")
}

fn mk_map(yaml: &str) -> Result<MappedServiceEntry, String> {
    let d = mk_doc(yaml);
    map_service_entry(&d.metadata, &d.spec)
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
    let keys = |m: &MappedServiceEntry| {
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
fn out_of_range_port_fails_while_reading_with_a_location() {
    let err = serde_yaml::from_str::<Doc<ServiceEntrySpec>>(
        "spec:\n  hosts: [a.b]\n  ports:\n  - number: 70000\n",
    )
    .expect_err("port out of range");
    assert!(err.to_string().contains("70000"), "{err}");
    assert_eq!(err.location().map(|l| l.line()), Some(4), "{err}");
}

#[test]
fn key_segments_reject_slashes_and_upper_case() {
    assert!(check_key_segment("metadata.name", "ok-name.v1").is_ok());
    for bad in ["", "a/b", "Upper", "sp ace"] {
        assert!(check_key_segment("metadata.name", bad).is_err(), "{bad:?}");
    }
}
