//! [`ViewKey`]: what decides the resources a proxy receives.

use std::sync::Arc;

use deltapilot_model::state::ModelState;
use deltapilot_model::{Proxy, ProxyType};

/// What decides a proxy's resources. Proxies with equal keys receive the same
/// view (one set of maps, one change log), so the number of distinct keys, not
/// of proxies, bounds what views cost.
///
/// Gateways plug in as one more variant, `Gateway { gateways }` (the sorted
/// keys of the Gateway objects whose selector matches a router's labels),
/// computed in [`key_for`]'s `ProxyType::Router` arm and served by a
/// gateway view beside the Sidecar ones in `Views`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ViewKey {
    /// The snapshot's own maps for this proxy type, shared by every proxy of
    /// the type that nothing else scopes (no copy).
    Default(ProxyType),
    /// A sidecar scoped by the Sidecar stored under this config key.
    Sidecar {
        /// The Sidecar's config key (`cfg/sidecar/<ns>/<name>`).
        sidecar: Arc<str>,
    },
}

impl ViewKey {
    /// The proxy type whose listener flavour the view carries.
    pub fn proxy_type(&self) -> ProxyType {
        match self {
            ViewKey::Default(t) => *t,
            ViewKey::Sidecar { .. } => ProxyType::Sidecar,
        }
    }
}

impl std::fmt::Display for ViewKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ViewKey::Default(t) => write!(f, "default/{}", t.as_str()),
            ViewKey::Sidecar { sidecar } => write!(f, "sidecar/{sidecar}"),
        }
    }
}

/// The key of `proxy` in `model`: for a sidecar, the Sidecar that selects it
/// (Istio's order, see `RuleIndex::sidecar_for`, with `root_namespace`'s
/// selector-less Sidecar as the mesh default); otherwise its type. A pure
/// function of (proxy, model), O(Sidecars of two namespaces).
pub fn key_for(proxy: &Proxy, model: &ModelState, root_namespace: &str) -> ViewKey {
    match proxy.proxy_type {
        ProxyType::Sidecar => {
            let labels = |k: &str| proxy.labels.get(k).map(|v| &**v);
            match model
                .rules()
                .sidecar_for(&proxy.namespace, labels, root_namespace)
            {
                Some(rule) => ViewKey::Sidecar {
                    sidecar: rule.key.clone(),
                },
                None => ViewKey::Default(ProxyType::Sidecar),
            }
        }
        // Routers keep the sidecar listeners until gateways are served (see the
        // type's doc for where the `Gateway` variant goes).
        t => ViewKey::Default(t),
    }
}
