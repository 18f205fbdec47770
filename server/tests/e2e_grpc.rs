//! End to end with proxyless gRPC: Python grpcio (`DELTAPILOT_GRPC_PYTHON`) with
//! `GRPC_XDS_BOOTSTRAP` pointed at `deltapilot run` calls
//! `xds:///<host>:<port>` and reaches a real Python gRPC server through the
//! listener, route, cluster and endpoints deltapilot serves over SotW ADS; the
//! grpc-go client (`DELTAPILOT_GRPC_GO`) does the same.

mod support;

use std::process::Command;
use std::time::Duration;

use support::{Deltapilot, Proc, free_port, metric, tool, wait_for, write_service_entry};

const HOST: &str = "greeter.test.local";

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

/// A Python gRPC backend, a ServiceEntry naming it, `deltapilot run` serving
/// it, and a bootstrap file for proxyless clients.
struct Mesh {
    tmp: tempfile::TempDir,
    python: std::path::PathBuf,
    dp: Deltapilot,
    bootstrap: std::path::PathBuf,
    /// `host:port` of the service, for an `xds:///` target.
    target: String,
    _backend: Proc,
}

impl Mesh {
    fn start(node_id: &str) -> Mesh {
        let python = tool("DELTAPILOT_GRPC_PYTHON");
        let tmp = tempfile::tempdir().expect("tmp");
        let (data, watch) = (tmp.path().join("data"), tmp.path().join("watch"));
        std::fs::create_dir_all(&watch).expect("watch dir");
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
            HOST,
            svc_port,
            "GRPC",
            &[backend_port],
        );
        let (xds_port, admin_port) = (free_port(), free_port());
        let dp = Deltapilot::start(tmp.path(), &data, &watch, xds_port, admin_port);

        let bootstrap = format!(
            r#"{{"xds_servers":[{{"server_uri":"127.0.0.1:{xds_port}","channel_creds":[{{"type":"insecure"}}],"server_features":["xds_v3"]}}],
           "node":{{"id":"{node_id}","locality":{{"region":"test-region","zone":"zone-0"}}}}}}"#
        );
        let bootstrap_path = tmp.path().join("grpc-bootstrap.json");
        std::fs::write(&bootstrap_path, bootstrap).expect("bootstrap");
        Mesh {
            target: format!("{HOST}:{svc_port}"),
            tmp,
            python,
            dp,
            bootstrap: bootstrap_path,
            _backend: backend,
        }
    }

    /// Runs `client` (with the bootstrap set) until it succeeds; its stdout.
    fn call_until_ok(&self, what: &str, mut client: Command) -> String {
        client.env("GRPC_XDS_BOOTSTRAP", &self.bootstrap);
        wait_for(what, Duration::from_secs(90), || {
            let out = client.output().map_err(|e| e.to_string())?;
            if out.status.success() {
                Ok(String::from_utf8_lossy(&out.stdout).into_owned())
            } else {
                Err(format!(
                    "{}\n{}\ndeltapilot:\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr),
                    self.dp.proc.output()
                ))
            }
        })
    }

    /// The client's resources were ACKed over SotW, and nothing was NACKed.
    fn assert_acked(&self) {
        let m = self.dp.metrics();
        assert!(
            metric(
                &m,
                "deltapilot_xds_acks_total",
                &["api=\"sotw\"", "type=\"eds\""]
            ) > 0.0,
            "{m}"
        );
        assert_eq!(metric(&m, "deltapilot_xds_nacks_total", &[]), 0.0, "{m}");
    }
}

#[test]
fn grpcio_calls_through_deltapilot_resources() {
    let mesh = Mesh::start("grpc-client-1");
    let mut client = Command::new("timeout");
    client
        .arg("40")
        .arg(&mesh.python)
        .arg(mesh.tmp.path().join("client.py"))
        .arg(&mesh.target);
    let out = mesh.call_until_ok("a proxyless grpcio call to succeed", client);
    assert_eq!(out.trim(), "hello from backend-1");
    mesh.assert_acked();
}

/// grpc-go (google.golang.org/grpc 1.85 and its xds package, built by
/// scripts/install-test-deps.sh from server/tests/grpc-go) is the third
/// proxyless client: its xDS client is a separate implementation from
/// grpcio's C core, with its own validation of what it receives.
#[test]
fn grpc_go_calls_through_deltapilot_resources() {
    let go_client = tool("DELTAPILOT_GRPC_GO");
    let mesh = Mesh::start("grpc-go-client-1");
    let mut client = Command::new("timeout");
    client
        .arg("40")
        .arg(&go_client)
        .arg("-target")
        .arg(format!("xds:///{}", mesh.target))
        .arg("-n")
        .arg("3");
    let out = mesh.call_until_ok("a proxyless grpc-go call to succeed", client);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, ["hello from backend-1"; 3], "{out}");
    mesh.assert_acked();
}
