//! Which scoped views exist: a pure function of the rules (the fold does not
//! know which proxies are connected), so every key a proxy can have must
//! follow from config alone.
//!
//! - Sidecar and visibility class pairs ([`ScopeKey`]'s first two parts):
//!   each Sidecar with its namespace's class (the root namespace's
//!   selector-less one with every class, since it is any namespace's
//!   default), and each class without a Sidecar (the empty class too once a
//!   restricted ServiceEntry exists).
//! - Sets of satisfied `sourceLabels` selectors ([`source_sets`]): as for
//!   gateway sets (see `gateway`), a proxy with labels `L` satisfies `M(L)`,
//!   which equals `M(U)` for `U` the union of those selectors; so the sets are
//!   the matches of each selector and of compatible unions, closed under
//!   merging, with the empty set. Bounded by [`MAX_SOURCE_SETS`]; a proxy
//!   whose set was cut keeps its view without them.
//! - A scope is a pair with a set; the pair without Sidecar, class or set is
//!   the default view, which needs no copy.
//!
//! What it does NOT do: build views (`scoped`) or key proxies (`key`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use deltapilot_model::Labels;
use deltapilot_model::rules::Rule;
use deltapilot_model::state::ModelState;

/// Sorted ids (config keys, or selector ids) that a key carries.
pub type Ids = Arc<[Arc<str>]>;

/// What a scoped view is keyed by: the Sidecar's config key, if any, the
/// visibility class (sorted keys of the restricted objects seen) and the
/// `sourceLabels` selectors its proxies satisfy (sorted ids).
pub type ScopeKey = (Option<Arc<str>>, Ids, Ids);

/// A Sidecar and visibility class pair.
type ClassKey = (Option<Arc<str>>, Arc<[Arc<str>]>);

/// How many sets of satisfied `sourceLabels` selectors get views at most:
/// real meshes use a few selectors; the bound keeps a pathological config
/// from costing 2^n views per scope.
pub const MAX_SOURCE_SETS: usize = 64;

/// Every scope that needs a view in `model` (see the module doc), and the
/// Sidecar rule of each.
pub fn scope_keys(
    model: &ModelState,
    root_namespace: &str,
) -> BTreeMap<ScopeKey, Option<Arc<Rule>>> {
    let rules = model.rules();
    let none: Arc<[Arc<str>]> = Arc::from(Vec::new());
    let mut base = class_keys(model, root_namespace);
    if !rules.has_sources() {
        return base
            .into_iter()
            .map(|((s, v), r)| ((s, v, none.clone()), r))
            .collect();
    }
    let default_is_view = base.contains_key(&(None, none.clone()));
    base.entry((None, none.clone())).or_insert(None);
    let sets = source_sets(model);
    let mut out = BTreeMap::new();
    for ((s, v), r) in base {
        for set in &sets {
            let is_default = s.is_none() && v.is_empty() && set.is_empty();
            if !is_default || default_is_view {
                out.insert((s.clone(), v.clone(), set.clone()), r.clone());
            }
        }
    }
    out
}

/// The Sidecar and visibility class pairs that need a view (see the module
/// doc), and the Sidecar rule of each.
fn class_keys(model: &ModelState, root_namespace: &str) -> BTreeMap<ClassKey, Option<Arc<Rule>>> {
    let rules = model.rules();
    let none: Arc<[Arc<str>]> = Arc::from(Vec::new());
    let classes: BTreeMap<&Arc<str>, Arc<[Arc<str>]>> = rules
        .export_namespaces()
        .map(|(ns, keys)| (ns, keys.iter().cloned().collect()))
        .collect();
    let mut distinct: BTreeSet<Arc<[Arc<str>]>> = classes.values().cloned().collect();
    if rules.has_restricted_entries() {
        // Namespaces no `exportTo` names do not see the restricted entries.
        distinct.insert(none.clone());
    }
    let mut out = BTreeMap::new();
    for sc in rules.sidecars() {
        let own = classes.get(&sc.namespace).cloned().unwrap_or(none.clone());
        out.insert((Some(sc.key.clone()), own), Some(sc.clone()));
        let mesh_default =
            &*sc.namespace == root_namespace && sc.sidecar().is_some_and(|s| s.selector.is_empty());
        if mesh_default {
            out.insert((Some(sc.key.clone()), none.clone()), Some(sc.clone()));
            for c in &distinct {
                out.insert((Some(sc.key.clone()), c.clone()), Some(sc.clone()));
            }
        }
    }
    for c in distinct {
        out.insert((None, c), None);
    }
    out
}

/// Every set of `sourceLabels` selectors some proxy's labels satisfy exactly,
/// the empty one included (see the module doc), at most [`MAX_SOURCE_SETS`].
pub fn source_sets(model: &ModelState) -> BTreeSet<Arc<[Arc<str>]>> {
    let rules = model.rules();
    let mut out: BTreeMap<Arc<[Arc<str>]>, Labels> = BTreeMap::new();
    out.insert(Arc::from(Vec::new()), Labels::new());
    let mut frontier = Vec::new();
    for (_, labels) in rules.source_selectors() {
        let m: Arc<[Arc<str>]> = rules.sources_matching(labels).into();
        if !out.contains_key(&m) && out.len() < MAX_SOURCE_SETS {
            out.insert(m.clone(), labels.clone());
            frontier.push(m);
        }
    }
    while let Some(set) = frontier.pop() {
        let u = out[&set].clone();
        let known: Vec<Labels> = out.values().cloned().collect();
        for other in known {
            if out.len() >= MAX_SOURCE_SETS {
                return out.into_keys().collect();
            }
            let compatible = other.iter().all(|(k, v)| u.get(k).is_none_or(|w| w == v));
            if !compatible {
                continue;
            }
            let mut joined = u.clone();
            joined.extend(other.iter().map(|(k, v)| (k.clone(), v.clone())));
            let m: Arc<[Arc<str>]> = rules.sources_matching(&joined).into();
            if !out.contains_key(&m) {
                out.insert(m.clone(), joined);
                frontier.push(m);
            }
        }
    }
    out.into_keys().collect()
}
