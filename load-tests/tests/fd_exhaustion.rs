//! Running out of file descriptors while connecting is reported clearly and
//! promptly, not turned into a hang. Its own test binary, because it lowers this
//! process's RLIMIT_NOFILE.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use deltapilot_load_tests::baseline::BaselineServer;
use deltapilot_load_tests::fdlimit;
use deltapilot_load_tests::proxy::Behaviour;
use deltapilot_load_tests::proxy::fleet::{Fleet, FleetConfig};
use deltapilot_load_tests::scenario::Api;
use deltapilot_load_tests::tracker::Tracker;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emfile_while_connecting_is_a_clear_error() {
    let (soft, _) = fdlimit::current().expect("limits");
    let low = 128u64.min(soft);
    let status = std::process::Command::new("prlimit")
        .arg("--pid")
        .arg(std::process::id().to_string())
        .arg(format!("--nofile={low}:{low}"))
        .status()
        .expect("prlimit (util-linux) is needed for this test");
    assert!(status.success());
    assert_eq!(fdlimit::current().map(|l| l.0), Some(low));

    let server = BaselineServer::start(Vec::new()).await.expect("server");
    let cfg = FleetConfig {
        target: server.addr,
        api: Api::Delta,
        slow_delay: Duration::ZERO,
        connect_concurrency: 64,
        connect_timeout: Duration::from_secs(5),
        capture: false,
    };
    let fleet = Fleet::start(
        cfg,
        &vec![Behaviour::Normal; 300],
        Arc::new(Tracker::new()),
        None,
    )
    .expect("fleet");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !fleet.shared.fd_exhausted.load(Ordering::Acquire) {
        assert!(
            Instant::now() < deadline,
            "no EMFILE reported; errors: {:?}",
            fleet.shared.first_error()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let err = fleet.shared.first_error().unwrap_or_default();
    assert!(err.contains("Too many open files"), "{err}");
    fleet.stop(Duration::from_secs(10)).await;
    server.stop(Duration::from_secs(5)).await;
    assert!(
        fdlimit::ensure(10_000_000, "this test")
            .expect_err("too many")
            .to_string()
            .contains("ulimit -n")
    );
}
