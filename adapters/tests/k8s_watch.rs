//! The Kubernetes adapter's watch semantics against the fake API server: 410 Gone
//! (mid-watch and on reconnect) relists without churn, bookmarks, dropped and
//! timed-out connections resume without loss, and an API server that is down,
//! failing, hanging or answering garbage is retried with backoff, shown in the
//! status, and recovered from. Events land in a real embedded log; every
//! expectation is the exact list of appended events. Every wait is bounded.

mod support_k8s;

use std::time::Duration;

use deltapilot_adapters::kubernetes::{KubernetesOptions, SyncState};
use support_k8s::FakeApiServer;
use support_k8s::harness::*;
use support_k8s::objects::{pod, service};

const RATINGS: &str = "svc/shop/ratings.shop.svc.cluster.local";

/// The changes every disconnection test makes while the adapter cannot see them,
/// and the events they must produce (sorted; the relists of different kinds may
/// land in either order).
fn change_behind_the_adapters_back(fake: &FakeApiServer) -> Vec<String> {
    fake.apply(&pod(
        "shop",
        "reviews-1",
        &[("app", "reviews"), ("version", "v7")],
        "reviews-sa",
        "n1",
    ));
    fake.apply(&service("shop", "ratings", &[("http", 9080)], &[]));
    fake.delete_kind("VirtualService", "shop", "reviews");
    let mut expected = vec![
        format!("endpoint_upsert:{EP1}"),
        format!("service_upsert:{RATINGS}"),
        format!("config_delete:{VS}"),
    ];
    expected.sort();
    expected
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

async fn started(
    opts: KubernetesOptions,
) -> (
    FakeApiServer,
    tempfile::TempDir,
    std::sync::Arc<deltapilot_log::file::FileLog>,
    Running,
) {
    let fake = FakeApiServer::start().await;
    seed_shop(&fake);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path());
    let mut run = start(fake.client(opts.read_timeout), &log, opts);
    run.wait_resynced().await;
    assert_eq!(summary(&all_events(&log).await), shop_resync());
    let watches = run.status.borrow().watches.len();
    wait_until("every watch open", || fake.open_watches() == watches).await;
    (fake, dir, log, run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_mid_watch_relists_and_appends_only_what_changed() {
    let (fake, _dir, log, mut run) = started(test_opts()).await;
    let base = all_events(&log).await.len();
    let lists_before = fake.requests().iter().filter(|r| r.is_list()).count();

    // The watches fall behind (the changes never reach them), then the API server
    // expires them with an ERROR 410 event.
    fake.pause_watches();
    let expected = change_behind_the_adapters_back(&fake);
    fake.expire_watches();
    let watches = run.status.borrow().watches.len();
    run.wait_status("every watch relisted", |s| {
        s.watches.iter().all(|w| w.relists_total >= 1)
    })
    .await;
    let events = all_events(&log).await;
    assert_eq!(
        sorted(summary(&events[base..])),
        expected,
        "a relist appends exactly the differences: no deletes and re-creates"
    );
    assert!(
        fake.requests().iter().filter(|r| r.is_list()).count() >= lists_before + watches,
        "each expired watch relisted"
    );
    let st = run.status.borrow().clone();
    assert!(st.registry_healthy(), "{st:#?}");
    assert_eq!(
        st.watches.iter().map(|w| w.errors_total).sum::<u64>(),
        0,
        "410 is not an outage"
    );
    fold_all(&events);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_after_compaction_gets_410_and_relists_without_churn() {
    let (mut fake, _dir, log, mut run) = started(test_opts()).await;
    let base = all_events(&log).await.len();

    // The API server goes away; meanwhile things change and its history is
    // compacted, so the adapter's resourceVersions are too old when it comes back.
    fake.stop().await;
    run.wait_status("a watch noticing the outage", |s| {
        s.watches.iter().any(|w| w.state == SyncState::Retrying)
    })
    .await;
    let expected = change_behind_the_adapters_back(&fake);
    fake.compact();
    fake.serve().await;
    run.wait_status("recovered", |s| {
        s.registry_healthy() && s.watches.iter().all(|w| w.relists_total >= 1)
    })
    .await;
    let events = wait_log(&log, "the changes", |s| s.len() >= base + expected.len()).await;
    assert_eq!(sorted(summary(&events[base..])), expected);
    assert!(
        fake.requests()
            .iter()
            .filter(|r| r.is_list() && r.param("limit").as_deref() == Some("500"))
            .count()
            >= 2 * run.status.borrow().watches.len(),
        "every watch relisted after the 410"
    );
    fold_all(&events);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_advance_the_resource_version_so_a_reconnect_needs_no_relist() {
    let (fake, _dir, log, run) = started(test_opts()).await;
    let base = all_events(&log).await.len();
    let before = fake.requests().len();

    // A bookmark moves every watch to resourceVersion B; history up to B is then
    // compacted and the watches end. Resuming from B is allowed; resuming from
    // anything older would be 410 Gone and a relist.
    let b = fake.bookmark();
    fake.compact();
    fake.close_watches();
    let watches = run.status.borrow().watches.len();
    wait_until("every watch resumed", || {
        fake.requests()[before..]
            .iter()
            .filter(|r| r.is_watch())
            .count()
            >= watches
    })
    .await;
    let after = fake.requests()[before..].to_vec();
    let rvs: Vec<Option<String>> = after
        .iter()
        .filter(|r| r.is_watch())
        .map(|r| r.param("resourceVersion"))
        .collect();
    assert!(
        rvs.iter()
            .all(|rv| rv.as_deref() == Some(b.to_string().as_str())),
        "every watch resumed from the bookmark's resourceVersion {b}: {rvs:?}"
    );
    assert!(
        after.iter().all(|r| r.is_watch()),
        "no list after the reconnect: {after:#?}"
    );
    assert!(
        after
            .iter()
            .all(|r| r.param("allowWatchBookmarks").as_deref() == Some("true"))
    );
    // And the watches are live: a change arrives.
    fake.apply(&service("shop", "ratings", &[("http", 9080)], &[]));
    let events = wait_log(&log, "the new service", |s| s.len() > base).await;
    assert_eq!(
        summary(&events[base..]),
        vec![format!("service_upsert:{RATINGS}")]
    );
    assert!(
        run.status
            .borrow()
            .watches
            .iter()
            .all(|w| w.relists_total == 0)
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_resumes_where_it_was_and_loses_nothing() {
    let (fake, _dir, log, mut run) = started(test_opts()).await;
    let base = all_events(&log).await.len();
    let before = fake.requests().len();

    // Changes the open streams never deliver, then the connections are cut.
    fake.pause_watches();
    let expected = change_behind_the_adapters_back(&fake);
    fake.drop_watches();
    let events = wait_log(&log, "the changes", |s| s.len() >= base + expected.len()).await;
    assert_eq!(sorted(summary(&events[base..])), expected);
    assert!(
        fake.requests()[before..]
            .iter()
            .all(|r| !r.is_list() || r.param("limit").as_deref() == Some("1")),
        "resumed by watching from the last resourceVersion, not by relisting"
    );
    run.wait_status("healthy", |s| s.registry_healthy()).await;
    assert!(
        run.status
            .borrow()
            .watches
            .iter()
            .all(|w| w.relists_total == 0)
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_that_time_out_are_resumed_and_changes_keep_flowing() {
    let opts = KubernetesOptions {
        watch_timeout: Duration::from_secs(1),
        read_timeout: Duration::from_secs(10),
        ..test_opts()
    };
    let (fake, _dir, log, run) = started(opts).await;
    let base = all_events(&log).await.len();
    let watches = run.status.borrow().watches.len();
    for (i, version) in ["v2", "v3", "v4"].iter().enumerate() {
        // Wait for a round of timeouts: every watch re-issued once more.
        let seen = fake.requests().iter().filter(|r| r.is_watch()).count();
        wait_until("a round of watch timeouts", || {
            fake.requests().iter().filter(|r| r.is_watch()).count() >= seen + watches
        })
        .await;
        fake.apply(&pod(
            "shop",
            "reviews-1",
            &[("app", "reviews"), ("version", version)],
            "reviews-sa",
            "n1",
        ));
        let events = wait_log(&log, "the change", |s| s.len() > base + i).await;
        assert_eq!(
            summary(&events[base + i..]),
            vec![format!("endpoint_upsert:{EP1}")]
        );
    }
    assert!(
        fake.requests()
            .iter()
            .filter(|r| r.is_watch())
            .all(|r| r.param("timeoutSeconds").as_deref() == Some("1"))
    );
    assert!(
        run.status
            .borrow()
            .watches
            .iter()
            .all(|w| w.relists_total == 0)
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_down_at_start_is_retried_with_backoff_and_then_synced() {
    let mut fake = FakeApiServer::not_started();
    seed_shop(&fake);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path());
    let opts = test_opts();
    let mut run = start(fake.client(opts.read_timeout), &log, opts);
    run.wait_status("repeated failures", |s| {
        s.watches
            .iter()
            .all(|w| w.state == SyncState::Retrying && w.consecutive_failures >= 3)
    })
    .await;
    {
        let st = run.status.borrow();
        assert!(!st.registry_healthy());
        assert!(!st.resync_completed);
        assert!(st.last_registry_error.is_some(), "{st:#?}");
        let w = &st.watches[0];
        assert!(
            w.retry_in.is_some_and(|d| d <= Duration::from_millis(400)),
            "{w:#?}"
        );
    }
    assert!(
        all_events(&log).await.is_empty(),
        "nothing is appended before every kind is listed"
    );
    fake.serve().await;
    run.wait_resynced().await;
    assert_eq!(summary(&all_events(&log).await), shop_resync());
    let st = run.status.borrow().clone();
    assert!(st.registry_healthy(), "{st:#?}");
    assert!(
        st.watches
            .iter()
            .all(|w| w.consecutive_failures == 0 && w.retry_in.is_none())
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_api_server_keeps_the_last_state_and_recovers_without_loss() {
    let (fake, _dir, log, mut run) = started(test_opts()).await;
    let base = all_events(&log).await.len();
    // Every request now fails with 503 and the open watches are cut.
    fake.set_fail_with(Some(503));
    fake.drop_watches();
    run.wait_status("retrying", |s| {
        s.watches.iter().all(|w| w.state == SyncState::Retrying)
    })
    .await;
    assert!(
        run.status
            .borrow()
            .last_registry_error
            .as_deref()
            .is_some_and(|e| e.contains("503"))
    );
    assert_eq!(
        all_events(&log).await.len(),
        base,
        "the last state is kept: no deletes"
    );
    let expected = change_behind_the_adapters_back(&fake);
    fake.set_fail_with(None);
    let events = wait_log(&log, "the changes", |s| s.len() >= base + expected.len()).await;
    assert_eq!(sorted(summary(&events[base..])), expected);
    run.wait_status("recovered", |s| s.registry_healthy()).await;
    assert!(
        run.status
            .borrow()
            .watches
            .iter()
            .all(|w| w.errors_total >= 1)
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_and_garbage_answering_api_servers_are_errors_not_hangs() {
    let fake = FakeApiServer::start().await;
    seed_shop(&fake);
    fake.set_hang_lists(true);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path());
    let opts = KubernetesOptions {
        watch_timeout: Duration::from_secs(1),
        read_timeout: Duration::from_secs(2),
        ..test_opts()
    };
    let mut run = start(fake.client(opts.read_timeout), &log, opts);
    run.wait_status("a list timing out", |s| {
        s.watches
            .iter()
            .any(|w| w.state == SyncState::Retrying && w.last_error.is_some())
    })
    .await;
    // Garbage instead of a list: a clear decoding error, still retried.
    fake.set_garbage_lists(true);
    fake.set_hang_lists(false);
    run.wait_status("a garbage list", |s| {
        s.watches.iter().any(|w| {
            w.state == SyncState::Retrying
                && w.last_error
                    .as_deref()
                    .is_some_and(|e| !e.contains("timed out") && !e.contains("deadline"))
        })
    })
    .await;
    assert!(all_events(&log).await.is_empty());
    fake.set_garbage_lists(false);
    run.wait_resynced().await;
    assert_eq!(summary(&all_events(&log).await), shop_resync());
    run.stop().await;
}
