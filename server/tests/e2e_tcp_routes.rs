//! End to end with a real Envoy 1.40 (`DELTAPILOT_ENVOY`), delta and SotW:
//! VirtualService `tcp` and `tls` routes on a sidecar's TCP ports, through
//! `deltapilot run` and its file adapter.
//! - `tcp`: connections to a TCP service go to its own backend without a
//!   rule; a rule's default route sends them elsewhere; a `destinationSubnets`
//!   match that does not cover the dialled address is passed over, one that
//!   does wins; a 50/50 split reaches both destinations; a route whose match
//!   block names `sourceLabels` the Envoy (node metadata `LABELS`) does not
//!   have is passed over, one it has forwards it.
//! - `tls`: on a TLS port, a route matched on SNI forwards the untouched TLS
//!   connection to another backend (`openssl s_server`, whose certificate the
//!   client verifies), and other names keep going to the port's owner.
//!
//! Envoy never rejects an update.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use support::{
    Backend, Deltapilot, Envoy, Proc, curl_tls, free_port, http_get, metric, raw_http_body,
    wait_for, write_service_entry,
};

const WAIT: Duration = Duration::from_secs(60);

/// Connections sent to measure the split.
const SPLIT_CONNECTIONS: usize = 60;

fn write_rule(dir: &Path, yaml: &str) {
    let tmp = dir.join(".rules.yaml.tmp");
    std::fs::write(&tmp, yaml).expect("write rule");
    std::fs::rename(&tmp, dir.join("rules.yaml")).expect("rename rule");
}

/// A VirtualService for `db.test.local` with these `tcp` routes.
fn tcp_rule(routes: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: db\n  namespace: test\nspec:\n  hosts: [db.test.local]\n  tcp:\n{routes}"
    )
}

/// Who answers a connection to `addr` (see `support::raw_http_body`).
fn who(addr: SocketAddr) -> Result<String, String> {
    raw_http_body(addr, "db.test.local")
}

fn answers(addr: SocketAddr, want: &str) -> Result<(), String> {
    match who(addr) {
        Ok(b) if b == want => Ok(()),
        other => Err(format!("want {want:?}, got {other:?}")),
    }
}

/// curl over TLS to `port` with SNI `host`, trusting only `ca`.
fn tls_get(host: &str, port: u16, ca: &Path) -> Result<String, String> {
    curl_tls(host, port, ca, "/")
}

/// A TLS backend for `host` on a free port (see `support::tls_backend`).
fn tls_backend(dir: &Path, host: &str) -> (Proc, u16) {
    let port = free_port();
    (support::tls_backend(dir, host, port), port)
}

fn scenario(example: &str) {
    let tmp = tempfile::tempdir().expect("tmp");
    let (data, watch) = (tmp.path().join("data"), tmp.path().join("watch"));
    std::fs::create_dir_all(&watch).expect("watch dir");
    let (db, one, two) = (
        Backend::start("db"),
        Backend::start("v1"),
        Backend::start("v2"),
    );
    let (db_port, v1_port, v2_port, tls_port, other_port) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    write_service_entry(
        &watch,
        "db.yaml",
        "db.test.local",
        db_port,
        "TCP",
        &[db.port],
    );
    write_service_entry(
        &watch,
        "v1.yaml",
        "v1.test.local",
        v1_port,
        "TCP",
        &[one.port],
    );
    write_service_entry(
        &watch,
        "v2.yaml",
        "v2.test.local",
        v2_port,
        "TCP",
        &[two.port],
    );
    let (_a, a_backend) = tls_backend(&tmp.path().join("a"), "a.example.com");
    let (_b, b_backend) = tls_backend(&tmp.path().join("b"), "b.example.com");
    write_service_entry(
        &watch,
        "a.yaml",
        "a.example.com",
        tls_port,
        "TLS",
        &[a_backend],
    );
    write_service_entry(
        &watch,
        "b.yaml",
        "b.example.com",
        other_port,
        "TLS",
        &[b_backend],
    );

    let (xds_port, admin_port) = (free_port(), free_port());
    let dp = Deltapilot::start(tmp.path(), &data, &watch, xds_port, admin_port);
    let envoy = Envoy::start_labelled(tmp.path(), example, xds_port, None, &[("app", "reader")]);
    let sidecar = SocketAddr::from(([127, 0, 0, 1], db_port));
    wait_for("db to answer without rules", WAIT, || {
        answers(sidecar, "db")
    });

    // A default route elsewhere, behind a subnet match that does not cover
    // the dialled address.
    write_rule(
        &watch,
        &tcp_rule(
            "    - match: [{port: PORT, destinationSubnets: [10.0.0.0/8]}]\n      route: [{destination: {host: v2.test.local}}]\n    - route: [{destination: {host: v1.test.local}}]\n"
                .replace("PORT", &db_port.to_string())
                .as_str(),
        ),
    );
    wait_for("the default tcp route to reach v1", WAIT, || {
        answers(sidecar, "v1")
    });

    // A subnet match that covers it wins over the default.
    write_rule(
        &watch,
        &tcp_rule(
            "    - match: [{destinationSubnets: [127.0.0.1/32]}]\n      route: [{destination: {host: v2.test.local}}]\n    - route: [{destination: {host: v1.test.local}}]\n",
        ),
    );
    wait_for("the subnet match to reach v2", WAIT, || {
        answers(sidecar, "v2")
    });

    // A weighted split.
    write_rule(
        &watch,
        &tcp_rule(
            "    - route:\n        - {destination: {host: v1.test.local}, weight: 50}\n        - {destination: {host: v2.test.local}, weight: 50}\n",
        ),
    );
    wait_for("the split to reach v1 again", WAIT, || {
        answers(sidecar, "v1")
    });
    let (mut v1, mut v2) = (0, 0);
    for _ in 0..SPLIT_CONNECTIONS {
        match who(sidecar).as_deref() {
            Ok("v1") => v1 += 1,
            Ok("v2") => v2 += 1,
            other => panic!("split: unexpected answer {other:?}"),
        }
    }
    // Half of 60 is 30, with a standard deviation near 3.9: 12..=48 is more
    // than four deviations either way.
    assert!(
        (12..=48).contains(&v2),
        "a 50/50 split sent {v1} to v1 and {v2} to v2"
    );

    // Source matches: a block for `app: writer` is passed over by this Envoy
    // (labelled `app: reader`); one for `app: reader` forwards it.
    let by_source = |app: &str| {
        tcp_rule(
            &"    - match: [{sourceLabels: {app: APP}}]\n      route: [{destination: {host: v2.test.local}}]\n    - route: [{destination: {host: v1.test.local}}]\n"
                .replace("APP", app),
        )
    };
    write_rule(&watch, &by_source("writer"));
    wait_for("a writer-only block to be passed over", WAIT, || {
        (0..10).try_for_each(|_| answers(sidecar, "v1"))
    });
    write_rule(&watch, &by_source("reader"));
    wait_for("the reader block to forward to v2", WAIT, || {
        (0..10).try_for_each(|_| answers(sidecar, "v2"))
    });

    // TLS: SNI b.example.com on a.example.com's port goes to b's backend;
    // a.example.com itself still reaches a's.
    let (a_ca, b_ca) = (
        tmp.path().join("a").join("tls.crt"),
        tmp.path().join("b").join("tls.crt"),
    );
    wait_for("a's TLS port to reach a without rules", WAIT, || {
        tls_get("a.example.com", tls_port, &a_ca).map(|_| ())
    });
    let tls_rule = format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: sni\n  namespace: test\nspec:\n  hosts: [a.example.com]\n  tls:\n    - match: [{{port: {tls_port}, sniHosts: [b.example.com]}}]\n      route: [{{destination: {{host: b.example.com}}}}]\n"
    );
    let tmp_rule = watch.join(".sni.yaml.tmp");
    std::fs::write(&tmp_rule, tls_rule).expect("write sni rule");
    std::fs::rename(&tmp_rule, watch.join("sni.yaml")).expect("rename sni rule");
    wait_for("SNI b.example.com to reach b's backend", WAIT, || {
        tls_get("b.example.com", tls_port, &b_ca).and_then(|b| {
            b.contains("s_server")
                .then_some(())
                .ok_or_else(|| format!("not s_server: {b}"))
        })
    });
    tls_get("a.example.com", tls_port, &a_ca).expect("other names still reach the port's owner");

    let report = http_get(dp.admin(), "/debug/rules", "localhost")
        .expect("debug rules")
        .1;
    let v: serde_json::Value = serde_json::from_str(&report).expect("json");
    for r in v["rules"].as_array().expect("rules") {
        assert_eq!(r["status"], "applied", "{report}");
    }
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
fn envoy_delta_follows_tcp_and_tls_routes() {
    scenario("envoy-delta.yaml");
}

#[test]
fn envoy_sotw_follows_tcp_and_tls_routes() {
    scenario("envoy-sotw.yaml");
}
