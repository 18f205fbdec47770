//! A simulated Envoy's state-of-the-world xDS client state, with no I/O.
//!
//! Same subscription order as delta (CDS wildcard, EDS for received clusters, LDS
//! wildcard after the first CDS ACK, RDS for referenced routes), but every request
//! carries the full list of names for its type, ACKs echo `version_info` and the
//! nonce, and a NACK repeats the last accepted version with `error_detail`. A CDS
//! or LDS response holds the whole state of its type, so what changed (and what
//! went) is found by comparing content hashes with the previous response; an
//! EDS or RDS response may hold only some subscribed names (the xDS spec allows
//! it for these types), and what it leaves out is kept, as Envoy keeps it.
//!
//! What it does NOT do: talk gRPC or track convergence.

use std::collections::{BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};

use bytes::Bytes;
use deltapilot_xds::ResourceType;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use prost::Message;

use super::wire::{self, SotwResponse};
use super::{Handled, decode, nack_status};

const CDS: usize = 0;
const EDS: usize = 1;
const LDS: usize = 2;
const RDS: usize = 3;

/// One state-of-the-world client's state.
#[derive(Debug)]
pub struct SotwClient {
    node: Bytes,
    version: [String; 4],
    nonce: [String; 4],
    held: [HashMap<String, u64>; 4],
    eds: BTreeSet<String>,
    rds: BTreeSet<String>,
    routes_of: HashMap<String, Vec<String>>,
    got: [bool; 4],
    lds_started: bool,
}

fn url(i: usize) -> String {
    ResourceType::ALL[i].type_url().to_owned()
}

/// Whether every response of type `t` holds the whole state (CDS and LDS);
/// EDS and RDS responses may hold only some of the subscribed names.
fn full_state(t: usize) -> bool {
    t == CDS || t == LDS
}

fn hash(b: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    b.hash(&mut h);
    h.finish()
}

impl SotwClient {
    /// A fresh client for `node`.
    pub fn new(node: Node) -> Self {
        SotwClient {
            node: wire::node_field(&node, 2),
            version: Default::default(),
            nonce: Default::default(),
            held: Default::default(),
            eds: BTreeSet::new(),
            rds: BTreeSet::new(),
            routes_of: HashMap::new(),
            got: [false; 4],
            lds_started: false,
        }
    }

    fn names(&self, t: usize) -> Vec<String> {
        match t {
            EDS => self.eds.iter().cloned().collect(),
            RDS => self.rds.iter().cloned().collect(),
            _ => Vec::new(),
        }
    }

    fn encode(&self, r: &DiscoveryRequest) -> Bytes {
        wire::with_node(r, &self.node)
    }

    fn req(&self, t: usize) -> DiscoveryRequest {
        DiscoveryRequest {
            type_url: url(t),
            version_info: self.version[t].clone(),
            response_nonce: self.nonce[t].clone(),
            resource_names: self.names(t),
            ..Default::default()
        }
    }

    /// The requests that open a stream: CDS on a first connection; on a reconnect,
    /// every type it had, with its names (SotW has no `initial_resource_versions`;
    /// the server answers everything again).
    pub fn initial_requests(&mut self, reconnect: bool) -> Vec<Bytes> {
        let mut types = vec![CDS];
        if reconnect {
            self.nonce = Default::default();
            if !self.eds.is_empty() {
                types.push(EDS);
            }
            if self.lds_started {
                types.push(LDS);
            }
            if !self.rds.is_empty() {
                types.push(RDS);
            }
        }
        types
            .into_iter()
            .map(|t| self.encode(&self.req(t)))
            .collect()
    }

    /// Names it would report on reconnect (none: SotW has no such field).
    pub fn known_count(&self) -> usize {
        0
    }

    /// Whether everything it subscribed to has been answered.
    pub fn synced(&self) -> bool {
        self.got[CDS]
            && self.got[LDS]
            && self.eds.iter().all(|n| self.held[EDS].contains_key(n))
            && self.rds.iter().all(|n| self.held[RDS].contains_key(n))
    }

    /// Handles one response; `nack` rejects it.
    pub fn on_response(&mut self, bytes: &Bytes, nack: bool) -> anyhow::Result<Handled> {
        let resp = SotwResponse::decode(bytes.clone())?;
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
        self.nonce[t] = resp.nonce.clone();
        if nack {
            // Counted as in delta: what differs from what the proxy holds.
            let held: std::collections::HashSet<u64> = self.held[t].values().copied().collect();
            h.changed_bytes = resp
                .resources
                .iter()
                .filter(|a| !held.contains(&hash(&a.value)))
                .map(|a| a.value.len())
                .sum();
            let mut r = self.req(t);
            r.error_detail = Some(nack_status());
            h.requests.push(self.encode(&r));
            return Ok(h);
        }
        self.got[t] = true;
        let mut now: HashMap<String, u64> = HashMap::with_capacity(resp.resources.len());
        for any in &resp.resources {
            let v: &[u8] = &any.value;
            let name = match t {
                EDS => {
                    let (cluster, addrs) = wire::cla_addresses(&any.value)?;
                    h.cla.push((cluster.clone(), addrs));
                    cluster
                }
                LDS => {
                    let (name, routes) = decode::listener_routes(v)?;
                    self.routes_of.insert(name.clone(), routes);
                    name
                }
                _ => decode::name_of(v)?,
            };
            let hv = hash(v);
            if self.held[t].get(&name) != Some(&hv) {
                h.changed_bytes += v.len();
                if t == RDS {
                    h.routes.push((name.clone(), any.value.clone()));
                }
            }
            now.insert(name, hv);
        }
        if full_state(t) {
            for n in self.held[t].keys() {
                if !now.contains_key(n) {
                    h.changed_bytes += n.len();
                    match t {
                        CDS => h.gone.push(n.clone()),
                        LDS => {
                            self.routes_of.remove(n);
                        }
                        _ => {}
                    }
                }
            }
            self.held[t] = now;
        } else {
            // EDS and RDS responses may carry only what changed (xDS allows
            // it, go-control-plane's LinearCache does it): what is absent is
            // kept; it goes when CDS or LDS stops naming it.
            self.held[t].extend(now);
        }
        self.version[t] = resp.version_info.clone();
        let mut out = vec![self.req(t)];
        match t {
            CDS => {
                let wanted: BTreeSet<String> = self.held[CDS].keys().cloned().collect();
                if wanted != self.eds {
                    self.held[EDS].retain(|n, _| wanted.contains(n));
                    self.eds = wanted;
                    out.push(self.req(EDS));
                }
                if !self.lds_started {
                    self.lds_started = true;
                    out.push(self.req(LDS));
                }
            }
            LDS => {
                let wanted: BTreeSet<String> = self.routes_of.values().flatten().cloned().collect();
                if wanted != self.rds {
                    self.held[RDS].retain(|n, _| wanted.contains(n));
                    self.rds = wanted;
                    out.push(self.req(RDS));
                }
            }
            _ => {}
        }
        h.requests = out.iter().map(|r| self.encode(r)).collect();
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
    use envoy_types::pb::google::protobuf::Any;

    fn cds(nonce: &str, version: &str, names: &[&str]) -> Bytes {
        DiscoveryResponse {
            type_url: url(CDS),
            version_info: version.into(),
            nonce: nonce.into(),
            resources: names
                .iter()
                .map(|n| Any {
                    type_url: url(CDS),
                    value: Cluster {
                        name: (*n).into(),
                        ..Default::default()
                    }
                    .encode_to_vec(),
                })
                .collect(),
            ..Default::default()
        }
        .encode_to_vec()
        .into()
    }

    fn req(b: &Bytes) -> DiscoveryRequest {
        DiscoveryRequest::decode(b.as_ref()).expect("request")
    }

    #[test]
    fn acks_echo_version_and_nonce_and_removals_are_found_by_absence() {
        let mut c = SotwClient::new(Node::default());
        let h = c
            .on_response(&cds("n1", "v1", &["a", "b"]), false)
            .expect("cds");
        let r: Vec<_> = h.requests.iter().map(req).collect();
        assert_eq!(
            (r[0].version_info.as_str(), r[0].response_nonce.as_str()),
            ("v1", "n1")
        );
        assert!(r[0].node.is_some());
        assert_eq!(r[1].resource_names, ["a", "b"]);
        assert_eq!(r[2].type_url, url(LDS));
        let h = c.on_response(&cds("n2", "v2", &["b"]), false).expect("cds");
        assert_eq!(h.gone, ["a"]);
        assert_eq!(
            h.changed_bytes, 1,
            "only the removed name counts; b is unchanged"
        );
        let h = c
            .on_response(&cds("n3", "v3", &["b", "c"]), true)
            .expect("nack");
        let r = req(&h.requests[0]);
        assert_eq!(
            (r.version_info.as_str(), r.response_nonce.as_str()),
            ("v2", "n3")
        );
        assert!(r.error_detail.is_some());
    }

    fn eds(nonce: &str, version: &str, names: &[&str]) -> Bytes {
        use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
        DiscoveryResponse {
            type_url: url(EDS),
            version_info: version.into(),
            nonce: nonce.into(),
            resources: names
                .iter()
                .map(|n| Any {
                    type_url: url(EDS),
                    value: ClusterLoadAssignment {
                        cluster_name: (*n).into(),
                        ..Default::default()
                    }
                    .encode_to_vec(),
                })
                .collect(),
            ..Default::default()
        }
        .encode_to_vec()
        .into()
    }

    #[test]
    fn partial_eds_responses_keep_what_they_leave_out() {
        let mut c = SotwClient::new(Node::default());
        c.on_response(&cds("n1", "v1", &["a", "b"]), false)
            .expect("cds");
        c.on_response(&eds("n2", "v1", &["a", "b"]), false)
            .expect("eds");
        let h = c.on_response(&eds("n3", "v2", &["a"]), false).expect("eds");
        assert_eq!(h.changed_bytes, 0, "a is unchanged and b is not gone");
        assert!(c.held[EDS].contains_key("b"));
        c.on_response(&cds("n4", "v2", &["a"]), false).expect("cds");
        assert!(!c.held[EDS].contains_key("b"), "b goes with its cluster");
    }
}
