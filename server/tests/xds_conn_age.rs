//! `--xds-max-connection-age-secs` against a real Envoy (delta ADS): past the
//! age its connection gets a GOAWAY and, after the grace, is closed; Envoy
//! reconnects with `initial_resource_versions`, is sent nothing it holds, and
//! keeps routing. That is how proxies that failed over return to a restarted
//! replica.
//!
//! Needs `DELTAPILOT_ENVOY` (the test command installs it); fails without it.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use support::*;

const HOST: &str = "hello.test.local";
const WAIT: Duration = Duration::from_secs(60);

fn answers_from(svc: SocketAddr, who: &str) -> Result<(), String> {
    match http_get(svc, "/", HOST) {
        Ok((200, body)) if body.contains(who) => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

#[test]
fn an_aged_connection_is_recycled_and_envoy_resumes_with_what_it_holds() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (data, watch) = (tmp.path().join("data"), tmp.path().join("watch"));
    std::fs::create_dir_all(&watch).expect("watch dir");
    let a = Backend::start("backend-a");
    let svc_port = free_port();
    write_service_entry(&watch, "hello.yaml", HOST, svc_port, "HTTP", &[a.port]);
    let (xds_port, admin_port) = (free_port(), free_port());
    let dp = Deltapilot::start_with(
        tmp.path(),
        &data,
        &watch,
        xds_port,
        admin_port,
        &[
            "--xds-max-connection-age-secs",
            "2",
            "--xds-max-connection-age-grace-secs",
            "1",
        ],
    );
    let envoy = Envoy::start(tmp.path(), "envoy-delta.yaml", xds_port);
    let svc = SocketAddr::from(([127, 0, 0, 1], svc_port));
    wait_for("Envoy to route to backend-a", WAIT, || {
        answers_from(svc, "backend-a")
    });

    let sent = |m: &str| {
        ["cds", "eds", "lds", "rds"].map(|t| {
            metric(
                m,
                "deltapilot_xds_resources_sent_total",
                &[&format!("type=\"{t}\"")],
            )
        })
    };
    let m0 = dp.metrics();
    let streams0 = metric(&m0, "deltapilot_xds_streams_total", &["api=\"delta\""]);

    // Two more recycles: each new stream reports every type it holds.
    wait_for(
        "Envoy to reconnect twice more with initial_resource_versions",
        WAIT,
        || {
            let m = dp.metrics();
            let streams = metric(&m, "deltapilot_xds_streams_total", &["api=\"delta\""]);
            let known = metric(
                &m,
                "deltapilot_xds_reconnect_known_resources_total",
                &["type=\"cds\""],
            );
            if streams >= streams0 + 2.0 && known >= 2.0 {
                Ok(())
            } else {
                Err(format!(
                    "streams {streams} (from {streams0}), known clusters {known}"
                ))
            }
        },
    );
    let m = dp.metrics();
    assert_eq!(
        metric(&m, "deltapilot_xds_reconnect_resent_resources_total", &[]),
        0.0,
        "a recycled connection was sent what it held:\n{m}"
    );
    assert_eq!(
        sent(&m),
        sent(&m0),
        "resources sent again after recycles with nothing changed (cds, eds, lds, rds):\n{m}"
    );
    // Traffic never stopped, and a change made now still arrives.
    answers_from(svc, "backend-a").expect("routing after the recycles");
    let b = Backend::start("backend-b");
    write_service_entry(&watch, "hello.yaml", HOST, svc_port, "HTTP", &[b.port]);
    wait_for("Envoy to follow a change after the recycles", WAIT, || {
        answers_from(svc, "backend-b")
    });
    assert_eq!(
        metric(&dp.metrics(), "deltapilot_xds_nacks_total", &[]),
        0.0
    );
    let rejected = envoy.rejected_updates();
    assert!(
        rejected.is_empty(),
        "Envoy rejected updates: {rejected:?}\n{}",
        dp.proc.output()
    );
}
