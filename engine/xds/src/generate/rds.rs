//! RDS: route configurations, virtual hosts and their domains.
//!
//! - Sidecars: one RouteConfiguration per HTTP port, named `<port>`, with one
//!   virtual host per HTTP service on that port, named `<hostname>:<port>`, in
//!   hostname order.
//! - Proxyless gRPC: one dedicated RouteConfiguration per (service, HTTP port),
//!   named like its listener, `<hostname>:<port>`, holding a single virtual host
//!   with domains `<hostname>` and `<hostname>:<port>` (what a `xds:///<hostname>:<port>`
//!   target matches). Dedicated, as Istio's gRPC generator does, so a client of one
//!   service neither downloads nor is re-pushed the route table of every service
//!   sharing its port.
//!
//! ## Domains
//! A service `H` on port `P` claims, in this order:
//! - **exact** (rank 0): `H`, `H:P`;
//! - **namespaced short forms** (rank 1), only for Kubernetes-style hostnames
//!   `<name>.<ns>.svc.<domain…>` without wildcards: every shorter prefix down to
//!   `<name>.<ns>` (e.g. `name.ns.svc.cluster`, `name.ns.svc`, `name.ns`), each
//!   also with `:P`;
//! - **bare short name** (rank 2): `<name>` and `<name>:P`.
//!
//! Envoy NACKs a RouteConfiguration in which two virtual hosts share a domain, and
//! without per-namespace views we cannot do what Istio does (short names only for
//! proxies in the same namespace). So within one route configuration a domain goes
//! to the **single claimant of the lowest rank**; when the lowest rank is claimed
//! by several services, nobody gets it. Hence: a service's exact names are always
//! its own, an explicit hostname beats another service's short form, and the bare
//! short name is served only while it is unique across namespaces. The rule depends
//! only on the set of services on the port, never on their order.
//!
//! ## Routes
//! A virtual host without a VirtualService has one route, prefix `/` →
//! `outbound|<port>||<hostname>`, with `timeout: 0s` (disabled) as Istio does, so
//! long-lived gRPC streams are not cut by Envoy's 15 s default. With one, it has
//! the rule's routes (see `vs_routes`); the generator marks a virtual host stale
//! when its rules change (`Touched::rule_hosts`).
//!
//! What it does NOT do: decide which services are on a port (see `incremental`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use envoy_types::pb::envoy::config::route::v3::{Route, RouteConfiguration, VirtualHost};

use super::common::{encode, grpc_name, port_route_name};
use super::vs_routes::{Flavor, routes_for};
use super::{ModelRead, vhds};
use deltapilot_model::Hostname;

/// How strongly a service claims a domain; lower wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Rank {
    /// The service's own hostname (with or without port).
    Exact,
    /// A namespaced short form of a Kubernetes-style hostname.
    Namespaced,
    /// The bare short name.
    Bare,
}

/// The domains a service claims, each with its rank, in virtual-host order.
pub(crate) type Candidates = Vec<(Arc<str>, Rank)>;

/// Every domain `host` may claim on `port`, in the order they appear in its
/// virtual host.
pub(crate) fn candidates(host: &Hostname, port: u16) -> Candidates {
    let h = host.as_str();
    let mut out = Vec::with_capacity(12);
    let mut push = |d: &str, r: Rank| {
        out.push((Arc::from(d), r));
        out.push((Arc::from(format!("{d}:{port}")), r));
    };
    push(h, Rank::Exact);
    let labels: Vec<&str> = h.split('.').collect();
    let k8s = labels.len() >= 4
        && labels[2] == "svc"
        && !h.contains('*')
        && labels.iter().all(|l| !l.is_empty());
    if k8s {
        for n in (2..labels.len()).rev() {
            push(&labels[..n].join("."), Rank::Namespaced);
        }
        push(labels[0], Rank::Bare);
    }
    out
}

/// The virtual host of `host` on `port` with the given domains and the routes
/// its rules give it for `flavor` (see `vs_routes`).
pub(crate) fn virtual_host<M: ModelRead + ?Sized>(
    model: &M,
    host: &Hostname,
    port: u16,
    domains: Vec<String>,
    flavor: Flavor,
) -> VirtualHost {
    VirtualHost {
        name: grpc_name(host, port).to_string(),
        domains,
        routes: routes_for(model, host, port, flavor),
        ..Default::default()
    }
}

/// The dedicated route configuration of a proxyless gRPC listener.
pub(crate) fn grpc_route_config<M: ModelRead + ?Sized>(
    model: &M,
    host: &Hostname,
    port: u16,
) -> Bytes {
    let domains = vec![host.to_string(), format!("{host}:{port}")];
    assemble(
        grpc_name(host, port).to_string(),
        [vhost_field(virtual_host(
            model,
            host,
            port,
            domains,
            Flavor::Grpc,
        ))],
    )
}

/// Route configuration `name` from encoded `virtual_hosts` fields.
pub(crate) fn assemble(name: String, fields: impl IntoIterator<Item = Bytes>) -> Bytes {
    let head = encode(&RouteConfiguration {
        name,
        ..Default::default()
    });
    let mut out = BytesMut::from(&head[..]);
    for f in fields {
        out.extend_from_slice(&f);
    }
    out.freeze()
}

/// From-scratch route configuration `<port>` for `hosts` (the reference path).
pub(crate) fn port_route_config<M: ModelRead + ?Sized>(
    model: &M,
    port: u16,
    hosts: &BTreeSet<Hostname>,
) -> Bytes {
    let fields = port_vhost_fields(model, port, hosts);
    assemble(
        port_route_name(port).to_string(),
        fields.into_iter().map(|(_, f)| f),
    )
}

/// From-scratch encoded virtual hosts of route configuration `<port>` for
/// `hosts`, in order (the reference path): counts every claim, then gives
/// each domain to its single lowest-rank claimant.
pub(crate) fn port_vhost_fields<'h, M: ModelRead + ?Sized>(
    model: &M,
    port: u16,
    hosts: &'h BTreeSet<Hostname>,
) -> Vec<(&'h Hostname, Bytes)> {
    let all: Vec<(&'h Hostname, Candidates)> =
        hosts.iter().map(|h| (h, candidates(h, port))).collect();
    // domain -> (lowest rank, claimants at that rank)
    let mut best: HashMap<Arc<str>, (Rank, usize)> = HashMap::new();
    for (_, cands) in &all {
        for (d, r) in cands {
            let e = best.entry(d.clone()).or_insert((*r, 0));
            if *r < e.0 {
                *e = (*r, 1);
            } else if *r == e.0 {
                e.1 += 1;
            }
        }
    }
    all.into_iter()
        .map(|(h, cands)| {
            let domains = cands
                .into_iter()
                .filter(|(d, r)| best.get(d) == Some(&(*r, 1)))
                .map(|(d, _)| d.to_string())
                .collect();
            let field = vhost_field(virtual_host(model, h, port, domains, Flavor::Sidecar));
            (h, field)
        })
        .collect()
}

/// The VHDS resource name of `host`'s virtual host on `port`.
pub(crate) fn vhds_name(host: &Hostname, port: u16) -> Arc<str> {
    Arc::from(vhds::resource_name(
        &port_route_name(port),
        &grpc_name(host, port),
    ))
}

/// What one [`PortRoutes::encode`] changed among the port's VHDS virtual
/// hosts: per name, the new bytes (or why they failed), or `None` (gone).
pub(crate) type VhostChanges = Vec<(Arc<str>, Option<Result<Bytes, String>>)>;

/// What one [`PortRoutes::encode`] gives: the inline configuration (`None`
/// when the port has no HTTP service) and its VHDS virtual hosts' changes.
pub(crate) type Encoded = (Option<Bytes>, VhostChanges);

/// One virtual host's claims and its encoded `virtual_hosts` field.
#[derive(Debug, Clone)]
struct CachedVhost {
    candidates: Candidates,
    /// The encoded field (key, length, message) as it appears inside the route
    /// configuration, so the configuration is assembled by concatenation.
    field: Bytes,
}

/// Incremental state of route configuration `<port>`: each service's encoded
/// virtual host and, per domain, who claims it. A membership change re-encodes
/// only the virtual hosts whose domains it changes; assembling the configuration
/// is then a concatenation of cached bytes (no re-encoding of the other hosts).
#[derive(Debug, Clone)]
pub(crate) struct PortRoutes {
    port: u16,
    vhosts: BTreeMap<Hostname, CachedVhost>,
    /// Per domain, its claimants sorted by (rank, hostname). A sorted `Vec`, not a
    /// set: almost every domain has one claimant, and a one-element `Vec` is a
    /// tenth of the size of a B-tree node.
    claims: HashMap<Arc<str>, Vec<(Rank, Hostname)>>,
    stale: BTreeSet<Hostname>,
    /// Hosts taken off since the last [`PortRoutes::encode`], whose VHDS
    /// virtual hosts it reports gone.
    gone: BTreeSet<Hostname>,
}

impl PortRoutes {
    /// Empty state for `port`.
    pub(crate) fn new(port: u16) -> Self {
        PortRoutes {
            port,
            vhosts: BTreeMap::new(),
            claims: HashMap::new(),
            stale: BTreeSet::new(),
            gone: BTreeSet::new(),
        }
    }

    /// Whether no HTTP service is on this port.
    pub(crate) fn is_empty(&self) -> bool {
        self.vhosts.is_empty()
    }

    /// How many virtual hosts the next [`PortRoutes::encode`] re-encodes.
    pub(crate) fn stale_len(&self) -> usize {
        self.stale.len()
    }

    fn owner(claimants: Option<&Vec<(Rank, Hostname)>>) -> Option<&Hostname> {
        let mut it = claimants?.iter();
        let first = it.next()?;
        match it.next() {
            Some(second) if second.0 == first.0 => None,
            _ => Some(&first.1),
        }
    }

    /// Adds or removes one claim, marking whoever gains or loses the domain stale.
    fn claim(&mut self, domain: &Arc<str>, rank: Rank, host: &Hostname, add: bool) {
        let set = self.claims.entry(domain.clone()).or_default();
        let before = Self::owner(Some(set)).cloned();
        let entry = (rank, host.clone());
        match (set.binary_search(&entry), add) {
            (Err(at), true) => set.insert(at, entry),
            (Ok(at), false) => {
                set.remove(at);
            }
            _ => {}
        }
        let after = Self::owner(Some(set)).cloned();
        if set.is_empty() {
            self.claims.remove(domain);
        }
        if before != after {
            self.stale.extend(before);
            self.stale.extend(after);
        }
    }

    /// Puts `host` on this port (no-op if it is already there).
    pub(crate) fn insert(&mut self, host: &Hostname) {
        if self.vhosts.contains_key(host) {
            return;
        }
        let candidates = candidates(host, self.port);
        for (d, r) in &candidates {
            self.claim(d, *r, host, true);
        }
        self.vhosts.insert(
            host.clone(),
            CachedVhost {
                candidates,
                field: Bytes::new(),
            },
        );
        self.stale.insert(host.clone());
    }

    /// Marks `host`'s virtual host for re-encoding (its routes changed; no-op
    /// if it is not on this port).
    pub(crate) fn mark_stale(&mut self, host: &Hostname) {
        if self.vhosts.contains_key(host) {
            self.stale.insert(host.clone());
        }
    }

    /// Takes `host` off this port (no-op if it is not there).
    pub(crate) fn remove(&mut self, host: &Hostname) {
        let Some(v) = self.vhosts.remove(host) else {
            return;
        };
        for (d, r) in &v.candidates {
            self.claim(d, *r, host, false);
        }
        self.stale.remove(host);
        self.gone.insert(host.clone());
    }

    /// Re-encodes stale virtual hosts (with their routes as `model`'s rules
    /// shape them) and assembles the configuration, or `None` when the port
    /// has no HTTP service; with what that changed among its VHDS virtual
    /// hosts (each renamed from the encoded field, see `vhds::virtual_host`).
    pub(crate) fn encode<M: ModelRead + ?Sized>(&mut self, model: &M) -> Encoded {
        let mut vhosts: VhostChanges = std::mem::take(&mut self.gone)
            .into_iter()
            .filter(|h| !self.vhosts.contains_key(h))
            .map(|h| (vhds_name(&h, self.port), None))
            .collect();
        for host in std::mem::take(&mut self.stale) {
            let Some(v) = self.vhosts.get(&host) else {
                continue;
            };
            let domains = v
                .candidates
                .iter()
                .filter(|(d, _)| Self::owner(self.claims.get(d)) == Some(&host))
                .map(|(d, _)| d.to_string())
                .collect();
            let field = vhost_field(virtual_host(
                model,
                &host,
                self.port,
                domains,
                Flavor::Sidecar,
            ));
            let name = vhds_name(&host, self.port);
            vhosts.push((name.clone(), Some(vhds::virtual_host(&field, &name))));
            if let Some(v) = self.vhosts.get_mut(&host) {
                v.field = field;
            }
        }
        if self.vhosts.is_empty() {
            return (None, vhosts);
        }
        let head = encode(&RouteConfiguration {
            name: port_route_name(self.port).to_string(),
            ..Default::default()
        });
        let len = head.len() + self.vhosts.values().map(|v| v.field.len()).sum::<usize>();
        let mut out = BytesMut::with_capacity(len);
        out.extend_from_slice(&head);
        for v in self.vhosts.values() {
            out.extend_from_slice(&v.field);
        }
        (Some(out.freeze()), vhosts)
    }
}

/// The bytes of `vh` as one element of `RouteConfiguration.virtual_hosts`:
/// encoding a configuration holding only that element yields exactly the field.
/// Protobuf writes fields in tag order (name = 1, virtual_hosts = 2), so the head
/// plus these fields equals the encoding of the whole message.
///
/// A route whose `typed_per_filter_config` has several entries (a fault and a
/// CORS policy) would be encoded in the map's varying order, so such virtual
/// hosts are written by hand with the entries sorted by filter name (fields
/// out of tag order, which every protobuf parser accepts): the same rules
/// always give the same bytes.
pub(crate) fn vhost_field(mut vh: VirtualHost) -> Bytes {
    if vh
        .routes
        .iter()
        .all(|r| r.typed_per_filter_config.len() < 2)
    {
        return encode(&RouteConfiguration {
            virtual_hosts: vec![vh],
            ..Default::default()
        });
    }
    let routes = std::mem::take(&mut vh.routes);
    let mut body = BytesMut::from(&encode(&vh)[..]);
    for mut r in routes {
        let map: BTreeMap<String, _> = std::mem::take(&mut r.typed_per_filter_config)
            .into_iter()
            .collect();
        let mut route = BytesMut::from(&encode(&r)[..]);
        for (k, v) in map {
            // A route holding only this entry encodes as exactly its field.
            route.extend_from_slice(&encode(&Route {
                typed_per_filter_config: std::iter::once((k, v)).collect(),
                ..Default::default()
            }));
        }
        length_delimited(VHOST_ROUTES_TAG, &route, &mut body);
    }
    let mut out = BytesMut::new();
    length_delimited(CONFIG_VIRTUAL_HOSTS_TAG, &body, &mut out);
    out.freeze()
}

/// `VirtualHost.routes`' field number.
const VHOST_ROUTES_TAG: u32 = 3;
/// `RouteConfiguration.virtual_hosts`' field number.
const CONFIG_VIRTUAL_HOSTS_TAG: u32 = 2;

/// Appends field `tag` holding `bytes` (a length-delimited field) to `out`.
fn length_delimited(tag: u32, bytes: &[u8], out: &mut BytesMut) {
    use prost::encoding::{WireType, encode_key, encode_varint};
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltapilot_model::state::ModelState;
    use prost::Message;

    fn hosts(names: &[&str]) -> BTreeSet<Hostname> {
        names.iter().map(|n| Hostname::new(n)).collect()
    }

    fn domains_of(bytes: &[u8]) -> Vec<(String, Vec<String>)> {
        let rc = RouteConfiguration::decode(bytes).expect("decodes");
        rc.virtual_hosts
            .into_iter()
            .map(|v| (v.name, v.domains))
            .collect()
    }

    #[test]
    fn kubernetes_hostnames_get_istio_short_forms() {
        let c: Vec<String> = candidates(&Hostname::new("a.ns.svc.cluster.local"), 80)
            .into_iter()
            .map(|(d, _)| d.to_string())
            .collect();
        assert_eq!(
            c,
            [
                "a.ns.svc.cluster.local",
                "a.ns.svc.cluster.local:80",
                "a.ns.svc.cluster",
                "a.ns.svc.cluster:80",
                "a.ns.svc",
                "a.ns.svc:80",
                "a.ns",
                "a.ns:80",
                "a",
                "a:80"
            ]
        );
        let plain = candidates(&Hostname::new("api.example.com"), 443);
        assert_eq!(
            plain.len(),
            2,
            "non-Kubernetes hostnames only get exact forms"
        );
        assert_eq!(
            candidates(&Hostname::new("*.ns.svc.cluster.local"), 80).len(),
            2
        );
    }

    #[test]
    fn ambiguous_short_names_are_dropped_and_exact_names_win() {
        let set = hosts(&[
            "a.ns1.svc.cluster.local",
            "a.ns2.svc.cluster.local",
            "a.ns1",
        ]);
        let vhosts = domains_of(&port_route_config(&ModelState::default(), 80, &set));
        let by_name: BTreeMap<_, _> = vhosts.into_iter().collect();
        let ns1 = &by_name["a.ns1.svc.cluster.local:80"];
        assert!(
            !ns1.contains(&"a".to_string()),
            "bare name shared by two namespaces"
        );
        assert!(
            !ns1.contains(&"a.ns1".to_string()),
            "exact hostname of another service wins"
        );
        assert!(ns1.contains(&"a.ns1.svc".to_string()));
        assert_eq!(by_name["a.ns1:80"], ["a.ns1", "a.ns1:80"]);
        let all: Vec<&String> = by_name.values().flatten().collect();
        let unique: BTreeSet<&String> = all.iter().copied().collect();
        assert_eq!(
            all.len(),
            unique.len(),
            "no domain twice in one route configuration"
        );
    }

    #[test]
    fn incremental_assembly_equals_full_encoding() {
        let mut pr = PortRoutes::new(80);
        let mut set = BTreeSet::new();
        let steps = [
            ("a.ns1.svc.cluster.local", true),
            ("a.ns2.svc.cluster.local", true),
            ("b.ns1.svc.cluster.local", true),
            ("a.ns1.svc.cluster.local", false),
            ("a.ns2", true),
            ("a.ns2.svc.cluster.local", false),
            ("a.ns2", false),
            ("b.ns1.svc.cluster.local", false),
        ];
        for (h, add) in steps {
            let h = Hostname::new(h);
            if add {
                pr.insert(&h);
                set.insert(h);
            } else {
                pr.remove(&h);
                set.remove(&h);
            }
            let expect =
                (!set.is_empty()).then(|| port_route_config(&ModelState::default(), 80, &set));
            assert_eq!(
                pr.encode(&ModelState::default()).0,
                expect,
                "after {steps:?}"
            );
        }
        assert!(pr.claims.is_empty());
    }
}
