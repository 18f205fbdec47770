//! WorkloadEntries, and their join with the ServiceEntries that select them.
//!
//! As Istio's ServiceEntry controller does:
//! - a WorkloadEntry's labels are its `spec.labels` overlaid with its
//!   `metadata.labels` (metadata wins); a ServiceEntry with a `workloadSelector`
//!   selects the WorkloadEntries *of its own namespace* whose labels contain every
//!   selector label (an empty selector selects them all);
//! - each selected WorkloadEntry is an endpoint of every host of the entry; its
//!   port for each entry port is the WorkloadEntry's port of that name, else the
//!   port's `targetPort`, else the port's number;
//! - locality from `spec.locality`, else the `istio-locality` label (`.` for `/`);
//!   weight and service account as given; a `network` becomes the
//!   `topology.istio.io/network` label (the event schema has no network field);
//! - health: HEALTHY, unless the `proxy.istio.io/health-checks-enabled`
//!   annotation is true, in which case the `Healthy` status condition decides
//!   (`"True"` → HEALTHY, anything else or absent → UNHEALTHY: Istio treats a
//!   checked workload as unhealthy until a probe succeeded).
//!
//! Addresses that are not IPs (hostnames for DNS entries, Unix sockets) are left
//! out with a reported problem: the engine carries IP endpoints only.
//!
//! What it does NOT do: keep any state (each adapter keeps its objects and calls
//! [`joined_endpoints`] for the namespaces that changed).

use std::collections::BTreeMap;
use std::net::IpAddr;

use deltapilot_proto as pb;

use super::service_entry::{KeyScheme, Selector, locality};
use super::spec::{WorkloadSpec, WorkloadStatus};

/// Annotation that turns on WorkloadEntry health checking (Istio's
/// `status.WorkloadEntryHealthCheckAnnotation`).
pub(crate) const HEALTH_CHECKS_ANNOTATION: &str = "proxy.istio.io/health-checks-enabled";
/// Label Istio adds to an endpoint for its network.
pub(crate) const NETWORK_LABEL: &str = "topology.istio.io/network";
/// Label Istio reads a locality from when `spec.locality` is empty.
const LOCALITY_LABEL: &str = "istio-locality";

/// What the join needs of one WorkloadEntry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WorkloadFacts {
    /// `spec.address` as written.
    pub(crate) address: String,
    /// `spec.ports`: entry port name → workload port.
    pub(crate) ports: BTreeMap<String, u16>,
    /// Spec labels overlaid with metadata labels (what selectors match), plus
    /// the network label.
    pub(crate) labels: BTreeMap<String, String>,
    /// Parsed locality.
    pub(crate) locality: Option<pb::Locality>,
    /// `spec.weight` (0: unset).
    pub(crate) weight: u32,
    /// `spec.serviceAccount`.
    pub(crate) service_account: String,
    /// From the health-check annotation and status.
    pub(crate) health: pb::Health,
}

/// Maps a WorkloadEntry. `Err` means the object is malformed (the caller keeps its
/// previous state).
pub(crate) fn map_workload_entry(
    metadata_labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    spec: &WorkloadSpec,
    status: &WorkloadStatus,
) -> Result<WorkloadFacts, String> {
    let mut labels = spec.labels.clone();
    labels.extend(metadata_labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    let selector_labels = labels.clone();
    if !spec.network.is_empty() {
        labels
            .entry(NETWORK_LABEL.to_owned())
            .or_insert_with(|| spec.network.clone());
    }
    let written = if spec.locality.is_empty() {
        selector_labels
            .get(LOCALITY_LABEL)
            .map(|l| l.replace('.', "/"))
            .unwrap_or_default()
    } else {
        spec.locality.clone()
    };
    let locality = locality(&written).map_err(|e| format!("spec.locality: {e}"))?;
    Ok(WorkloadFacts {
        address: spec.address.clone(),
        ports: spec.ports.iter().map(|(k, v)| (k.clone(), v.0)).collect(),
        labels,
        locality,
        weight: spec.weight,
        service_account: spec.service_account.clone(),
        health: health(annotations, status),
    })
}

/// A WorkloadEntry's health (see the module docs).
pub(crate) fn health(
    annotations: &BTreeMap<String, String>,
    status: &WorkloadStatus,
) -> pb::Health {
    let checked = annotations
        .get(HEALTH_CHECKS_ANNOTATION)
        .is_some_and(|v| parse_bool(v));
    if !checked {
        return pb::Health::Healthy;
    }
    let healthy = status
        .conditions
        .iter()
        .find(|c| c.kind == "Healthy")
        .is_some_and(|c| parse_bool(&c.status));
    if healthy {
        pb::Health::Healthy
    } else {
        pb::Health::Unhealthy
    }
}

/// Go's `strconv.ParseBool` true values, as Istio reads the annotation.
fn parse_bool(s: &str) -> bool {
    matches!(s, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

/// Whether a workload with `labels` is selected by `selector`.
pub(crate) fn selects(
    selector: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// A selected WorkloadEntry that could not become an endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JoinProblem {
    /// The selecting ServiceEntry.
    pub(crate) entry: String,
    /// The WorkloadEntry.
    pub(crate) workload: String,
    /// Why.
    pub(crate) reason: String,
}

/// The endpoints of one namespace's ServiceEntry–WorkloadEntry join: one per
/// (selecting entry, selected workload), keyed by `keys`, in key order, plus the
/// selected workloads left out.
pub(crate) fn joined_endpoints<'a>(
    namespace: &str,
    entries: impl IntoIterator<Item = (&'a str, &'a Selector)>,
    workloads: &[(&'a str, &'a WorkloadFacts)],
    keys: &KeyScheme,
) -> (Vec<(String, pb::Endpoint)>, Vec<JoinProblem>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for (entry, selector) in entries {
        for (name, w) in workloads {
            if !selects(&selector.labels, &w.labels) {
                continue;
            }
            let Ok(ip) = w.address.parse::<IpAddr>() else {
                problems.push(JoinProblem {
                    entry: entry.to_owned(),
                    workload: (*name).to_owned(),
                    reason: format!(
                        "address {:?} is not an IP address; only IP endpoints are supported, \
                         so this workload is left out",
                        w.address
                    ),
                });
                continue;
            };
            let ports = selector
                .ports
                .iter()
                .map(|(port, number, target)| {
                    let n = w.ports.get(port).copied().or(*target).unwrap_or(*number);
                    (port.clone(), u32::from(n))
                })
                .collect();
            out.push((
                keys.workload_key(namespace, entry, name),
                pb::Endpoint {
                    address: ip.to_string(),
                    ports,
                    labels: w.labels.clone(),
                    locality: w.locality.clone(),
                    weight: w.weight,
                    health: w.health as i32,
                    service_account: w.service_account.clone(),
                    services: selector.services.clone(),
                },
            ));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    (out, problems)
}
