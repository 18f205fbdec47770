//! End to end with a real Envoy 1.40 (`DELTAPILOT_ENVOY`), delta and SotW: a
//! VirtualService file beside three ServiceEntries → `deltapilot run` → Envoy →
//! real HTTP backends that answer with who they are. Header and path matches
//! route as written, a redirect, a direct response and a fault abort answer
//! from Envoy, a
//! 70/30 split lands within a statistical tolerance, a bad rule for another host
//! loses only its bad routes and is reported at `/debug/rules`, an edit of the rule is
//! followed within seconds (and a request no route matches gets 404), and Envoy
//! never rejects an update.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use support::{
    Backend, Deltapilot, Envoy, free_port, http_get, metric, wait_for, write_service_entry,
};

const WAIT: Duration = Duration::from_secs(60);

/// Requests sent to measure the split.
const SPLIT_REQUESTS: usize = 200;

fn write_rule(dir: &Path, yaml: &str) {
    let tmp = dir.join(".rules.yaml.tmp");
    std::fs::write(&tmp, yaml).expect("write rule");
    std::fs::rename(&tmp, dir.join("rules.yaml")).expect("rename rule");
}

/// The first rule: header and path matches, a redirect, a direct response, a
/// weighted split as the catch-all.
const RULE_V1: &str = r#"apiVersion: networking.istio.io/v1beta1
kind: VirtualService
metadata:
  name: hello
  namespace: test
spec:
  hosts:
    - hello.test.local
  http:
    - match:
        - headers:
            x-who:
              exact: two
      route:
        - destination:
            host: v2.test.local
    - match:
        - uri:
            prefix: /one
      route:
        - destination:
            host: v1.test.local
    - match:
        - uri:
            prefix: /boom
      fault:
        abort:
          httpStatus: 503
          percentage:
            value: 100
      route:
        - destination:
            host: v1.test.local
    - match:
        - uri:
            exact: /old
      redirect:
        uri: /new
        redirectCode: 302
    - match:
        - uri:
            regex: "/tea(pot)?"
      directResponse:
        status: 418
        body:
          string: short and stout
    - route:
        - destination:
            host: v1.test.local
          weight: 70
        - destination:
            host: v2.test.local
          weight: 30
"#;

/// The edited rule: only `/only` routes (to v2); anything else gets 404.
const RULE_V2: &str = r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: hello
  namespace: test
spec:
  hosts:
    - hello.test.local
  http:
    - match:
        - uri:
            prefix: /only
      route:
        - destination:
            host: v2.test.local
"#;

fn get(svc: SocketAddr, path: &str) -> Result<(u16, String), String> {
    http_get(svc, path, "hello.test.local")
}

/// A GET with one extra header.
fn get_with(svc: SocketAddr, path: &str, header: &str) -> Result<(u16, String), String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&svc, Duration::from_secs(2))
        .map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let req = format!(
        "GET {path} HTTP/1.1\r\nhost: hello.test.local\r\n{header}\r\nconnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status in {out:?}"))?;
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

fn expect(what: &str, f: impl FnMut() -> Result<(), String>) {
    wait_for(what, WAIT, f);
}

fn is(got: Result<(u16, String), String>, status: u16, body: &str) -> Result<(), String> {
    match got {
        Ok((s, b)) if s == status && (body.is_empty() || b == body) => Ok(()),
        other => Err(format!("want {status} {body:?}, got {other:?}")),
    }
}

fn scenario(example: &str) {
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
    let dp = Deltapilot::start(tmp.path(), &data, &watch, xds_port, admin_port);
    let envoy = Envoy::start(tmp.path(), example, xds_port);
    let svc = SocketAddr::from(([127, 0, 0, 1], port));
    expect("hello to answer without rules", || {
        is(get(svc, "/"), 200, "hello")
    });

    write_rule(&watch, RULE_V1);
    expect("the header match to route to v2", || {
        is(get_with(svc, "/", "x-who: two"), 200, "v2")
    });
    is(get(svc, "/one/more"), 200, "v1").expect("path prefix match");
    is(get(svc, "/old"), 302, "").expect("redirect");
    is(get(svc, "/boom"), 503, "fault filter abort").expect("fault abort");
    is(get(svc, "/teapot"), 418, "short and stout").expect("direct response");
    is(get(svc, "/tea"), 418, "short and stout").expect("regex match");

    let mut v2 = 0;
    for _ in 0..SPLIT_REQUESTS {
        match get(svc, "/") {
            Ok((200, b)) if b == "v2" => v2 += 1,
            Ok((200, b)) if b == "v1" => {}
            other => panic!("split: unexpected answer {other:?}"),
        }
    }
    // 30 % of 200 is 60, with a standard deviation near 6.5: 30..=90 is more
    // than four deviations either way.
    assert!(
        (30..=90).contains(&v2),
        "a 70/30 split sent {v2} of {SPLIT_REQUESTS} to v2"
    );

    // A bad rule for another host: its bad route is dropped and reported, its
    // good one applies, and the good rule of hello is untouched.
    let bad = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: bad\n  namespace: test\nspec:\n  hosts: [v1.test.local]\n  http:\n    - match: [{uri: {regex: \"(?=x)\"}}]\n      route: [{destination: {host: v2.test.local}}]\n    - match: [{uri: {prefix: /split}}]\n      route:\n        - {destination: {host: v1.test.local}, weight: 50}\n        - {destination: {host: v2.test.local}, weight: 40}\n    - route: [{destination: {host: v2.test.local}}]\n";
    let tmp_bad = watch.join(".bad.yaml.tmp");
    std::fs::write(&tmp_bad, bad).expect("write bad rule");
    std::fs::rename(&tmp_bad, watch.join("bad.yaml")).expect("rename bad rule");
    expect(
        "v1.test.local to follow its rule's good route",
        || match http_get(svc, "/split", "v1.test.local") {
            Ok((200, b)) if b == "v2" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    let report = http_get(dp.admin(), "/debug/rules", "localhost")
        .expect("debug rules")
        .1;
    let v: serde_json::Value = serde_json::from_str(&report).expect("json");
    let rules = v["rules"].as_array().expect("rules");
    let by_name = |n: &str| {
        rules
            .iter()
            .find(|r| r["name"] == n)
            .unwrap_or_else(|| panic!("{n} in {report}"))
    };
    assert_eq!(by_name("hello")["status"], "applied", "{report}");
    let codes: Vec<&str> = by_name("bad")["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter_map(|p| p["code"].as_str())
        .collect();
    assert!(
        codes.contains(&"DP2001") && codes.contains(&"DP2003"),
        "{report}"
    );
    assert_eq!(
        by_name("bad")["status"],
        "applied_with_warnings",
        "{report}"
    );
    is(get_with(svc, "/", "x-who: two"), 200, "v2").expect("the good rule still routes");
    expect("/metrics to count the problems by code", || {
        let m = dp.metrics();
        let dp2003 = metric(&m, "deltapilot_rule_problems", &["code=\"DP2003\""]);
        let applied = metric(&m, "deltapilot_rules", &["status=\"applied\""]);
        if dp2003 >= 1.0 && applied >= 1.0 {
            Ok(())
        } else {
            Err(m
                .lines()
                .filter(|l| l.contains("rule"))
                .collect::<Vec<_>>()
                .join("\n"))
        }
    });

    write_rule(&watch, RULE_V2);
    expect("the edited rule to route /only to v2", || {
        is(get(svc, "/only"), 200, "v2")
    });
    expect("a request no route matches to get 404", || {
        is(get(svc, "/"), 404, "")
    });

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
fn envoy_delta_follows_virtual_service_routes() {
    scenario("envoy-delta.yaml");
}

#[test]
fn envoy_sotw_follows_virtual_service_routes() {
    scenario("envoy-sotw.yaml");
}
