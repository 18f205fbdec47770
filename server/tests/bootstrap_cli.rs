//! `deltapilot bootstrap` against real peers: a real Envoy 1.40
//! (`DELTAPILOT_ENVOY`) boots from the printed sidecar bootstrap, in delta and in
//! SotW mode, connects to a real `deltapilot run` on loopback, receives the
//! demo cluster and its endpoint, routes a request to the backend, and is known
//! to deltapilot by its Istio node id (namespace and proxy type read from it).
//! With `--xds-tls-ca/--xds-tls-cert/--xds-tls-key` the same Envoy reaches a
//! `deltapilot run` serving mutual TLS (certificates made by openssl here).
//! The proxyless bootstrap is exercised by a real grpcio client in `e2e_grpc.rs`.
//! Every `examples/envoy-*.yaml` is the output of the `deltapilot bootstrap`
//! command on its `# $` header line (the e2e tests boot real Envoys from them).

mod support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use deltapilot_testkit::tls::{make_ca, make_signed};
use support::{
    Backend, Deltapilot, Envoy, free_port, http_get, metric, wait_for, write_service_entry,
};

const HOST: &str = "hello.test.local";
const WAIT: Duration = Duration::from_secs(60);

/// `deltapilot bootstrap ARGS`' stdout; panics with its stderr on failure.
fn bootstrap(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_deltapilot"))
        .arg("bootstrap")
        .args(args)
        .env_remove("DELTAPILOT_XDS_ADDR")
        .env_remove("DELTAPILOT_CONFIG")
        .output()
        .expect("run deltapilot bootstrap");
    assert!(
        out.status.success(),
        "deltapilot bootstrap {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 bootstrap")
}

fn envoy_boots_and_receives_clusters(mode: &str) {
    envoy_boots_and_receives_clusters_over(mode, false);
}

fn envoy_boots_and_receives_clusters_over(mode: &str, tls: bool) {
    let tmp = tempfile::tempdir().expect("tmp");
    let (data, watch) = (tmp.path().join("data"), tmp.path().join("watch"));
    std::fs::create_dir_all(&watch).expect("watch dir");
    let backend = Backend::start("backend-a");
    let svc_port = free_port();
    write_service_entry(
        &watch,
        "hello.yaml",
        HOST,
        svc_port,
        "HTTP",
        &[backend.port],
    );
    let (xds_port, admin_port) = (free_port(), free_port());
    let pki = tmp.path().join("pki");
    let p = |f: &str| pki.join(f).display().to_string();
    let (server_flags, client_flags) = if tls {
        let ca = make_ca(&pki, "mesh-ca");
        make_signed(&ca, &pki.join("server"), "dp", &["IP:127.0.0.1"], 1);
        let spiffe = "spiffe://cluster.local/ns/test/sa/client";
        make_signed(
            &ca,
            &pki.join("client"),
            "client",
            &[&format!("URI:{spiffe}")],
            2,
        );
        let server = vec![
            "--xds-tls-cert".to_owned(),
            p("server/tls.crt"),
            "--xds-tls-key".into(),
            p("server/tls.key"),
            "--xds-tls-client-ca".into(),
            p("ca.crt"),
            "--xds-tls-allow".into(),
            spiffe.into(),
        ];
        let client = vec![
            "--xds-tls-ca".to_owned(),
            p("ca.crt"),
            "--xds-tls-cert".into(),
            p("client/tls.crt"),
            "--xds-tls-key".into(),
            p("client/tls.key"),
        ];
        (server, client)
    } else {
        (Vec::new(), Vec::new())
    };
    let server_flags: Vec<&str> = server_flags.iter().map(String::as_str).collect();
    let dp = Deltapilot::start_with(
        tmp.path(),
        &data,
        &watch,
        xds_port,
        admin_port,
        &server_flags,
    );

    let envoy_admin = free_port();
    let (xds, admin) = (format!("127.0.0.1:{xds_port}"), envoy_admin.to_string());
    let mut args = vec![
        "--type",
        "sidecar",
        "--mode",
        mode,
        "--xds-address",
        &xds,
        "--admin-port",
        &admin,
        "--ip",
        "127.0.0.1",
        "--pod",
        "client-1",
        "--namespace",
        "test",
        "--labels",
        "app=client,version=v1",
    ];
    args.extend(client_flags.iter().map(String::as_str));
    let text = bootstrap(&args);
    assert_eq!(text.contains("envoy.transport_sockets.tls"), tls, "{text}");
    let node_id = "sidecar~127.0.0.1~client-1.test~test.svc.cluster.local";
    assert!(text.contains(node_id), "{text}");
    let envoy = Envoy::boot(
        tmp.path(),
        &format!("bootstrap-{mode}.yaml"),
        &text,
        envoy_admin,
    );

    wait_for(
        "Envoy to receive the demo cluster and endpoint",
        WAIT,
        || {
            let clusters = envoy.get("/clusters");
            if clusters.contains(HOST)
                && clusters.contains(&format!("127.0.0.1:{}::", backend.port))
            {
                Ok(())
            } else {
                Err(format!("{clusters}\nenvoy:\n{}", envoy.proc.output()))
            }
        },
    );
    let svc = SocketAddr::from(([127, 0, 0, 1], svc_port));
    wait_for(
        "a request through Envoy's outbound listener",
        WAIT,
        || match http_get(svc, "/", HOST)? {
            (200, body) if body.contains("backend-a") => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    assert_eq!(envoy.rejected_updates(), Vec::<String>::new());

    let api = if mode == "delta" { "delta" } else { "sotw" };
    let m = dp.metrics();
    assert!(
        metric(
            &m,
            "deltapilot_xds_connected_proxies",
            &[&format!("api=\"{api}\""), "proxy_type=\"sidecar\""]
        ) >= 1.0,
        "{m}"
    );
    // deltapilot read the Istio node id: the proxy is listed under it, in its namespace.
    let (status, syncz) = http_get(dp.admin(), "/debug/syncz", "localhost").expect("syncz");
    assert_eq!(status, 200, "{syncz}");
    let v: serde_json::Value = serde_json::from_str(&syncz).expect("syncz JSON");
    let proxy = v["proxies"]
        .as_array()
        .expect("proxies")
        .iter()
        .find(|p| p["id"] == node_id)
        .unwrap_or_else(|| panic!("{node_id} not in {syncz}"));
    assert_eq!(proxy["namespace"], "test", "{proxy}");
    assert_eq!(proxy["proxy_type"], "sidecar", "{proxy}");
    assert_eq!(proxy["api"], api, "{proxy}");
}

#[test]
fn envoy_boots_from_the_delta_bootstrap() {
    envoy_boots_and_receives_clusters("delta");
}

#[test]
fn envoy_boots_from_the_sotw_bootstrap() {
    envoy_boots_and_receives_clusters("sotw");
}

#[test]
fn envoy_boots_from_the_mutual_tls_bootstrap() {
    envoy_boots_and_receives_clusters_over("delta", true);
}

#[test]
fn the_proxyless_tls_bootstrap_names_the_channel_credentials() {
    let text = bootstrap(&[
        "--type",
        "proxyless-grpc",
        "--xds-address",
        "deltapilot.mesh.svc:18000",
        "--xds-tls-ca",
        "/etc/tls/ca.crt",
        "--xds-tls-cert",
        "/etc/tls/tls.crt",
        "--xds-tls-key",
        "/etc/tls/tls.key",
    ]);
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        v["xds_servers"][0]["channel_creds"][0],
        serde_json::json!({"type": "tls", "config": {
            "ca_certificate_file": "/etc/tls/ca.crt",
            "certificate_file": "/etc/tls/tls.crt",
            "private_key_file": "/etc/tls/tls.key",
        }}),
        "{text}"
    );
    let envoy = bootstrap(&[
        "--xds-address",
        "deltapilot.mesh.svc:18000",
        "--xds-tls-ca",
        "/etc/tls/ca.crt",
        "-o",
        "json",
    ]);
    let e: serde_json::Value = serde_json::from_str(&envoy).expect("json");
    let ctx = &e["static_resources"]["clusters"][0]["transport_socket"]["typed_config"];
    assert_eq!(ctx["sni"], "deltapilot.mesh.svc", "{envoy}");
    assert_eq!(
        ctx["common_tls_context"]["validation_context"]["match_typed_subject_alt_names"][0],
        serde_json::json!({"san_type": "DNS", "matcher": {"exact": "deltapilot.mesh.svc"}}),
        "{envoy}"
    );
    assert!(
        ctx["common_tls_context"].get("tls_certificates").is_none(),
        "{envoy}"
    );
}

#[test]
fn a_router_bootstrap_is_read_as_a_router_and_json_parses() {
    let text = bootstrap(&[
        "--type",
        "router",
        "-o",
        "json",
        "--pod",
        "gw-1",
        "--namespace",
        "edge",
    ]);
    let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(
        v["node"]["id"],
        "router~127.0.0.1~gw-1.edge~edge.svc.cluster.local"
    );
    assert_eq!(
        v["dynamic_resources"]["ads_config"]["api_type"],
        "DELTA_GRPC"
    );
    let ep = &v["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0]["lb_endpoints"]
        [0]["endpoint"]["address"]["socket_address"];
    assert_eq!(ep["address"], "127.0.0.1");
    assert_eq!(ep["port_value"], 18000);
}

#[test]
fn impossible_combinations_are_refused_with_a_reason() {
    for (args, says) in [
        (
            &["--type", "proxyless-grpc", "--mode", "delta"][..],
            "only state-of-the-world",
        ),
        (
            &["--type", "proxyless-grpc", "-o", "yaml"][..],
            "only a JSON",
        ),
        (&["--labels", "app"][..], "not KEY=VALUE"),
        (&["--xds-address", "nohost"][..], "expected HOST:PORT"),
        (&["--pod", "a~b"][..], "part of the node id"),
        (
            &["--type", "router", "--node-id", "gw"][..],
            "would be served as a sidecar",
        ),
        (&["--node-id", "a b"][..], "no whitespace"),
        (&["--node-id", "x", "--pod", "p"][..], "cannot be used with"),
        (&["--xds-tls-cert", "c.pem"][..], "needs --xds-tls-key"),
        (
            &["--xds-tls-cert", "c.pem", "--xds-tls-key", "k.pem"][..],
            "needs --xds-tls-ca",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_deltapilot"))
            .arg("bootstrap")
            .args(args)
            .output()
            .expect("run deltapilot bootstrap");
        assert!(!out.status.success(), "{args:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// Each shipped Envoy bootstrap is exactly what its header's command prints, so
/// the examples cannot drift from `deltapilot bootstrap` (regenerate them with
/// `bash scripts/examples.sh`).
#[test]
fn every_example_envoy_bootstrap_is_the_output_of_its_command() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("examples/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("envoy-") && n.ends_with(".yaml"))
        })
        .collect();
    files.sort();
    assert!(
        files.len() >= 2,
        "examples/envoy-delta.yaml and envoy-sotw.yaml: {files:?}"
    );
    for f in files {
        let text = std::fs::read_to_string(&f).expect("example");
        let header_len: usize = text
            .split_inclusive('\n')
            .take_while(|l| l.starts_with('#'))
            .map(str::len)
            .sum();
        let (header, body) = text.split_at(header_len);
        let cmd = header
            .lines()
            .find_map(|l| l.strip_prefix("# $ deltapilot bootstrap "))
            .unwrap_or_else(|| {
                panic!(
                    "{}: no `# $ deltapilot bootstrap ...` line in its header",
                    f.display()
                )
            });
        let args: Vec<&str> = cmd.split_whitespace().collect();
        let want = bootstrap(&args);
        if body != want {
            let diff: Vec<String> = body
                .lines()
                .zip(want.lines())
                .enumerate()
                .filter(|(_, (a, b))| a != b)
                .take(10)
                .map(|(i, (a, b))| format!("  line {}: file {a:?}, command {b:?}", i + 1))
                .collect();
            panic!(
                "{} differs from `deltapilot bootstrap {cmd}` (file {} lines, command {}); \
                 run `bash scripts/examples.sh`:\n{}",
                f.display(),
                body.lines().count(),
                want.lines().count(),
                diff.join("\n")
            );
        }
        let v: serde_yaml::Value = serde_yaml::from_str(body).expect("YAML");
        assert!(
            v["node"]["id"]
                .as_str()
                .is_some_and(|id| id.starts_with("demo-envoy-")),
            "{}: the tests look for the demo-envoy-* node id",
            f.display()
        );
    }
}

#[test]
fn a_plain_node_id_carries_only_the_metadata_asked_for() {
    let v: serde_json::Value =
        serde_json::from_str(&bootstrap(&["--node-id", "edge-1", "-o", "json"])).expect("json");
    assert_eq!(
        v["node"],
        serde_json::json!({"id": "edge-1", "cluster": "default"})
    );
    let v: serde_json::Value = serde_json::from_str(&bootstrap(&[
        "--node-id",
        "edge-1",
        "--namespace",
        "shop",
        "--labels",
        "app=web",
        "-o",
        "json",
    ]))
    .expect("json");
    assert_eq!(
        v["node"],
        serde_json::json!({"id": "edge-1", "cluster": "shop",
            "metadata": {"NAMESPACE": "shop", "LABELS": {"app": "web"}}})
    );
}
