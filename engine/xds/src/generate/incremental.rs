//! The incremental generator: a batch recomputes only the resources its touched
//! hostnames feed, through reverse indexes, and reports exactly the names whose
//! bytes changed.
//!
//! ## Reverse dependencies
//! | touched | recomputed |
//! | --- | --- |
//! | service `H` (created, changed, removed) | for every port `P` `H` served before or serves now: cluster and assignment `outbound\|P\|\|H`, gRPC listener and route `H:P`, sidecar listener `0.0.0.0_P`, route `P` |
//! | endpoints of `H` | the assignments of `H`'s EDS ports, its subsets' included (`outbound\|P\|S\|H`), nothing else |
//! | rule host `H` (its VirtualService or DestinationRule changed, or a host it routes to did; see `Touched::rule_hosts`) | as a touched service `H` whose ports stay: its per-port resources, its virtual host in route `P` and listener `0.0.0.0_P` |
//! | configs of other kinds | nothing |
//!
//! Each subset `S` of `H`'s DestinationRule has, per served port, a cluster and
//! an assignment `outbound|P|S|H` (see `policy`), decided with `H`'s own; the
//! generator keeps the subsets it built per host, so a subset that disappears
//! (rule edited or deleted, service gone) is removed.
//!
//! A port's sidecar listener and route configuration depend on *every* service on
//! that port number, so [`Generator`] keeps the index port → services (split HTTP
//! / TCP), and for route configurations each service's encoded virtual host and
//! the per-domain claims (see `rds::PortRoutes`): a membership change re-encodes
//! only the virtual hosts whose domains move, then concatenates cached bytes.
//! Endpoint-only batches never touch CDS, LDS or RDS.
//!
//! What it does NOT do: fold events (the model arrives folded) or decide what a
//! given proxy sees (see `view`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;

use super::common::{cluster_name, grpc_name, port_route_name, sidecar_listener_name};
use super::rds::{Encoded, PortRoutes};
use super::{GenError, GenOptions, ModelRead, eds, lds, policy, rds, served_ports, vhds};
use crate::{
    ChangeSet, Resource, ResourceKind, ResourceSet, ResourceType, TypeChanges, entry_hash,
};
use deltapilot_model::state::{HKey, Touched};
use deltapilot_model::{Hostname, Resolution, Service};

/// What a service contributed to the indexes at the last regeneration.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostEntry {
    /// The merged service as of the last batch that touched it: the model's
    /// answer until `Touched::services` names the host again, so endpoint-only
    /// batches need no service lookup.
    svc: Arc<Service>,
    /// Served port numbers with whether each is HTTP-like.
    ports: Vec<(u16, bool)>,
    /// The subsets of its DestinationRule as of the last batch that touched
    /// its service or rules (each has a cluster, and an assignment, per port).
    subsets: BTreeSet<Arc<str>>,
}

/// The incremental xDS generator: the indexes that let a batch recompute only
/// what it touches. The runner keeps one alongside the published [`ResourceSet`]
/// and feeds it every batch's [`Touched`], in log order.
///
/// Invariant: after [`Generator::regenerate`] returns `(set, ..)`, the generator
/// describes `set`; the next call must pass that `set` as `prev`. Folding a
/// different history needs a fresh generator ([`Generator::build`]).
#[derive(Debug, Clone)]
pub struct Generator {
    opts: GenOptions,
    hosts: HashMap<Hostname, HostEntry>,
    /// The hostnames of `hosts` by key, to name what a batch touched by key
    /// ([`Touched::endpoint_keys`](deltapilot_model::state::Touched)).
    host_keys: HashMap<HKey, Hostname>,
    tcp: BTreeMap<u16, BTreeSet<Hostname>>,
    http: BTreeMap<u16, PortRoutes>,
    /// The optional HTTP filters the sidecar listeners carry (see
    /// `lds::sidecar_listener`): each while any rule needs it.
    filters: lds::HttpFilters,
    /// The resources hash of the set this generator describes, kept current
    /// resource by resource as each regeneration writes it. Why here: the
    /// writer holds both the entry it replaces and the new one, so the snapshot
    /// hash costs no further lookup of each changed name in the old and new
    /// sets.
    hash: u64,
}

/// Resource keys one batch must recompute.
#[derive(Default)]
struct Dirty {
    /// Per host, the ports whose cluster, assignment, gRPC listener and gRPC route
    /// must be recomputed.
    host_ports: BTreeMap<Hostname, BTreeSet<u16>>,
    /// Per host (not in `host_ports`), the ports whose assignment only must be.
    assignments: BTreeMap<Hostname, BTreeSet<u16>>,
    /// Per host of either map, the subsets whose per-port resources must be
    /// decided: the ones it had and the ones it has (a gone one is removed).
    subsets: BTreeMap<Hostname, BTreeSet<Arc<str>>>,
    /// Sidecar listener and route configuration of a port.
    ports: BTreeSet<u16>,
    /// Per port, hosts put on (`true`) or taken off its route configuration, in
    /// order; applied once every host is reindexed (see `apply_route_ops`).
    route_ops: BTreeMap<u16, Vec<(Hostname, bool)>>,
}

/// Hosts below this many in one regeneration are rebuilt on the calling thread:
/// a live batch touches a few, and a thread costs more than they do.
const PARALLEL_MIN: usize = 512;

/// Most threads one regeneration builds resources on.
const MAX_THREADS: usize = 4;

/// Route configuration changes (virtual hosts put on or taken off, or stale and
/// to be re-encoded) below this many in one regeneration are handled on the
/// calling thread; above, each port's on a thread of its own.
const ROUTES_PARALLEL_MIN: usize = 512;

/// One host to rebuild: its name, the ports, its subsets, and whether only
/// assignments are.
type HostJob<'a> = (
    &'a Hostname,
    &'a BTreeSet<u16>,
    Option<&'a BTreeSet<Arc<str>>>,
    bool,
);

/// What a rebuild decided for one resource, applied to [`Out`] in order.
struct Decision {
    kind: ResourceType,
    /// The proxyless gRPC flavour: an `api_listener` (rather than a sidecar
    /// listener), or a cluster of `grpc_clusters` (rather than `clusters`).
    grpc: bool,
    name: Arc<str>,
    /// The new bytes, a build error, or `None`: the resource is gone.
    desired: Option<Result<Bytes, String>>,
}

impl Decision {
    fn new(
        kind: ResourceType,
        grpc: bool,
        name: Arc<str>,
        desired: Option<Result<Bytes, String>>,
    ) -> Self {
        Decision {
            kind,
            grpc,
            name,
            desired,
        }
    }

    /// Both flavours of one cluster (see `policy::Clusters`), the full one
    /// first so that an equal proxyless one can share its resource.
    fn clusters(out: &mut Vec<Decision>, name: Arc<str>, built: Option<policy::Clusters>) {
        let (full, variant) = built.map_or((None, None), |(f, v)| (Some(f), v));
        let grpc = variant.or_else(|| full.clone());
        out.push(Decision::new(
            ResourceType::Cluster,
            false,
            name.clone(),
            full,
        ));
        out.push(Decision::new(ResourceType::Cluster, true, name, grpc));
    }
}

/// The next resource set being written, with its change set, errors and
/// resources hash.
struct Out {
    set: ResourceSet,
    changes: ChangeSet,
    errors: Vec<GenError>,
    hash: u64,
}

impl Out {
    fn apply(
        &mut self,
        t: ResourceType,
        grpc: bool,
        name: Arc<str>,
        desired: Option<Result<Bytes, String>>,
    ) {
        let kind = match t {
            ResourceType::Cluster if grpc => ResourceKind::GrpcCluster,
            ResourceType::Cluster => ResourceKind::Cluster,
            ResourceType::Endpoint => ResourceKind::Endpoint,
            ResourceType::Listener if grpc => ResourceKind::GrpcListener,
            ResourceType::Listener => ResourceKind::SidecarListener,
            ResourceType::Route => ResourceKind::Route,
            ResourceType::VirtualHost => ResourceKind::VirtualHost,
            // The generator builds no secrets (see `ResourceType::Secret`).
            ResourceType::Secret => return,
        };
        self.apply_kind(kind, name, desired);
    }

    /// Writes `name` of map `kind` (see [`Out::apply`]).
    fn apply_kind(
        &mut self,
        kind: ResourceKind,
        name: Arc<str>,
        desired: Option<Result<Bytes, String>>,
    ) {
        let t = kind.resource_type();
        // Encode-once: a proxyless cluster equal to the full one is that very
        // resource (applied just before it, see `Decision::clusters`).
        let shared = match (&desired, kind) {
            (Some(Ok(bytes)), ResourceKind::GrpcCluster) => self
                .set
                .clusters
                .get(&name)
                .filter(|full| full.bytes == *bytes)
                .cloned(),
            _ => None,
        };
        let map = kind.map_mut(&mut self.set);
        let changes: &mut TypeChanges = self.changes.of_mut(t);
        let bytes = match desired {
            Some(Ok(bytes)) => bytes,
            failed_or_gone => {
                // A cluster's failure is reported once, by its full flavour.
                if let Some(Err(reason)) = failed_or_gone
                    && kind != ResourceKind::GrpcCluster
                {
                    self.errors.push(GenError::new(t, &name, reason));
                }
                if let Some(old) = map.remove(&name) {
                    self.hash = self.hash.wrapping_sub(entry_hash(kind.tag(), &old));
                    changes.removed.insert(name);
                }
                return;
            }
        };
        // One traversal in the common case (the content changed); an unchanged
        // resource is put back so that snapshots keep sharing it. Versions
        // first: unequal versions mean unequal bytes, so a changed resource
        // (the common case) is told apart without comparing its bytes.
        let new = shared
            .clone()
            .unwrap_or_else(|| Arc::new(Resource::new(name.clone(), bytes)));
        match map.insert(new.clone()) {
            Some(old) if old.version == new.version && old.bytes == new.bytes => {
                if shared.is_none() {
                    map.insert(old);
                }
            }
            old => {
                if let Some(old) = old {
                    self.hash = self.hash.wrapping_sub(entry_hash(kind.tag(), &old));
                }
                self.hash = self.hash.wrapping_add(entry_hash(kind.tag(), &new));
                changes.upserted.insert(name);
            }
        }
    }
}

impl Generator {
    /// A generator for an empty model (matching an empty [`ResourceSet`]).
    pub fn new(opts: GenOptions) -> Self {
        Generator {
            opts,
            hosts: HashMap::new(),
            host_keys: HashMap::new(),
            tcp: BTreeMap::new(),
            http: BTreeMap::new(),
            filters: lds::HttpFilters::default(),
            hash: 0,
        }
    }

    /// The resources hash ([`hash::resources_hash`](crate::hash::resources_hash)) of the set this
    /// generator last produced: 0 for a new one, whose set is empty.
    pub fn resources_hash(&self) -> u64 {
        self.hash
    }

    /// The options resources are generated with.
    pub fn options(&self) -> &GenOptions {
        &self.opts
    }

    /// A generator and the full resource set for `model`, as if every service had
    /// been touched on an empty state (startup from a restored model).
    pub fn build<M: ModelRead + ?Sized>(
        model: &M,
        opts: GenOptions,
    ) -> (Self, ResourceSet, Vec<GenError>) {
        let mut g = Generator::new(opts);
        let mut touched = Touched::default();
        model.for_each_service(&mut |s| {
            touched.services.insert(s.hostname.clone());
        });
        let (set, _, errors) = g.regenerate(&ResourceSet::default(), model, &touched);
        (g, set, errors)
    }

    /// Recomputes only what `touched` affects, starting from `prev` (the set this
    /// generator produced last). Returns the next set, the names whose bytes
    /// changed or disappeared, and the resources that failed to build (left out of
    /// the set, and removed if they were in `prev`).
    pub fn regenerate<M: ModelRead + ?Sized>(
        &mut self,
        prev: &ResourceSet,
        model: &M,
        touched: &Touched,
    ) -> (ResourceSet, ChangeSet, Vec<GenError>) {
        let mut dirty = Dirty::default();
        for h in &touched.services {
            self.reindex(model, h, &mut dirty);
        }
        self.apply_route_ops(std::mem::take(&mut dirty.route_ops));
        for h in &touched.rule_hosts {
            self.mark_rule_host(model, h, &mut dirty);
        }
        let filters = lds::HttpFilters::of(model);
        if filters != self.filters {
            self.filters = filters;
            dirty.ports.extend(self.http.keys().copied());
        }
        // Touched by key: a hostname without an entry has no assignment to
        // recompute, so it needs no name.
        let by_key = touched
            .endpoint_keys
            .iter()
            .filter_map(|k| self.host_keys.get(k));
        for h in touched.endpoints.iter().chain(by_key) {
            if touched.services.contains(h) || dirty.host_ports.contains_key(h) {
                continue;
            }
            let Some(entry) = self.hosts.get(h) else {
                continue;
            };
            if entry.svc.resolution == Resolution::StaticEndpoints {
                let ports = entry.ports.iter().map(|(p, _)| *p).collect();
                dirty.assignments.insert(h.clone(), ports);
                if !entry.subsets.is_empty() {
                    dirty.subsets.insert(h.clone(), entry.subsets.clone());
                }
            }
        }

        let mut out = Out {
            set: prev.clone(),
            changes: ChangeSet::default(),
            errors: Vec::new(),
            hash: self.hash,
        };
        let subsets = &dirty.subsets;
        let jobs: Vec<HostJob<'_>> = (dirty.host_ports.iter())
            .map(|(h, p)| (h, p, subsets.get(h), false))
            .chain((dirty.assignments.iter()).map(|(h, p)| (h, p, subsets.get(h), true)))
            .collect();
        for d in self.decide_all(model, &jobs) {
            out.apply(d.kind, d.grpc, d.name, d.desired);
        }
        let empty = BTreeSet::new();
        let mut encoded = self.encode_routes(model, &dirty.ports);
        for p in &dirty.ports {
            let any_http = self.http.get(p).is_some_and(|r| !r.is_empty());
            let (route_config, vhosts) = encoded.remove(p).unwrap_or_default();
            let route_config = route_config.map(Ok);
            let tcp = self.tcp.get(p).unwrap_or(&empty);
            let listener =
                lds::sidecar_listener(model, *p, any_http, tcp, &self.opts, self.filters);
            out.apply(
                ResourceType::Listener,
                false,
                sidecar_listener_name(*p),
                listener,
            );
            let name = port_route_name(*p);
            let vhds_config = route_config
                .is_some()
                .then(|| Ok(vhds::route_config(&name)));
            out.apply(ResourceType::Route, false, name.clone(), route_config);
            out.apply_kind(ResourceKind::VhdsRoute, name, vhds_config);
            for (name, desired) in vhosts {
                out.apply(ResourceType::VirtualHost, false, name, desired);
            }
            if self.http.get(p).is_some_and(PortRoutes::is_empty) {
                self.http.remove(p);
            }
        }
        if prev.grpc_clusters.is_empty() {
            share_cluster_nodes(&mut out.set);
        }
        self.hash = out.hash;
        (out.set, out.changes, out.errors)
    }

    /// Moves `h` in the port indexes from what it served to what it serves now,
    /// marking every resource either state feeds. A port's listener and route
    /// configuration are marked only when its membership actually changes.
    fn reindex<M: ModelRead + ?Sized>(&mut self, model: &M, h: &Hostname, dirty: &mut Dirty) {
        let old = match self.hosts.remove(h) {
            Some(e) => {
                self.host_keys.remove(&HKey::of(h.as_str()));
                if !e.subsets.is_empty() {
                    dirty
                        .subsets
                        .entry(h.clone())
                        .or_default()
                        .extend(e.subsets);
                }
                e.ports
            }
            None => Vec::new(),
        };
        let svc = model.service(h);
        let new: Vec<(u16, bool)> = svc.as_deref().map_or_else(Vec::new, |svc| {
            served_ports(svc)
                .map(|p| (p.number, p.protocol.is_http()))
                .collect()
        });
        for &(p, http) in &old {
            dirty.host_ports.entry(h.clone()).or_default().insert(p);
            if new.contains(&(p, http)) {
                continue;
            }
            dirty.ports.insert(p);
            if http {
                dirty
                    .route_ops
                    .entry(p)
                    .or_default()
                    .push((h.clone(), false));
            } else if let Some(set) = self.tcp.get_mut(&p) {
                set.remove(h);
                if set.is_empty() {
                    self.tcp.remove(&p);
                }
            }
        }
        for &(p, http) in &new {
            dirty.host_ports.entry(h.clone()).or_default().insert(p);
            if old.contains(&(p, http)) {
                continue;
            }
            dirty.ports.insert(p);
            if http {
                dirty
                    .route_ops
                    .entry(p)
                    .or_default()
                    .push((h.clone(), true));
            } else {
                self.tcp.entry(p).or_default().insert(h.clone());
            }
        }
        if let (Some(svc), false) = (svc, new.is_empty()) {
            let subsets = current_subsets(model, h);
            if !subsets.is_empty() {
                let d = dirty.subsets.entry(h.clone()).or_default();
                d.extend(subsets.iter().cloned());
            }
            let entry = HostEntry {
                svc,
                ports: new,
                subsets,
            };
            self.hosts.insert(h.clone(), entry);
            self.host_keys.insert(HKey::of(h.as_str()), h.clone());
        }
    }

    /// Marks everything a host's rules feed as a touched service's: its
    /// per-port resources, its virtual host in each HTTP port's route
    /// configuration, and each of its ports' listener. A host without a served
    /// service has nothing to recompute; when its service comes, the service
    /// touch builds it with its rules. Its subsets move from the ones it had
    /// to the ones its DestinationRule names now, both decided.
    fn mark_rule_host<M: ModelRead + ?Sized>(
        &mut self,
        model: &M,
        h: &Hostname,
        dirty: &mut Dirty,
    ) {
        let Some(entry) = self.hosts.get_mut(h) else {
            return;
        };
        let subsets = current_subsets(model, h);
        let old = std::mem::replace(&mut entry.subsets, subsets);
        if !old.is_empty() || !entry.subsets.is_empty() {
            let d = dirty.subsets.entry(h.clone()).or_default();
            d.extend(old);
            d.extend(entry.subsets.iter().cloned());
        }
        let entry = &*entry;
        dirty
            .host_ports
            .entry(h.clone())
            .or_default()
            .extend(entry.ports.iter().map(|(p, _)| *p));
        for &(p, http) in &entry.ports {
            // A TCP port's listener carries its owners' tcp and tls routes.
            if http && let Some(routes) = self.http.get_mut(&p) {
                routes.mark_stale(h);
            }
            dirty.ports.insert(p);
        }
    }

    /// Applies each port's recorded route changes in their order, creating the
    /// port's routes on the first host put on it. Ports are independent, so
    /// with many changes (a startup, a restore, a replay's one regeneration at
    /// the end: 10k services put 10k virtual hosts on each HTTP port, each
    /// claiming its domains) each port's run on a thread of its own.
    fn apply_route_ops(&mut self, mut ops: BTreeMap<u16, Vec<(Hostname, bool)>>) {
        for (p, list) in &ops {
            if list.iter().any(|(_, add)| *add) {
                self.http.entry(*p).or_insert_with(|| PortRoutes::new(*p));
            }
        }
        let many = ops.values().map(Vec::len).sum::<usize>() >= ROUTES_PARALLEL_MIN;
        let mut work: Vec<(&mut PortRoutes, Vec<(Hostname, bool)>)> = self
            .http
            .iter_mut()
            .filter_map(|(p, r)| ops.remove(p).map(|list| (r, list)))
            .collect();
        deltapilot_model::par::for_each_mut(&mut work, many, MAX_THREADS, |(routes, list)| {
            for (h, add) in list.iter() {
                if *add {
                    routes.insert(h);
                } else {
                    routes.remove(h);
                }
            }
        });
    }

    /// The route configuration of each of `ports` that has HTTP routes, with
    /// its VHDS virtual hosts' changes, re-encoding its stale virtual hosts; ports on several threads when many
    /// are stale (see [`Generator::apply_route_ops`]).
    fn encode_routes<M: ModelRead + ?Sized>(
        &mut self,
        model: &M,
        ports: &BTreeSet<u16>,
    ) -> BTreeMap<u16, Encoded> {
        let mut work: Vec<(u16, &mut PortRoutes, Encoded)> = self
            .http
            .iter_mut()
            .filter(|(p, _)| ports.contains(p))
            .map(|(p, r)| (*p, r, Default::default()))
            .collect();
        let many = work.iter().map(|(_, r, _)| r.stale_len()).sum::<usize>() >= ROUTES_PARALLEL_MIN;
        deltapilot_model::par::for_each_mut(&mut work, many, MAX_THREADS, |(_, routes, out)| {
            *out = routes.encode(model);
        });
        work.into_iter().map(|(p, _, out)| (p, out)).collect()
    }

    /// Decides every job's resources (see [`Generator::decide_host`]), in job
    /// order. Many hosts (a startup, a restore, a replay's one regeneration at the
    /// end) are split over up to [`MAX_THREADS`] threads: building and encoding
    /// is nearly all of a full regeneration and each host's is independent, while
    /// applying the results to the persistent maps stays on this thread, in
    /// order, so the output is exactly the sequential one.
    fn decide_all<M: ModelRead + Sync + ?Sized>(
        &self,
        model: &M,
        jobs: &[HostJob<'_>],
    ) -> Vec<Decision> {
        let one = |chunk: &[HostJob<'_>]| {
            let mut out = Vec::with_capacity(chunk.len() * 4);
            let mut buffers = eds::HostEndpoints::new();
            for &(h, ports, subsets, assignments_only) in chunk {
                let job = (h, ports, subsets, assignments_only);
                self.decide_host(model, job, &mut buffers, &mut out);
            }
            out
        };
        // A panic while building is a bug; it surfaces here as it would have
        // without threads.
        deltapilot_model::par::map_chunks(jobs, PARALLEL_MIN, MAX_THREADS, one, |_, panic| {
            std::panic::resume_unwind(panic)
        })
    }

    /// Recomputes the per-(service, port) resources of `h` for `ports`: cluster,
    /// assignment, gRPC listener and route, or only the assignment. The service is
    /// the indexed one (absent: it serves nothing now); its endpoints are read
    /// from the model once for all its ports, into `buffers` (which every host
    /// of a chunk reuses). Each of the job's subsets gets the same, under its
    /// own name; a subset the DestinationRule no longer has is removed.
    fn decide_host<'m, M: ModelRead + ?Sized>(
        &self,
        model: &'m M,
        (h, ports, subsets, assignments_only): HostJob<'_>,
        buffers: &mut eds::HostEndpoints<'m>,
        out: &mut Vec<Decision>,
    ) {
        let svc = self.hosts.get(h).map(|e| &e.svc);
        let dr = svc.and_then(|_| policy::rule_for(model, h));
        let dr = dr.as_deref();
        let mut eps = svc
            .map(|s| &**s)
            .filter(|s| s.resolution == Resolution::StaticEndpoints)
            .map(|_| {
                buffers.refill(model, h);
                buffers
            });
        for &p in ports {
            let found = svc.map(|s| &**s).and_then(|s| {
                served_ports(s)
                    .find(|x| x.number == p)
                    .map(|port| (s, port))
            });
            let name = cluster_name(p, h);
            let assignment = found
                .zip(eps.as_mut())
                .map(|((_, port), eps)| eds::load_assignment(eps, &name, port));
            out.push(Decision::new(
                ResourceType::Endpoint,
                false,
                name.clone(),
                assignment,
            ));
            for sub in subsets.into_iter().flatten() {
                let built = found.and_then(|(s, port)| {
                    policy::subset_resources(s, port, sub, dr, eps.as_deref_mut(), &self.opts)
                });
                let (cluster, assignment) = built.map_or((None, None), |(c, a)| (Some(c), a));
                let name = policy::subset_cluster_name(p, sub, h);
                let t = ResourceType::Endpoint;
                out.push(Decision::new(t, false, name.clone(), assignment));
                if !assignments_only {
                    Decision::clusters(out, name, cluster);
                }
            }
            if assignments_only {
                continue;
            }
            let cluster = found.map(|(s, port)| policy::cluster(s, port, None, dr, &self.opts));
            Decision::clusters(out, name, cluster);
            let http = found.is_some_and(|(_, port)| port.protocol.is_http());
            let listener = http.then(|| Ok(lds::grpc_listener(model, h, p)));
            out.push(Decision::new(
                ResourceType::Listener,
                true,
                grpc_name(h, p),
                listener,
            ));
            let route = http.then(|| Ok(rds::grpc_route_config(model, h, p)));
            out.push(Decision::new(
                ResourceType::Route,
                false,
                grpc_name(h, p),
                route,
            ));
        }
    }
}

/// Rebuilds `grpc_clusters` as a clone of `clusters` with only the differing
/// proxyless variants put back: the same contents, but the two maps share
/// every tree node the overlay does not touch, and later batches keep that
/// sharing for what they do not change. Done when the map was built from
/// empty (a startup), where the two were filled independently.
fn share_cluster_nodes(set: &mut ResourceSet) {
    let mut shared = set.clusters.clone();
    for (name, r) in set.grpc_clusters.iter() {
        if !set.clusters.get(name).is_some_and(|f| Arc::ptr_eq(f, r)) {
            shared.insert(r.clone());
        }
    }
    for name in set.clusters.keys() {
        if !set.grpc_clusters.contains_key(name) {
            shared.remove(name);
        }
    }
    set.grpc_clusters = shared;
}

/// The subsets of the DestinationRule that applies to `h` now.
fn current_subsets<M: ModelRead + ?Sized>(model: &M, h: &Hostname) -> BTreeSet<Arc<str>> {
    let dr = policy::rule_for(model, h);
    policy::subset_names(dr.as_deref()).into_iter().collect()
}
