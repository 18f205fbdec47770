//! The Eureka adapter when the registry misbehaves: down (connection refused) at
//! start and mid-run, and each kind of bad answer (garbage JSON, JSON of the wrong
//! shape, huge bodies declared or streamed, XML, hanging before or during the body,
//! HTTP 500). Each gets a clear error in the status, nothing is appended, every
//! record of the log still decodes, and the adapter keeps running: once the
//! registry behaves again, changes flow. Every wait is bounded.

mod support_eureka;

use std::sync::Arc;

use deltapilot_adapters::eureka::FetchErrorKind;
use deltapilot_log::file::FileLog;
use support_eureka::harness::{all_events, fast, start, summary, wait_log, wait_status};
use support_eureka::{FakeEureka, Mode, instance};

fn open_log(dir: &std::path::Path) -> Arc<FileLog> {
    Arc::new(FileLog::open(dir, Default::default()).expect("log"))
}

fn seed(fake: &FakeEureka) {
    fake.put(instance(
        "ORDERS",
        "orders-1",
        "10.0.0.11",
        8080,
        "UP",
        "orders.example",
    ));
    fake.put(instance(
        "ORDERS",
        "orders-2",
        "10.0.0.12",
        8080,
        "UP",
        "orders.example",
    ));
    fake.clear_recent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_answer_gets_a_clear_error_and_the_adapter_keeps_running() {
    let fake = FakeEureka::start("/eureka/v2").await;
    seed(&fake);
    let data = tempfile::tempdir().expect("log dir");
    let log = open_log(data.path());
    let opts = fast(&fake.url());
    let timeout = opts.request_timeout;
    let mut run = start(opts, &log);
    let mut n = wait_log(&log, "the resync", |s| s.len() >= 4).await.len();

    let cases = [
        (Mode::Garbage, FetchErrorKind::InvalidJson, "not valid JSON"),
        (
            Mode::WrongShape,
            FetchErrorKind::InvalidShape,
            "\"applications\"",
        ),
        (
            Mode::HugeDeclared,
            FetchErrorKind::TooLarge,
            "262144-byte limit",
        ),
        (
            Mode::HugeStreamed,
            FetchErrorKind::TooLarge,
            "262144-byte limit",
        ),
        (Mode::Xml, FetchErrorKind::ContentType, "application/xml"),
        (
            Mode::Hang,
            FetchErrorKind::Timeout,
            "no complete answer within",
        ),
        (
            Mode::HangBody,
            FetchErrorKind::Timeout,
            "no complete answer within",
        ),
        (Mode::ServerError, FetchErrorKind::HttpStatus, "HTTP 500"),
    ];
    for (i, (mode, kind, words)) in cases.into_iter().enumerate() {
        fake.set_mode(mode);
        // Two failures in a row: the first may be a delta, the retry is a full fetch.
        let st = wait_status(&mut run.status, &format!("{mode:?} reported"), |s| {
            s.consecutive_fetch_failures >= 2 && s.last_fetch_error_kind == Some(kind)
        })
        .await;
        let err = st.last_fetch_error.clone().unwrap_or_default();
        assert!(err.contains(words), "{mode:?}: {err}");
        assert!(
            err.contains(&fake.url()),
            "{mode:?}: the error names the URL: {err}"
        );
        assert!(!st.registry_reachable, "{mode:?}");
        if mode == Mode::Hang {
            assert!(err.contains(&format!("{timeout:?}")), "{err}");
        }

        // While it misbehaves the registry changes; nothing reaches the log, and
        // what is there still decodes (all_events decodes every record).
        let id = format!("orders-new-{i}");
        fake.put(instance(
            "ORDERS",
            &id,
            &format!("10.0.1.{i}"),
            8080,
            "UP",
            "orders.example",
        ));
        assert_eq!(
            all_events(&log).await.len(),
            n,
            "{mode:?}: nothing appended"
        );

        fake.set_mode(Mode::Normal);
        let events = wait_log(&log, &format!("recovery after {mode:?}"), |s| s.len() > n).await;
        assert_eq!(
            summary(&events[n..]),
            [format!("endpoint_upsert:ep/eureka/ORDERS/{id}")],
            "{mode:?}: exactly the change, no churn"
        );
        n += 1;
        let st = wait_status(&mut run.status, "reachable again", |s| s.registry_reachable).await;
        assert_eq!(st.last_fetch_error, None);
    }
    let st = run.status.borrow().clone();
    assert!(st.fetch_failures_total >= 2 * cases.len() as u64, "{st:#?}");
    assert!(
        st.full_fetches_total > cases.len() as u64,
        "a full fetch follows each failure"
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_down_at_start_appends_nothing_until_it_answers() {
    let mut fake = FakeEureka::start("/eureka/v2").await;
    seed(&fake);
    fake.stop().await;
    let data = tempfile::tempdir().expect("log dir");
    let log = open_log(data.path());
    let mut run = start(fast(&fake.url()), &log);

    let st = wait_status(&mut run.status, "refused connections", |s| {
        s.consecutive_fetch_failures >= 3
    })
    .await;
    assert_eq!(
        st.last_fetch_error_kind,
        Some(FetchErrorKind::Connect),
        "{st:#?}"
    );
    assert!(
        st.last_fetch_error
            .as_deref()
            .unwrap_or_default()
            .contains("cannot connect")
    );
    assert!(!st.resync_completed && !st.registry_reachable);
    assert!(
        all_events(&log).await.is_empty(),
        "no resync starts before the registry has answered once"
    );

    fake.restart().await;
    let events = wait_log(&log, "the resync", |s| s.len() >= 5).await;
    assert_eq!(
        summary(&events),
        [
            "resync:STARTED",
            "service_upsert:svc/eureka/orders.example",
            "endpoint_upsert:ep/eureka/ORDERS/orders-1",
            "endpoint_upsert:ep/eureka/ORDERS/orders-2",
            "resync:COMPLETED"
        ]
    );
    let st = wait_status(&mut run.status, "ready", |s| {
        s.resync_completed && s.registry_reachable
    })
    .await;
    assert_eq!(st.consecutive_fetch_failures, 0);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_down_mid_run_keeps_the_last_state_and_catches_up() {
    let mut fake = FakeEureka::start("/eureka/v2").await;
    seed(&fake);
    let data = tempfile::tempdir().expect("log dir");
    let log = open_log(data.path());
    let mut run = start(fast(&fake.url()), &log);
    let n = wait_log(&log, "the resync", |s| s.len() >= 5).await.len();
    wait_status(&mut run.status, "resync completed", |s| s.resync_completed).await;

    fake.stop().await;
    let st = wait_status(&mut run.status, "the registry down", |s| {
        s.consecutive_fetch_failures >= 4
    })
    .await;
    assert!(!st.registry_reachable && st.resync_completed, "{st:#?}");
    assert_eq!(st.entities_in_view, 3, "the last state is kept");
    assert_eq!(
        all_events(&log).await.len(),
        n,
        "nothing deleted while it is down"
    );
    let full_before = st.full_fetches_total;

    // Changes while it is down, forgotten by the deltas by the time it is back:
    // the full fetch that follows an outage still finds them.
    fake.remove("ORDERS", "orders-1");
    fake.put(instance(
        "ORDERS",
        "orders-3",
        "10.0.0.13",
        8080,
        "UP",
        "orders.example",
    ));
    fake.clear_recent();
    fake.restart().await;
    let events = wait_log(&log, "the catch-up", |s| s.len() >= n + 2).await;
    assert_eq!(
        summary(&events[n..]),
        [
            "endpoint_upsert:ep/eureka/ORDERS/orders-3",
            "endpoint_delete:ep/eureka/ORDERS/orders-1"
        ]
    );
    let st = wait_status(&mut run.status, "reachable", |s| s.registry_reachable).await;
    assert!(st.full_fetches_total > full_before, "{st:#?}");
    let st = run.polls(3).await;
    assert_eq!(all_events(&log).await.len(), n + 2, "{st:#?}");
    run.stop().await;
}

/// One registry object too large for the log (an instance with 17 MiB of
/// metadata, under the response cap) is left out, counted and reported; the
/// rest of the registry is appended, and later changes (a delete included) are
/// not blocked behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_too_large_for_the_log_is_left_out_and_the_rest_goes_on() {
    let fake = FakeEureka::start("/eureka/v2").await;
    seed(&fake);
    let mut huge = instance(
        "ORDERS",
        "orders-huge",
        "10.0.0.13",
        8080,
        "UP",
        "orders.example",
    );
    huge["metadata"] = serde_json::json!({ "blob": "x".repeat(17 * 1024 * 1024) });
    fake.put(huge);
    fake.clear_recent();
    let data = tempfile::tempdir().expect("log dir");
    let log = open_log(data.path());
    let mut opts = fast(&fake.url());
    opts.max_response_bytes = 64 * 1024 * 1024;
    let mut run = start(opts, &log);

    let status = wait_status(&mut run.status, "the resync past the huge instance", |s| {
        s.resync_completed && s.oversized_objects_total >= 1
    })
    .await;
    let why = status.last_oversized_object.clone().unwrap_or_default();
    assert!(
        why.contains("ep/eureka/ORDERS/orders-huge") && why.contains("above the log's limit"),
        "{why}"
    );
    let events = all_events(&log).await;
    let keys = summary(&events);
    assert!(
        keys.contains(&"endpoint_upsert:ep/eureka/ORDERS/orders-1".to_string())
            && keys.contains(&"endpoint_upsert:ep/eureka/ORDERS/orders-2".to_string()),
        "{keys:?}"
    );
    assert!(
        !keys.iter().any(|k| k.contains("orders-huge")),
        "the huge instance is not in the log: {keys:?}"
    );
    assert!(status.last_append_error.is_none(), "{status:?}");

    // A later delete is not blocked behind it.
    fake.remove("ORDERS", "orders-1");
    wait_log(&log, "the delete of orders-1", |s| {
        s.iter()
            .any(|k| k == "endpoint_delete:ep/eureka/ORDERS/orders-1")
    })
    .await;
    run.stop().await;
}
