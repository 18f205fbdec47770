//! End to end with a real Envoy 1.40 (`DELTAPILOT_ENVOY`), in delta and in SotW
//! mode: a ServiceEntry file → `deltapilot run` → Envoy → two real HTTP backends.
//! Editing the file moves endpoints in Envoy's admin views and moves traffic, and
//! Envoy never rejects an update. A restart of deltapilot on the same data
//! directory resends nothing a delta Envoy already holds (asserted from /metrics).

mod support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use support::{
    Backend, Deltapilot, Envoy, free_port, http_get, metric, wait_for, write_service_entry,
};

const HOST: &str = "hello.test.local";
const WAIT: Duration = Duration::from_secs(60);

/// Which backends answer `n` requests through Envoy's outbound listener.
fn answers(svc: SocketAddr, authority: &str, n: usize) -> Result<BTreeSet<String>, String> {
    let mut seen = BTreeSet::new();
    for _ in 0..n {
        let (status, body) = http_get(svc, "/", authority)?;
        if status != 200 {
            return Err(format!("status {status}: {body}"));
        }
        seen.insert(body);
    }
    Ok(seen)
}

fn expect_backends(
    envoy: &Envoy,
    svc: SocketAddr,
    authority: &str,
    want: &[&str],
    ports: &[u16],
    gone: &[u16],
) {
    let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
    wait_for(
        &format!("Envoy /clusters to list exactly {ports:?}"),
        WAIT,
        || {
            let clusters = envoy.get("/clusters");
            let has = |p: &u16| clusters.contains(&format!("127.0.0.1:{p}::"));
            if ports.iter().all(has) && !gone.iter().any(has) {
                Ok(())
            } else {
                Err(clusters
                    .lines()
                    .filter(|l| l.contains("::127.0.0.1:"))
                    .take(10)
                    .collect::<Vec<_>>()
                    .join("\n"))
            }
        },
    );
    let dump = envoy.get("/config_dump?include_eds");
    for p in ports {
        assert!(
            dump.contains(&format!("\"port_value\": {p}")),
            "config_dump lacks endpoint port {p}"
        );
    }
    for p in gone {
        assert!(
            !dump.contains(&format!("\"port_value\": {p}\n")),
            "config_dump still has removed port {p}"
        );
    }
    wait_for(
        &format!("traffic to reach exactly {want:?} via {authority}"),
        WAIT,
        || {
            let seen = answers(svc, authority, 12)?;
            if seen == want {
                Ok(())
            } else {
                Err(format!("saw {seen:?}"))
            }
        },
    );
}

fn scenario(example: &str, api: &str, reconnect: bool) {
    let tmp = tempfile::tempdir().expect("tmp");
    let (data, watch) = (tmp.path().join("data"), tmp.path().join("watch"));
    std::fs::create_dir_all(&watch).expect("watch dir");
    let (a, b) = (Backend::start("backend-a"), Backend::start("backend-b"));
    let svc_port = free_port();
    write_service_entry(
        &watch,
        "hello.yaml",
        HOST,
        svc_port,
        "HTTP",
        &[a.port, b.port],
    );
    let (xds_port, admin_port) = (free_port(), free_port());
    let mut dp = Deltapilot::start(tmp.path(), &data, &watch, xds_port, admin_port);
    let envoy = Envoy::start(tmp.path(), example, xds_port);
    let svc = SocketAddr::from(([127, 0, 0, 1], svc_port));

    expect_backends(
        &envoy,
        svc,
        HOST,
        &["backend-a", "backend-b"],
        &[a.port, b.port],
        &[],
    );
    // Host with the port works too.
    assert!(answers(svc, &format!("{HOST}:{svc_port}"), 2).is_ok());

    write_service_entry(&watch, "hello.yaml", HOST, svc_port, "HTTP", &[a.port]);
    expect_backends(&envoy, svc, HOST, &["backend-a"], &[a.port], &[b.port]);

    write_service_entry(
        &watch,
        "hello.yaml",
        HOST,
        svc_port,
        "HTTP",
        &[a.port, b.port],
    );
    expect_backends(
        &envoy,
        svc,
        HOST,
        &["backend-a", "backend-b"],
        &[a.port, b.port],
        &[],
    );

    let m = dp.metrics();
    assert!(
        metric(
            &m,
            "deltapilot_xds_pushes_total",
            &[&format!("api=\"{api}\"")]
        ) > 0.0,
        "{m}"
    );
    assert_eq!(metric(&m, "deltapilot_xds_nacks_total", &[]), 0.0, "{m}");
    let rejected = envoy.rejected_updates();
    assert!(
        rejected.is_empty(),
        "Envoy rejected updates: {rejected:?}\n{}",
        dp.proc.output()
    );

    if reconnect {
        assert!(
            dp.proc.terminate(Duration::from_secs(20)),
            "deltapilot did not drain on SIGTERM"
        );
        drop(dp);
        dp = Deltapilot::start(tmp.path(), &data, &watch, xds_port, admin_port);
        wait_for(
            "Envoy to reconnect with initial_resource_versions for every type",
            WAIT,
            || {
                let m = dp.metrics();
                let all = ["cds", "eds", "lds", "rds"].iter().all(|t| {
                    metric(
                        &m,
                        "deltapilot_xds_reconnect_known_resources_total",
                        &[&format!("type=\"{t}\"")],
                    ) > 0.0
                });
                if all {
                    Ok(())
                } else {
                    Err(m
                        .lines()
                        .filter(|l| l.contains("xds_"))
                        .collect::<Vec<_>>()
                        .join("\n"))
                }
            },
        );
        // An endpoint-only change after the reconnect: if the reconnect had resent
        // anything, CDS/LDS/RDS counters would not be 0 afterwards.
        write_service_entry(&watch, "hello.yaml", HOST, svc_port, "HTTP", &[b.port]);
        expect_backends(&envoy, svc, HOST, &["backend-b"], &[b.port], &[a.port]);
        let m = dp.metrics();
        assert_eq!(
            metric(&m, "deltapilot_xds_reconnect_resent_resources_total", &[]),
            0.0,
            "{m}"
        );
        for t in ["cds", "lds", "rds"] {
            let sent = metric(
                &m,
                "deltapilot_xds_resources_sent_total",
                &[&format!("type=\"{t}\"")],
            );
            assert_eq!(
                sent, 0.0,
                "{t} resent after a reconnect with nothing changed:\n{m}"
            );
        }
        assert_eq!(
            metric(&m, "deltapilot_xds_resources_sent_total", &["type=\"eds\""]),
            1.0,
            "{m}"
        );
        let rejected = envoy.rejected_updates();
        assert!(rejected.is_empty(), "Envoy rejected updates: {rejected:?}");
    }
}

#[test]
fn envoy_delta_follows_file_edits_and_reconnects_without_resends() {
    scenario("envoy-delta.yaml", "delta", true);
}

#[test]
fn envoy_sotw_follows_file_edits() {
    scenario("envoy-sotw.yaml", "sotw", false);
}
