//! `deltapilot analyze` with the real binary on references between rules:
//! a VirtualService bound to a Gateway that does not exist (`DP3003`) and a
//! Sidecar hiding a host a VirtualService of its namespace routes to
//! (`DP3004`), for files and for a running server (`--admin`), and, with
//! `--admin`, a Gateway that selects no connected proxy (`DP3005`), which
//! goes once a real delta xDS router (envoy-types' tonic client over loopback)
//! with matching LABELS connects.

mod replay_support;

use std::collections::BTreeMap;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use envoy_types::pb::google::protobuf::{Struct, Value as PbValue, value::Kind};
use replay_support::*;
use serde_json::Value;
use tokio::sync::mpsc;

const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const ROUTER_ID: &str = "router~10.1.9.8~ingress.istio-system~istio-system.svc.cluster.local";
const WAIT: Duration = Duration::from_secs(30);

/// The services and the VirtualService routing to `billing.other.local`
/// that both tests use.
const ENTRIES: &str = "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: hello, namespace: demo}
spec:
  hosts: [hello.demo.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 8080, name: http, protocol: HTTP}]
  endpoints: [{address: 127.0.0.1}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: billing, namespace: other}
spec:
  hosts: [billing.other.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 8080, name: http, protocol: HTTP}]
  endpoints: [{address: 127.0.0.1}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: to-billing, namespace: demo}
spec:
  hosts: [hello.demo.local]
  http:
    - match: [{uri: {prefix: /pay}}]
      route:
        - destination: {host: billing.other.local}
    - route:
        - destination: {host: hello.demo.local}
";

const MESH: &str = "apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: public, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
    - port: {number: 8081, name: http, protocol: HTTP}
      hosts: ['*/*']
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: edge, namespace: demo}
spec:
  hosts: [hello.demo.local]
  gateways: [istio-system/public, demo/nowhere]
  http:
    - route:
        - destination: {host: hello.demo.local}
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: demo}
spec:
  egress:
    - hosts: ['./*']
";

fn messages(out: &Out) -> Vec<Value> {
    let v: Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {out:?}"));
    v["messages"].as_array().expect("messages").clone()
}

/// The messages of codes `DP3003`..`DP3005`, as `code kind ns/name: message`.
fn refs(ms: &[Value]) -> BTreeMap<String, String> {
    ms.iter()
        .filter(|m| {
            m["code"]
                .as_str()
                .is_some_and(|c| ["DP3003", "DP3004", "DP3005"].contains(&c))
        })
        .map(|m| {
            (
                format!(
                    "{} {} {}/{}",
                    m["code"].as_str().unwrap_or_default(),
                    m["kind"].as_str().unwrap_or_default(),
                    m["namespace"].as_str().unwrap_or_default(),
                    m["name"].as_str().unwrap_or_default()
                ),
                format!(
                    "{} {}",
                    m["severity"].as_str().unwrap_or_default(),
                    m["message"].as_str().unwrap_or_default()
                ),
            )
        })
        .collect()
}

fn assert_file_refs(got: &BTreeMap<String, String>) {
    let keys: Vec<&str> = got.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "DP3003 VirtualService demo/edge",
            "DP3004 Sidecar demo/default"
        ],
        "{got:#?}"
    );
    let missing = &got["DP3003 VirtualService demo/edge"];
    assert!(
        missing.starts_with("warning gateway demo/nowhere does not exist"),
        "{missing}"
    );
    let hidden = &got["DP3004 Sidecar demo/default"];
    assert!(
        hidden.starts_with("warning hides host billing.other.local")
            && hidden.contains("demo/to-billing"),
        "{hidden}"
    );
}

/// Connects a delta router with LABELS `istio: ingressgateway`; returns its
/// request sender, which keeps the stream open while held.
async fn connect_router(xds: u16) -> mpsc::Sender<DeltaDiscoveryRequest> {
    let s = |v: &str| PbValue {
        kind: Some(Kind::StringValue(v.into())),
    };
    let labels = Struct {
        fields: [("istio".to_owned(), s("ingressgateway"))].into(),
    };
    let metadata = Struct {
        fields: [(
            "LABELS".to_owned(),
            PbValue {
                kind: Some(Kind::StructValue(labels)),
            },
        )]
        .into(),
    };
    let (tx, mut inbound, cds) = delta_open(
        xds,
        DeltaDiscoveryRequest {
            node: Some(Node {
                id: ROUTER_ID.into(),
                user_agent_name: "envoy".into(),
                metadata: Some(metadata),
                ..Default::default()
            }),
            type_url: CDS.into(),
            ..Default::default()
        },
    )
    .await;
    tx.send(DeltaDiscoveryRequest {
        type_url: CDS.into(),
        response_nonce: cds.nonce.clone(),
        ..Default::default()
    })
    .await
    .expect("ack cds");
    tokio::spawn(async move { while let Ok(Some(_)) = inbound.message().await {} });
    tx
}

#[test]
fn references_between_rules_are_reported_for_files_and_servers() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let mesh = d.join("mesh");
    std::fs::create_dir_all(&mesh).expect("mesh dir");
    std::fs::write(mesh.join("entries.yaml"), ENTRIES).expect("write entries");
    std::fs::write(mesh.join("mesh.yaml"), MESH).expect("write mesh");

    let files = dp(d, &["analyze", "-o", "json", "mesh"]);
    assert!(files.ok(), "warnings only: {files:?}");
    assert_file_refs(&refs(&messages(&files)));

    let mut server = Server::start(d, &["--watch", "mesh"]);
    let admin = format!("127.0.0.1:{}", server.admin);
    wait_for("the rules at /debug/rules", WAIT, || {
        let (_, body) = get(server.admin, "/debug/rules")?;
        body.contains("to-billing").then_some(()).ok_or(body)
    });
    let live = dp(d, &["analyze", "-o", "json", "--admin", &admin]);
    assert!(live.ok(), "{live:?}");
    let mut got = refs(&messages(&live));
    let idle = got
        .remove("DP3005 Gateway istio-system/public")
        .unwrap_or_else(|| panic!("no router yet: {got:#?}"));
    assert!(
        idle.starts_with("warning Gateway istio-system/public selects no connected proxy"),
        "{idle}"
    );
    assert_file_refs(&got);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rt");
    let _router = rt.block_on(connect_router(server.xds));
    wait_for("the router's gateway view in /debug/syncz", WAIT, || {
        let (_, body) = get(server.admin, "/debug/syncz")?;
        body.contains("gateway/istio-system/public")
            .then_some(())
            .ok_or(body)
    });
    let served = dp(d, &["analyze", "-o", "json", "--admin", &admin]);
    assert!(served.ok(), "{served:?}");
    assert_file_refs(&refs(&messages(&served)));
    server.stop();
}

/// Sidecars picked as the views pick them: a selecting Sidecar, one shadowed
/// by an earlier selector (never applies), and the root namespace's default
/// (`--root-namespace mesh-root`) for the namespaces without their own.
const SCOPED: &str = "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: cart, namespace: shop}
spec:
  hosts: [cart.shop.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 8080, name: http, protocol: HTTP}]
  endpoints: [{address: 127.0.0.1}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: cart, namespace: shop}
spec:
  hosts: [cart.shop.local]
  http:
    - route:
        - destination: {host: billing.other.local}
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: canary, namespace: demo}
spec:
  workloadSelector: {labels: {app: canary}}
  egress:
    - hosts: ['./*']
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: canary-b, namespace: demo}
spec:
  workloadSelector: {labels: {app: canary, track: b}}
  egress:
    - hosts: ['./*']
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: mesh-root}
spec:
  egress:
    - hosts: ['./*', 'demo/*', 'shop/*']
";

/// Every `DP3004` message as `kind ns/name: message`, sorted (a Sidecar may
/// have several).
fn hidden(ms: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = ms
        .iter()
        .filter(|m| m["code"] == "DP3004")
        .map(|m| {
            format!(
                "{} {}/{}: {}",
                m["kind"].as_str().unwrap_or_default(),
                m["namespace"].as_str().unwrap_or_default(),
                m["name"].as_str().unwrap_or_default(),
                m["message"].as_str().unwrap_or_default()
            )
        })
        .collect();
    out.sort();
    out
}

fn assert_scoped(got: &[String]) {
    let expected = [
        "Sidecar demo/canary: hides host billing.other.local, which VirtualService \
         demo/to-billing routes to: the sidecars of namespace demo it selects (app=canary) have \
         no cluster for it",
        "Sidecar mesh-root/default: hides host billing.other.local, which VirtualService \
         demo/to-billing routes to: the sidecars of namespace demo that no Sidecar of their own \
         scopes (this is the mesh default of root namespace mesh-root) have no cluster for it",
        "Sidecar mesh-root/default: hides host billing.other.local, which VirtualService \
         shop/cart routes to: the sidecars of namespace shop that no Sidecar of their own \
         scopes (this is the mesh default of root namespace mesh-root) have no cluster for it",
    ];
    assert_eq!(got, expected, "{got:#?}");
}

#[test]
fn sidecars_are_judged_where_they_apply_with_the_root_default() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let mesh = d.join("mesh");
    std::fs::create_dir_all(&mesh).expect("mesh dir");
    std::fs::write(mesh.join("entries.yaml"), ENTRIES).expect("write entries");
    std::fs::write(mesh.join("mesh.yaml"), SCOPED).expect("write mesh");

    let files = dp(
        d,
        &[
            "analyze",
            "-o",
            "json",
            "--root-namespace",
            "mesh-root",
            "mesh",
        ],
    );
    assert!(files.ok(), "warnings only: {files:?}");
    assert_scoped(&hidden(&messages(&files)));
    // Under the default root namespace, mesh-root's Sidecar scopes only its
    // own namespace, which holds no VirtualService.
    let default_root = dp(d, &["analyze", "-o", "json", "mesh"]);
    assert!(default_root.ok(), "{default_root:?}");
    assert_eq!(
        hidden(&messages(&default_root)),
        [
            "Sidecar demo/canary: hides host billing.other.local, which VirtualService \
             demo/to-billing routes to: the sidecars of namespace demo it selects (app=canary) \
             have no cluster for it"
        ]
    );

    let mut server = Server::start(d, &["--watch", "mesh", "--root-namespace", "mesh-root"]);
    let admin = format!("127.0.0.1:{}", server.admin);
    wait_for("the Sidecars at /debug/rules", WAIT, || {
        let (_, body) = get(server.admin, "/debug/rules")?;
        body.contains("mesh-root").then_some(()).ok_or(body)
    });
    let live = dp(d, &["analyze", "-o", "json", "--admin", &admin]);
    assert!(live.ok(), "{live:?}");
    assert_scoped(&hidden(&messages(&live)));
    let (_, metrics) = get(server.admin, "/metrics").expect("metrics");
    assert!(
        metrics.contains("deltapilot_rule_problems{code=\"DP3004\"} 3"),
        "{metrics}"
    );
    server.stop();
}
