//! What a fold step changed, per resource type.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::ResourceType;

/// Names upserted and removed for one resource type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TypeChanges {
    /// Names whose content changed or that are new.
    pub upserted: BTreeSet<Arc<str>>,
    /// Names that no longer exist.
    pub removed: BTreeSet<Arc<str>>,
}

impl TypeChanges {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.upserted.is_empty() && self.removed.is_empty()
    }

    /// Folds a later change into this one: the later state of each name wins.
    pub fn merge(&mut self, later: &TypeChanges) {
        for n in &later.upserted {
            self.removed.remove(n);
            self.upserted.insert(n.clone());
        }
        for n in &later.removed {
            self.upserted.remove(n);
            self.removed.insert(n.clone());
        }
    }
}

/// What one fold step (a batch of events) changed, per type. Listener changes cover
/// both listener flavours (names never collide between them: sidecar listeners are
/// `0.0.0.0_<port>`-style, proxyless ones `<host>:<port>`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeSet {
    /// Per type, indexed by [`ResourceType::index`].
    pub types: [TypeChanges; ResourceType::COUNT],
}

impl ChangeSet {
    /// The changes of one type.
    pub fn of(&self, t: ResourceType) -> &TypeChanges {
        &self.types[t.index()]
    }

    /// Mutable changes of one type.
    pub fn of_mut(&mut self, t: ResourceType) -> &mut TypeChanges {
        &mut self.types[t.index()]
    }

    /// Whether nothing changed at all.
    pub fn is_empty(&self) -> bool {
        self.types.iter().all(TypeChanges::is_empty)
    }

    /// Folds a later change set into this one (coalescing for proxies that are behind).
    pub fn merge(&mut self, later: &ChangeSet) {
        for (a, b) in self.types.iter_mut().zip(later.types.iter()) {
            a.merge(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_state_wins_on_merge() {
        let n: Arc<str> = Arc::from("c1");
        let mut a = TypeChanges::default();
        a.upserted.insert(n.clone());
        let mut b = TypeChanges::default();
        b.removed.insert(n.clone());
        a.merge(&b);
        assert!(a.upserted.is_empty() && a.removed.contains(&n));
        a.merge(&TypeChanges {
            upserted: [n.clone()].into(),
            removed: Default::default(),
        });
        assert!(a.removed.is_empty() && a.upserted.contains(&n));
    }
}
