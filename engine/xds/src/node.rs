//! Who a proxy is, read from Envoy's `Node`.
//!
//! Istio encodes sidecar identity in the node id (`sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local`)
//! and in node metadata (`NAMESPACE`, `LABELS`, `INSTANCE_IPS`, `GENERATOR`). We read
//! both, so Istio-style bootstraps work unchanged, and fall back to the user agent to
//! tell proxyless gRPC (`user_agent_name` starts with `gRPC`/`grpc`) from Envoy.
//! It lives here, not in the model, because the model knows no Envoy types.

use std::sync::Arc;

use deltapilot_model::{Proxy, ProxyType};
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};

/// Builds a proxy from the `Node` of its first xDS request.
pub fn proxy_from_node(node: &Node) -> Proxy {
    let meta = node.metadata.as_ref();
    let mut proxy = Proxy {
        id: Arc::from(node.id.as_str()),
        cluster: Arc::from(node.cluster.as_str()),
        ..Default::default()
    };

    // Istio node id: TYPE~IP~POD.NAMESPACE~NAMESPACE.svc.DOMAIN
    let parts: Vec<&str> = node.id.split('~').collect();
    if parts.len() == 4 {
        proxy.proxy_type = match parts[0] {
            "router" => ProxyType::Router,
            _ => ProxyType::Sidecar,
        };
        if let Ok(ip) = parts[1].parse() {
            proxy.ips.push(ip);
        }
        if let Some((_, ns)) = parts[2].split_once('.') {
            proxy.namespace = Arc::from(ns);
        }
    }

    let grpc_agent = node
        .user_agent_name
        .to_ascii_lowercase()
        .starts_with("grpc");
    if let Some(m) = meta {
        if let Some(ns) = string_field(m, "NAMESPACE") {
            proxy.namespace = Arc::from(ns);
        }
        if let Some(ips) = string_field(m, "INSTANCE_IPS") {
            proxy.ips = ips
                .split(',')
                .filter_map(|s| s.trim().parse().ok())
                .collect();
        }
        if let Some(Value {
            kind: Some(Kind::StructValue(labels)),
        }) = m.fields.get("LABELS")
        {
            proxy.labels = labels
                .fields
                .iter()
                .filter_map(|(k, v)| match &v.kind {
                    Some(Kind::StringValue(s)) => {
                        Some((Arc::from(k.as_str()), Arc::from(s.as_str())))
                    }
                    _ => None,
                })
                .collect();
        }
        if string_field(m, "GENERATOR") == Some("grpc") {
            proxy.proxy_type = ProxyType::ProxylessGrpc;
        }
        for (k, v) in &m.fields {
            if matches!(k.as_str(), "NAMESPACE" | "INSTANCE_IPS" | "LABELS") {
                continue;
            }
            proxy
                .metadata
                .insert(Arc::from(k.as_str()), Arc::from(flat(v).as_str()));
        }
    }
    if grpc_agent {
        proxy.proxy_type = ProxyType::ProxylessGrpc;
    }
    proxy.ips.sort();
    proxy.ips.dedup();
    proxy
}

fn string_field<'a>(s: &'a Struct, key: &str) -> Option<&'a str> {
    match s.fields.get(key)?.kind.as_ref()? {
        Kind::StringValue(v) => Some(v),
        _ => None,
    }
}

fn flat(v: &Value) -> String {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => String::new(),
        Some(Kind::StringValue(s)) => s.clone(),
        Some(Kind::NumberValue(n)) => n.to_string(),
        Some(Kind::BoolValue(b)) => b.to_string(),
        Some(Kind::StructValue(s)) => {
            let mut out = String::from("{");
            let mut keys: Vec<_> = s.fields.keys().collect();
            keys.sort();
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&format!("{k:?}:{:?}", flat(&s.fields[k])));
            }
            out.push('}');
            out
        }
        Some(Kind::ListValue(l)) => {
            let items: Vec<String> = l.values.iter().map(flat).collect();
            items.join(",")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    fn str_value(s: &str) -> Value {
        Value {
            kind: Some(Kind::StringValue(s.into())),
        }
    }

    #[test]
    fn istio_sidecar_node_id_is_parsed() {
        let node = Node {
            id: "sidecar~10.1.2.3~reviews-v1-abc.bookinfo~bookinfo.svc.cluster.local".into(),
            user_agent_name: "envoy".into(),
            ..Default::default()
        };
        let p = proxy_from_node(&node);
        assert_eq!(p.proxy_type, ProxyType::Sidecar);
        assert_eq!(&*p.namespace, "bookinfo");
        assert_eq!(p.ips, vec!["10.1.2.3".parse::<IpAddr>().expect("ip")]);
    }

    #[test]
    fn grpc_user_agent_or_generator_means_proxyless() {
        let by_agent = Node {
            id: "client-1".into(),
            user_agent_name: "gRPC Python".into(),
            ..Default::default()
        };
        assert_eq!(
            proxy_from_node(&by_agent).proxy_type,
            ProxyType::ProxylessGrpc
        );

        let mut fields = std::collections::HashMap::new();
        fields.insert("GENERATOR".to_string(), str_value("grpc"));
        fields.insert("NAMESPACE".to_string(), str_value("shop"));
        let by_meta = Node {
            id: "x".into(),
            metadata: Some(Struct { fields }),
            ..Default::default()
        };
        let p = proxy_from_node(&by_meta);
        assert_eq!(p.proxy_type, ProxyType::ProxylessGrpc);
        assert_eq!(&*p.namespace, "shop");
        assert_eq!(p.metadata.get("GENERATOR").map(|s| &**s), Some("grpc"));
    }

    #[test]
    fn instance_ips_labels_and_other_metadata_come_from_the_node_metadata() {
        let mut labels = std::collections::HashMap::new();
        labels.insert("app".to_string(), str_value("reviews"));
        labels.insert("version".to_string(), str_value("v2"));
        // Not a string: a label value must be one, so it is left out.
        labels.insert(
            "replicas".to_string(),
            Value {
                kind: Some(Kind::NumberValue(3.0)),
            },
        );
        let mut fields = std::collections::HashMap::new();
        // The metadata's addresses replace the one in the node id; an
        // unparsable entry is dropped, a repeated one kept once.
        fields.insert(
            "INSTANCE_IPS".to_string(),
            str_value("10.1.2.4, fd00::7,not-an-ip,10.1.2.4"),
        );
        fields.insert(
            "LABELS".to_string(),
            Value {
                kind: Some(Kind::StructValue(Struct { fields: labels })),
            },
        );
        fields.insert(
            "ISTIO_VERSION".to_string(),
            Value {
                kind: Some(Kind::ListValue(
                    envoy_types::pb::google::protobuf::ListValue {
                        values: vec![str_value("1"), str_value("24")],
                    },
                )),
            },
        );
        let node = Node {
            id: "sidecar~10.1.2.3~reviews-v2-abc.bookinfo~bookinfo.svc.cluster.local".into(),
            metadata: Some(Struct { fields }),
            ..Default::default()
        };
        let p = proxy_from_node(&node);
        let ips: Vec<IpAddr> = ["10.1.2.4", "fd00::7"]
            .iter()
            .map(|s| s.parse().expect("ip"))
            .collect();
        assert_eq!(p.ips, ips);
        let labels: Vec<(&str, &str)> = p.labels.iter().map(|(k, v)| (&**k, &**v)).collect();
        assert_eq!(labels, [("app", "reviews"), ("version", "v2")]);
        assert_eq!(p.metadata.get("ISTIO_VERSION").map(|s| &**s), Some("1,24"));
        assert!(
            !p.metadata.contains_key("LABELS") && !p.metadata.contains_key("INSTANCE_IPS"),
            "parsed fields are not repeated as raw metadata"
        );
    }

    #[test]
    fn router_prefix_means_gateway() {
        let node = Node {
            id: "router~10.0.0.9~gw.istio-system~istio-system.svc.cluster.local".into(),
            ..Default::default()
        };
        assert_eq!(proxy_from_node(&node).proxy_type, ProxyType::Router);
    }
}
