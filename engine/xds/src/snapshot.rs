//! Immutable snapshots and their lock-free publication (invariant 3).
//!
//! One [`SnapshotWriter`] (not `Clone`: there is exactly one fold) publishes each new
//! [`Snapshot`] with `ArcSwap::store`; any number of [`SnapshotReader`]s `load` the
//! current one without locks and wait for the next through a `watch` channel that
//! only ticks when something actually changed (style rule 6).
//!
//! Proxies that fall behind coalesce: a snapshot keeps the change sets of its last
//! [`RECENT_CHANGES`] predecessors, so a stream at sequence `s` can ask for "what
//! changed since `s`" as one merged [`ChangeSet`]; a stream further behind than that
//! does a full diff against the current resources instead.
//!
//! What it does NOT do: fold events (see `fold`) or compute per-proxy diffs.

use std::sync::Arc;

use arc_swap::ArcSwap;
use imbl::Vector;
use tokio::sync::watch;

use crate::view::{RouteDelivery, ViewKey, Views, resources_for};
use crate::{ChangeSet, ResourceMap, ResourceSet, ResourceType};
use deltapilot_model::state::ModelState;
use deltapilot_model::{Proxy, ProxyType};
use deltapilot_types::Position;

/// How many past change sets a snapshot keeps for coalescing laggards. A stream more
/// than this many snapshots behind falls back to a full diff, which is always
/// correct, just O(resources) instead of O(changed).
pub const RECENT_CHANGES: usize = 64;

/// An immutable view of the world at one log position.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Publication sequence number: +1 for every published snapshot.
    pub seq: u64,
    /// The log position this snapshot reflects (everything before it is folded).
    pub position: Position,
    /// Content hash of the whole state (model and resources); equal logs fold to
    /// equal hashes.
    pub hash: u64,
    /// The folded registry model.
    pub model: ModelState,
    /// Every xDS resource, encoded.
    pub resources: ResourceSet,
    /// Observed-at time (Unix microseconds) of the newest event folded into the
    /// batch that produced this `seq`, or 0 if unknown. The server measures
    /// convergence from it: registry observation to the proxy's ACK.
    pub observed_at_micros: i64,
    /// Change sets of the most recent snapshots: `(seq, changes that produced seq)`,
    /// oldest first, at most [`RECENT_CHANGES`].
    pub recent: Vector<(u64, Arc<ChangeSet>)>,
    /// The Sidecar-scoped and gateway views, derived from `model` and `resources`.
    pub views: Views,
}

impl Snapshot {
    /// The key of `proxy`'s view in this snapshot.
    pub fn view_key(&self, proxy: &Proxy) -> ViewKey {
        self.views.key_for(proxy, &self.model)
    }

    /// The resources of type `t` of the view under `key` (a key this snapshot
    /// no longer has falls back to the sidecars' default view).
    pub fn view(&self, key: &ViewKey, t: ResourceType) -> &ResourceMap {
        view_map(&self.views, &self.resources, key, t)
    }

    /// [`Snapshot::view`] as a stream delivering routes as `delivery` is
    /// sent it (see [`delivered`](crate::view::delivered)).
    pub fn delivered_view(
        &self,
        key: &ViewKey,
        t: ResourceType,
        delivery: RouteDelivery,
    ) -> &ResourceMap {
        crate::view::delivered(&self.resources, key, t, delivery, self.view(key, t))
    }

    /// What changed in the view under `key` after snapshot `since`, or `None`
    /// when unknown (then diff the whole view).
    pub fn view_changes_since(&self, key: &ViewKey, since: u64) -> Option<ChangeSet> {
        match key {
            ViewKey::Default(_) => self.changes_since(since),
            ViewKey::Sidecar {
                sidecar,
                visible,
                sources,
            } => self
                .views
                .get(sidecar, visible, sources)?
                .changes_since(since, self.seq),
            ViewKey::Gateway { gateways, visible } => {
                (self.views.gateway(gateways, visible)?).changes_since(since, self.seq)
            }
        }
    }

    /// Everything that changed after snapshot `since` up to this one, merged, or
    /// `None` if `since` is too old to know (the caller then does a full diff).
    pub fn changes_since(&self, since: u64) -> Option<ChangeSet> {
        if since >= self.seq {
            return Some(ChangeSet::default());
        }
        let first = self.recent.front()?.0;
        if since + 1 < first {
            return None;
        }
        let mut merged = ChangeSet::default();
        for (seq, cs) in self.recent.iter() {
            if *seq > since {
                merged.merge(cs);
            }
        }
        Some(merged)
    }
}

/// The resources of type `t` of the view under `key`, given a snapshot's
/// `views` and global `resources` (see [`Snapshot::view`]).
pub fn view_map<'a>(
    views: &'a Views,
    resources: &'a ResourceSet,
    key: &ViewKey,
    t: ResourceType,
) -> &'a ResourceMap {
    match key {
        ViewKey::Default(pt) => resources_for(resources, *pt, t),
        ViewKey::Sidecar {
            sidecar,
            visible,
            sources,
        } => match views.get(sidecar, visible, sources) {
            Some(v) => resources_for(&v.resources, ProxyType::Sidecar, t),
            None => resources_for(resources, ProxyType::Sidecar, t),
        },
        ViewKey::Gateway { gateways, visible } => match views.gateway(gateways, visible) {
            Some(v) => v.map(t),
            None => resources_for(resources, ProxyType::Router, t),
        },
    }
}

/// The single publisher of snapshots.
#[derive(Debug)]
pub struct SnapshotWriter {
    current: Arc<ArcSwap<Snapshot>>,
    tick: watch::Sender<u64>,
}

/// A cheap, cloneable handle for reading the current snapshot and waiting for the
/// next one.
#[derive(Debug, Clone)]
pub struct SnapshotReader {
    current: Arc<ArcSwap<Snapshot>>,
    tick: watch::Receiver<u64>,
}

impl SnapshotWriter {
    /// A writer with an initial (usually empty) snapshot, and a reader of it.
    pub fn new(initial: Snapshot) -> (Self, SnapshotReader) {
        let seq = initial.seq;
        let current = Arc::new(ArcSwap::from_pointee(initial));
        let (tick, rx) = watch::channel(seq);
        (
            SnapshotWriter {
                current: current.clone(),
                tick,
            },
            SnapshotReader { current, tick: rx },
        )
    }

    /// The snapshot currently published.
    pub fn current(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Publishes `next`. Readers are woken only if its sequence moved on.
    /// Returns the snapshot it replaces, so that the caller may free it off its
    /// own thread (the engine does; readers may still hold it).
    pub fn publish(&self, next: Snapshot) -> Arc<Snapshot> {
        let seq = next.seq;
        let replaced = self.current.swap(Arc::new(next));
        self.tick.send_if_modified(|s| {
            if *s != seq {
                *s = seq;
                true
            } else {
                false
            }
        });
        replaced
    }

    /// A new reader.
    pub fn reader(&self) -> SnapshotReader {
        SnapshotReader {
            current: self.current.clone(),
            tick: self.tick.subscribe(),
        }
    }
}

impl SnapshotReader {
    /// The current snapshot (lock-free).
    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Waits until a snapshot newer than the last one this reader saw is published,
    /// then returns the current one. Returns `None` once the writer is gone.
    pub async fn changed(&mut self) -> Option<Arc<Snapshot>> {
        self.tick.changed().await.ok()?;
        self.tick.borrow_and_update();
        Some(self.load())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ResourceType;

    fn cs(name: &str) -> Arc<ChangeSet> {
        let mut c = ChangeSet::default();
        c.of_mut(ResourceType::Cluster)
            .upserted
            .insert(Arc::from(name));
        Arc::new(c)
    }

    #[test]
    fn changes_since_merges_recent_and_gives_up_when_too_old() {
        let mut s = Snapshot {
            seq: 12,
            ..Default::default()
        };
        s.recent = (10..=12).map(|q| (q, cs(&format!("c{q}")))).collect();
        let m = s.changes_since(10).expect("known");
        let names: Vec<_> = m
            .of(ResourceType::Cluster)
            .upserted
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(names, ["c11", "c12"]);
        assert!(
            s.changes_since(9).is_some(),
            "seq 10's changes are kept, so 9 is reachable"
        );
        assert!(s.changes_since(8).is_none());
        assert!(s.changes_since(12).expect("current").is_empty());
    }

    #[tokio::test]
    async fn readers_wake_only_on_new_sequence() {
        let (w, mut r) = SnapshotWriter::new(Snapshot::default());
        w.publish(Snapshot {
            seq: 0,
            ..Default::default()
        });
        w.publish(Snapshot {
            seq: 1,
            hash: 7,
            ..Default::default()
        });
        let s = r.changed().await.expect("writer alive");
        assert_eq!((s.seq, s.hash), (1, 7));
        let pending = tokio::time::timeout(std::time::Duration::from_millis(20), r.changed()).await;
        assert!(pending.is_err(), "no new sequence, no wake-up");
    }
}
