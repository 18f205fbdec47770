//! The load generator against a real `deltapilot run` over loopback, as a
//! correctness check (no timing assertions): every simulated proxy syncs and
//! converges on every change, nothing is NACKed, the baseline replay reaches
//! every proxy, and the report carries the fields.
//!
//! Needs the `deltapilot` binary, which lives in the server crate: build it first
//! (`cargo build -p deltapilot-server --bin deltapilot`) or point `DELTAPILOT_BIN`
//! at it. The test fails (never skips) with that instruction when it is missing.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use deltapilot_load_tests::harness::{Plan, Target, execute};
use deltapilot_load_tests::report::Report;
use deltapilot_load_tests::scenario::{Api, Scenario};
use deltapilot_load_tests::server::{find_binary, free_port};

fn deltapilot() -> PathBuf {
    let explicit = std::env::var_os("DELTAPILOT_BIN").map(PathBuf::from);
    find_binary(explicit.as_deref()).unwrap_or_else(|e| panic!("{e:#}"))
}

fn smoke() -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/smoke.yaml");
    Scenario::load(&path).expect("smoke scenario")
}

/// Runs `sc` against a `deltapilot run` the load generator spawns, following
/// `log` (a Kafka topic) or its embedded log when `None`.
async fn spawned(sc: Scenario, log: Option<String>) -> Report {
    execute(Plan {
        scenario: sc,
        target: Target::Spawn {
            bin: deltapilot(),
            keep: false,
            log,
        },
        progress: false,
        baseline_exe: None,
    })
    .await
    .expect("run")
}

fn assert_all_converged(r: &Report) {
    assert_eq!(r.errors, 0, "errors: {:?}\n{}", r.first_error, r.table());
    assert_eq!(r.nacks, 0, "{}", r.table());
    assert_eq!(r.synced_proxies as usize, r.proxies, "{}", r.table());
    assert_eq!(r.converged_proxies as usize, r.proxies, "{}", r.table());
    assert!(r.events > 0, "churn wrote nothing\n{}", r.table());
    assert_eq!(r.events_converged, r.events, "{}", r.table());
    assert!(r.convergence_ms.is_some() && r.initial_sync_ms.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_fleet_converges_on_every_change_with_no_nack() {
    let sc = smoke();
    let r = spawned(sc.clone(), None).await;
    assert_eq!(r.proxies, 50);
    assert_all_converged(&r);
    assert_eq!(r.churn_path, "file-adapter");
    assert_eq!(
        r.events_without_append_time,
        0,
        "every change was found in the server's log\n{}",
        r.table()
    );
    let b = r.baseline.as_ref().expect("baseline ran");
    assert!(b.skipped.is_none(), "{:?}", b.skipped);
    assert!(b.pushes > 0);
    assert_eq!(
        b.pushes_done, b.pushes,
        "every replayed push reached every proxy"
    );
    assert!(r.raw_fanout_ratio.is_some() && r.bytes_per_change_ratio.is_some());
    // Every change had a response after its append, so the replay registered
    // each one again, and each moved raw to every proxy: the all-changes ratio.
    assert_eq!(b.changes_replayed, r.events, "{}", r.table());
    assert_eq!(b.changes_converged, b.changes_replayed, "{}", r.table());
    assert!(r.raw_fanout_ratio_all.is_some(), "{}", r.table());
    assert!(r.server_rss_bytes_per_proxy.is_some() && r.server_cpu_seconds.is_some());

    let dir = tempfile::tempdir().expect("tmp");
    let json = dir.path().join("r.json");
    r.write_json(&json).expect("write");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("read")).expect("json");
    for k in [
        "proxies",
        "converged_proxies",
        "nacks",
        "raw_fanout_ratio",
        "raw_fanout_ratio_all",
        "server_rss_bytes_per_proxy",
        "bytes_per_change_ratio",
    ] {
        assert!(!v[k].is_null(), "{k} is null");
    }
    for k in ["p50", "p90", "p99", "max"] {
        assert!(v["convergence_ms"][k].is_number(), "convergence_ms.{k}");
    }
}

/// VirtualService weight shifts among endpoint flaps, with the server's
/// `--route-delivery` `delivery`: every proxy converges on every shift (its
/// marker in the route configuration, or virtual host, it ACKed). Returns
/// the report's pushed route bytes per push.
async fn rule_shifts(name: &str, delivery: &str) -> f64 {
    let mut sc = smoke();
    sc.name = name.into();
    sc.proxies = 20;
    sc.duration_secs = 3;
    sc.mesh.rules = 4;
    sc.churn.mix.flap = 1;
    sc.churn.mix.scale_up = 0;
    sc.churn.mix.scale_down = 0;
    sc.churn.mix.service_add = 0;
    sc.churn.mix.service_remove = 1;
    sc.churn.mix.rule_shift = 3;
    sc.server.route_delivery = Some(delivery.into());
    let r = spawned(sc, None).await;
    assert_all_converged(&r);
    let shifts = r
        .samples
        .iter()
        .filter(|s| s.kind == deltapilot_load_tests::tracker::ChangeKind::RuleShift)
        .count();
    assert!(shifts > 0, "no rule shift converged\n{}", r.table());
    assert_eq!(
        r.events_without_append_time,
        0,
        "every shift was found in the server's log\n{}",
        r.table()
    );
    let route = r
        .route_bytes_per_push
        .expect("route configurations were pushed");
    assert!(
        route > 0.0 && r.bytes_per_route_ratio.is_some(),
        "{}",
        r.table()
    );
    route
}

/// Inline, a shift resends the port's route configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_shifts_converge_and_report_the_route_cost() {
    rule_shifts("smoke-rules", "inline").await;
}

/// Over VHDS the proxies follow the shifts through virtual hosts, each a
/// fraction of the route configuration inline delivery pushes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_shifts_over_vhds_converge_and_push_less_route_bytes() {
    let inline = rule_shifts("smoke-rules-inline", "inline").await;
    let vhds = rule_shifts("smoke-rules-vhds", "vhds").await;
    assert!(
        vhds < inline,
        "route bytes per push: {vhds} over VHDS, {inline} inline"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sotw_fleet_converges_too() {
    let mut sc = smoke();
    sc.name = "smoke-sotw".into();
    sc.api = Api::Sotw;
    sc.proxies = 20;
    sc.duration_secs = 3;
    sc.baseline = false;
    let r = spawned(sc, None).await;
    assert_all_converged(&r);
    assert!(r.baseline.is_none());
}

/// A spawned server following a 3-partition Kafka topic (real Apache Kafka) that the
/// load generator appends the mesh and churn to: services and their endpoints
/// land on different partitions and may be read in either order, and every proxy
/// must still converge on every change. Fails (never skips) without the broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawned_server_on_a_kafka_topic_converges_too() {
    let brokers = match std::env::var("DELTAPILOT_KAFKA_BROKERS") {
        Ok(b) if !b.trim().is_empty() => b,
        _ => panic!(
            "DELTAPILOT_KAFKA_BROKERS is not set: start a broker (scripts/kafka.sh start 19192) \
             and export DELTAPILOT_KAFKA_BROKERS=127.0.0.1:19192; this test never skips"
        ),
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    let topic = format!("loadgen-smoke-{}-{nanos}", std::process::id());
    let mut sc = smoke();
    sc.name = "smoke-kafka".into();
    sc.proxies = 20;
    sc.duration_secs = 3;
    sc.baseline = false;
    let r = spawned(sc, Some(format!("kafka://{brokers}/{topic}?partitions=3"))).await;
    assert_all_converged(&r);
    assert_eq!(r.churn_path, "log");
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `--target` mode against a server the test starts itself: churn through the
/// directory its file adapter watches, append times read from its log, CPU and
/// memory from /proc.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_mode_drives_a_running_server_through_its_watched_directory() {
    let dir = tempfile::tempdir().expect("tmp");
    let (data, watch) = (dir.path().join("data"), dir.path().join("mesh"));
    std::fs::create_dir_all(&watch).expect("mkdir");
    let (xds, admin) = (free_port().expect("port"), free_port().expect("port"));
    let log = std::fs::File::create(dir.path().join("server.log")).expect("log");
    let child = Command::new(deltapilot())
        .args([
            "run",
            "--xds-addr",
            &xds.to_string(),
            "--admin-addr",
            &admin.to_string(),
        ])
        .arg("--data-dir")
        .arg(&data)
        .arg("--watch")
        .arg(&watch)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("spawn deltapilot");
    let server = Server(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !matches!(
        deltapilot_load_tests::metrics::get(admin, "/readyz", Duration::from_secs(2)).await,
        Ok((200, _))
    ) {
        assert!(Instant::now() < deadline, "deltapilot never became ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut sc = smoke();
    sc.proxies = 10;
    sc.duration_secs = 3;
    sc.baseline = false;
    let r = execute(Plan {
        scenario: sc,
        target: Target::Remote {
            xds,
            log: None,
            watch_dir: Some(watch),
            admin: Some(admin),
            pid: Some(server.0.id()),
            observe_log: Some(data.join("log")),
        },
        progress: false,
        baseline_exe: None,
    })
    .await
    .expect("run");
    assert_eq!(r.server, "target");
    assert_all_converged(&r);
    assert_eq!(r.events_without_append_time, 0, "{}", r.table());
    assert!(r.server_cpu_seconds.is_some());
}
