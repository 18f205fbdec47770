//! A real `deltapilot run` process: its connection flags reach both listeners
//! (issue 29, point 4), a real Envoy keeps its stream through keepalive pings
//! and past the handshake timeout, and `/debug/*` on a non-loopback admin
//! address is warned about at start (point 11).
//!
//! The non-loopback case uses an address of TEST-NET-3 (203.0.113.0/24, never
//! assigned to a host): the warning is logged before anything binds, so the
//! test reads it from stderr without ever listening beyond loopback; the
//! process then fails to bind and exits.

mod support;

use std::io::Read;
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use support::{Backend, Deltapilot, Envoy, Proc, free_port, metric, wait_for, write_service_entry};

/// Connects to `port` on loopback, sends nothing, and returns how long the
/// server took to close the connection (`None`: still open after `within`).
fn silent_connection_closed(port: u16, within: Duration) -> Option<Duration> {
    let since = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(within)).expect("timeout");
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some(since.elapsed()),
            // The server's HTTP/2 SETTINGS, on the xDS port.
            Ok(_) if since.elapsed() < within => {}
            Ok(_) => return None,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return None;
            }
            Err(_) => return Some(since.elapsed()),
        }
    }
}

#[test]
fn connection_flags_reach_both_listeners_and_loopback_debug_is_not_warned_about() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (data, watch) = (tmp.path().join("data"), tmp.path().join("watch"));
    std::fs::create_dir_all(&watch).expect("watch dir");
    let (xds_port, admin_port) = (free_port(), free_port());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_deltapilot"));
    cmd.arg("run")
        .arg("--xds-addr")
        .arg(format!("127.0.0.1:{xds_port}"))
        .arg("--admin-addr")
        .arg(format!("127.0.0.1:{admin_port}"))
        .arg("--data-dir")
        .arg(&data)
        .arg("--watch")
        .arg(&watch)
        .arg("--debug-endpoints")
        .arg("on")
        .arg("--xds-handshake-timeout-secs")
        .arg("1")
        .arg("--admin-idle-timeout-secs")
        .arg("1")
        .env("DELTAPILOT_ADMIN_MAX_CONNECTIONS_PER_SOURCE", "4");
    let dp = Deltapilot {
        proc: Proc::spawn("deltapilot", cmd, tmp.path().join("deltapilot.log")),
        xds_port,
        admin_port,
    };
    wait_for(
        "deltapilot /readyz",
        Duration::from_secs(60),
        || match support::http_get(dp.admin(), "/readyz", "localhost") {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}; output:\n{}", dp.proc.output())),
        },
    );
    let timeout = Duration::from_secs(1);
    for (what, port) in [("xds", xds_port), ("admin", admin_port)] {
        let after = silent_connection_closed(port, 2 * timeout)
            .unwrap_or_else(|| panic!("a silent {what} connection is still open after 2 s"));
        assert!(
            after >= timeout,
            "{what}: closed after {after:?}, before the timeout"
        );
    }
    // Five silent admin connections from 127.0.0.1: the fifth is over the cap
    // set through the environment and closed at once.
    let held: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(("127.0.0.1", admin_port)).expect("connect"))
        .collect();
    let over = silent_connection_closed(admin_port, Duration::from_millis(900));
    assert!(over.is_some(), "the fifth admin connection was not refused");
    drop(held);
    let text = wait_for("the admin cap to free", Duration::from_secs(10), || {
        support::http_get(dp.admin(), "/metrics", "localhost").map(|(_, b)| b)
    });
    for l in ["listener=\"xds\"", "listener=\"admin\""] {
        assert!(
            metric(&text, "deltapilot_connections_timed_out_total", &[l]) >= 1.0,
            "{l}: {text}"
        );
    }
    // At least the fifth: a scrape tried before the server saw the four close
    // is refused (and counted) too.
    assert!(
        metric(
            &text,
            "deltapilot_connections_refused_total",
            &[
                "listener=\"admin\"",
                "reason=\"max_connections_per_source\""
            ]
        ) >= 1.0,
        "{text}"
    );
    let out = std::fs::read_to_string(&dp.proc.log).expect("log");
    assert!(
        !out.contains("without authentication"),
        "a loopback admin address is warned about:\n{out}"
    );
}

#[test]
fn debug_endpoints_on_a_non_loopback_admin_address_are_warned_about_at_start() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("data");
    let admin = format!("203.0.113.7:{}", free_port());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_deltapilot"));
    cmd.arg("run")
        .arg("--xds-addr")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--admin-addr")
        .arg(&admin)
        .arg("--data-dir")
        .arg(&data)
        .arg("--debug-endpoints")
        .arg("on")
        // Without a token this is refused unless asked for (`admin_security`
        // tests the refusal); asked for, it is served and warned about.
        .arg("--admin-insecure");
    let log = tmp.path().join("deltapilot.log");
    let mut dp = Proc::spawn("deltapilot", cmd, log.clone());
    let out = wait_for("the exposure warning", Duration::from_secs(30), || {
        let out = std::fs::read_to_string(&log).unwrap_or_default();
        if out.contains("without authentication") {
            Ok(out)
        } else {
            Err(out)
        }
    });
    let line = out
        .lines()
        .find(|l| l.contains("without authentication"))
        .expect("the line");
    assert!(line.contains("WARN"), "not a warning: {line}");
    assert!(line.contains(&admin), "does not name the address: {line}");
    for route in [
        "/debug/syncz",
        "/debug/config_dump",
        "/debug/snapshot",
        "/debug/events",
        "/debug/registry",
        "/debug/rules",
        "/debug/impact",
    ] {
        assert!(line.contains(route), "does not name {route}: {line}");
    }
    // The address is no host's: the process cannot listen there and exits.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = dp.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "deltapilot did not exit:\n{}",
            dp.output()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!status.success(), "{}", dp.output());
    assert!(dp.output().contains("cannot listen on"), "{}", dp.output());
}

#[test]
fn a_real_envoy_keeps_its_stream_through_keepalive_pings_and_past_the_handshake_timeout() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (data, watch) = (tmp.path().join("data"), tmp.path().join("watch"));
    std::fs::create_dir_all(&watch).expect("watch dir");
    let (a, b) = (Backend::start("backend-a"), Backend::start("backend-b"));
    let host = "keep.test.local";
    write_service_entry(&watch, "keep.yaml", host, free_port(), "HTTP", &[a.port]);
    let (xds_port, admin_port) = (free_port(), free_port());
    // A ping every second, answered within one, and one second for a first
    // request: short enough that the wait below spans many of each.
    let dp = Deltapilot::start_with(
        tmp.path(),
        &data,
        &watch,
        xds_port,
        admin_port,
        &[
            "--xds-keepalive-interval-secs",
            "1",
            "--xds-keepalive-timeout-secs",
            "1",
            "--xds-handshake-timeout-secs",
            "1",
        ],
    );
    let envoy = Envoy::start(tmp.path(), "envoy-delta.yaml", xds_port);
    let has_port = |p: u16| {
        let clusters = envoy.get("/clusters");
        if clusters.contains(&format!("127.0.0.1:{p}::")) {
            Ok(())
        } else {
            Err(format!("no 127.0.0.1:{p} in Envoy's /clusters"))
        }
    };
    wait_for("Envoy to hold backend a", Duration::from_secs(60), || {
        has_port(a.port)
    });
    std::thread::sleep(Duration::from_secs(5));
    write_service_entry(&watch, "keep.yaml", host, free_port(), "HTTP", &[b.port]);
    wait_for(
        "Envoy to move to backend b",
        Duration::from_secs(60),
        || has_port(b.port),
    );
    let text = dp.metrics();
    let xds = "listener=\"xds\"";
    assert_eq!(
        metric(&text, "deltapilot_connections_accepted_total", &[xds]),
        1.0,
        "Envoy reconnected: {text}"
    );
    assert_eq!(
        metric(&text, "deltapilot_connections_open", &[xds]),
        1.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, "deltapilot_connections_timed_out_total", &[xds]),
        0.0,
        "{text}"
    );
    assert!(
        envoy.rejected_updates().is_empty(),
        "{:?}",
        envoy.rejected_updates()
    );
}
