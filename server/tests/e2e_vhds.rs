//! End to end with a real Envoy 1.40 (`DELTAPILOT_ENVOY`) over delta ADS and
//! `--route-delivery vhds`: the port's route configuration points at VHDS and
//! each virtual host arrives as a `VirtualHost` resource. Traffic follows the
//! VirtualService; an edit of it is followed by real traffic and sends
//! virtual hosts only, never the route configuration again; Envoy's config
//! dump holds the virtual hosts under their VHDS names; a removed host's
//! virtual host leaves Envoy; and Envoy never rejects an update.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use support::{
    Backend, Deltapilot, Envoy, free_port, http_get, metric, wait_for, write_service_entry,
};

const WAIT: Duration = Duration::from_secs(60);

fn write_rule(dir: &Path, to: &str) {
    let yaml = format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: hello\n  namespace: test\nspec:\n  hosts: [hello.test.local]\n  http:\n    - route:\n        - destination:\n            host: {to}.test.local\n"
    );
    let tmp = dir.join(".rules.yaml.tmp");
    std::fs::write(&tmp, yaml).expect("write rule");
    std::fs::rename(&tmp, dir.join("rules.yaml")).expect("rename rule");
}

/// Waits until `host` on `svc` answers `status` with `body` (any body if empty).
fn expect_answer(svc: SocketAddr, host: &str, status: u16, body: &str) {
    wait_for(
        &format!("{host} to answer {status} {body}"),
        WAIT,
        || match http_get(svc, "/", host) {
            Ok((s, b)) if s == status && (body.is_empty() || b == body) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
}

/// Resources of `ty` (`rds`, `vhds`) deltapilot sent over delta ADS.
fn sent(dp: &Deltapilot, ty: &str) -> f64 {
    let label = format!("type=\"{ty}\"");
    metric(
        &dp.metrics(),
        "deltapilot_xds_resources_sent_total",
        &[label.as_str()],
    )
}

#[test]
fn envoy_delta_gets_virtual_hosts_over_vhds_and_an_edit_sends_only_them() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (data, watch) = (tmp.path().join("data"), tmp.path().join("watch"));
    std::fs::create_dir_all(&watch).expect("watch dir");
    let (hello, one, two) = (
        Backend::start("hello"),
        Backend::start("v1"),
        Backend::start("v2"),
    );
    let port = free_port();
    for (file, host, b) in [
        ("hello.yaml", "hello.test.local", &hello),
        ("v1.yaml", "v1.test.local", &one),
        ("v2.yaml", "v2.test.local", &two),
    ] {
        write_service_entry(&watch, file, host, port, "HTTP", &[b.port]);
    }
    let (xds_port, admin_port) = (free_port(), free_port());
    let flags = ["--route-delivery", "vhds"];
    let dp = Deltapilot::start_with(tmp.path(), &data, &watch, xds_port, admin_port, &flags);
    let envoy = Envoy::start(tmp.path(), "envoy-delta.yaml", xds_port);
    let svc = SocketAddr::from(([127, 0, 0, 1], port));
    expect_answer(svc, "hello.test.local", 200, "hello");

    // Envoy holds the port's configuration in VHDS form, its virtual hosts
    // under their VHDS names.
    let vhost = format!("{port}/hello.test.local:{port}");
    let dump = envoy.get("/config_dump?resource=dynamic_route_configs");
    assert!(
        dump.contains("\"vhds\""),
        "no vhds in the route configuration: {dump}"
    );
    assert!(dump.contains(&format!("\"{vhost}\"")), "no {vhost}: {dump}");

    write_rule(&watch, "v1");
    expect_answer(svc, "hello.test.local", 200, "v1");
    let (rds, vhds) = (sent(&dp, "rds"), sent(&dp, "vhds"));
    assert!(vhds >= 3.0, "the virtual hosts went over VHDS: {vhds}");

    write_rule(&watch, "v2");
    expect_answer(svc, "hello.test.local", 200, "v2");
    wait_for(
        "the edit's VirtualHost to be counted",
        WAIT,
        || match sent(&dp, "vhds") {
            now if now > vhds => Ok(()),
            now => Err(format!("vhds resources sent {now}, before the edit {vhds}")),
        },
    );
    assert_eq!(
        sent(&dp, "rds"),
        rds,
        "a rule edit must not resend the route configuration"
    );

    // A removed host's virtual host leaves Envoy: its requests match no
    // virtual host (404), and the dump no longer names it.
    std::fs::remove_file(watch.join("hello.yaml")).expect("remove hello");
    expect_answer(svc, "hello.test.local", 404, "");
    wait_for("the removed virtual host to leave Envoy", WAIT, || {
        let dump = envoy.get("/config_dump?resource=dynamic_route_configs");
        match dump.contains(&format!("\"{vhost}\"")) {
            false => Ok(()),
            true => Err(format!("{vhost} still dumped")),
        }
    });
    expect_answer(svc, "v1.test.local", 200, "v1");
    assert_eq!(sent(&dp, "rds"), rds, "nor does a removed host");

    let m = dp.metrics();
    assert_eq!(metric(&m, "deltapilot_xds_nacks_total", &[]), 0.0, "{m}");
    let rejected = envoy.rejected_updates();
    assert!(
        rejected.is_empty(),
        "Envoy rejected updates: {rejected:?}\n{}",
        envoy.proc.output()
    );
}
