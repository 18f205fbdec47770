//! The store's ServiceEntry mapping: per namespace, the services and inline
//! endpoints of its ServiceEntries and the endpoints of the WorkloadEntries their
//! selectors join (the mapping itself is `common::istio`, shared with the file
//! adapter).
//!
//! A ServiceEntry or WorkloadEntry change marks its namespace; [`Store::refresh`]
//! recomputes that namespace's mapping (O(entries and workloads in it)) and sets
//! only the keys whose entity changed, so a label or selector change adds or
//! removes exactly the affected endpoint entities.
//!
//! Precedence: a host claimed by a Kubernetes Service of the namespace stays the
//! Service's (its ServiceEntry service is left out, with a logged problem); among
//! ServiceEntries of one namespace the first by name wins.
//!
//! What it does NOT do: parse objects (see `parse`) or map specs
//! (`common::istio`).

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use deltapilot_proto as pb;

use super::{Entity, Mesh, ObjId, ServiceEntryFacts, Store, WorkloadFacts};
use crate::common::istio::joined_endpoints;

impl Store {
    /// Whether `mesh` is what the store already holds for `id`.
    pub(super) fn mesh_of(&self, id: &ObjId, mesh: Option<&Mesh>) -> bool {
        match mesh {
            None => true,
            Some(Mesh::ServiceEntry(f)) => self.service_entries.get(id) == Some(f),
            Some(Mesh::WorkloadEntry(f)) => self.workload_entries.get(id) == Some(f),
        }
    }

    /// Stores an object's mapping and marks its namespace.
    pub(super) fn set_mesh(&mut self, id: &ObjId, mesh: Option<Mesh>) {
        match mesh {
            None => return,
            Some(Mesh::ServiceEntry(f)) => {
                self.service_entries.insert(id.clone(), f);
            }
            Some(Mesh::WorkloadEntry(f)) => {
                self.workload_entries.insert(id.clone(), f);
            }
        }
        self.dirty_mesh.insert(id.ns.clone());
    }

    /// Forgets a deleted object's mapping and marks its namespace.
    pub(super) fn remove_mesh(&mut self, kind: pb::ConfigKind, id: &ObjId) {
        let removed = match kind {
            pb::ConfigKind::ServiceEntry => self.service_entries.remove(id).is_some(),
            pb::ConfigKind::WorkloadEntry => self.workload_entries.remove(id).is_some(),
            _ => false,
        };
        if removed {
            self.dirty_mesh.insert(id.ns.clone());
        }
    }

    /// Whether namespace `ns` holds any ServiceEntry.
    pub(super) fn has_service_entries(&self, ns: &str) -> bool {
        in_namespace(&self.service_entries, ns).next().is_some()
    }

    /// Recomputes namespace `ns`'s ServiceEntry mapping and sets what changed.
    pub(super) fn refresh_mesh(&mut self, ns: &str) {
        let (next, problems) = self.mesh_entities(ns);
        let old = self.mesh_view.remove(ns).unwrap_or_default();
        for key in old.iter().filter(|k| !next.contains_key(*k)) {
            // A host a Service took over is the Service's now: not ours to delete.
            if !self.is_kubernetes_service(ns, key) {
                self.set(key.clone(), None);
            }
        }
        let keys: BTreeSet<String> = next.keys().cloned().collect();
        for (key, entity) in next {
            self.set(key, Some(entity));
        }
        if !keys.is_empty() {
            self.mesh_view.insert(ns.to_owned(), keys);
        }
        let known = self.mesh_problems.remove(ns).unwrap_or_default();
        for p in problems.iter().filter(|p| !known.contains(p)) {
            tracing::warn!(namespace = %ns, problem = %p, "kubernetes adapter: part of a ServiceEntry left out");
        }
        if !problems.is_empty() {
            self.mesh_problems.insert(ns.to_owned(), problems);
        }
    }

    /// The entities namespace `ns`'s ServiceEntries and WorkloadEntries map to,
    /// and the parts left out.
    fn mesh_entities(&self, ns: &str) -> (BTreeMap<String, Entity>, Vec<String>) {
        let entries: Vec<(&str, &Arc<ServiceEntryFacts>)> =
            in_namespace(&self.service_entries, ns).collect();
        let workloads: Vec<(&str, &WorkloadFacts)> = in_namespace(&self.workload_entries, ns)
            .map(|(n, w)| (n, w.as_ref()))
            .collect();
        let mut out = BTreeMap::new();
        let mut problems = Vec::new();
        for (name, se) in &entries {
            for s in &se.services {
                let key = pb::service_key(ns, &s.hostname);
                if self.is_kubernetes_service(ns, &key) {
                    problems.push(format!(
                        "ServiceEntry {ns}/{name}: host {} is a Kubernetes Service; the Service wins",
                        s.hostname
                    ));
                    continue;
                }
                match out.entry(key) {
                    Entry::Occupied(_) => problems.push(format!(
                        "ServiceEntry {ns}/{name}: host {} is already defined by an earlier ServiceEntry; that one wins",
                        s.hostname
                    )),
                    Entry::Vacant(v) => {
                        v.insert(Entity::Service(s.clone()));
                    }
                }
            }
            for (key, e) in &se.endpoints {
                out.insert(key.clone(), Entity::Endpoint(e.clone()));
            }
        }
        let selecting = entries
            .iter()
            .filter_map(|(n, se)| se.selector.as_ref().map(|s| (*n, s)));
        let (joined, skipped) = joined_endpoints(ns, selecting, &workloads, &self.mesh_keys);
        for (key, e) in joined {
            out.insert(key, Entity::Endpoint(e));
        }
        problems.extend(skipped.into_iter().map(|p| {
            format!(
                "WorkloadEntry {ns}/{} selected by ServiceEntry {ns}/{}: {}",
                p.workload, p.entry, p.reason
            )
        }));
        (out, problems)
    }

    /// Whether `key` is the service key of a Kubernetes Service of `ns`.
    fn is_kubernetes_service(&self, ns: &str, key: &str) -> bool {
        let suffix = format!(".{ns}.svc.{}", self.cluster_domain);
        key.strip_prefix("svc/")
            .and_then(|k| k.strip_prefix(ns))
            .and_then(|k| k.strip_prefix('/'))
            .and_then(|host| host.strip_suffix(suffix.as_str()))
            .is_some_and(|name| {
                !name.contains('.')
                    && self.services.contains_key(&ObjId {
                        ns: ns.to_owned(),
                        name: name.to_owned(),
                    })
            })
    }
}

/// The objects of namespace `ns` in a map keyed by object id, with their names.
fn in_namespace<'a, V>(
    map: &'a BTreeMap<ObjId, V>,
    ns: &'a str,
) -> impl Iterator<Item = (&'a str, &'a V)> + 'a {
    map.range(
        ObjId {
            ns: ns.to_owned(),
            name: String::new(),
        }..,
    )
    .take_while(move |(id, _)| id.ns == ns)
    .map(|(id, v)| (id.name.as_str(), v))
}
