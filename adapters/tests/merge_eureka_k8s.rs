//! Two platform registries, one hostname: the Kubernetes adapter (against the fake
//! API server, real k8s-openapi objects over HTTP) and the Eureka adapter (against
//! the fake Eureka server) both contribute endpoints to
//! `reviews.shop.svc.cluster.local`, appending to one real embedded log that the
//! real engine follows.
//!
//! The engine's documented merge rule decides: the service of a hostname is the
//! lowest `(source, namespace, key)` definition ("eureka" before "k8s:test"), the
//! others wait their turn; the endpoints are the union of every source's. So the
//! cluster's ClusterLoadAssignment holds both registries' endpoints, and when
//! Eureka's definition goes, the Kubernetes one takes over with its own port.

mod support_eureka;
mod support_k8s;

use std::sync::Arc;
use std::time::Duration;

use deltapilot_engine::runner::Engine;
use deltapilot_log::EventLog;
use deltapilot_xds::generate::GenOptions;
use deltapilot_xds::snapshot::{Snapshot, SnapshotReader};
use support_eureka::harness::{WAIT, fast};
use support_eureka::{FakeEureka, instance};
use support_k8s::FakeApiServer;
use support_k8s::harness::{open_log, seed_shop, test_opts};
use tokio::sync::watch;

const HOST: &str = "reviews.shop.svc.cluster.local";
/// The cluster while Eureka's definition (port `http` 8080) wins.
const EUREKA_CLUSTER: &str = "outbound|8080||reviews.shop.svc.cluster.local";
/// The cluster once the Kubernetes Service (port `http` 9080) is the definition.
const K8S_CLUSTER: &str = "outbound|9080||reviews.shop.svc.cluster.local";

/// `(registry, address)` of every endpoint of [`HOST`] in the merged view, sorted;
/// the registry is the second segment of the endpoint key.
fn endpoints(snap: &Snapshot) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = snap
        .model
        .endpoints_of(HOST)
        .map(|e| {
            let registry = e.key.split('/').nth(1).unwrap_or_default().to_owned();
            (registry, e.address.to_string())
        })
        .collect();
    out.sort();
    out
}

/// Whether the encoded CLA of `cluster` names every `present` address and no
/// `absent` one (addresses are plain strings in the protobuf encoding).
fn cla_has(snap: &Snapshot, cluster: &str, present: &[&str], absent: &[&str]) -> bool {
    let Some(cla) = snap.resources.endpoints.get(cluster) else {
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
async fn kubernetes_and_eureka_endpoints_of_one_host_are_merged_by_the_engine() {
    let k8s = FakeApiServer::start().await;
    seed_shop(&k8s);
    let eureka = FakeEureka::start("/eureka/v2").await;
    eureka.put(instance(
        "REVIEWS",
        "reviews-vm-1",
        "10.2.0.1",
        8080,
        "UP",
        HOST,
    ));
    eureka.put(instance(
        "REVIEWS",
        "reviews-vm-2",
        "10.2.0.2",
        8080,
        "UP",
        HOST,
    ));
    eureka.clear_recent();
    let data = tempfile::tempdir().expect("log dir");
    let log = open_log(data.path());

    let (stop, stop_rx) = watch::channel(false);
    let engine = Engine::new(GenOptions::default());
    let reader = engine.reader();
    let engine_task = {
        let log = log.clone();
        tokio::spawn(async move { engine.run(&*log, log.start(), stop_rx).await.map(drop) })
    };
    let opts = test_opts();
    let k8s_run = support_k8s::harness::start(k8s.client(opts.read_timeout), &log, opts);
    let eureka_run = support_eureka::harness::start(fast(&eureka.url()), &log);

    let all = ["10.1.0.1", "10.1.0.2", "10.2.0.1", "10.2.0.2"];
    let snap = wait_snapshot(&reader, "both registries' endpoints", |s| {
        endpoints(s).len() == 4 && cla_has(s, EUREKA_CLUSTER, &all, &[])
    })
    .await;
    assert_eq!(
        endpoints(&snap),
        [
            ("eureka".to_owned(), "10.2.0.1".to_owned()),
            ("eureka".to_owned(), "10.2.0.2".to_owned()),
            ("k8s".to_owned(), "10.1.0.1".to_owned()),
            ("k8s".to_owned(), "10.1.0.2".to_owned()),
        ]
    );
    assert_eq!(snap.model.service_definitions(HOST).len(), 2);
    let svc = snap.model.get_service(HOST).expect("merged service");
    assert_eq!(&*svc.namespace, "eureka", "the lowest claim wins");
    assert!(!snap.resources.clusters.contains_key(K8S_CLUSTER));

    // One Eureka instance goes: only it leaves the CLA.
    eureka.remove("REVIEWS", "reviews-vm-1");
    wait_snapshot(&reader, "reviews-vm-1 gone", |s| {
        cla_has(
            s,
            EUREKA_CLUSTER,
            &["10.1.0.1", "10.1.0.2", "10.2.0.2"],
            &["10.2.0.1"],
        )
    })
    .await;

    // The last one goes: Eureka deletes its service, the Kubernetes definition
    // takes over (its port, its namespace) with the Kubernetes endpoints.
    eureka.remove("REVIEWS", "reviews-vm-2");
    let snap = wait_snapshot(&reader, "the Kubernetes definition in force", |s| {
        cla_has(
            s,
            K8S_CLUSTER,
            &["10.1.0.1", "10.1.0.2"],
            &["10.2.0.1", "10.2.0.2"],
        ) && !s.resources.clusters.contains_key(EUREKA_CLUSTER)
    })
    .await;
    let svc = snap.model.get_service(HOST).expect("merged service");
    assert_eq!(&*svc.namespace, "shop");

    eureka_run.stop().await;
    k8s_run.stop().await;
    stop.send_replace(true);
    let r = tokio::time::timeout(WAIT, engine_task).await;
    assert!(matches!(r, Ok(Ok(Ok(())))), "engine: {r:?}");
    assert!(log.head().await.expect("head").offset(0) > 0);
}
