//! End to end with proxyless gRPC: Python grpcio (`DELTAPILOT_GRPC_PYTHON`) with
//! `GRPC_XDS_BOOTSTRAP` pointed at `deltapilot run` calls
//! `xds:///<host>:<port>` and reaches a real Python gRPC server through the
//! listener, route, cluster and endpoints deltapilot serves over SotW ADS; the
//! grpc-go client (`DELTAPILOT_GRPC_GO`) does the same. grpcio also starts from
//! the bootstrap `deltapilot bootstrap --type proxyless-grpc` prints.

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

# argv: target [n [key=value ...]]: n calls, one line per call.
n = int(sys.argv[2]) if len(sys.argv) > 2 else 1
md = [tuple(kv.split("=", 1)) for kv in sys.argv[3:]]
with grpc.insecure_channel("xds:///" + sys.argv[1]) as ch:
    hello = ch.unary_unary("/demo.Greeter/Hello")
    for _ in range(n):
        print(hello(b"hi", timeout=20, wait_for_ready=True, metadata=md).decode(), flush=True)
"#;

/// A Python gRPC backend, a ServiceEntry naming it, `deltapilot run` serving
/// it, and a bootstrap file for proxyless clients.
struct Mesh {
    tmp: tempfile::TempDir,
    /// The directory `deltapilot run` watches.
    watch: std::path::PathBuf,
    python: std::path::PathBuf,
    dp: Deltapilot,
    bootstrap: std::path::PathBuf,
    /// `host:port` of the service, for an `xds:///` target.
    target: String,
    _backends: Vec<Proc>,
}

impl Mesh {
    fn start(node_id: &str) -> Mesh {
        Self::start_with(node_id, 1)
    }

    /// `backends` Python servers answering `hello from backend-<i>`; the
    /// service `HOST` reaches backend-1, and `greeter-v<i>.test.local` (same
    /// port) reaches backend-i, for rules to route between.
    fn start_with(node_id: &str, backends: usize) -> Mesh {
        let python = tool("DELTAPILOT_GRPC_PYTHON");
        let tmp = tempfile::tempdir().expect("tmp");
        let (data, watch) = (tmp.path().join("data"), tmp.path().join("watch"));
        std::fs::create_dir_all(&watch).expect("watch dir");
        std::fs::write(tmp.path().join("server.py"), SERVER_PY).expect("server.py");
        std::fs::write(tmp.path().join("client.py"), CLIENT_PY).expect("client.py");

        let svc_port = free_port();
        let mut procs = Vec::new();
        let mut ports = Vec::new();
        for i in 1..=backends {
            let backend_port = free_port();
            let mut cmd = Command::new("timeout");
            cmd.arg("600")
                .arg(&python)
                .arg(tmp.path().join("server.py"))
                .arg(backend_port.to_string())
                .arg(format!("backend-{i}"));
            let backend = Proc::spawn(
                "grpc-server",
                cmd,
                tmp.path().join(format!("server-{i}.log")),
            );
            wait_for("the gRPC backend", Duration::from_secs(30), || {
                std::net::TcpStream::connect(("127.0.0.1", backend_port))
                    .map(|_| ())
                    .map_err(|e| format!("{e}: {}", backend.output()))
            });
            if backends > 1 {
                write_service_entry(
                    &watch,
                    &format!("greeter-v{i}.yaml"),
                    &format!("greeter-v{i}.test.local"),
                    svc_port,
                    "GRPC",
                    &[backend_port],
                );
            }
            procs.push(backend);
            ports.push(backend_port);
        }
        write_service_entry(&watch, "greeter.yaml", HOST, svc_port, "GRPC", &ports[..1]);
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
            watch,
            tmp,
            python,
            dp,
            bootstrap: bootstrap_path,
            _backends: procs,
        }
    }

    /// Runs `client` (with the bootstrap set) until it succeeds; its stdout.
    fn call_until_ok(&self, what: &str, client: Command) -> String {
        self.call_until(what, client, |out| Ok(out.to_string()))
    }

    /// Runs `client` until it succeeds and `accept` takes its stdout.
    fn call_until<T>(
        &self,
        what: &str,
        mut client: Command,
        accept: impl Fn(&str) -> Result<T, String>,
    ) -> T {
        client.env("GRPC_XDS_BOOTSTRAP", &self.bootstrap);
        wait_for(what, Duration::from_secs(90), || {
            let out = client.output().map_err(|e| e.to_string())?;
            if out.status.success() {
                accept(&String::from_utf8_lossy(&out.stdout))
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

#[test]
fn grpcio_starts_from_the_printed_proxyless_bootstrap() {
    let mesh = Mesh::start("replaced-below");
    let out = Command::new(env!("CARGO_BIN_EXE_deltapilot"))
        .args(["bootstrap", "--type", "proxyless-grpc", "--xds-address"])
        .arg(format!("127.0.0.1:{}", mesh.dp.xds_port))
        .args(["--pod", "grpc-client-1", "--namespace", "test"])
        .args(["--labels", "app=grpc-client"])
        .output()
        .expect("run deltapilot bootstrap");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let v: serde_json::Value = serde_json::from_str(&text).expect("bootstrap JSON");
    let node_id = "sidecar~127.0.0.1~grpc-client-1.test~test.svc.cluster.local";
    assert_eq!(v["node"]["id"], node_id, "{text}");
    assert_eq!(v["node"]["metadata"]["GENERATOR"], "grpc", "{text}");
    std::fs::write(&mesh.bootstrap, &text).expect("write the printed bootstrap");
    let mut client = Command::new("timeout");
    client
        .arg("40")
        .arg(&mesh.python)
        .arg(mesh.tmp.path().join("client.py"))
        .arg(&mesh.target);
    let out = mesh.call_until_ok("grpcio from the printed bootstrap", client);
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

/// A VirtualService on `HOST` for proxyless clients: `x-canary: yes` goes to
/// v2, everything else splits 70/30 between v1 and v2 (gRPC picks a weighted
/// cluster per call).
const SPLIT_VS: &str = "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: greeter-split
  namespace: test
spec:
  hosts: [greeter.test.local]
  http:
    - match: [{headers: {x-canary: {exact: \"yes\"}}}]
      route: [{destination: {host: greeter-v2.test.local}}]
    - route:
        - {destination: {host: greeter-v1.test.local}, weight: 70}
        - {destination: {host: greeter-v2.test.local}, weight: 30}
";

/// How many of `out`'s lines are each backend's; an error if any line is not.
fn tally(out: &str) -> Result<(usize, usize), String> {
    let (mut v1, mut v2) = (0, 0);
    for line in out.lines() {
        match line.trim() {
            "hello from backend-1" => v1 += 1,
            "hello from backend-2" => v2 += 1,
            other => return Err(format!("unexpected answer {other:?} in\n{out}")),
        }
    }
    Ok((v1, v2))
}

/// Runs the split rule against one proxyless client: `client(n, canary)` is
/// its command for `n` calls, with the canary header or without.
fn weighted_split_and_header_match(mesh: &Mesh, client: impl Fn(usize, bool) -> Command) {
    let tmp = mesh.watch.join(".vs.tmp");
    std::fs::write(&tmp, SPLIT_VS).expect("write rule");
    std::fs::rename(&tmp, mesh.watch.join("greeter-split.yaml")).expect("rename rule");

    // The header match: once the rule has arrived, every canary call is v2.
    mesh.call_until(
        "canary calls reach v2",
        client(20, true),
        |out| match tally(out)? {
            (0, 20) => Ok(()),
            other => Err(format!("canary calls landed {other:?}")),
        },
    );
    // The split: 200 calls, 70/30 within four standard deviations (about 26).
    let (v1, v2) = mesh.call_until("the split", client(200, false), tally);
    assert_eq!(v1 + v2, 200);
    assert!(
        (34..=86).contains(&v2),
        "v1 {v1}, v2 {v2}: not a 70/30 split"
    );
    mesh.assert_acked();
}

#[test]
fn grpcio_follows_a_weighted_split_and_a_header_match() {
    let mesh = Mesh::start_with("grpc-rules-1", 2);
    let (python, script, target) = (
        mesh.python.clone(),
        mesh.tmp.path().join("client.py"),
        mesh.target.clone(),
    );
    weighted_split_and_header_match(&mesh, |n, canary| {
        let mut c = Command::new("timeout");
        c.arg("60")
            .arg(&python)
            .arg(&script)
            .arg(&target)
            .arg(n.to_string());
        if canary {
            c.arg("x-canary=yes");
        }
        c
    });
}

#[test]
fn grpc_go_follows_a_weighted_split_and_a_header_match() {
    let go_client = tool("DELTAPILOT_GRPC_GO");
    let mesh = Mesh::start_with("grpc-go-rules-1", 2);
    let target = format!("xds:///{}", mesh.target);
    weighted_split_and_header_match(&mesh, |n, canary| {
        let mut c = Command::new("timeout");
        c.arg("60")
            .arg(&go_client)
            .arg("-target")
            .arg(&target)
            .arg("-n")
            .arg(n.to_string());
        if canary {
            c.arg("-header").arg("x-canary=yes");
        }
        c
    });
}

/// Faults for proxyless clients (gRFC A33): calls with `x-fault: yes` are
/// aborted with HTTP 503 half the time, which gRPC maps to UNAVAILABLE; other
/// calls are untouched.
const FAULT_VS: &str = "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: greeter-fault
  namespace: test
spec:
  hosts: [greeter.test.local]
  http:
    - match: [{headers: {x-fault: {exact: \"yes\"}}}]
      fault: {abort: {httpStatus: 503, percentage: {value: 50}}}
      route: [{destination: {host: greeter.test.local}}]
    - route: [{destination: {host: greeter.test.local}}]
";

/// Calls of one run: `(answered, unavailable)`; an error for anything else.
fn tally_faults(out: &str) -> Result<(usize, usize), String> {
    let (mut ok, mut unavailable) = (0, 0);
    for line in out.lines() {
        match line.trim() {
            "hello from backend-1" => ok += 1,
            l if l.starts_with("error: Unavailable:") => unavailable += 1,
            other => return Err(format!("unexpected answer {other:?} in\n{out}")),
        }
    }
    Ok((ok, unavailable))
}

#[test]
fn grpc_go_and_grpcio_take_fault_injection() {
    let go_client = tool("DELTAPILOT_GRPC_GO");
    let mesh = Mesh::start("grpc-fault-1");
    let target = format!("xds:///{}", mesh.target);
    let go = |n: usize, fault: bool| {
        let mut c = Command::new("timeout");
        c.arg("60")
            .arg(&go_client)
            .arg("-target")
            .arg(&target)
            .arg("-n")
            .arg(n.to_string());
        if fault {
            c.arg("-header").arg("x-fault=yes");
        }
        c
    };
    let out = mesh.call_until_ok("a call before the rule", go(1, false));
    assert_eq!(out.trim(), "hello from backend-1");
    let tmp = mesh.watch.join(".fault.tmp");
    std::fs::write(&tmp, FAULT_VS).expect("write rule");
    std::fs::rename(&tmp, mesh.watch.join("greeter-fault.yaml")).expect("rename rule");

    // Once the rule has arrived, some faulted calls fail with UNAVAILABLE.
    mesh.call_until(
        "faulted calls to be aborted",
        go(20, true),
        |out| match tally_faults(out)? {
            (_, 0) => Err(format!("no call aborted yet:\n{out}")),
            _ => Ok(()),
        },
    );
    // 100 calls at 50 %: within four standard deviations (5 each) of 50.
    let (ok, aborted) = mesh.call_until("the fault sample", go(100, true), tally_faults);
    assert_eq!(ok + aborted, 100);
    assert!(
        (30..=70).contains(&aborted),
        "a 50 % abort aborted {aborted} of 100 calls"
    );
    // Calls without the header are not faulted.
    let (ok, aborted) = mesh.call_until("unfaulted calls", go(20, false), tally_faults);
    assert_eq!((ok, aborted), (20, 0), "calls without x-fault");

    // grpcio takes the same listener (fault filter) and routes (per-route
    // fault config) without a NACK, and its unfaulted calls succeed.
    let mut client = Command::new("timeout");
    client
        .arg("40")
        .arg(&mesh.python)
        .arg(mesh.tmp.path().join("client.py"))
        .arg(&mesh.target)
        .arg("5");
    let out = mesh.call_until_ok("grpcio calls beside the fault rule", client);
    assert_eq!(out.lines().collect::<Vec<_>>(), ["hello from backend-1"; 5]);
    mesh.assert_acked();
}

const TLS_DR: &str = "apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: greeter-tls
  namespace: test
spec:
  host: greeter.test.local
  trafficPolicy:
    loadBalancer: {consistentHash: {maglev: {tableSize: 65537}, httpHeaderName: x-user}}
    tls: {mode: SIMPLE, sni: greeter.test.local}
";

/// Issue 27 (DP1120): on a GRPC port a real Envoy gets the rule's upstream TLS
/// and MAGLEV, while grpcio, on the same service, gets the proxyless variant
/// (no TLS, round robin): it ACKs everything and its calls still succeed.
#[test]
fn envoy_gets_upstream_tls_on_a_grpc_port_and_grpcio_its_own_cluster() {
    let mesh = Mesh::start("grpc-tls-1");
    let tmp = mesh.watch.join(".tls.tmp");
    std::fs::write(&tmp, TLS_DR).expect("write rule");
    std::fs::rename(&tmp, mesh.watch.join("greeter-tls.yaml")).expect("rename rule");
    let envoy = support::Envoy::start(mesh.tmp.path(), "envoy-sotw.yaml", mesh.dp.xds_port);
    let port = mesh.target.rsplit(':').next().expect("port");
    let cluster = format!("outbound|{port}||{HOST}");
    wait_for("Envoy's cluster with TLS", Duration::from_secs(60), || {
        let dump = envoy.get("/config_dump?resource=dynamic_active_clusters");
        let ours = dump
            .split("\"cluster\": {")
            .find(|c| c.contains(&format!("\"name\": \"{cluster}\"")))
            .ok_or_else(|| format!("no {cluster} yet:\n{dump}"))?;
        if ours.contains("envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext")
            && ours.contains("\"lb_policy\": \"MAGLEV\"")
        {
            Ok(())
        } else {
            Err(format!("{cluster} without TLS or MAGLEV yet:\n{ours}"))
        }
    });
    assert!(
        envoy
            .get("/stats")
            .contains("cluster_manager.cds.update_success"),
        "Envoy's stats are readable"
    );
    assert_eq!(envoy.rejected_updates(), Vec::<String>::new());

    let mut client = Command::new("timeout");
    client
        .arg("40")
        .arg(&mesh.python)
        .arg(mesh.tmp.path().join("client.py"))
        .arg(&mesh.target)
        .arg("3");
    let out = mesh.call_until_ok("grpcio calls beside Envoy's TLS cluster", client);
    assert_eq!(out.lines().collect::<Vec<_>>(), ["hello from backend-1"; 3]);
    mesh.assert_acked();
    let m = mesh.dp.metrics();
    assert!(
        metric(&m, "deltapilot_xds_acks_total", &["type=\"cds\""]) > 0.0,
        "{m}"
    );
}
