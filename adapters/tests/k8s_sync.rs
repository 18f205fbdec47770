//! The Kubernetes adapter against the fake API server: the start-up resync, what
//! each kind of change appends (exactly), malformed objects, selection, Istio
//! CRDs, and restarts. Events land in a real embedded log and are folded by the
//! real engine. Every wait is bounded.

mod support_k8s;

use deltapilot_adapters::kubernetes::{KubernetesOptions, ResourceKind, SyncState};
use deltapilot_proto::{self as pb, event::Payload};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;
use support_k8s::FakeApiServer;
use support_k8s::harness::*;
use support_k8s::objects::{Ep, pod, service, slice};

fn client(fake: &FakeApiServer, opts: &KubernetesOptions) -> kube::Client {
    fake.client(opts.read_timeout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_sync_appends_one_resync_with_every_entity_and_the_engine_accepts_it() {
    let fake = FakeApiServer::start().await;
    seed_shop(&fake);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path());
    // One object per page: every list is paginated with `continue`.
    let opts = KubernetesOptions {
        page_size: Some(1),
        ..test_opts()
    };
    let mut run = start(client(&fake, &opts), &log, opts);
    run.wait_resynced().await;
    let events = all_events(&log).await;
    assert_eq!(summary(&events), shop_resync());
    assert!(
        fake.requests()
            .iter()
            .any(|r| r.path == "/api/v1/pods" && r.param("continue").is_some()),
        "the two Pods came in two pages"
    );
    let generation = events[0].generation;
    assert!(generation > 0);
    assert!(
        events
            .iter()
            .all(|e| e.generation == generation && e.source == "k8s:test")
    );

    let ep1 = endpoint_of(&events[3]).expect("endpoint");
    assert_eq!(ep1.address, "10.1.0.1");
    assert_eq!(ep1.ports.get("http"), Some(&8080));
    assert_eq!(ep1.labels.get("version").map(String::as_str), Some("v1"));
    assert_eq!(ep1.service_account, "reviews-sa");
    assert_eq!(ep1.health(), pb::Health::Healthy);
    let loc = ep1.locality.as_ref().expect("locality");
    assert_eq!(
        (loc.region.as_str(), loc.zone.as_str()),
        ("eu-west", "eu-west-1a")
    );
    let Some(Payload::ConfigUpsert(vs)) = &events[2].payload else {
        panic!("not a config upsert: {:?}", events[2])
    };
    let vs = vs.config.as_ref().expect("config");
    assert_eq!(
        vs.spec_json,
        r#"{"hosts":["reviews"],"http":[{"route":[{"destination":{"host":"reviews"}}]}]}"#
    );

    let state = fold_all(&events);
    let svc = state
        .get_service("reviews.shop.svc.cluster.local")
        .expect("service folded");
    assert_eq!(svc.ports[0].number, 9080);
    assert_eq!(
        state.endpoints_of("reviews.shop.svc.cluster.local").count(),
        2
    );
    assert_eq!(state.configs().len(), 1);

    let st = run.status.borrow().clone();
    assert!(st.registry_healthy(), "{st:#?}");
    assert_eq!(st.entities_in_view, 4);
    assert_eq!(st.events_emitted_total, 6);
    assert_eq!(st.kind_state(ResourceKind::Pod), Some(SyncState::Synced));
    let pods = st
        .watches
        .iter()
        .find(|w| w.kind == ResourceKind::Pod)
        .expect("pods");
    assert_eq!(pods.objects, 2);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_change_appends_exactly_the_entity_it_changes() {
    let fake = FakeApiServer::start().await;
    seed_shop(&fake);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path());
    let opts = test_opts();
    let mut run = start(client(&fake, &opts), &log, opts);
    run.wait_resynced().await;
    let base = all_events(&log).await.len();

    // A Pod label change: that endpoint, once.
    fake.apply(&pod(
        "shop",
        "reviews-1",
        &[("app", "reviews"), ("version", "v3")],
        "reviews-sa",
        "n1",
    ));
    let events = wait_log(&log, "the relabelled endpoint", |s| s.len() > base).await;
    assert_eq!(
        summary(&events[base..]),
        vec![format!("endpoint_upsert:{EP1}")]
    );
    let ep = endpoint_of(&events[base]).expect("endpoint");
    assert_eq!(ep.labels.get("version").map(String::as_str), Some("v3"));

    // Readiness flips to terminating-but-serving: one health change.
    fake.apply(&shop_slice(false));
    let events = wait_log(&log, "the draining endpoint", |s| s.len() > base + 1).await;
    assert_eq!(
        summary(&events[base + 1..]),
        vec![format!("endpoint_upsert:{EP2}")]
    );
    assert_eq!(
        endpoint_of(&events[base + 1]).map(|e| e.health()),
        Some(pb::Health::Draining)
    );

    // A Pod the slice does not list, and an unrelated change of the Pod's status
    // content that maps to the same facts: nothing.
    fake.apply(&pod("shop", "unrelated", &[("app", "x")], "default", "n1"));
    fake.apply(&pod(
        "shop",
        "reviews-1",
        &[("app", "reviews"), ("version", "v3")],
        "reviews-sa",
        "n1",
    ));
    // A marker change we can wait for, to know the two above were processed.
    fake.apply(&service(
        "shop",
        "reviews",
        &[("http", 9080), ("grpc-api", 9090)],
        &[("app", "reviews")],
    ));
    let events = wait_log(&log, "the service's new port", |s| s.len() > base + 2).await;
    assert_eq!(
        summary(&events[base + 2..]),
        vec![format!("service_upsert:{SVC}")]
    );

    // Deleting the Service deletes its endpoints, then itself.
    fake.delete::<Service>("shop", "reviews");
    let events = wait_log(&log, "the deletes", |s| s.len() >= base + 6).await;
    assert_eq!(
        summary(&events[base + 3..]),
        vec![
            format!("endpoint_delete:{EP1}"),
            format!("endpoint_delete:{EP2}"),
            format!("service_delete:{SVC}"),
        ]
    );
    // The slice's later deletion (garbage collection) appends nothing more.
    fake.delete::<EndpointSlice>("shop", "reviews-abc12");
    fake.delete_kind("VirtualService", "shop", "reviews");
    let events = wait_log(&log, "the config delete", |s| s.len() > base + 6).await;
    assert_eq!(
        summary(&events[base + 6..]),
        vec![format!("config_delete:{VS}")]
    );

    let state = fold_all(&events);
    assert!(
        state
            .get_service("reviews.shop.svc.cluster.local")
            .is_none()
    );
    run.wait_status("an empty view", |s| s.entities_in_view == 0)
        .await;
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_objects_are_skipped_and_counted_and_the_watch_goes_on() {
    let fake = FakeApiServer::start().await;
    seed_shop(&fake);
    // Listed at start: a Service whose port is out of range.
    fake.apply_json(
        "Service",
        json!({"metadata": {"name": "broken", "namespace": "shop"},
               "spec": {"ports": [{"name": "http", "port": 70000}]}}),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path());
    let opts = test_opts();
    let mut run = start(client(&fake, &opts), &log, opts);
    run.wait_resynced().await;
    assert_eq!(summary(&all_events(&log).await), shop_resync());
    {
        let st = run.status.borrow();
        assert_eq!(st.malformed_objects_total, 1);
        assert_eq!(st.problems.len(), 1);
        assert_eq!(st.problems[0].name, "broken");
        assert!(
            st.problems[0].reason.contains("70000"),
            "{}",
            st.problems[0]
        );
    }
    let base = all_events(&log).await.len();

    // A good Service turned malformed keeps its last good state...
    fake.apply_json(
        "Service",
        json!({"metadata": {"name": "reviews", "namespace": "shop"},
               "spec": {"ports": [{"name": "http", "port": "not-a-number"}]}}),
    );
    run.wait_status("the second malformed object", |s| {
        s.malformed_objects_total == 2
    })
    .await;
    // ...an undecodable watch line is skipped too...
    fake.inject_watch_line("{this is not json");
    run.wait_status("the undecodable line", |s| s.malformed_objects_total >= 3)
        .await;
    // ...and the watch goes on: fixing the broken Service brings it in.
    fake.apply(&service("shop", "broken", &[("http", 80)], &[]));
    let events = wait_log(&log, "the fixed service", |s| s.len() > base).await;
    assert_eq!(
        summary(&events[base..]),
        vec!["service_upsert:svc/shop/broken.shop.svc.cluster.local".to_owned()]
    );
    run.wait_status("the fixed problem list", |s| {
        s.problems.iter().all(|p| p.name != "broken")
    })
    .await;
    assert!(
        fold_all(&events)
            .get_service("reviews.shop.svc.cluster.local")
            .is_some()
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_and_label_selection_are_respected() {
    let fake = FakeApiServer::start().await;
    seed_shop(&fake);
    // Another namespace, same shape.
    fake.apply(&pod("other", "o-1", &[("app", "o")], "default", "n1"));
    fake.apply(&service(
        "other",
        "o",
        &[("http", 80)],
        &[("app", "reviews")],
    ));
    fake.apply(&slice(
        "other",
        "o-x",
        "o",
        &[("http", 8080)],
        &[Ep::ready("o-1", "10.2.0.1", "n1")],
    ));
    // In the selected namespace, a Service the selector excludes.
    fake.apply(&service(
        "shop",
        "internal",
        &[("http", 80)],
        &[("app", "internal")],
    ));
    fake.apply(&slice(
        "shop",
        "internal-x",
        "internal",
        &[("http", 80)],
        &[Ep::ready("reviews-1", "10.1.0.1", "n1")],
    ));

    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path());
    // Unpaginated lists, from the API server's cache.
    let opts = KubernetesOptions {
        namespaces: vec!["shop".into()],
        label_selector: Some("app in (reviews)".into()),
        page_size: None,
        ..test_opts()
    };
    let mut run = start(client(&fake, &opts), &log, opts);
    run.wait_resynced().await;
    let events = all_events(&log).await;
    assert_eq!(summary(&events), shop_resync());
    let ep1 = endpoint_of(&events[3]).expect("endpoint");
    assert_eq!(ep1.ports.get("http"), Some(&8080));

    // Relabelling the excluded Service into the selection brings it in (the API
    // server turns the modification into an ADDED for this watch) with its own
    // endpoint entity for the shared Pod; relabelling it out removes both again.
    const INTERNAL_EP: &str = "ep/k8s/test/shop/internal/reviews-1/10.1.0.1";
    fake.apply(&service(
        "shop",
        "internal",
        &[("http", 80)],
        &[("app", "reviews")],
    ));
    let events = wait_log(&log, "the selected service", |s| s.len() >= 8).await;
    assert_eq!(
        summary(&events[6..]),
        vec![
            "service_upsert:svc/shop/internal.shop.svc.cluster.local".to_owned(),
            format!("endpoint_upsert:{INTERNAL_EP}"),
        ]
    );
    assert_eq!(
        endpoint_of(&events[7]).and_then(|e| e.ports.get("http")),
        Some(&80)
    );
    fake.apply(&service(
        "shop",
        "internal",
        &[("http", 80)],
        &[("app", "internal")],
    ));
    let events = wait_log(&log, "the deselected service", |s| s.len() >= 10).await;
    assert_eq!(
        summary(&events[8..]),
        vec![
            format!("endpoint_delete:{INTERNAL_EP}"),
            "service_delete:svc/shop/internal.shop.svc.cluster.local".to_owned(),
        ]
    );
    // Changes in the other namespace are never seen.
    fake.apply(&pod("other", "o-1", &[("app", "o2")], "default", "n1"));
    fake.apply(&pod(
        "shop",
        "reviews-2",
        &[("app", "reviews"), ("version", "v9")],
        "reviews-sa",
        "n2",
    ));
    let events = wait_log(&log, "the shop pod change", |s| s.len() >= 11).await;
    assert_eq!(
        summary(&events[10..]),
        vec![format!("endpoint_upsert:{EP2}")]
    );
    assert!(
        fake.requests()
            .iter()
            .all(|r| r.path.starts_with("/api/v1/nodes") || r.path.contains("/namespaces/shop/")),
        "every namespaced request is scoped to the selected namespace"
    );
    assert!(
        fake.requests()
            .iter()
            .filter(|r| r.path.ends_with("/services"))
            .all(|r| r.param("labelSelector").is_some())
    );
    assert!(
        fake.requests().iter().filter(|r| r.is_list()).all(|r| r
            .param("resourceVersion")
            .as_deref()
            == Some("0")
            && r.param("limit").is_none())
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_istio_crd_is_reported_and_retried_and_never_blocks_the_resync() {
    let fake = FakeApiServer::start().await;
    seed_shop(&fake);
    fake.set_istio_installed(false);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path());
    let opts = test_opts();
    let mut run = start(client(&fake, &opts), &log, opts);
    run.wait_resynced().await;
    let events = all_events(&log).await;
    assert_eq!(
        summary(&events),
        vec![
            "resync:STARTED".to_owned(),
            format!("service_upsert:{SVC}"),
            format!("endpoint_upsert:{EP1}"),
            format!("endpoint_upsert:{EP2}"),
            "resync:COMPLETED".into(),
        ]
    );
    {
        let st = run.status.borrow();
        let vs = ResourceKind::Istio(pb::ConfigKind::VirtualService);
        assert_eq!(st.kind_state(vs), Some(SyncState::Absent), "{st:#?}");
        assert!(st.registry_healthy());
        let w = st.watches.iter().find(|w| w.kind == vs).expect("watch");
        assert!(
            w.last_error.as_deref().is_some_and(|e| e.contains("404")),
            "{w:#?}"
        );
    }
    // The CRD gets installed: retried with backoff, its objects appear.
    fake.set_istio_installed(true);
    let events = wait_log(&log, "the VirtualService", |s| s.len() >= 6).await;
    assert_eq!(summary(&events[5..]), vec![format!("config_upsert:{VS}")]);
    run.wait_status("every Istio kind synced", |s| {
        s.kind_state(ResourceKind::Istio(pb::ConfigKind::Sidecar)) == Some(SyncState::Synced)
    })
    .await;
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_resyncs_under_a_new_generation_and_sweeps_what_vanished_meanwhile() {
    let fake = FakeApiServer::start().await;
    seed_shop(&fake);
    let dir = tempfile::tempdir().expect("tempdir");
    let state_dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path());
    let opts = KubernetesOptions {
        state_dir: Some(state_dir.path().to_owned()),
        ..test_opts()
    };
    let mut run = start(client(&fake, &opts), &log, opts.clone());
    run.wait_resynced().await;
    let first_gen = run.status.borrow().generation;
    run.stop().await;

    // While the adapter is down: a Pod goes away with its endpoint.
    fake.delete::<Pod>("shop", "reviews-2");
    fake.apply(&slice(
        "shop",
        "reviews-abc12",
        "reviews",
        &[("http", 8080)],
        &[Ep::ready("reviews-1", "10.1.0.1", "n1")],
    ));
    let mut run = start(client(&fake, &opts), &log, opts);
    run.wait_resynced().await;
    let events = all_events(&log).await;
    let second: Vec<_> = events
        .iter()
        .filter(|e| e.generation != first_gen)
        .cloned()
        .collect();
    assert!(second[0].generation > first_gen);
    assert_eq!(
        summary(&second),
        vec![
            "resync:STARTED".to_owned(),
            format!("service_upsert:{SVC}"),
            format!("config_upsert:{VS}"),
            format!("endpoint_upsert:{EP1}"),
            "resync:COMPLETED".into(),
        ],
        "the second run resyncs only what exists; no delete is needed"
    );
    let state = fold_all(&events);
    let eps: Vec<String> = state
        .endpoints_of("reviews.shop.svc.cluster.local")
        .map(|e| e.address.to_string())
        .collect();
    assert_eq!(
        eps,
        vec!["10.1.0.1"],
        "the engine swept the vanished endpoint"
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_cluster_resyncs_in_batches_and_then_stays_incremental() {
    const SERVICES: usize = 500;
    const PODS_PER_SERVICE: usize = 4;
    let fake = FakeApiServer::start().await;
    fake.apply(&support_k8s::objects::node("n1", "eu-west", "eu-west-1a"));
    let names: Vec<String> = (0..SERVICES).map(|i| format!("svc-{i:04}")).collect();
    for (i, name) in names.iter().enumerate() {
        let mut eps = Vec::new();
        for p in 0..PODS_PER_SERVICE {
            let pod_name = format!("{name}-{p}");
            let ip = format!("10.{}.{}.{}", i / 250, i % 250, p + 1);
            fake.apply(&pod("big", &pod_name, &[("app", name)], "sa", "n1"));
            eps.push(Ep::ready(&pod_name, &ip, "n1"));
        }
        fake.apply(&service("big", name, &[("http", 80)], &[]));
        fake.apply(&slice(
            "big",
            &format!("{name}-x"),
            name,
            &[("http", 8080)],
            &eps,
        ));
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path());
    let opts = KubernetesOptions {
        append_batch_max: 500,
        istio: false,
        ..test_opts()
    };
    let started = std::time::Instant::now();
    let mut run = start(client(&fake, &opts), &log, opts);
    run.wait_resynced().await;
    eprintln!(
        "resync of {} services and {} endpoints took {:?}",
        SERVICES,
        SERVICES * PODS_PER_SERVICE,
        started.elapsed()
    );
    let events = all_events(&log).await;
    let s = summary(&events);
    assert_eq!(events.len(), 2 + SERVICES * (1 + PODS_PER_SERVICE));
    assert_eq!(s.first().map(String::as_str), Some("resync:STARTED"));
    assert_eq!(s.last().map(String::as_str), Some("resync:COMPLETED"));
    let state = fold_all(&events);
    assert_eq!(
        state.endpoints_of("svc-0123.big.svc.cluster.local").count(),
        PODS_PER_SERVICE
    );

    // One Pod's change is one event, whatever the cluster's size.
    fake.apply(&pod("big", "svc-0123-2", &[("app", "changed")], "sa", "n1"));
    let events = wait_log(&log, "the pod change", |s| s.len() > events.len()).await;
    assert_eq!(
        summary(&events[2 + SERVICES * (1 + PODS_PER_SERVICE)..]),
        vec!["endpoint_upsert:ep/k8s/test/big/svc-0123/svc-0123-2/10.0.123.3".to_owned()]
    );
    run.stop().await;
}

/// The embedded log, refusing appends while `down` is set.
struct FlakyLog {
    inner: std::sync::Arc<deltapilot_log::file::FileLog>,
    down: std::sync::atomic::AtomicBool,
}

impl deltapilot_log::EventLog for FlakyLog {
    async fn append(
        &self,
        events: &[pb::Event],
    ) -> deltapilot_log::Result<Vec<deltapilot_log::RecordPos>> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(deltapilot_log::Error::Closed);
        }
        self.inner.append(events).await
    }

    async fn read(
        &self,
        from: &deltapilot_log::Position,
        limit: usize,
    ) -> deltapilot_log::Result<Vec<deltapilot_log::Record>> {
        self.inner.read(from, limit).await
    }

    fn follow(
        &self,
        from: deltapilot_log::Position,
    ) -> futures::stream::BoxStream<'static, deltapilot_log::Result<deltapilot_log::FollowItem>>
    {
        self.inner.follow(from)
    }

    async fn head(&self) -> deltapilot_log::Result<deltapilot_log::Position> {
        self.inner.head().await
    }

    fn start(&self) -> deltapilot_log::Position {
        self.inner.start()
    }

    fn max_event_bytes(&self) -> usize {
        self.inner.max_event_bytes()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_that_refuses_appends_is_retried_and_gets_the_latest_state() {
    let fake = FakeApiServer::start().await;
    seed_shop(&fake);
    let dir = tempfile::tempdir().expect("tempdir");
    let file_log = open_log(dir.path());
    let log = std::sync::Arc::new(FlakyLog {
        inner: file_log.clone(),
        down: std::sync::atomic::AtomicBool::new(true),
    });
    let opts = test_opts();
    let adapter =
        deltapilot_adapters::kubernetes::KubernetesAdapter::new(client(&fake, &opts), opts)
            .expect("adapter");
    let mut status = adapter.status();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(adapter.run(log.clone(), stop_rx));
    let failing = matches!(
        tokio::time::timeout(WAIT, status.wait_for(|s| s.append_failures_total >= 2)).await,
        Ok(Ok(_))
    );
    assert!(failing, "{:#?}", *status.borrow());
    assert!(status.borrow().last_append_error.is_some());
    // While the log is down the cluster changes twice; only the latest state goes out.
    fake.apply(&pod(
        "shop",
        "reviews-1",
        &[("app", "reviews"), ("version", "v5")],
        "reviews-sa",
        "n1",
    ));
    fake.apply(&pod(
        "shop",
        "reviews-1",
        &[("app", "reviews"), ("version", "v6")],
        "reviews-sa",
        "n1",
    ));
    log.down.store(false, std::sync::atomic::Ordering::SeqCst);
    let done = matches!(
        tokio::time::timeout(
            WAIT,
            status.wait_for(|s| s.resync_completed && s.last_append_error.is_none())
        )
        .await,
        Ok(Ok(_))
    );
    assert!(done, "{:#?}", *status.borrow());
    // The resync carries whatever the adapter had seen when the log came back;
    // later upserts of that endpoint bring the rest, in order, ending at v6.
    let version_of_ep1 = |events: &[pb::Event]| -> Vec<String> {
        events
            .iter()
            .filter(|e| e.key().as_deref() == Some(EP1))
            .filter_map(endpoint_of)
            .filter_map(|e| e.labels.get("version").cloned())
            .collect()
    };
    let events = wait_log(&file_log, "v6 in the log", |s| {
        s.len() >= 6 && s.iter().filter(|k| k.ends_with(EP1)).count() >= 1
    })
    .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut events = events;
    while version_of_ep1(&events).last().map(String::as_str) != Some("v6") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            version_of_ep1(&events)
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        events = all_events(&file_log).await;
    }
    assert_eq!(summary(&events[..6]), shop_resync());
    assert!(
        summary(&events[6..])
            .iter()
            .all(|k| k == &format!("endpoint_upsert:{EP1}")),
        "{:?}",
        summary(&events)
    );
    let versions = version_of_ep1(&events);
    let order = ["v1", "v5", "v6"];
    let ranks: Vec<usize> = versions
        .iter()
        .map(|v| order.iter().position(|o| o == v).expect("a known version"))
        .collect();
    assert!(ranks.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
    stop.send_replace(true);
    let stopped = tokio::time::timeout(WAIT, task).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
}
