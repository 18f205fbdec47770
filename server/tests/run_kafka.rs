//! `deltapilot run --log URI`: two replicas serve one registry from a real
//! Apache Kafka broker. One replica runs the file adapter and appends to
//! the topic; the other runs no adapter at all and serves what it reads. Both
//! must hold the same services, and a change written through the first reaches
//! the second. The broker is required: without `DELTAPILOT_KAFKA_BROKERS` the
//! test fails, it never skips. Also: a bad URI is refused up front, and the
//! `resyncs_pending` gauge reports a resync whose marker copies never all
//! arrived (on a `file://` log given by URI), and the engine's counters of
//! skipped events, held endpoints and failed resources reach `/metrics`.

mod support;

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::{Proc, http_get, kafka_brokers, spawn_replica, wait_for, write_service_entry};

const WAIT: Duration = Duration::from_secs(60);

/// One `deltapilot run` replica on the topic, with extra flags; waits for /readyz.
fn replica(dir: &std::path::Path, name: &str, log: &str, extra: &[&str]) -> (Proc, u16) {
    let (proc, admin_port) = spawn_replica(dir, name, log, extra, &[]);
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], admin_port));
    wait_for(&format!("{name} /readyz"), WAIT, || {
        match http_get(admin, "/readyz", "localhost") {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}; output:\n{}", proc.output())),
        }
    });
    (proc, admin_port)
}

/// The hostnames in a replica's `/debug/registry`.
fn registry(admin_port: u16) -> Result<String, String> {
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], admin_port));
    match http_get(admin, "/debug/registry", "localhost") {
        Ok((200, body)) => Ok(body),
        other => Err(format!("{other:?}")),
    }
}

#[test]
fn two_replicas_serve_one_registry_from_a_kafka_topic() {
    let brokers = kafka_brokers();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    let log = format!(
        "kafka://{brokers}/run-kafka-{}-{nanos}?partitions=3",
        std::process::id()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let mesh = dir.path().join("mesh");
    std::fs::create_dir(&mesh).expect("mesh dir");
    write_service_entry(
        &mesh,
        "alpha.yaml",
        "alpha.test.local",
        8080,
        "HTTP",
        &[9001],
    );

    let watch = mesh.to_string_lossy().into_owned();
    let (_writer, writer_admin) = replica(dir.path(), "writer", &log, &["--watch", &watch]);
    let (mut reader, reader_admin) = replica(dir.path(), "reader", &log, &[]);

    // The adapter-less replica serves what the other one's adapter wrote.
    for admin in [writer_admin, reader_admin] {
        wait_for("alpha in the registry", WAIT, || {
            let body = registry(admin)?;
            if body.contains("alpha.test.local") {
                Ok(())
            } else {
                Err(body)
            }
        });
    }

    // A change made through the writer reaches the reader; a removal too.
    write_service_entry(&mesh, "beta.yaml", "beta.test.local", 9090, "GRPC", &[9002]);
    std::fs::remove_file(mesh.join("alpha.yaml")).expect("remove alpha");
    wait_for("beta added and alpha removed on the reader", WAIT, || {
        let body = registry(reader_admin)?;
        if body.contains("beta.test.local") && !body.contains("alpha.test.local") {
            Ok(())
        } else {
            Err(format!("{body}\nreader output:\n{}", reader.output()))
        }
    });
    // The writer's start-up resync wrote a COMPLETED copy to each of the three
    // partitions; the reader has folded them all, so nothing waits.
    let metrics = http_get(
        std::net::SocketAddr::from(([127, 0, 0, 1], reader_admin)),
        "/metrics",
        "localhost",
    )
    .expect("metrics")
    .1;
    assert!(
        metrics
            .lines()
            .any(|l| l.trim() == "deltapilot_resyncs_pending 0")
            && metrics
                .lines()
                .any(|l| l.trim() == "deltapilot_endpoints_held 0"),
        "{metrics}"
    );
    assert!(
        reader.terminate(Duration::from_secs(20)),
        "reader drains on SIGTERM"
    );
}

/// The gauges follow the state: a log whose last `COMPLETED` marker announces
/// three copies but holds one (its writer died between copies, as a one-partition
/// file log can only show) leaves that source's sweep pending, and an endpoint
/// of a service nobody defines is held; the server says both.
#[test]
fn a_resync_waiting_for_marker_copies_and_a_held_endpoint_show_in_gauges() {
    use deltapilot_log::EventLog;
    use deltapilot_log::file::{FileLog, FileLogOptions};
    use deltapilot_proto::event::Payload;
    use deltapilot_proto::resync_marker::Phase;
    use deltapilot_proto::{Event, ResyncMarker, SCHEMA_VERSION};

    let dir = tempfile::tempdir().expect("tempdir");
    let log_dir = dir.path().join("log");
    let marker = |phase: Phase, copies: u32| Event {
        schema_version: SCHEMA_VERSION,
        source: "k8s:dead-writer".into(),
        generation: 2,
        observed_at_unix_micros: 1,
        payload: Some(Payload::Resync(ResyncMarker {
            phase: phase as i32,
            copies,
        })),
    };
    {
        let log = FileLog::open(&log_dir, FileLogOptions::default()).expect("open log");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let orphan = Event {
            source: "k8s:other".into(),
            payload: Some(Payload::EndpointUpsert(deltapilot_proto::EndpointUpsert {
                key: "ep/k8s/ns/orphan".into(),
                endpoint: Some(deltapilot_proto::Endpoint {
                    address: "10.9.9.9".into(),
                    services: vec![deltapilot_proto::ServiceRef {
                        namespace: "ns".into(),
                        hostname: "nowhere.ns.svc.cluster.local".into(),
                    }],
                    ..Default::default()
                }),
            })),
            ..marker(Phase::Started, 0)
        };
        rt.block_on(log.append(&[
            marker(Phase::Started, 0),
            marker(Phase::Completed, 3),
            orphan,
        ]))
        .expect("append");
    }
    let uri = format!("file://{}", log_dir.display());
    let (_server, admin_port) = replica(dir.path(), "server", &uri, &[]);
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], admin_port));
    wait_for("both gauges at 1", WAIT, || {
        let metrics = http_get(admin, "/metrics", "localhost")?.1;
        let has = |line: &str| metrics.lines().any(|l| l.trim() == line);
        if has("deltapilot_resyncs_pending 1") && has("deltapilot_endpoints_held 1") {
            Ok(())
        } else {
            Err(metrics)
        }
    });
}

#[test]
fn a_bad_log_uri_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_deltapilot"))
        .arg("run")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--log", "kafka://127.0.0.1:9/"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--log kafka://127.0.0.1:9/"), "{err}");
    assert!(
        !dir.path().join("data").join("log").exists(),
        "no embedded log created for a bad --log"
    );
}

/// The engine's counters reach `/metrics`: an event the fold cannot apply (a
/// port number 0) is counted as skipped by its reason, an endpoint of a service
/// nobody defines is counted as held (stored, not dropped), and an assignment
/// whose weights overflow is counted as a resource that was not published.
#[test]
fn skipped_events_held_endpoints_and_failed_resources_are_counted() {
    use deltapilot_log::EventLog;
    use deltapilot_log::file::{FileLog, FileLogOptions};
    use deltapilot_proto::event::Payload;
    use deltapilot_proto::{
        Endpoint, EndpointUpsert, Event, Port, Protocol, SCHEMA_VERSION, Service, ServiceRef,
        ServiceUpsert,
    };

    let dir = tempfile::tempdir().expect("tempdir");
    let log_dir = dir.path().join("log");
    let event = |payload: Payload| Event {
        schema_version: SCHEMA_VERSION,
        source: "files".into(),
        generation: 1,
        observed_at_unix_micros: 1,
        payload: Some(payload),
    };
    let service = |hostname: &str, port: u32| {
        event(Payload::ServiceUpsert(ServiceUpsert {
            service: Some(Service {
                hostname: hostname.into(),
                namespace: "ns".into(),
                ports: vec![Port {
                    name: "http".into(),
                    number: port,
                    protocol: Protocol::Http as i32,
                }],
                ..Default::default()
            }),
        }))
    };
    let endpoint = |key: &str, address: &str, hostname: &str, weight: u32| {
        event(Payload::EndpointUpsert(EndpointUpsert {
            key: key.into(),
            endpoint: Some(Endpoint {
                address: address.into(),
                weight,
                services: vec![ServiceRef {
                    namespace: "ns".into(),
                    hostname: hostname.into(),
                }],
                ..Default::default()
            }),
        }))
    };
    {
        let log = FileLog::open(&log_dir, FileLogOptions::default()).expect("open log");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(log.append(&[
            service("zero.ns.svc.cluster.local", 0),
            service("big.ns.svc.cluster.local", 80),
            endpoint("ep/big/1", "10.0.0.1", "big.ns.svc.cluster.local", u32::MAX),
            endpoint("ep/big/2", "10.0.0.2", "big.ns.svc.cluster.local", u32::MAX),
            endpoint("ep/orphan", "10.9.9.9", "nowhere.ns.svc.cluster.local", 1),
        ]))
        .expect("append");
    }
    let uri = format!("file://{}", log_dir.display());
    let (_server, admin_port) = replica(dir.path(), "server", &uri, &[]);
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], admin_port));
    let metrics = http_get(admin, "/metrics", "localhost").expect("metrics").1;
    let value = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .map(str::trim)
            .unwrap_or_else(|| panic!("{name} missing from:\n{metrics}"))
            .to_string()
    };
    assert_eq!(
        value("deltapilot_engine_events_skipped_total{reason=\"invalid\"}"),
        "1"
    );
    assert_eq!(
        value("deltapilot_engine_events_skipped_total{reason=\"key_conflict\"}"),
        "0"
    );
    assert_eq!(value("deltapilot_engine_endpoint_events_held_total"), "1");
    assert_ne!(value("deltapilot_engine_resource_errors_total"), "0");
    // The valid service and its two endpoints; the held endpoint is counted
    // apart, and the invalid service is skipped.
    assert_eq!(value("deltapilot_engine_events_applied_total"), "3");
    assert!(
        !metrics.contains("reason=\"unknown_service\""),
        "held endpoints are not counted as skipped:\n{metrics}"
    );
}
