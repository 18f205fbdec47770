//! `deltapilot bootstrap` against real peers: a real Envoy 1.40
//! (`DELTAPILOT_ENVOY`) boots from the printed sidecar bootstrap, in delta and in
//! SotW mode, connects to a real `deltapilot run` on loopback, receives the
//! demo cluster and its endpoint, routes a request to the backend, and is known
//! to deltapilot by its Istio node id (namespace and proxy type read from it).
//! The proxyless bootstrap is exercised by a real grpcio client in `e2e_grpc.rs`.

mod support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use support::{
    Backend, Deltapilot, Envoy, free_port, http_get, metric, wait_for, write_service_entry,
};

const HOST: &str = "hello.test.local";
const WAIT: Duration = Duration::from_secs(60);

/// `deltapilot bootstrap ARGS`' stdout; panics with its stderr on failure.
fn bootstrap(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_deltapilot"))
        .arg("bootstrap")
        .args(args)
        .env_remove("DELTAPILOT_XDS_ADDR")
        .env_remove("DELTAPILOT_CONFIG")
        .output()
        .expect("run deltapilot bootstrap");
    assert!(
        out.status.success(),
        "deltapilot bootstrap {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 bootstrap")
}

fn envoy_boots_and_receives_clusters(mode: &str) {
    let tmp = tempfile::tempdir().expect("tmp");
    let (data, watch) = (tmp.path().join("data"), tmp.path().join("watch"));
    std::fs::create_dir_all(&watch).expect("watch dir");
    let backend = Backend::start("backend-a");
    let svc_port = free_port();
    write_service_entry(
        &watch,
        "hello.yaml",
        HOST,
        svc_port,
        "HTTP",
        &[backend.port],
    );
    let (xds_port, admin_port) = (free_port(), free_port());
    let dp = Deltapilot::start(tmp.path(), &data, &watch, xds_port, admin_port);

    let envoy_admin = free_port();
    let (xds, admin) = (format!("127.0.0.1:{xds_port}"), envoy_admin.to_string());
    let text = bootstrap(&[
        "--type",
        "sidecar",
        "--mode",
        mode,
        "--xds-address",
        &xds,
        "--admin-port",
        &admin,
        "--ip",
        "127.0.0.1",
        "--pod",
        "client-1",
        "--namespace",
        "test",
        "--labels",
        "app=client,version=v1",
    ]);
    let node_id = "sidecar~127.0.0.1~client-1.test~test.svc.cluster.local";
    assert!(text.contains(node_id), "{text}");
    let envoy = Envoy::boot(
        tmp.path(),
        &format!("bootstrap-{mode}.yaml"),
        &text,
        envoy_admin,
    );

    wait_for(
        "Envoy to receive the demo cluster and endpoint",
        WAIT,
        || {
            let clusters = envoy.get("/clusters");
            if clusters.contains(HOST)
                && clusters.contains(&format!("127.0.0.1:{}::", backend.port))
            {
                Ok(())
            } else {
                Err(format!("{clusters}\nenvoy:\n{}", envoy.proc.output()))
            }
        },
    );
    let svc = SocketAddr::from(([127, 0, 0, 1], svc_port));
    wait_for(
        "a request through Envoy's outbound listener",
        WAIT,
        || match http_get(svc, "/", HOST)? {
            (200, body) if body.contains("backend-a") => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    assert_eq!(envoy.rejected_updates(), Vec::<String>::new());

    let api = if mode == "delta" { "delta" } else { "sotw" };
    let m = dp.metrics();
    assert!(
        metric(
            &m,
            "deltapilot_xds_connected_proxies",
            &[&format!("api=\"{api}\""), "proxy_type=\"sidecar\""]
        ) >= 1.0,
        "{m}"
    );
    // deltapilot read the Istio node id: the proxy is listed under it, in its namespace.
    let (status, syncz) = http_get(dp.admin(), "/debug/syncz", "localhost").expect("syncz");
    assert_eq!(status, 200, "{syncz}");
    let v: serde_json::Value = serde_json::from_str(&syncz).expect("syncz JSON");
    let proxy = v["proxies"]
        .as_array()
        .expect("proxies")
        .iter()
        .find(|p| p["id"] == node_id)
        .unwrap_or_else(|| panic!("{node_id} not in {syncz}"));
    assert_eq!(proxy["namespace"], "test", "{proxy}");
    assert_eq!(proxy["proxy_type"], "sidecar", "{proxy}");
    assert_eq!(proxy["api"], api, "{proxy}");
}

#[test]
fn envoy_boots_from_the_delta_bootstrap() {
    envoy_boots_and_receives_clusters("delta");
}

#[test]
fn envoy_boots_from_the_sotw_bootstrap() {
    envoy_boots_and_receives_clusters("sotw");
}

#[test]
fn a_router_bootstrap_is_read_as_a_router_and_json_parses() {
    let text = bootstrap(&[
        "--type",
        "router",
        "-o",
        "json",
        "--pod",
        "gw-1",
        "--namespace",
        "edge",
    ]);
    let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(
        v["node"]["id"],
        "router~127.0.0.1~gw-1.edge~edge.svc.cluster.local"
    );
    assert_eq!(
        v["dynamic_resources"]["ads_config"]["api_type"],
        "DELTA_GRPC"
    );
    let ep = &v["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0]["lb_endpoints"]
        [0]["endpoint"]["address"]["socket_address"];
    assert_eq!(ep["address"], "127.0.0.1");
    assert_eq!(ep["port_value"], 18000);
}

#[test]
fn impossible_combinations_are_refused_with_a_reason() {
    for (args, says) in [
        (
            &["--type", "proxyless-grpc", "--mode", "delta"][..],
            "only state-of-the-world",
        ),
        (
            &["--type", "proxyless-grpc", "-o", "yaml"][..],
            "only a JSON",
        ),
        (&["--labels", "app"][..], "not KEY=VALUE"),
        (&["--xds-address", "nohost"][..], "expected HOST:PORT"),
        (&["--pod", "a~b"][..], "part of the node id"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_deltapilot"))
            .arg("bootstrap")
            .args(args)
            .output()
            .expect("run deltapilot bootstrap");
        assert!(!out.status.success(), "{args:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
