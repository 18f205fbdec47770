//! End to end with a real Envoy 1.40 (`DELTAPILOT_ENVOY`), delta and SotW: a
//! VirtualService's actions in real traffic, seen by backends that record every
//! request they get. A fault abort answers with its status at its percentage, a
//! fixed delay makes the answer at least that late, a route timeout shorter than
//! the backend gives 504, retries hide a failing first attempt (and `attempts:
//! 0` does not), a mirror copies requests to its backend (at its percentage),
//! rewrite changes the path and authority the backend sees, header edits show
//! on both sides, a CORS preflight from an allowed origin is answered with the
//! allow headers (and one from another origin gets none), and a
//! DestinationRule's outlier detection ejects a failing endpoint. Envoy never rejects an update.

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{Deltapilot, Envoy, free_port, metric, wait_for, write_service_entry};

const WAIT: Duration = Duration::from_secs(60);
const HOST: &str = "act.test.local";

/// Requests sent to measure a percentage.
const SAMPLE: usize = 200;

/// The most requests a recording backend keeps (tests send far fewer).
const RECORD_CAP: usize = 10_000;

/// The fixed delay injected on `/delay`.
const DELAY: Duration = Duration::from_millis(300);

/// How early Envoy's timers may fire by the test's clock (see the delay check).
const TIMER_SLACK: Duration = Duration::from_millis(10);

/// The rules under test: one route per action, chosen by path prefix.
const RULES: &str = r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: act
  namespace: test
spec:
  hosts: [act.test.local]
  http:
    - match: [{uri: {prefix: /abort}}]
      fault: {abort: {httpStatus: 503, percentage: {value: 50}}}
      route: [{destination: {host: main.test.local}}]
    - match: [{uri: {prefix: /delay}}]
      fault: {delay: {fixedDelay: 300ms, percentage: {value: 100}}}
      route: [{destination: {host: main.test.local}}]
    - match: [{uri: {prefix: /slow}}]
      timeout: 200ms
      retries: {attempts: 0}
      route: [{destination: {host: main.test.local}}]
    - match: [{uri: {prefix: /retry}}]
      retries: {attempts: 2, retryOn: 5xx}
      route: [{destination: {host: main.test.local}}]
    - match: [{uri: {prefix: /noretry}}]
      retries: {attempts: 0}
      route: [{destination: {host: main.test.local}}]
    - match: [{uri: {prefix: /mirror}}]
      mirror: {host: mirror.test.local}
      route: [{destination: {host: main.test.local}}]
    - match: [{uri: {prefix: /halfmirror}}]
      mirror: {host: mirror.test.local}
      mirrorPercentage: {value: 50}
      route: [{destination: {host: main.test.local}}]
    - match: [{uri: {prefix: /rewrite}}]
      rewrite: {uri: /new, authority: rewritten.example}
      route: [{destination: {host: main.test.local}}]
    - match: [{uri: {prefix: /headers}}]
      headers:
        request:
          set: {x-set: route}
          add: {x-add: added}
          remove: [x-remove]
        response:
          set: {x-resp-set: set}
          add: {x-resp-add: added}
          remove: [x-backend]
      route:
        - destination: {host: main.test.local}
          headers:
            request: {set: {x-dest: dest}}
    - match: [{uri: {prefix: /cors}}]
      corsPolicy:
        allowOrigins:
          - exact: https://good.example
          - prefix: https://pre.
          - regex: "https://re[0-9]+[.]example"
        allowMethods: [GET, POST]
        allowHeaders: [x-custom]
        exposeHeaders: [x-backend]
        maxAge: 24h
        allowCredentials: true
      route: [{destination: {host: main.test.local}}]
    - route: [{destination: {host: main.test.local}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: pool
  namespace: test
spec:
  host: pool.test.local
  trafficPolicy:
    outlierDetection:
      consecutive5xxErrors: 3
      interval: 1s
      baseEjectionTime: 5m
      maxEjectionPercent: 50
      minHealthPercent: 0
"#;

/// One request as a backend saw it.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    /// Header names lowercased; repeated headers joined with `,`.
    headers: BTreeMap<String, String>,
}

/// How a recording backend answers.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// 200 with its id; `/slow…` sleeps first; a path containing `flaky` fails
    /// (503) the first time it is seen and succeeds after.
    Normal,
    /// 500 to everything.
    Failing,
}

/// An HTTP/1.1 backend that answers with its id in the body and an
/// `x-backend` header, and records every request.
struct Recorder {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
}

impl Recorder {
    fn start(id: &str, mode: Mode) -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind backend");
        let port = listener.local_addr().expect("addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let (stop2, seen2, id) = (stop.clone(), seen.clone(), id.to_owned());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (id, seen) = (id.clone(), seen2.clone());
                std::thread::spawn(move || serve(conn, &id, mode, &seen));
            }
        });
        Recorder { port, seen, stop }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }

    fn count(&self, pred: impl Fn(&Seen) -> bool) -> usize {
        self.seen
            .lock()
            .expect("lock")
            .iter()
            .filter(|s| pred(s))
            .count()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Serves one connection's requests (keep-alive) until it closes.
fn serve(mut conn: TcpStream, id: &str, mode: Mode, seen: &Mutex<Vec<Seen>>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).map(|n| n == 0).unwrap_or(true) {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        let mut headers = BTreeMap::<String, String>::new();
        let mut body_len = 0usize;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).map(|n| n == 0).unwrap_or(true) {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_owned());
                if k == "content-length" {
                    body_len = v.parse().unwrap_or(0);
                }
                headers
                    .entry(k)
                    .and_modify(|old| {
                        old.push(',');
                        old.push_str(&v);
                    })
                    .or_insert(v);
            }
        }
        let mut body = vec![0; body_len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let first_time = {
            let mut s = seen.lock().expect("lock");
            let first = !s.iter().any(|x| x.path == path);
            if s.len() < RECORD_CAP {
                s.push(Seen {
                    path: path.clone(),
                    headers,
                });
            }
            first
        };
        let status = match mode {
            Mode::Failing => "500 Internal Server Error",
            Mode::Normal if path.contains("flaky") && first_time => "503 Service Unavailable",
            Mode::Normal => {
                if path.starts_with("/slow") {
                    std::thread::sleep(Duration::from_secs(2));
                }
                "200 OK"
            }
        };
        let resp = format!(
            "HTTP/1.1 {status}\r\ncontent-length: {}\r\ncontent-type: text/plain\r\nx-backend: {id}\r\n\r\n{id}",
            id.len()
        );
        if conn.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}

/// An answer: status, headers (lowercased names), body.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

/// A GET to `host` through Envoy at `svc` with extra `headers`, over a fresh
/// connection.
fn request(
    svc: SocketAddr,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
) -> Result<Answer, String> {
    request_method(svc, "GET", path, host, headers)
}

/// As [`request`], with any method (and no body).
fn request_method(
    svc: SocketAddr,
    method: &str,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
) -> Result<Answer, String> {
    let mut s = TcpStream::connect_timeout(&svc, Duration::from_secs(2))
        .map_err(|e| format!("connect {svc}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nhost: {host}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let out = read_response(&mut s).map_err(|e| format!("read {path}: {e}"))?;
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status line in {out:?}"))?;
    let mut map = BTreeMap::<String, String>::new();
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            map.entry(k.trim().to_ascii_lowercase())
                .and_modify(|old| {
                    old.push(',');
                    old.push_str(v.trim());
                })
                .or_insert_with(|| v.trim().to_owned());
        }
    }
    Ok(Answer {
        status,
        headers: map,
        body: body.to_owned(),
    })
}

/// One response: up to the end of its `content-length` body, or of the
/// stream. Not to the close: after a local reply Envoy waits for the client to
/// close first (its delayed close), which would make each aborted request slow.
fn read_response(s: &mut TcpStream) -> std::io::Result<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            if len.is_some_and(|n| buf.len() >= end + 4 + n) {
                break;
            }
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

fn get(svc: SocketAddr, path: &str) -> Result<Answer, String> {
    request(svc, path, HOST, &[])
}

fn status_body(a: Result<Answer, String>) -> Result<(u16, String), String> {
    a.map(|a| (a.status, a.body))
}

fn write_file(dir: &Path, name: &str, yaml: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, yaml).expect("write rules");
    std::fs::rename(&tmp, dir.join(name)).expect("rename rules");
}

/// `n` out of [`SAMPLE`] at probability one half is within four standard
/// deviations (about 7 each) of 100.
fn about_half(n: usize) -> bool {
    (70..=130).contains(&n)
}

fn scenario(example: &str) {
    let tmp = tempfile::tempdir().expect("tmp");
    let (data, watch) = (tmp.path().join("data"), tmp.path().join("watch"));
    std::fs::create_dir_all(&watch).expect("watch dir");
    let main = Recorder::start("main", Mode::Normal);
    let mirror = Recorder::start("mirror", Mode::Normal);
    let good = Recorder::start("good", Mode::Normal);
    let bad = Recorder::start("bad", Mode::Failing);
    let port = free_port();
    write_service_entry(&watch, "act.yaml", HOST, port, "HTTP", &[main.port]);
    write_service_entry(
        &watch,
        "main.yaml",
        "main.test.local",
        port,
        "HTTP",
        &[main.port],
    );
    write_service_entry(
        &watch,
        "mirror.yaml",
        "mirror.test.local",
        port,
        "HTTP",
        &[mirror.port],
    );
    write_service_entry(
        &watch,
        "pool.yaml",
        "pool.test.local",
        port,
        "HTTP",
        &[good.port, bad.port],
    );
    let (xds_port, admin_port) = (free_port(), free_port());
    let dp = Deltapilot::start(tmp.path(), &data, &watch, xds_port, admin_port);
    let envoy = Envoy::start(tmp.path(), example, xds_port);
    let svc = SocketAddr::from(([127, 0, 0, 1], port));
    wait_for("act to answer without rules", WAIT, || {
        match status_body(get(svc, "/")) {
            Ok((200, b)) if b == "main" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });

    write_file(&watch, "rules.yaml", RULES);
    wait_for("the rules to apply (the rewrite route)", WAIT, || {
        let before = main.count(|s| s.path.starts_with("/new"));
        let a = get(svc, "/rewrite/probe")?;
        let after = main.count(|s| s.path.starts_with("/new"));
        if a.status == 200 && after > before {
            Ok(())
        } else {
            Err(format!("{a:?}"))
        }
    });

    // Fault abort at 50 %: the aborts come from Envoy, the rest reach main.
    let reached = main.count(|s| s.path.starts_with("/abort"));
    let mut aborted = 0;
    for i in 0..SAMPLE {
        match status_body(get(svc, &format!("/abort/{i}"))) {
            Ok((503, b)) if b == "fault filter abort" => aborted += 1,
            Ok((200, b)) if b == "main" => {}
            other => panic!("abort: unexpected answer {other:?}"),
        }
    }
    assert!(
        about_half(aborted),
        "a 50 % abort aborted {aborted} of {SAMPLE}"
    );
    let passed = main.count(|s| s.path.starts_with("/abort")) - reached;
    assert_eq!(
        passed,
        SAMPLE - aborted,
        "requests not aborted reach the backend, once"
    );

    // Fixed delay: the answer is the backend's, and at least that late.
    let t = Instant::now();
    let a = get(svc, "/delay/1").expect("delay");
    let took = t.elapsed();
    assert_eq!(
        (a.status, a.body.as_str()),
        (200, "main"),
        "delayed request"
    );
    // Envoy's event loop reads a clock cached at the start of each loop turn,
    // so its timer may fire a little before the delay has passed by our clock;
    // the slack is far below the delay, so an undelayed answer still fails.
    assert!(
        took + TIMER_SLACK >= DELAY,
        "a {DELAY:?} fixed delay answered after {took:?}"
    );

    // Route timeout (200 ms) shorter than the backend (2 s): Envoy answers 504.
    let a = get(svc, "/slow/1").expect("timeout");
    assert_eq!(a.status, 504, "route timeout: {a:?}");

    // Retries: the first attempt fails, the retry succeeds, the client sees 200.
    for i in 0..5 {
        let path = format!("/retry/flaky/{i}");
        let a = get(svc, &path).expect("retry");
        assert_eq!((a.status, a.body.as_str()), (200, "main"), "retried {path}");
        assert_eq!(
            main.count(|s| s.path == path),
            2,
            "attempts the backend saw for {path}"
        );
    }
    // `attempts: 0`: no retry, the client sees the failure.
    for i in 0..5 {
        let path = format!("/noretry/flaky/{i}");
        let a = get(svc, &path).expect("noretry");
        assert_eq!(a.status, 503, "not retried {path}: {a:?}");
        assert_eq!(
            main.count(|s| s.path == path),
            1,
            "attempts the backend saw for {path}"
        );
    }

    // Mirror: the client gets main's answer, the mirror gets the copy.
    for i in 0..5 {
        let a = get(svc, &format!("/mirror/{i}")).expect("mirror");
        assert_eq!(
            (a.status, a.body.as_str()),
            (200, "main"),
            "mirrored request"
        );
    }
    wait_for("the mirror to receive every copy", WAIT, || {
        let n = mirror.count(|s| s.path.starts_with("/mirror/"));
        if n == 5 {
            Ok(())
        } else {
            Err(format!("{n} of 5 copies"))
        }
    });
    let copy = mirror
        .seen()
        .into_iter()
        .find(|s| s.path.starts_with("/mirror/"))
        .expect("a copy");
    assert!(
        copy.headers
            .get("host")
            .is_some_and(|h| h.starts_with(HOST) && h.contains("-shadow")),
        "Envoy marks the copy's authority as a shadow: {copy:?}"
    );
    // mirrorPercentage 50: about half the requests are copied.
    for i in 0..SAMPLE {
        let a = get(svc, &format!("/halfmirror/{i}")).expect("halfmirror");
        assert_eq!(a.status, 200, "half-mirrored request: {a:?}");
    }
    let mirrored = wait_for("the half mirror's copies to arrive", WAIT, || {
        let n = mirror.count(|s| s.path.starts_with("/halfmirror/"));
        if n >= 70 {
            Ok(n)
        } else {
            Err(format!("{n} copies"))
        }
    });
    assert!(
        about_half(mirrored),
        "a 50 % mirror copied {mirrored} of {SAMPLE}"
    );
    assert_eq!(
        main.count(|s| s.path.starts_with("/halfmirror/")),
        SAMPLE,
        "the primary gets every request"
    );

    // Rewrite: uri prefix and authority as the backend sees them.
    let a = get(svc, "/rewrite/path?q=1").expect("rewrite");
    assert_eq!(a.status, 200, "rewrite: {a:?}");
    let seen = main.seen();
    let last = seen
        .iter()
        .rev()
        .find(|s| s.path.starts_with("/new"))
        .expect("rewritten request");
    assert_eq!(last.path, "/new/path?q=1", "prefix rewrite: {last:?}");
    assert_eq!(
        last.headers.get("host").map(String::as_str),
        Some("rewritten.example"),
        "authority rewrite: {last:?}"
    );

    // Header edits, request side (as main sees them) and response side.
    let a = request(
        svc,
        "/headers/1",
        HOST,
        &[
            ("x-set", "client"),
            ("x-remove", "gone"),
            ("x-add", "client"),
        ],
    )
    .expect("headers");
    assert_eq!(a.status, 200, "headers: {a:?}");
    let seen = main.seen();
    let got = seen
        .iter()
        .rev()
        .find(|s| s.path == "/headers/1")
        .expect("edited request");
    let h = |k: &str| got.headers.get(k).map(String::as_str);
    assert_eq!(h("x-set"), Some("route"), "set replaces: {got:?}");
    assert_eq!(h("x-add"), Some("client,added"), "add appends: {got:?}");
    assert_eq!(h("x-remove"), None, "remove removes: {got:?}");
    assert_eq!(h("x-dest"), Some("dest"), "destination-level set: {got:?}");
    let r = |k: &str| a.headers.get(k).map(String::as_str);
    assert_eq!(r("x-resp-set"), Some("set"), "response set: {a:?}");
    assert_eq!(r("x-resp-add"), Some("added"), "response add: {a:?}");
    assert_eq!(r("x-backend"), None, "response remove: {a:?}");
    // Without edits the backend's header reaches the client.
    let plain = get(svc, "/plain").expect("plain");
    assert_eq!(
        plain.headers.get("x-backend").map(String::as_str),
        Some("main")
    );

    // CORS: a preflight from an allowed origin (exact, prefix, regex) is
    // answered by Envoy with the allow headers; a disallowed one gets none.
    let preflight = |origin: &str| {
        request_method(
            svc,
            "OPTIONS",
            "/cors/x",
            HOST,
            &[
                ("origin", origin),
                ("access-control-request-method", "POST"),
                ("access-control-request-headers", "x-custom"),
            ],
        )
        .expect("preflight")
    };
    let to_main = main.count(|s| s.path.starts_with("/cors"));
    for origin in [
        "https://good.example",
        "https://pre.anything",
        "https://re42.example",
    ] {
        let a = preflight(origin);
        let h = |k: &str| a.headers.get(k).map(String::as_str);
        assert_eq!(a.status, 200, "preflight from {origin}: {a:?}");
        assert_eq!(h("access-control-allow-origin"), Some(origin), "{a:?}");
        assert_eq!(h("access-control-allow-methods"), Some("GET,POST"), "{a:?}");
        assert_eq!(h("access-control-allow-headers"), Some("x-custom"), "{a:?}");
        assert_eq!(h("access-control-max-age"), Some("86400"), "{a:?}");
        assert_eq!(h("access-control-allow-credentials"), Some("true"), "{a:?}");
    }
    assert_eq!(
        main.count(|s| s.path.starts_with("/cors")),
        to_main,
        "Envoy answers allowed preflights itself"
    );
    let denied = preflight("https://evil.example");
    assert!(
        !denied
            .headers
            .keys()
            .any(|k| k.starts_with("access-control-")),
        "a disallowed origin gets no CORS headers: {denied:?}"
    );
    let simple =
        request(svc, "/cors/y", HOST, &[("origin", "https://good.example")]).expect("cors get");
    assert_eq!((simple.status, simple.body.as_str()), (200, "main"));
    assert_eq!(
        simple
            .headers
            .get("access-control-allow-origin")
            .map(String::as_str),
        Some("https://good.example"),
        "{simple:?}"
    );
    assert_eq!(
        simple
            .headers
            .get("access-control-expose-headers")
            .map(String::as_str),
        Some("x-backend"),
        "{simple:?}"
    );

    // Outlier detection: after 3 consecutive 5xx the failing endpoint is
    // ejected and the healthy one takes everything. Round robin alone would
    // never give a run of 20 answers from one of the two.
    let pool = |i: usize| request(svc, &format!("/p/{i}"), "pool.test.local", &[]);
    let mut run = 0;
    let mut sent = 0;
    while run < 20 {
        assert!(
            sent < 200,
            "no run of 20 healthy answers in {sent} requests"
        );
        let a = pool(sent).expect("pool");
        sent += 1;
        run = if a.status == 200 && a.body == "good" {
            run + 1
        } else {
            0
        };
    }
    let bad_before = bad.count(|_| true);
    for i in 0..20 {
        let a = pool(1000 + i).expect("pool");
        assert_eq!((a.status, a.body.as_str()), (200, "good"), "after ejection");
    }
    assert_eq!(
        bad.count(|_| true),
        bad_before,
        "the ejected endpoint gets nothing"
    );
    assert!(
        bad_before >= 3,
        "the failing endpoint was tried before ejection"
    );
    let stats = envoy.get("/stats");
    let ejected = stats
        .lines()
        .find(|l| {
            l.contains("pool.test.local")
                && l.contains("outlier_detection.ejections_enforced_consecutive_5xx")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(ejected >= 1, "Envoy counted no consecutive-5xx ejection");

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
fn envoy_delta_shows_route_actions_in_traffic() {
    scenario("envoy-delta.yaml");
}

#[test]
fn envoy_sotw_shows_route_actions_in_traffic() {
    scenario("envoy-sotw.yaml");
}
