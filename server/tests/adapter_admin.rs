//! The admin server of an adapter running as its own process: a real
//! `deltapilot adapter file` on a real directory, appending to a real embedded
//! log, answers `/healthz` at once, `/readyz` 503 (with the reason) while its
//! first full scan is still running, then 200 once the start-up resync is in the
//! log; `/metrics` carries the adapter metrics under `deltapilot run`'s names
//! and none of a replica's; SIGTERM drains it and it exits 0.
//!
//! The slow first scan is a real one: the watched directory holds a FIFO named
//! like a YAML file, and opening it blocks the scan until the test opens its
//! write end (as a hung network filesystem would).
//!
//! Also: the Helm chart's adapter container (kafka mode), started from its
//! rendered args and environment, answers its probes on the port it declares.

mod deploy_support;
mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::{Proc, free_port, http_get, metric, wait_for, write_service_entry};

const WAIT: Duration = Duration::from_secs(60);

fn adapter(dir: &Path, watch: &Path, log: &Path, admin_port: u16) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_deltapilot"));
    cmd.args(["adapter", "file", "--watch"])
        .arg(watch)
        .arg("--log")
        .arg(format!("file://{}", log.display()))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--admin-addr")
        .arg(format!("127.0.0.1:{admin_port}"))
        .env_remove("DELTAPILOT_ADAPTER_ADMIN_ADDR")
        .env("RUST_LOG", "info");
    Proc::spawn("file-adapter", cmd, dir.join("adapter.log"))
}

fn readyz(addr: SocketAddr) -> Result<(u16, serde_json::Value), String> {
    let (status, body) = http_get(addr, "/readyz", "localhost")?;
    let v =
        serde_json::from_str(&body).map_err(|e| format!("/readyz is not JSON ({e}): {body}"))?;
    Ok((status, v))
}

fn metrics(addr: SocketAddr) -> String {
    http_get(addr, "/metrics", "localhost")
        .map(|(_, b)| b)
        .unwrap_or_default()
}

#[test]
fn the_adapter_is_probed_and_scraped_and_ready_only_after_its_resync() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (watch, log) = (tmp.path().join("watch"), tmp.path().join("log"));
    std::fs::create_dir_all(&watch).expect("watch dir");
    write_service_entry(
        &watch,
        "hello.yaml",
        "hello.test.local",
        8080,
        "HTTP",
        &[9001],
    );
    let fifo = watch.join("a-slow.yaml");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success(), "mkfifo {}", fifo.display());

    let admin_port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], admin_port));
    let mut proc = adapter(tmp.path(), &watch, &log, admin_port);

    wait_for("/healthz 200", WAIT, || {
        match http_get(addr, "/healthz", "localhost") {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}\n{}", proc.output())),
        }
    });
    // The first scan is blocked on the FIFO: not ready, for as long as it is.
    let blocked_until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < blocked_until {
        let (status, v) = readyz(addr).expect("/readyz");
        assert_eq!(status, 503, "{v}\n{}", proc.output());
        assert_eq!(v["ready"], false, "{v}");
        assert_eq!(v["state"], "catching_up", "{v}");
        let reason = v["reasons"][0].as_str().unwrap_or_default();
        assert!(
            reason.contains("file adapter (file) has not appended its start-up resync"),
            "{v}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_for("resync_completed 0 in /metrics", WAIT, || {
        let m = metrics(addr);
        if m.contains("deltapilot_adapter_resync_completed{adapter=\"file\"} 0") {
            Ok(())
        } else {
            Err(m)
        }
    });

    // Let the scan through, and take the FIFO away so no rescan blocks again.
    let writer = std::fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .expect("open the FIFO's write end");
    std::fs::remove_file(&fifo).expect("rm FIFO");
    drop(writer);

    let v = wait_for("/readyz 200", WAIT, || match readyz(addr) {
        Ok((200, v)) => Ok(v),
        other => Err(format!("{other:?}\n{}", proc.output())),
    });
    assert_eq!(v["state"], "caught_up", "{v}");
    assert_eq!(v["ready"], true, "{v}");

    // The metrics `run` exports for its in-process adapters, for this one.
    let m = wait_for("the adapter metrics after the resync", WAIT, || {
        let m = metrics(addr);
        let f = r#"adapter="file""#;
        if metric(&m, "deltapilot_adapter_resync_completed", &[f]) == 1.0
            && metric(&m, "deltapilot_adapter_events_emitted_total", &[f]) >= 3.0
        {
            Ok(m)
        } else {
            Err(m)
        }
    });
    let f = r#"adapter="file""#;
    assert_eq!(
        metric(&m, "deltapilot_adapter_registry_up", &[f]),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "deltapilot_adapter_append_backlog", &[f]),
        0.0,
        "{m}"
    );
    assert!(
        metric(&m, "deltapilot_adapter_view_entities", &[f]) >= 2.0,
        "{m}"
    );
    assert!(
        m.contains("# TYPE deltapilot_adapter_malformed_objects counter"),
        "{m}"
    );
    assert!(
        m.contains("# TYPE deltapilot_adapter_oversized_objects counter"),
        "{m}"
    );
    assert_eq!(metric(&m, "deltapilot_log_connected", &[]), 1.0, "{m}");
    assert!(
        metric(
            &m,
            "deltapilot_log_last_append_success_timestamp_seconds",
            &[]
        ) > 0.0,
        "{m}"
    );
    assert!(
        m.contains(r#"deltapilot_log_append_failures_total{reason="timeout"} 0"#),
        "{m}"
    );
    assert!(
        metric(
            &m,
            "deltapilot_connections_accepted_total",
            &[r#"listener="admin""#]
        ) >= 1.0,
        "{m}"
    );
    // Nothing only a replica has: its alerts (not ready, NACKs, ...) must not
    // fire on an adapter.
    for replica_only in [
        "deltapilot_ready",
        "deltapilot_serving_state",
        "deltapilot_xds_",
    ] {
        assert!(
            !m.contains(replica_only),
            "{replica_only} in the adapter's /metrics:\n{m}"
        );
    }

    // SIGTERM drains it: exit 0, and the port is closed.
    assert!(
        proc.terminate(Duration::from_secs(20)),
        "no exit after SIGTERM\n{}",
        proc.output()
    );
    let status = proc.child.try_wait().expect("wait").expect("exited");
    assert!(status.success(), "{status}\n{}", proc.output());
    assert!(
        proc.output().contains("file adapter stopped"),
        "{}",
        proc.output()
    );
    assert!(
        http_get(addr, "/healthz", "localhost").is_err(),
        "admin still answers"
    );

    // What it appended is in the log: the resync with the service.
    let out = Command::new(env!("CARGO_BIN_EXE_deltapilot"))
        .args(["log", "read", "--log"])
        .arg(format!("file://{}", log.display()))
        .output()
        .expect("deltapilot log read");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("hello.test.local"), "{text}");
    assert!(text.contains("COMPLETED"), "{text}");
}

#[test]
fn an_admin_port_in_use_fails_the_start_with_the_flag_named() {
    let tmp = tempfile::tempdir().expect("tmp");
    let watch = tmp.path().join("watch");
    std::fs::create_dir_all(&watch).expect("watch dir");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let mut proc = adapter(tmp.path(), &watch, &tmp.path().join("log"), port);
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(s) = proc.child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "still running\n{}",
            proc.output()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success(), "{}", proc.output());
    let out = proc.output();
    assert!(
        out.contains(&format!("cannot listen on 127.0.0.1:{port} for admin")),
        "{out}"
    );
    assert!(out.contains("--admin-addr"), "{out}");
    assert!(
        !tmp.path().join("log").exists(),
        "the log was opened before the bind failed"
    );
}

/// The kafka-mode adapter container of the chart, run from its rendered args
/// and environment: the log moved to an embedded one under a temp dir and the
/// cluster to an API server that refuses connections (none can run here). The
/// probes the chart declares answer on the port it declares: `/healthz` 200 and
/// `/readyz` 503, saying that the resync waits for the registry.
#[test]
fn the_rendered_adapter_container_answers_its_probes() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    let text = deploy_support::render_text(
        None,
        &["log.mode=kafka", "log.kafka.brokers={kafka-0.kafka:9092}"],
    )
    .expect("helm template");
    let (_, v) = deploy_support::parse_manifests(&text)
        .into_iter()
        .find(|(_, v)| {
            v["kind"] == "Deployment" && v["metadata"]["name"] == "dp-deltapilot-adapter"
        })
        .expect("the adapter Deployment");
    let d: Deployment = serde_json::from_value(v).expect("a Deployment");
    let pod = d.spec.and_then(|s| s.template.spec).expect("pod spec");
    let c = &pod.containers[0];
    let declared = c
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("admin"))
        .expect("admin port")
        .container_port;

    let tmp = tempfile::tempdir().expect("tmp");
    let refused = free_port();
    let kubeconfig = tmp.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"http://127.0.0.1:{refused}\"}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"
        ),
    )
    .expect("kubeconfig");
    let admin_port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_deltapilot"));
    cmd.args(c.args.iter().flatten());
    for e in c.env.iter().flatten() {
        let value = e.value.clone().unwrap_or_default();
        let value = match e.name.as_str() {
            "DELTAPILOT_LOG" => format!("file://{}", tmp.path().join("log").display()),
            "DELTAPILOT_ADAPTER_ADMIN_ADDR" => {
                assert_eq!(value, format!("0.0.0.0:{declared}"), "the declared port");
                format!("127.0.0.1:{admin_port}")
            }
            _ => match value.strip_prefix(deploy_support::DATA_DIR) {
                Some(rest) => format!("{}{rest}", tmp.path().display()),
                None => value,
            },
        };
        cmd.env(&e.name, value);
    }
    cmd.env("KUBECONFIG", &kubeconfig)
        .env_remove("DELTAPILOT_K8S_KUBECONFIG")
        .env("RUST_LOG", "info");
    let proc = Proc::spawn("rendered adapter", cmd, tmp.path().join("adapter.log"));
    let addr = SocketAddr::from(([127, 0, 0, 1], admin_port));

    for probe in [&c.startup_probe, &c.liveness_probe, &c.readiness_probe] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .expect("an httpGet probe");
        assert_eq!(get.port, IntOrString::String("admin".into()));
        let path = get.path.clone().expect("probe path");
        let want = if path == "/readyz" { 503 } else { 200 };
        let body = wait_for(&format!("{path} {want}"), WAIT, || {
            match http_get(addr, &path, "localhost") {
                Ok((status, body)) if status == want => Ok(body),
                other => Err(format!("{other:?}\n{}", proc.output())),
            }
        });
        if path == "/readyz" {
            assert!(
                body.contains(
                    "kubernetes adapter (k8s:kubernetes) has not appended its start-up resync"
                ),
                "{body}"
            );
        }
    }
}
