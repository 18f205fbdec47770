//! From Eureka instances to the neutral service model: one service per VIP, one
//! endpoint per instance (the rules are listed in the [module docs](super)).
//!
//! The desired view is rebuilt from the whole local copy whenever it changes; it is
//! a pure function of the set of instances in force (never of the order in which
//! they arrived), so a full refetch of an unchanged registry yields the same view.
//!
//! What it does NOT do: parse JSON (see `json`) or diff views (see `view`).

use std::cmp::Reverse;
use std::collections::BTreeMap;

use deltapilot_proto as pb;

use super::json::Instance;
use std::sync::Arc;

use crate::common::emit::{Entity, EntityMap};

/// Name of the service port and endpoint port fed by an instance's `port`.
pub(crate) const HTTP_PORT_NAME: &str = "http";
/// Name of the service port and endpoint port fed by an instance's `securePort`.
pub(crate) const HTTPS_PORT_NAME: &str = "https";

/// The endpoint key of an instance: `ep/<source>/<APP>/<instanceId>`.
pub(crate) fn endpoint_key(source: &str, app: &str, id: &str) -> String {
    format!("ep/{source}/{app}/{id}")
}

#[derive(Default)]
struct VipPorts {
    http: BTreeMap<u32, usize>,
    https: BTreeMap<u32, usize>,
}

/// The most common port number, the lowest on a tie.
fn mode(counts: &BTreeMap<u32, usize>) -> Option<u32> {
    counts
        .iter()
        .max_by_key(|(n, c)| (**c, Reverse(**n)))
        .map(|(n, _)| *n)
}

/// The entities the instances in force describe.
pub(crate) fn desired<'a>(
    instances: impl IntoIterator<Item = &'a Instance>,
    source: &str,
    namespace: &str,
) -> EntityMap {
    let mut view = EntityMap::new();
    let mut vips: BTreeMap<&str, VipPorts> = BTreeMap::new();
    for i in instances {
        let mut ports = BTreeMap::new();
        if let Some(p) = i.http_port {
            ports.insert(HTTP_PORT_NAME.to_owned(), p);
        }
        if let Some(p) = i.https_port {
            ports.insert(HTTPS_PORT_NAME.to_owned(), p);
        }
        for vip in &i.vips {
            let v = vips.entry(vip.as_str()).or_default();
            if let Some(p) = i.http_port {
                *v.http.entry(p).or_insert(0) += 1;
            }
            if let Some(p) = i.https_port {
                *v.https.entry(p).or_insert(0) += 1;
            }
        }
        let endpoint = pb::Endpoint {
            address: i.address.clone(),
            ports,
            labels: i.labels.clone(),
            locality: i.locality.clone(),
            weight: 0,
            health: i.health as i32,
            service_account: String::new(),
            services: i
                .vips
                .iter()
                .map(|v| pb::ServiceRef {
                    namespace: namespace.to_owned(),
                    hostname: v.clone(),
                })
                .collect(),
        };
        view.insert(
            endpoint_key(source, &i.app, &i.id),
            Arc::new(Entity::Endpoint(endpoint)),
        );
    }
    for (vip, counts) in vips {
        let mut ports = Vec::new();
        let http = mode(&counts.http);
        if let Some(n) = http {
            ports.push(pb::Port {
                name: HTTP_PORT_NAME.to_owned(),
                number: n,
                protocol: pb::Protocol::Http as i32,
            });
        }
        // Port numbers must be unique within a service: when the usual secure port
        // equals the usual plain one, the plain one wins.
        if let Some(n) = mode(&counts.https).filter(|n| Some(*n) != http) {
            ports.push(pb::Port {
                name: HTTPS_PORT_NAME.to_owned(),
                number: n,
                protocol: pb::Protocol::Https as i32,
            });
        }
        let service = pb::Service {
            hostname: vip.to_owned(),
            namespace: namespace.to_owned(),
            ports,
            labels: BTreeMap::new(),
            resolution: pb::Resolution::StaticEndpoints as i32,
        };
        view.insert(
            pb::service_key(namespace, vip),
            Arc::new(Entity::Service(service)),
        );
    }
    view
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst(app: &str, id: &str, vips: &[&str], http: Option<u32>, https: Option<u32>) -> Instance {
        Instance {
            app: app.into(),
            id: id.into(),
            address: "10.0.0.1".into(),
            vips: vips.iter().map(|v| v.to_string()).collect(),
            health: pb::Health::Healthy,
            http_port: http,
            https_port: https,
            labels: [("version".to_owned(), "v1".to_owned())].into(),
            locality: None,
        }
    }

    fn service(view: &EntityMap, key: &str) -> pb::Service {
        match view.get(key).map(Arc::as_ref) {
            Some(Entity::Service(s)) => s.clone(),
            other => panic!("{key}: {other:?}"),
        }
    }

    #[test]
    fn one_service_per_vip_with_the_usual_ports_and_one_endpoint_per_instance() {
        let all = [
            inst("ORDERS", "o1", &["orders"], Some(8080), Some(8443)),
            inst("ORDERS", "o2", &["orders"], Some(8080), None),
            inst("ORDERS", "o3", &["orders", "orders-v2"], Some(9090), None),
        ];
        let view = desired(&all, "eureka", "eureka");
        assert_eq!(view.len(), 5, "{view:#?}");
        let orders = service(&view, "svc/eureka/orders");
        let ports: Vec<(String, u32, i32)> = orders
            .ports
            .iter()
            .map(|p| (p.name.clone(), p.number, p.protocol))
            .collect();
        assert_eq!(
            ports,
            [
                ("http".into(), 8080, pb::Protocol::Http as i32),
                ("https".into(), 8443, pb::Protocol::Https as i32)
            ]
        );
        assert_eq!(service(&view, "svc/eureka/orders-v2").ports[0].number, 9090);
        let Some(Entity::Endpoint(o3)) = view.get("ep/eureka/ORDERS/o3").map(Arc::as_ref) else {
            panic!("o3 missing");
        };
        assert_eq!(o3.ports.get("http"), Some(&9090));
        assert_eq!(o3.services.len(), 2);
        assert_eq!(o3.labels.get("version").map(String::as_str), Some("v1"));

        // Order of arrival does not matter.
        let reversed: Vec<Instance> = all.iter().rev().cloned().collect();
        assert_eq!(desired(&reversed, "eureka", "eureka"), view);
    }

    #[test]
    fn equal_plain_and_secure_ports_keep_the_plain_one() {
        let all = [inst("A", "1", &["a"], Some(443), Some(443))];
        let ports = service(&desired(&all, "s", "eureka"), "svc/eureka/a").ports;
        assert_eq!(ports.len(), 1);
        assert_eq!(ports[0].name, "http");
    }
}
