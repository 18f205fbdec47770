//! Replicas and failover, end to end (issue 31, point 1): three `deltapilot run
//! --log kafka://…` replicas on one topic of a real Apache Kafka broker, the file
//! adapter as its own process writing that topic from a directory of YAML, and
//! three real Envoys (delta ADS), each starting on its own replica and listing all
//! three in its xds cluster (see `fleet_support::bootstrap` for how Envoy picks
//! one and fails over), each proxying HTTP to a real backend through the
//! published service.
//!
//! - A file change reaches every Envoy, and every replica reports the same
//!   snapshot hash at the same log position (`/debug/snapshot`).
//! - SIGKILL of the replica Envoy 0 uses: Envoy 0 reconnects to the next one with
//!   `initial_resource_versions` for every type and is sent nothing it holds
//!   (the survivors' `xds_reconnect_known_resources_total`,
//!   `xds_reconnect_resent_resources_total` and `xds_resources_sent_total`), and
//!   requests through every Envoy, before, during and after, all get 200.
//! - The adapter writes while the replica is down; restarted on the same data
//!   directory it restores its checkpoint (it folds only the records after it:
//!   `engine_events_applied_total`), answers `/readyz` 503 `catching_up` until it
//!   has caught up, then 200, with the others' hash and position.
//! - With `--xds-max-connection-age-secs` on the replicas (a test of its own),
//!   an Envoy whose preferred replica was killed and restarted returns to it
//!   once its aged connection to the fallback is recycled, with what it holds,
//!   and traffic never fails.
//!
//! Kafka (`DELTAPILOT_KAFKA_BROKERS`) and Envoy (`DELTAPILOT_ENVOY`) are required:
//! the test fails, never skips, without them.

mod fleet_support;
mod support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fleet_support::{Replica, Traffic, bootstrap, file_adapter, position_total};
use support::{Backend, Envoy, free_ports, http_get, kafka_brokers, tool, wait_for};

const HOST: &str = "hello.test.local";
/// The service port; its route configuration is named after it.
const SVC_PORT: u16 = 8080;
const WAIT: Duration = Duration::from_secs(30);
const TYPES: [&str; 4] = ["cds", "eds", "lds", "rds"];

/// The backends answering `n` requests through 127.0.0.1:`port`.
fn answers(port: u16, n: usize) -> Result<BTreeSet<String>, String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut seen = BTreeSet::new();
    for _ in 0..n {
        match http_get(addr, "/", HOST)? {
            (200, body) => seen.insert(body),
            other => return Err(format!("{other:?}")),
        };
    }
    Ok(seen)
}

/// Waits until traffic through every Envoy reaches exactly `want`.
fn expect_backends(listeners: &[u16], want: &[&str]) {
    let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
    for (i, port) in listeners.iter().enumerate() {
        wait_for(&format!("envoy-{i} to reach {want:?}"), WAIT, || {
            let seen = answers(*port, 8)?;
            if seen == want {
                Ok(())
            } else {
                Err(format!("saw {seen:?}"))
            }
        });
    }
}

/// Waits until every running replica reports the same position and hash, with
/// the position past `after` records; returns them.
fn converged(replicas: &[&Replica], after: u64) -> (String, String) {
    wait_for("every replica at one position and hash", WAIT, || {
        let snaps = replicas
            .iter()
            .map(|r| r.snapshot().map(|s| (r.name.clone(), s)))
            .collect::<Result<Vec<_>, _>>()?;
        let first = &snaps[0].1;
        if position_total(&first.0) > after && snaps.iter().all(|(_, s)| s == first) {
            Ok(first.clone())
        } else {
            Err(format!("{snaps:?}"))
        }
    })
}

/// Each replica's `xds_resources_sent_total` per type.
fn sent(r: &Replica) -> Vec<f64> {
    let m = r.metrics();
    TYPES
        .iter()
        .map(|t| {
            support::metric(
                &m,
                "deltapilot_xds_resources_sent_total",
                &[&format!("type=\"{t}\"")],
            )
        })
        .collect()
}

#[test]
fn envoys_fail_over_between_kafka_replicas_and_a_restarted_replica_catches_up() {
    let began = Instant::now();
    let brokers = kafka_brokers();
    tool("DELTAPILOT_ENVOY");
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    let log = format!(
        "kafka://{brokers}/failover-{}-{nanos}?partitions=3",
        std::process::id()
    );
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let mesh = dir.join("mesh");
    std::fs::create_dir(&mesh).expect("mesh dir");
    let (a, b) = (Backend::start("backend-a"), Backend::start("backend-b"));
    support::write_service_entry(&mesh, "hello.yaml", HOST, SVC_PORT, "HTTP", &[a.port]);

    // The adapter first: it creates the topic and writes its resync.
    let _adapter = file_adapter(dir, &mesh, &log);
    let ports = free_ports(12);
    let mut replicas: Vec<Replica> = (0..3)
        .map(|i| Replica::new(dir, &format!("replica-{i}"), &log, ports[i], ports[3 + i]))
        .collect();
    for r in &mut replicas {
        r.spawn();
    }
    for r in &replicas {
        wait_for(&format!("{} /readyz 200", r.name), WAIT, || {
            match r.get("/readyz") {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{other:?}\n{}", r.output())),
            }
        });
    }
    let (_, first_hash) = converged(&replicas.iter().collect::<Vec<_>>(), 0);

    // Envoy i prefers replica i, then i+1, then i+2.
    let listeners = &ports[6..9];
    let envoys: Vec<Envoy> = (0..3)
        .map(|i| {
            let order: Vec<(u16, u16)> = (0..3)
                .map(|k| {
                    let r = &replicas[(i + k) % 3];
                    (r.xds_port, r.admin_port)
                })
                .collect();
            let text = bootstrap(
                &format!("envoy-{i}"),
                listeners[i],
                ports[9 + i],
                &SVC_PORT.to_string(),
                &order,
            );
            Envoy::boot(dir, &format!("envoy-{i}.yaml"), &text, ports[9 + i])
        })
        .collect();
    expect_backends(listeners, &["backend-a"]);
    for (i, r) in replicas.iter().enumerate() {
        let want = vec![(format!("envoy-{i}"), true)];
        wait_for(
            &format!("envoy-{i} alone on {}, synced", r.name),
            WAIT,
            || {
                let got = r.proxies()?;
                if got == want {
                    Ok(())
                } else {
                    Err(format!("{got:?}"))
                }
            },
        );
    }

    // A change reaches every Envoy, and every replica agrees on the result.
    support::write_service_entry(
        &mesh,
        "hello.yaml",
        HOST,
        SVC_PORT,
        "HTTP",
        &[a.port, b.port],
    );
    expect_backends(listeners, &["backend-a", "backend-b"]);
    let (pos, hash) = converged(&replicas.iter().collect::<Vec<_>>(), 0);
    assert_ne!(hash, first_hash, "the change moved the hash");
    let records = position_total(&pos);
    wait_for(
        "replica-0 to checkpoint the current position",
        WAIT,
        || match replicas[0].newest_checkpoint() {
            Some(n) if n == records => Ok(()),
            other => Err(format!("newest checkpoint {other:?}, position {pos}")),
        },
    );
    for r in &replicas {
        assert_eq!(
            r.metric("deltapilot_xds_reconnect_known_resources_total", &[]),
            0.0
        );
    }
    let sent_before: Vec<Vec<f64>> = replicas[1..].iter().map(sent).collect();

    // kill -9 the replica Envoy 0 is on, with traffic through every Envoy.
    let traffic: Vec<Traffic> = listeners.iter().map(|p| Traffic::start(*p, HOST)).collect();
    std::thread::sleep(Duration::from_millis(300));
    let killed_at = Instant::now();
    replicas[0].kill9();
    let (r1, r2) = (&replicas[1], &replicas[2]);
    wait_for(
        "envoy-0 on replica-1 with initial_resource_versions for every type, synced",
        WAIT,
        || {
            let known: Vec<f64> = TYPES
                .iter()
                .map(|t| {
                    r1.metric(
                        "deltapilot_xds_reconnect_known_resources_total",
                        &[&format!("type=\"{t}\"")],
                    )
                })
                .collect();
            let proxies = r1.proxies()?;
            let on = proxies
                .iter()
                .any(|(id, synced)| id == "envoy-0" && *synced);
            if on && known.iter().all(|k| *k > 0.0) {
                Ok(())
            } else {
                Err(format!("known {known:?}, proxies {proxies:?}"))
            }
        },
    );
    let reconnected_at = Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    let reports: Vec<_> = traffic.into_iter().map(Traffic::finish).collect();
    for (i, r) in reports.iter().enumerate() {
        assert!(
            r.failures.is_empty(),
            "envoy-{i}: failed requests {:?}",
            r.failures
        );
        assert!(
            r.first.is_some_and(|t| t < killed_at) && r.last.is_some_and(|t| t > reconnected_at),
            "envoy-{i}: traffic did not span the failover ({} requests)",
            r.ok
        );
    }
    // Nothing Envoy 0 already held was sent to it: no resource at all went
    // out of the survivors for the reconnect.
    for (r, before) in [r1, r2].into_iter().zip(&sent_before) {
        assert_eq!(
            r.metric("deltapilot_xds_reconnect_resent_resources_total", &[]),
            0.0,
            "{}",
            r.name
        );
        assert_eq!(
            &sent(r),
            before,
            "{} sent resources for the reconnect",
            r.name
        );
    }
    assert_eq!(
        r2.metric("deltapilot_xds_reconnect_known_resources_total", &[]),
        0.0
    );

    // Changes while replica-0 is down: backend-a leaves.
    support::write_service_entry(&mesh, "hello.yaml", HOST, SVC_PORT, "HTTP", &[b.port]);
    expect_backends(listeners, &["backend-b"]);
    let (pos, hash) = converged(&[r1, r2], records);

    // Restarted on its data directory: 503 while catching up, then 200.
    replicas[0].spawn();
    let (r0, r1) = (&replicas[0], &replicas[1]);
    let states = r0.readiness_until_ready(WAIT);
    assert_eq!(
        states.first(),
        Some(&(503, "catching_up".to_string())),
        "{states:?}"
    );
    assert_eq!(states.last().map(|s| s.0), Some(200), "{states:?}");
    assert_eq!(
        r0.snapshot().expect("snapshot"),
        (pos, hash),
        "replica-0 once ready"
    );
    let applied = |r: &Replica| r.metric("deltapilot_engine_events_applied_total", &[]);
    let (restored, full) = (applied(r0), applied(r1));
    assert!(
        restored > 0.0 && restored < full,
        "replica-0 folded {restored} events after its checkpoint, replica-1 {full} in all"
    );
    assert_eq!(
        r0.metric("deltapilot_checkpoint_failures_total", &["restore"]),
        0.0
    );
    for (i, e) in envoys.iter().enumerate() {
        assert!(
            e.rejected_updates().is_empty(),
            "envoy-{i}: {:?}",
            e.rejected_updates()
        );
    }
    let known: Vec<f64> = TYPES
        .iter()
        .map(|t| {
            r1.metric(
                "deltapilot_xds_reconnect_known_resources_total",
                &[&format!("type=\"{t}\"")],
            )
        })
        .collect();
    let requests: Vec<usize> = reports.iter().map(|r| r.ok).collect();
    eprintln!(
        "failover: {requests:?} requests (all 200) through the Envoys across the kill; \
         reconnect {:?} after it, known resources {known:?} ({TYPES:?}); replica-0's \
         /readyz {states:?}, {restored} events folded after its checkpoint ({full} in \
         all); {:?} in all",
        reconnected_at - killed_at,
        began.elapsed()
    );
}

/// Seconds after which a replica sends an xDS connection a GOAWAY in
/// [`envoys_return_to_their_restarted_preferred_replica`]: short, so that the
/// return happens within the test's waits.
const MAX_AGE_SECS: &str = "3";

/// Point 1's last step with `--xds-max-connection-age-secs` on the replicas:
/// after its preferred replica (priority 0 of its xds cluster) is killed and
/// restarted, Envoy's aged connection to the fallback is recycled and it
/// returns to the preferred one, which sends it nothing it holds, and traffic
/// never fails.
#[test]
fn envoys_return_to_their_restarted_preferred_replica() {
    let brokers = kafka_brokers();
    tool("DELTAPILOT_ENVOY");
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    let log = format!(
        "kafka://{brokers}/return-{}-{nanos}?partitions=1",
        std::process::id()
    );
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let mesh = dir.join("mesh");
    std::fs::create_dir(&mesh).expect("mesh dir");
    let a = Backend::start("backend-a");
    support::write_service_entry(&mesh, "hello.yaml", HOST, SVC_PORT, "HTTP", &[a.port]);
    let _adapter = file_adapter(dir, &mesh, &log);
    let ports = free_ports(6);
    let mut replicas: Vec<Replica> = (0..2)
        .map(|i| {
            let mut r = Replica::new(dir, &format!("replica-{i}"), &log, ports[i], ports[2 + i]);
            r.extra = [
                "--xds-max-connection-age-secs",
                MAX_AGE_SECS,
                "--xds-max-connection-age-grace-secs",
                "1",
            ]
            .map(String::from)
            .to_vec();
            r
        })
        .collect();
    for r in &mut replicas {
        r.spawn();
    }
    for r in &replicas {
        r.readiness_until_ready(WAIT);
    }
    let order: Vec<(u16, u16)> = replicas
        .iter()
        .map(|r| (r.xds_port, r.admin_port))
        .collect();
    let text = bootstrap("envoy-0", ports[4], ports[5], &SVC_PORT.to_string(), &order);
    let envoy = Envoy::boot(dir, "envoy-0.yaml", &text, ports[5]);
    expect_backends(&ports[4..5], &["backend-a"]);
    let on = |r: &Replica| -> Result<bool, String> {
        Ok(r.proxies()?
            .iter()
            .any(|(id, synced)| id == "envoy-0" && *synced))
    };
    wait_for("envoy-0 on replica-0", WAIT, || match on(&replicas[0])? {
        true => Ok(()),
        false => Err(replicas[0]
            .proxies()
            .map(|p| format!("{p:?}"))
            .unwrap_or_default()),
    });

    let traffic = Traffic::start(ports[4], HOST);
    replicas[0].kill9();
    wait_for("envoy-0 on replica-1", WAIT, || match on(&replicas[1])? {
        true => Ok(()),
        false => Err(replicas[1]
            .proxies()
            .map(|p| format!("{p:?}"))
            .unwrap_or_default()),
    });
    replicas[0].spawn();
    replicas[0].readiness_until_ready(WAIT);
    let (r0, r1) = (&replicas[0], &replicas[1]);
    wait_for("envoy-0 back on replica-0, off replica-1", WAIT, || {
        let (back, still) = (on(r0)?, r1.proxies()?.iter().any(|(id, _)| id == "envoy-0"));
        if back && !still {
            Ok(())
        } else {
            Err(format!("on replica-0 {back}, on replica-1 {still}"))
        }
    });
    let report = traffic.finish();
    assert!(
        report.failures.is_empty() && report.ok > 0,
        "failed requests {:?} ({} ok)",
        report.failures,
        report.ok
    );
    // It came back with what it held, and the restarted replica, at the same
    // state, resent none of it.
    for t in TYPES {
        let label = format!("type=\"{t}\"");
        assert!(
            r0.metric("deltapilot_xds_reconnect_known_resources_total", &[&label]) > 0.0,
            "{t}: {}",
            r0.metrics()
        );
    }
    assert_eq!(
        r0.metric("deltapilot_xds_reconnect_resent_resources_total", &[]),
        0.0
    );
    assert!(
        envoy.rejected_updates().is_empty(),
        "{:?}",
        envoy.rejected_updates()
    );
}
