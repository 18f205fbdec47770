//! [`ViewKey`]: what decides the resources a proxy receives.

use std::sync::Arc;

use deltapilot_model::state::ModelState;
use deltapilot_model::{Proxy, ProxyType};

/// What decides a proxy's resources. Proxies with equal keys receive the same
/// view (one set of maps, one change log), so the number of distinct keys, not
/// of proxies, bounds what views cost.
///
/// A router selected by at least one Gateway has `Gateway { gateways }`; one
/// selected by none keeps `Default(Router)`.
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
    /// A router selected by exactly these Gateways.
    Gateway {
        /// The sorted ids (`<namespace>/<name>`) of the selecting Gateways.
        gateways: Arc<[Arc<str>]>,
    },
}

impl ViewKey {
    /// The proxy type whose listener flavour the view carries.
    pub fn proxy_type(&self) -> ProxyType {
        match self {
            ViewKey::Default(t) => *t,
            ViewKey::Sidecar { .. } => ProxyType::Sidecar,
            ViewKey::Gateway { .. } => ProxyType::Router,
        }
    }
}

impl std::fmt::Display for ViewKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ViewKey::Default(t) => write!(f, "default/{}", t.as_str()),
            ViewKey::Sidecar { sidecar } => write!(f, "sidecar/{sidecar}"),
            ViewKey::Gateway { gateways } => write!(f, "gateway/{}", gateways.join(",")),
        }
    }
}

/// The key of `proxy` in `model`: for a sidecar, the Sidecar that selects it
/// (Istio's order, see `RuleIndex::sidecar_for`, with `root_namespace`'s
/// selector-less Sidecar as the mesh default); for a router, the Gateways that
/// select it (`RuleIndex::gateways_selecting`, any namespace), if any;
/// otherwise its type. A pure function of (proxy, model), O(Sidecars of two
/// namespaces) or O(Gateways).
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
        ProxyType::Router => {
            let gateways = model
                .rules()
                .gateways_selecting(&proxy.namespace, &proxy.labels, false);
            if gateways.is_empty() {
                ViewKey::Default(ProxyType::Router)
            } else {
                ViewKey::Gateway {
                    gateways: gateways.into(),
                }
            }
        }
        t => ViewKey::Default(t),
    }
}
