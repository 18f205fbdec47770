//! A ServiceEntry to services and inline endpoints, and the selector it joins
//! WorkloadEntries with.
//!
//! What it does NOT do: read YAML or API objects (the adapters hand over the typed
//! spec), or join WorkloadEntries (see `workload`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use deltapilot_proto as pb;

use super::spec::{ServiceEntrySpec, ServicePort};

/// Where a source's ServiceEntry-derived endpoint keys live. Both prefixes are
/// source-scoped and distinct, so inline and joined endpoints never collide with
/// each other or with the adapter's other endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyScheme {
    inline: String,
    workload: String,
}

impl KeyScheme {
    /// The file adapter's keys: `ep/file/se/...` and `ep/file/we/...`.
    pub(crate) fn file() -> Self {
        Self {
            inline: "ep/file/se".into(),
            workload: "ep/file/we".into(),
        }
    }

    /// The Kubernetes adapter's keys: `ep/k8s/<cluster>/_se/...` and
    /// `ep/k8s/<cluster>/_we/...`. The `_` cannot start a namespace name, so these
    /// never collide with EndpointSlice endpoints (`ep/k8s/<cluster>/<ns>/...`).
    pub(crate) fn kubernetes(cluster: &str) -> Self {
        Self {
            inline: format!("ep/k8s/{cluster}/_se"),
            workload: format!("ep/k8s/{cluster}/_we"),
        }
    }

    /// Key of an inline endpoint: `<inline>/<namespace>/<entry>/<address>`.
    ///
    /// Keys depend only on content that identifies the workload, never on its
    /// position in the list, so reordering endpoints changes nothing and a restart
    /// reproduces the same keys. When several endpoints of one entry share an
    /// address (two workloads on one host, told apart by port), each of them gets
    /// the suffix `/<name>=<port>,...` of its sorted port map (`/-` when it has
    /// none).
    pub(crate) fn inline_key(
        &self,
        namespace: &str,
        entry: &str,
        address: IpAddr,
        ports: Option<&BTreeMap<String, u32>>,
    ) -> String {
        let mut key = format!("{}/{namespace}/{entry}/{address}", self.inline);
        if let Some(ports) = ports {
            key.push('/');
            if ports.is_empty() {
                key.push('-');
            }
            for (i, (name, port)) in ports.iter().enumerate() {
                if i > 0 {
                    key.push(',');
                }
                key.push_str(&format!("{name}={port}"));
            }
        }
        key
    }

    /// Key of a WorkloadEntry selected by a ServiceEntry (both in `namespace`):
    /// `<workload>/<namespace>/<entry>/<workload entry>`. One entity per pair, so
    /// a label or selector change adds or removes exactly that pair's entity.
    pub(crate) fn workload_key(&self, namespace: &str, entry: &str, workload: &str) -> String {
        format!("{}/{namespace}/{entry}/{workload}", self.workload)
    }
}

/// What a ServiceEntry's `workloadSelector` needs to turn a selected WorkloadEntry
/// into an endpoint.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Selector {
    /// Labels a WorkloadEntry must all carry (none: every WorkloadEntry of the
    /// namespace, as Istio matches an empty selector).
    pub(crate) labels: BTreeMap<String, String>,
    /// The entry's ports: (name as the service names it, number, targetPort).
    pub(crate) ports: Vec<(String, u16, Option<u16>)>,
    /// Every host of the entry.
    pub(crate) services: Vec<pb::ServiceRef>,
}

/// What one ServiceEntry becomes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServiceEntryFacts {
    /// One service per host.
    pub(crate) services: Vec<pb::Service>,
    /// Inline endpoints, with their stable keys.
    pub(crate) endpoints: Vec<(String, pb::Endpoint)>,
    /// Inline endpoints left out as unsupported (not errors in the object).
    pub(crate) skipped: Vec<String>,
    /// The workload selector, when the entry has one.
    pub(crate) selector: Option<Selector>,
}

/// Maps a ServiceEntry. `Err` means the object is malformed (the caller keeps its
/// previous state); `skipped` lists endpoints left out because the engine cannot
/// carry them, while the rest of the entry applies.
pub(crate) fn map_service_entry(
    namespace: &str,
    name: &str,
    labels: &BTreeMap<String, String>,
    spec: &ServiceEntrySpec,
    keys: &KeyScheme,
) -> Result<ServiceEntryFacts, String> {
    let hosts = hosts(&spec.hosts)?;
    let ports = ports(&spec.ports)?;
    let resolution = resolution(&spec.resolution)?;
    check_location(&spec.location)?;
    if spec.workload_selector.is_some() && !spec.endpoints.is_empty() {
        return Err(
            "spec.workloadSelector and spec.endpoints are both set; Istio rejects an entry \
             with both (select WorkloadEntries or list endpoints, not both)"
                .into(),
        );
    }
    let services: Vec<pb::Service> = hosts
        .iter()
        .map(|h| pb::Service {
            hostname: h.clone(),
            namespace: namespace.to_owned(),
            ports: ports.clone(),
            labels: labels.clone(),
            resolution: resolution as i32,
        })
        .collect();
    let refs: Vec<pb::ServiceRef> = hosts
        .iter()
        .map(|h| pb::ServiceRef {
            namespace: namespace.to_owned(),
            hostname: h.clone(),
        })
        .collect();
    let selector = spec.workload_selector.as_ref().map(|s| Selector {
        labels: s.labels.clone(),
        ports: spec
            .ports
            .iter()
            .zip(&ports)
            .map(|(sp, p)| (p.name.clone(), sp.number.0, sp.target_port.map(|t| t.0)))
            .collect(),
        services: refs.clone(),
    });

    let mut skipped = Vec::new();
    let mut parsed = Vec::with_capacity(spec.endpoints.len());
    for (i, w) in spec.endpoints.iter().enumerate() {
        match w.address.parse::<IpAddr>() {
            Ok(ip) => parsed.push((i, ip, w)),
            Err(_) => skipped.push(format!(
                "spec.endpoints[{i}]: address {:?} is not an IP address; only IP endpoints are \
                 supported, so this endpoint is left out",
                w.address
            )),
        }
    }
    let mut per_address: BTreeMap<IpAddr, usize> = BTreeMap::new();
    for (_, ip, _) in &parsed {
        *per_address.entry(*ip).or_default() += 1;
    }
    let mut seen = BTreeSet::new();
    let mut endpoints = Vec::with_capacity(parsed.len());
    for (i, ip, w) in parsed {
        let mut port_map: BTreeMap<String, u32> = w
            .ports
            .iter()
            .map(|(k, v)| (k.clone(), u32::from(v.0)))
            .collect();
        for (sp, p) in spec.ports.iter().zip(&ports) {
            if let Some(t) = sp.target_port {
                port_map.entry(p.name.clone()).or_insert(u32::from(t.0));
            }
        }
        let shared = per_address.get(&ip).copied().unwrap_or(0) > 1;
        let key = keys.inline_key(namespace, name, ip, shared.then_some(&port_map));
        if !seen.insert(key.clone()) {
            return Err(format!(
                "spec.endpoints[{i}]: another endpoint has the same address {ip} and ports; \
                 endpoints of one entry must differ in address or ports"
            ));
        }
        let locality =
            locality(&w.locality).map_err(|e| format!("spec.endpoints[{i}].locality: {e}"))?;
        endpoints.push((
            key,
            pb::Endpoint {
                address: ip.to_string(),
                ports: port_map,
                labels: w.labels.clone(),
                locality,
                weight: w.weight,
                health: pb::Health::Unspecified as i32,
                service_account: w.service_account.clone(),
                services: refs.clone(),
            },
        ));
    }
    Ok(ServiceEntryFacts {
        services,
        endpoints,
        skipped,
        selector,
    })
}

fn hosts(hosts: &[String]) -> Result<Vec<String>, String> {
    if hosts.is_empty() {
        return Err("spec.hosts: at least one host is required".into());
    }
    let mut out = Vec::with_capacity(hosts.len());
    for (i, h) in hosts.iter().enumerate() {
        let ok = !h.is_empty()
            && h.len() <= 253
            && h.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '*' | '_'));
        if !ok {
            return Err(format!(
                "spec.hosts[{i}]: {h:?} is not a hostname (1-253 characters of [A-Za-z0-9-._*])"
            ));
        }
        let h = h.to_ascii_lowercase();
        if !out.contains(&h) {
            out.push(h);
        }
    }
    Ok(out)
}

fn ports(ports: &[ServicePort]) -> Result<Vec<pb::Port>, String> {
    let mut out = Vec::with_capacity(ports.len());
    let mut names = BTreeSet::new();
    let mut numbers = BTreeSet::new();
    for (i, p) in ports.iter().enumerate() {
        let number = p.number.0;
        if !numbers.insert(number) {
            return Err(format!(
                "spec.ports[{i}]: port number {number} appears twice"
            ));
        }
        // The engine names an unnamed port by its number; doing the same here lets
        // `targetPort` fill the endpoint's port map under the name the engine uses.
        let name = if p.name.is_empty() {
            number.to_string()
        } else {
            p.name.clone()
        };
        if !names.insert(name.clone()) {
            return Err(format!("spec.ports[{i}]: port name {name:?} appears twice"));
        }
        let protocol = protocol(&p.protocol, &p.name)
            .ok_or_else(|| format!("spec.ports[{i}]: unknown protocol {:?}", p.protocol))?;
        out.push(pb::Port {
            name,
            number: u32::from(number),
            protocol: protocol as i32,
        });
    }
    Ok(out)
}

/// Istio's protocol names (case-insensitive). With no protocol, Istio's port naming
/// convention `<protocol>[-<suffix>]` decides, else it is left unspecified (TCP).
/// `None` means a protocol was given and is not one Istio knows.
fn protocol(protocol: &str, port_name: &str) -> Option<pb::Protocol> {
    if protocol.is_empty() {
        let prefix = port_name.split('-').next().unwrap_or_default();
        return Some(named_protocol(prefix).unwrap_or(pb::Protocol::Unspecified));
    }
    named_protocol(protocol)
}

/// Istio's protocol names, case-insensitive; `None` for a name Istio does not know.
pub(crate) fn named_protocol(s: &str) -> Option<pb::Protocol> {
    Some(match s.to_ascii_uppercase().as_str() {
        "HTTP" | "GRPC-WEB" | "HTTP_PROXY" => pb::Protocol::Http,
        "HTTP2" => pb::Protocol::Http2,
        "GRPC" => pb::Protocol::Grpc,
        "HTTPS" => pb::Protocol::Https,
        "TLS" => pb::Protocol::Tls,
        "TCP" => pb::Protocol::Tcp,
        "MONGO" => pb::Protocol::Mongo,
        "REDIS" => pb::Protocol::Redis,
        "MYSQL" => pb::Protocol::Mysql,
        "UDP" => pb::Protocol::Udp,
        _ => return None,
    })
}

/// Istio's default resolution is `NONE`, which is passthrough.
fn resolution(s: &str) -> Result<pb::Resolution, String> {
    Ok(match s {
        "STATIC" => pb::Resolution::StaticEndpoints,
        "DNS" | "DNS_ROUND_ROBIN" => pb::Resolution::Dns,
        "NONE" | "" => pb::Resolution::Passthrough,
        other => {
            return Err(format!(
                "spec.resolution: {other:?} is not one of STATIC, DNS, DNS_ROUND_ROBIN, NONE"
            ));
        }
    })
}

/// `location` does not change the service model (the engine reads it from the
/// carried spec if it needs it), but a typo is still a malformed object.
fn check_location(s: &str) -> Result<(), String> {
    match s {
        "" | "MESH_EXTERNAL" | "MESH_INTERNAL" => Ok(()),
        other => Err(format!(
            "spec.location: {other:?} is not one of MESH_EXTERNAL, MESH_INTERNAL"
        )),
    }
}

/// `region/zone/subzone`, each part optional from the right.
pub(crate) fn locality(s: &str) -> Result<Option<pb::Locality>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    let parts: Vec<&str> = s.split('/').collect();
    if parts.len() > 3 {
        return Err(format!(
            "{s:?} has more than three parts (region/zone/subzone)"
        ));
    }
    let part = |i: usize| parts.get(i).map(|p| p.to_string()).unwrap_or_default();
    Ok(Some(pb::Locality {
        region: part(0),
        zone: part(1),
        subzone: part(2),
    }))
}
