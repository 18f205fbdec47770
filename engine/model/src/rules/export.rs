//! `exportTo` of ServiceEntries: which namespaces' sidecars see the hosts an
//! entry defines.
//!
//! The adapters turn a ServiceEntry into services (one per host) and also
//! store the object itself as a config entity, whose canonical spec carries
//! `exportTo`. [`Entries`] reads that: each entry's hosts and its resolved
//! `exportTo` (see `parse::resolve_export`). A host is hidden from a
//! namespace when every ServiceEntry that defines it is restricted and none
//! of them is exported to that namespace (a host also defined by a public
//! entry stays visible).
//!
//! What it does NOT do: look at services of other registries (a Kubernetes
//! Service with the same hostname as a restricted entry is hidden with it) or
//! decide views (the xDS crate does, from [`Entries::hidden_from`]).

use std::sync::Arc;

use imbl::{OrdMap, OrdSet};
use serde::Deserialize;

use super::parse::resolve_export;
use crate::model::{Config, Hostname};

/// Istio's MeshConfig `defaultServiceExportTo`,
/// `defaultVirtualServiceExportTo` and `defaultDestinationRuleExportTo`: the
/// `exportTo` of the ServiceEntries, VirtualServices and DestinationRules that
/// set none (empty list: public, Istio's own default). Part of the rule
/// index, so a state's rules are a function of its configs and these.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ExportDefaults {
    /// For ServiceEntries (not the services of other registries).
    pub service: Vec<String>,
    /// For VirtualServices.
    pub virtual_service: Vec<String>,
    /// For DestinationRules.
    pub destination_rule: Vec<String>,
}

impl ExportDefaults {
    /// Whether every default is Istio's own (public).
    pub fn is_public(&self) -> bool {
        self.service.is_empty()
            && self.virtual_service.is_empty()
            && self.destination_rule.is_empty()
    }
}

/// `given` when it lists anything, else `default` (when that does).
pub(super) fn or_default(given: &mut Option<Vec<String>>, default: &[String]) {
    if given.as_ref().is_none_or(Vec::is_empty) && !default.is_empty() {
        *given = Some(default.to_vec());
    }
}

/// The part of a ServiceEntry spec that decides visibility.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    #[serde(default)]
    hosts: Option<Vec<String>>,
    #[serde(default)]
    export_to: Option<Vec<String>>,
}

/// One ServiceEntry as visibility sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryExport {
    /// Its config key (`cfg/service_entry/<ns>/<name>`).
    pub key: Arc<str>,
    /// The hosts it defines, lower-cased as the adapters key them.
    pub hosts: Vec<Hostname>,
    /// The namespaces it is exported to, or `None` when public.
    pub export: Option<Arc<[Arc<str>]>>,
}

impl EntryExport {
    /// Reads `cfg` (a ServiceEntry), with `default` as its `exportTo` when it
    /// sets none. A spec that does not parse counts as public: the adapters
    /// already reported it and defined what they could.
    pub fn of(cfg: &Config, default: &[String]) -> EntryExport {
        let mut spec: Spec = serde_json::from_str(&cfg.spec_json).unwrap_or_default();
        or_default(&mut spec.export_to, default);
        let hosts = (spec.hosts.iter().flatten())
            .map(|h| Hostname::new(&h.trim().to_ascii_lowercase()))
            .collect();
        EntryExport {
            key: cfg.key.clone(),
            hosts,
            export: resolve_export(spec.export_to.as_deref(), &cfg.namespace),
        }
    }
}

/// Every ServiceEntry's hosts and `exportTo`, indexed (see the module doc).
/// Persistent maps, so that cloning the rule index stays O(1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Entries {
    /// Restricted entries, by key.
    restricted: OrdMap<Arc<str>, Arc<EntryExport>>,
    /// Host → the keys of the public entries that define it.
    public_hosts: OrdMap<Hostname, OrdSet<Arc<str>>>,
    /// Public entries, by key → their hosts (to undo on removal).
    public: OrdMap<Arc<str>, Arc<EntryExport>>,
}

impl Entries {
    /// Stores (or replaces) the entry; returns it when it is restricted, and
    /// the restricted version it replaced, if any.
    pub(super) fn upsert(
        &mut self,
        cfg: &Config,
        default: &[String],
    ) -> (Option<Arc<EntryExport>>, Option<Arc<EntryExport>>) {
        let old = self.remove(&cfg.key);
        let e = Arc::new(EntryExport::of(cfg, default));
        if e.export.is_some() {
            self.restricted.insert(e.key.clone(), e.clone());
            (Some(e), old)
        } else {
            for h in &e.hosts {
                self.public_hosts
                    .entry(h.clone())
                    .or_default()
                    .insert(e.key.clone());
            }
            self.public.insert(e.key.clone(), e);
            (None, old)
        }
    }

    /// Forgets the entry under `key`; returns it if it was restricted.
    pub(super) fn remove(&mut self, key: &str) -> Option<Arc<EntryExport>> {
        if let Some(e) = self.public.remove(key) {
            for h in &e.hosts {
                if let Some(set) = self.public_hosts.get_mut(h) {
                    set.remove(key);
                    if set.is_empty() {
                        self.public_hosts.remove(h);
                    }
                }
            }
            return None;
        }
        self.restricted.remove(key)
    }

    /// Whether any entry is restricted (then no namespace's sidecars can be
    /// assumed to see every host).
    pub(super) fn has_restricted(&self) -> bool {
        !self.restricted.is_empty()
    }

    /// The hosts hidden from a namespace whose visibility class is `visible`
    /// (sorted keys of the restricted objects it sees): those every defining
    /// entry of is restricted and not in `visible`.
    pub(super) fn hidden_from(&self, visible: &[Arc<str>]) -> OrdSet<Hostname> {
        let seen = |k: &Arc<str>| visible.binary_search(k).is_ok();
        let shown: OrdSet<&Hostname> = self
            .restricted
            .values()
            .filter(|e| seen(&e.key))
            .flat_map(|e| e.hosts.iter())
            .collect();
        self.restricted
            .values()
            .filter(|e| !seen(&e.key))
            .flat_map(|e| e.hosts.iter())
            .filter(|h| !self.public_hosts.contains_key(*h) && !shown.contains(h))
            .cloned()
            .collect()
    }
}
