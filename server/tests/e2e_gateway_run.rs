//! A router Envoy (`DELTAPILOT_ENVOY`, delta ADS) of a real `deltapilot run`
//! gets its gateway view from the fold: node id
//! `router~127.0.0.1~ingress-1.edge~edge.svc.cluster.local` with node metadata
//! LABELS `istio: ingressgateway`, a Gateway selecting those labels and a
//! VirtualService bound to it, both read from the watched directory. Envoy
//! serves the service by path on the Gateway's port (404 off the path) and
//! forwards its TCP server's connections through a VirtualService `tcp` route,
//! `/debug/syncz` and `deltapilot proxy-status` show the key
//! `gateway/edge/ingress`, `deltapilot_views` counts the gateway view, the router holds no sidecar outbound listener, and
//! Envoy never rejects an update. Gateways whose selectors combine into more
//! sets than get a view are reported by `deltapilot_gateway_sets_truncated`.
//! Deleting the Gateway returns the router to
//! `default/router`. A restricted DestinationRule applies to a router when its
//! `exportTo` names the router's namespace (the key gains `+sees/…`), and
//! stops applying when it names another.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::{Backend, Deltapilot, Envoy, free_port, http_get, metric, raw_http_body, wait_for};

const WAIT: Duration = Duration::from_secs(60);
const NODE: &str = "router~127.0.0.1~ingress-1.edge~edge.svc.cluster.local";
const HOST: &str = "web.example.com";

fn write(dir: &Path, file: &str, yaml: &str) {
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, yaml).expect("write");
    std::fs::rename(&tmp, dir.join(file)).expect("rename");
}

/// The shipped delta bootstrap as a router: `NODE`, LABELS metadata.
fn router_envoy(dir: &Path, xds_port: u16) -> Envoy {
    let admin_port = free_port();
    let template = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/envoy-delta.yaml"),
    )
    .expect("shipped bootstrap");
    let bootstrap = template
        .replace("port_value: 18000", &format!("port_value: {xds_port}"))
        .replace("port_value: 9901", &format!("port_value: {admin_port}"))
        .replace(
            "  id: demo-envoy-delta\n",
            &format!("  id: \"{NODE}\"\n  metadata:\n    LABELS:\n      istio: ingressgateway\n"),
        );
    assert!(bootstrap.contains(NODE), "the bootstrap's node id changed");
    let path = dir.join("router.yaml");
    std::fs::write(&path, bootstrap).expect("write bootstrap");
    Envoy::start_bootstrap(dir, &path, admin_port)
}

fn view_keys(dp: &Deltapilot) -> Vec<String> {
    let syncz = http_get(dp.admin(), "/debug/syncz", "localhost")
        .map(|r| r.1)
        .unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&syncz).unwrap_or_default();
    v["proxies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["view_key"].as_str().map(str::to_string))
        .collect()
}

fn envoy_listeners(envoy: &Envoy) -> Vec<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], envoy.admin_port));
    let body = http_get(addr, "/listeners", "localhost")
        .map(|r| r.1)
        .unwrap_or_default();
    // `name::address` per line (the body may arrive chunked).
    let mut names: Vec<String> = body
        .lines()
        .filter_map(|l| l.split_once("::"))
        .map(|(name, _)| name.to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn a_router_gets_its_gateway_view_from_the_fold() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (data, watch) = (tmp.path().join("data"), tmp.path().join("watch"));
    std::fs::create_dir_all(&watch).expect("watch dir");
    let web = Backend::start("web");
    let (svc_port, gw_port, tcp_port) = (free_port(), free_port(), free_port());
    support::write_service_entry(
        &watch,
        "web.yaml",
        "web.test.local",
        svc_port,
        "HTTP",
        &[web.port],
    );
    write(
        &watch,
        "gateway.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: ingress\n  namespace: edge\nspec:\n  selector:\n    istio: ingressgateway\n  servers:\n    - port:\n        number: {gw_port}\n        name: http\n        protocol: HTTP\n      hosts:\n        - \"*/{HOST}\"\n    - port:\n        number: {tcp_port}\n        name: tcp\n        protocol: TCP\n      hosts:\n        - \"*/{HOST}\"\n"
        ),
    );
    write(
        &watch,
        "vs-tcp.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: web-tcp\n  namespace: test\nspec:\n  hosts: [{HOST}]\n  gateways: [edge/ingress]\n  tcp:\n    - match: [{{port: {tcp_port}}}]\n      route: [{{destination: {{host: web.test.local, port: {{number: {svc_port}}}}}}}]\n"
        ),
    );
    write(
        &watch,
        "vs.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: web\n  namespace: test\nspec:\n  hosts:\n    - {HOST}\n  gateways:\n    - edge/ingress\n  http:\n    - match:\n        - uri:\n            prefix: /web\n      route:\n        - destination:\n            host: web.test.local\n            port:\n              number: {svc_port}\n"
        ),
    );
    let (xds_port, admin_port) = (free_port(), free_port());
    let dp = Deltapilot::start(tmp.path(), &data, &watch, xds_port, admin_port);
    let envoy = router_envoy(tmp.path(), xds_port);
    let gw = SocketAddr::from(([127, 0, 0, 1], gw_port));
    wait_for("the router to publish /web", WAIT, || {
        match http_get(gw, "/web", HOST) {
            Ok((200, b)) if b == "web" => Ok(()),
            other => Err(format!("{other:?}\n{}", envoy.proc.output())),
        }
    });
    assert_eq!(
        http_get(gw, "/", HOST).map(|r| r.0),
        Ok(404),
        "off the path"
    );
    let tcp = SocketAddr::from(([127, 0, 0, 1], tcp_port));
    wait_for(
        "the router's TCP server to forward to web",
        WAIT,
        || match raw_http_body(tcp, HOST) {
            Ok(b) if b == "web" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    assert_eq!(view_keys(&dp), ["gateway/edge/ingress"]);
    let mut listeners = envoy_listeners(&envoy);
    listeners.sort();
    let mut want = [format!("0.0.0.0_{gw_port}"), format!("0.0.0.0_{tcp_port}")];
    want.sort();
    assert_eq!(
        listeners, want,
        "only the gateway listeners, no sidecar outbound one"
    );
    let m = dp.metrics();
    assert_eq!(
        metric(&m, "deltapilot_views", &[]),
        4.0,
        "three defaults and one gateway view: {m}"
    );
    let status = Command::new(env!("CARGO_BIN_EXE_deltapilot"))
        .args(["proxy-status", "--admin-addr"])
        .arg(format!("127.0.0.1:{admin_port}"))
        .output()
        .expect("proxy-status runs");
    let out = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success() && out.contains("gateway/edge/ingress"),
        "{out}{}",
        String::from_utf8_lossy(&status.stderr)
    );

    // Nine Gateways with unrelated selectors combine into 511 sets, more than
    // get a view: the cut is reported, and clears when they go.
    let truncated =
        |dp: &Deltapilot| metric(&dp.metrics(), "deltapilot_gateway_sets_truncated", &[]);
    assert_eq!(truncated(&dp), 0.0);
    for i in 0..9 {
        write(
            &watch,
            &format!("unrelated-{i}.yaml"),
            &format!(
                "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: u{i}\n  namespace: edge\nspec:\n  selector:\n    gw-{i}: \"on\"\n  servers:\n    - port: {{number: 8080, name: http, protocol: HTTP}}\n      hosts: [\"*\"]\n"
            ),
        );
    }
    wait_for(
        "the gateway sets to be reported cut",
        WAIT,
        || match truncated(&dp) {
            1.0 => Ok(()),
            v => Err(format!("deltapilot_gateway_sets_truncated {v}")),
        },
    );
    for i in 0..9 {
        std::fs::remove_file(watch.join(format!("unrelated-{i}.yaml"))).expect("remove");
    }
    wait_for("the cut to clear", WAIT, || match truncated(&dp) {
        0.0 => Ok(()),
        v => Err(format!("deltapilot_gateway_sets_truncated {v}")),
    });

    std::fs::remove_file(watch.join("gateway.yaml")).expect("remove Gateway");
    wait_for("the router back on default/router", WAIT, || {
        let keys = view_keys(&dp);
        if keys == ["default/router"] {
            Ok(())
        } else {
            Err(format!("{keys:?}"))
        }
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

/// A DestinationRule of namespace `edge` with subset `v2` (the second
/// backend), exported to `export`.
fn subset_rule(export: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: web\n  namespace: edge\nspec:\n  host: web.test.local\n  exportTo: [\"{export}\"]\n  subsets:\n    - name: v2\n      labels:\n        idx: \"1\"\n"
    )
}

/// Istio looks a router's DestinationRules up from the router's own
/// namespace: a restricted one exported there applies to it (the subset
/// cluster its route names exists, holding only the subset's endpoint), and
/// exported elsewhere it does not.
#[test]
fn a_router_applies_the_restricted_destination_rules_its_namespace_sees() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (data, watch) = (tmp.path().join("data"), tmp.path().join("watch"));
    std::fs::create_dir_all(&watch).expect("watch dir");
    let (v1, v2) = (Backend::start("v1"), Backend::start("v2"));
    let (svc_port, gw_port) = (free_port(), free_port());
    support::write_service_entry(
        &watch,
        "web.yaml",
        "web.test.local",
        svc_port,
        "HTTP",
        &[v1.port, v2.port],
    );
    write(
        &watch,
        "gateway.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: ingress\n  namespace: edge\nspec:\n  selector:\n    istio: ingressgateway\n  servers:\n    - port:\n        number: {gw_port}\n        name: http\n        protocol: HTTP\n      hosts:\n        - \"*/{HOST}\"\n"
        ),
    );
    write(
        &watch,
        "vs.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: web\n  namespace: test\nspec:\n  hosts: [{HOST}]\n  gateways: [edge/ingress]\n  http:\n    - route:\n        - destination:\n            host: web.test.local\n            subset: v2\n            port: {{number: {svc_port}}}\n"
        ),
    );
    write(&watch, "dr.yaml", &subset_rule("."));
    let (xds_port, admin_port) = (free_port(), free_port());
    let dp = Deltapilot::start(tmp.path(), &data, &watch, xds_port, admin_port);
    let envoy = router_envoy(tmp.path(), xds_port);
    let gw = SocketAddr::from(([127, 0, 0, 1], gw_port));
    wait_for(
        "the router to route to subset v2",
        WAIT,
        || match http_get(gw, "/", HOST) {
            Ok((200, b)) if b == "v2" => Ok(()),
            other => Err(format!("{other:?}\n{}", envoy.proc.output())),
        },
    );
    for _ in 0..10 {
        assert_eq!(
            http_get(gw, "/", HOST),
            Ok((200, "v2".to_string())),
            "only the subset's endpoint"
        );
    }
    assert_eq!(
        view_keys(&dp),
        ["gateway/edge/ingress+sees/destination_rule/edge/web,destination_rule/edge/web#own"]
    );

    // Exported to the VirtualService's namespace only: not the router's.
    write(&watch, "dr.yaml", &subset_rule("test"));
    wait_for("the router to lose subset v2", WAIT, || {
        match http_get(gw, "/", HOST) {
            Ok((404, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    assert_eq!(view_keys(&dp), ["gateway/edge/ingress"]);
    let m = dp.metrics();
    assert_eq!(metric(&m, "deltapilot_xds_nacks_total", &[]), 0.0, "{m}");
    let rejected = envoy.rejected_updates();
    assert!(
        rejected.is_empty(),
        "Envoy rejected updates: {rejected:?}\n{}",
        envoy.proc.output()
    );
}
