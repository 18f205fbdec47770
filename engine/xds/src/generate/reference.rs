//! The from-scratch build: every resource of a model, computed with no state and
//! no caches. It is the reference the incremental [`Generator`] must equal byte
//! for byte (a property test checks it), and the simplest way to rebuild
//! everything.
//!
//! What it does NOT do: compute what changed (see `incremental`).
//!
//! [`Generator`]: super::Generator

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::common::{cluster_name, grpc_name, port_route_name, sidecar_listener_name};
use super::{GenError, GenOptions, ModelRead, eds, lds, policy, rds, served_ports, vhds};
use crate::{Resource, ResourceMap, ResourceSet, ResourceType};
use deltapilot_model::{Hostname, Resolution};

fn put(
    map: &mut ResourceMap,
    errors: &mut Vec<GenError>,
    t: ResourceType,
    name: std::sync::Arc<str>,
    built: Result<Bytes, String>,
) {
    match built {
        Ok(bytes) => {
            map.insert(std::sync::Arc::new(Resource::new(name, bytes)));
        }
        Err(reason) => errors.push(GenError::new(t, &name, reason)),
    }
}

/// Puts both variants of one cluster (see `policy::Clusters`): the full one in
/// `clusters`, and in `grpc_clusters` the very same resource unless the
/// proxyless variant's bytes differ. A failed build is reported once.
fn put_clusters(
    set: &mut ResourceSet,
    errors: &mut Vec<GenError>,
    name: std::sync::Arc<str>,
    (full, variant): policy::Clusters,
) {
    let full = match full {
        Ok(bytes) => std::sync::Arc::new(Resource::new(name.clone(), bytes)),
        Err(reason) => {
            errors.push(GenError::new(ResourceType::Cluster, &name, reason));
            return;
        }
    };
    set.clusters.insert(full.clone());
    match variant {
        Some(Ok(bytes)) if bytes != full.bytes => {
            set.grpc_clusters
                .insert(std::sync::Arc::new(Resource::new(name, bytes)));
        }
        Some(Err(reason)) => {
            errors.push(GenError::new(ResourceType::Cluster, &name, reason));
        }
        _ => {
            set.grpc_clusters.insert(full);
        }
    }
}

/// Builds every resource of `model` from scratch. Resources that fail to build are
/// left out and reported; everything else is returned.
pub fn build_all<M: ModelRead + ?Sized>(
    model: &M,
    opts: &GenOptions,
) -> (ResourceSet, Vec<GenError>) {
    let mut set = ResourceSet::default();
    let mut errors = Vec::new();
    let mut http: BTreeMap<u16, BTreeSet<Hostname>> = BTreeMap::new();
    let mut tcp: BTreeMap<u16, BTreeSet<Hostname>> = BTreeMap::new();
    let mut buffers = eds::HostEndpoints::new();
    model.for_each_service(&mut |svc| {
        let h = &svc.hostname;
        let mut eps = (svc.resolution == Resolution::StaticEndpoints).then(|| {
            buffers.refill(model, h);
            &mut buffers
        });
        let dr = policy::rule_for(model, h);
        let dr = dr.as_deref();
        let subsets = policy::subset_names(dr);
        for port in served_ports(svc) {
            let p = port.number;
            let name = cluster_name(p, h);
            let clusters = policy::cluster(svc, port, None, dr, opts);
            put_clusters(&mut set, &mut errors, name.clone(), clusters);
            if let Some(eps) = &mut eps {
                let t = ResourceType::Endpoint;
                let built = eds::load_assignment(eps, &name, port);
                put(&mut set.endpoints, &mut errors, t, name, built);
            }
            for s in &subsets {
                let Some((cluster, assignment)) =
                    policy::subset_resources(svc, port, s, dr, eps.as_deref_mut(), opts)
                else {
                    continue;
                };
                let name = policy::subset_cluster_name(p, s, h);
                put_clusters(&mut set, &mut errors, name.clone(), cluster);
                if let Some(built) = assignment {
                    let t = ResourceType::Endpoint;
                    put(&mut set.endpoints, &mut errors, t, name, built);
                }
            }
            if port.protocol.is_http() {
                let t = ResourceType::Listener;
                put(
                    &mut set.grpc_listeners,
                    &mut errors,
                    t,
                    grpc_name(h, p),
                    Ok(lds::grpc_listener(model, h, p)),
                );
                let t = ResourceType::Route;
                put(
                    &mut set.routes,
                    &mut errors,
                    t,
                    grpc_name(h, p),
                    Ok(rds::grpc_route_config(model, h, p)),
                );
                http.entry(p).or_default().insert(h.clone());
            } else {
                tcp.entry(p).or_default().insert(h.clone());
            }
        }
    });
    let empty = BTreeSet::new();
    let filters = lds::HttpFilters::of(model);
    let ports: BTreeSet<u16> = http.keys().chain(tcp.keys()).copied().collect();
    for p in ports {
        let hosts = http.get(&p);
        let any_http = hosts.is_some_and(|h| !h.is_empty());
        let tcp_hosts = tcp.get(&p).unwrap_or(&empty);
        if let Some(built) = lds::sidecar_listener(model, p, any_http, tcp_hosts, opts, filters) {
            let t = ResourceType::Listener;
            put(
                &mut set.sidecar_listeners,
                &mut errors,
                t,
                sidecar_listener_name(p),
                built,
            );
        }
        if let Some(hosts) = hosts.filter(|h| !h.is_empty()) {
            let fields = rds::port_vhost_fields(model, p, hosts);
            for (h, field) in &fields {
                let name = rds::vhds_name(h, p);
                let built = vhds::virtual_host(field, &name);
                let t = ResourceType::VirtualHost;
                put(&mut set.virtual_hosts, &mut errors, t, name, built);
            }
            let name = port_route_name(p);
            let inline = rds::assemble(name.to_string(), fields.into_iter().map(|(_, f)| f));
            let t = ResourceType::Route;
            put(&mut set.routes, &mut errors, t, name.clone(), Ok(inline));
            let vhds_config = Ok(vhds::route_config(&name));
            put(&mut set.vhds_routes, &mut errors, t, name, vhds_config);
        }
    }
    (set, errors)
}

/// One assignment slot as [`build_assignments`] found it: the assignment built
/// for a cluster, or `None` where the cluster has none (a DNS service).
pub type AssignmentSlot = (std::sync::Arc<str>, Option<std::sync::Arc<Resource>>);

/// Below this many hostnames [`build_assignments`] runs on the calling thread.
const ASSIGNMENTS_PARALLEL_MIN: usize = 256;

/// Builds only the assignments (EDS) of the services of `hosts`, one slot per
/// served port and per subset of the host's DestinationRule, on both cores for many hosts; in the order of `hosts`, then of
/// ports. Why: a replay that reuses stored resources and then folds endpoint
/// churn needs exactly these, and [`build_all`] over the same hosts also built
/// their clusters, listeners and routes only to drop them (two thirds of its
/// time). An assignment that fails to build is reported and its slot is `None`,
/// as the generator leaves it out.
pub fn build_assignments<M: ModelRead + Sync + ?Sized>(
    model: &M,
    hosts: &[&Hostname],
) -> (Vec<AssignmentSlot>, Vec<GenError>) {
    let one = |chunk: &[&Hostname]| {
        let mut out = Vec::new();
        let mut buffers = eds::HostEndpoints::new();
        for h in chunk {
            let Some(svc) = model.service(h) else {
                continue;
            };
            let mut eps = (svc.resolution == Resolution::StaticEndpoints).then(|| {
                buffers.refill(model, h);
                &mut buffers
            });
            let dr = policy::rule_for(model, h);
            let dr = dr.as_deref();
            let subsets = policy::subset_names(dr);
            for port in served_ports(&svc) {
                let name = cluster_name(port.number, h);
                let built = eps.as_mut().map(|eps| {
                    eds::load_assignment(eps, &name, port)
                        .map(|bytes| std::sync::Arc::new(Resource::new(name.clone(), bytes)))
                });
                out.push((name, built));
                for s in &subsets {
                    let Some(labels) = policy::subset_labels(dr, s) else {
                        continue;
                    };
                    let name = policy::subset_cluster_name(port.number, s, h);
                    let built = eps.as_mut().map(|eps| {
                        eds::load_assignment_matching(eps, &name, port, Some(labels))
                            .map(|bytes| std::sync::Arc::new(Resource::new(name.clone(), bytes)))
                    });
                    out.push((name, built));
                }
            }
        }
        out
    };
    let built =
        deltapilot_model::par::map_chunks(hosts, ASSIGNMENTS_PARALLEL_MIN, 2, one, |_, panic| {
            std::panic::resume_unwind(panic)
        });
    let mut errors = Vec::new();
    let slots = built
        .into_iter()
        .map(|(name, built)| match built {
            Some(Err(reason)) => {
                errors.push(GenError::new(ResourceType::Endpoint, &name, reason));
                (name, None)
            }
            Some(Ok(r)) => (name, Some(r)),
            None => (name, None),
        })
        .collect();
    (slots, errors)
}

#[cfg(test)]
mod tests {
    use deltapilot_proto::event::Payload;

    use super::*;
    use deltapilot_model::state::ModelState;
    use deltapilot_model::state::mk::{ep, svc};

    /// The assignments built alone equal those of the whole build: one slot per
    /// served cluster, the same bytes, `None` for a DNS service; a hostname with
    /// no service has no slot. Above the size that builds on two threads, so the
    /// chunks' order is checked too.
    #[test]
    fn assignments_alone_equal_the_whole_builds() {
        let mut events = Vec::new();
        for i in 0..300 {
            let host = format!("h{i:03}.ns");
            let mut e = svc("a", 0, "ns", &host, &[80, 81]);
            if i == 7
                && let Some(Payload::ServiceUpsert(u)) = &mut e.payload
                && let Some(s) = &mut u.service
            {
                s.resolution = deltapilot_proto::Resolution::Dns as i32;
            }
            events.push(e);
            for j in 0..2 {
                let addr = format!("10.{}.{}.{j}", i / 200, i % 200);
                events.push(ep("a", 0, &format!("ep/{i}/{j}"), &addr, &[&host]));
            }
        }
        let model = ModelState::from_events(&events);
        let (all, errors) = build_all(&model, &GenOptions::default());
        assert!(errors.is_empty(), "{errors:?}");
        let mut hosts: Vec<Hostname> = model.services().map(|s| s.hostname.clone()).collect();
        hosts.push(Hostname::new("no-such-service.ns"));
        let hosts: Vec<&Hostname> = hosts.iter().collect();

        let (slots, errors) = build_assignments(&model, &hosts);
        assert!(errors.is_empty(), "{errors:?}");
        let names: Vec<_> = slots.iter().map(|(n, _)| n.clone()).collect();
        let mut clusters: Vec<_> = all.clusters.keys().cloned().collect();
        clusters.sort();
        assert_eq!(names.len(), 600);
        assert_eq!(
            {
                let mut n = names.clone();
                n.sort();
                n
            },
            clusters,
            "one slot per cluster"
        );
        let mut dns = 0;
        for (name, built) in &slots {
            match (built, all.endpoints.get(name)) {
                (Some(r), Some(want)) => assert_eq!(r.bytes, want.bytes, "{name}"),
                (None, None) => dns += 1,
                (b, w) => panic!(
                    "{name}: built {:?}, whole build {:?}",
                    b.is_some(),
                    w.is_some()
                ),
            }
        }
        assert_eq!(dns, 2, "the DNS service's two ports have no assignment");
    }
}
