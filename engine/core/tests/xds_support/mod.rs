//! Shared helpers of the xDS generation tests (`xds_*.rs`): event builders with
//! every field the generator reads, a fold driver, and decoders for the encoded
//! resources.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;

use deltapilot_log::RecordPos;
use deltapilot_model::fold::fold;
use deltapilot_model::state::{ModelState, Touched};
use deltapilot_proto::event::Payload;
use deltapilot_proto::{self as pb, Event};
use deltapilot_xds::{ChangeSet, ResourceMap, ResourceSet};
use prost::Message;

#[allow(unused_imports)] // each test binary uses its own subset
pub use deltapilot_testkit::events::{ep_del, event, resync};
pub use pb::{Health, Protocol, Resolution};

/// A port `(name, number, protocol)`.
pub fn port(name: &str, number: u32, protocol: Protocol) -> pb::Port {
    pb::Port {
        name: name.into(),
        number,
        protocol: protocol as i32,
    }
}

/// A service upsert.
pub fn svc(
    source: &str,
    generation: u64,
    ns: &str,
    host: &str,
    ports: Vec<pb::Port>,
    resolution: Resolution,
) -> Event {
    event(
        source,
        generation,
        Payload::ServiceUpsert(pb::ServiceUpsert {
            service: Some(pb::Service {
                hostname: host.into(),
                namespace: ns.into(),
                ports,
                labels: Default::default(),
                resolution: resolution as i32,
            }),
        }),
    )
}

/// A static-endpoints service with one port.
pub fn simple_svc(ns: &str, host: &str, number: u32, protocol: Protocol) -> Event {
    svc(
        "src",
        0,
        ns,
        host,
        vec![port("p", number, protocol)],
        Resolution::StaticEndpoints,
    )
}

pub fn svc_del(source: &str, generation: u64, ns: &str, host: &str) -> Event {
    event(
        source,
        generation,
        Payload::ServiceDelete(pb::EntityDelete {
            key: pb::service_key(ns, host),
        }),
    )
}

/// Rule events, from the model's own builders (not every suite uses them).
#[allow(unused_imports)]
pub use deltapilot_model::state::mk::{rule, rule_del};

/// Everything about an endpoint the generator reads.
#[derive(Debug, Clone)]
pub struct Ep {
    pub address: String,
    pub ports: BTreeMap<String, u32>,
    pub locality: (String, String, String),
    pub weight: u32,
    pub health: Health,
    pub services: Vec<(String, String)>,
    pub labels: BTreeMap<String, String>,
}

impl Ep {
    /// A healthy weight-1 endpoint of `host` in namespace `ns`, no locality.
    pub fn new(address: &str, ns: &str, host: &str) -> Self {
        Ep {
            address: address.into(),
            ports: BTreeMap::new(),
            locality: Default::default(),
            weight: 1,
            health: Health::Healthy,
            services: vec![(ns.into(), host.into())],
            labels: BTreeMap::new(),
        }
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    pub fn locality(mut self, region: &str, zone: &str) -> Self {
        self.locality = (region.into(), zone.into(), String::new());
        self
    }

    pub fn weight(mut self, w: u32) -> Self {
        self.weight = w;
        self
    }

    pub fn health(mut self, h: Health) -> Self {
        self.health = h;
        self
    }

    pub fn target(mut self, port_name: &str, target: u32) -> Self {
        self.ports.insert(port_name.into(), target);
        self
    }

    pub fn upsert(&self, source: &str, generation: u64, key: &str) -> Event {
        let (region, zone, subzone) = self.locality.clone();
        event(
            source,
            generation,
            Payload::EndpointUpsert(pb::EndpointUpsert {
                key: key.into(),
                endpoint: Some(pb::Endpoint {
                    address: self.address.clone(),
                    ports: self.ports.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                    labels: self
                        .labels
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                    locality: Some(pb::Locality {
                        region,
                        zone,
                        subzone,
                    }),
                    weight: self.weight,
                    health: self.health as i32,
                    service_account: String::new(),
                    services: self
                        .services
                        .iter()
                        .map(|(namespace, hostname)| pb::ServiceRef {
                            namespace: namespace.clone(),
                            hostname: hostname.clone(),
                        })
                        .collect(),
                }),
            }),
        )
    }
}

/// Folds `events` as one batch into `state`, panicking if any is skipped (tests
/// that build fixtures want every event applied).
pub fn fold_all(state: &ModelState, events: &[Event]) -> (ModelState, Touched) {
    let out = fold_batch(state, events);
    (out.0, out.1)
}

/// Folds `events` as one batch, returning the state, what it touched and how
/// many events were skipped.
pub fn fold_batch(state: &ModelState, events: &[Event]) -> (ModelState, Touched, usize) {
    let batch: Vec<(RecordPos, Event)> = events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let pos = RecordPos {
                partition: 0,
                offset: i as u64,
            };
            (pos, e.clone())
        })
        .collect();
    let out = fold(state, &batch);
    let skipped = out.skipped.len();
    (out.state, out.touched, skipped)
}

/// A model from events folded into an empty state; every event must apply.
pub fn model(events: &[Event]) -> ModelState {
    let (state, _, skipped) = fold_batch(&ModelState::default(), events);
    assert_eq!(skipped, 0, "fixture events must all apply");
    state
}

/// Decodes the resource `name` of `map` as `M`.
pub fn decode<M: Message + Default>(map: &ResourceMap, name: &str) -> M {
    let r = map
        .get(name)
        .unwrap_or_else(|| panic!("no resource {name:?}; have {:?}", names(map)));
    M::decode(r.bytes.clone()).unwrap_or_else(|e| panic!("{name} does not decode: {e}"))
}

/// Names of a map, sorted (the map iterates in hash order).
pub fn names(map: &ResourceMap) -> Vec<String> {
    let mut names: Vec<String> = map.keys().map(|k| k.to_string()).collect();
    names.sort();
    names
}

/// Whether `m` holds `n` with the same bytes as `r`.
pub fn set_has_same(m: &ResourceMap, n: &str, r: &deltapilot_xds::Resource) -> bool {
    m.get(n).is_some_and(|s| s.bytes == r.bytes)
}

/// Every (flavour, name, bytes) of a set, for byte-for-byte comparisons. Also
/// checks encode-once between the two cluster flavours: a proxyless cluster
/// with the bytes of the full one is that very resource.
/// The VHDS checks of one regeneration from `prev` to `next`: the VHDS
/// resources say what the inline configurations say
/// ([`assert_vhds_matches_inline`]), and a VHDS stream of a sidecar gets
/// from the change set exactly the whole diff.
pub fn assert_vhds_views(prev: &ResourceSet, next: &ResourceSet, changes: &ChangeSet) {
    use deltapilot_model::ProxyType;
    use deltapilot_xds::ResourceType;
    use deltapilot_xds::view::{
        RouteDelivery, ViewKey, delivered, diff, diff_changed, resources_for,
    };
    fn view(s: &ResourceSet, t: ResourceType) -> &ResourceMap {
        let key = ViewKey::Default(ProxyType::Sidecar);
        let inline = resources_for(s, ProxyType::Sidecar, t);
        delivered(s, &key, t, RouteDelivery::Vhds, inline)
    }
    assert_vhds_matches_inline(next);
    for t in [ResourceType::Route, ResourceType::VirtualHost] {
        let known: ResourceMap = (view(prev, t).iter())
            .map(|(n, r)| {
                std::sync::Arc::new(deltapilot_xds::Resource::stand_in(
                    n.clone(),
                    r.version.clone(),
                ))
            })
            .collect();
        let after = view(next, t);
        let quick = diff_changed(after, &known, changes.of(t));
        assert_eq!(diff(after, &known), quick, "VHDS {t:?}");
    }
}

/// Checks that the VHDS resources say what the inline route configurations
/// say: a VHDS configuration per port configuration, and as virtual hosts
/// exactly the inline ones, each named `<port>/<its name>`.
pub fn assert_vhds_matches_inline(set: &ResourceSet) {
    use envoy_types::pb::envoy::config::route::v3::{RouteConfiguration, VirtualHost};
    let mut want = 0;
    for (name, r) in set.routes.iter() {
        if name.parse::<u16>().is_err() {
            continue; // a proxyless client's `<host>:<port>` configuration
        }
        let vhds = set
            .vhds_routes
            .get(name)
            .expect("a VHDS configuration per port");
        let vhds = RouteConfiguration::decode(&vhds.bytes[..]).expect("decodes");
        assert!(
            vhds.virtual_hosts.is_empty() && vhds.vhds.is_some(),
            "{name}"
        );
        let rc = RouteConfiguration::decode(&r.bytes[..]).expect("decodes");
        for mut vh in rc.virtual_hosts {
            want += 1;
            vh.name = format!("{name}/{}", vh.name);
            let got = set
                .virtual_hosts
                .get(vh.name.as_str())
                .expect("each virtual host");
            let got = VirtualHost::decode(&got.bytes[..]).expect("decodes");
            assert_eq!(got, vh);
        }
    }
    assert_eq!(
        set.virtual_hosts.len(),
        want,
        "no virtual host of no configuration"
    );
    assert_eq!(
        set.vhds_routes.len(),
        set.routes
            .keys()
            .filter(|n| n.parse::<u16>().is_ok())
            .count()
    );
}

pub fn flatten(set: &ResourceSet) -> Vec<(&'static str, String, Vec<u8>)> {
    for (n, r) in set.grpc_clusters.iter() {
        if let Some(full) = set.clusters.get(n) {
            assert!(
                full.bytes != r.bytes || std::sync::Arc::ptr_eq(full, r),
                "{n}: equal cluster flavours are one resource"
            );
        }
    }
    let maps = [
        ("cds", &set.clusters),
        ("cds-grpc", &set.grpc_clusters),
        ("eds", &set.endpoints),
        ("lds-sidecar", &set.sidecar_listeners),
        ("lds-grpc", &set.grpc_listeners),
        ("rds", &set.routes),
        ("rds-vhds", &set.vhds_routes),
        ("vhds", &set.virtual_hosts),
    ];
    let mut out = Vec::new();
    for (t, m) in maps {
        for (n, r) in m.iter() {
            assert_eq!(
                r.version,
                deltapilot_xds::content_version(&r.bytes),
                "{n}: version is the hash of its bytes"
            );
            out.push((t, n.to_string(), r.bytes.to_vec()));
        }
    }
    out
}

/// Checks, on every resource of `set`, the rules real clients enforce: no domain
/// twice in a route configuration (Envoy NACKs), every locality group has a
/// locality and every weight is > 0 (gRPC NACKs or drops), no socket twice in an
/// assignment (gRPC NACKs), and EDS clusters fetch endpoints over ADS.
pub fn assert_client_rules(set: &ResourceSet) {
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::config::cluster::v3::cluster::{
        ClusterDiscoveryType, DiscoveryType,
    };
    use envoy_types::pb::envoy::config::core::v3::config_source::ConfigSourceSpecifier;
    use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
    use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
    use std::collections::BTreeSet;

    for name in names(&set.routes) {
        let rc: RouteConfiguration = decode(&set.routes, &name);
        let mut seen = BTreeSet::new();
        for vh in &rc.virtual_hosts {
            assert!(!vh.domains.is_empty(), "{name}/{}: no domains", vh.name);
            for d in &vh.domains {
                assert!(seen.insert(d.clone()), "route {name}: domain {d} twice");
            }
        }
    }
    for name in names(&set.endpoints) {
        let cla: ClusterLoadAssignment = decode(&set.endpoints, &name);
        assert_eq!(cla.cluster_name, name);
        let mut sockets = BTreeSet::new();
        for g in &cla.endpoints {
            assert!(g.locality.is_some(), "{name}: group without locality");
            assert!(
                g.load_balancing_weight.is_some_and(|w| w.value > 0),
                "{name}: group weight"
            );
            for e in &g.lb_endpoints {
                assert!(
                    e.load_balancing_weight.is_some_and(|w| w.value > 0),
                    "{name}: endpoint weight"
                );
                assert!(
                    sockets.insert(format!("{:?}", e.host_identifier)),
                    "{name}: socket twice"
                );
            }
        }
    }
    for name in names(&set.clusters) {
        let c: Cluster = decode(&set.clusters, &name);
        if c.cluster_discovery_type == Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)) {
            let ads = c
                .eds_cluster_config
                .and_then(|e| e.eds_config)
                .and_then(|s| s.config_source_specifier);
            assert!(
                matches!(ads, Some(ConfigSourceSpecifier::Ads(_))),
                "{name}: EDS over ADS"
            );
        }
    }
}
