//! End to end with real Envoys (`DELTAPILOT_ENVOY`), delta and SotW: a
//! VirtualService of namespace `test` with `exportTo: ["."]` sends
//! `hello.test.local` to the `v1` backend, for `test`'s sidecars only.
//! - A sidecar Envoy of `test` gets `v1` by real HTTP; its view key (in
//!   `/debug/syncz`) names the rule it sees.
//! - A sidecar Envoy of `other` (started after the first stops: under
//!   `--bind-outbound` both would bind the same listener address) gets the
//!   plain `hello` backend, on the default view.
//! - Re-exporting the rule to `other` moves that Envoy into the rule's view
//!   while it stays connected: it gets `v1` too.
//! - A public VirtualService for `v1.test.local` sends sidecars labelled
//!   `app: canary` (node metadata `LABELS`) to `hello`, the others to `v1`:
//!   the first Envoy (no labels) gets `v1`, the second (`app: canary`) `hello`.
//!
//! DestinationRule `exportTo` (`dr_scenario`): a public VirtualService sends
//! `ab.test.local` to its subset `first`. A public DestinationRule of
//! namespace `mesh` defines `first` as the second backend; one of `test`,
//! exported to `.`, as the first backend (and so wins for `test`'s sidecars).
//! - A sidecar Envoy of `test` gets the first backend only;
//! - one of `other` (started after the first stops) the second only;
//! - re-exporting `test`'s rule to `other` moves it to the first backend
//!   while it stays connected.
//!
//! Envoy never rejects an update and no NACK is counted.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use support::{
    Backend, Deltapilot, Envoy, free_port, http_get, metric, wait_for, write_service_entry,
};

const WAIT: Duration = Duration::from_secs(60);

fn node(ns: &str) -> String {
    format!("sidecar~127.0.0.1~app-1.{ns}~{ns}.svc.cluster.local")
}

fn rule(export: &str) -> String {
    format!(
        r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: hello
  namespace: test
spec:
  hosts:
    - hello.test.local
  exportTo: [{export}]
  http:
    - route:
        - destination:
            host: v1.test.local
"#
    )
}

const CANARY: &str = r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: canary
  namespace: test
spec:
  hosts:
    - v1.test.local
  http:
    - match:
        - sourceLabels:
            app: canary
      route:
        - destination:
            host: hello.test.local
    - route:
        - destination:
            host: v1.test.local
"#;

fn write(dir: &Path, file: &str, yaml: &str) {
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, yaml).expect("write");
    std::fs::rename(&tmp, dir.join(file)).expect("rename");
}

fn is(got: Result<(u16, String), String>, status: u16, body: &str) -> Result<(), String> {
    match got {
        Ok((s, b)) if s == status && b == body => Ok(()),
        other => Err(format!("want {status} {body:?}, got {other:?}")),
    }
}

/// The view keys `/debug/syncz` shows, one per connected proxy.
fn view_keys(dp: &Deltapilot) -> Vec<String> {
    let syncz = http_get(dp.admin(), "/debug/syncz", "localhost")
        .expect("syncz")
        .1;
    let v: serde_json::Value = serde_json::from_str(&syncz).expect("json");
    v["proxies"]
        .as_array()
        .expect("proxies")
        .iter()
        .filter_map(|p| p["view_key"].as_str().map(str::to_owned))
        .collect()
}

fn no_rejections(envoy: &Envoy) {
    let rejected = envoy.rejected_updates();
    assert!(
        rejected.is_empty(),
        "Envoy rejected updates: {rejected:?}\n{}",
        envoy.proc.output()
    );
}

/// A temporary directory with the server's data and watch directories and
/// one directory per Envoy (`envoy-test`, `envoy-other`), all but data made.
fn dirs() -> (tempfile::TempDir, [std::path::PathBuf; 4]) {
    let tmp = tempfile::tempdir().expect("tmp");
    let [data, watch, first, second] =
        ["data", "watch", "envoy-test", "envoy-other"].map(|d| tmp.path().join(d));
    for d in [&watch, &first, &second] {
        std::fs::create_dir_all(d).expect("dir");
    }
    (tmp, [data, watch, first, second])
}

fn scenario(example: &str) {
    let (tmp, [data, watch, first_dir, second_dir]) = dirs();
    let (hello, one) = (Backend::start("hello"), Backend::start("v1"));
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
    write(&watch, "rule.yaml", &rule(r#"".""#));
    write(&watch, "canary.yaml", CANARY);
    let (xds_port, admin_port) = (free_port(), free_port());
    let dp = Deltapilot::start(tmp.path(), &data, &watch, xds_port, admin_port);
    let svc = SocketAddr::from(([127, 0, 0, 1], port));
    let get = || http_get(svc, "/", "hello.test.local");
    let get_v1 = || http_get(svc, "/", "v1.test.local");

    let mut first = Envoy::start_as(&first_dir, example, xds_port, Some(&node("test")));
    wait_for("test's sidecar to follow its rule", WAIT, || {
        is(get(), 200, "v1")?;
        is(get_v1(), 200, "v1")
    });
    assert_eq!(view_keys(&dp), ["default/sidecar+sees/test/hello"]);
    no_rejections(&first);
    assert!(first.proc.terminate(WAIT), "the first Envoy stops");
    drop(first);

    let second = Envoy::start_labelled(
        &second_dir,
        example,
        xds_port,
        Some(&node("other")),
        &[("app", "canary")],
    );
    wait_for("other's sidecar to route by default", WAIT, || {
        is(get(), 200, "hello")?;
        is(get_v1(), 200, "hello")
    });
    wait_for(
        "only the second Envoy connected",
        WAIT,
        || match view_keys(&dp) {
            k if k == ["default/sidecar+labels/app=canary"] => Ok(()),
            k => Err(format!("{k:?}")),
        },
    );
    for _ in 0..5 {
        is(get(), 200, "hello").expect("the rule is not exported to other");
        is(get_v1(), 200, "hello").expect("the canary block applies to it");
    }

    write(&watch, "rule.yaml", &rule(r#"".", "other""#));
    wait_for("the re-exported rule to reach other", WAIT, || {
        is(get(), 200, "v1")
    });
    is(get_v1(), 200, "hello").expect("still a canary");
    assert_eq!(
        view_keys(&dp),
        ["default/sidecar+sees/test/hello+labels/app=canary"]
    );

    let m = dp.metrics();
    assert_eq!(metric(&m, "deltapilot_xds_nacks_total", &[]), 0.0, "{m}");
    no_rejections(&second);
}

fn destination_rule(ns: &str, name: &str, idx: u8, export: &str) -> String {
    format!(
        r#"apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: {name}
  namespace: {ns}
spec:
  host: ab.test.local
  exportTo: [{export}]
  subsets:
    - name: first
      labels:
        idx: "{idx}"
"#
    )
}

const TO_FIRST: &str = r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: ab
  namespace: test
spec:
  hosts:
    - ab.test.local
  http:
    - route:
        - destination:
            host: ab.test.local
            subset: first
"#;

/// Ten requests all answered by `who`.
fn only(get: impl Fn() -> Result<(u16, String), String>, who: &str) -> Result<(), String> {
    for _ in 0..10 {
        is(get(), 200, who)?;
    }
    Ok(())
}

fn dr_scenario(example: &str) {
    let (tmp, [data, watch, first_dir, second_dir]) = dirs();
    let (one, two) = (Backend::start("one"), Backend::start("two"));
    let port = free_port();
    write_service_entry(
        &watch,
        "ab.yaml",
        "ab.test.local",
        port,
        "HTTP",
        &[one.port, two.port],
    );
    write(&watch, "vs.yaml", TO_FIRST);
    write(
        &watch,
        "dr-mesh.yaml",
        &destination_rule("mesh", "ab", 1, r#""*""#),
    );
    write(
        &watch,
        "dr-test.yaml",
        &destination_rule("test", "ab", 0, r#"".""#),
    );
    let (xds_port, admin_port) = (free_port(), free_port());
    let dp = Deltapilot::start(tmp.path(), &data, &watch, xds_port, admin_port);
    let svc = SocketAddr::from(([127, 0, 0, 1], port));
    let get = || http_get(svc, "/", "ab.test.local");

    let mut first = Envoy::start_as(&first_dir, example, xds_port, Some(&node("test")));
    wait_for("test's sidecar to follow test's rule", WAIT, || {
        only(get, "one")
    });
    assert_eq!(
        view_keys(&dp),
        ["default/sidecar+sees/destination_rule/test/ab,destination_rule/test/ab#own"]
    );
    no_rejections(&first);
    assert!(first.proc.terminate(WAIT), "the first Envoy stops");
    drop(first);

    let second = Envoy::start_as(&second_dir, example, xds_port, Some(&node("other")));
    wait_for("other's sidecar to follow the public rule", WAIT, || {
        only(get, "two")
    });
    wait_for(
        "only the second Envoy connected",
        WAIT,
        || match view_keys(&dp) {
            k if k == ["default/sidecar"] => Ok(()),
            k => Err(format!("{k:?}")),
        },
    );

    write(
        &watch,
        "dr-test.yaml",
        &destination_rule("test", "ab", 0, r#"".", "other""#),
    );
    wait_for("the re-exported rule to reach other", WAIT, || {
        only(get, "one")
    });
    assert_eq!(
        view_keys(&dp),
        ["default/sidecar+sees/destination_rule/test/ab"]
    );
    let m = dp.metrics();
    assert_eq!(metric(&m, "deltapilot_xds_nacks_total", &[]), 0.0, "{m}");
    no_rejections(&second);
}

#[test]
fn envoy_delta_honours_destination_rule_export_to() {
    dr_scenario("envoy-delta.yaml");
}

#[test]
fn envoy_sotw_honours_destination_rule_export_to() {
    dr_scenario("envoy-sotw.yaml");
}

#[test]
fn envoy_delta_honours_export_to() {
    scenario("envoy-delta.yaml");
}

#[test]
fn envoy_sotw_honours_export_to() {
    scenario("envoy-sotw.yaml");
}
