//! The ServiceDiscovery query API (the operations of Istio's `ServiceDiscovery`
//! interface) over a [`ModelState`], plus the accessors the xDS generator and debug
//! views use. Every result comes in a deterministic order.
//!
//! What it does NOT do: change state (see `apply`) or know about xDS.

use std::net::IpAddr;
use std::sync::Arc;

use super::{AddrKey, HKey, KeyText, ModelState};
use crate::model::{
    Config, Endpoint, EndpointRef, LabelSelector, Port, Protocol, Proxy, ProxyType, Service,
    ServiceInstance,
};

/// The workload label that declares management (health-check) ports: a list of port
/// numbers separated by `_` or `,` (Kubernetes label values cannot hold `,`, so
/// adapters of such registries use `_`), e.g. `8081_9090`. deltapilot's stand-in for
/// the probe ports Istio's Kubernetes registry reads from pod specs.
pub const MANAGEMENT_PORTS_LABEL: &str = "deltapilot.io/management-ports";

/// Entity counts, for debug views and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StateCounts {
    /// Hostnames with a merged service.
    pub services: usize,
    /// Raw service definitions (over all sources; ≥ `services`).
    pub service_definitions: usize,
    /// Stored endpoints.
    pub endpoints: usize,
    /// Hostnames that have at least one endpoint.
    pub hostnames_with_endpoints: usize,
    /// Stored config objects.
    pub configs: usize,
    /// Sources with resync bookkeeping.
    pub sources: usize,
}

impl ModelState {
    /// Every merged service, sorted by hostname (Istio's `Services()`).
    pub fn services(&self) -> impl ExactSizeIterator<Item = &Arc<Service>> + '_ {
        self.services.values()
    }

    /// The merged service of a hostname (Istio's `GetService`). Accepts `&str` or
    /// `&Hostname`.
    pub fn get_service<Q: KeyText + ?Sized>(&self, host: &Q) -> Option<Arc<Service>> {
        self.claims_named(host.key_text())
            .and_then(|l| l.first())
            .map(|(_, s)| s.clone())
    }

    /// How many stored endpoints are held: none of the hostnames they name has a
    /// service yet, so they serve nothing until one does (see the fold's
    /// `unknown_service` rule). Normal for a moment on a multi-partition log; a
    /// steady count above 0 means a registry writes endpoints for services it
    /// never defines. Cost: the hostnames without a service, not the whole state.
    pub fn held_endpoints(&self) -> usize {
        let mut held = std::collections::BTreeSet::new();
        for (hk, listing) in self.raw_endpoints.listings() {
            if *hk == HKey::MIN || self.claims.get(hk).is_some_and(|c| !c.is_empty()) {
                continue;
            }
            for (key, cold) in listing {
                if cold
                    .shape
                    .services
                    .iter()
                    .all(|(_, h)| self.get_service(h).is_none())
                {
                    held.insert(*key);
                }
            }
        }
        held.len()
    }

    /// Every definition of a hostname, winner first (the merge order), with the
    /// source that wrote it: for debug views that explain a merge.
    pub fn service_definitions<Q: KeyText + ?Sized>(
        &self,
        host: &Q,
    ) -> Vec<(Arc<str>, Arc<Service>)> {
        self.claims_named(host.key_text())
            .map(|l| {
                l.iter()
                    .map(|(c, s)| (c.source.clone(), s.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The endpoints of a hostname (the union over sources), in the order of
    /// their keys' hashes: deterministic, not alphabetical (the index holds
    /// hashes; see [`ModelState::endpoints_of_sorted`]). Yields endpoints even
    /// for a hostname that has no merged service right now.
    pub fn endpoints_of<Q: KeyText + ?Sized>(
        &self,
        host: &Q,
    ) -> impl Iterator<Item = Endpoint> + '_ {
        self.endpoint_refs_of(host)
            .into_iter()
            .map(|e| e.to_endpoint())
    }

    /// [`ModelState::endpoints_of`], borrowed: for the xDS generator, which
    /// keeps nothing of them (see [`EndpointRef`]). The records are looked up
    /// all at once (see `EndpointStore::hot_each`): one after another, each
    /// waited on its own cache misses.
    pub fn endpoint_refs_of<Q: KeyText + ?Sized>(&self, host: &Q) -> Vec<EndpointRef<'_>> {
        let Some(listing) = self.raw_endpoints.listing_named(host.key_text()) else {
            return Vec::new();
        };
        let (keys, colds): (Vec<HKey>, Vec<_>) = listing.iter().map(|(k, c)| (*k, c)).unzip();
        let mut hot = Vec::with_capacity(keys.len());
        self.raw_endpoints.hot_each(&keys, &mut hot);
        colds
            .into_iter()
            .zip(hot)
            .filter_map(|(cold, hot)| Some(cold.endpoint_ref(hot?)))
            .collect()
    }

    /// [`ModelState::endpoints_of`], sorted by endpoint key: for views people
    /// read.
    pub fn endpoints_of_sorted<Q: KeyText + ?Sized>(&self, host: &Q) -> Vec<Endpoint> {
        let mut eps: Vec<Endpoint> = self.endpoints_of(host).collect();
        eps.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        eps
    }

    /// Number of endpoints of a hostname.
    pub fn endpoint_count<Q: KeyText + ?Sized>(&self, host: &Q) -> usize {
        self.raw_endpoints
            .listing_named(host.key_text())
            .map_or(0, |m| m.len())
    }

    /// The endpoints at an address, in the order of their keys' hashes (the
    /// callers that show them sort them). The first address query on a state
    /// builds its address index (O(endpoints); see `addr_index`).
    pub fn endpoints_at(&self, addr: IpAddr) -> impl Iterator<Item = Endpoint> + '_ {
        let at = AddrKey::of(addr);
        self.endpoints_by_addr
            .get(&self.raw_endpoints)
            .range((at, HKey::MIN)..)
            .take_while(move |(a, _)| *a == at)
            .filter_map(|(_, key)| self.raw_endpoints.endpoint(key))
    }

    /// Every config object, sorted by key (`cfg/<kind>/<namespace>/<name>`).
    pub fn configs(&self) -> impl ExactSizeIterator<Item = &Arc<Config>> + '_ {
        self.raw_configs.values().map(|w| &w.value)
    }

    /// The instances of `port` (a service port number) of `host` whose workload
    /// labels match any of `selectors` (Istio's `InstancesByPort` with a
    /// `labels.Collection`: no selector at all matches every instance), sorted
    /// by endpoint key. Empty if the hostname has no merged service or the
    /// service no such port. Unhealthy instances are included; callers filter
    /// on `endpoint.health`.
    pub fn instances_by_port(
        &self,
        host: &str,
        port: u16,
        selectors: &[LabelSelector],
    ) -> Vec<ServiceInstance> {
        let Some(svc) = self.get_service(host) else {
            return Vec::new();
        };
        let Some(sp) = svc.port(port) else {
            return Vec::new();
        };
        self.endpoints_of_sorted(host)
            .into_iter()
            .filter(|ep| selectors.is_empty() || selectors.iter().any(|s| s.matches(&ep.labels)))
            .map(|ep| instance(&svc, sp, Arc::new(ep)))
            .collect()
    }

    /// The instances running on a proxy: every (service, port) instance whose
    /// endpoint address is one of the proxy's IPs (Istio's
    /// `GetProxyServiceInstances`), sorted by (hostname, port, endpoint key). None
    /// for a router (gateway) proxy, which fronts no workload of its own.
    pub fn proxy_service_instances(&self, proxy: &Proxy) -> Vec<ServiceInstance> {
        if proxy.proxy_type == ProxyType::Router {
            return Vec::new();
        }
        let mut out = Vec::new();
        for ip in &proxy.ips {
            for ep in self.endpoints_at(*ip) {
                let ep = Arc::new(ep);
                for (_, host) in &ep.services {
                    let Some(svc) = self.get_service(host) else {
                        continue;
                    };
                    out.extend(svc.ports.iter().map(|p| instance(&svc, p, ep.clone())));
                }
            }
        }
        out.sort_by(|a, b| {
            (&a.service.hostname, a.service_port.number, &a.endpoint.key).cmp(&(
                &b.service.hostname,
                b.service_port.number,
                &b.endpoint.key,
            ))
        });
        out.dedup_by(|a, b| {
            a.service.hostname == b.service.hostname
                && a.service_port.number == b.service_port.number
                && a.endpoint.key == b.endpoint.key
        });
        out
    }

    /// The management (health-check) ports of the workload(s) at `addr` (Istio's
    /// `ManagementPorts`), sorted by number, without duplicates. They come from the
    /// [`MANAGEMENT_PORTS_LABEL`] workload label; entries that are not a port number
    /// in 1..=65535 are ignored. Each is reported as TCP and named
    /// `mgmt-<number>-tcp`, as Istio names probe ports. Empty when no workload at
    /// that address declares any: deltapilot does not see probe definitions.
    pub fn management_ports(&self, addr: IpAddr) -> Vec<Port> {
        let mut numbers: Vec<u16> = self
            .endpoints_at(addr)
            .filter_map(|ep| ep.labels.get(MANAGEMENT_PORTS_LABEL).cloned())
            .flat_map(|v| {
                v.split(['_', ','])
                    .filter_map(|p| p.trim().parse::<u16>().ok())
                    .collect::<Vec<_>>()
            })
            .filter(|n| *n > 0)
            .collect();
        numbers.sort_unstable();
        numbers.dedup();
        numbers
            .into_iter()
            .map(|number| Port {
                name: Arc::from(format!("mgmt-{number}-tcp").as_str()),
                number,
                protocol: Protocol::Tcp,
            })
            .collect()
    }

    /// Entity counts (O(1)).
    pub fn counts(&self) -> super::StateCounts {
        StateCounts {
            services: self.services.len(),
            service_definitions: self.raw_services.len(),
            endpoints: self.raw_endpoints.len(),
            hostnames_with_endpoints: self.raw_endpoints.host_count(),
            configs: self.raw_configs.len(),
            sources: self.sources.len(),
        }
    }
}

fn instance(svc: &Arc<Service>, port: &Port, ep: Arc<Endpoint>) -> ServiceInstance {
    ServiceInstance {
        service: svc.clone(),
        service_port: port.clone(),
        target_port: ep.target_port(port),
        endpoint: ep,
    }
}
