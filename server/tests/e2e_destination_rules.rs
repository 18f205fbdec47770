//! End to end with a real Envoy 1.40 (`DELTAPILOT_ENVOY`), delta and SotW: a
//! DestinationRule's subsets and consistent hash in real traffic. Three
//! backends serve `pool.test.local` (labelled `idx: "0"`, `"1"`, `"2"`);
//! subsets route to the labelled endpoints only, a consistent hash by header
//! keeps each user on one backend where round robin spreads them, and Envoy
//! never rejects an update.

mod support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use support::{Backend, Deltapilot, Envoy, free_port, metric, wait_for, write_service_entry};

const WAIT: Duration = Duration::from_secs(60);
const HOST: &str = "pool.test.local";

/// Subsets by label, and a VirtualService that picks one by header.
const SUBSETS: &str = r#"apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: pool
  namespace: test
spec:
  host: pool.test.local
  subsets:
    - name: first
      labels: {idx: "0"}
    - name: second
      labels: {idx: "1"}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: pool
  namespace: test
spec:
  hosts: [pool.test.local]
  http:
    - match: [{headers: {x-subset: {exact: second}}}]
      route: [{destination: {host: pool.test.local, subset: second}}]
    - route: [{destination: {host: pool.test.local, subset: first}}]
"#;

/// A ring hash on the `x-user` header, no VirtualService: the default route
/// carries the hash policy. The connection pool and outlier detection are
/// there for Envoy to validate (a cluster it NACKs fails the test).
const STICKY: &str = r#"apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: pool
  namespace: test
spec:
  host: pool.test.local
  trafficPolicy:
    loadBalancer:
      consistentHash:
        httpHeaderName: x-user
    connectionPool:
      tcp: {maxConnections: 100, connectTimeout: 2s, tcpKeepalive: {time: 60s, interval: 10s}}
      http: {http1MaxPendingRequests: 100, http2MaxRequests: 100, maxRequestsPerConnection: 10, maxRetries: 3, idleTimeout: 30s}
    outlierDetection: {consecutive5xxErrors: 5, interval: 10s, baseEjectionTime: 30s, maxEjectionPercent: 50, minHealthPercent: 10}
"#;

fn write_rules(dir: &Path, yaml: &str) {
    let tmp = dir.join(".pool-rules.yaml.tmp");
    std::fs::write(&tmp, yaml).expect("write rules");
    std::fs::rename(&tmp, dir.join("pool-rules.yaml")).expect("rename rules");
}

/// A GET to `HOST` through Envoy with optional extra header lines; the body.
fn get(svc: SocketAddr, header: &str) -> Result<String, String> {
    let mut s = std::net::TcpStream::connect_timeout(&svc, Duration::from_secs(2))
        .map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let req = format!("GET / HTTP/1.1\r\nhost: {HOST}\r\n{header}connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    match out.split_whitespace().nth(1) {
        Some("200") => Ok(out
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default()),
        _ => Err(format!("not a 200: {out:?}")),
    }
}

/// The set of backends `n` requests with `header` reached.
fn answers(svc: SocketAddr, header: &str, n: usize) -> Result<BTreeSet<String>, String> {
    (0..n).map(|_| get(svc, header)).collect()
}

fn scenario(example: &str) {
    let tmp = tempfile::tempdir().expect("tmp");
    let (data, watch) = (tmp.path().join("data"), tmp.path().join("watch"));
    std::fs::create_dir_all(&watch).expect("watch dir");
    let backends = [
        Backend::start("a0"),
        Backend::start("a1"),
        Backend::start("a2"),
    ];
    let port = free_port();
    let ports: Vec<u16> = backends.iter().map(|b| b.port).collect();
    write_service_entry(&watch, "pool.yaml", HOST, port, "HTTP", &ports);
    let (xds_port, admin_port) = (free_port(), free_port());
    let dp = Deltapilot::start(tmp.path(), &data, &watch, xds_port, admin_port);
    let envoy = Envoy::start(tmp.path(), example, xds_port);
    let svc = SocketAddr::from(([127, 0, 0, 1], port));
    let all: BTreeSet<String> = ["a0", "a1", "a2"].map(String::from).into();

    // Without rules, round robin reaches every backend.
    wait_for("round robin over the three backends", WAIT, || {
        let got = answers(svc, "", 30)?;
        (got == all).then_some(()).ok_or(format!("{got:?}"))
    });

    // Subsets: each reaches only the endpoints its labels select.
    write_rules(&watch, SUBSETS);
    wait_for(
        "the default route to go to subset first (idx 0)",
        WAIT,
        || {
            let got = answers(svc, "", 20)?;
            (got == ["a0".to_string()].into())
                .then_some(())
                .ok_or(format!("{got:?}"))
        },
    );
    let got = answers(svc, "x-subset: second\r\n", 20).expect("subset second");
    assert_eq!(
        got,
        ["a1".to_string()].into(),
        "subset second is idx 1 only"
    );

    // Consistent hash: each user sticks to one backend.
    write_rules(&watch, STICKY);
    wait_for("the subset rule to be gone (a spread again)", WAIT, || {
        let got = answers(svc, "", 30)?;
        (got.len() > 1).then_some(()).ok_or(format!("{got:?}"))
    });
    wait_for("each user to stick to one backend", WAIT, || {
        for user in ["alice", "bob", "carol", "dave"] {
            let got = answers(svc, &format!("x-user: {user}\r\n"), 20)?;
            if got.len() != 1 {
                return Err(format!("{user} reached {got:?}"));
            }
        }
        Ok(())
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
fn envoy_delta_follows_destination_rule_subsets_and_consistent_hash() {
    scenario("envoy-delta.yaml");
}

#[test]
fn envoy_sotw_follows_destination_rule_subsets_and_consistent_hash() {
    scenario("envoy-sotw.yaml");
}
