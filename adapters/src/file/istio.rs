//! Istio networking documents as the file adapter reads them: the header, the
//! metadata, the kinds carried, and the checks keys need.
//!
//! The specs the adapter maps (ServiceEntry, WorkloadEntry) are typed and mapped
//! in the shared `common::istio`, which the Kubernetes adapter uses too; here
//! they are read from YAML so serde_yaml attaches a line and column to errors.
//!
//! What it does NOT do: read files or YAML streams (see `parse`), map specs (see
//! `common::istio`) or decide what to append (see `view`).

use std::collections::BTreeMap;

use deltapilot_proto as pb;
use serde::Deserialize;

pub(crate) use crate::common::istio::null_default;

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

#[cfg(test)]
mod tests;
