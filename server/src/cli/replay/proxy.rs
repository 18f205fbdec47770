//! `--proxy NODE_ID_OR_FILE`: who a replay answers for.
//!
//! - A path to an existing file: an Envoy bootstrap (its `node`) or a bare node
//!   object, in JSON or YAML (`id`, `cluster`, `metadata`, `user_agent_name`,
//!   `locality`). It becomes a `Proxy` exactly as the server builds one from the
//!   node of a first request (`Proxy::from_node`): Istio-style ids
//!   (`sidecar~IP~POD.NS~NS.svc.cluster.local`, `router~…`), `NAMESPACE`,
//!   `INSTANCE_IPS`, `LABELS` and `GENERATOR: grpc` metadata, a gRPC user agent.
//! - Anything else: a node id, read the same way (so `router~…` is a gateway and
//!   any other id a sidecar). A proxyless gRPC client cannot be told from its id
//!   alone: pass `--proxy-type proxyless-grpc`, or its bootstrap file.
//!
//! What it does NOT do: know what a proxyless client subscribed to (a replay
//! shows its whole view: every gRPC listener, route, cluster and assignment).

use std::path::Path;

use anyhow::Context as _;
use deltapilot_model::{Proxy, ProxyType};
use envoy_types::pb::envoy::config::core::v3::{Locality, Node};
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value, value::Kind};

/// `--proxy-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ProxyTypeArg {
    /// An Envoy sidecar.
    Sidecar,
    /// An Envoy gateway.
    Router,
    /// A proxyless gRPC client.
    ProxylessGrpc,
}

impl From<ProxyTypeArg> for ProxyType {
    fn from(a: ProxyTypeArg) -> Self {
        match a {
            ProxyTypeArg::Sidecar => ProxyType::Sidecar,
            ProxyTypeArg::Router => ProxyType::Router,
            ProxyTypeArg::ProxylessGrpc => ProxyType::ProxylessGrpc,
        }
    }
}

/// The proxy `arg` names, with `kind` overriding its type.
pub(crate) fn resolve(arg: &str, kind: Option<ProxyTypeArg>) -> anyhow::Result<Proxy> {
    let path = Path::new(arg);
    let node = if path.is_file() {
        node_from_file(path)?
    } else {
        if arg.trim().is_empty() {
            anyhow::bail!("--proxy is empty; give a node id or a bootstrap file");
        }
        Node {
            id: arg.to_owned(),
            ..Default::default()
        }
    };
    let mut proxy = deltapilot_xds::proxy_from_node(&node);
    if let Some(k) = kind {
        proxy.proxy_type = k.into();
    }
    Ok(proxy)
}

fn node_from_file(path: &Path) -> anyhow::Result<Node> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --proxy {}", path.display()))?;
    // JSON is YAML too.
    let doc: serde_json::Value = serde_yaml::from_str(&text)
        .with_context(|| format!("--proxy {}: not JSON or YAML", path.display()))?;
    let node = doc.get("node").unwrap_or(&doc);
    let obj = node.as_object().with_context(|| {
        format!(
            "--proxy {}: expected a bootstrap with `node`, or a node object",
            path.display()
        )
    })?;
    let text_of = |k: &str| {
        obj.get(k)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let id = text_of("id");
    if id.is_empty() {
        anyhow::bail!("--proxy {}: the node has no `id`", path.display());
    }
    let locality = obj.get("locality").map(|l| Locality {
        region: l
            .get("region")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned(),
        zone: l
            .get("zone")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned(),
        sub_zone: l
            .get("sub_zone")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned(),
    });
    let metadata = match obj.get("metadata") {
        Some(serde_json::Value::Object(m)) => Some(to_struct(m)),
        _ => None,
    };
    Ok(Node {
        id,
        cluster: text_of("cluster"),
        user_agent_name: text_of("user_agent_name"),
        metadata,
        locality,
        ..Default::default()
    })
}

fn to_struct(m: &serde_json::Map<String, serde_json::Value>) -> Struct {
    Struct {
        fields: m.iter().map(|(k, v)| (k.clone(), to_value(v))).collect(),
    }
}

fn to_value(v: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    let kind = match v {
        J::Null => Kind::NullValue(0),
        J::Bool(b) => Kind::BoolValue(*b),
        J::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        J::String(s) => Kind::StringValue(s.clone()),
        J::Array(a) => Kind::ListValue(ListValue {
            values: a.iter().map(to_value).collect(),
        }),
        J::Object(o) => Kind::StructValue(to_struct(o)),
    };
    Value { kind: Some(kind) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_bootstrap_files_resolve_like_a_connected_node() {
        assert_eq!(
            resolve("sidecar~10.0.0.1~a.ns~ns.svc.cluster.local", None)
                .expect("id")
                .proxy_type,
            ProxyType::Sidecar
        );
        assert_eq!(
            resolve("router~10.0.0.1~gw.ns~ns.svc.cluster.local", None)
                .expect("id")
                .proxy_type,
            ProxyType::Router
        );
        let p = resolve("client-1", Some(ProxyTypeArg::ProxylessGrpc)).expect("override");
        assert_eq!(
            (&*p.id, p.proxy_type),
            ("client-1", ProxyType::ProxylessGrpc)
        );

        let dir = tempfile::tempdir().expect("tmp");
        let f = dir.path().join("bootstrap.yaml");
        std::fs::write(
            &f,
            "node:\n  id: grpc-1\n  metadata:\n    GENERATOR: grpc\n    NAMESPACE: shop\n",
        )
        .expect("write");
        let p = resolve(f.to_str().expect("utf8"), None).expect("file");
        assert_eq!(
            (&*p.id, p.proxy_type, &*p.namespace),
            ("grpc-1", ProxyType::ProxylessGrpc, "shop")
        );
        std::fs::write(&f, "{\"cluster\": \"c\"}").expect("write");
        assert!(
            format!(
                "{:#}",
                resolve(f.to_str().expect("utf8"), None).expect_err("no id")
            )
            .contains("no `id`")
        );
    }
}
