//! From Kubernetes objects (as kube's `DynamicObject`) to the few facts the adapter
//! keeps about each: a Service's mapped service entity, an EndpointSlice's ports
//! and endpoints, a Pod's labels, service account and node, a Node's locality, an
//! Istio object's config entity (plus, for a ServiceEntry or WorkloadEntry, its
//! mapping by the shared `common::istio`).
//!
//! Objects arrive untyped and each part the adapter maps is deserialised into its
//! k8s-openapi type here, one object at a time: a malformed object becomes an
//! `Err` with a reason (skipped and counted by the caller, its last good state
//! kept) instead of failing the whole list or watch, as a typed watch would.
//!
//! Mapping rules (also in the module docs):
//! - **Service** → `svc/<ns>/<name>.<ns>.svc.<domain>`; resolution `STATIC`
//!   (EDS), `PASSTHROUGH` for headless (`clusterIP: None`), `DNS` for
//!   `ExternalName`; ports keep their names (an unnamed port is named by its
//!   number, as the engine does); protocol: `UDP` ports are UDP, else
//!   `appProtocol` (Istio's names, plus `kubernetes.io/h2c` → HTTP2 and
//!   `kubernetes.io/ws`/`wss` → HTTP), else Istio's name prefix convention
//!   (`http-…`, `grpc-…`, `grpc-web…` → HTTP), else unspecified (TCP). SCTP
//!   ports and a second port with an already used number (53/TCP + 53/UDP) are
//!   left out as skipped parts; a port outside 1-65535 or a duplicate name makes
//!   the Service malformed.
//! - **EndpointSlice endpoint health**: `ready` (absent = true) → HEALTHY; not
//!   ready but `serving` (absent = ready) and `terminating` → DRAINING; any other
//!   not-ready endpoint → NOT_READY.
//!
//! What it does NOT do: join objects (an endpoint with its Pod, Node and Service:
//! see `store`) or talk to the API server.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use deltapilot_proto as pb;
use k8s_openapi::api::core::v1::ServiceSpec;
use k8s_openapi::api::discovery::v1 as discovery;
use kube::core::DynamicObject;
use serde::Deserialize;
use serde_json::Value;

use super::kinds::ResourceKind;
use crate::common::istio::{
    KeyScheme, ServiceEntryFacts, ServiceEntrySpec, WorkloadFacts, WorkloadSpec, WorkloadStatus,
    map_service_entry, map_workload_entry, named_protocol,
};
use crate::common::json::canonical_json;

/// The label an EndpointSlice names its Service with.
pub(crate) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Node labels giving an endpoint's locality.
const REGION_LABELS: [&str; 2] = [
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/region",
];
const ZONE_LABELS: [&str; 2] = [
    "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/zone",
];
const SUBZONE_LABEL: &str = "topology.istio.io/subzone";
/// An annotation `kubectl apply` writes with a full copy of the object: pure bloat
/// in a config entity, so it is dropped.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Identity of an object within its kind: namespace (empty for cluster-scoped
/// kinds) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ObjId {
    pub(crate) ns: String,
    pub(crate) name: String,
}

impl ObjId {
    /// The id of `obj` as kube decoded its metadata.
    pub(crate) fn of(obj: &DynamicObject) -> Self {
        Self {
            ns: obj.metadata.namespace.clone().unwrap_or_default(),
            name: obj.metadata.name.clone().unwrap_or_default(),
        }
    }
}

/// What the adapter keeps of a Service.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServiceFacts {
    /// The mapped service entity.
    pub(crate) service: pb::Service,
    /// The number of the Service's unnamed port, if it has one: slices name that
    /// port `""`, the service entity names it by its number.
    pub(crate) unnamed_port: Option<u16>,
}

/// One endpoint of an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SliceEndpoint {
    /// Health from the endpoint's conditions.
    pub(crate) health: pb::Health,
    /// `nodeName`, when set.
    pub(crate) node: Option<String>,
    /// `zone`, when set (used when the node's labels give none).
    pub(crate) zone: Option<String>,
}

/// Identity of one endpoint entity: a workload address (namespace, Pod name —
/// empty when the endpoint has no Pod `targetRef` — and IP) as a member of one
/// Service. Ordered so that all entities of a Pod are adjacent.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct EpId {
    pub(crate) ns: String,
    pub(crate) pod: String,
    pub(crate) svc: String,
    pub(crate) addr: IpAddr,
}

/// What the adapter keeps of an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SliceFacts {
    /// The Service it belongs to (`kubernetes.io/service-name`); `None` for a
    /// slice that names none, which contributes nothing.
    pub(crate) service: Option<String>,
    /// Port name (as in the slice, `""` for unnamed) → port number.
    pub(crate) ports: Vec<(String, u16)>,
    /// Endpoints by identity (the first listing of an identity wins); empty when
    /// the slice names no Service.
    pub(crate) endpoints: BTreeMap<EpId, SliceEndpoint>,
}

/// What the adapter keeps of a Pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct PodFacts {
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) service_account: String,
    pub(crate) node: Option<String>,
}

/// What the adapter keeps of a Node: its locality (`None` when unlabelled).
pub(crate) type NodeFacts = Option<pb::Locality>;

/// The facts of one object, by kind.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Facts {
    Service(ServiceFacts),
    Slice(SliceFacts),
    Pod(PodFacts),
    Node(NodeFacts),
    /// An Istio object: its config entity and, for a ServiceEntry or
    /// WorkloadEntry, what the service model takes from it.
    Config(pb::ConfigObject, Option<Mesh>),
}

/// What a ServiceEntry or WorkloadEntry contributes beside its config entity.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Mesh {
    /// Services, inline endpoints and the workload selector.
    ServiceEntry(Arc<ServiceEntryFacts>),
    /// What the ServiceEntry join needs.
    WorkloadEntry(Arc<WorkloadFacts>),
}

/// One received object, parsed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Parsed {
    pub(crate) id: ObjId,
    /// The facts, or why the object is malformed.
    pub(crate) facts: Result<Facts, String>,
    /// Parts of a good object that were left out, with reasons.
    pub(crate) skipped: Vec<String>,
}

/// Parses one object of `kind`. `cluster_domain` completes Service hostnames;
/// `cluster_id` scopes the keys of ServiceEntry endpoints.
pub(crate) fn parse(
    kind: ResourceKind,
    obj: &DynamicObject,
    cluster_domain: &str,
    cluster_id: &str,
) -> Parsed {
    let id = ObjId::of(obj);
    let mut skipped = Vec::new();
    let facts = check_id(kind, &id).and_then(|()| match kind {
        ResourceKind::Service => {
            service(obj, &id, cluster_domain, &mut skipped).map(Facts::Service)
        }
        ResourceKind::EndpointSlice => slice(obj, &id, &mut skipped).map(Facts::Slice),
        ResourceKind::Pod => pod(obj).map(Facts::Pod),
        ResourceKind::Node => Ok(Facts::Node(node(obj))),
        ResourceKind::Istio(k) => config(k, obj, &id, cluster_id, &mut skipped),
    });
    Parsed { id, facts, skipped }
}

fn check_id(kind: ResourceKind, id: &ObjId) -> Result<(), String> {
    if id.name.is_empty() {
        return Err("metadata.name is missing".into());
    }
    if kind.namespaced() && id.ns.is_empty() {
        return Err("metadata.namespace is missing".into());
    }
    if id.name.contains('/') || id.ns.contains('/') {
        return Err("a name or namespace contains '/'".into());
    }
    Ok(())
}

/// Deserialises an optional part of an object; JSON `null` counts as absent.
fn part<T: for<'de> Deserialize<'de>>(
    obj: &DynamicObject,
    field: &str,
) -> Result<Option<T>, String> {
    match obj.data.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => T::deserialize(v)
            .map(Some)
            .map_err(|e| format!("{field}: {e}")),
    }
}

fn service(
    obj: &DynamicObject,
    id: &ObjId,
    domain: &str,
    skipped: &mut Vec<String>,
) -> Result<ServiceFacts, String> {
    let spec: ServiceSpec = part(obj, "spec")?.unwrap_or_default();
    let resolution = match (spec.type_.as_deref(), spec.cluster_ip.as_deref()) {
        (Some("ExternalName"), _) => pb::Resolution::Dns,
        (_, Some("None")) => pb::Resolution::Passthrough,
        _ => pb::Resolution::StaticEndpoints,
    };
    let mut ports: Vec<pb::Port> = Vec::new();
    let mut unnamed_port = None;
    for (i, p) in spec.ports.iter().flatten().enumerate() {
        let number = match u16::try_from(p.port) {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(format!(
                    "spec.ports[{i}].port {} is out of range 1-65535",
                    p.port
                ));
            }
        };
        let raw_name = p.name.clone().unwrap_or_default();
        let k8s_protocol = p.protocol.as_deref().unwrap_or("TCP");
        let protocol = match k8s_protocol {
            "UDP" => pb::Protocol::Udp,
            "TCP" => protocol(p.app_protocol.as_deref(), &raw_name),
            "SCTP" => {
                skipped.push(format!(
                    "spec.ports[{i}]: SCTP port {number} left out (not proxied)"
                ));
                continue;
            }
            other => {
                return Err(format!(
                    "spec.ports[{i}].protocol {other:?} is not TCP, UDP or SCTP"
                ));
            }
        };
        if ports.iter().any(|q| q.number == u32::from(number)) {
            skipped.push(format!(
                "spec.ports[{i}]: port {number}/{k8s_protocol} left out: the service model \
                 has one port per number and an earlier port uses it"
            ));
            continue;
        }
        let name = if raw_name.is_empty() {
            unnamed_port = Some(number);
            number.to_string()
        } else {
            raw_name
        };
        if ports.iter().any(|q| q.name == name) {
            return Err(format!("spec.ports[{i}]: port name {name:?} appears twice"));
        }
        ports.push(pb::Port {
            name,
            number: u32::from(number),
            protocol: protocol as i32,
        });
    }
    Ok(ServiceFacts {
        service: pb::Service {
            hostname: format!("{}.{}.svc.{domain}", id.name, id.ns),
            namespace: id.ns.clone(),
            ports,
            labels: obj.metadata.labels.clone().unwrap_or_default(),
            resolution: resolution as i32,
        },
        unnamed_port,
    })
}

/// A TCP port's application protocol: `appProtocol` first, then Istio's port name
/// convention, else unspecified (the engine treats it as TCP).
pub(crate) fn protocol(app_protocol: Option<&str>, port_name: &str) -> pb::Protocol {
    if let Some(app) = app_protocol {
        let known = match app {
            "kubernetes.io/h2c" => Some(pb::Protocol::Http2),
            "kubernetes.io/ws" | "kubernetes.io/wss" => Some(pb::Protocol::Http),
            other => named_protocol(other),
        };
        if let Some(p) = known {
            return p;
        }
    }
    let lower = port_name.to_ascii_lowercase();
    if lower == "grpc-web" || lower.starts_with("grpc-web-") {
        return pb::Protocol::Http;
    }
    named_protocol(lower.split('-').next().unwrap_or_default()).unwrap_or(pb::Protocol::Unspecified)
}

/// Health of a slice endpoint from its conditions (see the module docs).
pub(crate) fn health(c: Option<&discovery::EndpointConditions>) -> pb::Health {
    let ready = c.and_then(|c| c.ready).unwrap_or(true);
    let serving = c.and_then(|c| c.serving).unwrap_or(ready);
    let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
    if ready {
        pb::Health::Healthy
    } else if serving && terminating {
        pb::Health::Draining
    } else {
        pb::Health::NotReady
    }
}

fn slice(obj: &DynamicObject, id: &ObjId, skipped: &mut Vec<String>) -> Result<SliceFacts, String> {
    let service = obj
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SERVICE_NAME_LABEL))
        .filter(|s| !s.is_empty())
        .cloned();
    let address_type: String = part(obj, "addressType")?.unwrap_or_default();
    let port_list: Vec<discovery::EndpointPort> = part(obj, "ports")?.unwrap_or_default();
    let endpoint_list: Vec<discovery::Endpoint> = part(obj, "endpoints")?.unwrap_or_default();
    let mut ports = Vec::with_capacity(port_list.len());
    for (i, p) in port_list.iter().enumerate() {
        // A port with no number means "all ports" (no Service port maps to it).
        let Some(n) = p.port else { continue };
        let number = match u16::try_from(n) {
            Ok(v) if v > 0 => v,
            _ => return Err(format!("ports[{i}].port {n} is out of range 1-65535")),
        };
        if p.protocol.as_deref().is_some_and(|proto| proto == "SCTP") {
            continue;
        }
        ports.push((p.name.clone().unwrap_or_default(), number));
    }
    let mut endpoints = BTreeMap::new();
    let Some(svc) = service.clone() else {
        // Not bound to a Service: nothing to attribute its endpoints to.
        return Ok(SliceFacts {
            service,
            ports,
            endpoints,
        });
    };
    match address_type.as_str() {
        "IPv4" | "IPv6" => {}
        "FQDN" => {
            if !endpoint_list.is_empty() {
                skipped.push(
                    "addressType FQDN: its endpoints are left out (only IP endpoints are \
                     supported)"
                        .into(),
                );
            }
            return Ok(SliceFacts {
                service,
                ports,
                endpoints,
            });
        }
        other => return Err(format!("addressType {other:?} is not IPv4, IPv6 or FQDN")),
    }
    for (i, e) in endpoint_list.iter().enumerate() {
        // Consumers use the first address (all are of the slice's family).
        let Some(first) = e.addresses.first() else {
            skipped.push(format!("endpoints[{i}]: no address; left out"));
            continue;
        };
        let Ok(addr) = first.parse::<IpAddr>() else {
            skipped.push(format!(
                "endpoints[{i}]: address {first:?} is not an IP address; left out"
            ));
            continue;
        };
        let pod = e
            .target_ref
            .as_ref()
            .filter(|r| r.kind.as_deref() == Some("Pod"))
            .and_then(|r| r.name.clone())
            .unwrap_or_default();
        let key = EpId {
            ns: id.ns.clone(),
            pod,
            svc: svc.clone(),
            addr,
        };
        endpoints.entry(key).or_insert_with(|| SliceEndpoint {
            health: health(e.conditions.as_ref()),
            node: e.node_name.clone().filter(|n| !n.is_empty()),
            zone: e.zone.clone().filter(|z| !z.is_empty()),
        });
    }
    Ok(SliceFacts {
        service,
        ports,
        endpoints,
    })
}

/// The two fields of a Pod spec the adapter reads. A slim struct rather than
/// k8s-openapi's `PodSpec`, so that a malformed field the adapter never uses
/// (a container's probe, say) cannot make the Pod unusable.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpecPart {
    #[serde(default)]
    service_account_name: Option<String>,
    /// Deprecated alias of `serviceAccountName`, still filled by old clients.
    #[serde(default)]
    service_account: Option<String>,
    #[serde(default)]
    node_name: Option<String>,
}

fn pod(obj: &DynamicObject) -> Result<PodFacts, String> {
    let spec: PodSpecPart = part(obj, "spec")?.unwrap_or_default();
    Ok(PodFacts {
        labels: obj.metadata.labels.clone().unwrap_or_default(),
        service_account: spec
            .service_account_name
            .filter(|s| !s.is_empty())
            .or(spec.service_account)
            .unwrap_or_default(),
        node: spec.node_name.filter(|n| !n.is_empty()),
    })
}

fn node(obj: &DynamicObject) -> NodeFacts {
    let labels = obj.metadata.labels.as_ref()?;
    let first = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| labels.get(*k).filter(|v| !v.is_empty()))
            .cloned()
            .unwrap_or_default()
    };
    let locality = pb::Locality {
        region: first(&REGION_LABELS),
        zone: first(&ZONE_LABELS),
        subzone: first(&[SUBZONE_LABEL]),
    };
    (locality != pb::Locality::default()).then_some(locality)
}

/// An Istio object: its config entity (a ServiceEntry's without `endpoints`,
/// which travel as endpoint entities, as the file adapter does) and, for the
/// kinds the service model maps, their mapping (`common::istio`).
fn config(
    kind: pb::ConfigKind,
    obj: &DynamicObject,
    id: &ObjId,
    cluster_id: &str,
    skipped: &mut Vec<String>,
) -> Result<Facts, String> {
    let spec_json = match obj.data.get("spec") {
        None | Some(Value::Null) => "{}".to_owned(),
        Some(Value::Object(m)) if kind == pb::ConfigKind::ServiceEntry => {
            let mut m = m.clone();
            m.remove("endpoints");
            canonical_json(&Value::Object(m))
        }
        Some(v @ Value::Object(_)) => canonical_json(v),
        Some(_) => return Err("spec is not an object".into()),
    };
    let labels = obj.metadata.labels.clone().unwrap_or_default();
    let mut annotations = obj.metadata.annotations.clone().unwrap_or_default();
    annotations.remove(LAST_APPLIED);
    let mesh = match kind {
        pb::ConfigKind::ServiceEntry => {
            let spec: ServiceEntrySpec = part(obj, "spec")?.unwrap_or_default();
            let keys = KeyScheme::kubernetes(cluster_id);
            let mut facts = map_service_entry(&id.ns, &id.name, &labels, &spec, &keys)?;
            skipped.append(&mut facts.skipped);
            Some(Mesh::ServiceEntry(Arc::new(facts)))
        }
        pb::ConfigKind::WorkloadEntry => {
            let spec: WorkloadSpec = part(obj, "spec")?.unwrap_or_default();
            let status: WorkloadStatus = part(obj, "status")?.unwrap_or_default();
            let facts = map_workload_entry(&labels, &annotations, &spec, &status)?;
            Some(Mesh::WorkloadEntry(Arc::new(facts)))
        }
        _ => None,
    };
    let config = pb::ConfigObject {
        kind: kind as i32,
        namespace: id.ns.clone(),
        name: id.name.clone(),
        labels,
        annotations,
        spec_json,
    };
    Ok(Facts::Config(config, mesh))
}

#[cfg(test)]
mod tests;
