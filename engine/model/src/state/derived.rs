//! Data a state derives from its maps on first use rather than keeping it
//! current on every write (the address index, the sorted service hostname
//! keys): built once per state, shared by the state's clones (a snapshot and
//! the fold's copy of it, so a query on a snapshot builds it once for all of
//! them), and dropped by a change to what it is derived from, which detaches
//! the changed state from it (the others keep theirs).
//!
//! What it does NOT do: know what it holds or when it goes stale (its owner
//! calls [`Derived::invalidate`]). It is left out of equality and of the
//! content hash: it is a function of maps that both already cover.

use std::sync::{Arc, OnceLock};

/// A value derived from a state, built when first asked for.
#[derive(Debug)]
pub(crate) struct Derived<T>(Arc<OnceLock<T>>);

impl<T> Derived<T> {
    /// The value, built by `build` now if this state has not been asked before.
    pub(crate) fn get_or_build(&self, build: impl FnOnce() -> T) -> &T {
        self.0.get_or_init(build)
    }

    /// Forgets the value after a change to what it is derived from. Allocates
    /// nothing when this state's is already unbuilt and its own, as after the
    /// first change of a batch.
    pub(crate) fn invalidate(&mut self) {
        if Arc::strong_count(&self.0) > 1 || self.0.get().is_some() {
            self.0 = Arc::default();
        }
    }
}

impl<T> Default for Derived<T> {
    fn default() -> Self {
        Derived(Arc::default())
    }
}

impl<T> Clone for Derived<T> {
    /// Shares the value, built or not (see the module doc).
    fn clone(&self) -> Self {
        Derived(self.0.clone())
    }
}

impl<T> PartialEq for Derived<T> {
    /// Always equal: the value is a function of the state, which the state's
    /// equality compares.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<T> Eq for Derived<T> {}
