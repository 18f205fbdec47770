//! Istio networking objects as the file adapter reads them, and the mapping of a
//! `ServiceEntry` to entity-level payloads.
//!
//! Typed structs cover only the fields the adapter maps (metadata, and a
//! ServiceEntry's hosts, ports, resolution, location and inline endpoints); every
//! other field is ignored here and still travels, untouched, in the object's
//! canonical `spec_json`. Values that are wrong in themselves (a port out of range)
//! fail inside deserialisation, so serde_yaml attaches the line and column.
//!
//! What it does NOT do: read files or YAML streams (see `parse`), decide what to
//! append (see `view`), or resolve a ServiceEntry's `workloadSelector` against
//! WorkloadEntries (those are carried as config objects only; see the module docs).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use deltapilot_proto as pb;
use serde::{Deserialize, Deserializer};

/// The API group whose kinds this adapter reads. A `Gateway` of another group (the
/// Kubernetes Gateway API) is a different object and is ignored.
pub(crate) const API_GROUP: &str = "networking.istio.io";

/// Versions of [`API_GROUP`] accepted. The fields the adapter maps are identical in
/// all three.
pub(crate) const API_VERSIONS: [&str; 3] = ["v1", "v1beta1", "v1alpha3"];

/// Namespace of an object whose metadata names none, as `kubectl` does.
pub(crate) const DEFAULT_NAMESPACE: &str = "default";

/// The config kind a YAML `kind` names, if it is one this adapter carries.
pub(crate) fn config_kind(kind: &str) -> Option<pb::ConfigKind> {
    Some(match kind {
        "ServiceEntry" => pb::ConfigKind::ServiceEntry,
        "WorkloadEntry" => pb::ConfigKind::WorkloadEntry,
        "VirtualService" => pb::ConfigKind::VirtualService,
        "DestinationRule" => pb::ConfigKind::DestinationRule,
        "Gateway" => pb::ConfigKind::Gateway,
        "Sidecar" => pb::ConfigKind::Sidecar,
        _ => return None,
    })
}

/// Deserialises an absent or explicit `null` field as its default, because YAML
/// writes an empty list as `ports:` (null) as often as `ports: []`.
pub(crate) fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The part of every document the adapter reads before looking at its kind.
#[derive(Debug, Deserialize)]
pub(crate) struct Header {
    /// `group/version`.
    #[serde(rename = "apiVersion", default, deserialize_with = "null_default")]
    pub(crate) api_version: String,
    /// The object kind, e.g. `ServiceEntry`.
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) kind: String,
}

/// A typed document: header, metadata, and a spec of type `S`.
#[derive(Debug, Deserialize)]
#[serde(bound(deserialize = "S: Deserialize<'de> + Default"))]
pub(crate) struct Doc<S> {
    /// Object metadata.
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) metadata: Metadata,
    /// The spec, typed as far as the adapter needs it.
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) spec: S,
}

/// Kubernetes-style object metadata.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Metadata {
    /// Object name; required.
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) name: String,
    /// Object namespace; [`DEFAULT_NAMESPACE`] when empty.
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) namespace: String,
    /// Labels (string values only, as in Kubernetes).
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) labels: BTreeMap<String, String>,
    /// Annotations (string values only).
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) annotations: BTreeMap<String, String>,
}

impl Metadata {
    /// The namespace the object lives in.
    pub(crate) fn namespace(&self) -> &str {
        if self.namespace.is_empty() {
            DEFAULT_NAMESPACE
        } else {
            &self.namespace
        }
    }
}

/// Checks a name or namespace used in entity keys: keys are `/`-separated, so a
/// segment must be non-empty and free of `/` and whitespace. Kubernetes' own rules
/// (lower-case DNS labels) are stricter; the adapter asks only what keys need plus
/// lower case, so that `Foo` and `foo` never become two objects.
pub(crate) fn check_key_segment(what: &str, s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err(format!("{what} is required"));
    }
    if s.len() > 253 {
        return Err(format!("{what} {s:?} is longer than 253 characters"));
    }
    if !s
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'))
    {
        return Err(format!(
            "{what} {s:?} must consist of lower-case letters, digits, '-' and '.'"
        ));
    }
    Ok(())
}

/// A port number, checked to be 1..=65535 while deserialising so that the error
/// carries the YAML location.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PortNumber(pub(crate) u16);

impl<'de> Deserialize<'de> for PortNumber {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u64::deserialize(d)?;
        match u16::try_from(n) {
            Ok(p) if p > 0 => Ok(PortNumber(p)),
            _ => Err(serde::de::Error::custom(format!(
                "port {n} is out of range 1-65535"
            ))),
        }
    }
}

/// `ServiceEntry.spec`, as far as the adapter maps it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ServiceEntrySpec {
    #[serde(default, deserialize_with = "null_default")]
    hosts: Vec<String>,
    #[serde(default, deserialize_with = "null_default")]
    ports: Vec<ServicePort>,
    #[serde(default, deserialize_with = "null_default")]
    location: String,
    #[serde(default, deserialize_with = "null_default")]
    resolution: String,
    #[serde(default, deserialize_with = "null_default")]
    endpoints: Vec<WorkloadSpec>,
}

/// One `ServiceEntry.spec.ports` item.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServicePort {
    number: PortNumber,
    #[serde(default, deserialize_with = "null_default")]
    name: String,
    #[serde(default, deserialize_with = "null_default")]
    protocol: String,
    #[serde(default, alias = "target_port")]
    target_port: Option<PortNumber>,
}

/// An inline endpoint (`ServiceEntry.spec.endpoints[]`, Istio's WorkloadEntry spec).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WorkloadSpec {
    #[serde(default, deserialize_with = "null_default")]
    address: String,
    #[serde(default, deserialize_with = "null_default")]
    ports: BTreeMap<String, PortNumber>,
    #[serde(default, deserialize_with = "null_default")]
    labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "null_default")]
    locality: String,
    #[serde(default, deserialize_with = "null_default")]
    weight: u32,
    #[serde(default, alias = "service_account", deserialize_with = "null_default")]
    service_account: String,
}

/// What one ServiceEntry becomes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MappedServiceEntry {
    /// One service per host.
    pub(crate) services: Vec<pb::Service>,
    /// Inline endpoints, with their stable keys.
    pub(crate) endpoints: Vec<(String, pb::Endpoint)>,
    /// Endpoints skipped as unsupported (not errors in the document).
    pub(crate) skipped: Vec<String>,
}

/// Maps a ServiceEntry. `Err` means the document is malformed (the caller keeps its
/// previous state); `skipped` lists endpoints left out because the engine cannot
/// carry them, while the rest of the entry applies.
pub(crate) fn map_service_entry(
    meta: &Metadata,
    spec: &ServiceEntrySpec,
) -> Result<MappedServiceEntry, String> {
    let namespace = meta.namespace();
    let hosts = hosts(&spec.hosts)?;
    let ports = ports(&spec.ports)?;
    let resolution = resolution(&spec.resolution)?;
    check_location(&spec.location)?;
    let services: Vec<pb::Service> = hosts
        .iter()
        .map(|h| pb::Service {
            hostname: h.clone(),
            namespace: namespace.to_owned(),
            ports: ports.clone(),
            labels: meta.labels.clone(),
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
    let mut keys = BTreeSet::new();
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
        let key = endpoint_key(namespace, &meta.name, ip, shared.then_some(&port_map));
        if !keys.insert(key.clone()) {
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
    Ok(MappedServiceEntry {
        services,
        endpoints,
        skipped,
    })
}

/// Key of an inline endpoint: `ep/file/se/<namespace>/<entry>/<address>`.
///
/// Keys depend only on content that identifies the workload, never on its position
/// in the list, so reordering endpoints changes nothing and a restart reproduces
/// the same keys. When several endpoints of one entry share an address (two
/// workloads on one host, told apart by port), each of them gets the suffix
/// `/<name>=<port>,...` of its sorted port map (`/-` when it has none).
pub(crate) fn endpoint_key(
    namespace: &str,
    entry: &str,
    address: IpAddr,
    ports: Option<&BTreeMap<String, u32>>,
) -> String {
    let mut key = format!("ep/file/se/{namespace}/{entry}/{address}");
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

fn named_protocol(s: &str) -> Option<pb::Protocol> {
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
fn locality(s: &str) -> Result<Option<pb::Locality>, String> {
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

#[cfg(test)]
mod tests;
