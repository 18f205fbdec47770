//! `/debug/registry`: the ServiceDiscovery query API (Istio's `ServiceDiscovery`
//! operations over the folded model) as JSON, against the current snapshot.
//!
//! | query | answers (Istio's name) |
//! | --- | --- |
//! | none | every merged service (`Services`) with its winning source and endpoint count, every config object, counts |
//! | `host=H` | the service (`GetService`), every definition of it, its endpoints |
//! | `host=H&port=P[&labels=k=v,k2=v2]` | instances of that port whose labels match (`InstancesByPort`) |
//! | `ip=A` | endpoints at the address, the instances a sidecar there runs (`GetProxyServiceInstances`) and its management ports (`ManagementPorts`) |
//!
//! What it does NOT do: change the registry.

use std::net::IpAddr;
use std::sync::Arc;

use deltapilot_model::state::ModelState;
use deltapilot_model::{Endpoint, LabelSelector, Port, Proxy, ProxyType, Service, ServiceInstance};
use serde_json::{Value, json};

/// The query parameters.
#[derive(Debug, Default, serde::Deserialize)]
pub struct RegistryQuery {
    /// A hostname.
    pub host: Option<String>,
    /// A service port number (with `host`).
    pub port: Option<u16>,
    /// A label selector `k=v,k2=v2` (with `host` and `port`).
    pub labels: Option<String>,
    /// An IP address.
    pub ip: Option<String>,
}

fn port(p: &Port) -> Value {
    json!({ "name": &*p.name, "number": p.number, "protocol": format!("{:?}", p.protocol).to_uppercase() })
}

fn labels<'a>(l: impl IntoIterator<Item = (&'a Arc<str>, &'a Arc<str>)>) -> Value {
    Value::Object(
        l.into_iter()
            .map(|(k, v)| (k.to_string(), Value::from(&**v)))
            .collect(),
    )
}

fn service(s: &Service) -> Value {
    json!({
        "hostname": s.hostname.as_str(),
        "namespace": &*s.namespace,
        "resolution": format!("{:?}", s.resolution),
        "ports": s.ports.iter().map(port).collect::<Vec<_>>(),
        "labels": labels(&s.labels),
    })
}

fn endpoint(e: &Endpoint) -> Value {
    json!({
        "key": &*e.key,
        "address": e.address.to_string(),
        "ports": e.ports.iter().map(|(k, v)| (k.to_string(), Value::from(*v))).collect::<serde_json::Map<_, _>>(),
        "labels": labels(&e.labels),
        "locality": { "region": &*e.locality.region, "zone": &*e.locality.zone, "subzone": &*e.locality.subzone },
        "weight": e.weight,
        "health": format!("{:?}", e.health),
        "service_account": &*e.service_account,
        "services": e.services.iter().map(|(ns, h)| json!({"namespace": &**ns, "hostname": h.as_str()})).collect::<Vec<_>>(),
    })
}

fn instance(i: &ServiceInstance) -> Value {
    json!({
        "hostname": i.service.hostname.as_str(),
        "service_port": port(&i.service_port),
        "target_port": i.target_port,
        "endpoint": endpoint(&i.endpoint),
    })
}

/// Answers a query; `Err` is a 400 or 404 message (the bool says 404).
pub fn query(model: &ModelState, q: &RegistryQuery) -> Result<Value, (bool, String)> {
    if let Some(ip) = &q.ip {
        let addr: IpAddr = ip
            .parse()
            .map_err(|_| (false, format!("ip={ip:?} is not an IP address")))?;
        let proxy = Proxy {
            id: Arc::from("debug"),
            proxy_type: ProxyType::Sidecar,
            ips: vec![addr],
            ..Default::default()
        };
        let mut at: Vec<_> = model.endpoints_at(addr).collect();
        at.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        return Ok(json!({
            "ip": ip,
            "endpoints": at.iter().map(endpoint).collect::<Vec<_>>(),
            "proxy_service_instances": model.proxy_service_instances(&proxy).iter().map(instance).collect::<Vec<_>>(),
            "management_ports": model.management_ports(addr).iter().map(port).collect::<Vec<_>>(),
        }));
    }
    if let Some(host) = &q.host {
        let Some(svc) = model.get_service(host.as_str()) else {
            return Err((
                true,
                format!("no service with hostname {host:?} (GET /debug/registry lists them)"),
            ));
        };
        if let Some(p) = q.port {
            let mut sel = LabelSelector::default();
            for pair in q
                .labels
                .as_deref()
                .unwrap_or("")
                .split(',')
                .filter(|s| !s.is_empty())
            {
                let (k, v) = pair
                    .split_once('=')
                    .ok_or_else(|| (false, format!("labels: {pair:?} is not k=v")))?;
                sel.0.insert(Arc::from(k), Arc::from(v));
            }
            if svc.port(p).is_none() {
                return Err((true, format!("service {host} has no port {p}")));
            }
            return Ok(json!({
                "hostname": host,
                "port": p,
                "instances": model.instances_by_port(host, p, &[sel]).iter().map(instance).collect::<Vec<_>>(),
            }));
        }
        return Ok(json!({
            "service": service(&svc),
            "definitions": model.service_definitions(host.as_str()).iter().map(|(src, s)| json!({"source": &**src, "service": service(s)})).collect::<Vec<_>>(),
            "endpoints": model.endpoints_of_sorted(host.as_str()).iter().map(endpoint).collect::<Vec<_>>(),
        }));
    }
    let c = model.counts();
    Ok(json!({
        "counts": {
            "services": c.services,
            "service_definitions": c.service_definitions,
            "endpoints": c.endpoints,
            "hostnames_with_endpoints": c.hostnames_with_endpoints,
            "configs": c.configs,
            "sources": c.sources,
        },
        "services": model.services().map(|s| {
            let defs = model.service_definitions(s.hostname.as_str());
            let mut v = service(s);
            if let Value::Object(o) = &mut v {
                o.insert("source".into(), Value::from(defs.first().map(|(src, _)| src.to_string()).unwrap_or_default()));
                o.insert("definitions".into(), Value::from(defs.len()));
                o.insert("endpoints".into(), Value::from(model.endpoint_count(s.hostname.as_str())));
            }
            v
        }).collect::<Vec<_>>(),
        "configs": model.configs().map(|c| json!({
            "key": &*c.key, "namespace": &*c.namespace, "name": &*c.name,
            "kind": deltapilot_proto::kind_slug(c.kind),
        })).collect::<Vec<_>>(),
    }))
}
