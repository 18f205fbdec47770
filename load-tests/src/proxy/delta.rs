//! A simulated Envoy's delta xDS client state, with no I/O: responses in,
//! requests out.
//!
//! It subscribes the way Envoy does: wildcard CDS (an empty first request); EDS for
//! every cluster it received (unsubscribing removed ones); wildcard LDS once its
//! first CDS response is ACKed; RDS for every route name its listeners' HTTP
//! connection managers reference; VHDS for every route configuration that
//! carries `vhds`, by its name (a namespace: the server pushes every
//! `<route>/<virtual host>` in it). Every response is ACKed (or NACKed, when told
//! to) before any subscription change it causes. On reconnect it sends every
//! subscription at once with `initial_resource_versions`, as Envoy does.
//!
//! What it does NOT do: talk gRPC, sleep, or track convergence (the proxy loop in
//! `proxy` does, with what [`Handled`] reports).

use std::collections::{BTreeSet, HashMap, HashSet};

use bytes::Bytes;
use deltapilot_xds::ResourceType;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use prost::Message;

use super::wire::{self, DeltaResponse};
use super::{Handled, decode, nack_status};

const CDS: usize = 0;
const EDS: usize = 1;
const LDS: usize = 2;
const RDS: usize = 3;
const VHDS: usize = 4;
const TYPES: usize = ResourceType::SNAPSHOT_COUNT;

/// One delta client's state.
#[derive(Debug)]
pub struct DeltaClient {
    node: Bytes,
    known: [HashMap<String, String>; TYPES],
    eds: BTreeSet<String>,
    rds: BTreeSet<String>,
    /// VHDS namespaces: the route configurations that carry `vhds`.
    vhds: BTreeSet<String>,
    /// Per type, names subscribed and not answered yet (VHDS: namespaces,
    /// answered by the first VHDS response, as Envoy's route warms).
    pending: [HashSet<String>; TYPES],
    routes_of: HashMap<String, Vec<String>>,
    got: [bool; TYPES],
    lds_started: bool,
}

fn url(i: usize) -> String {
    ResourceType::ALL[i].type_url().to_owned()
}

impl DeltaClient {
    /// A fresh client for `node`.
    pub fn new(node: Node) -> Self {
        DeltaClient {
            node: wire::node_field(&node, 1),
            known: Default::default(),
            eds: BTreeSet::new(),
            rds: BTreeSet::new(),
            vhds: BTreeSet::new(),
            pending: Default::default(),
            routes_of: HashMap::new(),
            got: [false; TYPES],
            lds_started: false,
        }
    }

    fn req(&self, t: usize) -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest {
            type_url: url(t),
            ..Default::default()
        }
    }

    fn encode(&self, r: &DeltaDiscoveryRequest) -> Bytes {
        wire::with_node(r, &self.node)
    }

    /// Names (per type) it reports in `initial_resource_versions` on reconnect.
    pub fn known_count(&self) -> usize {
        self.known.iter().map(HashMap::len).sum()
    }

    /// The requests that open a stream: CDS alone on the first connection; every
    /// subscription with the versions held, on a reconnect.
    pub fn initial_requests(&mut self, reconnect: bool) -> Vec<Bytes> {
        let mut out = Vec::new();
        let mut cds = self.req(CDS);
        if reconnect {
            cds.initial_resource_versions = self.known[CDS].clone();
        }
        out.push(cds);
        if reconnect {
            if !self.eds.is_empty() {
                let mut r = self.req(EDS);
                r.resource_names_subscribe = self.eds.iter().cloned().collect();
                r.initial_resource_versions = self.known[EDS].clone();
                out.push(r);
            }
            if self.lds_started {
                let mut r = self.req(LDS);
                r.initial_resource_versions = self.known[LDS].clone();
                out.push(r);
            }
            for (t, names) in [(RDS, &self.rds), (VHDS, &self.vhds)] {
                if !names.is_empty() {
                    let mut r = self.req(t);
                    r.resource_names_subscribe = names.iter().cloned().collect();
                    r.initial_resource_versions = self.known[t].clone();
                    out.push(r);
                }
            }
        }
        out.iter().map(|r| self.encode(r)).collect()
    }

    /// Whether everything it subscribed to has been answered at least once.
    pub fn synced(&self) -> bool {
        self.got[CDS]
            && self.got[LDS]
            && self.pending[EDS].is_empty()
            && self.pending[RDS].is_empty()
            && self.pending[VHDS].is_empty()
    }

    fn subscription(
        &mut self,
        t: usize,
        add: Vec<String>,
        drop: Vec<String>,
        out: &mut Vec<DeltaDiscoveryRequest>,
    ) {
        let current = match t {
            EDS => &mut self.eds,
            VHDS => &mut self.vhds,
            _ => &mut self.rds,
        };
        let add: Vec<String> = add
            .into_iter()
            .filter(|n| current.insert(n.clone()))
            .collect();
        let drop: Vec<String> = drop.into_iter().filter(|n| current.remove(n)).collect();
        if add.is_empty() && drop.is_empty() {
            return;
        }
        for n in &add {
            self.pending[t].insert(n.clone());
        }
        for n in &drop {
            self.pending[t].remove(n);
            self.known[t].remove(n);
            if t == VHDS {
                self.known[t].retain(|k, _| namespace_of(k) != Some(n.as_str()));
            }
        }
        let mut r = self.req(t);
        r.resource_names_subscribe = add;
        r.resource_names_unsubscribe = drop;
        out.push(r);
    }

    /// Handles one response; `nack` rejects it (nothing is applied).
    pub fn on_response(&mut self, bytes: &Bytes, nack: bool) -> anyhow::Result<Handled> {
        let resp = DeltaResponse::decode(bytes.clone())?;
        let Some(rt) = ResourceType::from_type_url(&resp.type_url) else {
            anyhow::bail!(
                "response for a type this client never asked for: {:?}",
                resp.type_url
            );
        };
        let t = rt.index();
        let mut h = Handled {
            t: Some(rt),
            nonce: resp.nonce.clone(),
            resources: resp.resources.len(),
            nacked: nack,
            ..Default::default()
        };
        let mut ack = self.req(t);
        ack.response_nonce = resp.nonce.clone();
        if nack {
            // Nothing is applied, but what was sent is still a change the server
            // believes the proxy lacks: count it, so the byte ratio stays honest.
            h.changed_bytes = resp
                .resources
                .iter()
                .filter(|r| self.known[t].get(&r.name) != Some(&r.version))
                .map(|r| r.resource.as_ref().map_or(0, |a| a.value.len()))
                .sum::<usize>()
                + resp
                    .removed_resources
                    .iter()
                    .map(String::len)
                    .sum::<usize>();
            ack.error_detail = Some(nack_status());
            h.requests.push(self.encode(&ack));
            return Ok(h);
        }
        self.got[t] = true;
        if t == VHDS {
            self.pending[VHDS].clear();
        }
        let mut new_clusters = Vec::new();
        let (mut vhds_on, mut vhds_off) = (Vec::new(), Vec::new());
        for r in &resp.resources {
            let value = r
                .resource
                .as_ref()
                .map(|a| a.value.clone())
                .unwrap_or_default();
            let prev = self.known[t].insert(r.name.clone(), r.version.clone());
            if prev.as_deref() != Some(r.version.as_str()) {
                h.changed_bytes += value.len();
            }
            self.pending[t].remove(&r.name);
            match t {
                CDS if !self.eds.contains(&r.name) => new_clusters.push(r.name.clone()),
                EDS => {
                    let (cluster, addrs) = wire::cla_addresses(&value)?;
                    let cluster = if cluster.is_empty() {
                        r.name.clone()
                    } else {
                        cluster
                    };
                    h.cla.push((cluster, addrs));
                }
                LDS => {
                    let (_, routes) = decode::listener_routes(&value)?;
                    self.routes_of.insert(r.name.clone(), routes);
                }
                RDS => {
                    match decode::route_has_vhds(&value)? {
                        true => vhds_on.push(r.name.clone()),
                        false => vhds_off.push(r.name.clone()),
                    }
                    h.routes.push((r.name.clone(), value));
                }
                // Reported as a change of its route configuration, so rules
                // are tracked in whichever delivery the server chose.
                VHDS => {
                    let route = namespace_of(&r.name).unwrap_or(&r.name).to_owned();
                    h.routes.push((route, value));
                }
                _ => {}
            }
        }
        for n in &resp.removed_resources {
            if self.known[t].remove(n).is_some() {
                h.changed_bytes += n.len();
            }
            self.pending[t].remove(n);
            match t {
                CDS => h.gone.push(n.clone()),
                LDS => {
                    self.routes_of.remove(n);
                }
                RDS => vhds_off.push(n.clone()),
                _ => {}
            }
        }
        let mut out = vec![ack];
        match t {
            CDS => {
                self.subscription(EDS, new_clusters, h.gone.clone(), &mut out);
                if !self.lds_started {
                    self.lds_started = true;
                    out.push(self.req(LDS));
                }
            }
            LDS => {
                let wanted: BTreeSet<String> = self.routes_of.values().flatten().cloned().collect();
                let add = wanted.difference(&self.rds).cloned().collect();
                let drop: Vec<String> = self.rds.difference(&wanted).cloned().collect();
                self.subscription(VHDS, Vec::new(), drop.clone(), &mut out);
                self.subscription(RDS, add, drop, &mut out);
            }
            RDS => self.subscription(VHDS, vhds_on, vhds_off, &mut out),
            _ => {}
        }
        h.requests = out.iter().map(|r| self.encode(r)).collect();
        Ok(h)
    }
}

/// The namespace of a VHDS name (the text before its last `/`).
fn namespace_of(name: &str) -> Option<&str> {
    name.rfind('/').map(|at| &name[..at])
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryResponse, Resource};
    use envoy_types::pb::google::protobuf::Any;

    fn decode_req(b: &Bytes) -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest::decode(b.as_ref()).expect("request")
    }

    fn resp(t: usize, nonce: &str, names: &[&str], removed: &[&str]) -> Bytes {
        DeltaDiscoveryResponse {
            type_url: url(t),
            nonce: nonce.into(),
            resources: names
                .iter()
                .map(|n| Resource {
                    name: (*n).into(),
                    version: "v1".into(),
                    resource: Some(Any {
                        type_url: url(t),
                        value: Vec::new(),
                    }),
                    ..Default::default()
                })
                .collect(),
            removed_resources: removed.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
        .encode_to_vec()
        .into()
    }

    #[test]
    fn subscribes_like_envoy_and_acks_first() {
        let mut c = DeltaClient::new(Node::default());
        let first = c.initial_requests(false);
        assert_eq!(first.len(), 1);
        let r = decode_req(&first[0]);
        assert_eq!(r.type_url, url(CDS));
        assert!(r.node.is_some(), "Envoy sends its node on every request");
        assert!(
            r.resource_names_subscribe.is_empty(),
            "wildcard is an empty list"
        );

        let h = c
            .on_response(&resp(CDS, "n1", &["a", "b"], &[]), false)
            .expect("cds");
        let reqs: Vec<_> = h.requests.iter().map(decode_req).collect();
        assert_eq!(reqs.len(), 3);
        assert_eq!(
            (reqs[0].type_url.as_str(), reqs[0].response_nonce.as_str()),
            (url(CDS).as_str(), "n1")
        );
        assert_eq!(reqs[1].type_url, url(EDS));
        assert_eq!(reqs[1].resource_names_subscribe, ["a", "b"]);
        assert_eq!(reqs[2].type_url, url(LDS));
        assert!(!c.synced());

        let h = c
            .on_response(&resp(CDS, "n2", &[], &["a"]), false)
            .expect("cds removal");
        assert_eq!(h.gone, ["a"]);
        let reqs: Vec<_> = h.requests.iter().map(decode_req).collect();
        assert_eq!(reqs[1].resource_names_unsubscribe, ["a"]);

        let h = c
            .on_response(&resp(CDS, "n3", &["c"], &[]), true)
            .expect("nack");
        let reqs: Vec<_> = h.requests.iter().map(decode_req).collect();
        assert_eq!(reqs.len(), 1, "a NACK changes nothing");
        assert!(reqs[0].error_detail.is_some());

        let again = c.initial_requests(true);
        let reqs: Vec<_> = again.iter().map(decode_req).collect();
        assert_eq!(reqs.len(), 3, "CDS, EDS and LDS (no routes yet)");
        assert_eq!(reqs[0].initial_resource_versions.len(), 1);
        assert_eq!(reqs[1].resource_names_subscribe, ["b"]);
    }

    fn with_values(t: usize, nonce: &str, items: &[(&str, Vec<u8>)]) -> Bytes {
        DeltaDiscoveryResponse {
            type_url: url(t),
            nonce: nonce.into(),
            resources: items
                .iter()
                .map(|(n, v)| Resource {
                    name: (*n).into(),
                    version: format!("v{}", v.len()),
                    resource: Some(Any {
                        type_url: url(t),
                        value: v.clone(),
                    }),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
        .encode_to_vec()
        .into()
    }

    /// A route configuration with `vhds` makes it subscribe to the
    /// configuration's namespace; a virtual host counts as a change of its
    /// route configuration, and answers the subscription.
    #[test]
    fn a_vhds_route_configuration_brings_a_namespace_subscription() {
        use envoy_types::pb::envoy::config::route::v3::{RouteConfiguration, Vhds};
        let mut c = DeltaClient::new(Node::default());
        c.rds.insert("8080".into());
        let vhds = RouteConfiguration {
            name: "8080".into(),
            vhds: Some(Vhds::default()),
            ..Default::default()
        }
        .encode_to_vec();
        let inline = RouteConfiguration {
            name: "9090".into(),
            ..Default::default()
        }
        .encode_to_vec();
        let h = c
            .on_response(
                &with_values(RDS, "n1", &[("8080", vhds), ("9090", inline)]),
                false,
            )
            .expect("rds");
        let reqs: Vec<_> = h.requests.iter().map(decode_req).collect();
        assert_eq!(reqs.len(), 2, "the ACK, then VHDS");
        assert_eq!(reqs[1].type_url, url(VHDS));
        assert_eq!(reqs[1].resource_names_subscribe, ["8080"]);
        assert!(c.pending[VHDS].contains("8080"));
        let h = c
            .on_response(
                &with_values(VHDS, "n2", &[("8080/a:8080", b"vh".to_vec())]),
                false,
            )
            .expect("vhds");
        assert_eq!(h.routes, [("8080".to_string(), Bytes::from_static(b"vh"))]);
        assert!(c.pending[VHDS].is_empty());
        let again = c.initial_requests(true);
        let vh = again
            .iter()
            .map(decode_req)
            .find(|r| r.type_url == url(VHDS))
            .expect("VHDS on reconnect");
        assert_eq!(vh.resource_names_subscribe, ["8080"]);
        assert_eq!(vh.initial_resource_versions.len(), 1);
    }
}
