//! Typed views of the Istio `networking.istio.io` specs the adapters map:
//! ServiceEntry (hosts, ports, resolution, location, inline endpoints, workload
//! selector) and WorkloadEntry (spec and health status). Every other field is
//! ignored here and still travels, untouched, in the object's canonical
//! `spec_json`.
//!
//! The same types read YAML (the file adapter, through serde_yaml, whose errors
//! then carry a line and column) and JSON (the Kubernetes adapter and the file
//! adapter's carried specs). Values that are wrong in themselves (a port out of
//! range) fail inside deserialisation.
//!
//! What it does NOT do: map anything to entities (see `service_entry` and
//! `workload`).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

/// Deserialises an absent or explicit `null` field as its default, because YAML
/// writes an empty list as `ports:` (null) as often as `ports: []`.
pub(crate) fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
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

/// `ServiceEntry.spec`, as far as the adapters map it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ServiceEntrySpec {
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) hosts: Vec<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) ports: Vec<ServicePort>,
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) location: String,
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) resolution: String,
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) endpoints: Vec<WorkloadSpec>,
    /// Present (even with no labels) when the entry selects WorkloadEntries.
    #[serde(default, alias = "workload_selector")]
    pub(crate) workload_selector: Option<WorkloadSelector>,
}

/// `ServiceEntry.spec.workloadSelector`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct WorkloadSelector {
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) labels: BTreeMap<String, String>,
}

/// One `ServiceEntry.spec.ports` item.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ServicePort {
    pub(crate) number: PortNumber,
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) name: String,
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) protocol: String,
    #[serde(default, alias = "target_port")]
    pub(crate) target_port: Option<PortNumber>,
}

/// A workload: an inline endpoint (`ServiceEntry.spec.endpoints[]`) or a
/// WorkloadEntry's spec (Istio uses one message for both).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WorkloadSpec {
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) address: String,
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) ports: BTreeMap<String, PortNumber>,
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) locality: String,
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) weight: u32,
    #[serde(default, alias = "service_account", deserialize_with = "null_default")]
    pub(crate) service_account: String,
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) network: String,
}

/// A WorkloadEntry's `status`, as far as its health goes.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct WorkloadStatus {
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) conditions: Vec<Condition>,
}

/// One status condition (`type`, `status` as `"True"`/`"False"`).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Condition {
    #[serde(rename = "type", default, deserialize_with = "null_default")]
    pub(crate) kind: String,
    #[serde(default, deserialize_with = "null_default")]
    pub(crate) status: String,
}
