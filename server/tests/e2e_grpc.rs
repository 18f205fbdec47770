//! End to end with proxyless gRPC: Python grpcio (`DELTAPILOT_GRPC_PYTHON`) with
//! `GRPC_XDS_BOOTSTRAP` pointed at `deltapilot run` calls
//! `xds:///<host>:<port>` and reaches a real Python gRPC server through the
//! listener, route, cluster and endpoints deltapilot serves over SotW ADS.

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

#[test]
fn grpcio_calls_through_deltapilot_resources() {
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
           "node":{{"id":"grpc-client-1","locality":{{"region":"test-region","zone":"zone-0"}}}}}}"#
    );
    let bootstrap_path = tmp.path().join("grpc-bootstrap.json");
    std::fs::write(&bootstrap_path, bootstrap).expect("bootstrap");

    let target = format!("{HOST}:{svc_port}");
    let out = wait_for(
        "a proxyless gRPC call to succeed",
        Duration::from_secs(90),
        || {
            let out = Command::new("timeout")
                .arg("40")
                .arg(&python)
                .arg(tmp.path().join("client.py"))
                .arg(&target)
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
    assert_eq!(metric(&m, "deltapilot_xds_nacks_total", &[]), 0.0, "{m}");
}
