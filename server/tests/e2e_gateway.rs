//! A gateway's resources through the real xDS server to a real Envoy
//! (`DELTAPILOT_ENVOY`, delta ADS): a Gateway and a VirtualService bound to it
//! are folded into a model, `gateway_resources` builds the router's listeners
//! and routes, and a snapshot holding them (with the model's clusters and
//! assignments) is served as the router's view (the fold choosing a router's
//! gateway view is tested by `e2e_gateway_run`). Envoy then publishes the service by path on plain HTTP,
//! answers 404 off the rule's paths and for unknown hosts, redirects to HTTPS
//! with 301 on the redirect server, terminates HTTPS with a certificate
//! made in the test and served over SDS, and forwards a TLS passthrough by SNI
//! to a TLS backend (`openssl s_server`) whose own certificate the client
//! verifies; it never rejects an update.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use deltapilot_model::state::ModelState;
use deltapilot_model::state::mk::{ep, rule, svc};
use deltapilot_proto::ConfigKind;
use deltapilot_proto::event::Payload;
use deltapilot_server::credentials::CredentialStore;
use deltapilot_server::metrics::Metrics;
use deltapilot_server::xds::Limits;
use deltapilot_server::xds::service::{PublishClock, XdsShared, serve};
use deltapilot_xds::generate::{GenOptions, build_all, gateway_resources};
use deltapilot_xds::snapshot::{Snapshot, SnapshotWriter};
use deltapilot_xds::{ResourceMap, ResourceSet};
use support::{Backend, Envoy, curl_tls, free_ports, http_get, tls_backend, wait_for};

const WAIT: Duration = Duration::from_secs(60);
const HOST: &str = "web.example.com";
const PT_HOST: &str = "pt.example.com";

fn make_cert(dir: &Path) {
    make_cert_for(dir, HOST);
}

use deltapilot_testkit::tls::make_cert as make_cert_for;

/// An endpoint of `host` (namespace `web`) at 127.0.0.1:`port` for its
/// service port `svc_port`.
fn endpoint(key: &str, host: &str, svc_port: u16, port: u16) -> deltapilot_proto::Event {
    let mut endpoint = ep("k", 0, key, "127.0.0.1", &[host]);
    if let Some(Payload::EndpointUpsert(u)) = endpoint.payload.as_mut()
        && let Some(e) = u.endpoint.as_mut()
    {
        e.ports.insert(format!("http-{svc_port}"), u32::from(port));
        for s in &mut e.services {
            s.namespace = "web".into();
        }
    }
    endpoint
}

fn model(backend: u16, tls_backend: u16, ports: (u16, u16, u16, u16)) -> ModelState {
    let host = "web.web.svc.cluster.local";
    let tls_host = "tls.web.svc.cluster.local";
    let gateway = format!(
        r#"{{"selector": {{"istio": "ingressgateway"}}, "servers": [
          {{"port": {{"number": {}, "name": "http", "protocol": "HTTP"}}, "hosts": ["web/{HOST}"]}},
          {{"port": {{"number": {}, "name": "redirect", "protocol": "HTTP"}}, "hosts": ["{HOST}"],
            "tls": {{"httpsRedirect": true}}}},
          {{"port": {{"number": {}, "name": "https", "protocol": "HTTPS"}}, "hosts": ["{HOST}"],
            "tls": {{"mode": "SIMPLE", "credentialName": "web-cert"}}}},
          {{"port": {{"number": {}, "name": "tls", "protocol": "TLS"}}, "hosts": ["*.example.com"],
            "tls": {{"mode": "PASSTHROUGH"}}}}
        ]}}"#,
        ports.0, ports.1, ports.2, ports.3
    );
    let vs = format!(
        r#"{{"hosts": ["{HOST}"], "gateways": ["edge/ingress"],
            "http": [{{"match": [{{"uri": {{"prefix": "/web"}}}}],
                       "route": [{{"destination": {{"host": "web"}}}}]}}],
            "tls": [{{"match": [{{"sniHosts": ["{PT_HOST}"]}}],
                      "route": [{{"destination": {{"host": "tls"}}}}]}}]}}"#
    );
    ModelState::from_events(&[
        svc("k", 0, "web", host, &[80]),
        endpoint("ep/web-1", host, 80, backend),
        svc("k", 0, "web", tls_host, &[8443]),
        endpoint("ep/tls-1", tls_host, 8443, tls_backend),
        rule("k", 0, ConfigKind::Gateway, "edge", "ingress", &gateway),
        rule("k", 0, ConfigKind::VirtualService, "web", "web", &vs),
    ])
}

fn curl(port: u16, ca: &Path, path: &str) -> Result<String, String> {
    curl_tls(HOST, port, ca, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_publishes_by_path_redirects_and_terminates_https() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let (writer, reader) = SnapshotWriter::new(Snapshot::default());
    let creds = dir.join("creds");
    make_cert(&creds.join("web-cert"));
    let metrics = Arc::new(Metrics::new());
    let (_drain, drain_rx) = tokio::sync::watch::channel(false);
    let (_ready, ready_rx) = tokio::sync::watch::channel(true);
    let shared = XdsShared::new(
        reader,
        Limits::default(),
        metrics.clone(),
        drain_rx,
        ready_rx,
        Arc::new(PublishClock::default()),
    );
    assert!(shared.set_credentials(CredentialStore::new(Some(creds.clone()), Some(metrics))));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let xds_port = listener.local_addr().expect("addr").port();
    tokio::spawn(serve(listener, shared));
    // Envoy first, so that its admin port is taken before the gateway's are
    // picked (all at once, held together, so they differ).
    let envoy = tokio::task::spawn_blocking({
        let dir = dir.to_path_buf();
        move || Envoy::start(&dir, "envoy-delta.yaml", xds_port)
    })
    .await
    .expect("envoy");
    let picked = free_ports(5);
    let ports = (picked[0], picked[1], picked[2], picked[3]);
    let tls_backend_port = picked[4];

    let backend = Backend::start("web");
    let pt_dir = dir.join("pt-backend");
    let _s_server = tls_backend(&pt_dir, PT_HOST, tls_backend_port);
    let model = model(backend.port, tls_backend_port, ports);
    let opts = GenOptions {
        outbound_address: "127.0.0.1".into(),
        bind_outbound: true,
        ..Default::default()
    };
    let (all, errors) = build_all(&model, &opts);
    assert!(errors.is_empty(), "{errors:?}");
    let gw = gateway_resources(&model, &[Arc::from("edge/ingress")], &opts);
    assert!(gw.problems.is_empty(), "{:?}", gw.problems);
    assert_eq!(gw.listeners.len(), 4);
    writer.publish(Snapshot {
        seq: 1,
        model,
        resources: ResourceSet {
            clusters: all.clusters,
            grpc_clusters: all.grpc_clusters,
            endpoints: all.endpoints,
            sidecar_listeners: gw.listeners,
            grpc_listeners: ResourceMap::new(),
            routes: gw.routes,
            ..Default::default()
        },
        ..Default::default()
    });

    let ca = creds.join("web-cert/tls.crt");
    let checks = tokio::task::spawn_blocking(move || {
        let plain = SocketAddr::from(([127, 0, 0, 1], ports.0));
        wait_for("gateway publishes /web", WAIT, || {
            match http_get(plain, "/web", HOST) {
                Ok((200, b)) if b == "web" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        });
        assert_eq!(
            http_get(plain, "/", HOST).map(|r| r.0),
            Ok(404),
            "off the rule's paths"
        );
        assert_eq!(
            http_get(plain, "/web", "other.example.com").map(|r| r.0),
            Ok(404),
            "a host the gateway does not serve"
        );
        let redirect = SocketAddr::from(([127, 0, 0, 1], ports.1));
        wait_for("redirect to https", WAIT, || {
            match http_get(redirect, "/web", HOST) {
                Ok((301, _)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        });
        wait_for(
            "https terminated with the SDS certificate",
            WAIT,
            || match curl(ports.2, &ca, "/web") {
                Ok(b) if b == "web" => Ok(()),
                other => Err(format!("{other:?}")),
            },
        );
        let pt_ca = pt_dir.join("tls.crt");
        wait_for(
            "tls passthrough by SNI to the backend",
            WAIT,
            || match curl_tls(PT_HOST, ports.3, &pt_ca, "/") {
                Ok(b) if b.contains("s_server") => Ok(()),
                other => Err(format!("{other:?}")),
            },
        );
        assert_eq!(envoy.rejected_updates(), Vec::<String>::new());
    });
    checks.await.expect("checks");
    drop(backend);
}
