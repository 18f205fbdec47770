//! Gateway parsing, checking, selection and VirtualService binding.

use std::sync::Arc;

use deltapilot_proto::ConfigKind;

use super::*;
use crate::model::{Config, Hostname, Labels};

fn cfg(kind: ConfigKind, ns: &str, name: &str, spec: &str) -> Config {
    Config {
        key: Arc::from(deltapilot_proto::config_key(kind, ns, name).as_str()),
        kind,
        namespace: Arc::from(ns),
        name: Arc::from(name),
        labels: Default::default(),
        annotations: Default::default(),
        spec_json: Arc::from(spec),
    }
}

fn gw(ns: &str, name: &str, spec: &str) -> Config {
    cfg(ConfigKind::Gateway, ns, name, spec)
}

fn codes(r: &Rule) -> Vec<(&'static str, &str)> {
    r.problems
        .iter()
        .map(|p| (p.code, p.path.as_str()))
        .collect()
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (Arc::from(*k), Arc::from(*v)))
        .collect()
}

const INGRESS: &str = r#"{
  "selector": {"istio": "ingressgateway"},
  "servers": [
    {"port": {"number": 80, "name": "http", "protocol": "HTTP"},
     "hosts": ["*/a.example.com", "./b.example.com", "web/*.example.com"],
     "tls": {"httpsRedirect": true}},
    {"port": {"number": 443, "name": "https", "protocol": "HTTPS"},
     "hosts": ["a.example.com"],
     "tls": {"mode": "SIMPLE", "credentialName": "a-cert"}},
    {"port": {"number": 8443, "name": "mtls", "protocol": "HTTPS"},
     "hosts": ["*"],
     "tls": {"mode": "MUTUAL", "credentialName": "kubernetes://m", "subjectAltNames": ["spiffe://x"]}},
    {"port": {"number": 9443, "protocol": "TLS"}, "hosts": ["*"],
     "tls": {"mode": "PASSTHROUGH"}}
  ]
}"#;

#[test]
fn servers_are_checked_into_modes_hosts_and_credentials() {
    let r = parse(&gw("edge", "ingress", INGRESS));
    assert_eq!(codes(&r), []);
    let g = r.gateway().expect("valid gateway");
    let s = &g.servers;
    assert_eq!(s.len(), 4);
    assert_eq!((s[0].port, &*s[0].port_name), (80, "http"));
    assert_eq!(
        s[0].mode,
        ServerMode::Http {
            https_redirect: true
        }
    );
    assert_eq!(
        s[0].hosts,
        [
            ServerHost {
                namespace: None,
                host: Hostname::new("a.example.com")
            },
            ServerHost {
                namespace: Some(Arc::from("edge")),
                host: Hostname::new("b.example.com")
            },
            ServerHost {
                namespace: Some(Arc::from("web")),
                host: Hostname::new("*.example.com")
            },
        ]
    );
    assert_eq!(
        s[1].mode,
        ServerMode::Https {
            credential: Arc::from("a-cert"),
            mutual: false,
            subject_alt_names: vec![]
        }
    );
    assert!(
        matches!(&s[2].mode, ServerMode::Https { mutual: true, credential, .. } if &**credential == "m"),
        "Istio's explicit `kubernetes://` type names the same credential"
    );
    assert_eq!(s[3].mode, ServerMode::Passthrough);
}

#[test]
fn servers_that_cannot_be_honoured_are_dropped_and_reported() {
    let r = parse(&gw(
        "edge",
        "bad",
        r#"{"servers": [
          {"port": {"number": 70000}, "hosts": ["a"]},
          {"port": {"number": 80}, "hosts": ["~/a", "/b"]},
          {"port": {"number": 443, "protocol": "HTTPS"}, "hosts": ["a"]},
          {"port": {"number": 443, "protocol": "HTTPS"}, "hosts": ["a"],
           "tls": {"mode": "ISTIO_MUTUAL"}},
          {"port": {"number": 443, "protocol": "HTTPS"}, "hosts": ["a"],
           "tls": {"mode": "SIMPLE", "credentialName": "../etc"}},
          {"port": {"number": 3306, "protocol": "MONGO"}, "hosts": ["a"]},
          {"port": {"number": 81}, "hosts": ["ok.example.com"], "bind": "1.2.3.4", "extra": 1}
        ]}"#,
    ));
    assert_eq!(
        codes(&r),
        [
            ("DP1002", "servers[6].extra"),
            ("DP1020", "servers[6].bind"),
            ("DP1200", "servers[0].port.number"),
            ("DP1201", "servers[1].hosts"),
            ("DP1202", "servers[1].hosts[0]"),
            ("DP1202", "servers[1].hosts[1]"),
            ("DP1203", "servers[2].tls.mode"),
            ("DP1204", "servers[3].tls.mode"),
            ("DP1205", "servers[4].tls.credentialName"),
            ("DP1206", "servers[5].port.protocol"),
        ]
    );
    let g = r.gateway().expect("the gateway stays, with what it can do");
    assert_eq!(g.servers.len(), 1);
    assert_eq!(g.servers[0].port, 81);
    let mut idx = RuleIndex::default();
    idx.upsert(&gw("edge", "bad", &r_spec(&r)));
    let st = idx.status(&r.key).expect("stored");
    assert_eq!(st.as_str(), "applied_with_warnings", "one server remains");

    let none = parse(&gw(
        "edge",
        "none",
        r#"{"servers": [{"port": {"number": 0}}]}"#,
    ));
    let mut idx = RuleIndex::default();
    idx.upsert(&gw(
        "edge",
        "none",
        r#"{"servers": [{"port": {"number": 0}}]}"#,
    ));
    assert_eq!(idx.status(&none.key).expect("present").as_str(), "rejected");
}

/// The spec text of a parsed Gateway (round trip through its typed form).
fn r_spec(r: &Rule) -> String {
    serde_json::to_string(&r.gateway().expect("present").spec).expect("present")
}

#[test]
fn selection_matches_labels_in_any_namespace_unless_scoped() {
    let mut idx = RuleIndex::default();
    idx.upsert(&gw("edge", "ingress", INGRESS));
    idx.upsert(&gw(
        "other",
        "all",
        r#"{"servers":[{"port":{"number":80},"hosts":["*"]}]}"#,
    ));
    let ig = labels(&[("istio", "ingressgateway"), ("app", "x")]);
    let ids = |v: Vec<Arc<str>>| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        ids(idx.gateways_selecting("anywhere", &ig, false)),
        ["edge/ingress", "other/all"]
    );
    assert_eq!(
        ids(idx.gateways_selecting("anywhere", &labels(&[("app", "x")]), false)),
        ["other/all"],
        "an empty selector selects every router"
    );
    assert_eq!(
        ids(idx.gateways_selecting("edge", &ig, true)),
        ["edge/ingress"]
    );
    assert!(idx.gateway("edge/ingress").is_some());
    let touch = idx
        .remove(&parse(&gw("edge", "ingress", "{}")).key)
        .expect("present");
    assert_eq!(touch.gateways, [Arc::<str>::from("edge/ingress")]);
    assert!(idx.gateway("edge/ingress").is_none());
}

#[test]
fn virtual_services_bind_to_named_gateways_in_merge_order() {
    let mut idx = RuleIndex::default();
    let vs = |ns: &str, name: &str, spec: &str| cfg(ConfigKind::VirtualService, ns, name, spec);
    let t = idx
        .upsert(&vs(
            "web",
            "b",
            r#"{"hosts":["a.example.com"],"gateways":["edge/ingress"]}"#,
        ))
        .expect("present");
    assert_eq!(t.gateways, [Arc::<str>::from("edge/ingress")]);
    assert!(t.virtual_service.is_empty(), "not bound to sidecars");
    idx.upsert(&vs(
        "edge",
        "a",
        r#"{"hosts":["x"],"gateways":["ingress","mesh"]}"#,
    ));
    idx.upsert(&vs("edge", "c", r#"{"hosts":["y"],"gateways":["other"]}"#));
    let bound: Vec<&str> = idx
        .virtual_services_for_gateway("edge/ingress")
        .iter()
        .map(|(r, _)| &*r.name)
        .collect();
    assert_eq!(bound, ["a", "b"]);
    let st = idx.status("cfg/virtual_service/web/b");
    assert_eq!(st.map(|s| s.as_str()), Some("applied"));
    assert!(
        idx.virtual_service_for(&Hostname::new("x.edge.svc.cluster.local"))
            .is_some(),
        "mesh still binds"
    );
}
