//! The two cluster variants of a `GRPC` port: Envoys get the whole policy,
//! proxyless clients only what gRPC's xDS client takes.

use deltapilot_model::state::ModelState;
use deltapilot_model::state::mk::{rule, svc};
use deltapilot_proto::ConfigKind;
use deltapilot_proto::event::Payload;
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::LbPolicy;
use prost::Message;

use super::*;

const HOST: &str = "api.ns.svc.cluster.local";

/// A model with `HOST` serving 80 (HTTP) and 90 (GRPC) under `dr`.
fn model(dr: &str) -> ModelState {
    let mut s = svc("a", 0, "ns", HOST, &[80, 90]);
    if let Some(Payload::ServiceUpsert(u)) = &mut s.payload
        && let Some(svc) = &mut u.service
    {
        svc.ports[1].protocol = deltapilot_proto::Protocol::Grpc as i32;
    }
    let r = rule("a", 0, ConfigKind::DestinationRule, "ns", "api", dr);
    ModelState::from_events(&[s, r])
}

/// The (full, proxyless) clusters of `port`, decoded.
fn variants(m: &ModelState, port: u16) -> (Cluster, Option<Cluster>) {
    let h = Hostname::new(HOST);
    let svc = m.service(&h).expect("service");
    let p = svc.port(port).expect("port");
    let dr = rule_for(m, &h).expect("rule bound");
    let (full, grpc) = cluster(&svc, p, None, Some(&dr), &GenOptions::default());
    let decode = |b: Bytes| Cluster::decode(b).expect("decodes");
    (
        decode(full.expect("builds")),
        grpc.map(|g| decode(g.expect("builds"))),
    )
}

#[test]
fn envoy_clusters_on_a_grpc_port_have_upstream_tls_and_proxyless_ones_do_not() {
    let m = model(
        r#"{"host":"api","trafficPolicy":{"loadBalancer":{"consistentHash":{"maglev":{"tableSize":65537},"httpHeaderName":"x-user"}},
            "connectionPool":{"tcp":{"maxConnections":7},"http":{"http2MaxRequests":9}},
            "tls":{"mode":"SIMPLE","caCertificates":"/etc/ca.pem","sni":"api"}}}"#,
    );
    let (envoy, grpc) = variants(&m, 90);
    let grpc = grpc.expect("a GRPC port has a proxyless variant");
    assert!(envoy.transport_socket.is_some(), "Envoys get upstream TLS");
    assert_eq!(envoy.lb_policy, LbPolicy::Maglev as i32);
    let t = &envoy
        .circuit_breakers
        .as_ref()
        .expect("breakers")
        .thresholds[0];
    assert_eq!(t.max_connections.map(|v| v.value), Some(7));
    assert!(grpc.transport_socket.is_none(), "gRPC would NACK it");
    assert_eq!(grpc.lb_policy, LbPolicy::RoundRobin as i32, "no MAGLEV");
    let t = &grpc.circuit_breakers.as_ref().expect("breakers").thresholds[0];
    assert_eq!(t.max_connections, None);
    assert_eq!(t.max_requests.map(|v| v.value), Some(9), "gRPC reads it");
    assert_eq!(envoy.name, grpc.name, "one name, two flavours");

    let (http, none) = variants(&m, 80);
    assert!(none.is_none(), "an HTTP port has one variant");
    assert!(http.transport_socket.is_some());
}

#[test]
fn a_grpc_port_without_what_grpc_rejects_has_equal_variants() {
    let m =
        model(r#"{"host":"api","trafficPolicy":{"outlierDetection":{"consecutive5xxErrors":2}}}"#);
    let (envoy, grpc) = variants(&m, 90);
    assert_eq!(Some(envoy), grpc);
}
