//! `deltapilot analyze` with the real binary: a directory of YAML (file, line and
//! stable codes, exit status), a running `deltapilot run` (`--admin`), and
//! `--impact` against that server with a real delta xDS client (envoy-types'
//! tonic client over loopback) subscribed to the route configuration: the
//! expected route diff, the proxy counts, the problems introduced, and a log
//! that does not move. Then `replay bisect --until 'routes-to …'` names the
//! event that first sent traffic to v2.

mod replay_support;

use std::path::Path;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use replay_support::*;
use serde_json::Value;
use tokio::sync::mpsc;

const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const RDS: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
const PROXY_ID: &str = "sidecar~10.1.9.9~probe.demo~demo.svc.cluster.local";
const WAIT: Duration = Duration::from_secs(30);

fn service_entry(name: &str, port: u16) -> String {
    format!(
        "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: {name}
  namespace: demo
spec:
  hosts: [{name}.demo.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports:
    - number: 8080
      name: http
      protocol: HTTP
  endpoints:
    - address: 127.0.0.1
      ports:
        http: {port}
"
    )
}

/// All of `hello` to `to`, or split between v1 and v2.
fn shift(weights: Option<(u32, u32)>) -> String {
    let route = match weights {
        None => "        - destination: {host: hello-v1.demo.local}\n".to_owned(),
        Some((a, b)) => format!(
            "        - destination: {{host: hello-v1.demo.local}}\n          weight: {a}\n        - destination: {{host: hello-v2.demo.local}}\n          weight: {b}\n"
        ),
    };
    format!(
        "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: hello-shift
  namespace: demo
spec:
  hosts: [hello.demo.local]
  http:
    - route:
{route}"
    )
}

fn write_mesh(dir: &Path) {
    std::fs::create_dir_all(dir).expect("mesh dir");
    let services = [
        service_entry("hello", 9000),
        service_entry("hello-v1", 9001),
        service_entry("hello-v2", 9002),
    ]
    .join("---\n");
    std::fs::write(dir.join("services.yaml"), services).expect("write services");
    std::fs::write(dir.join("rule.yaml"), shift(None)).expect("write rule");
}

fn json(out: &Out) -> Value {
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {out:?}"))
}

fn codes(v: &Value) -> Vec<String> {
    v["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["code"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn a_directory_is_analyzed_with_codes_files_and_lines() {
    let dir = tempfile::tempdir().expect("tmp");
    let mesh = dir.path().join("mesh");
    write_mesh(&mesh);

    let clean = dp(dir.path(), &["analyze", "mesh"]);
    assert!(clean.ok(), "{clean:?}");
    assert_eq!(clean.stdout, "no problems found (1 rule(s) checked)\n");

    let bad = "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: broken
  namespace: demo
spec:
  hosts: [hello-v2.demo.local, ghost.demo.local]
  http:
    - route:
        - destination: {host: hello-v1.demo.local}
          weight: 60
        - destination: {host: hello-v2.demo.local}
          weight: 30
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: twice
  namespace: demo
spec:
  host: hello.demo.local
  subsets:
    - {name: v1, labels: {version: v1}}
    - {name: v1, labels: {version: v2}}
---
kind: VirtualService
apiVersion: networking.istio.io/v1
metadata: {namespace: demo}
";
    std::fs::write(mesh.join("bad.yaml"), bad).expect("write bad");
    let out = dp(dir.path(), &["analyze", "-o", "json", "mesh"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let v = json(&out);
    let mut got = codes(&v);
    got.sort();
    assert_eq!(got, ["DP0002", "DP1040", "DP2003", "DP3001"], "{v:#}");
    let by_code = |c: &str| {
        v["messages"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["code"] == c))
            .cloned()
            .expect("message")
    };
    let weights = by_code("DP2003");
    assert!(
        weights["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("mesh/bad.yaml")),
        "{weights}"
    );
    assert_eq!(weights["line"], 1);
    assert_eq!(
        (&weights["kind"], &weights["namespace"], &weights["name"]),
        (
            &Value::from("VirtualService"),
            &Value::from("demo"),
            &Value::from("broken")
        )
    );
    assert_eq!(weights["host"], "hello-v2.demo.local");
    assert_eq!(weights["severity"], "error");
    assert_eq!(by_code("DP1040")["line"], 15);
    assert_eq!(by_code("DP3001")["severity"], "warning");
    assert_eq!(by_code("DP0002")["line"], 26);
    assert_eq!(v["counts"]["error"], 3);
    assert_eq!(v["rules"], 3, "hello-shift, broken and twice");

    let text = dp(dir.path(), &["analyze", "mesh"]);
    assert_eq!(text.status.code(), Some(3), "{text:?}");
    assert!(
        text.stdout
            .lines()
            .any(|l| l.ends_with("mesh/bad.yaml:15: error DP1040 DestinationRule demo/twice at subsets[1].name: subset name \"v1\" is used twice")),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.ends_with("3 error(s), 1 warning(s)\n"),
        "{}",
        text.stdout
    );

    let missing = dp(dir.path(), &["analyze", "nope"]);
    assert_eq!(missing.status.code(), Some(1), "{missing:?}");
    assert!(missing.stderr.contains("nope"), "{missing:?}");
}

/// Connects a delta sidecar that subscribes to every cluster and to route
/// configuration `8080`, ACKs both, and keeps reading; returns its request
/// sender, which keeps the stream open while held.
async fn connect_sidecar(xds: u16) -> mpsc::Sender<DeltaDiscoveryRequest> {
    let (tx, mut inbound, cds) = delta_open(
        xds,
        DeltaDiscoveryRequest {
            node: Some(Node {
                id: PROXY_ID.into(),
                user_agent_name: "envoy".into(),
                ..Default::default()
            }),
            type_url: CDS.into(),
            ..Default::default()
        },
    )
    .await;
    for req in [
        DeltaDiscoveryRequest {
            type_url: CDS.into(),
            response_nonce: cds.nonce.clone(),
            ..Default::default()
        },
        DeltaDiscoveryRequest {
            type_url: RDS.into(),
            resource_names_subscribe: vec!["8080".into()],
            ..Default::default()
        },
    ] {
        tx.send(req).await.expect("send");
    }
    let rds = tokio::time::timeout(WAIT, inbound.message())
        .await
        .expect("rds in time")
        .expect("ok")
        .expect("rds");
    assert_eq!(rds.type_url, RDS);
    tx.send(DeltaDiscoveryRequest {
        type_url: RDS.into(),
        response_nonce: rds.nonce.clone(),
        ..Default::default()
    })
    .await
    .expect("ack rds");
    tokio::spawn(async move { while let Ok(Some(_)) = inbound.message().await {} });
    tx
}

fn snapshot_position(admin: u16) -> String {
    let (code, body) = get(admin, "/debug/snapshot").expect("snapshot");
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("json");
    v["position"].as_str().expect("position").to_owned()
}

fn log_records(cwd: &Path) -> usize {
    let o = dp(cwd, &["log", "--log", "file://data/log", "read"]);
    assert!(o.ok(), "{o:?}");
    json_lines(&o.stdout).len()
}

#[test]
fn impact_previews_a_change_on_a_running_server_and_bisect_finds_when_it_landed() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let mesh = d.join("mesh");
    write_mesh(&mesh);
    let mut server = Server::start(d, &["--watch", "mesh"]);
    let admin = format!("127.0.0.1:{}", server.admin);
    wait_for("the rule at /debug/rules", WAIT, || {
        let (_, body) = get(server.admin, "/debug/rules")?;
        body.contains("hello-shift").then_some(()).ok_or(body)
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rt");
    let _sidecar = rt.block_on(connect_sidecar(server.xds));
    wait_for("the sidecar in /debug/syncz", WAIT, || {
        let (_, body) = get(server.admin, "/debug/syncz")?;
        body.contains(PROXY_ID).then_some(()).ok_or(body)
    });

    let live = dp(d, &["analyze", "--admin", &admin]);
    assert!(live.ok(), "{live:?}");
    assert_eq!(live.stdout, "no problems found (1 rule(s) checked)\n");

    let (position, records) = (snapshot_position(server.admin), log_records(d));
    let proposal = d.join("proposal.yaml");
    std::fs::write(&proposal, shift(Some((50, 50)))).expect("write proposal");
    let out = dp(
        d,
        &[
            "analyze",
            "--impact",
            "proposal.yaml",
            "--admin",
            &admin,
            "-o",
            "json",
        ],
    );
    assert!(out.ok(), "{out:?}");
    let v = json(&out);
    assert_eq!(v["position"], position.as_str());
    let changes = v["changes"].as_array().expect("changes");
    let route = changes
        .iter()
        .find(|c| c["type"] == "rds" && c["name"] == "8080")
        .unwrap_or_else(|| panic!("no rds/8080 change: {v:#}"));
    assert_eq!(route["action"], "changed");
    assert_eq!(route["proxies"]["sidecar"], 1, "{route:#}");
    assert_eq!(route["proxies_total"], 1);
    let diff = route["diff"].as_str().expect("diff");
    let added = |text: &str| {
        diff.lines()
            .any(|l| l.trim_start().starts_with('+') && l.contains(text))
    };
    assert!(added("\"weighted_clusters\""), "{diff}");
    assert!(added("outbound|8080||hello-v2.demo.local"), "{diff}");
    // Only route configurations change (inline, and their VHDS form, which no
    // proxy of this inline-delivery server receives): no cluster is added for a
    // host that exists.
    assert!(
        changes.iter().all(|c| c["action"] == "changed"
            && (c["type"] == "rds" || (c["type"] == "vhds" && c["proxies_total"] == 0))),
        "{v:#}"
    );
    assert_eq!(v["problems_introduced"].as_array().map(Vec::len), Some(0));

    // A proposal that breaks the rule: the problem it introduces, exit 3.
    std::fs::write(&proposal, shift(Some((50, 40)))).expect("write broken proposal");
    let broken = dp(
        d,
        &["analyze", "--impact", "proposal.yaml", "--admin", &admin],
    );
    assert_eq!(broken.status.code(), Some(3), "{broken:?}");
    assert!(
        broken
            .stdout
            .contains("problems the change would introduce:")
            && broken
                .stdout
                .contains("proposal.yaml:1: error DP2003 VirtualService demo/hello-shift"),
        "{}",
        broken.stdout
    );

    // Nothing was applied: same state, same log.
    assert_eq!(snapshot_position(server.admin), position);
    assert_eq!(log_records(d), records);

    // A broken rule on the server: /debug/rules and `analyze --admin` name its
    // file and line (from the file adapter; they are not in the log).
    std::fs::write(
        mesh.join("bad.yaml"),
        "apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: twice, namespace: demo}
spec:
  host: hello.demo.local
  subsets:
    - {name: v1, labels: {version: v1}}
    - {name: v1, labels: {version: v2}}
",
    )
    .expect("write bad rule");
    wait_for("the bad rule at /debug/rules", WAIT, || {
        let (_, body) = get(server.admin, "/debug/rules")?;
        let v: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        v["rules"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["name"] == "twice"))
            .filter(|r| {
                r["file"]
                    .as_str()
                    .is_some_and(|f| f.ends_with("mesh/bad.yaml"))
            })
            .map(|_| ())
            .ok_or(body)
    });
    let remote = dp(d, &["analyze", "--admin", &admin, "-o", "json"]);
    assert_eq!(remote.status.code(), Some(3), "{remote:?}");
    let rv = json(&remote);
    assert_eq!(codes(&rv), ["DP1040"], "{rv:#}");
    let m = &rv["messages"][0];
    assert!(
        m["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("mesh/bad.yaml")),
        "{m}"
    );
    assert_eq!(m["line"], 1, "{m}");

    // Apply it for real, then ask the log when v2 first got traffic.
    let tmp = mesh.join(".rule.tmp");
    std::fs::write(&tmp, shift(Some((50, 50)))).expect("write");
    std::fs::rename(&tmp, mesh.join("rule.yaml")).expect("rename");
    wait_for("the shift in the log", WAIT, || {
        let o = dp(d, &["log", "--log", "file://data/log", "read"]);
        json_lines(&o.stdout)
            .iter()
            .any(|e| {
                e["configUpsert"]["config"]["name"] == "hello-shift"
                    && e.to_string().contains("hello-v2.demo.local")
            })
            .then_some(())
            .ok_or(o.stdout)
    });
    server.stop();
    let log = dp(d, &["log", "--log", "file://data/log", "read"]);
    let last_vs = json_lines(&log.stdout)
        .into_iter()
        .rev()
        .find(|e| e["configUpsert"]["config"]["name"] == "hello-shift")
        .expect("the rule's events");
    let found = dp(
        d,
        &[
            "replay",
            "--log",
            "file://data/log",
            "bisect",
            "--resource",
            "rds/8080",
            "--until",
            "routes-to ||hello-v2.demo.local for hello.demo.local",
            "--output",
            "json",
        ],
    );
    assert!(found.ok(), "{found:?}");
    let f = &json_lines(&found.stdout)[0]["found"];
    assert_eq!(f["position"], last_vs["position"], "{f:#}\n{last_vs:#}");
    // Without `for`, hello-v2's own virtual host (its default route) matches first.
    let unscoped = dp(
        d,
        &[
            "replay",
            "--log",
            "file://data/log",
            "bisect",
            "--resource",
            "rds/8080",
            "--until",
            "routes-to ||hello-v2.demo.local",
            "--output",
            "json",
        ],
    );
    assert!(unscoped.ok(), "{unscoped:?}");
    let u = &json_lines(&unscoped.stdout)[0]["found"];
    assert_ne!(u["position"], last_vs["position"], "{u:#}");
    // `replay` lists what each rule event touched, with the action.
    let replay = dp(
        d,
        &[
            "replay",
            "--log",
            "file://data/log",
            "--key",
            "cfg/virtual_service/demo/hello-shift",
            "--output",
            "json",
        ],
    );
    assert!(replay.ok(), "{replay:?}");
    let events = json_lines(&replay.stdout);
    let shift_event = events
        .iter()
        .find(|e| e["position"] == last_vs["position"])
        .unwrap_or_else(|| panic!("{events:#?}"));
    let touched: Vec<(String, String, String)> = shift_event["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (s("type"), s("name"), s("action"))
        })
        .collect();
    assert!(
        touched.contains(&("rds".into(), "8080".into(), "changed".into())),
        "{touched:?}"
    );
    let text = dp(
        d,
        &[
            "replay",
            "--log",
            "file://data/log",
            "--key",
            "cfg/virtual_service/demo/hello-shift",
        ],
    );
    assert!(
        text.stdout
            .lines()
            .any(|l| l.trim_start().starts_with("rds       changed 8080  ")),
        "{}",
        text.stdout
    );
    // `routes-to` is for route configurations only.
    let wrong = dp(
        d,
        &[
            "replay",
            "--log",
            "file://data/log",
            "bisect",
            "--resource",
            "cds/outbound|8080||hello.demo.local",
            "--until",
            "routes-to x",
        ],
    );
    assert!(!wrong.ok() && wrong.stderr.contains("RDS"), "{wrong:?}");
}
