//! Running the Kubernetes adapter in a test: a real embedded log in a temporary
//! directory, bounded waits on the log and on the adapter's status, and folding
//! what the adapter wrote with the real engine.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use deltapilot_adapters::kubernetes::{
    KubernetesAdapter, KubernetesAdapterStatus, KubernetesOptions,
};
use deltapilot_log::file::FileLog;
use deltapilot_proto::Event;
use deltapilot_proto::event::Payload;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::FakeApiServer;
use super::objects::{Ep, istio, node, pod, service, slice};

#[allow(unused_imports)] // each test binary uses its own subset
pub use deltapilot_testkit::log::{POLL, WAIT, all_events, fold_all, summary, wait_log};

/// Options for tests: fast retries, short watches.
pub fn test_opts() -> KubernetesOptions {
    KubernetesOptions {
        cluster_id: "test".into(),
        watch_timeout: Duration::from_secs(60),
        read_timeout: Duration::from_secs(70),
        retry_initial: Duration::from_millis(50),
        retry_max: Duration::from_millis(400),
        ..Default::default()
    }
}

/// A real embedded log in `dir`.
pub fn open_log(dir: &Path) -> Arc<FileLog> {
    Arc::new(FileLog::open(dir, Default::default()).expect("open the file log"))
}

/// A running adapter.
pub struct Running {
    stop: watch::Sender<bool>,
    task: JoinHandle<deltapilot_adapters::Result<()>>,
    pub status: watch::Receiver<KubernetesAdapterStatus>,
}

/// Starts an adapter on `client` appending to `log`.
pub fn start(client: kube::Client, log: &Arc<FileLog>, opts: KubernetesOptions) -> Running {
    let adapter = KubernetesAdapter::new(client, opts).expect("adapter");
    let status = adapter.status();
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(adapter.run(log.clone(), stop_rx));
    Running { stop, task, status }
}

impl Running {
    /// Stops the adapter and checks it ended cleanly.
    pub async fn stop(self) {
        self.stop.send_replace(true);
        let r = tokio::time::timeout(WAIT, self.task).await;
        match r {
            Ok(Ok(Ok(()))) => {}
            other => panic!("the adapter did not stop cleanly: {other:?}"),
        }
    }

    /// Waits until the status satisfies `done`.
    pub async fn wait_status(
        &mut self,
        what: &str,
        done: impl Fn(&KubernetesAdapterStatus) -> bool,
    ) {
        let ok = matches!(
            tokio::time::timeout(WAIT, self.status.wait_for(|s| done(s))).await,
            Ok(Ok(_))
        );
        assert!(
            ok,
            "timed out waiting for {what}; status: {:#?}",
            *self.status.borrow()
        );
    }

    /// Waits until the start-up resync is in the log.
    pub async fn wait_resynced(&mut self) {
        self.wait_status("the start-up resync", |s| s.resync_completed)
            .await;
    }
}

/// Polls `cond` until it holds, bounded by [`WAIT`].
pub async fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The endpoint upserted by `event`, if it is an endpoint upsert.
pub fn endpoint_of(event: &Event) -> Option<&deltapilot_proto::Endpoint> {
    match &event.payload {
        Some(Payload::EndpointUpsert(u)) => u.endpoint.as_ref(),
        _ => None,
    }
}

/// Endpoint keys of the seeded shop.
pub const EP1: &str = "ep/k8s/test/shop/reviews/reviews-1/10.1.0.1";
pub const EP2: &str = "ep/k8s/test/shop/reviews/reviews-2/10.1.0.2";
pub const SVC: &str = "svc/shop/reviews.shop.svc.cluster.local";
pub const VS: &str = "cfg/virtual_service/shop/reviews";

/// A small cluster: two Nodes in two zones, Service `shop/reviews` (port `http`
/// 9080 → 8080) with two ready Pods in one EndpointSlice, and a VirtualService.
pub fn seed_shop(fake: &FakeApiServer) {
    fake.apply(&node("n1", "eu-west", "eu-west-1a"));
    fake.apply(&node("n2", "eu-west", "eu-west-1b"));
    fake.apply(&pod(
        "shop",
        "reviews-1",
        &[("app", "reviews"), ("version", "v1")],
        "reviews-sa",
        "n1",
    ));
    fake.apply(&pod(
        "shop",
        "reviews-2",
        &[("app", "reviews"), ("version", "v2")],
        "reviews-sa",
        "n2",
    ));
    fake.apply(&service(
        "shop",
        "reviews",
        &[("http", 9080)],
        &[("app", "reviews")],
    ));
    fake.apply(&shop_slice(true));
    fake.apply_json(
        "VirtualService",
        istio(
            "VirtualService",
            "shop",
            "reviews",
            &[("app", "reviews")],
            serde_json::json!({"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "reviews"}}]}]}),
        ),
    );
}

/// The seeded slice, with `reviews-2` ready or not (then serving and terminating:
/// draining).
pub fn shop_slice(second_ready: bool) -> k8s_openapi::api::discovery::v1::EndpointSlice {
    let mut second = Ep::ready("reviews-2", "10.1.0.2", "n2");
    if !second_ready {
        second.ready = false;
        second.terminating = true;
    }
    slice(
        "shop",
        "reviews-abc12",
        "reviews",
        &[("http", 8080)],
        &[Ep::ready("reviews-1", "10.1.0.1", "n1"), second],
    )
}

/// The summary of the seeded shop's start-up resync.
pub fn shop_resync() -> Vec<String> {
    vec![
        "resync:STARTED".into(),
        format!("service_upsert:{SVC}"),
        format!("config_upsert:{VS}"),
        format!("endpoint_upsert:{EP1}"),
        format!("endpoint_upsert:{EP2}"),
        "resync:COMPLETED".into(),
    ]
}
