//! [`ResourceKind`]: which of a [`ResourceSet`]'s eight maps a resource lives in,
//! the one place that enumerates them (replay reports, checkpoint files, the
//! snapshot hash and proxies' views all go through it).
//!
//! What it does NOT do: build or hold resources (see `resource` and `generate`).

use std::sync::Arc;

use super::{Resource, ResourceMap, ResourceSet, ResourceType};
use deltapilot_model::ProxyType;

/// Where a resource lives in a [`ResourceSet`]: its type, and for listeners and
/// clusters which flavour (listener names never collide; a cluster has the same
/// name in both flavours, each flavour in the views of its own proxy types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceKind {
    /// CDS.
    Cluster = 1,
    /// EDS.
    Endpoint = 2,
    /// LDS for sidecars and routers.
    SidecarListener = 3,
    /// LDS for proxyless gRPC (`api_listener`s).
    GrpcListener = 4,
    /// RDS.
    Route = 5,
    /// CDS for proxyless gRPC: the clusters with, on `GRPC` ports, only the
    /// policy gRPC's xDS client takes (see `generate::policy`).
    GrpcCluster = 6,
    /// RDS as VHDS delivers it: port configurations without virtual hosts.
    VhdsRoute = 7,
    /// VHDS: the virtual hosts of the `VhdsRoute` configurations.
    VirtualHost = 8,
}

impl ResourceKind {
    /// Every kind, in push order.
    pub const ALL: [ResourceKind; 8] = [
        ResourceKind::Cluster,
        ResourceKind::GrpcCluster,
        ResourceKind::Endpoint,
        ResourceKind::SidecarListener,
        ResourceKind::GrpcListener,
        ResourceKind::Route,
        ResourceKind::VhdsRoute,
        ResourceKind::VirtualHost,
    ];

    /// Its stable one-byte tag: written in checkpoint files and mixed into the
    /// snapshot hash, so these numbers never change.
    pub fn tag(self) -> u8 {
        self as u8
    }

    /// The kind with tag `tag`.
    pub fn from_tag(tag: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.tag() == tag)
    }

    /// The map of `set` that holds this kind, to change it.
    pub fn map_mut(self, set: &mut ResourceSet) -> &mut ResourceMap {
        match self {
            ResourceKind::Cluster => &mut set.clusters,
            ResourceKind::GrpcCluster => &mut set.grpc_clusters,
            ResourceKind::Endpoint => &mut set.endpoints,
            ResourceKind::SidecarListener => &mut set.sidecar_listeners,
            ResourceKind::GrpcListener => &mut set.grpc_listeners,
            ResourceKind::Route => &mut set.routes,
            ResourceKind::VhdsRoute => &mut set.vhds_routes,
            ResourceKind::VirtualHost => &mut set.virtual_hosts,
        }
    }

    /// The xDS type.
    pub fn resource_type(self) -> ResourceType {
        match self {
            ResourceKind::Cluster | ResourceKind::GrpcCluster => ResourceType::Cluster,
            ResourceKind::Endpoint => ResourceType::Endpoint,
            ResourceKind::SidecarListener | ResourceKind::GrpcListener => ResourceType::Listener,
            ResourceKind::Route | ResourceKind::VhdsRoute => ResourceType::Route,
            ResourceKind::VirtualHost => ResourceType::VirtualHost,
        }
    }

    /// The map of `set` that holds this kind.
    pub fn map(self, set: &ResourceSet) -> &ResourceMap {
        match self {
            ResourceKind::Cluster => &set.clusters,
            ResourceKind::GrpcCluster => &set.grpc_clusters,
            ResourceKind::Endpoint => &set.endpoints,
            ResourceKind::SidecarListener => &set.sidecar_listeners,
            ResourceKind::GrpcListener => &set.grpc_listeners,
            ResourceKind::Route => &set.routes,
            ResourceKind::VhdsRoute => &set.vhds_routes,
            ResourceKind::VirtualHost => &set.virtual_hosts,
        }
    }

    /// The kinds that hold resources of type `t`.
    pub fn of_type(t: ResourceType) -> &'static [ResourceKind] {
        match t {
            ResourceType::Cluster => &[ResourceKind::Cluster, ResourceKind::GrpcCluster],
            ResourceType::Endpoint => &[ResourceKind::Endpoint],
            ResourceType::Listener => &[ResourceKind::SidecarListener, ResourceKind::GrpcListener],
            ResourceType::Route => &[ResourceKind::Route, ResourceKind::VhdsRoute],
            ResourceType::VirtualHost => &[ResourceKind::VirtualHost],
            ResourceType::Secret => &[],
        }
    }

    /// The proxy types whose view holds this kind: listeners and clusters come in
    /// one flavour for Envoys and one for proxyless gRPC, VHDS is for Envoys
    /// only, everything else is shared.
    pub fn views(self) -> &'static [ProxyType] {
        match self {
            ResourceKind::SidecarListener
            | ResourceKind::Cluster
            | ResourceKind::VhdsRoute
            | ResourceKind::VirtualHost => &[ProxyType::Sidecar, ProxyType::Router],
            ResourceKind::GrpcListener | ResourceKind::GrpcCluster => &[ProxyType::ProxylessGrpc],
            _ => &[
                ProxyType::Sidecar,
                ProxyType::Router,
                ProxyType::ProxylessGrpc,
            ],
        }
    }

    /// Whether a proxy of type `pt` sees this kind.
    pub fn visible_to(self, pt: ProxyType) -> bool {
        self.views().contains(&pt)
    }

    /// Finds `name` of type `t` in `set`, with the kind that holds it.
    pub fn find(
        set: &ResourceSet,
        t: ResourceType,
        name: &str,
    ) -> Option<(ResourceKind, Arc<Resource>)> {
        Self::of_type(t)
            .iter()
            .find_map(|k| k.map(set).get(name).map(|r| (*k, r.clone())))
    }
}
