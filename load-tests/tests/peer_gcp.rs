//! `--peer go-control-plane` end to end: a tiny scenario (smoke.yaml, 10
//! proxies, a few seconds) against a spawned deltapilot and then against the
//! go-control-plane peer, through the command line, and the peer alone over
//! SotW with its other cache. Correctness only: every proxy of both runs syncs
//! and converges on every change, nothing is NACKed, the comparison has both
//! columns.
//!
//! Needs the peer binary, built by `load-tests/peers/build.sh` (the test
//! command's `scripts/install-test-deps.sh` runs it): `DELTAPILOT_GCP_PEER`
//! names it. The tests FAIL (never skip) when it is missing. They also need the
//! `deltapilot` binary, as `smoke.rs` does.

use std::path::{Path, PathBuf};

use clap::Parser;
use deltapilot_load_tests::harness::{Plan, Target, execute};
use deltapilot_load_tests::peer::{GCP_PEER_ENV, Peer, PeerCache};
use deltapilot_load_tests::report::Report;
use deltapilot_load_tests::scenario::{Api, Scenario};
use deltapilot_load_tests::server::find_binary;

fn peer_bin() -> PathBuf {
    let Some(p) = std::env::var_os(GCP_PEER_ENV).map(PathBuf::from) else {
        panic!(
            "{GCP_PEER_ENV} is not set: build the go-control-plane peer with \
             load-tests/peers/build.sh (scripts/install-test-deps.sh does) and export \
             {GCP_PEER_ENV}=$DELTAPILOT_TOOLS/bin/dp-gcp-peer"
        );
    };
    assert!(p.is_file(), "{GCP_PEER_ENV}={}: no such file", p.display());
    p
}

fn deltapilot() -> PathBuf {
    let explicit = std::env::var_os("DELTAPILOT_BIN").map(PathBuf::from);
    find_binary(explicit.as_deref()).unwrap_or_else(|e| panic!("{e:#}"))
}

fn smoke_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/smoke.yaml")
}

fn assert_all_converged(r: &Report) {
    assert_eq!(r.errors, 0, "errors: {:?}\n{}", r.first_error, r.table());
    assert_eq!(r.nacks, 0, "{}", r.table());
    assert_eq!(r.synced_proxies as usize, r.proxies, "{}", r.table());
    assert_eq!(r.converged_proxies as usize, r.proxies, "{}", r.table());
    assert!(r.events > 0, "churn wrote nothing\n{}", r.table());
    assert_eq!(r.events_converged, r.events, "{}", r.table());
    assert!(r.write_to_ack_ms.is_some() && r.initial_sync_ms.is_some());
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: deltapilot_load_tests::LoadgenArgs,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_flag_runs_both_servers_with_the_same_scenario() {
    let peer = peer_bin();
    let dir = tempfile::tempdir().expect("tmp");
    let json = dir.path().join("side-by-side.json");
    let cli = Cli::try_parse_from([
        "deltapilot-loadgen".as_ref(),
        "--spawn".as_ref(),
        "--server-bin".as_ref(),
        deltapilot().as_os_str(),
        "--peer".as_ref(),
        "go-control-plane".as_ref(),
        "--peer-bin".as_ref(),
        peer.as_os_str(),
        "--scenario".as_ref(),
        smoke_path().as_os_str(),
        "--proxies".as_ref(),
        "10".as_ref(),
        "--duration".as_ref(),
        "3".as_ref(),
        "--quiet".as_ref(),
        "--report".as_ref(),
        json.as_os_str(),
    ] as [&std::ffi::OsStr; 17])
    .expect("flags");
    deltapilot_load_tests::run(cli.args).await.expect("run");

    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("report")).expect("json");
    assert_eq!(v["peer"], "go-control-plane");
    for side in ["deltapilot_report", "peer_report"] {
        let r = &v[side];
        assert_eq!(r["proxies"], 10, "{side}");
        assert_eq!(r["errors"], 0, "{side}: {}", r["first_error"]);
        assert_eq!(r["nacks"], 0, "{side}");
        assert_eq!(r["synced_proxies"], 10, "{side}");
        assert_eq!(r["converged_proxies"], 10, "{side}");
        assert!(r["events"].as_u64().unwrap_or(0) > 0, "{side}");
        assert_eq!(r["events_converged"], r["events"], "{side}");
    }
    assert_eq!(
        v["deltapilot_report"]["mesh_endpoints"], v["peer_report"]["mesh_endpoints"],
        "the same mesh"
    );
    assert!(
        v["peer_report"]["server"]
            .as_str()
            .is_some_and(|s| s.starts_with("peer go-control-plane")),
        "{}",
        v["peer_report"]["server"]
    );
    let rows = v["comparison"].as_array().expect("rows");
    let p99 = rows
        .iter()
        .find(|r| r["figure"] == "convergence from write p99, ms")
        .expect("p99 row");
    assert!(p99["deltapilot"].is_f64() && p99["peer"].is_f64(), "{p99}");
    for figure in ["server CPU per response, µs", "bytes per proxy per change"] {
        let row = rows.iter().find(|r| r["figure"] == figure).expect(figure);
        assert!(row["peer"].is_f64(), "{figure}: {row}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_serves_sotw_from_its_snapshot_cache() {
    let mut sc = Scenario::load(&smoke_path()).expect("smoke scenario");
    sc.name = "smoke-sotw-peer".into();
    sc.api = Api::Sotw;
    sc.proxies = 10;
    sc.duration_secs = 3;
    let r = execute(Plan {
        scenario: sc,
        target: Target::Peer {
            peer: Peer::GoControlPlane,
            bin: peer_bin(),
            cache: PeerCache::Snapshot,
            keep: false,
        },
        progress: false,
        baseline_exe: None,
    })
    .await
    .expect("run");
    assert_all_converged(&r);
    assert_eq!(r.api, "sotw");
    assert!(r.server_cpu_us_per_response.is_some(), "{}", r.table());
    let b = r.baseline.as_ref().expect("baseline ran");
    assert_eq!(b.pushes_done, b.pushes, "{}", r.table());
}
