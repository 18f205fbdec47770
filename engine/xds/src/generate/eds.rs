//! EDS: one ClusterLoadAssignment per EDS cluster, named like the cluster.
//!
//! Shape rules, each one a rejection (or a silent black hole) seen in real clients:
//! - endpoints are grouped by locality, groups sorted by (region, zone, subzone);
//!   `locality` is set on every group, even when all its fields are empty
//!   (proxyless gRPC NACKs a group without one);
//! - every endpoint and every group has `load_balancing_weight` > 0 (gRPC drops
//!   weight-0 endpoints and localities); a group's weight is the sum of its
//!   endpoints' weights, and a total above `u32::MAX` is an error (Envoy rejects it);
//! - the socket address is the endpoint IP and its target port for this service
//!   port ([`Endpoint::target_port`](deltapilot_model::Endpoint::target_port));
//! - one endpoint per (address, port): when several workloads (say, from two
//!   sources) claim the same socket, the one with the smallest entity key wins
//!   (gRPC NACKs duplicate addresses, gRFC A61);
//! - health: Healthy→HEALTHY, Unhealthy→UNHEALTHY, Draining→DRAINING,
//!   NotReady→UNHEALTHY. Not-ready endpoints are kept (visible in Envoy's
//!   `/clusters` for debugging) but receive no traffic, because clusters disable
//!   panic mode (see `cds`).
//! - a cluster without endpoints still gets an assignment with an empty list, so
//!   Envoy finishes warming the cluster instead of waiting for it.
//!
//! - a DestinationRule subset's assignment (`outbound|<port>|<subset>|<host>`)
//!   holds only the endpoints whose labels include the subset's labels, chosen
//!   before the socket dedup ([`load_assignment_matching`]).
//!
//! What it does NOT do: priorities or locality-aware failover (everything is
//! priority 0: locality settings need per-proxy views), subset metadata.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::{
    Address, HealthStatus, SocketAddress, address,
    socket_address::{PortSpecifier, Protocol as SocketProtocol},
};
use envoy_types::pb::envoy::config::endpoint::v3::Endpoint as PbEndpoint;

use super::ModelRead;
use super::wire::{
    len_field_size, put_len_header, put_str_field, put_varint_field, put_varint_field_always,
    str_field_size, varint_field_size, varint_field_size_always,
};
use deltapilot_model::{EndpointRef, EndpointShape, Health, Hostname, Locality, Port};

/// An Envoy endpoint at `address:port` (TCP).
pub(crate) fn socket_endpoint(address: String, port: u16) -> PbEndpoint {
    PbEndpoint {
        address: Some(Address {
            address: Some(address::Address::SocketAddress(SocketAddress {
                protocol: SocketProtocol::Tcp as i32,
                address,
                port_specifier: Some(PortSpecifier::PortValue(u32::from(port))),
                ..Default::default()
            })),
        }),
        ..Default::default()
    }
}

/// Appends the textual form of an IP address. IPv4, by far the common case, is
/// written by hand: `Display` goes through the formatting machinery, which was a
/// tenth of an endpoint-batch regeneration.
fn push_ip(out: &mut String, ip: IpAddr) {
    let IpAddr::V4(v4) = ip else {
        use std::fmt::Write;
        let _ = write!(out, "{ip}");
        return;
    };
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        if octet >= 100 {
            out.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            out.push(char::from(b'0' + octet / 10 % 10));
        }
        out.push(char::from(b'0' + octet % 10));
    }
}

/// The Envoy health status for a registry health.
pub(crate) fn health_status(h: Health) -> HealthStatus {
    match h {
        Health::Healthy => HealthStatus::Healthy,
        Health::Unhealthy | Health::NotReady => HealthStatus::Unhealthy,
        Health::Draining => HealthStatus::Draining,
    }
}

/// One member of an assignment: endpoint `at` of the host at its socket for one
/// service port, with its locality's rank.
#[derive(Debug, Clone, Copy)]
struct Member {
    rank: u32,
    address: IpAddr,
    port: u16,
    at: u32,
}

/// The endpoints of one service, read from the model once and shared by the
/// assignments of all its ports, with the buffers those assignments reuse.
///
/// Endpoints are also grouped by shape (by pointer): a host's endpoints share a
/// few shapes, and what only the shape decides (the locality's order, the
/// target port) is worked out once per shape. Comparing localities and looking
/// up port names per endpoint and per port was a large part of an endpoint
/// batch's rebuild at 100k.
pub(crate) struct HostEndpoints<'a> {
    eps: Vec<EndpointRef<'a>>,
    /// `shape_of[i]` indexes the shape of `eps[i]` in `shapes`.
    shape_of: Vec<u32>,
    /// The distinct shapes, each with the rank of its locality among the
    /// host's: equal localities have equal ranks, and ranks sort like
    /// localities.
    shapes: Vec<(&'a EndpointShape, u32)>,
    /// Per shape, its target port for the port being built.
    target: Vec<u16>,
    /// Per shape, whether its labels match the subset being built.
    keep: Vec<bool>,
    /// Scratch for grouping by shape: (shape pointer, endpoint index).
    by_shape: Vec<(*const EndpointShape, u32)>,
    /// Scratch for ranking the shapes: shape indexes in locality order.
    order: Vec<u32>,
    members: Vec<Member>,
    /// The assignment being written: copied out at its exact size, so a
    /// rebuild keeps no spare capacity per resource.
    buf: Vec<u8>,
    /// One locality group's endpoints, written before the group's header
    /// (whose length they give).
    lbs: Vec<u8>,
    ip: String,
}

/// Bytes an endpoint takes in an assignment, at most (an IPv6 address and
/// large weight and port), to size the buffers once.
const ENDPOINT_BYTES: usize = 72;

impl<'a> HostEndpoints<'a> {
    /// Holding no host yet: fill it with [`HostEndpoints::refill`], once per
    /// host, reusing its buffers. Why reuse: a batch rebuilds the assignments
    /// of a hundred hosts, and allocating (and freeing) eight buffers per host
    /// was a large part of grouping each host's endpoints.
    pub(crate) fn new() -> Self {
        HostEndpoints {
            eps: Vec::new(),
            shape_of: Vec::new(),
            shapes: Vec::new(),
            target: Vec::new(),
            keep: Vec::new(),
            by_shape: Vec::new(),
            order: Vec::new(),
            members: Vec::new(),
            buf: Vec::new(),
            lbs: Vec::new(),
            ip: String::with_capacity(39),
        }
    }

    /// Every endpoint of `host`, borrowed from `model`, in place of what it
    /// held; the buffers are kept.
    pub(crate) fn refill<M: ModelRead + ?Sized>(&mut self, model: &'a M, host: &Hostname) {
        self.fill(model.host_endpoints(host));
    }

    fn fill(&mut self, eps: Vec<EndpointRef<'a>>) {
        let by_shape = &mut self.by_shape;
        by_shape.clear();
        by_shape.extend(
            eps.iter()
                .enumerate()
                .map(|(i, e)| (Arc::as_ptr(e.shape), i as u32)),
        );
        by_shape.sort_unstable();
        self.shape_of.clear();
        self.shape_of.resize(eps.len(), 0);
        let shapes = &mut self.shapes;
        shapes.clear();
        for run in by_shape.chunk_by(|a, b| a.0 == b.0) {
            for &(_, i) in run {
                self.shape_of[i as usize] = shapes.len() as u32;
            }
            shapes.push((&**eps[run[0].1 as usize].shape, 0));
        }
        let order = &mut self.order;
        order.clear();
        order.extend(0..shapes.len() as u32);
        order.sort_unstable_by(|&a, &b| {
            let locality = |i: u32| &shapes[i as usize].0.locality;
            locality(a).cmp(locality(b))
        });
        let mut rank = 0;
        for w in order.windows(2) {
            let (prev, at) = (w[0] as usize, w[1] as usize);
            if shapes[prev].0.locality != shapes[at].0.locality {
                rank += 1;
            }
            shapes[at].1 = rank;
        }
        let n = eps.len();
        self.members.clear();
        self.members.reserve(n);
        self.buf.clear();
        self.buf.reserve(128 + n * ENDPOINT_BYTES);
        self.lbs.clear();
        self.lbs.reserve(n * ENDPOINT_BYTES);
        self.eps = eps;
    }

    /// The members of `port` into `self.members`: one per socket (smallest key
    /// wins), grouped by locality in locality order, socket order within a
    /// group. (After the dedup every socket is unique, so the second sort is
    /// the old stable sort by locality of the socket-sorted list.)
    ///
    /// With a subset's `labels`, only the endpoints whose labels include them
    /// all are members (chosen before the socket dedup, so a matching endpoint
    /// is never hidden by a non-matching one on the same socket).
    fn members(&mut self, port: &Port, labels: Option<&SubsetLabels>) {
        self.target.clear();
        let target = self.shapes.iter().map(|(shape, _)| shape.target_port(port));
        self.target.extend(target);
        self.keep.clear();
        let keep = self
            .shapes
            .iter()
            .map(|(shape, _)| labels.is_none_or(|l| labels_match(l, shape)));
        self.keep.extend(keep);
        let eps = &self.eps;
        let (shapes, target, keep) = (&self.shapes, &self.target, &self.keep);
        self.members.clear();
        self.members.extend(
            eps.iter()
                .zip(&self.shape_of)
                .enumerate()
                .filter(|(_, (_, s))| keep[**s as usize])
                .map(|(i, (e, &s))| Member {
                    rank: shapes[s as usize].1,
                    address: e.address,
                    port: target[s as usize],
                    at: i as u32,
                }),
        );
        self.members.sort_unstable_by(|a, b| {
            (a.address, a.port)
                .cmp(&(b.address, b.port))
                .then_with(|| eps[a.at as usize].key.cmp(eps[b.at as usize].key))
        });
        self.members
            .dedup_by(|later, first| later.address == first.address && later.port == first.port);
        self.members
            .sort_unstable_by_key(|m| (m.rank, m.address, m.port));
    }
}

/// Builds and encodes the assignment `name` for one EDS port of a service
/// whose endpoints are `eps`, writing the protobuf directly (see `wire`);
/// byte-identical to encoding the equivalent prost message (the tests compare
/// the two).
pub(crate) fn load_assignment(
    eps: &mut HostEndpoints<'_>,
    name: &str,
    port: &Port,
) -> Result<Bytes, String> {
    load_assignment_matching(eps, name, port, None)
}

/// A subset's label selector: every pair must be among an endpoint's labels.
pub(crate) type SubsetLabels = std::collections::BTreeMap<String, String>;

/// Whether an endpoint of `shape` carries every label of `labels`.
pub(crate) fn labels_match(labels: &SubsetLabels, shape: &EndpointShape) -> bool {
    labels
        .iter()
        .all(|(k, v)| shape.labels.get(k.as_str()).is_some_and(|x| **x == **v))
}

/// [`load_assignment`] holding only the endpoints whose labels match `labels`
/// (a subset's assignment); `None` holds them all.
pub(crate) fn load_assignment_matching(
    eps: &mut HostEndpoints<'_>,
    name: &str,
    port: &Port,
    labels: Option<&SubsetLabels>,
) -> Result<Bytes, String> {
    eps.members(port, labels);
    let HostEndpoints {
        eps,
        members,
        buf: out,
        lbs,
        ip,
        ..
    } = eps;
    out.clear();
    // ClusterLoadAssignment { cluster_name = 1, endpoints = 2 }
    put_str_field(out, 1, name);
    let mut total: u64 = 0;
    for group in members.chunk_by(|a, b| a.rank == b.rank) {
        lbs.clear();
        let mut weight: u64 = 0;
        for m in group {
            let e = &eps[m.at as usize];
            let w = u64::from(e.weight.max(1));
            weight += w;
            ip.clear();
            push_ip(ip, m.address);
            let health = health_status(e.health) as i32 as u64;
            // SocketAddress { protocol = 1 (TCP = 0, omitted), address = 2, port_value = 3 }
            let socket = str_field_size(2, ip) + varint_field_size_always(3, u64::from(m.port));
            let address = len_field_size(1, socket); // Address { socket_address = 1 }
            let endpoint = len_field_size(1, address); // Endpoint { address = 1 }
            let weight_msg = varint_field_size(1, w); // UInt32Value { value = 1 }
            // LbEndpoint { endpoint = 1, health_status = 2, load_balancing_weight = 4 }
            let lb = len_field_size(1, endpoint)
                + varint_field_size(2, health)
                + len_field_size(4, weight_msg);
            put_len_header(lbs, 2, lb); // LocalityLbEndpoints.lb_endpoints = 2
            put_len_header(lbs, 1, endpoint);
            put_len_header(lbs, 1, address);
            put_len_header(lbs, 1, socket);
            put_str_field(lbs, 2, ip);
            put_varint_field_always(lbs, 3, u64::from(m.port));
            put_varint_field(lbs, 2, health);
            put_len_header(lbs, 4, weight_msg);
            put_varint_field(lbs, 1, w);
        }
        total += weight;
        let l: &Locality = &eps[group[0].at as usize].shape.locality;
        // Locality { region = 1, zone = 2, sub_zone = 3 }
        let locality = str_field_size(1, &l.region)
            + str_field_size(2, &l.zone)
            + str_field_size(3, &l.subzone);
        // Cannot truncate once `total` passes the check below.
        let group_weight = u64::from(u32::try_from(weight).unwrap_or(u32::MAX));
        let weight_msg = varint_field_size(1, group_weight);
        // LocalityLbEndpoints { locality = 1, lb_endpoints = 2, load_balancing_weight = 3 }
        let size = len_field_size(1, locality) + lbs.len() + len_field_size(3, weight_msg);
        put_len_header(out, 2, size);
        put_len_header(out, 1, locality);
        put_str_field(out, 1, &l.region);
        put_str_field(out, 2, &l.zone);
        put_str_field(out, 3, &l.subzone);
        out.extend_from_slice(lbs);
        put_len_header(out, 3, weight_msg);
        put_varint_field(out, 1, group_weight);
    }
    if total > u64::from(u32::MAX) {
        return Err(format!(
            "endpoint weights of {name} sum to {total}, above the {} Envoy accepts",
            u32::MAX
        ));
    }
    Ok(Bytes::copy_from_slice(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::Locality as PbLocality;
    use envoy_types::pb::envoy::config::endpoint::v3::{
        ClusterLoadAssignment, LbEndpoint, LocalityLbEndpoints, lb_endpoint::HostIdentifier,
    };
    use envoy_types::pb::google::protobuf::UInt32Value;

    use super::super::common::{cluster_name, encode};
    use deltapilot_model::{Endpoint, Protocol, Resolution, Service};

    /// The members the shape rules ask for, chosen the plain way: every
    /// endpoint at its socket, sorted by (address, port, key), one per socket
    /// (the first: smallest key), then stably sorted by locality.
    fn reference_members<'e>(eps: &'e [Endpoint], port: &Port) -> Vec<(IpAddr, u16, &'e Endpoint)> {
        let mut members: Vec<(IpAddr, u16, &Endpoint)> = eps
            .iter()
            .map(|e| (e.address, e.target_port(port), e))
            .collect();
        members.sort_by(|a, b| (a.0, a.1, &a.2.key).cmp(&(b.0, b.1, &b.2.key)));
        members.dedup_by(|later, first| later.0 == first.0 && later.1 == first.1);
        members.sort_by(|a, b| a.2.locality.cmp(&b.2.locality));
        members
    }

    /// The same assignment built as prost messages from the plainly chosen
    /// members: what the direct writer must equal byte for byte.
    fn reference(eps: &[Endpoint], svc: &Service, port: &Port) -> Bytes {
        let endpoints = reference_members(eps, port)
            .chunk_by(|a, b| a.2.locality == b.2.locality)
            .map(|group| {
                let l = &group[0].2.locality;
                let weight: u64 = group.iter().map(|m| u64::from(m.2.weight.max(1))).sum();
                LocalityLbEndpoints {
                    locality: Some(PbLocality {
                        region: l.region.to_string(),
                        zone: l.zone.to_string(),
                        sub_zone: l.subzone.to_string(),
                    }),
                    lb_endpoints: group
                        .iter()
                        .map(|(a, p, e)| LbEndpoint {
                            host_identifier: Some(HostIdentifier::Endpoint(socket_endpoint(
                                a.to_string(),
                                *p,
                            ))),
                            health_status: health_status(e.health) as i32,
                            load_balancing_weight: Some(UInt32Value {
                                value: e.weight.max(1),
                            }),
                            ..Default::default()
                        })
                        .collect(),
                    load_balancing_weight: Some(UInt32Value {
                        value: u32::try_from(weight).unwrap_or(u32::MAX),
                    }),
                    ..Default::default()
                }
            })
            .collect();
        encode(&ClusterLoadAssignment {
            cluster_name: cluster_name(port.number, &svc.hostname).to_string(),
            endpoints,
            ..Default::default()
        })
    }

    fn endpoint(i: usize) -> Endpoint {
        let localities = [
            ("", "", ""),
            ("us-east1", "b", ""),
            ("eu", "x", "rack-7"),
            ("", "z", ""),
        ];
        let (region, zone, subzone) = localities[i % localities.len()];
        let addresses = [
            "10.0.0.1",
            "10.0.0.2",
            "192.168.100.200",
            "fd00::1",
            "2001:db8::ff",
        ];
        let mut ports = std::collections::BTreeMap::new();
        if i.is_multiple_of(3) {
            ports.insert(Arc::from("http"), 8080 + (i % 2) as u16);
        }
        Endpoint {
            key: Arc::from(format!("ep/{i}")),
            address: addresses[i % addresses.len()].parse().expect("ip"),
            weight: [1, 2, 300, 70_000, 0][i % 5],
            health: [
                Health::Healthy,
                Health::Unhealthy,
                Health::Draining,
                Health::NotReady,
            ][i % 4],
            shape: Arc::new(EndpointShape::new(
                ports.into(),
                Default::default(),
                Locality {
                    region: Arc::from(region),
                    zone: Arc::from(zone),
                    subzone: Arc::from(subzone),
                },
                Arc::from(""),
                Vec::new(),
                0,
            )),
        }
    }

    #[test]
    fn direct_writer_equals_prost() {
        let svc = Service {
            hostname: Hostname::new("a.ns.svc.cluster.local"),
            namespace: Arc::from("ns"),
            ports: Vec::new(),
            labels: Default::default(),
            resolution: Resolution::StaticEndpoints,
        };
        let port = Port {
            name: Arc::from("http"),
            number: 80,
            protocol: Protocol::Http,
        };
        let other = Port {
            name: Arc::from("grpc"),
            number: 9090,
            protocol: Protocol::Grpc,
        };
        let hosts: Vec<Vec<Endpoint>> = [0, 1, 2, 7, 40, 200, 3, 0, 9]
            .into_iter()
            .map(|n| {
                let mut eps: Vec<Endpoint> = (0..n).map(endpoint).collect();
                // Endpoints sharing a shape (ranked by pointer) next to ones
                // with an equal locality in a shape of their own (ranked by
                // value).
                let shared: Vec<Endpoint> = eps
                    .iter()
                    .step_by(3)
                    .enumerate()
                    .map(|(j, e)| Endpoint {
                        key: Arc::from(format!("shared/{j}")),
                        address: IpAddr::from([10, 1, (j / 250) as u8, (j % 250) as u8]),
                        ..e.clone()
                    })
                    .collect();
                eps.extend(shared);
                eps
            })
            .collect();
        // One writer reused across hosts, as the generator does, in an order
        // that grows and shrinks it, next to a fresh one per host.
        let mut reused = HostEndpoints::new();
        for eps in &hosts {
            let n = eps.len();
            let refs = || eps.iter().map(EndpointRef::of).collect();
            let mut host = HostEndpoints::new();
            host.fill(refs());
            reused.fill(refs());
            // Nothing of an earlier host is kept but capacity.
            assert!(reused.shapes.len() <= n && reused.shape_of.len() == n);
            assert_eq!(reused.shapes.len(), host.shapes.len());
            // Two ports in turn on one host, as the generator builds them.
            for port in [&port, &other, &port] {
                let name = cluster_name(port.number, &svc.hostname);
                let want = reference(eps, &svc, port);
                let direct = load_assignment(&mut host, &name, port).expect("fits");
                assert_eq!(direct, want, "{n} endpoints, port {}", port.number);
                let again = load_assignment(&mut reused, &name, port).expect("fits");
                assert_eq!(again, want, "reused, {n} endpoints, port {}", port.number);
            }
        }
    }

    #[test]
    fn ip_strings_match_display() {
        for ip in [
            "0.0.0.0",
            "10.0.0.1",
            "10.20.100.255",
            "192.168.9.99",
            "255.255.255.255",
            "fd00::1",
            "::",
        ] {
            let ip: IpAddr = ip.parse().expect("valid");
            let mut s = String::new();
            push_ip(&mut s, ip);
            assert_eq!(s, ip.to_string());
        }
    }
}
