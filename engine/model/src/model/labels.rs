//! Labels and label selectors, as in Kubernetes: a selector matches when every one
//! of its pairs is present with the same value; an empty selector matches all.

use std::collections::BTreeMap;
use std::sync::Arc;

/// Key/value labels, ordered for determinism.
pub type Labels = BTreeMap<Arc<str>, Arc<str>>;

/// A workload's labels, as an endpoint shape holds them (a few entries, one
/// exact-size allocation; see `sorted_map`).
pub type WorkloadLabels = super::SortedMap<Arc<str>, Arc<str>>;

/// Anything a selector can look labels up in.
pub trait LabelLookup {
    /// The value of label `key`.
    fn label(&self, key: &str) -> Option<&Arc<str>>;
}

impl LabelLookup for Labels {
    fn label(&self, key: &str) -> Option<&Arc<str>> {
        self.get(key)
    }
}

impl LabelLookup for WorkloadLabels {
    fn label(&self, key: &str) -> Option<&Arc<str>> {
        self.get(key)
    }
}

/// An equality-based label selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct LabelSelector(pub Labels);

impl LabelSelector {
    /// Whether `labels` carries every pair of this selector.
    pub fn matches<L: LabelLookup + ?Sized>(&self, labels: &L) -> bool {
        self.0.iter().all(|(k, v)| labels.label(k) == Some(v))
    }

    /// Whether the selector is empty (matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (Arc::from(*k), Arc::from(*v)))
            .collect()
    }

    #[test]
    fn subset_matches_and_mismatch_does_not() {
        let l = labels(&[("app", "reviews"), ("version", "v2")]);
        assert!(LabelSelector(labels(&[("app", "reviews")])).matches(&l));
        assert!(LabelSelector::default().matches(&l));
        assert!(!LabelSelector(labels(&[("version", "v1")])).matches(&l));
        assert!(!LabelSelector(labels(&[("tier", "db")])).matches(&l));
    }
}
