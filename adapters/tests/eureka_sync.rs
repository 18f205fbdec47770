//! The running Eureka adapter against a fake Eureka server over real HTTP, appending
//! to the real embedded log: the start-up resync, deltas (ADDED, MODIFIED,
//! DELETED), hashcode reconciliation, Eureka's JSON quirks, malformed instances,
//! and a restart under a new generation folded by the real engine. Every wait is
//! bounded.

mod support_eureka;

use std::sync::Arc;

use deltapilot_adapters::eureka::EurekaOptions;
use deltapilot_log::file::FileLog;
use deltapilot_proto::{self as pb, Event};
use serde_json::json;
use support_eureka::harness::{
    all_events, endpoint, fast, fold_all, start, summary, wait_log, wait_status,
};
use support_eureka::{FakeEureka, instance};

fn open_log(dir: &std::path::Path) -> Arc<FileLog> {
    Arc::new(FileLog::open(dir, Default::default()).expect("log"))
}

/// ORDERS (two instances, one DOWN) and PAYMENTS (one instance), as a Eureka
/// server would hold them.
fn seed(fake: &FakeEureka) {
    let mut o1 = instance(
        "ORDERS",
        "orders-1:8080",
        "10.0.0.11",
        8080,
        "UP",
        "Orders.Example",
    );
    o1["securePort"] = json!({"$": 8443, "@enabled": "true"});
    o1["metadata"] = json!({"version": "v1", "zone": "zone-a", "region": "region-1"});
    fake.put(o1);
    fake.put(instance(
        "ORDERS",
        "orders-2:8080",
        "10.0.0.12",
        8080,
        "DOWN",
        "orders.example",
    ));
    fake.put(instance(
        "PAYMENTS",
        "payments-1",
        "10.0.1.1",
        9000,
        "UP",
        "payments.example",
    ));
    fake.clear_recent();
}

const RESYNC: [&str; 7] = [
    "resync:STARTED",
    "service_upsert:svc/eureka/orders.example",
    "service_upsert:svc/eureka/payments.example",
    "endpoint_upsert:ep/eureka/ORDERS/orders-1:8080",
    "endpoint_upsert:ep/eureka/ORDERS/orders-2:8080",
    "endpoint_upsert:ep/eureka/PAYMENTS/payments-1",
    "resync:COMPLETED",
];

/// Waits for `n` more events than `before` and returns exactly the new ones.
async fn next_events(log: &FileLog, before: usize, n: usize, what: &str) -> Vec<Event> {
    let events = wait_log(log, what, |s| s.len() >= before + n).await;
    events[before..].to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resync_then_deltas_append_exactly_the_changed_entities() {
    let fake = FakeEureka::start("/eureka/v2").await;
    seed(&fake);
    let data = tempfile::tempdir().expect("log dir");
    let log = open_log(data.path());
    let mut run = start(fast(&fake.url()), &log);

    let events = wait_log(&log, "the start-up resync", |s| s.len() >= RESYNC.len()).await;
    assert_eq!(summary(&events), RESYNC);
    let generation = events[0].generation;
    assert!(
        events
            .iter()
            .all(|e| e.source == "eureka" && e.generation == generation)
    );

    // Every field of the first endpoint and of its service.
    let o1 = endpoint(&events[3]).expect("endpoint");
    assert_eq!(o1.address, "10.0.0.11");
    assert_eq!(
        o1.ports
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect::<Vec<_>>(),
        [("http", 8080), ("https", 8443)]
    );
    assert_eq!(o1.health, pb::Health::Healthy as i32);
    assert_eq!(o1.labels.get("version").map(String::as_str), Some("v1"));
    let loc = o1.locality.as_ref().expect("locality");
    assert_eq!(
        (loc.region.as_str(), loc.zone.as_str()),
        ("region-1", "zone-a")
    );
    assert_eq!(
        o1.services,
        [pb::ServiceRef {
            namespace: "eureka".into(),
            hostname: "orders.example".into()
        }]
    );
    assert_eq!(
        endpoint(&events[4]).expect("o2").health,
        pb::Health::Unhealthy as i32
    );
    let Some(pb::event::Payload::ServiceUpsert(u)) = &events[1].payload else {
        panic!("not a service: {:?}", events[1]);
    };
    let svc = u.service.as_ref().expect("service");
    let ports: Vec<(&str, u32)> = svc
        .ports
        .iter()
        .map(|p| (p.name.as_str(), p.number))
        .collect();
    assert_eq!(ports, [("http", 8080), ("https", 8443)]);
    wait_status(&mut run.status, "resync completed", |s| {
        s.resync_completed && s.entities_in_view == 5 && s.registry_reachable
    })
    .await;

    // ADDED: one endpoint, nothing else (the service's usual port does not move).
    let mut n = events.len();
    fake.put(instance(
        "ORDERS",
        "orders-3:8080",
        "10.0.0.13",
        8080,
        "STARTING",
        "orders.example",
    ));
    let new = next_events(&log, n, 1, "the added instance").await;
    assert_eq!(
        summary(&new),
        ["endpoint_upsert:ep/eureka/ORDERS/orders-3:8080"]
    );
    assert_eq!(
        endpoint(&new[0]).expect("o3").health,
        pb::Health::NotReady as i32
    );
    n += 1;

    // MODIFIED: DOWN → OUT_OF_SERVICE is one endpoint upsert, draining.
    fake.put(instance(
        "ORDERS",
        "orders-2:8080",
        "10.0.0.12",
        8080,
        "OUT_OF_SERVICE",
        "orders.example",
    ));
    let new = next_events(&log, n, 1, "the modified instance").await;
    assert_eq!(
        summary(&new),
        ["endpoint_upsert:ep/eureka/ORDERS/orders-2:8080"]
    );
    assert_eq!(
        endpoint(&new[0]).expect("o2").health,
        pb::Health::Draining as i32
    );
    n += 1;

    // DELETED, the last instance of its VIP: the endpoint, then its service.
    fake.remove("PAYMENTS", "payments-1");
    let new = next_events(&log, n, 2, "the deleted instance").await;
    assert_eq!(
        summary(&new),
        [
            "endpoint_delete:ep/eureka/PAYMENTS/payments-1",
            "service_delete:svc/eureka/payments.example"
        ]
    );
    n += 2;

    // The fake repeats every recorded change in each delta, as a real server does
    // for minutes: applying them again appends nothing, and no full fetch is needed.
    let st = run.polls(5).await;
    assert_eq!(
        all_events(&log).await.len(),
        n,
        "{:#?}",
        summary(&all_events(&log).await)
    );
    assert_eq!(
        (st.full_fetches_total, st.hashcode_mismatches_total),
        (1, 0),
        "{st:#?}"
    );
    assert!(st.delta_fetches_total >= 5);
    assert_eq!(
        (st.applications, st.instances, st.entities_in_view),
        (1, 3, 4)
    );

    let model = fold_all(&all_events(&log).await);
    assert_eq!(model.endpoint_count("orders.example"), 3);
    assert!(model.get_service("payments.example").is_none());
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hashcode_mismatch_refetches_in_full_without_churn() {
    let fake = FakeEureka::start("/eureka/v2").await;
    seed(&fake);
    let data = tempfile::tempdir().expect("log dir");
    let log = open_log(data.path());
    let mut run = start(fast(&fake.url()), &log);
    let n = wait_log(&log, "the resync", |s| s.len() >= RESYNC.len())
        .await
        .len();

    // Changes the deltas never mention: only the hashcode reveals them.
    fake.put_silently(instance(
        "ORDERS",
        "orders-9",
        "10.0.0.19",
        8080,
        "UP",
        "orders.example",
    ));
    fake.remove_silently("ORDERS", "orders-2:8080");
    let new = next_events(&log, n, 2, "the silent changes").await;
    assert_eq!(
        summary(&new),
        [
            "endpoint_upsert:ep/eureka/ORDERS/orders-9",
            "endpoint_delete:ep/eureka/ORDERS/orders-2:8080"
        ],
        "only what changed: no delete and re-create of the rest"
    );
    let st = wait_status(&mut run.status, "the mismatch counted", |s| {
        s.hashcode_mismatches_total >= 1 && s.full_fetches_total >= 2
    })
    .await;
    assert_eq!(st.last_hashcode.as_deref(), Some("UP_3_"), "{st:#?}");

    // Once reconciled, deltas match again: no more full fetches, nothing appended.
    let before = run.status.borrow().full_fetches_total;
    let st = run.polls(5).await;
    assert_eq!(st.full_fetches_total, before, "{st:#?}");
    assert_eq!(all_events(&log).await.len(), n + 2);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spring_base_path_lists_of_one_and_numbers_as_strings() {
    let fake = FakeEureka::start("/eureka").await;
    fake.set_single_object_quirk(true);
    let mut inst = instance("CART", "cart-1", "10.0.2.1", 7000, "UP", "cart.example");
    inst["port"] = json!({"@enabled": "true", "$": "7000"});
    inst["securePort"] = json!({"@enabled": "true", "$": "7443"});
    inst["dataCenterInfo"] = json!({
        "@class": "com.netflix.appinfo.AmazonInfo", "name": "Amazon",
        "metadata": {"availability-zone": "us-east-1c", "instance-id": "i-0123"}
    });
    fake.put(inst);
    fake.clear_recent();
    let data = tempfile::tempdir().expect("log dir");
    let log = open_log(data.path());
    let run = start(fast(&format!("{}/", fake.url())), &log);

    let events = wait_log(&log, "the resync", |s| s.len() >= 4).await;
    assert_eq!(
        summary(&events),
        [
            "resync:STARTED",
            "service_upsert:svc/eureka/cart.example",
            "endpoint_upsert:ep/eureka/CART/cart-1",
            "resync:COMPLETED"
        ]
    );
    let ep = endpoint(&events[2]).expect("endpoint");
    assert_eq!(
        ep.ports
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect::<Vec<_>>(),
        [("http", 7000), ("https", 7443)]
    );
    let loc = ep.locality.as_ref().expect("locality");
    assert_eq!(
        (loc.region.as_str(), loc.zone.as_str()),
        ("us-east-1", "us-east-1c")
    );
    assert!(
        ep.labels.is_empty(),
        "@class is a type hint: {:?}",
        ep.labels
    );

    // A delta of one instance is a bare object too.
    let n = events.len();
    fake.put(instance(
        "CART",
        "cart-2",
        "10.0.2.2",
        7000,
        "UP",
        "cart.example",
    ));
    let new = next_events(&log, n, 1, "the bare-object delta").await;
    assert_eq!(summary(&new), ["endpoint_upsert:ep/eureka/CART/cart-2"]);
    assert_eq!(fake.requests().0, 1, "deltas applied without refetching");
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_instances_are_skipped_counted_and_do_not_break_reconciliation() {
    let fake = FakeEureka::start("/eureka/v2").await;
    seed(&fake);
    let mut bad = instance(
        "ORDERS",
        "orders-bad",
        "not-an-ip",
        8080,
        "UP",
        "orders.example",
    );
    bad["hostName"] = json!("orders-bad.internal");
    fake.put(bad);
    let mut bad_port = instance(
        "ORDERS",
        "orders-port",
        "10.0.0.99",
        8080,
        "UP",
        "orders.example",
    );
    bad_port["port"] = json!({"$": 99999, "@enabled": "true"});
    fake.put(bad_port);
    fake.clear_recent();
    let data = tempfile::tempdir().expect("log dir");
    let log = open_log(data.path());
    let mut run = start(fast(&fake.url()), &log);

    let events = wait_log(&log, "the resync", |s| s.len() >= RESYNC.len()).await;
    assert_eq!(
        summary(&events),
        RESYNC,
        "the malformed instances are left out"
    );
    let st = wait_status(&mut run.status, "problems reported", |s| {
        s.problems.len() == 2
    })
    .await;
    assert!(st.malformed_instances_total >= 2, "{st:#?}");
    let reasons: Vec<String> = st.problems.iter().map(ToString::to_string).collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("orders-bad") && r.contains("not-an-ip")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("orders-port") && r.contains("99999")),
        "{reasons:?}"
    );

    // The server counts them in its hashcode; so does the adapter's copy, so deltas
    // keep matching and no full refetch loop starts.
    let st = run.polls(5).await;
    assert_eq!(
        (st.full_fetches_total, st.hashcode_mismatches_total),
        (1, 0),
        "{st:#?}"
    );

    // Fixed in the registry: the instance appears.
    fake.put(instance(
        "ORDERS",
        "orders-bad",
        "10.0.0.20",
        8080,
        "UP",
        "orders.example",
    ));
    let new = next_events(&log, events.len(), 1, "the fixed instance").await;
    assert_eq!(
        summary(&new),
        ["endpoint_upsert:ep/eureka/ORDERS/orders-bad"]
    );
    wait_status(&mut run.status, "one problem left", |s| {
        s.problems.len() == 1
    })
    .await;
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_resyncs_under_a_new_generation_and_the_engine_sweeps() {
    let fake = FakeEureka::start("/eureka/v2").await;
    seed(&fake);
    let data = tempfile::tempdir().expect("log dir");
    let state = tempfile::tempdir().expect("state dir");
    let log = open_log(data.path());
    let opts = EurekaOptions {
        state_dir: Some(state.path().to_owned()),
        ..fast(&fake.url())
    };
    let run = start(opts.clone(), &log);
    let first = wait_log(&log, "the first resync", |s| s.len() >= RESYNC.len()).await;
    run.stop().await;

    // While the adapter is down, an instance leaves and the deltas forget it.
    fake.remove("PAYMENTS", "payments-1");
    fake.clear_recent();

    let mut run = start(opts, &log);
    let n = first.len();
    let events = wait_log(&log, "the second resync", |s| {
        s.len() > n && s.last().is_some_and(|l| l == "resync:COMPLETED")
    })
    .await;
    let second = &events[n..];
    assert_eq!(
        summary(second),
        [
            "resync:STARTED",
            "service_upsert:svc/eureka/orders.example",
            "endpoint_upsert:ep/eureka/ORDERS/orders-1:8080",
            "endpoint_upsert:ep/eureka/ORDERS/orders-2:8080",
            "resync:COMPLETED"
        ],
        "a resync re-upserts what exists and never deletes: the engine sweeps"
    );
    assert!(second[0].generation > first[0].generation);
    wait_status(&mut run.status, "resync completed", |s| s.resync_completed).await;

    let model = fold_all(&events);
    assert!(model.get_service("payments.example").is_none(), "swept");
    assert_eq!(model.endpoint_count("payments.example"), 0, "swept");
    assert_eq!(model.endpoint_count("orders.example"), 2);
    run.stop().await;
}
