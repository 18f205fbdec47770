//! ServiceEntries and WorkloadEntries from the cluster route: the Kubernetes
//! adapter against the fake API server (real HTTP, real watch protocol) turns a
//! ServiceEntry's hosts into services, its inline endpoints and the
//! WorkloadEntries its `workloadSelector` selects into endpoints, with the same
//! mapping as the file adapter (`common::istio`). Label and selector changes
//! append exactly the affected entities; a relist appends nothing. The real
//! engine folds the log into the ClusterLoadAssignment of the entry's host.

mod support_k8s;

use deltapilot_proto::{self as pb, event::Payload};
use deltapilot_xds::generate::{GenOptions, build_all};
use serde_json::{Value, json};
use support_k8s::FakeApiServer;
use support_k8s::harness::*;
use support_k8s::objects::istio;

const HOST: &str = "pay.shop.internal";
const CLUSTER: &str = "outbound|8080||pay.shop.internal";
const SVC_PAY: &str = "svc/shop/pay.shop.internal";
const WE1: &str = "ep/k8s/test/_we/shop/pay/vm-1";
const WE2: &str = "ep/k8s/test/_we/shop/pay/vm-2";
const WE_CHECKED: &str = "ep/k8s/test/_we/shop/pay/vm-checked";
const INLINE: &str = "ep/k8s/test/_se/shop/ext/10.3.0.1";

fn pay_entry(app: &str) -> Value {
    istio(
        "ServiceEntry",
        "shop",
        "pay",
        &[],
        json!({
            "hosts": [HOST],
            "location": "MESH_INTERNAL",
            "resolution": "STATIC",
            "ports": [{"number": 8080, "name": "http", "protocol": "HTTP", "targetPort": 18080}],
            "workloadSelector": {"labels": {"app": app}}
        }),
    )
}

fn workload(name: &str, app: &str, address: &str) -> Value {
    istio(
        "WorkloadEntry",
        "shop",
        name,
        &[("app", app)],
        json!({"address": address, "locality": "eu/eu-1a", "serviceAccount": "pay-sa"}),
    )
}

fn seed(fake: &FakeApiServer) {
    seed_shop(fake);
    fake.apply_json("ServiceEntry", pay_entry("pay"));
    fake.apply_json(
        "ServiceEntry",
        istio(
            "ServiceEntry",
            "shop",
            "ext",
            &[],
            json!({
                "hosts": ["ext.example.com"],
                "resolution": "STATIC",
                "ports": [{"number": 443, "name": "tls", "protocol": "TLS"}],
                "endpoints": [{"address": "10.3.0.1"}, {"address": "ext-db.example.com"}]
            }),
        ),
    );
    fake.apply_json("WorkloadEntry", workload("vm-1", "pay", "10.2.0.1"));
    fake.apply_json("WorkloadEntry", workload("vm-2", "cart", "10.2.0.2"));
    let mut checked = workload("vm-checked", "pay", "10.2.0.9");
    checked["metadata"]["annotations"] = json!({"proxy.istio.io/health-checks-enabled": "true"});
    fake.apply_json("WorkloadEntry", checked);
}

/// Waits for the next `n` events after `base` (a change was just made);
/// returns the whole log and the summary of those events.
async fn after(
    log: &deltapilot_log::file::FileLog,
    base: usize,
    n: usize,
    what: &str,
) -> (Vec<deltapilot_proto::Event>, Vec<String>) {
    let events = wait_log(log, what, |s| s.len() >= base + n).await;
    let tail = summary(&events[base..]);
    (events, tail)
}

fn cla_has(events: &[deltapilot_proto::Event], ip: &str) -> bool {
    let state = fold_all(events);
    let (resources, _) = build_all(&state, &GenOptions::default());
    resources
        .endpoints
        .get(CLUSTER)
        .is_some_and(|r| r.bytes.windows(ip.len()).any(|w| w == ip.as_bytes()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_entries_and_selected_workload_entries_become_services_and_endpoints() {
    let fake = FakeApiServer::start().await;
    seed(&fake);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path());
    let opts = test_opts();
    let mut run = start(fake.client(opts.read_timeout), &log, opts);
    run.wait_resynced().await;
    let events = all_events(&log).await;
    let s = summary(&events);
    for want in [
        format!("service_upsert:{SVC_PAY}"),
        "service_upsert:svc/shop/ext.example.com".to_owned(),
        format!("endpoint_upsert:{WE1}"),
        format!("endpoint_upsert:{WE_CHECKED}"),
        format!("endpoint_upsert:{INLINE}"),
        "config_upsert:cfg/service_entry/shop/pay".to_owned(),
        "config_upsert:cfg/workload_entry/shop/vm-2".to_owned(),
    ] {
        assert!(s.contains(&want), "{want} missing from {s:#?}");
    }
    assert!(
        !s.contains(&format!("endpoint_upsert:{WE2}")),
        "vm-2 is not selected"
    );
    assert_eq!(
        s.iter().filter(|e| e.contains("/_se/shop/ext/")).count(),
        1,
        "the hostname endpoint is left out: {s:#?}"
    );
    let ep = |key: &str| {
        events
            .iter()
            .find_map(|e| match &e.payload {
                Some(Payload::EndpointUpsert(u)) if u.key == key => u.endpoint.clone(),
                _ => None,
            })
            .expect("endpoint")
    };
    let vm1 = ep(WE1);
    assert_eq!(vm1.address, "10.2.0.1");
    assert_eq!(vm1.ports.get("http"), Some(&18080), "the port's targetPort");
    assert_eq!(vm1.service_account, "pay-sa");
    assert_eq!(vm1.health(), pb::Health::Healthy);
    assert_eq!(
        ep(WE_CHECKED).health(),
        pb::Health::Unhealthy,
        "health checks on, no probe result yet"
    );
    let se_config = events
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::ConfigUpsert(c)) => c.config.clone().filter(|c| c.name == "ext"),
            _ => None,
        })
        .expect("ext config");
    assert!(
        !se_config.spec_json.contains("endpoints"),
        "inline endpoints travel as endpoint entities only: {}",
        se_config.spec_json
    );
    assert!(cla_has(&events, "10.2.0.1"), "EDS of {CLUSTER} has vm-1");
    assert!(!cla_has(&events, "10.2.0.2"));
    let state = fold_all(&events);
    assert_eq!(state.endpoints_of(HOST).count(), 2);

    // vm-2 starts matching: exactly its config and its endpoint.
    fake.apply_json("WorkloadEntry", workload("vm-2", "pay", "10.2.0.2"));
    let (events, tail) = after(&log, events.len(), 2, "vm-2 joined").await;
    assert_eq!(
        tail,
        [
            "config_upsert:cfg/workload_entry/shop/vm-2".to_owned(),
            format!("endpoint_upsert:{WE2}"),
        ]
    );
    assert!(cla_has(&events, "10.2.0.2"));

    // vm-1 stops matching: exactly its endpoint goes.
    fake.apply_json("WorkloadEntry", workload("vm-1", "billing", "10.2.0.1"));
    let (events, tail) = after(&log, events.len(), 2, "vm-1 left").await;
    assert_eq!(
        tail,
        [
            "config_upsert:cfg/workload_entry/shop/vm-1".to_owned(),
            format!("endpoint_delete:{WE1}"),
        ]
    );
    assert!(!cla_has(&events, "10.2.0.1"));

    // The selector moves to `billing`: vm-1 in, vm-2 and vm-checked out.
    fake.apply_json("ServiceEntry", pay_entry("billing"));
    let (events, tail) = after(&log, events.len(), 4, "selector moved").await;
    assert_eq!(
        tail,
        [
            "config_upsert:cfg/service_entry/shop/pay".to_owned(),
            format!("endpoint_upsert:{WE1}"),
            format!("endpoint_delete:{WE2}"),
            format!("endpoint_delete:{WE_CHECKED}"),
        ]
    );

    // A relist of the unchanged cluster (every watch expired) appends nothing.
    let base = events.len();
    fake.pause_watches();
    fake.expire_watches();
    run.wait_status("every watch relisted", |s| {
        s.watches.iter().all(|w| w.relists_total >= 1)
    })
    .await;
    assert_eq!(
        summary(&all_events(&log).await[base..]),
        Vec::<String>::new()
    );

    // The entry goes: its service, config and joined endpoint go.
    fake.delete_kind("ServiceEntry", "shop", "pay");
    let events = wait_log(&log, "entry deleted", |s| s.len() >= base + 3).await;
    let mut tail = summary(&events[base..]);
    tail.sort();
    assert_eq!(
        tail,
        [
            "config_delete:cfg/service_entry/shop/pay".to_owned(),
            format!("endpoint_delete:{WE1}"),
            format!("service_delete:{SVC_PAY}"),
        ]
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_service_keeps_its_host_and_a_selector_with_endpoints_is_malformed() {
    let fake = FakeApiServer::start().await;
    seed_shop(&fake);
    // Claims the host of Service shop/reviews.
    fake.apply_json(
        "ServiceEntry",
        istio(
            "ServiceEntry",
            "shop",
            "shadow",
            &[],
            json!({"hosts": ["reviews.shop.svc.cluster.local"], "resolution": "STATIC",
                   "ports": [{"number": 1, "name": "other"}],
                   "endpoints": [{"address": "10.4.0.1"}]}),
        ),
    );
    fake.apply_json(
        "ServiceEntry",
        istio(
            "ServiceEntry",
            "shop",
            "both",
            &[],
            json!({"hosts": ["both.example"], "workloadSelector": {"labels": {"a": "b"}},
                   "endpoints": [{"address": "10.5.0.1"}]}),
        ),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path());
    let opts = test_opts();
    let mut run = start(fake.client(opts.read_timeout), &log, opts);
    run.wait_resynced().await;
    let events = all_events(&log).await;
    let state = fold_all(&events);
    let reviews = state
        .get_service("reviews.shop.svc.cluster.local")
        .expect("service");
    assert_eq!(reviews.ports[0].number, 9080, "the Service wins the host");
    let s = summary(&events);
    assert!(!s.iter().any(|e| e.contains("both")), "{s:#?}");
    let problems = run.status.borrow().problems.clone();
    assert!(
        problems
            .iter()
            .any(|p| p.name == "both" && p.reason.contains("workloadSelector")),
        "{problems:#?}"
    );
    run.stop().await;
}
