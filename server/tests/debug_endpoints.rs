//! The admin debug endpoints and `proxy-status`/`proxy-config` against a real
//! `deltapilot run`, with real gRPC clients (envoy-types' tonic clients) connected
//! so that `/debug/syncz` has proxies to show: one delta stream that ACKs CDS and
//! NACKs EDS, one state-of-the-world stream. Also: restart from a checkpoint, and
//! a damaged checkpoint skipped at start.

mod replay_support;

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use envoy_types::pb::google::rpc::Status;
use replay_support::*;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
const DELTA_ID: &str = "sidecar~10.1.9.9~probe.default~default.svc.cluster.local";
const SOTW_ID: &str = "sotw-probe";
const WAIT: Duration = Duration::from_secs(15);

fn node(id: &str) -> Option<Node> {
    Some(Node {
        id: id.into(),
        user_agent_name: "envoy".into(),
        ..Default::default()
    })
}

fn syncz_proxy(admin: u16, id: &str) -> Result<serde_json::Value, String> {
    let (code, body) = get(admin, "/debug/syncz")?;
    if code != 200 {
        return Err(format!("{code}: {body}"));
    }
    let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    v["proxies"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["id"] == id).cloned())
        .ok_or_else(|| format!("{id} not in {body}"))
}

#[test]
fn syncz_config_dump_and_the_cli_views_of_connected_proxies() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    example_log(d);
    let server = Server::start(d, &[]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rt");

    // The gRPC clients live on the runtime while the checks below run.
    let xds = server.xds;
    let (delta_tx, sotw_tx, cluster_names) = rt.block_on(async move {
        let endpoint = format!("http://127.0.0.1:{xds}");
        let mut client = tokio::time::timeout(
            WAIT,
            AggregatedDiscoveryServiceClient::connect(endpoint.clone()),
        )
        .await
        .expect("connect in time")
        .expect("connect");
        let (tx, rx) = mpsc::channel::<DeltaDiscoveryRequest>(8);
        tx.send(DeltaDiscoveryRequest {
            node: node(DELTA_ID),
            type_url: CDS.into(),
            ..Default::default()
        })
        .await
        .expect("send");
        let mut inbound = client
            .delta_aggregated_resources(ReceiverStream::new(rx))
            .await
            .expect("stream")
            .into_inner();
        let cds = tokio::time::timeout(WAIT, inbound.message())
            .await
            .expect("in time")
            .expect("ok")
            .expect("cds");
        let names: Vec<String> = cds.resources.iter().map(|r| r.name.clone()).collect();
        assert!(names.len() > 5, "{names:?}");
        tx.send(DeltaDiscoveryRequest {
            type_url: CDS.into(),
            response_nonce: cds.nonce.clone(),
            ..Default::default()
        })
        .await
        .expect("ack");
        tx.send(DeltaDiscoveryRequest {
            type_url: EDS.into(),
            resource_names_subscribe: names.clone(),
            ..Default::default()
        })
        .await
        .expect("eds");
        let eds = tokio::time::timeout(WAIT, inbound.message())
            .await
            .expect("in time")
            .expect("ok")
            .expect("eds");
        tx.send(DeltaDiscoveryRequest {
            type_url: EDS.into(),
            response_nonce: eds.nonce.clone(),
            error_detail: Some(Status {
                code: 3,
                message: "bad endpoint (test)".into(),
                details: vec![],
            }),
            ..Default::default()
        })
        .await
        .expect("nack");
        // Keep reading in the background so the stream stays healthy.
        tokio::spawn(async move { while let Ok(Some(_)) = inbound.message().await {} });

        let mut sotw = AggregatedDiscoveryServiceClient::connect(endpoint)
            .await
            .expect("connect");
        let (stx, srx) = mpsc::channel::<DiscoveryRequest>(8);
        stx.send(DiscoveryRequest {
            node: node(SOTW_ID),
            type_url: CDS.into(),
            ..Default::default()
        })
        .await
        .expect("send");
        let mut sin = sotw
            .stream_aggregated_resources(ReceiverStream::new(srx))
            .await
            .expect("stream")
            .into_inner();
        let first = tokio::time::timeout(WAIT, sin.message())
            .await
            .expect("in time")
            .expect("ok")
            .expect("response");
        stx.send(DiscoveryRequest {
            type_url: CDS.into(),
            version_info: first.version_info.clone(),
            response_nonce: first.nonce.clone(),
            ..Default::default()
        })
        .await
        .expect("ack");
        tokio::spawn(async move { while let Ok(Some(_)) = sin.message().await {} });
        (tx, stx, names)
    });

    let delta = wait_for("the delta proxy in /debug/syncz", WAIT, || {
        let p = syncz_proxy(server.admin, DELTA_ID)?;
        if p["types"]["cds"]["status"] == "SYNCED" && p["types"]["eds"]["status"] == "NACKED" {
            Ok(p)
        } else {
            Err(p.to_string())
        }
    });
    assert_eq!(
        (delta["api"].as_str(), delta["proxy_type"].as_str()),
        (Some("delta"), Some("sidecar"))
    );
    let cds = &delta["types"]["cds"];
    assert_eq!(cds["acked_nonce"], cds["sent_nonce"]);
    assert_eq!(cds["held"].as_u64(), Some(cluster_names.len() as u64));
    assert_eq!(cds["behind"]["changes"].as_u64(), Some(0));
    assert_eq!(delta["types"]["eds"]["last_nack"], "bad endpoint (test)");
    assert_eq!(delta["types"]["eds"]["nacks"].as_u64(), Some(1));
    assert_eq!(delta["types"]["lds"]["status"], "NOT_SENT");
    let sotw = wait_for("the SotW proxy in /debug/syncz", WAIT, || {
        let p = syncz_proxy(server.admin, SOTW_ID)?;
        if p["types"]["cds"]["status"] == "SYNCED" {
            Ok(p)
        } else {
            Err(p.to_string())
        }
    });
    assert_eq!(sotw["api"], "sotw");
    assert!(sotw["types"]["cds"]["acked_version"].is_string());
    assert_eq!(
        sotw["types"]["cds"]["acked_version"],
        sotw["types"]["cds"]["sent_version"]
    );

    // proxy-status: one row per proxy, verdicts per type, the NACK text.
    let admin = format!("127.0.0.1:{}", server.admin);
    let o = dp(d, &["proxy-status", "--admin-addr", &admin]);
    assert!(o.ok(), "{o:?}");
    let row = o
        .stdout
        .lines()
        .find(|l| l.starts_with(DELTA_ID))
        .expect("delta row");
    let cols: Vec<&str> = row.split_whitespace().collect();
    // The fixture's Sidecar in `default` scopes the probe: its view key shows.
    assert_eq!(
        &cols[1..8],
        [
            "sidecar",
            "sidecar/cfg/sidecar/default/default",
            "delta",
            "SYNCED",
            "NACKED",
            "NOT",
            "SENT"
        ],
        "{row}"
    );
    assert!(
        o.stdout
            .contains(&format!("NACK {DELTA_ID} eds: bad endpoint (test)")),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .lines()
            .any(|l| l.starts_with(SOTW_ID) && l.contains("sotw")),
        "{}",
        o.stdout
    );

    // proxy-config: the clusters it was sent, as `replay --dump` renders them.
    let o = dp(
        d,
        &[
            "proxy-config",
            DELTA_ID,
            "--type",
            "cds",
            "--admin-addr",
            &admin,
        ],
    );
    assert!(o.ok(), "{o:?}");
    let dump: serde_json::Value = serde_json::from_str(&o.stdout).expect("json");
    let mut names: Vec<String> = dump["configs"][0]["dynamic_active_clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .map(|c| c["cluster"]["name"].as_str().expect("name").to_owned())
        .collect();
    let mut sent = cluster_names.clone();
    names.sort();
    sent.sort();
    assert_eq!(names, sent);
    let replayed = dp(
        d,
        &[
            "replay",
            "--log",
            "file://data/log",
            "--dump",
            "--proxy",
            DELTA_ID,
            "--type",
            "cds",
        ],
    );
    assert!(replayed.ok(), "{replayed:?}");
    assert_eq!(
        o.stdout, replayed.stdout,
        "the live dump equals the replayed one"
    );
    let o = dp(d, &["proxy-config", "nobody", "--admin-addr", &admin]);
    assert!(
        !o.ok()
            && o.stderr
                .contains("no connected proxy has node id \"nobody\"")
            && o.stderr.contains(DELTA_ID),
        "{}",
        o.stderr
    );
    let (code, body) = get(server.admin, "/debug/config_dump?proxy=nobody").expect("get");
    assert_eq!(code, 404, "{body}");
    let (code, _) = get(server.admin, "/debug/config_dump").expect("get");
    assert_eq!(code, 400);

    // The snapshot, as replay computes it.
    let (code, body) = get(server.admin, "/debug/snapshot").expect("get");
    assert_eq!(code, 200);
    let snap: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(snap["position"], "31");
    assert_eq!(snap["counts"]["services"].as_u64(), Some(7), "{body}");
    let o = dp(
        d,
        &[
            "replay",
            "--log",
            "file://data/log",
            "--output",
            "json",
            "--from",
            "30",
        ],
    );
    let end = json_lines(&o.stdout).pop().expect("end");
    assert_eq!(
        snap["hash"], end["end"]["hash"],
        "live and replayed hash agree"
    );

    // Events, exactly as `log read` prints them; bad positions are 400s with the range.
    let (code, events) = get(server.admin, "/debug/events?from=27&limit=3").expect("get");
    assert_eq!(code, 200);
    let read = dp(
        d,
        &[
            "log",
            "--log",
            "file://data/log",
            "read",
            "--from",
            "27",
            "--limit",
            "3",
        ],
    );
    assert_eq!(events, read.stdout);
    assert_eq!(events.lines().count(), 3);
    let (code, body) = get(server.admin, "/debug/events?from=40").expect("get");
    assert!(
        code == 400 && body.contains("valid range 0..=31"),
        "{code} {body}"
    );

    // The registry.
    let (code, body) = get(server.admin, "/debug/registry").expect("get");
    assert_eq!(code, 200);
    let reg: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(reg["services"].as_array().map(Vec::len), Some(7));
    let (code, body) = get(
        server.admin,
        "/debug/registry?host=reviews.default.svc.cluster.local&port=9080",
    )
    .expect("get");
    assert_eq!(code, 200, "{body}");
    let inst: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert!(
        !inst["instances"].as_array().expect("instances").is_empty(),
        "{body}"
    );
    // The address view (its index is built on this first address query): the
    // endpoint of an instance is found at its address, with its instances.
    let first = &inst["instances"][0]["endpoint"];
    let addr = first["address"].as_str().expect("an address");
    let (code, body) = get(server.admin, &format!("/debug/registry?ip={addr}")).expect("get");
    assert_eq!(code, 200, "{body}");
    let at: serde_json::Value = serde_json::from_str(&body).expect("json");
    let keys: Vec<&str> = at["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .filter_map(|e| e["key"].as_str())
        .collect();
    assert!(
        keys.contains(&first["key"].as_str().expect("key")),
        "{body}"
    );
    assert!(
        at["proxy_service_instances"]
            .as_array()
            .expect("instances")
            .iter()
            .any(|i| i["hostname"] == "reviews.default.svc.cluster.local"),
        "{body}"
    );
    assert_eq!(
        get(server.admin, "/debug/registry?host=nope")
            .expect("get")
            .0,
        404
    );

    drop((delta_tx, sotw_tx));
    drop(rt);
}

#[test]
fn a_restart_resumes_from_the_checkpoint_and_skips_a_damaged_one() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    example_log(d);
    let mut server = Server::start(d, &[]);
    let hash = |s: &Server| -> String {
        let (_, body) = get(s.admin, "/debug/snapshot").expect("get");
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        v["hash"].as_str().expect("hash").to_owned()
    };
    let before = hash(&server);
    server.stop();
    let cp = d.join("data/checkpoints/checkpoint-00000000000000000031.dpc");
    assert!(cp.exists(), "a checkpoint at shutdown: {}", server.output());

    let mut again = Server::start(d, &[]);
    assert_eq!(hash(&again), before);
    assert!(
        again.output().contains("restoring from checkpoint"),
        "{}",
        again.output()
    );
    again.stop();

    let mut b = std::fs::read(&cp).expect("read");
    let i = b.len() - 3;
    b[i] ^= 0x01;
    std::fs::write(&cp, b).expect("write");
    let third = Server::start(d, &["--checkpoint-every-events", "1000"]);
    assert_eq!(hash(&third), before, "folded from the start instead");
    let out = third.output();
    assert!(
        out.contains("checkpoint skipped") && out.contains("body checksum mismatch"),
        "{out}"
    );
    assert!(!out.contains("restoring from checkpoint"), "{out}");
}
