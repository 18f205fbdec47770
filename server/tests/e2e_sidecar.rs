//! End to end with a real Envoy (`DELTAPILOT_ENVOY`), delta and SotW: an Envoy
//! whose node id puts it in namespace `test`, three ServiceEntries (two in
//! `test`, one in `other`) → `deltapilot run` → Envoy → real HTTP backends. A
//! Sidecar for `test` admitting `./*` with REGISTRY_ONLY scopes it: it keeps
//! only its namespace's clusters (Envoy's own `/clusters`), a host of `other`
//! and an unknown host get 502 from the catch-all, `/debug/syncz` shows its view
//! key, and its unimplemented `inboundConnectionPool` is reported (`DP1020`, in
//! `/debug/rules` and `deltapilot_rule_problems`); switched to ALLOW_ANY, an unknown host passes through to the address
//! in `x-envoy-original-dst-host` (502 without it: no loop back into the
//! listener); removing the Sidecar restores the rest (an unknown host gets the
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
  inboundConnectionPool:
    http:
      http1MaxPendingRequests: 10
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

/// A GET of `/` for `host` with one extra header.
fn get_with(svc: SocketAddr, host: &str, header: &str) -> Result<(u16, String), String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&svc, Duration::from_secs(2))
        .map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let req = format!("GET / HTTP/1.1\r\nhost: {host}\r\n{header}\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status in {out:?}"))?;
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
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
    // The field deltapilot does not implement is reported, not dropped.
    let report = http_get(dp.admin(), "/debug/rules", "localhost")
        .expect("debug rules")
        .1;
    let v: serde_json::Value = serde_json::from_str(&report).expect("json");
    let sc = v["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|r| r["kind"] == "Sidecar")
        .unwrap_or_else(|| panic!("the Sidecar in {report}"));
    assert_eq!(sc["status"], "applied_with_warnings", "{report}");
    assert_eq!(sc["problems"][0]["code"], "DP1020", "{report}");
    assert_eq!(
        sc["problems"][0]["path"], "inboundConnectionPool",
        "{report}"
    );
    wait_for("the problem in /metrics", WAIT, || {
        let m = dp.metrics();
        if metric(&m, "deltapilot_rule_problems", &["code=\"DP1020\""]) >= 1.0 {
            Ok(())
        } else {
            Err(m)
        }
    });

    // ALLOW_ANY: under --bind-outbound there is no original destination to
    // pass through to but the listener itself, so the destination comes from
    // `x-envoy-original-dst-host`; without it the request gets 502, never a
    // loop back into the listener.
    write(
        &watch,
        "sidecar.yaml",
        &SIDECAR.replace("REGISTRY_ONLY", "ALLOW_ANY"),
    );
    let far_dst = format!("x-envoy-original-dst-host: 127.0.0.1:{}", far.port);
    wait_for("ALLOW_ANY to pass through by header", WAIT, || {
        is(get_with(svc, "unknown.example.com", &far_dst), 200, "far")
    });
    is(http_get(svc, "/", "unknown.example.com"), 502, "").expect("no header, no loop");
    is(http_get(svc, "/", "hello.test.local"), 200, "hello").expect("own namespace");
    assert!(
        envoy_clusters(&envoy).contains(&"PassthroughCluster".to_string()),
        "{:?}",
        envoy_clusters(&envoy)
    );

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
