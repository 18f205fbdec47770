//! The address index: (address, endpoint key hash) of every endpoint, behind
//! [`ModelState::endpoints_at`](super::ModelState::endpoints_at) and the queries
//! built on it (`proxy_service_instances`, `management_ports`).
//!
//! It is built on first use, once per state, and dropped whenever an endpoint
//! is added, removed or moves to another address. Why not kept current like the
//! hostname index: only the admin registry view asks address queries, while
//! every endpoint added or removed paid for an `OrdSet` path copy and a key
//! hash in the fold, and a checkpoint restore spent CPU sorting and inserting
//! 100k entries that a replay never reads. Built from the raw endpoints it
//! equals, by construction, what keeping it current gave.
//!
//! The built index is shared by the clones of one state (a snapshot and the
//! fold's copy of it), so a query on a snapshot builds it once for all of them;
//! a change to the endpoints detaches the changed state from it.
//!
//! What it does NOT do: decide anything about endpoints (it is derived data, left
//! out of equality and of the content hash).

use imbl::OrdSet;

use super::derived::Derived;
use super::endpoints::EndpointStore;
use super::{AddrKey, HKey};

/// The address index of one state, built when first asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AddrIndex(Derived<OrdSet<(AddrKey, HKey)>>);

impl AddrIndex {
    /// The index of `raw` (the state's endpoints), built now if this state has
    /// not been asked before.
    pub(crate) fn get(&self, raw: &EndpointStore) -> &OrdSet<(AddrKey, HKey)> {
        self.0.get_or_build(|| {
            let mut entries: Vec<(AddrKey, HKey)> = raw
                .iter_hot()
                .map(|(hk, h)| (AddrKey::of(h.address), *hk))
                .collect();
            // Sorted first, so the set is filled front to back.
            entries.sort_unstable();
            entries.into_iter().collect()
        })
    }

    /// Forgets the index after a change to which endpoints sit at which
    /// address (see [`Derived::invalidate`]).
    pub(crate) fn invalidate(&mut self) {
        self.0.invalidate();
    }
}
