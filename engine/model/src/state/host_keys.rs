//! The keys of every hostname a service defines, as one sorted array, behind
//! the fold's admission check of a large run of endpoint events
//! (`fold::ServiceHosts`).
//!
//! Why: that check walks the keys in order alongside the run's hostnames.
//! Walked through the claims map (an `imbl` tree of 10k entries at the
//! benchmark's scale), the walk was a node cursor step per key; an array is
//! read front to back. It is built on first use, once per state, and shared by
//! the state's clones (a snapshot and the fold's copy of it), so consecutive
//! batches that change no service build it once; a change to which hostnames
//! have a service detaches the changed state from it, and the next walk builds
//! it again, which costs what one walk of the tree did.
//!
//! What it does NOT do: decide anything (it is derived data, left out of
//! equality and of the content hash).

use std::sync::Arc;

use imbl::OrdMap;

use super::derived::Derived;
use super::{Claims, HKey};

/// The sorted keys of the claims map of one state, built when first asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HostKeys(Derived<Arc<[HKey]>>);

impl HostKeys {
    /// The keys of `claims` (the state's), in order, built now if this state
    /// has not been asked before.
    pub(super) fn get(&self, claims: &OrdMap<HKey, Claims>) -> &[HKey] {
        self.0.get_or_build(|| claims.keys().copied().collect())
    }

    /// Forgets the keys after a hostname gained its first claim or lost its
    /// last (see [`Derived::invalidate`]).
    pub(super) fn invalidate(&mut self) {
        self.0.invalidate();
    }
}
