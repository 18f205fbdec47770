//! [`ViewKey`]: what decides the resources a proxy receives.

use std::sync::Arc;

use deltapilot_model::state::ModelState;
use deltapilot_model::{Proxy, ProxyType};

/// What decides a proxy's resources. Proxies with equal keys receive the same
/// view (one set of maps, one change log), so the number of distinct keys, not
/// of proxies, bounds what views cost.
///
/// A router selected by at least one Gateway has `Gateway { gateways }`; one
/// selected by none keeps `Default(Router)`. A sidecar that neither a Sidecar
/// scopes nor any restricted VirtualService is exported to keeps
/// `Default(Sidecar)`: a mesh without `exportTo` costs no view.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ViewKey {
    /// The snapshot's own maps for this proxy type, shared by every proxy of
    /// the type that nothing else scopes (no copy).
    Default(ProxyType),
    /// A sidecar scoped by a Sidecar, or seeing restricted VirtualServices
    /// (its namespace's visibility class), or both. Proxies of namespaces
    /// that see the same restricted objects under the same Sidecar share it.
    Sidecar {
        /// The Sidecar's config key (`cfg/sidecar/<ns>/<name>`), if one
        /// scopes the proxy.
        sidecar: Option<Arc<str>>,
        /// The sorted keys of the restricted VirtualServices,
        /// DestinationRules and ServiceEntries exported to the proxy's
        /// namespace, with the `#own` marker of its own namespace's
        /// DestinationRules (`RuleIndex::visible_from`); empty when it sees
        /// only public ones.
        visible: Arc<[Arc<str>]>,
        /// The `sourceLabels` selectors in use that the proxy's labels
        /// satisfy (`RuleIndex::sources_matching`), sorted.
        sources: Arc<[Arc<str>]>,
    },
    /// A router selected by exactly these Gateways.
    Gateway {
        /// The sorted ids (`<namespace>/<name>`) of the selecting Gateways.
        gateways: Arc<[Arc<str>]>,
        /// The restricted DestinationRules the router's namespace sees
        /// (`RuleIndex::destination_rules_visible_from`), sorted; empty when
        /// it sees only public ones.
        visible: Arc<[Arc<str>]>,
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
            ViewKey::Sidecar {
                sidecar,
                visible,
                sources,
            } => {
                match sidecar {
                    Some(s) => write!(f, "sidecar/{s}")?,
                    None => write!(f, "default/sidecar")?,
                }
                if !visible.is_empty() {
                    let short = |k: &Arc<str>| {
                        k.strip_prefix("cfg/virtual_service/")
                            .or_else(|| k.strip_prefix("cfg/"))
                            .unwrap_or(k)
                            .to_string()
                    };
                    let ids: Vec<String> = visible.iter().map(short).collect();
                    write!(f, "+sees/{}", ids.join(","))?;
                } else if sidecar.is_none() && sources.is_empty() {
                    // Restricted ServiceEntries hide hosts from it.
                    write!(f, "+sees/none")?;
                }
                if !sources.is_empty() {
                    write!(f, "+labels/{}", sources.join(";"))?;
                }
                Ok(())
            }
            ViewKey::Gateway { gateways, visible } => {
                write!(f, "gateway/{}", gateways.join(","))?;
                if !visible.is_empty() {
                    let ids: Vec<&str> = (visible.iter())
                        .map(|k| k.strip_prefix("cfg/").unwrap_or(k))
                        .collect();
                    write!(f, "+sees/{}", ids.join(","))?;
                }
                Ok(())
            }
        }
    }
}

/// The key of `proxy` in `model`: for a sidecar, the Sidecar that selects it
/// (Istio's order, see `RuleIndex::sidecar_for`, with `root_namespace`'s
/// selector-less Sidecar as the mesh default) and the restricted
/// VirtualServices its namespace sees (nothing is looked up when none is
/// restricted); for a router, the Gateways that
/// select it (`RuleIndex::gateways_selecting`, any namespace), if any;
/// otherwise its type. A pure function of (proxy, model), O(Sidecars of two
/// namespaces) or O(Gateways).
pub fn key_for(proxy: &Proxy, model: &ModelState, root_namespace: &str) -> ViewKey {
    match proxy.proxy_type {
        ProxyType::Sidecar => {
            let labels = |k: &str| proxy.labels.get(k).map(|v| &**v);
            let rules = model.rules();
            let sidecar = rules
                .sidecar_for(&proxy.namespace, labels, root_namespace)
                .map(|r| r.key.clone());
            let visible = if rules.has_restricted() {
                rules.visible_from(&proxy.namespace)
            } else {
                Vec::new()
            };
            // Restricted ServiceEntries hide hosts from every namespace they
            // are not exported to, so no sidecar is on the default view then.
            let sources = if rules.has_sources() {
                let mut labels = proxy.labels.clone();
                labels.insert(
                    Arc::from(deltapilot_model::rules::SOURCE_NAMESPACE_KEY),
                    proxy.namespace.clone(),
                );
                rules.sources_matching(&labels)
            } else {
                Vec::new()
            };
            if sidecar.is_none()
                && visible.is_empty()
                && sources.is_empty()
                && !rules.has_restricted_entries()
            {
                ViewKey::Default(ProxyType::Sidecar)
            } else {
                ViewKey::Sidecar {
                    sidecar,
                    visible: visible.into(),
                    sources: sources.into(),
                }
            }
        }
        ProxyType::Router => {
            let rules = model.rules();
            let gateways = rules.gateways_selecting(&proxy.namespace, &proxy.labels, false);
            if gateways.is_empty() {
                ViewKey::Default(ProxyType::Router)
            } else {
                ViewKey::Gateway {
                    gateways: gateways.into(),
                    visible: rules
                        .destination_rules_visible_from(&proxy.namespace)
                        .into(),
                }
            }
        }
        t => ViewKey::Default(t),
    }
}
