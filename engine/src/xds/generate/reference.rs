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
use super::{GenError, GenOptions, ModelRead, cds, eds, lds, rds, served_ports};
use crate::model::{Hostname, Resolution};
use crate::xds::{Resource, ResourceMap, ResourceSet, ResourceType};

fn put(
    map: &mut ResourceMap,
    errors: &mut Vec<GenError>,
    t: ResourceType,
    name: std::sync::Arc<str>,
    built: Result<Bytes, String>,
) {
    match built {
        Ok(bytes) => {
            map.insert(
                name.clone(),
                std::sync::Arc::new(Resource::new(name, bytes)),
            );
        }
        Err(reason) => errors.push(GenError::new(t, &name, reason)),
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
    model.for_each_service(&mut |svc| {
        let h = &svc.hostname;
        let eps = (svc.resolution == Resolution::StaticEndpoints)
            .then(|| eds::HostEndpoints::collect(model, h));
        for port in served_ports(svc) {
            let p = port.number;
            let t = ResourceType::Cluster;
            put(
                &mut set.clusters,
                &mut errors,
                t,
                cluster_name(p, h),
                cds::cluster(svc, port, opts),
            );
            if let Some(eps) = &eps {
                let t = ResourceType::Endpoint;
                let built = eds::load_assignment(eps, svc, port);
                put(
                    &mut set.endpoints,
                    &mut errors,
                    t,
                    cluster_name(p, h),
                    built,
                );
            }
            if port.protocol.is_http() {
                let t = ResourceType::Listener;
                put(
                    &mut set.grpc_listeners,
                    &mut errors,
                    t,
                    grpc_name(h, p),
                    Ok(lds::grpc_listener(h, p)),
                );
                let t = ResourceType::Route;
                put(
                    &mut set.routes,
                    &mut errors,
                    t,
                    grpc_name(h, p),
                    Ok(rds::grpc_route_config(h, p)),
                );
                http.entry(p).or_default().insert(h.clone());
            } else {
                tcp.entry(p).or_default().insert(h.clone());
            }
        }
    });
    let empty = BTreeSet::new();
    let ports: BTreeSet<u16> = http.keys().chain(tcp.keys()).copied().collect();
    for p in ports {
        let hosts = http.get(&p);
        let any_http = hosts.is_some_and(|h| !h.is_empty());
        let tcp_hosts = tcp.get(&p).unwrap_or(&empty);
        if let Some(built) = lds::sidecar_listener(p, any_http, tcp_hosts, opts) {
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
            let t = ResourceType::Route;
            put(
                &mut set.routes,
                &mut errors,
                t,
                port_route_name(p),
                Ok(rds::port_route_config(p, hosts)),
            );
        }
    }
    (set, errors)
}
