//! The Kubernetes adapter's smoke flow, written once for two clusters:
//!
//! - by default, the in-process fake API server (this is not a skip: the flow runs
//!   fully, through a kubeconfig file that points at the fake, so
//!   `KubernetesAdapter::from_kubeconfig` is exercised too);
//! - with `DELTAPILOT_K8S_REAL=1` and `KUBECONFIG` set, the real cluster that
//!   kubeconfig names. The flow creates a fresh namespace holding one selector-less
//!   Service and one hand-managed EndpointSlice (no Pods, nothing scheduled),
//!   changes and deletes them, and deletes the namespace at the end. It needs
//!   rights to create namespaces, Services and EndpointSlices, and to list and
//!   watch Nodes and Pods.
//!
//! ```text
//! DELTAPILOT_K8S_REAL=1 KUBECONFIG=~/.kube/config \
//!     cargo test -p deltapilot-adapters --test k8s_real_cluster -- --nocapture
//! ```
//!
//! Every object is created and changed through the Kubernetes API (kube's `Api`),
//! on the fake exactly as on the real cluster.

mod support_k8s;

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use deltapilot_adapters::kubernetes::{KubernetesAdapter, KubernetesOptions};
use deltapilot_proto as pb;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use support_k8s::FakeApiServer;
use support_k8s::harness::*;
use support_k8s::objects::{Ep, slice};
use tokio::sync::watch;

/// Where the flow runs.
enum Cluster {
    Fake {
        _fake: FakeApiServer,
        _dir: tempfile::TempDir,
        kubeconfig: PathBuf,
    },
    Real {
        kubeconfig: PathBuf,
    },
}

impl Cluster {
    async fn pick() -> Self {
        let real = std::env::var("DELTAPILOT_K8S_REAL").is_ok_and(|v| v == "1");
        match std::env::var_os("KUBECONFIG") {
            Some(path) if real => {
                eprintln!("k8s smoke flow: against the real cluster of {path:?}");
                Cluster::Real {
                    kubeconfig: PathBuf::from(path),
                }
            }
            _ => {
                let fake = FakeApiServer::start().await;
                let dir = tempfile::tempdir().expect("tempdir");
                let kubeconfig = dir.path().join("kubeconfig");
                let yaml = format!(
                    "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
                     users:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n\
                     current-context: fake\n",
                    fake.url()
                );
                std::fs::write(&kubeconfig, yaml).expect("write kubeconfig");
                Cluster::Fake {
                    _fake: fake,
                    _dir: dir,
                    kubeconfig,
                }
            }
        }
    }

    fn kubeconfig(&self) -> &std::path::Path {
        match self {
            Cluster::Fake { kubeconfig, .. } | Cluster::Real { kubeconfig } => kubeconfig,
        }
    }

    /// A client for the test's own changes.
    async fn client(&self) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(self.kubeconfig()).expect("read kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("kubeconfig");
        kube::Client::try_from(config).expect("client")
    }
}

fn web_service(ns: &str, port: i32) -> Service {
    let mut s = support_k8s::objects::service(ns, "web", &[("http", port)], &[("app", "web")]);
    if let Some(spec) = s.spec.as_mut() {
        // No selector: the EndpointSlice controller leaves this Service alone.
        spec.selector = None;
        spec.cluster_ip = None;
    }
    s
}

fn web_slice(ns: &str, ready: bool) -> EndpointSlice {
    let mut ep = Ep::ready("unused", "10.250.0.1", "unused");
    if !ready {
        ep.ready = false;
        ep.terminating = true;
    }
    let mut s = slice(ns, "web-manual", "web", &[("http", 8080)], &[ep]);
    // Hand-managed, without Pod or Node.
    if let Some(labels) = s.metadata.labels.as_mut() {
        labels.insert(
            "endpointslice.kubernetes.io/managed-by".into(),
            "deltapilot-smoke-test".into(),
        );
    }
    for e in &mut s.endpoints {
        e.target_ref = None;
        e.node_name = None;
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_flow_sync_change_delete() {
    let cluster = Cluster::pick().await;
    let client = cluster.client().await;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let ns = format!("deltapilot-smoke-{}-{nanos}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(ns.clone()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .expect("create namespace");
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    services
        .create(&PostParams::default(), &web_service(&ns, 80))
        .await
        .expect("create service");
    slices
        .create(&PostParams::default(), &web_slice(&ns, true))
        .await
        .expect("create slice");

    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path());
    let opts = KubernetesOptions {
        cluster_id: "smoke".into(),
        namespaces: vec![ns.clone()],
        istio: false,
        ..test_opts()
    };
    let adapter = KubernetesAdapter::from_kubeconfig(Some(cluster.kubeconfig()), opts)
        .await
        .expect("adapter from kubeconfig");
    let mut status = adapter.status();
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(adapter.run(log.clone(), stop_rx));
    let synced = matches!(
        tokio::time::timeout(WAIT, status.wait_for(|s| s.resync_completed)).await,
        Ok(Ok(_))
    );
    assert!(synced, "no resync: {:#?}", *status.borrow());

    let svc = format!("svc/{ns}/web.{ns}.svc.cluster.local");
    let ep = format!("ep/k8s/smoke/{ns}/web/-/10.250.0.1");
    let events = all_events(&log).await;
    assert_eq!(
        summary(&events),
        vec![
            "resync:STARTED".to_owned(),
            format!("service_upsert:{svc}"),
            format!("endpoint_upsert:{ep}"),
            "resync:COMPLETED".into(),
        ]
    );
    assert_eq!(
        endpoint_of(&events[2]).map(|e| e.health()),
        Some(pb::Health::Healthy)
    );
    assert_eq!(
        endpoint_of(&events[2]).and_then(|e| e.ports.get("http")),
        Some(&8080)
    );

    // The endpoint starts terminating: one event, draining.
    let mut current = slices.get("web-manual").await.expect("get slice");
    let draining = web_slice(&ns, false);
    current.endpoints = draining.endpoints;
    slices
        .replace("web-manual", &PostParams::default(), &current)
        .await
        .expect("replace slice");
    let events = wait_log(&log, "the draining endpoint", |s| s.len() >= 5).await;
    assert_eq!(summary(&events[4..]), vec![format!("endpoint_upsert:{ep}")]);
    assert_eq!(
        endpoint_of(&events[4]).map(|e| e.health()),
        Some(pb::Health::Draining)
    );

    // The Service goes: its endpoint, then itself.
    services
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete service");
    let events = wait_log(&log, "the deletes", |s| s.len() >= 7).await;
    assert_eq!(
        summary(&events[5..]),
        vec![
            format!("endpoint_delete:{ep}"),
            format!("service_delete:{svc}")
        ]
    );
    fold_all(&events);

    stop.send_replace(true);
    let stopped = tokio::time::timeout(WAIT, task).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
    let _ = slices.delete("web-manual", &DeleteParams::default()).await;
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
}
