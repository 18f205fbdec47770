//! DestinationRule → CDS and EDS: subsets, and the traffic policy applied to
//! each cluster.
//!
//! ## Subsets
//! Every subset of the host's DestinationRule becomes, per served port, a
//! cluster `outbound|<port>|<subset>|<host>` shaped like the host's own, with
//! (for EDS services) an assignment of the same name holding only the
//! endpoints whose labels include the subset's labels (see
//! `eds::load_assignment_matching`). A DNS service's subset clusters resolve
//! the same name as its own (labels cannot select among DNS answers, as in
//! Istio). Duplicate or unnamed subsets reject the whole rule in the model
//! (`DP1040`, `DP1041`), so a rule that reaches here has unique names.
//!
//! ## Override order (Istio's)
//! Each policy part (`loadBalancer`, `connectionPool`, `outlierDetection`,
//! `tls`) is taken whole from the most specific place that sets it: the
//! subset's port-level settings, the subset's policy, the top-level
//! port-level settings, the top-level policy. Parts are not merged field by
//! field (Istio replaces them whole too).
//!
//! ## Proxyless gRPC
//! Ports declared `GRPC` are the ones proxyless clients use. Each of their
//! clusters comes in two variants ([`Clusters`]): the full-policy one, for
//! Envoys (sidecars, routers), and the proxyless one, holding only what
//! gRPC's xDS client takes (gRFCs A42, A50, and circuit breaker
//! `max_requests`): round robin or ring hash, outlier detection, and
//! `max_requests`. Maglev, random, least request, upstream TLS and the other
//! limits would be NACKed or ignored, so they are left out of the proxyless
//! variant only and reported (`DP1120`, see `deltapilot_model::rules`). The
//! proxyless variant lives in `ResourceSet::grpc_clusters`, which proxyless
//! views read (see `view::resources_for`).
//!
//! What it does NOT do: decide which rule applies (the model's `RuleIndex`),
//! report problems (the model's parse does, so they land in rule statuses), or
//! route (the route's hash policy comes from [`hash_policies`]).

mod duration;
mod lb;
mod pool;
mod tls;

use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::config::cluster::v3::Cluster;

use super::common::{cluster_name, encode};
use super::eds::SubsetLabels;
use super::{GenOptions, ModelRead, cds};
use deltapilot_model::rules::{
    ClientTls, ConnectionPool, DestinationRule, LoadBalancer, OutlierDetection, TrafficPolicy,
};
use deltapilot_model::{Hostname, Port, Protocol, Service};

pub(crate) use duration::parse_duration;
pub use lb::hash_policies;

/// Name of a subset's cluster (and assignment): `outbound|<port>|<subset>|<host>`.
pub(crate) fn subset_cluster_name(port: u16, subset: &str, host: &Hostname) -> Arc<str> {
    Arc::from(format!("outbound|{port}|{subset}|{host}"))
}

/// The DestinationRule that applies to `host`, if the model has rules.
pub(crate) fn rule_for<M: ModelRead + ?Sized>(
    model: &M,
    host: &Hostname,
) -> Option<Arc<DestinationRule>> {
    model.rules()?.destination_rule_for(host)
}

/// The subset names of `dr`, sorted (unique: the model rejects duplicates).
pub(crate) fn subset_names(dr: Option<&DestinationRule>) -> Vec<Arc<str>> {
    let mut names: Vec<Arc<str>> = dr
        .and_then(|d| d.subsets.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|s| s.name.as_deref().filter(|n| !n.is_empty()))
        .map(Arc::from)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The label selector of subset `name` of `dr` (`None`: no such subset).
pub(crate) fn subset_labels<'a>(
    dr: Option<&'a DestinationRule>,
    name: &str,
) -> Option<&'a SubsetLabels> {
    static EMPTY: SubsetLabels = SubsetLabels::new();
    let s = dr?
        .subsets
        .as_ref()?
        .iter()
        .find(|s| s.name.as_deref() == Some(name))?;
    Some(s.labels.as_ref().unwrap_or(&EMPTY))
}

/// The policy parts in force for one (port, subset) cluster of a host.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Effective<'a> {
    pub(crate) lb: Option<&'a LoadBalancer>,
    pub(crate) pool: Option<&'a ConnectionPool>,
    pub(crate) outlier: Option<&'a OutlierDetection>,
    pub(crate) tls: Option<&'a ClientTls>,
}

impl<'a> Effective<'a> {
    /// Fills the parts still unset from `tp` at `port`: its port-level
    /// settings for the port first, then its own.
    fn fill(&mut self, tp: Option<&'a TrafficPolicy>, port: u16) {
        let Some(tp) = tp else {
            return;
        };
        let at_port = tp
            .port_level_settings
            .iter()
            .flatten()
            .find(|s| s.port.as_ref().and_then(|p| p.number) == Some(u32::from(port)));
        if let Some(s) = at_port {
            self.lb = self.lb.or(s.load_balancer.as_ref());
            self.pool = self.pool.or(s.connection_pool.as_ref());
            self.outlier = self.outlier.or(s.outlier_detection.as_ref());
            self.tls = self.tls.or(s.tls.as_ref());
        }
        self.lb = self.lb.or(tp.load_balancer.as_ref());
        self.pool = self.pool.or(tp.connection_pool.as_ref());
        self.outlier = self.outlier.or(tp.outlier_detection.as_ref());
        self.tls = self.tls.or(tp.tls.as_ref());
    }
}

/// The policy for `port` (and `subset`) of `dr`, in Istio's override order
/// (see the module doc).
pub(crate) fn effective<'a>(
    dr: &'a DestinationRule,
    port: u16,
    subset: Option<&str>,
) -> Effective<'a> {
    let mut e = Effective::default();
    if let Some(name) = subset {
        let sub = dr
            .subsets
            .iter()
            .flatten()
            .find(|s| s.name.as_deref() == Some(name));
        e.fill(sub.and_then(|s| s.traffic_policy.as_ref()), port);
    }
    e.fill(dr.traffic_policy.as_ref(), port);
    e
}

/// Whether proxyless gRPC clients use this port's clusters (see the module doc).
pub(crate) fn proxyless(port: &Port) -> bool {
    port.protocol == Protocol::Grpc
}

/// The two variants of one cluster: the full-policy one (Envoys), and the
/// proxyless one where it differs in what is built (`None`: the port is not
/// `GRPC` or no rule applies, so proxyless clients take the full one).
pub(crate) type Clusters = (Built, Option<Built>);

/// Builds and encodes the cluster of `port` of `svc` (the subset's when
/// `subset` is set) with `dr`'s policy, in both variants (see [`Clusters`]).
/// Without a rule it is exactly `cds::cluster`'s.
pub(crate) fn cluster(
    svc: &Service,
    port: &Port,
    subset: Option<&str>,
    dr: Option<&DestinationRule>,
    opts: &GenOptions,
) -> Clusters {
    let name = match subset {
        Some(s) => subset_cluster_name(port.number, s, &svc.hostname),
        None => cluster_name(port.number, &svc.hostname),
    };
    let c = match cds::build(svc, port, name.to_string(), opts) {
        Ok(c) => c,
        Err(e) => return (Err(e), None),
    };
    let Some(dr) = dr else {
        return (Ok(encode(&c)), None);
    };
    let e = effective(dr, port.number, subset);
    let variant = proxyless(port).then(|| {
        let mut g = c.clone();
        apply(&mut g, port, &e, true);
        Ok(encode(&g))
    });
    let mut full = c;
    apply(&mut full, port, &e, false);
    (Ok(encode(&full)), variant)
}

/// Applies the policy parts to a built cluster (`grpc`: only what proxyless
/// gRPC takes).
fn apply(c: &mut Cluster, port: &Port, e: &Effective<'_>, grpc: bool) {
    if let Some(lb) = e.lb {
        lb::apply(c, lb, grpc);
    }
    if let Some(pool) = e.pool {
        pool::apply_pool(c, pool, port, grpc);
    }
    if let Some(od) = e.outlier {
        pool::apply_outlier(c, od);
    }
    if let Some(t) = e.tls
        && !grpc
    {
        tls::apply(c, t);
    }
}

/// A resource built and encoded, or why it could not be.
pub(crate) type Built = Result<Bytes, String>;

/// The resources of one subset of one served port: the subset's cluster and,
/// for an EDS service (`eps` set), its assignment of the matching endpoints.
/// `None` for both when `dr` has no subset `subset` (any more).
pub(crate) fn subset_resources(
    svc: &Service,
    port: &Port,
    subset: &str,
    dr: Option<&DestinationRule>,
    eps: Option<&mut super::eds::HostEndpoints<'_>>,
    opts: &GenOptions,
) -> Option<(Clusters, Option<Built>)> {
    let labels = subset_labels(dr, subset)?;
    let name = subset_cluster_name(port.number, subset, &svc.hostname);
    let assignment =
        eps.map(|eps| super::eds::load_assignment_matching(eps, &name, port, Some(labels)));
    Some((cluster(svc, port, Some(subset), dr, opts), assignment))
}

#[cfg(test)]
mod tests;
