//! The slow-changing part of an endpoint (ports, labels, locality, identity,
//! services), shared by `Arc` between successive versions of that endpoint.
//!
//! Why a separate shared value: the common endpoint event flips health or weight
//! and leaves everything else as it was. With those fields inline, every such event
//! built a dozen identical strings and maps, compared them with the stored ones
//! (a cache miss per string at 100k endpoints) and freed the old ones later. Now the
//! fold recognises an unchanged shape by a digest of the payload fields it was
//! converted from ([`EndpointShape::source_digest`]) and shares it: one pointer
//! copy. [`EndpointShape::digest`] is a digest of the converted content, computed
//! once, so the state's content hash never re-reads the shape either.
//!
//! What it does NOT do: validate (see `convert`) or decide what a change is (the
//! fold compares whole endpoints; two shapes are equal when their content is,
//! whatever they were converted from).

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use deltapilot_proto as pb;

use crate::canon::Canon;
use crate::keys::HKey;

use super::{Hostname, Locality, Port, SortedMap, WorkloadLabels};

/// Ports, labels, locality, identity and services of an endpoint.
#[derive(Debug, Clone)]
pub struct EndpointShape {
    /// Service port name → target port on this workload. A service port without an
    /// entry uses the service port number.
    pub ports: SortedMap<Arc<str>, u16>,
    /// Workload labels.
    pub labels: WorkloadLabels,
    /// Topology.
    pub locality: Locality,
    /// Identity, e.g. `spiffe://cluster.local/ns/default/sa/reviews`.
    pub service_account: Arc<str>,
    /// The services it belongs to: (namespace, hostname), sorted, unique.
    pub services: Vec<(Arc<str>, Hostname)>,
    digest: u64,
    source_digest: u128,
    /// The key of its first service's hostname, so that the fold's admission
    /// check (does one of its services exist) reads no hostname text.
    first_host: Option<HKey>,
}

impl EndpointShape {
    /// A shape from validated parts. `source_digest` identifies the payload it was
    /// converted from ([`source_digest`]; 0 when it was not converted from one).
    pub fn new(
        ports: SortedMap<Arc<str>, u16>,
        labels: WorkloadLabels,
        locality: Locality,
        service_account: Arc<str>,
        services: Vec<(Arc<str>, Hostname)>,
        source_digest: u128,
    ) -> Self {
        let mut h = Canon::new();
        h.len(ports.len());
        for (name, port) in &ports {
            h.str(name);
            h.u32(u32::from(*port));
        }
        h.len(labels.len());
        for (k, v) in &labels {
            h.str(k);
            h.str(v);
        }
        h.str(&locality.region);
        h.str(&locality.zone);
        h.str(&locality.subzone);
        h.str(&service_account);
        h.len(services.len());
        for (ns, host) in &services {
            h.str(ns);
            h.str(host.as_str());
        }
        let first_host = services.first().map(|(_, host)| HKey::of(host.as_str()));
        EndpointShape {
            ports,
            labels,
            locality,
            service_account,
            services,
            digest: h.digest(),
            source_digest,
            first_host,
        }
    }

    /// The port this shape's workloads serve `port` of a service on: the
    /// mapping for the port's name, else the service port number.
    pub fn target_port(&self, port: &Port) -> u16 {
        self.ports.get(&port.name).copied().unwrap_or(port.number)
    }

    /// Digest of the content (not of what it was converted from): equal shapes have
    /// equal digests.
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// Digest of the payload fields this shape was converted from (0 if none): a
    /// payload with the same digest converts to this very shape.
    pub fn source_digest(&self) -> u128 {
        self.source_digest
    }

    /// The key of its first service's hostname ([`HKey::of`]).
    pub fn first_host(&self) -> Option<HKey> {
        self.first_host
    }
}

impl PartialEq for EndpointShape {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
            && self.ports == other.ports
            && self.labels == other.labels
            && self.locality == other.locality
            && self.service_account == other.service_account
            && self.services == other.services
    }
}

impl Eq for EndpointShape {}

impl Hash for EndpointShape {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.digest);
    }
}

/// Reads the first cache lines [`source_digest`] reads of each of the payload's
/// two maps (their tree nodes, a few hundred bytes each, where the entries'
/// string headers sit), and returns a value made of them that means nothing,
/// for the caller to keep (`std::hint::black_box`) so the reads stay. Why: the
/// digest, reading a map's entries, waited for the node's cache misses in turn;
/// reading those of several payloads first, with nothing depending on the
/// previous read, lets the processor wait for all of them at once. (The
/// strings' text, a run of small allocations in the order the payloads were
/// decoded, is streamed in by the processor's own prefetching.)
pub fn warm_source(e: &pb::Endpoint) -> u64 {
    let ports = e
        .ports
        .first_key_value()
        .map_or(0, |(k, v)| k.len() ^ *v as usize);
    let ports_end = e.ports.last_key_value().map_or(0, |(k, _)| k.len());
    let labels = e
        .labels
        .first_key_value()
        .map_or(0, |(k, v)| k.len() ^ v.len());
    let labels_end = e
        .labels
        .last_key_value()
        .map_or(0, |(k, v)| k.len() ^ v.len());
    (ports ^ ports_end ^ labels ^ labels_end) as u64
}

/// The 128-bit digest of the payload fields an [`EndpointShape`] is converted
/// from: ports, labels, locality, service account and services, as written. Two
/// payloads with the same digest convert to equal shapes; for 128 bits the chance
/// that two different payloads collide is far below the rate of undetected
/// hardware errors, as for the state's hashed keys.
pub fn source_digest(e: &pb::Endpoint) -> u128 {
    // Length-prefixed fields in one buffer and one hash: a streaming hasher fed
    // field by field cost several times more per event.
    let mut h = Canon::new();
    h.len(e.ports.len());
    for (name, n) in &e.ports {
        h.str(name);
        h.u32(*n);
    }
    h.len(e.labels.len());
    for (k, v) in &e.labels {
        h.str(k);
        h.str(v);
    }
    match &e.locality {
        Some(l) => {
            h.u8(1);
            h.str(&l.region);
            h.str(&l.zone);
            h.str(&l.subzone);
        }
        None => h.u8(0),
    }
    h.str(&e.service_account);
    h.len(e.services.len());
    for s in &e.services {
        h.str(&s.namespace);
        h.str(&s.hostname);
    }
    h.digest128()
}
