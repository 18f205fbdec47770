//! A gateway's resources through the real xDS server to a real Envoy
//! (`DELTAPILOT_ENVOY`, delta ADS): a Gateway and a VirtualService bound to it
//! are folded into a model, `gateway_resources` builds the router's listeners
//! and routes, and a snapshot holding them (with the model's clusters and
//! assignments) is served as the router's view. The stream wiring that picks
//! gateway views for router proxies is not part of this test: the snapshot
//! here is the view. Envoy then publishes the service by path on plain HTTP,
//! answers 404 off the rule's paths and for unknown hosts, redirects to HTTPS
//! with 301 on the redirect server, and terminates HTTPS with a certificate
//! made in the test and served over SDS; it never rejects an update.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
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
use support::{Backend, Envoy, free_port, http_get, wait_for};

const WAIT: Duration = Duration::from_secs(60);
const HOST: &str = "web.example.com";

fn make_cert(dir: &Path) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "2", "-subj", &format!("/CN={HOST}")])
        .args(["-addext", &format!("subjectAltName=DNS:{HOST}")])
        .arg("-keyout")
        .arg(dir.join("tls.key"))
        .arg("-out")
        .arg(dir.join("tls.crt"))
        .output()
        .expect("openssl runs (a test requirement)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn model(backend: u16, ports: (u16, u16, u16)) -> ModelState {
    let host = "web.web.svc.cluster.local";
    let mut endpoint = ep("k", 0, "ep/web-1", "127.0.0.1", &[host]);
    if let Some(Payload::EndpointUpsert(u)) = endpoint.payload.as_mut()
        && let Some(e) = u.endpoint.as_mut()
    {
        e.ports.insert("http-80".into(), u32::from(backend));
        for s in &mut e.services {
            s.namespace = "web".into();
        }
    }
    let gateway = format!(
        r#"{{"selector": {{"istio": "ingressgateway"}}, "servers": [
          {{"port": {{"number": {}, "name": "http", "protocol": "HTTP"}}, "hosts": ["web/{HOST}"]}},
          {{"port": {{"number": {}, "name": "redirect", "protocol": "HTTP"}}, "hosts": ["{HOST}"],
            "tls": {{"httpsRedirect": true}}}},
          {{"port": {{"number": {}, "name": "https", "protocol": "HTTPS"}}, "hosts": ["{HOST}"],
            "tls": {{"mode": "SIMPLE", "credentialName": "web-cert"}}}}
        ]}}"#,
        ports.0, ports.1, ports.2
    );
    let vs = format!(
        r#"{{"hosts": ["{HOST}"], "gateways": ["edge/ingress"],
            "http": [{{"match": [{{"uri": {{"prefix": "/web"}}}}],
                       "route": [{{"destination": {{"host": "web"}}}}]}}]}}"#
    );
    ModelState::from_events(&[
        svc("k", 0, "web", host, &[80]),
        endpoint,
        rule("k", 0, ConfigKind::Gateway, "edge", "ingress", &gateway),
        rule("k", 0, ConfigKind::VirtualService, "web", "web", &vs),
    ])
}

fn curl(port: u16, ca: &Path, path: &str) -> Result<String, String> {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "5", "--cacert"])
        .arg(ca)
        .arg("--resolve")
        .arg(format!("{HOST}:{port}:127.0.0.1"))
        .arg(format!("https://{HOST}:{port}{path}"))
        .output()
        .map_err(|e| format!("curl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_publishes_by_path_redirects_and_terminates_https() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let backend = Backend::start("web");
    let ports = (free_port(), free_port(), free_port());
    let model = model(backend.port, ports);
    let opts = GenOptions {
        outbound_address: "127.0.0.1".into(),
        bind_outbound: true,
        ..Default::default()
    };
    let (all, errors) = build_all(&model, &opts);
    assert!(errors.is_empty(), "{errors:?}");
    let gw = gateway_resources(&model, &[Arc::from("edge/ingress")], &opts);
    assert!(gw.problems.is_empty(), "{:?}", gw.problems);
    assert_eq!(gw.listeners.len(), 3);
    let snapshot = Snapshot {
        seq: 1,
        model,
        resources: ResourceSet {
            clusters: all.clusters,
            endpoints: all.endpoints,
            sidecar_listeners: gw.listeners,
            grpc_listeners: ResourceMap::new(),
            routes: gw.routes,
        },
        ..Default::default()
    };
    let (_writer, reader) = SnapshotWriter::new(snapshot);
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

    let ca = creds.join("web-cert/tls.crt");
    let envoy = tokio::task::spawn_blocking({
        let dir = dir.to_path_buf();
        move || Envoy::start(&dir, "envoy-delta.yaml", xds_port)
    })
    .await
    .expect("envoy");
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
        assert_eq!(envoy.rejected_updates(), Vec::<String>::new());
    });
    checks.await.expect("checks");
    drop(backend);
}
