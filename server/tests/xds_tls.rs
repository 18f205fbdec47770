//! xDS over mutual TLS, end to end: `deltapilot run --xds-tls-*` with
//! certificates made by openssl in the test, a real Envoy with a client
//! certificate on its xds cluster, Python grpcio with TLS channel credentials in
//! its xDS bootstrap, and raw TLS and gRPC clients that are refused: without a
//! certificate, with one from another CA, outside `--xds-tls-allow`, or claiming
//! a node of another namespace. The server certificate is rotated by a rewrite
//! in place and by Kubernetes' `..data` symlink swap while Envoy stays connected.

mod support;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use deltapilot_testkit::tls::{Ca, make_ca, make_signed};
use support::{
    Backend, Deltapilot, Envoy, Proc, free_port, http_get, metric, tool, wait_for,
    write_service_entry, xds_cluster_yaml,
};

const WAIT: Duration = Duration::from_secs(60);
const TD: &str = "spiffe://cluster.local/ns/test/sa";

/// The test's PKI: one CA for servers and clients, another one nobody trusts,
/// the server's certificate as a mounted Kubernetes Secret, and client
/// certificates in `clients/NAME/`.
struct Pki {
    ca: Ca,
    other: Ca,
    /// The Secret volume: `tls.crt` → `..data/tls.crt`, `..data` → `..vN`.
    secret: PathBuf,
    clients: PathBuf,
}

impl Pki {
    fn new(root: &Path) -> Pki {
        let pki = Pki {
            ca: make_ca(&root.join("ca"), "mesh-ca"),
            other: make_ca(&root.join("other-ca"), "someone-else"),
            secret: root.join("secret"),
            clients: root.join("clients"),
        };
        pki.publish_server_cert(1);
        for link in ["tls.crt", "tls.key"] {
            symlink(Path::new("..data").join(link), pki.secret.join(link)).expect("symlink");
        }
        pki.client(
            "web",
            &pki.ca,
            &[&format!("URI:{TD}/web"), "DNS:envoy.test.local"],
        );
        pki.client("greeter", &pki.ca, &[&format!("URI:{TD}/greeter")]);
        pki.client("stranger", &pki.ca, &[&format!("URI:{TD}/stranger")]);
        pki.client("foreign", &pki.other, &[&format!("URI:{TD}/web")]);
        pki
    }

    /// The server certificate with serial `serial` in a new `..vN` directory,
    /// then `..data` swapped to it atomically, as the kubelet does.
    fn publish_server_cert(&self, serial: u64) {
        let version = format!("..v{serial}");
        make_signed(
            &self.ca,
            &self.secret.join(&version),
            "deltapilot",
            &["DNS:localhost", "IP:127.0.0.1"],
            serial,
        );
        let tmp = self.secret.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        symlink(&version, &tmp).expect("symlink ..data_tmp");
        std::fs::rename(&tmp, self.secret.join("..data")).expect("swap ..data");
    }

    /// Rewrites the served certificate and key in place with serial `serial`.
    fn rewrite_server_cert(&self, serial: u64) {
        let current = std::fs::read_link(self.secret.join("..data")).expect("..data");
        make_signed(
            &self.ca,
            &self.secret.join(current),
            "deltapilot",
            &["DNS:localhost", "IP:127.0.0.1"],
            serial,
        );
    }

    fn client(&self, name: &str, ca: &Ca, sans: &[&str]) {
        make_signed(ca, &self.clients.join(name), name, sans, 100);
    }

    fn cert(&self, name: &str) -> PathBuf {
        self.clients.join(name).join("tls.crt")
    }

    fn key(&self, name: &str) -> PathBuf {
        self.clients.join(name).join("tls.key")
    }

    /// The `deltapilot run` flags for mutual TLS allowing `web` and `greeter`.
    fn flags(&self) -> Vec<String> {
        let p = |p: PathBuf| p.display().to_string();
        vec![
            "--xds-tls-cert".into(),
            p(self.secret.join("tls.crt")),
            "--xds-tls-key".into(),
            p(self.secret.join("tls.key")),
            "--xds-tls-client-ca".into(),
            p(self.ca.cert.clone()),
            "--xds-tls-allow".into(),
            format!("{TD}/web"),
            "--xds-tls-allow".into(),
            format!("{TD}/greeter"),
        ]
    }
}

fn start(tmp: &Path, pki: &Pki, watch: &Path) -> Deltapilot {
    start_with(tmp, pki, watch, &[])
}

fn start_with(tmp: &Path, pki: &Pki, watch: &Path, extra: &[&str]) -> Deltapilot {
    let flags = pki.flags();
    let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    flags.extend_from_slice(extra);
    Deltapilot::start_with(
        tmp,
        &tmp.join("data"),
        watch,
        free_port(),
        free_port(),
        &flags,
    )
}

/// An openssl TLS client to the xDS port (ALPN h2), with the client
/// certificate `client` if any: `(handshake succeeded, served cert serial)`.
fn s_client(port: u16, pki: &Pki, client: Option<&str>) -> (bool, String) {
    let mut cmd = Command::new("timeout");
    cmd.args(["10", "openssl", "s_client", "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .args([
            "-servername",
            "localhost",
            "-alpn",
            "h2",
            "-verify_return_error",
        ])
        .arg("-CAfile")
        .arg(&pki.ca.cert)
        .stdin(Stdio::null());
    if let Some(c) = client {
        cmd.arg("-cert")
            .arg(pki.cert(c))
            .arg("-key")
            .arg(pki.key(c));
    }
    let out = cmd.output().expect("openssl s_client runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let pem = text
        .split_once("-----BEGIN CERTIFICATE-----")
        .and_then(|(_, rest)| rest.split_once("-----END CERTIFICATE-----"))
        .map(|(body, _)| format!("-----BEGIN CERTIFICATE-----{body}-----END CERTIFICATE-----\n"));
    let serial = pem.map_or_else(String::new, |pem| {
        let mut x = Command::new("openssl")
            .args(["x509", "-noout", "-serial"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("openssl x509");
        use std::io::Write;
        x.stdin
            .take()
            .expect("stdin")
            .write_all(pem.as_bytes())
            .expect("pem");
        let out = x.wait_with_output().expect("openssl x509");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    });
    (out.status.success(), serial)
}

/// A raw SotW ADS stream over TLS from Python grpcio: one request (CDS, or the
/// type `argv[6]`) as node `argv[5]`; prints `GOT <bytes>` for the first response, or
/// `ERR <code> <details>`.
const ADS_PY: &str = r#"
import sys
import grpc

addr, ca, cert, key, node = sys.argv[1:6]
type_url = sys.argv[6] if len(sys.argv) > 6 else "type.googleapis.com/envoy.config.cluster.v3.Cluster"

def varint(n):
    out = b""
    while True:
        b = n & 0x7f
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])

def field(num, data):
    return bytes([num << 3 | 2]) + varint(len(data)) + data

# DiscoveryRequest: node = 2 (Node.id = 1), type_url = 4; "-" sends no node.
request = (field(2, field(1, node.encode())) if node != "-" else b"") + field(4, type_url.encode())
read = lambda p: open(p, "rb").read() if p != "-" else None
creds = grpc.ssl_channel_credentials(read(ca), read(key), read(cert))
with grpc.secure_channel(addr, creds, options=[("grpc.ssl_target_name_override", "localhost")]) as ch:
    ads = ch.stream_stream("/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources")
    try:
        for resp in ads(iter([request]), timeout=15):
            print("GOT", len(resp), flush=True)
            break
    except grpc.RpcError as e:
        print("ERR", e.code().name, e.details(), flush=True)
"#;

fn ads(tmp: &Path, port: u16, pki: &Pki, client: Option<&str>, node: &str) -> String {
    ads_for(tmp, port, pki, client, node, CDS)
}

const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const SDS: &str = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";

fn ads_for(
    tmp: &Path,
    port: u16,
    pki: &Pki,
    client: Option<&str>,
    node: &str,
    type_url: &str,
) -> String {
    let script = tmp.join("ads.py");
    std::fs::write(&script, ADS_PY).expect("ads.py");
    let dash = PathBuf::from("-");
    let out = Command::new("timeout")
        .arg("30")
        .arg(tool("DELTAPILOT_GRPC_PYTHON"))
        .arg(&script)
        .arg(format!("127.0.0.1:{port}"))
        .arg(&pki.ca.cert)
        .arg(client.map_or(dash.clone(), |c| pki.cert(c)))
        .arg(client.map_or(dash, |c| pki.key(c)))
        .arg(node)
        .arg(type_url)
        .output()
        .expect("grpc python runs");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn envoy_bootstrap(pki: &Pki, xds_port: u16, admin_port: u16) -> String {
    let f = |p: PathBuf| p.display().to_string();
    let tls = format!(
        r#"      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
          sni: localhost
          common_tls_context:
            alpn_protocols: ["h2"]
            tls_certificates:
              - certificate_chain: {{filename: "{cert}"}}
                private_key: {{filename: "{key}"}}
            validation_context:
              trusted_ca: {{filename: "{ca}"}}
              match_typed_subject_alt_names:
                - san_type: DNS
                  matcher: {{exact: localhost}}
"#,
        cert = f(pki.cert("web")),
        key = f(pki.key("web")),
        ca = f(pki.ca.cert.clone()),
    );
    let endpoints = format!(
        "          - lb_endpoints:
              - endpoint:
                  address:
                    socket_address:
                      address: 127.0.0.1
                      port_value: {xds_port}
"
    );
    let cluster = xds_cluster_yaml(&tls, &endpoints);
    format!(
        r#"node:
  id: "sidecar~127.0.0.1~client.test~test.svc.cluster.local"
  cluster: client.test
dynamic_resources:
  ads_config:
    api_type: DELTA_GRPC
    transport_api_version: V3
    grpc_services:
      - envoy_grpc:
          cluster_name: deltapilot
  cds_config:
    ads: {{}}
    resource_api_version: V3
  lds_config:
    ads: {{}}
    resource_api_version: V3
static_resources:
  clusters:
{cluster}admin:
  address:
    socket_address:
      address: 127.0.0.1
      port_value: {admin_port}
"#
    )
}

fn stat(envoy: &Envoy, name: &str) -> u64 {
    envoy
        .get("/stats")
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::to_owned))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Traffic through Envoy's outbound listener for `host` reaches `backend`.
fn expect_traffic(envoy: &Envoy, port: u16, host: &str, backend: &str) {
    wait_for(
        &format!("traffic to {host} through Envoy"),
        WAIT,
        || match http_get(
            std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            "/",
            host,
        ) {
            Ok((200, body)) if body == backend => Ok(()),
            other => Err(format!("{other:?}; envoy:\n{}", envoy.proc.output())),
        },
    );
}

#[test]
fn envoy_with_a_client_certificate_gets_config_and_keeps_its_stream_across_rotations() {
    let tmp = tempfile::tempdir().expect("tmp");
    let pki = Pki::new(tmp.path());
    let watch = tmp.path().join("watch");
    std::fs::create_dir_all(&watch).expect("watch");
    let (b1, b2) = (Backend::start("one"), Backend::start("two"));
    let (svc1, svc2) = (free_port(), free_port());
    write_service_entry(
        &watch,
        "one.yaml",
        "one.test.local",
        svc1,
        "HTTP",
        &[b1.port],
    );
    let dp = start(tmp.path(), &pki, &watch);
    assert_eq!(
        s_client(dp.xds_port, &pki, Some("web")),
        (true, "serial=01".into())
    );

    let admin_port = free_port();
    let envoy = Envoy::boot(
        tmp.path(),
        "envoy-tls.yaml",
        &envoy_bootstrap(&pki, dp.xds_port, admin_port),
        admin_port,
    );
    expect_traffic(&envoy, svc1, "one.test.local", "one");
    assert_eq!(stat(&envoy, "cluster.deltapilot.upstream_cx_total"), 1);

    // A rewrite in place, then Kubernetes' symlink swap: each time a new
    // connection is served the new certificate.
    pki.rewrite_server_cert(2);
    wait_for(
        "the rewritten certificate (serial 02) to be served",
        WAIT,
        || match s_client(dp.xds_port, &pki, Some("web")) {
            (true, s) if s == "serial=02" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    pki.publish_server_cert(3);
    wait_for(
        "the swapped-in certificate (serial 03) to be served",
        WAIT,
        || match s_client(dp.xds_port, &pki, Some("web")) {
            (true, s) if s == "serial=03" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    let m = dp.metrics();
    assert!(
        metric(&m, "deltapilot_xds_tls_reloads_total", &["result=\"ok\""]) >= 2.0,
        "{m}"
    );

    // Envoy's stream, opened before both rotations, still receives pushes.
    write_service_entry(
        &watch,
        "two.yaml",
        "two.test.local",
        svc2,
        "HTTP",
        &[b2.port],
    );
    expect_traffic(&envoy, svc2, "two.test.local", "two");
    assert_eq!(
        stat(&envoy, "cluster.deltapilot.upstream_cx_total"),
        1,
        "Envoy reconnected: {}",
        envoy.proc.output()
    );
    assert!(
        envoy.rejected_updates().is_empty(),
        "{:?}",
        envoy.rejected_updates()
    );
}

const SERVER_PY: &str = r#"
import sys
from concurrent import futures
import grpc

def hello(request, context):
    return b"hello from " + sys.argv[2].encode()

server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
    "demo.Greeter", {"Hello": grpc.unary_unary_rpc_method_handler(hello)}),))
server.add_insecure_port("127.0.0.1:" + sys.argv[1])
server.start()
print("serving", flush=True)
server.wait_for_termination(timeout=600)
"#;

const CLIENT_PY: &str = r#"
import sys
import grpc

with grpc.insecure_channel("xds:///" + sys.argv[1]) as ch:
    hello = ch.unary_unary("/demo.Greeter/Hello")
    print(hello(b"hi", timeout=20, wait_for_ready=True).decode(), flush=True)
"#;

#[test]
fn grpcio_with_tls_channel_credentials_calls_a_backend() {
    let python = tool("DELTAPILOT_GRPC_PYTHON");
    let tmp = tempfile::tempdir().expect("tmp");
    let pki = Pki::new(tmp.path());
    let watch = tmp.path().join("watch");
    std::fs::create_dir_all(&watch).expect("watch");
    std::fs::write(tmp.path().join("server.py"), SERVER_PY).expect("server.py");
    std::fs::write(tmp.path().join("client.py"), CLIENT_PY).expect("client.py");
    let backend_port = free_port();
    let mut cmd = Command::new("timeout");
    cmd.arg("600")
        .arg(&python)
        .arg(tmp.path().join("server.py"))
        .arg(backend_port.to_string())
        .arg("backend-1");
    let backend = Proc::spawn("grpc-server", cmd, tmp.path().join("server.log"));
    wait_for("the gRPC backend", Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", backend_port))
            .map(|_| ())
            .map_err(|e| format!("{e}: {}", backend.output()))
    });
    let svc_port = free_port();
    write_service_entry(
        &watch,
        "greeter.yaml",
        "greeter.test.local",
        svc_port,
        "GRPC",
        &[backend_port],
    );
    let dp = start(tmp.path(), &pki, &watch);
    let f = |p: PathBuf| p.display().to_string();
    let bootstrap = serde_json::json!({
        "xds_servers": [{
            "server_uri": format!("127.0.0.1:{}", dp.xds_port),
            "channel_creds": [{"type": "tls", "config": {
                "ca_certificate_file": f(pki.ca.cert.clone()),
                "certificate_file": f(pki.cert("greeter")),
                "private_key_file": f(pki.key("greeter")),
            }}],
            "server_features": ["xds_v3"],
        }],
        "node": {"id": "grpc-client-1", "locality": {"region": "test-region", "zone": "zone-0"}},
    });
    let bootstrap_path = tmp.path().join("grpc-bootstrap.json");
    std::fs::write(&bootstrap_path, bootstrap.to_string()).expect("bootstrap");
    let out = wait_for(
        "a grpcio call over xDS with TLS credentials",
        Duration::from_secs(90),
        || {
            let out = Command::new("timeout")
                .arg("40")
                .arg(&python)
                .arg(tmp.path().join("client.py"))
                .arg(format!("greeter.test.local:{svc_port}"))
                .env("GRPC_XDS_BOOTSTRAP", &bootstrap_path)
                .output()
                .map_err(|e| e.to_string())?;
            if out.status.success() {
                Ok(String::from_utf8_lossy(&out.stdout).into_owned())
            } else {
                Err(format!(
                    "{}\n{}\ndeltapilot:\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr),
                    dp.proc.output()
                ))
            }
        },
    );
    assert_eq!(out.trim(), "hello from backend-1");
    let m = dp.metrics();
    assert!(
        metric(
            &m,
            "deltapilot_xds_acks_total",
            &["api=\"sotw\"", "type=\"eds\""]
        ) > 0.0,
        "{m}"
    );
}

#[test]
fn clients_without_a_valid_certificate_or_identity_get_no_configuration() {
    let tmp = tempfile::tempdir().expect("tmp");
    let pki = Pki::new(tmp.path());
    let watch = tmp.path().join("watch");
    std::fs::create_dir_all(&watch).expect("watch");
    write_service_entry(
        &watch,
        "one.yaml",
        "one.test.local",
        free_port(),
        "HTTP",
        &[free_port()],
    );
    let dp = start_with(
        tmp.path(),
        &pki,
        &watch,
        &["--xds-handshake-timeout-secs", "1"],
    );
    let node = "sidecar~127.0.0.1~client.test~test.svc.cluster.local";

    // The allowed identity in its own namespace gets configuration.
    let ok = ads(tmp.path(), dp.xds_port, &pki, Some("web"), node);
    assert!(ok.starts_with("GOT "), "{ok}\n{}", dp.proc.output());

    // No certificate, or one from another CA: the handshake is refused.
    let none = ads(tmp.path(), dp.xds_port, &pki, None, node);
    assert!(none.starts_with("ERR UNAVAILABLE"), "{none}");
    let foreign = ads(tmp.path(), dp.xds_port, &pki, Some("foreign"), node);
    assert!(foreign.starts_with("ERR UNAVAILABLE"), "{foreign}");
    let m = wait_for("both refusals counted", WAIT, || {
        let m = dp.metrics();
        let no = metric(
            &m,
            "deltapilot_xds_tls_handshake_failures_total",
            &["reason=\"no_client_certificate\""],
        );
        let bad = metric(
            &m,
            "deltapilot_xds_tls_handshake_failures_total",
            &["reason=\"bad_client_certificate\""],
        );
        if no >= 1.0 && bad >= 1.0 {
            Ok(m)
        } else {
            Err(m)
        }
    });
    let log = dp.proc.output();
    assert!(
        log.contains("refused an xDS TLS handshake") && log.contains("127.0.0.1:"),
        "the refusal is logged with the peer address:\n{log}"
    );
    drop(m);
    // openssl's own client without a certificate is refused too.
    let before = metric(
        &dp.metrics(),
        "deltapilot_xds_tls_handshake_failures_total",
        &[],
    );
    let _ = s_client(dp.xds_port, &pki, None);
    wait_for("the openssl refusal counted", WAIT, || {
        let now = metric(
            &dp.metrics(),
            "deltapilot_xds_tls_handshake_failures_total",
            &[],
        );
        if now > before {
            Ok(())
        } else {
            Err(format!("{now}"))
        }
    });

    // A client that connects and never starts its handshake is closed after
    // the handshake timeout, and counted.
    let silent = std::net::TcpStream::connect(("127.0.0.1", dp.xds_port)).expect("connect");
    wait_for("the silent connection counted as a timeout", WAIT, || {
        let m = dp.metrics();
        let n = metric(
            &m,
            "deltapilot_xds_tls_handshake_failures_total",
            &["reason=\"timeout\""],
        );
        if n >= 1.0 { Ok(()) } else { Err(m) }
    });
    drop(silent);

    // A verified certificate outside --xds-tls-allow.
    let stranger = ads(tmp.path(), dp.xds_port, &pki, Some("stranger"), node);
    assert!(
        stranger.starts_with("ERR PERMISSION_DENIED") && stranger.contains("--xds-tls-allow"),
        "{stranger}"
    );
    // An allowed certificate of namespace `test` claiming a node of `bank`.
    let other_ns = "sidecar~127.0.0.1~teller.bank~bank.svc.cluster.local";
    let mismatch = ads(tmp.path(), dp.xds_port, &pki, Some("web"), other_ns);
    assert!(
        mismatch.starts_with("ERR PERMISSION_DENIED")
            && mismatch.contains("\"bank\"")
            && mismatch.contains(&format!("{TD}/web")),
        "{mismatch}"
    );
    // Nor does asking for a secret first (SDS is served beside the snapshot).
    let sds = ads_for(tmp.path(), dp.xds_port, &pki, Some("web"), other_ns, SDS);
    assert!(
        sds.starts_with("ERR PERMISSION_DENIED") && sds.contains("\"bank\""),
        "{sds}"
    );
    // Leaving the node out does not skip the check.
    let no_node = ads(tmp.path(), dp.xds_port, &pki, Some("web"), "-");
    assert!(
        no_node.starts_with("ERR PERMISSION_DENIED") && no_node.contains("names no node"),
        "{no_node}"
    );
    let m = dp.metrics();
    assert_eq!(
        metric(
            &m,
            "deltapilot_xds_rejected_requests_total",
            &["reason=\"identity_not_allowed\""]
        ),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "deltapilot_xds_rejected_requests_total",
            &["reason=\"identity_mismatch\""]
        ),
        3.0,
        "{m}"
    );
}

#[test]
fn bad_tls_settings_fail_the_start_with_the_reason() {
    let tmp = tempfile::tempdir().expect("tmp");
    let pki = Pki::new(tmp.path());
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_deltapilot"))
            .arg("run")
            .arg("--data-dir")
            .arg(tmp.path().join("data"))
            .args(["--xds-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"])
            .args(args)
            .output()
            .expect("deltapilot runs");
        assert!(!out.status.success(), "{args:?} started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let cert = pki.secret.join("tls.crt").display().to_string();
    let key = pki.secret.join("tls.key").display().to_string();
    let other_key = pki.key("web").display().to_string();
    let e = run(&["--xds-tls-cert", &cert]);
    assert!(e.contains("--xds-tls-cert needs --xds-tls-key"), "{e}");
    let e = run(&["--xds-tls-cert", &cert, "--xds-tls-key", &other_key]);
    assert!(
        e.contains("--xds-tls-key") && e.contains("does not fit the certificate"),
        "{e}"
    );
    let e = run(&["--xds-tls-cert", &key, "--xds-tls-key", &key]);
    assert!(
        e.contains("--xds-tls-cert") && e.contains("no PEM certificate"),
        "{e}"
    );
    let e = run(&[
        "--xds-tls-cert",
        &cert,
        "--xds-tls-key",
        &key,
        "--xds-tls-allow",
        "x",
    ]);
    assert!(
        e.contains("--xds-tls-allow needs --xds-tls-client-ca"),
        "{e}"
    );
}
