//! Traffic rules in the model: VirtualService, DestinationRule, Gateway and Sidecar,
//! typed, bound to hosts and gateways and indexed, as part of the pure fold.
//!
//! Every adapter already writes these objects as config entities (kind, namespace,
//! name, canonical spec JSON; the adapters accept `networking.istio.io` `v1`,
//! `v1beta1` and `v1alpha3`, whose schemas for these kinds are the same). The fold
//! keeps a [`RuleIndex`] next to the raw configs, updated on each upsert, delete
//! and sweep, and built the same way when a checkpoint is restored (checkpoints
//! store the raw configs and load them through the same path), so replay and
//! restore reproduce it exactly.
//!
//! - [`VirtualService`], [`DestinationRule`]: the specs, field by field;
//! - `sidecar`: the [`Sidecar`] spec, its egress hosts and selection;
//! - `parse`: from a config object to a [`Rule`] (spec, bound hosts, destinations,
//!   [`Problem`]s with stable codes; unknown fields are reported, never dropped);
//! - `host`: how a rule's hosts name hostnames (short names, FQDNs, wildcards);
//! - [`RuleIndex`]: which rule applies to a host, the reverse indexes, statuses.
//!
//! Binding: `gateways` absent or containing `mesh` binds the rule to sidecars and
//! proxyless clients; each named gateway (`ns/name`, or `name` in the rule's
//! namespace) binds it to that Gateway's servers (see `gateway` and
//! [`RuleIndex::virtual_services_for_gateway`]); a malformed entry is reported
//! (`DP1013`).
//!
//! `exportTo` of a VirtualService (`.`, `*`, namespaces, `~`; public when
//! absent, as Istio's default without a mesh-config default) is honoured: a
//! restricted one is kept out of the host index that every proxy reads, and
//! the sidecar views of the namespaces it is exported to bind it
//! ([`RuleIndex::with_visible`]); a Gateway binds it when it is exported to
//! the Gateway's namespace. `~` alone binds nothing (`DP1012`). A
//! DestinationRule's `exportTo` likewise keeps a restricted one out of the
//! host index, and the views of the namespaces it is exported to apply it
//! ahead of the public ones (their own namespace's first), for sidecars and,
//! by the router's namespace, gateways; proxyless clients read only public
//! ones (`DP1011`). A ServiceEntry's
//! `exportTo` hides its hosts from the sidecars of the namespaces it is not
//! exported to (`export`).
//!
//! What it does NOT do: translate rules to Envoy config (the xDS crate), read
//! anything, or run async.

mod dr;
mod dr_check;
mod duration;
mod export;
mod gateway;
mod host;
mod index;
mod parse;
mod problem;
mod sidecar;
mod source;
mod types;
mod vs;

pub use dr::{
    ClientTls, ConnectionPool, ConsistentHash, DestinationRule, HttpCookie, HttpPool, LoadBalancer,
    LocalityDistribute, LocalityFailover, LocalityLb, Maglev, OutlierDetection, PortTrafficPolicy,
    RingHash, Subset, TcpKeepalive, TcpPool, TrafficPolicy,
};
pub use duration::parse_duration;
pub use export::{EntryExport, ExportDefaults};
pub use gateway::{
    BoundGateway, Gateway, GatewayServer, Server, ServerHost, ServerMode, ServerPort, ServerTls,
    gateway_id, resolve_gateway_ref, valid_credential,
};
pub use host::{DOMAIN_SUFFIX, host_error, host_matches, is_wildcard, resolve_host, wildcards_of};
pub use index::{BoundVirtualService, RuleIndex, RuleTouch, is_restricted};
pub use parse::{Rule, RuleSpec, is_rule_kind, parse, parse_with, resolve_export};
pub use problem::{Problem, RuleStatus, Severity};
pub use sidecar::{
    DEFAULT_ROOT_NAMESPACE, EgressHost, EgressListener, EgressNamespace, OutboundMode,
    OutboundTrafficPolicy, Sidecar, SidecarScope, WorkloadSelector,
};
pub use source::{SOURCE_NAMESPACE_KEY, selector_from, selector_id, source_selector};
pub use types::{F64, Percent, PortSelector, StringMatch, StringMatchKind};
pub use vs::{
    CorsPolicy, Destination, DirectResponse, Fault, FaultAbort, FaultDelay, HeaderOps, Headers,
    HttpMatch, HttpRoute, L4Match, Redirect, RegexRewrite, ResponseBody, Retries, Rewrite,
    RouteDestination, TlsMatch, TlsRoute, VirtualService,
};

#[cfg(test)]
mod tests;

#[cfg(test)]
mod gateway_tests;
