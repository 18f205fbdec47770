//! The admin server's guard against a real `deltapilot run`: `/debug/*` behind
//! the bearer token of `--admin-token-file` (re-read when the file changes),
//! `/healthz`, `/readyz` and `/metrics` open, request bodies and times bounded,
//! and an unguarded non-loopback `/debug/*` refused at start.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use support::{Deltapilot, free_port};

/// Sends `head` (and `body`) on a fresh connection and reads until the server
/// closes it or 15 s pass: `(status, whole response, closed by the server)`.
fn raw(port: u16, head: &str, body: &[u8]) -> (u16, String, bool) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect admin");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    s.write_all(head.as_bytes()).expect("write head");
    let _ = s.write_all(body);
    let mut out = Vec::new();
    let closed = s.read_to_end(&mut out).is_ok();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text, closed)
}

fn get(port: u16, path: &str, auth: Option<&str>) -> (u16, String) {
    let auth = auth.map_or(String::new(), |a| format!("authorization: {a}\r\n"));
    let (status, text, _) = raw(
        port,
        &format!("GET {path} HTTP/1.1\r\nhost: localhost\r\n{auth}connection: close\r\n\r\n"),
        b"",
    );
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn start(dir: &std::path::Path, token: &std::path::Path, extra: &[&str]) -> Deltapilot {
    let watch = dir.join("watch");
    std::fs::create_dir_all(&watch).expect("watch");
    let mut flags = vec!["--admin-token-file", token.to_str().expect("utf-8")];
    flags.extend_from_slice(extra);
    Deltapilot::start_with(
        dir,
        &dir.join("data"),
        &watch,
        free_port(),
        free_port(),
        &flags,
    )
}

#[test]
fn debug_views_need_the_token_and_the_probes_do_not() {
    let tmp = tempfile::tempdir().expect("tmp");
    let token = tmp.path().join("token");
    std::fs::write(&token, "first-token\n").expect("token");
    let dp = start(tmp.path(), &token, &[]);
    let port = dp.admin_port;

    let (code, body) = get(port, "/debug/snapshot", None);
    assert_eq!(code, 401, "{body}");
    assert!(
        body.contains("Authorization: Bearer") && body.contains("--admin-token-file"),
        "{body}"
    );
    let (code, body) = get(port, "/debug/config_dump", Some("Bearer wrong"));
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("does not match"), "{body}");
    let (code, body) = get(port, "/debug/snapshot", Some("Bearer first-token"));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"seq\""), "{body}");

    for open in ["/healthz", "/readyz", "/metrics"] {
        let (code, body) = get(port, open, None);
        assert_eq!(code, 200, "{open}: {body}");
    }

    // The CLI sends the token of DELTAPILOT_ADMIN_TOKEN_FILE (the server's
    // own variable), and says why when it has none.
    let cli = |token: Option<&std::path::Path>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_deltapilot"));
        c.args(["proxy-status", "--json", "--admin-addr"])
            .arg(format!("127.0.0.1:{port}"))
            .env_remove("DELTAPILOT_ADMIN_TOKEN_FILE");
        if let Some(t) = token {
            c.env("DELTAPILOT_ADMIN_TOKEN_FILE", t);
        }
        c.output().expect("deltapilot proxy-status runs")
    };
    let out = cli(Some(&token));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"proxies\""));
    let out = cli(None);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("401") && e.contains("Authorization: Bearer"),
        "{e}"
    );

    // A rotated token (the file replaced, as a Secret update does) takes
    // effect at the next request.
    let next = tmp.path().join("token.new");
    std::fs::write(&next, "second-token").expect("token");
    std::fs::rename(&next, &token).expect("rotate");
    assert_eq!(
        get(port, "/debug/snapshot", Some("Bearer first-token")).0,
        401
    );
    assert_eq!(
        get(port, "/debug/snapshot", Some("Bearer second-token")).0,
        200
    );
}

#[test]
fn oversized_bodies_get_413_and_slow_requests_are_closed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let token = tmp.path().join("token");
    std::fs::write(&token, "t0ken").expect("token");
    let dp = start(
        tmp.path(),
        &token,
        &[
            "--admin-max-body-bytes",
            "1024",
            "--admin-request-timeout-secs",
            "2",
        ],
    );
    let port = dp.admin_port;
    let body = vec![b'x'; 4096];
    for path in ["/debug/impact", "/healthz"] {
        let (code, text, _) = raw(
            port,
            &format!(
                "POST {path} HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer t0ken\r\ncontent-length: {}\r\n\r\n",
                body.len()
            ),
            &body,
        );
        assert_eq!(code, 413, "{path}: {text}");
        assert!(text.contains("--admin-max-body-bytes"), "{text}");
    }
    // A body announced and never sent: 408 after the request timeout, and the
    // connection is closed.
    let started = Instant::now();
    let (code, text, closed) = raw(
        port,
        "POST /debug/impact HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer t0ken\r\ncontent-length: 100\r\n\r\n",
        b"{\"kind\"",
    );
    let took = started.elapsed();
    assert_eq!(code, 408, "{text}");
    assert!(closed, "the connection stays open: {text}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(12),
        "closed after {took:?}"
    );
}

#[test]
fn unguarded_debug_views_on_a_non_loopback_address_refuse_the_start() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = Command::new(env!("CARGO_BIN_EXE_deltapilot"))
        .arg("run")
        .arg("--data-dir")
        .arg(tmp.path().join("data"))
        .args(["--xds-addr", "127.0.0.1:0", "--admin-addr", "0.0.0.0:0"])
        .args(["--debug-endpoints", "on"])
        .output()
        .expect("deltapilot runs");
    assert!(!out.status.success(), "started");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("refusing to serve /debug/*")
            && e.contains("--admin-token-file")
            && e.contains("--admin-insecure"),
        "{e}"
    );
}
