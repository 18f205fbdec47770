//! Two registries, one hostname: the Eureka adapter (a fake Eureka server over real
//! HTTP) and the file adapter (a ServiceEntry in a watched directory) both
//! contribute endpoints to `orders.example`, appending to one real embedded log
//! that the real engine follows. The engine merges them by its documented rule (the
//! lowest `(source, namespace, key)` claim defines the service; endpoints are the
//! union of every source's), so the cluster's ClusterLoadAssignment holds both
//! registries' endpoints, and each registry's changes move only its own.
//!
//! The same union seen by a delta xDS client over gRPC, against the `deltapilot`
//! binary, is `server/tests/merge_registries.rs`.

mod support_eureka;

use std::sync::Arc;
use std::time::Duration;

use deltapilot_adapters::file::{FileAdapter, FileAdapterOptions};
use deltapilot_engine::runner::Engine;
use deltapilot_log::EventLog;
use deltapilot_log::file::FileLog;
use deltapilot_xds::generate::GenOptions;
use deltapilot_xds::snapshot::{Snapshot, SnapshotReader};
use support_eureka::harness::{WAIT, fast, start};
use support_eureka::{FakeEureka, instance};
use tokio::sync::watch;

const HOST: &str = "orders.example";
const CLUSTER: &str = "outbound|8080||orders.example";

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

/// The endpoint addresses of `host` in the engine's merged view, with the source
/// that wrote each (from the key), sorted.
fn endpoints(snap: &Snapshot) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = snap
        .model
        .endpoints_of(HOST)
        .map(|e| {
            let source = e.key.split('/').nth(1).unwrap_or_default().to_owned();
            (source, e.address.to_string())
        })
        .collect();
    out.sort();
    out
}

/// Whether the encoded CLA of [`CLUSTER`] names exactly these addresses among
/// `candidates` (addresses are plain strings in the protobuf encoding).
fn cla_has(snap: &Snapshot, present: &[&str], absent: &[&str]) -> bool {
    let Some(cla) = snap.resources.endpoints.get(CLUSTER) else {
        return false;
    };
    let contains = |ip: &str| cla.bytes.windows(ip.len()).any(|w| w == ip.as_bytes());
    present.iter().all(|ip| contains(ip)) && absent.iter().all(|ip| !contains(ip))
}

async fn wait_snapshot(
    reader: &SnapshotReader,
    what: &str,
    done: impl Fn(&Snapshot) -> bool,
) -> Arc<Snapshot> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let snap = reader.load();
        if done(&snap) {
            return snap;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}; endpoints of {HOST}: {:?}; clusters: {:?}",
            endpoints(&snap),
            snap.resources.clusters.keys().collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eureka_and_file_endpoints_of_one_host_are_merged_by_the_engine() {
    let fake = FakeEureka::start("/eureka/v2").await;
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
    let mesh = tempfile::tempdir().expect("watch dir");
    std::fs::write(mesh.path().join("orders.yaml"), SERVICE_ENTRY).expect("write entry");
    let data = tempfile::tempdir().expect("log dir");
    let log = Arc::new(FileLog::open(data.path(), Default::default()).expect("log"));

    let (stop, stop_rx) = watch::channel(false);
    let engine = Engine::new(GenOptions::default());
    let reader = engine.reader();
    let engine_task = {
        let (log, stop_rx) = (log.clone(), stop_rx.clone());
        tokio::spawn(async move { engine.run(&*log, log.start(), stop_rx).await.map(drop) })
    };
    let file = FileAdapter::new(
        vec![mesh.path().to_owned()],
        FileAdapterOptions {
            source_id: Some("file".into()),
            ..Default::default()
        },
    )
    .expect("file adapter");
    let file_task = tokio::spawn(file.run(log.clone(), stop_rx.clone()));
    let eureka = start(fast(&fake.url()), &log);

    let snap = wait_snapshot(&reader, "both registries' endpoints", |s| {
        endpoints(s).len() == 3 && cla_has(s, &["10.0.0.11", "10.0.0.12", "10.1.0.1"], &[])
    })
    .await;
    assert_eq!(
        endpoints(&snap),
        [
            ("eureka".to_owned(), "10.0.0.11".to_owned()),
            ("eureka".to_owned(), "10.0.0.12".to_owned()),
            ("file".to_owned(), "10.1.0.1".to_owned()),
        ]
    );
    // Both define the service; the lowest claim ("eureka" < "file") wins, the other
    // is kept for when it goes.
    let defs = snap.model.service_definitions(HOST);
    assert_eq!(defs.len(), 2, "{defs:?}");
    let svc = snap.model.get_service(HOST).expect("merged service");
    assert_eq!(&*svc.namespace, "eureka");
    assert_eq!(
        snap.resources.clusters.len(),
        1,
        "one cluster for the shared host and port"
    );

    // A Eureka change moves only Eureka's endpoints; the file's stays.
    fake.remove("ORDERS", "orders-1");
    wait_snapshot(&reader, "orders-1 gone, the file's endpoint kept", |s| {
        endpoints(s).len() == 2 && cla_has(s, &["10.0.0.12", "10.1.0.1"], &["10.0.0.11"])
    })
    .await;

    // A file change moves only the file's endpoint; Eureka's stays.
    std::fs::write(
        mesh.path().join("orders.yaml"),
        SERVICE_ENTRY.replace("10.1.0.1", "10.1.0.2"),
    )
    .expect("edit entry");
    wait_snapshot(&reader, "the file's endpoint moved", |s| {
        cla_has(s, &["10.0.0.12", "10.1.0.2"], &["10.0.0.11", "10.1.0.1"])
    })
    .await;

    eureka.stop().await;
    stop.send_replace(true);
    let r = tokio::time::timeout(WAIT, file_task).await;
    assert!(matches!(r, Ok(Ok(Ok(())))), "file adapter: {r:?}");
    let r = tokio::time::timeout(WAIT, engine_task).await;
    assert!(matches!(r, Ok(Ok(Ok(())))), "engine: {r:?}");
    let head = log.head().await.expect("head");
    assert!(head.offset(0) > 0);
}
