//! The adapter's last-known view of the cluster: the facts of every watched object,
//! the indexes that join them, and the desired entity view derived from them,
//! maintained incrementally.
//!
//! Joins (see the module docs for the rules):
//! - a Service is one service entity;
//! - an endpoint entity is one workload address (namespace, Pod or none, IP) as
//!   a member of one Service, merged over every EndpointSlice of that Service
//!   that lists it: its port map is the union of those slices' ports (named as
//!   the Service names them), its health the best any slice reports; labels and
//!   service account come from its Pod, locality from its Node (`nodeName` of
//!   the slice endpoint, else of the Pod), with the slice endpoint's `zone` when
//!   the Node gives none. A Pod in two Services is two entities: each Service
//!   has its own port names and target ports, which one shared port map could
//!   not hold;
//! - an Istio object is one config entity; a ServiceEntry is also services and
//!   inline endpoints, and its `workloadSelector` joins the WorkloadEntries of its
//!   namespace into endpoints (see `mesh`).
//!
//! Every change marks only what it can affect (a Pod: its endpoints; a Node: the
//! endpoints on it; a Service: itself and its slices' endpoints, and its
//! namespace's ServiceEntry mapping; a ServiceEntry or WorkloadEntry: its
//! namespace's ServiceEntry mapping), and
//! [`Store::refresh`] recomputes just those, so an event costs O(affected), not
//! O(cluster). Keys whose desired entity actually changed are handed to the
//! emitter.
//!
//! What it does NOT do: talk to the API server (see `watch`), parse objects (see
//! `parse`) or decide what to append (see `emit`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use deltapilot_proto as pb;

use super::kinds::ResourceKind;
use super::parse::{EpId, Facts, Mesh, ObjId, Parsed, PodFacts, ServiceFacts, SliceFacts};
use super::status::ObjectProblem;
use crate::common::emit::{Entity, EntityMap};
use crate::common::istio::{KeyScheme, ServiceEntryFacts, WorkloadFacts};

mod mesh;

/// What applying objects found, for the counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Applied {
    /// Objects skipped as malformed.
    pub(crate) malformed: u64,
    /// Parts of good objects left out.
    pub(crate) skipped_parts: u64,
}

impl Applied {
    fn add(&mut self, other: Applied) {
        self.malformed += other.malformed;
        self.skipped_parts += other.skipped_parts;
    }
}

/// The store. See the module docs.
#[derive(Debug)]
pub(crate) struct Store {
    cluster_id: String,
    cluster_domain: String,
    services: BTreeMap<ObjId, ServiceFacts>,
    slices: BTreeMap<ObjId, SliceFacts>,
    pods: BTreeMap<ObjId, PodFacts>,
    nodes: BTreeMap<String, Option<pb::Locality>>,
    configs: BTreeMap<(pb::ConfigKind, ObjId), pb::ConfigObject>,
    /// ServiceEntries and WorkloadEntries, as the service model maps them.
    service_entries: BTreeMap<ObjId, Arc<ServiceEntryFacts>>,
    workload_entries: BTreeMap<ObjId, Arc<WorkloadFacts>>,
    /// Keys of ServiceEntry endpoint entities.
    mesh_keys: KeyScheme,
    /// Per namespace: the keys its ServiceEntry mapping set last time, and the
    /// problems it found (logged once each).
    mesh_view: BTreeMap<String, BTreeSet<String>>,
    mesh_problems: BTreeMap<String, Vec<String>>,
    /// Service → names of the slices that name it (same namespace).
    slices_by_service: BTreeMap<ObjId, BTreeSet<String>>,
    /// Endpoint identity → names of the slices listing it (same namespace).
    slices_by_ep: BTreeMap<EpId, BTreeSet<String>>,
    /// The node each desired endpoint's locality was taken from, and its reverse.
    ep_node: BTreeMap<EpId, String>,
    eps_by_node: BTreeMap<String, BTreeSet<EpId>>,
    /// Objects per kind and namespace, for the status.
    counts: BTreeMap<(ResourceKind, String), usize>,
    dirty_services: BTreeSet<ObjId>,
    dirty_eps: BTreeSet<EpId>,
    dirty_configs: BTreeSet<(pb::ConfigKind, ObjId)>,
    dirty_mesh: BTreeSet<String>,
    desired: EntityMap,
    changed: Vec<String>,
    problems: BTreeMap<(ResourceKind, ObjId), String>,
}

impl Store {
    pub(crate) fn new(cluster_id: String, cluster_domain: String) -> Self {
        Self {
            mesh_keys: KeyScheme::kubernetes(&cluster_id),
            cluster_id,
            cluster_domain,
            services: BTreeMap::new(),
            slices: BTreeMap::new(),
            pods: BTreeMap::new(),
            nodes: BTreeMap::new(),
            configs: BTreeMap::new(),
            service_entries: BTreeMap::new(),
            workload_entries: BTreeMap::new(),
            mesh_view: BTreeMap::new(),
            mesh_problems: BTreeMap::new(),
            slices_by_service: BTreeMap::new(),
            slices_by_ep: BTreeMap::new(),
            ep_node: BTreeMap::new(),
            eps_by_node: BTreeMap::new(),
            counts: BTreeMap::new(),
            dirty_services: BTreeSet::new(),
            dirty_eps: BTreeSet::new(),
            dirty_configs: BTreeSet::new(),
            dirty_mesh: BTreeSet::new(),
            desired: EntityMap::new(),
            changed: Vec::new(),
            problems: BTreeMap::new(),
        }
    }

    /// The desired entity view (as of the last [`Store::refresh`]).
    pub(crate) fn desired(&self) -> &EntityMap {
        &self.desired
    }

    /// Keys whose desired entity changed since the last call.
    pub(crate) fn take_changed(&mut self) -> Vec<String> {
        std::mem::take(&mut self.changed)
    }

    /// Objects of `kind` held, in `namespace` (or in all).
    pub(crate) fn count(&self, kind: ResourceKind, namespace: Option<&str>) -> usize {
        match namespace {
            Some(ns) => self
                .counts
                .get(&(kind, ns.to_owned()))
                .copied()
                .unwrap_or(0),
            None => self
                .counts
                .range((kind, String::new())..)
                .take_while(|((k, _), _)| *k == kind)
                .map(|(_, n)| n)
                .sum(),
        }
    }

    /// Objects currently skipped as malformed, at most `max`, sorted.
    pub(crate) fn problems(&self, max: usize) -> Vec<ObjectProblem> {
        self.problems
            .iter()
            .take(max)
            .map(|((kind, id), reason)| ObjectProblem {
                kind: *kind,
                namespace: id.ns.clone(),
                name: id.name.clone(),
                reason: reason.clone(),
            })
            .collect()
    }

    /// Applies one added or modified object. A malformed one keeps the object's
    /// last good facts (if any) in force.
    pub(crate) fn apply(&mut self, kind: ResourceKind, parsed: Parsed) -> Applied {
        let Parsed { id, facts, skipped } = parsed;
        match facts {
            Err(reason) => {
                tracing::warn!(kind = %kind, namespace = %id.ns, name = %id.name, %reason,
                    "kubernetes adapter: skipping malformed object; its last good state stays");
                self.problems.insert((kind, id), reason);
                Applied {
                    malformed: 1,
                    skipped_parts: 0,
                }
            }
            Ok(facts) => {
                self.problems.remove(&(kind, id.clone()));
                let changed = self.upsert(kind, &id, facts);
                if changed {
                    for part in &skipped {
                        tracing::info!(kind = %kind, namespace = %id.ns, name = %id.name, %part,
                            "kubernetes adapter: part of an object left out");
                    }
                }
                Applied {
                    malformed: 0,
                    skipped_parts: skipped.len() as u64,
                }
            }
        }
    }

    /// Applies a deletion.
    pub(crate) fn delete(&mut self, kind: ResourceKind, id: &ObjId) {
        self.problems.remove(&(kind, id.clone()));
        self.remove(kind, id);
    }

    /// Replaces everything of `kind` in `namespace` (or all namespaces) with a
    /// fresh list: objects not listed are deleted, listed ones applied. Unchanged
    /// objects mark nothing, so a relist of an unchanged cluster changes nothing.
    pub(crate) fn relist(
        &mut self,
        kind: ResourceKind,
        namespace: Option<&str>,
        objects: Vec<Parsed>,
    ) -> Applied {
        let listed: BTreeSet<ObjId> = objects.iter().map(|p| p.id.clone()).collect();
        let in_scope = |id: &ObjId| namespace.is_none_or(|ns| id.ns == ns);
        let gone: Vec<ObjId> = self
            .ids(kind, namespace)
            .into_iter()
            .filter(|id| !listed.contains(id))
            .collect();
        for id in &gone {
            self.remove(kind, id);
        }
        self.problems
            .retain(|(k, id), _| *k != kind || !in_scope(id) || listed.contains(id));
        let mut total = Applied::default();
        for p in objects {
            total.add(self.apply(kind, p));
        }
        total
    }

    fn ids(&self, kind: ResourceKind, namespace: Option<&str>) -> Vec<ObjId> {
        fn scoped<V>(m: &BTreeMap<ObjId, V>, ns: Option<&str>) -> Vec<ObjId> {
            match ns {
                None => m.keys().cloned().collect(),
                Some(ns) => m
                    .range(
                        ObjId {
                            ns: ns.to_owned(),
                            name: String::new(),
                        }..,
                    )
                    .take_while(|(id, _)| id.ns == ns)
                    .map(|(id, _)| id.clone())
                    .collect(),
            }
        }
        match kind {
            ResourceKind::Service => scoped(&self.services, namespace),
            ResourceKind::EndpointSlice => scoped(&self.slices, namespace),
            ResourceKind::Pod => scoped(&self.pods, namespace),
            ResourceKind::Node => self
                .nodes
                .keys()
                .map(|n| ObjId {
                    ns: String::new(),
                    name: n.clone(),
                })
                .collect(),
            ResourceKind::Istio(k) => self
                .configs
                .keys()
                .filter(|(ck, id)| *ck == k && namespace.is_none_or(|ns| id.ns == ns))
                .map(|(_, id)| id.clone())
                .collect(),
        }
    }

    fn count_change(&mut self, kind: ResourceKind, ns: &str, added: bool) {
        let n = self.counts.entry((kind, ns.to_owned())).or_default();
        if added {
            *n += 1;
        } else {
            *n = n.saturating_sub(1);
        }
    }

    /// Stores new facts; returns whether anything changed.
    fn upsert(&mut self, kind: ResourceKind, id: &ObjId, facts: Facts) -> bool {
        let old_existed = match (kind, facts) {
            (ResourceKind::Service, Facts::Service(f)) => {
                if self.services.get(id) == Some(&f) {
                    return false;
                }
                let old = self.services.insert(id.clone(), f);
                self.touch_service(id);
                old.is_some()
            }
            (ResourceKind::EndpointSlice, Facts::Slice(f)) => {
                if self.slices.get(id) == Some(&f) {
                    return false;
                }
                // Unindex the old facts before indexing the new: both may share
                // entries.
                let old = self.slices.remove(id);
                if let Some(old) = &old {
                    self.index_slice(id, old, false);
                }
                self.index_slice(id, &f, true);
                self.slices.insert(id.clone(), f);
                old.is_some()
            }
            (ResourceKind::Pod, Facts::Pod(f)) => {
                if self.pods.get(id) == Some(&f) {
                    return false;
                }
                let old = self.pods.insert(id.clone(), f);
                self.touch_pod(id);
                old.is_some()
            }
            (ResourceKind::Node, Facts::Node(f)) => {
                if self.nodes.get(&id.name) == Some(&f) {
                    return false;
                }
                let old = self.nodes.insert(id.name.clone(), f);
                self.touch_node(&id.name);
                old.is_some()
            }
            (ResourceKind::Istio(k), Facts::Config(c, mesh)) => {
                let key = (k, id.clone());
                if self.configs.get(&key) == Some(&c) && self.mesh_of(id, mesh.as_ref()) {
                    return false;
                }
                let old = self.configs.insert(key.clone(), c);
                self.dirty_configs.insert(key);
                self.set_mesh(id, mesh);
                old.is_some()
            }
            (kind, facts) => {
                tracing::error!(%kind, ?facts, "kubernetes adapter: facts of another kind; ignored (a bug)");
                return false;
            }
        };
        if !old_existed {
            self.count_change(kind, &id.ns, true);
        }
        true
    }

    fn remove(&mut self, kind: ResourceKind, id: &ObjId) {
        let existed = match kind {
            ResourceKind::Service => {
                let old = self.services.remove(id);
                if old.is_some() {
                    self.touch_service(id);
                }
                old.is_some()
            }
            ResourceKind::EndpointSlice => match self.slices.remove(id) {
                Some(old) => {
                    self.index_slice(id, &old, false);
                    true
                }
                None => false,
            },
            ResourceKind::Pod => {
                let old = self.pods.remove(id);
                if old.is_some() {
                    self.touch_pod(id);
                }
                old.is_some()
            }
            ResourceKind::Node => {
                let old = self.nodes.remove(&id.name);
                if old.is_some() {
                    self.touch_node(&id.name);
                }
                old.is_some()
            }
            ResourceKind::Istio(k) => {
                let key = (k, id.clone());
                let old = self.configs.remove(&key);
                if old.is_some() {
                    self.dirty_configs.insert(key);
                    self.remove_mesh(k, id);
                }
                old.is_some()
            }
        };
        if existed {
            self.count_change(kind, &id.ns, false);
        }
    }

    fn touch_service(&mut self, id: &ObjId) {
        self.dirty_services.insert(id.clone());
        // A Service may shadow (or stop shadowing) a ServiceEntry host.
        if self.has_service_entries(&id.ns) {
            self.dirty_mesh.insert(id.ns.clone());
        }
        let Some(names) = self.slices_by_service.get(id) else {
            return;
        };
        for name in names {
            let sid = ObjId {
                ns: id.ns.clone(),
                name: name.clone(),
            };
            if let Some(s) = self.slices.get(&sid) {
                self.dirty_eps.extend(s.endpoints.keys().cloned());
            }
        }
    }

    fn touch_pod(&mut self, id: &ObjId) {
        let lo = EpId {
            ns: id.ns.clone(),
            pod: id.name.clone(),
            svc: String::new(),
            addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        };
        let eps: Vec<EpId> = self
            .slices_by_ep
            .range(lo..)
            .take_while(|(ep, _)| ep.ns == id.ns && ep.pod == id.name)
            .map(|(ep, _)| ep.clone())
            .collect();
        self.dirty_eps.extend(eps);
    }

    fn touch_node(&mut self, node: &str) {
        if let Some(eps) = self.eps_by_node.get(node) {
            self.dirty_eps.extend(eps.iter().cloned());
        }
    }

    /// Adds (or removes) a slice's entries in the indexes and marks its endpoints.
    fn index_slice(&mut self, id: &ObjId, f: &SliceFacts, add: bool) {
        if let Some(svc) = &f.service {
            let sid = ObjId {
                ns: id.ns.clone(),
                name: svc.clone(),
            };
            set_member(&mut self.slices_by_service, sid, &id.name, add);
        }
        for ep in f.endpoints.keys() {
            set_member(&mut self.slices_by_ep, ep.clone(), &id.name, add);
            self.dirty_eps.insert(ep.clone());
        }
    }

    /// Recomputes the desired entities of everything marked since the last call.
    pub(crate) fn refresh(&mut self) {
        for id in std::mem::take(&mut self.dirty_services) {
            let key = pb::service_key(&id.ns, &self.hostname(&id));
            let entity = self
                .services
                .get(&id)
                .map(|f| Entity::Service(f.service.clone()));
            self.set(key, entity);
        }
        for ep in std::mem::take(&mut self.dirty_eps) {
            let key = self.endpoint_key(&ep);
            let (entity, node) = match self.endpoint(&ep) {
                Some((e, node)) => (Some(Entity::Endpoint(e)), node),
                None => (None, None),
            };
            self.index_node(&ep, node);
            self.set(key, entity);
        }
        for ns in std::mem::take(&mut self.dirty_mesh) {
            self.refresh_mesh(&ns);
        }
        for (kind, id) in std::mem::take(&mut self.dirty_configs) {
            let key = pb::config_key(kind, &id.ns, &id.name);
            let entity = self
                .configs
                .get(&(kind, id))
                .map(|c| Entity::Config(c.clone()));
            self.set(key, entity);
        }
    }

    fn set(&mut self, key: String, entity: Option<Entity>) {
        match entity {
            Some(e) => {
                if self.desired.get(&key).map(Arc::as_ref) != Some(&e) {
                    self.desired.insert(key.clone(), Arc::new(e));
                    self.changed.push(key);
                }
            }
            None => {
                if self.desired.remove(&key).is_some() {
                    self.changed.push(key);
                }
            }
        }
    }

    fn index_node(&mut self, ep: &EpId, node: Option<String>) {
        let old = match &node {
            Some(n) => self.ep_node.insert(ep.clone(), n.clone()),
            None => self.ep_node.remove(ep),
        };
        if old == node {
            return;
        }
        if let Some(old) = old
            && let Some(set) = self.eps_by_node.get_mut(&old)
        {
            set.remove(ep);
            if set.is_empty() {
                self.eps_by_node.remove(&old);
            }
        }
        if let Some(n) = node {
            self.eps_by_node.entry(n).or_default().insert(ep.clone());
        }
    }

    fn hostname(&self, id: &ObjId) -> String {
        format!("{}.{}.svc.{}", id.name, id.ns, self.cluster_domain)
    }

    /// `ep/k8s/<cluster>/<ns>/<service>/<pod or ->/<address>`: stable for the life
    /// of the workload, unique per cluster (a Pod name never is `-`).
    fn endpoint_key(&self, ep: &EpId) -> String {
        let pod = if ep.pod.is_empty() { "-" } else { &ep.pod };
        format!(
            "ep/k8s/{}/{}/{}/{pod}/{}",
            self.cluster_id, ep.ns, ep.svc, ep.addr
        )
    }

    /// The endpoint entity of a workload address in a Service, and the node its
    /// locality comes from; `None` when the Service is not in the view or no slice
    /// lists the address any more.
    fn endpoint(&self, ep: &EpId) -> Option<(pb::Endpoint, Option<String>)> {
        let names = self.slices_by_ep.get(ep)?;
        let svc = self.services.get(&ObjId {
            ns: ep.ns.clone(),
            name: ep.svc.clone(),
        })?;
        let mut ports = BTreeMap::new();
        let mut health: Option<pb::Health> = None;
        let mut node: Option<String> = None;
        let mut zone: Option<String> = None;
        for name in names {
            let slice_id = ObjId {
                ns: ep.ns.clone(),
                name: name.clone(),
            };
            let Some(slice) = self.slices.get(&slice_id) else {
                continue;
            };
            let Some(se) = slice.endpoints.get(ep) else {
                continue;
            };
            for (port_name, number) in &slice.ports {
                let key = if port_name.is_empty() {
                    match svc.unnamed_port {
                        Some(n) => n.to_string(),
                        None => continue,
                    }
                } else {
                    port_name.clone()
                };
                ports.entry(key).or_insert(u32::from(*number));
            }
            health = Some(match health {
                Some(h) if health_rank(h) <= health_rank(se.health) => h,
                _ => se.health,
            });
            node = node.or_else(|| se.node.clone());
            zone = zone.or_else(|| se.zone.clone());
        }
        let health = health?;
        let pod = (!ep.pod.is_empty())
            .then(|| {
                self.pods.get(&ObjId {
                    ns: ep.ns.clone(),
                    name: ep.pod.clone(),
                })
            })
            .flatten();
        let node = node.or_else(|| pod.and_then(|p| p.node.clone()));
        let mut locality = node
            .as_ref()
            .and_then(|n| self.nodes.get(n).cloned().flatten());
        if let Some(z) = zone {
            match &mut locality {
                Some(l) if l.zone.is_empty() => l.zone = z,
                Some(_) => {}
                None => {
                    locality = Some(pb::Locality {
                        zone: z,
                        ..Default::default()
                    });
                }
            }
        }
        let endpoint = pb::Endpoint {
            address: ep.addr.to_string(),
            ports,
            labels: pod.map(|p| p.labels.clone()).unwrap_or_default(),
            locality,
            weight: 0,
            health: health as i32,
            service_account: pod.map(|p| p.service_account.clone()).unwrap_or_default(),
            services: vec![pb::ServiceRef {
                namespace: ep.ns.clone(),
                hostname: svc.service.hostname.clone(),
            }],
        };
        Some((endpoint, node))
    }
}

/// Lower is better: when slices disagree (one updated before another), the
/// endpoint takes the best health any of them reports.
fn health_rank(h: pb::Health) -> u8 {
    match h {
        pb::Health::Healthy | pb::Health::Unspecified => 0,
        pb::Health::Draining => 1,
        pb::Health::NotReady => 2,
        pb::Health::Unhealthy => 3,
    }
}

fn set_member<K: Ord>(index: &mut BTreeMap<K, BTreeSet<String>>, key: K, member: &str, add: bool) {
    if add {
        index.entry(key).or_default().insert(member.to_owned());
    } else if let Some(set) = index.get_mut(&key) {
        set.remove(member);
        if set.is_empty() {
            index.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests;
