//! `sourceLabels` of VirtualService match blocks (`http`, `tcp`, `tls`): which selectors exist,
//! and which a proxy's labels satisfy.
//!
//! A selector is named by its canonical text ([`selector_id`], `k=v,k2=v2`,
//! keys sorted). The index counts, per selector, the bound VirtualServices
//! that use it, so a sidecar's view key can carry exactly the selectors its
//! labels satisfy among those that exist (`RuleIndex::sources_matching`), and
//! proxies with equal match sets share a view. An empty selector matches
//! every proxy and is no condition at all. A block's `sourceNamespace` joins
//! its selector as the pseudo label [`SOURCE_NAMESPACE_KEY`] (no Kubernetes
//! label key contains `:`), which the caller adds to a proxy's labels, so one
//! mechanism decides both and a proxy satisfies namespace selectors of its
//! own namespace only.
//!
//! What it does NOT do: decide which routes a view gets (the xDS crate skips
//! the blocks whose selector its key does not carry).

use std::collections::BTreeMap;
use std::sync::Arc;

use imbl::OrdMap;

use super::parse::Rule;
use super::vs::HttpMatch;
use crate::model::Labels;

/// The pseudo label a block's `sourceNamespace` becomes in its selector, and
/// that a proxy's namespace is added to its labels under.
pub const SOURCE_NAMESPACE_KEY: &str = ":namespace";

/// The selector of match block `m`: its `sourceLabels` and `sourceNamespace`
/// (as [`SOURCE_NAMESPACE_KEY`]), or `None` when it has neither.
pub fn source_selector(m: &HttpMatch) -> Option<BTreeMap<String, String>> {
    selector_from(m.source_labels.as_ref(), m.source_namespace.as_deref())
}

/// The selector of a match block's `sourceLabels` and `sourceNamespace` (any
/// route kind: `http`, `tcp`, `tls`), or `None` when it has neither.
pub fn selector_from(
    labels: Option<&BTreeMap<String, String>>,
    namespace: Option<&str>,
) -> Option<BTreeMap<String, String>> {
    let mut sel = labels.cloned().unwrap_or_default();
    if let Some(ns) = namespace.filter(|n| !n.is_empty()) {
        sel.insert(SOURCE_NAMESPACE_KEY.to_string(), ns.to_string());
    }
    (!sel.is_empty()).then_some(sel)
}

/// The canonical text of a `sourceLabels` selector: `k=v` pairs in key order,
/// joined by `,`.
pub fn selector_id(labels: &BTreeMap<String, String>) -> Arc<str> {
    let parts: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    Arc::from(parts.join(","))
}

/// The non-empty `sourceLabels` selectors of `rule`'s HTTP match blocks, each
/// once, with their labels.
fn selectors_of(rule: &Rule) -> BTreeMap<Arc<str>, Labels> {
    let Some(vs) = rule
        .virtual_service()
        .filter(|_| !rule.hosts.is_empty() || !rule.gateways.is_empty())
    else {
        return BTreeMap::new();
    };
    let http = (vs.http.iter().flatten())
        .flat_map(|r| r.matches.iter().flatten())
        .filter_map(source_selector);
    let tcp = (vs.tcp.iter().flatten())
        .flat_map(|r| r.matches.iter().flatten())
        .filter_map(|m| selector_from(m.source_labels.as_ref(), m.source_namespace.as_deref()));
    let tls = (vs.tls.iter().flatten())
        .flat_map(|r| r.matches.iter().flatten())
        .filter_map(|m| selector_from(m.source_labels.as_ref(), m.source_namespace.as_deref()));
    http.chain(tcp)
        .chain(tls)
        .map(|l| {
            let labels: Labels = l
                .iter()
                .map(|(k, v)| (Arc::from(k.as_str()), Arc::from(v.as_str())))
                .collect();
            (selector_id(&l), labels)
        })
        .collect()
}

/// Every `sourceLabels` selector in use, with how many rules use it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Selectors {
    by_id: OrdMap<Arc<str>, (Labels, usize)>,
}

impl Selectors {
    /// Counts the selectors of a stored rule bound to hosts or gateways.
    pub(super) fn add(&mut self, rule: &Rule) {
        for (id, labels) in selectors_of(rule) {
            self.by_id.entry(id).or_insert((labels, 0)).1 += 1;
        }
    }

    /// Uncounts the selectors of a forgotten rule.
    pub(super) fn remove(&mut self, rule: &Rule) {
        for (id, _) in selectors_of(rule) {
            if let Some(e) = self.by_id.get_mut(&id) {
                e.1 -= 1;
                if e.1 == 0 {
                    self.by_id.remove(&id);
                }
            }
        }
    }

    /// Whether no selector is in use.
    pub(super) fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The ids of the selectors `labels` satisfies, sorted.
    pub(super) fn matching(&self, labels: &Labels) -> Vec<Arc<str>> {
        self.by_id
            .iter()
            .filter(|(_, (sel, _))| sel.iter().all(|(k, v)| labels.get(k) == Some(v)))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Every selector in use, by id.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Labels)> + '_ {
        self.by_id.iter().map(|(id, (l, _))| (id, l))
    }
}
