//! The Kubernetes resources the adapter watches, and how each is addressed
//! (API group, version, plural, scope) and scoped (namespaces, label selector).
//!
//! What it does NOT do: read objects (see `parse`) or run watches (see `watch`).

use std::fmt;

use deltapilot_proto as pb;
use kube::core::ApiResource;

/// The API group of the Istio networking kinds carried as config objects.
pub(crate) const ISTIO_GROUP: &str = "networking.istio.io";
/// The version of [`ISTIO_GROUP`] watched.
pub(crate) const ISTIO_VERSION: &str = "v1";

/// The six Istio networking kinds, with their plural resource names.
const ISTIO_KINDS: [(pb::ConfigKind, &str, &str); 6] = [
    (
        pb::ConfigKind::VirtualService,
        "VirtualService",
        "virtualservices",
    ),
    (
        pb::ConfigKind::DestinationRule,
        "DestinationRule",
        "destinationrules",
    ),
    (pb::ConfigKind::Gateway, "Gateway", "gateways"),
    (
        pb::ConfigKind::ServiceEntry,
        "ServiceEntry",
        "serviceentries",
    ),
    (
        pb::ConfigKind::WorkloadEntry,
        "WorkloadEntry",
        "workloadentries",
    ),
    (pb::ConfigKind::Sidecar, "Sidecar", "sidecars"),
];

/// One kind of watched resource. Public because the status reports sync state per
/// kind (and namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceKind {
    /// `v1` Services: become service entities.
    Service,
    /// `discovery.k8s.io/v1` EndpointSlices: become endpoint entities.
    EndpointSlice,
    /// `v1` Pods: labels, service account and node of endpoints.
    Pod,
    /// `v1` Nodes: region, zone and subzone of endpoints.
    Node,
    /// An Istio `networking.istio.io/v1` kind: becomes a config entity.
    Istio(pb::ConfigKind),
}

impl ResourceKind {
    /// The kinds the adapter watches: the four core kinds, plus the six Istio kinds
    /// when `istio` is set.
    pub(crate) fn all(istio: bool) -> Vec<ResourceKind> {
        let mut kinds = vec![
            ResourceKind::Service,
            ResourceKind::EndpointSlice,
            ResourceKind::Pod,
            ResourceKind::Node,
        ];
        if istio {
            kinds.extend(ISTIO_KINDS.iter().map(|(k, _, _)| ResourceKind::Istio(*k)));
        }
        kinds
    }

    /// The Kubernetes `kind` name (`Service`, `VirtualService`, ...), for status and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Service => "Service",
            ResourceKind::EndpointSlice => "EndpointSlice",
            ResourceKind::Pod => "Pod",
            ResourceKind::Node => "Node",
            ResourceKind::Istio(k) => ISTIO_KINDS
                .iter()
                .find(|(c, _, _)| *c == k)
                .map_or("Unknown", |(_, name, _)| name),
        }
    }

    /// Whether objects of this kind live in namespaces (all but Nodes).
    pub(crate) fn namespaced(self) -> bool {
        self != ResourceKind::Node
    }

    /// Whether the adapter's label selector restricts this kind. Services and Istio
    /// objects are selected; EndpointSlices follow their (selected) Service; Pods
    /// and Nodes are read only to describe endpoints, so filtering them would only
    /// strip labels and localities.
    pub(crate) fn label_selected(self) -> bool {
        matches!(self, ResourceKind::Service | ResourceKind::Istio(_))
    }

    /// Whether this kind may legitimately be missing from a cluster (a CRD that is
    /// not installed). Such a kind answers 404 on list; the adapter then treats it
    /// as empty and keeps retrying.
    pub(crate) fn optional(self) -> bool {
        matches!(self, ResourceKind::Istio(_))
    }

    /// How to address this kind through kube's dynamic API.
    pub(crate) fn api_resource(self) -> ApiResource {
        use k8s_openapi::api::{core::v1, discovery::v1 as discovery};
        match self {
            ResourceKind::Service => ApiResource::erase::<v1::Service>(&()),
            ResourceKind::EndpointSlice => ApiResource::erase::<discovery::EndpointSlice>(&()),
            ResourceKind::Pod => ApiResource::erase::<v1::Pod>(&()),
            ResourceKind::Node => ApiResource::erase::<v1::Node>(&()),
            ResourceKind::Istio(k) => {
                let (kind, plural) = ISTIO_KINDS
                    .iter()
                    .find(|(c, _, _)| *c == k)
                    .map_or(("Unknown", "unknown"), |(_, n, p)| (*n, *p));
                ApiResource {
                    group: ISTIO_GROUP.to_owned(),
                    version: ISTIO_VERSION.to_owned(),
                    api_version: format!("{ISTIO_GROUP}/{ISTIO_VERSION}"),
                    kind: kind.to_owned(),
                    plural: plural.to_owned(),
                }
            }
        }
    }
}

/// The verbs every watch needs: kube-runtime's watcher lists, then watches (the
/// one-object probe after a failed watch is a list too). The adapter never gets,
/// creates, updates or deletes anything. Public so that the Helm chart's RBAC
/// rules are checked against it (`server/tests/deploy_chart.rs`).
pub const WATCH_VERBS: [&str; 2] = ["list", "watch"];

/// The API group (`""` for the core group) and plural resource name of every kind
/// the adapter watches, in [`ResourceKind::all`] order: what its RBAC rules must
/// grant [`WATCH_VERBS`] on, and nothing more.
pub fn watched_resources(istio: bool) -> Vec<(String, String)> {
    ResourceKind::all(istio)
        .into_iter()
        .map(|k| {
            let ar = k.api_resource();
            (ar.group, ar.plural)
        })
        .collect()
}

impl fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One watch: a kind in one namespace (or all namespaces, or cluster-wide).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WatchSpec {
    /// What is watched.
    pub(crate) kind: ResourceKind,
    /// `None`: all namespaces (or cluster-scoped).
    pub(crate) namespace: Option<String>,
    /// The label selector sent to the API server, if this kind is selected.
    pub(crate) label_selector: Option<String>,
}

/// Every watch the adapter runs for these options: one per kind and selected
/// namespace (one per kind when `namespaces` is empty), Nodes once.
pub(crate) fn watch_specs(
    istio: bool,
    namespaces: &[String],
    label_selector: Option<&str>,
) -> Vec<WatchSpec> {
    let mut out = Vec::new();
    for kind in ResourceKind::all(istio) {
        let label_selector = if kind.label_selected() {
            label_selector.map(str::to_owned)
        } else {
            None
        };
        if !kind.namespaced() || namespaces.is_empty() {
            out.push(WatchSpec {
                kind,
                namespace: None,
                label_selector,
            });
        } else {
            for ns in namespaces {
                out.push(WatchSpec {
                    kind,
                    namespace: Some(ns.clone()),
                    label_selector: label_selector.clone(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_cover_every_kind_and_namespace_and_select_only_what_is_selected() {
        let specs = watch_specs(true, &["a".into(), "b".into()], Some("app=x"));
        // 9 namespaced kinds × 2 namespaces + Nodes once.
        assert_eq!(specs.len(), 9 * 2 + 1);
        let node = specs
            .iter()
            .find(|s| s.kind == ResourceKind::Node)
            .expect("nodes");
        assert_eq!(node.namespace, None);
        assert_eq!(node.label_selector, None);
        let svc = specs
            .iter()
            .find(|s| s.kind == ResourceKind::Service)
            .expect("services");
        assert_eq!(svc.label_selector.as_deref(), Some("app=x"));
        let pod = specs
            .iter()
            .find(|s| s.kind == ResourceKind::Pod)
            .expect("pods");
        assert_eq!(pod.label_selector, None);
        assert_eq!(watch_specs(false, &[], None).len(), 4);
    }

    #[test]
    fn istio_kinds_address_the_v1_group() {
        let ar = ResourceKind::Istio(pb::ConfigKind::ServiceEntry).api_resource();
        assert_eq!(ar.api_version, "networking.istio.io/v1");
        assert_eq!(ar.plural, "serviceentries");
        assert_eq!(ar.kind, "ServiceEntry");
        let slices = ResourceKind::EndpointSlice.api_resource();
        assert_eq!(slices.api_version, "discovery.k8s.io/v1");
        assert_eq!(slices.plural, "endpointslices");
    }

    #[test]
    fn watched_resources_name_groups_and_plurals() {
        let core = watched_resources(false);
        assert_eq!(
            core,
            [
                ("", "services"),
                ("discovery.k8s.io", "endpointslices"),
                ("", "pods"),
                ("", "nodes"),
            ]
            .map(|(g, p)| (g.to_owned(), p.to_owned()))
        );
        let all = watched_resources(true);
        assert_eq!(all.len(), 10);
        assert!(all.contains(&("networking.istio.io".to_owned(), "sidecars".to_owned())));
    }
}
