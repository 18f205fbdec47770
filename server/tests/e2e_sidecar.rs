//! End to end with a real Envoy (`DELTAPILOT_ENVOY`), delta and SotW: an Envoy
//! whose node id puts it in namespace `test`, three ServiceEntries (two in
//! `test`, one in `other`) → `deltapilot run` → Envoy → real HTTP backends. A
//! Sidecar for `test` admitting `./*` with REGISTRY_ONLY scopes it: it keeps
//! only its namespace's clusters (Envoy's own `/clusters`), a host of `other`
//! and an unknown host get 502 from the catch-all, `/debug/syncz` shows its view
//! key; removing the Sidecar restores the rest (an unknown host gets the
//! router's 404 again). Envoy never rejects an update.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use support::{
    Backend, Deltapilot, Envoy, free_port, http_get, metric, wait_for, write_service_entry,
};

const WAIT: Duration = Duration::from_secs(60);
const NODE: &str = "sidecar~127.0.0.1~app-1.test~test.svc.cluster.local";

const SIDECAR: &str = r#"apiVersion: networking.istio.io/v1
kind: Sidecar
metadata:
  name: default
  namespace: test
spec:
  egress:
    - hosts:
        - "./*"
  outboundTrafficPolicy:
    mode: REGISTRY_ONLY
"#;

fn write(dir: &Path, file: &str, yaml: &str) {
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, yaml).expect("write");
    std::fs::rename(&tmp, dir.join(file)).expect("rename");
}

fn is(got: Result<(u16, String), String>, status: u16, body: &str) -> Result<(), String> {
    match got {
        Ok((s, b)) if s == status && (body.is_empty() || b == body) => Ok(()),
        other => Err(format!("want {status} {body:?}, got {other:?}")),
    }
}

/// Cluster names Envoy holds (its admin `/clusters`).
fn envoy_clusters(envoy: &Envoy) -> Vec<String> {
    let mut names: Vec<String> = envoy
        .get("/clusters")
        .lines()
        .filter_map(|l| l.split("::").next())
        .filter(|n| n.starts_with("outbound|") || *n == "PassthroughCluster")
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

fn scenario(example: &str) {
    let tmp = tempfile::tempdir().expect("tmp");
    let (data, watch) = (tmp.path().join("data"), tmp.path().join("watch"));
    std::fs::create_dir_all(&watch).expect("watch dir");
    let (hello, one, far) = (
        Backend::start("hello"),
        Backend::start("v1"),
        Backend::start("far"),
    );
    let port = free_port();
    write_service_entry(
        &watch,
        "hello.yaml",
        "hello.test.local",
        port,
        "HTTP",
        &[hello.port],
    );
    write_service_entry(
        &watch,
        "v1.yaml",
        "v1.test.local",
        port,
        "HTTP",
        &[one.port],
    );
    // The same shape in namespace `other`.
    let far_entry = format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: far\n  namespace: other\nspec:\n  hosts:\n    - far.other.local\n  location: MESH_INTERNAL\n  resolution: STATIC\n  ports:\n    - number: {port}\n      name: main\n      protocol: HTTP\n  endpoints:\n    - address: 127.0.0.1\n      ports:\n        main: {}\n",
        far.port
    );
    write(&watch, "far.yaml", &far_entry);
    let (xds_port, admin_port) = (free_port(), free_port());
    let dp = Deltapilot::start(tmp.path(), &data, &watch, xds_port, admin_port);
    let envoy = Envoy::start_as(tmp.path(), example, xds_port, Some(NODE));
    let svc = SocketAddr::from(([127, 0, 0, 1], port));
    let c = |h: &str| format!("outbound|{port}||{h}");
    wait_for("every host to answer without a Sidecar", WAIT, || {
        is(http_get(svc, "/", "hello.test.local"), 200, "hello")?;
        is(http_get(svc, "/", "far.other.local"), 200, "far")?;
        is(http_get(svc, "/", "unknown.example.com"), 404, "")
    });
    assert_eq!(
        envoy_clusters(&envoy),
        [
            c("far.other.local"),
            c("hello.test.local"),
            c("v1.test.local")
        ]
    );

    write(&watch, "sidecar.yaml", SIDECAR);
    wait_for("the Sidecar to hide namespace other", WAIT, || {
        is(http_get(svc, "/", "far.other.local"), 502, "")
    });
    is(http_get(svc, "/", "unknown.example.com"), 502, "").expect("REGISTRY_ONLY blocks");
    is(http_get(svc, "/", "hello.test.local"), 200, "hello").expect("own namespace");
    is(http_get(svc, "/", "v1.test.local"), 200, "v1").expect("own namespace");
    wait_for("Envoy to drop the hidden cluster", WAIT, || {
        let got = envoy_clusters(&envoy);
        if got == [c("hello.test.local"), c("v1.test.local")] {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    });
    let syncz = http_get(dp.admin(), "/debug/syncz", "localhost")
        .expect("syncz")
        .1;
    let v: serde_json::Value = serde_json::from_str(&syncz).expect("json");
    let keys: Vec<&str> = v["proxies"]
        .as_array()
        .expect("proxies")
        .iter()
        .filter_map(|p| p["view_key"].as_str())
        .collect();
    assert_eq!(keys, ["sidecar/cfg/sidecar/test/default"], "{syncz}");
    let m = dp.metrics();
    assert_eq!(metric(&m, "deltapilot_views", &[]), 4.0, "{m}");

    std::fs::remove_file(watch.join("sidecar.yaml")).expect("remove Sidecar");
    wait_for(
        "removing the Sidecar to restore namespace other",
        WAIT,
        || {
            is(http_get(svc, "/", "far.other.local"), 200, "far")?;
            is(http_get(svc, "/", "unknown.example.com"), 404, "")
        },
    );
    assert_eq!(envoy_clusters(&envoy).len(), 3);

    let m = dp.metrics();
    assert_eq!(metric(&m, "deltapilot_xds_nacks_total", &[]), 0.0, "{m}");
    let rejected = envoy.rejected_updates();
    assert!(
        rejected.is_empty(),
        "Envoy rejected updates: {rejected:?}\n{}",
        envoy.proc.output()
    );
}

#[test]
fn envoy_delta_is_scoped_by_a_sidecar() {
    scenario("envoy-delta.yaml");
}

#[test]
fn envoy_sotw_is_scoped_by_a_sidecar() {
    scenario("envoy-sotw.yaml");
}
