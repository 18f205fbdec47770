//! Two registries, one hostname, through the real `deltapilot` binary: a fake
//! Eureka server (real HTTP, Eureka's JSON) and a watched directory with a
//! ServiceEntry both define `orders.example`. `deltapilot run --watch …
//! --eureka-url …` runs both adapters in-process into one embedded log; a delta
//! xDS client over real gRPC (envoy-types' tonic ADS client) subscribes to the
//! cluster and sees the union of both registries' endpoints, then each registry's
//! change on its own. Also: the standalone `deltapilot adapter eureka` and
//! `deltapilot adapter file` commands append to a log and stop cleanly on SIGTERM.
//!
//! The fake Eureka server is shared with the adapters crate's tests.

mod support;
use deltapilot_testkit::eureka as support_eureka;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use deltapilot_xds::ResourceType;
use envoy_types::pb::envoy::config::core::v3::address::Address;
use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse,
};
use prost::Message as _;
use support::{Proc, free_port, http_get, wait_for};
use support_eureka::{FakeEureka, instance};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

const HOST: &str = "orders.example";
const CLUSTER: &str = "outbound|8080||orders.example";
/// Bound of every wait on the running binary (a 2-core CI machine builds and runs
/// other tests at the same time).
const WAIT: Duration = Duration::from_secs(60);

const SERVICE_ENTRY: &str = "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: orders-vms
  namespace: mesh
spec:
  hosts: [orders.example]
  location: MESH_INTERNAL
  resolution: STATIC
  ports:
  - {number: 8080, name: http, protocol: HTTP}
  endpoints:
  - address: 10.1.0.1
    ports: {http: 9080}
";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime")
}

fn seed(fake: &FakeEureka) {
    fake.put(instance(
        "ORDERS",
        "orders-1",
        "10.0.0.11",
        8080,
        "UP",
        HOST,
    ));
    fake.put(instance(
        "ORDERS",
        "orders-2",
        "10.0.0.12",
        8080,
        "UP",
        HOST,
    ));
    fake.clear_recent();
}

fn dreq(t: ResourceType, sub: &[&str], nonce: &str) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        type_url: t.type_url().into(),
        resource_names_subscribe: sub.iter().map(|s| s.to_string()).collect(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

async fn recv(s: &mut Streaming<DeltaDiscoveryResponse>) -> DeltaDiscoveryResponse {
    tokio::time::timeout(WAIT, s.message())
        .await
        .expect("a response in time")
        .expect("stream ok")
        .expect("a message")
}

/// `ip:port` of every endpoint in a CLA.
fn addresses(cla: &ClusterLoadAssignment) -> BTreeSet<String> {
    cla.endpoints
        .iter()
        .flat_map(|l| &l.lb_endpoints)
        .filter_map(|lb| match &lb.host_identifier {
            Some(HostIdentifier::Endpoint(e)) => e.address.as_ref(),
            _ => None,
        })
        .filter_map(|a| match &a.address {
            Some(Address::SocketAddress(s)) => Some(match s.port_specifier {
                Some(PortSpecifier::PortValue(p)) => format!("{}:{p}", s.address),
                _ => s.address.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// Reads EDS pushes (ACKing each) until the CLA of [`CLUSTER`] has exactly `want`.
async fn eds_until(
    tx: &mpsc::Sender<DeltaDiscoveryRequest>,
    rx: &mut Streaming<DeltaDiscoveryResponse>,
    want: &[&str],
) {
    let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
    let mut last = BTreeSet::new();
    for _ in 0..200 {
        let r = recv(rx).await;
        let t = ResourceType::from_type_url(&r.type_url).expect("a known type");
        tx.send(dreq(t, &[], &r.nonce)).await.expect("ack");
        if r.type_url != ResourceType::Endpoint.type_url() {
            continue;
        }
        for res in r.resources.iter().filter(|r| r.name == CLUSTER) {
            let any = res.resource.as_ref().expect("resource body");
            let cla = ClusterLoadAssignment::decode(any.value.as_slice()).expect("a CLA");
            last = addresses(&cla);
        }
        if last == want {
            return;
        }
    }
    panic!("the CLA never became {want:?}; last {last:?}");
}

#[test]
fn a_delta_client_sees_the_union_of_eureka_and_file_endpoints() {
    let rt = runtime();
    let fake = rt.block_on(FakeEureka::start("/eureka/v2"));
    seed(&fake);
    let dir = tempfile::tempdir().expect("tmp");
    let mesh = dir.path().join("mesh");
    std::fs::create_dir(&mesh).expect("mesh dir");
    std::fs::write(mesh.join("orders.yaml"), SERVICE_ENTRY).expect("write entry");
    let (xds_port, admin_port) = (free_port(), free_port());

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_deltapilot"));
    cmd.arg("run")
        .arg("--xds-addr")
        .arg(format!("127.0.0.1:{xds_port}"))
        .arg("--admin-addr")
        .arg(format!("127.0.0.1:{admin_port}"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--watch")
        .arg(&mesh)
        .arg("--eureka-url")
        .arg(fake.url())
        .arg("--eureka-refresh-secs")
        .arg("0.1")
        .env("RUST_LOG", "info");
    let mut dp = Proc::spawn("deltapilot", cmd, dir.path().join("deltapilot.log"));
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], admin_port));
    wait_for(
        "/readyz (engine caught up, both adapters resynced)",
        WAIT,
        || match http_get(admin, "/readyz", "localhost") {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}; output:\n{}", dp.output())),
        },
    );
    // `run` turns transparent huge pages off for itself (see
    // `cli::disable_transparent_huge_pages`): the kernel reports it per process.
    let status = std::fs::read_to_string(format!("/proc/{}/status", dp.child.id()))
        .expect("the server's /proc status");
    let thp = status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(str::trim);
    assert_eq!(thp, Some("0"), "THP for `deltapilot run`:\n{status}");

    rt.block_on(async {
        let channel =
            tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{xds_port}"))
                .expect("uri")
                .connect()
                .await
                .expect("connect to xDS");
        let (tx, req_rx) = mpsc::channel(16);
        let mut client = AggregatedDiscoveryServiceClient::new(channel);
        let mut rx = client
            .delta_aggregated_resources(ReceiverStream::new(req_rx))
            .await
            .expect("delta stream")
            .into_inner();
        // As Envoy does: CDS wildcard, then EDS for the clusters it got.
        tx.send(dreq(ResourceType::Cluster, &[], ""))
            .await
            .expect("cds");
        let cds = recv(&mut rx).await;
        let names: Vec<&str> = cds.resources.iter().map(|r| r.name.as_str()).collect();
        assert!(names.contains(&CLUSTER), "clusters: {names:?}");
        tx.send(dreq(ResourceType::Cluster, &[], &cds.nonce))
            .await
            .expect("ack cds");
        tx.send(dreq(ResourceType::Endpoint, &[CLUSTER], ""))
            .await
            .expect("eds");

        eds_until(
            &tx,
            &mut rx,
            &["10.0.0.11:8080", "10.0.0.12:8080", "10.1.0.1:9080"],
        )
        .await;

        // Eureka loses an instance: only Eureka's endpoints move.
        fake.remove("ORDERS", "orders-1");
        eds_until(&tx, &mut rx, &["10.0.0.12:8080", "10.1.0.1:9080"]).await;

        // The ServiceEntry's endpoint moves: only the file's endpoint changes.
        std::fs::write(
            mesh.join("orders.yaml"),
            SERVICE_ENTRY.replace("10.1.0.1", "10.1.0.2"),
        )
        .expect("edit entry");
        eds_until(&tx, &mut rx, &["10.0.0.12:8080", "10.1.0.2:9080"]).await;
    });

    // Each in-process adapter shows in /metrics: events it emitted, its registry up.
    wait_for("per-adapter metrics", WAIT, || {
        match http_get(admin, "/metrics", "localhost") {
            Ok((200, body)) => {
                let emitted = |a: &str| {
                    let prefix =
                        format!("deltapilot_adapter_events_emitted_total{{adapter=\"{a}\"}} ");
                    body.lines().any(|l| {
                        l.strip_prefix(&prefix)
                            .and_then(|v| v.trim().parse::<f64>().ok())
                            .is_some_and(|v| v > 0.0)
                    })
                };
                let up = |a: &str| {
                    body.contains(&format!(
                        "deltapilot_adapter_registry_up{{adapter=\"{a}\"}} 1"
                    ))
                };
                if emitted("file") && emitted("eureka") && up("file") && up("eureka") {
                    Ok(())
                } else {
                    Err(body)
                }
            }
            other => Err(format!("{other:?}")),
        }
    });

    assert!(dp.terminate(WAIT), "deltapilot did not stop on SIGTERM");
    let status = dp.child.wait().expect("exit status");
    assert!(status.success(), "{status}; output:\n{}", dp.output());
}

/// `deltapilot log read` of a log directory (read-only, next to a running writer).
fn log_text(dir: &Path) -> Result<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_deltapilot"))
        .args(["log", "read", "--log"])
        .arg(format!("file://{}", dir.display()))
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn wait_log(what: &str, dir: &Path, p: &Proc, needles: &[&str]) -> String {
    wait_for(what, WAIT, || {
        let text = log_text(dir).unwrap_or_default();
        if needles.iter().all(|n| text.contains(n)) {
            Ok(text)
        } else {
            Err(format!("log:\n{text}\noutput:\n{}", p.output()))
        }
    })
}

#[test]
fn standalone_adapter_commands_append_and_stop_on_sigterm() {
    let rt = runtime();
    let fake = rt.block_on(FakeEureka::start("/eureka"));
    seed(&fake);
    let dir = tempfile::tempdir().expect("tmp");
    let mesh = dir.path().join("mesh");
    std::fs::create_dir(&mesh).expect("mesh dir");
    std::fs::write(mesh.join("orders.yaml"), SERVICE_ENTRY).expect("write entry");
    let (eureka_log, file_log) = (dir.path().join("eureka-log"), dir.path().join("file-log"));

    // The Eureka command, configured through its environment variables.
    let eureka_admin = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_deltapilot"));
    cmd.args(["adapter", "eureka"])
        .env("DELTAPILOT_EUREKA_URL", fake.url())
        .env("DELTAPILOT_LOG", format!("file://{}", eureka_log.display()))
        .env("DELTAPILOT_EUREKA_REFRESH_SECS", "0.1")
        .env("DELTAPILOT_EUREKA_SOURCE", "eureka-a")
        // Two adapters on one host: each needs its own admin port.
        .env(
            "DELTAPILOT_ADAPTER_ADMIN_ADDR",
            format!("127.0.0.1:{eureka_admin}"),
        );
    let mut eureka = Proc::spawn("adapter eureka", cmd, dir.path().join("eureka.out"));
    // The file command, configured through flags.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_deltapilot"));
    cmd.args(["adapter", "file", "--watch"])
        .arg(&mesh)
        .arg("--log")
        .arg(format!("file://{}", file_log.display()))
        .args(["--admin-addr", "127.0.0.1:0"]);
    let mut file = Proc::spawn("adapter file", cmd, dir.path().join("file.out"));

    wait_log(
        "the eureka resync",
        &eureka_log,
        &eureka,
        &[
            "ep/eureka-a/ORDERS/orders-1",
            "ep/eureka-a/ORDERS/orders-2",
            "COMPLETED",
        ],
    );
    fake.put(instance(
        "ORDERS",
        "orders-3",
        "10.0.0.13",
        8080,
        "UP",
        HOST,
    ));
    wait_log(
        "the eureka delta",
        &eureka_log,
        &eureka,
        &["ep/eureka-a/ORDERS/orders-3"],
    );
    let text = wait_log(
        "the file resync",
        &file_log,
        &file,
        &["ep/file/se/mesh/orders-vms/10.1.0.1", "COMPLETED"],
    );
    assert!(text.contains("\"source\":\"file\""), "{text}");

    // The Eureka adapter's admin port: ready once its resync is in the log, and
    // its metrics under the names `deltapilot run` uses.
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], eureka_admin));
    wait_for("the eureka adapter's /readyz and metrics", WAIT, || {
        let ready = http_get(admin, "/readyz", "localhost")?;
        let (_, m) = http_get(admin, "/metrics", "localhost")?;
        let want = [
            "deltapilot_adapter_resync_completed{adapter=\"eureka\"} 1",
            "deltapilot_adapter_registry_up{adapter=\"eureka\"} 1",
        ];
        if ready.0 == 200 && want.iter().all(|w| m.contains(w)) {
            Ok(())
        } else {
            Err(format!("{ready:?}\n{m}"))
        }
    });

    for p in [&mut eureka, &mut file] {
        assert!(p.terminate(WAIT), "{} did not stop on SIGTERM", p.name);
        let status = p.child.wait().expect("exit status");
        assert!(
            status.success(),
            "{}: {status}; output:\n{}",
            p.name,
            p.output()
        );
        assert!(p.output().contains("stopped"), "{}", p.output());
    }

    // A bad URL is refused before anything starts, with the reason.
    let out = Command::new(env!("CARGO_BIN_EXE_deltapilot"))
        .args(["adapter", "eureka", "--url", "ftp://x/eureka", "--log"])
        .arg(format!("file://{}", dir.path().join("unused").display()))
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("scheme"), "{err}");
    assert!(
        !dir.path().join("unused").exists(),
        "no log opened for a bad config"
    );
}
