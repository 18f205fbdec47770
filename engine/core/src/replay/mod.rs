//! Replay: re-folding the log to rebuild any past state, and attributing every
//! xDS change to the event that caused it.
//!
//! Every state the control plane has been in is a fold of the log (invariant 1),
//! so a [`Replayer`] fed the same records from the same start (the empty state, or
//! a [checkpoint](crate::checkpoint)) holds the same model, the same resources byte
//! for byte and the same snapshot hash as the engine that served them.
//!
//! Two speeds:
//!
//! - [`Replayer::apply_records`] folds a batch and only notes what it touched;
//!   resources are regenerated once, for everything touched since, when they are
//!   next needed ([`Replayer::resources`], [`Replayer::snapshot`], or the next
//!   [`Replayer::apply_event`]). Reaching a position costs the fold plus one
//!   regeneration of what changed, however many batches it took: the way to reach
//!   a position fast. (The generator's output depends only on the model, so
//!   regenerating a union of touched sets once equals regenerating each batch.)
//! - [`Replayer::apply_event`] folds one event and regenerates incrementally what
//!   it touched, returning each resource it changed with its old and new version
//!   ([`ResourceChange`]): the way to see what each event did. The generator's
//!   reverse indexes make this O(what the event touched), not O(resources).
//!
//! [`drive`] runs either over an [`EventLog`](deltapilot_log::EventLog) between two
//! positions; [`bisect`] finds the first event after which a resource matched a
//! predicate.
//!
//! ## Which proxies an event affects
//!
//! A replay has no connected proxies, so "affected" is answered per view: a
//! changed resource affects every proxy type whose view holds it
//! ([`ResourceKind::views`]): assignments and routes are in every view, clusters
//! and sidecar listeners in sidecars' and routers', their proxyless flavours
//! (`grpc_clusters`, `api_listener`s) in proxyless gRPC clients'. A proxyless client subscribes to the names it needs, so it is only
//! affected by the ones it asked for.
//!
//! What it does NOT do: render resources (the server's admin module does), read
//! checkpoints from disk on its own, or serve anything.

pub mod bisect;
pub mod drive;
mod reuse;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use deltapilot_proto::Event;

use crate::checkpoint::{Checkpoint, generator_id};
use crate::release::Releaser;
use deltapilot_log::{Position, Record, RecordPos};
use deltapilot_model::Proxy;
use deltapilot_model::fold::{Prepared, Skipped, fold_iter, fold_prepared_owned};
use deltapilot_model::state::{ModelState, Touched};
pub use deltapilot_xds::ResourceKind;
use deltapilot_xds::generate::{GenError, GenOptions, Generator};
use deltapilot_xds::hash::snapshot_hash;
use deltapilot_xds::snapshot::{Snapshot, view_map};
use deltapilot_xds::view::{ViewKey, Views};
use deltapilot_xds::{Resource, ResourceSet, ResourceType};

/// One resource an event changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceChange {
    /// Where it lives (type and listener flavour).
    pub kind: ResourceKind,
    /// Its name.
    pub name: Arc<str>,
    /// Before the event (`None`: it did not exist).
    pub old: Option<Arc<Resource>>,
    /// After the event (`None`: it was removed).
    pub new: Option<Arc<Resource>>,
}

/// What folding one event did.
#[derive(Debug, Clone, Default)]
pub struct EventReport {
    /// Set when the fold skipped the event (nothing changed then).
    pub skipped: Option<Skipped>,
    /// Resources whose bytes changed, in push order then by name.
    pub changes: Vec<ResourceChange>,
    /// Resources that failed to build after the event (left out of the set).
    pub gen_errors: Vec<GenError>,
    /// With [`Replayer::follow_proxy`]: what changed in that proxy's own view
    /// (its Sidecar scoping included; a move between views is the difference
    /// of the two), instead of the global `changes`.
    pub proxy_changes: Option<Vec<ResourceChange>>,
}

/// A record replay cannot get past: the log failed its checks there (the
/// engine cannot read past it either). Everything before it was folded. A
/// record that reads but is not an event this build decodes is skipped and
/// counted instead, as the engine skips it ([`undecodable`](crate::runner::undecodable)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoppedAt {
    /// Where (`partition:offset`, or the log offset when the backend names no
    /// partition).
    pub position: String,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for StoppedAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "record at {}: {}", self.position, self.reason)
    }
}

/// Counts over everything a replayer folded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Records folded (events applied, skipped ones included).
    pub records: u64,
    /// Records skipped: events the fold could not apply and records that did
    /// not decode, as the engine counts them.
    pub skipped: u64,
    /// Resource build failures seen.
    pub gen_errors: u64,
}

/// A fold of part of the log: model, incremental generator and resources at a
/// position. Not `Clone` on purpose (the generator's indexes are large); start a
/// new one from a checkpoint instead.
#[derive(Debug)]
pub struct Replayer {
    model: ModelState,
    /// Frees folded batches of decoded events off the fold's thread (see
    /// `crate::release`).
    dropper: Releaser<Decoded>,
    /// `None` while `resources` came from a checkpoint and nothing needed a
    /// generator yet (see `reuse`).
    generator: Option<Generator>,
    opts: GenOptions,
    /// Current only when `pending` is empty.
    resources: ResourceSet,
    /// `resources_hash(&resources)` (see the fold runner), kept current by
    /// every regeneration (the generator keeps its own), so that a snapshot's
    /// hash costs nothing at the end of a replay from a checkpoint (a walk of
    /// every resource would be a noticeable part of such a replay).
    resources_hash: u64,
    /// Everything folded since `resources` was last regenerated touched.
    pending: Touched,
    position: Position,
    stats: ReplayStats,
    /// The proxy whose view [`Replayer::apply_event`] reports, with the views
    /// at the current position and a step counter for their change logs.
    follow: Option<Follow>,
}

/// See [`Replayer::follow_proxy`].
#[derive(Debug)]
struct Follow {
    proxy: Proxy,
    views: Views,
    step: u64,
}

impl Replayer {
    /// A replayer at the start of a log (empty state).
    pub fn new(opts: GenOptions) -> Self {
        Replayer {
            model: ModelState::default().with_export_defaults(&opts.export_defaults),
            dropper: Releaser::new("replay-drop"),
            generator: Some(Generator::new(opts.clone())),
            opts,
            resources: ResourceSet::default(),
            resources_hash: 0,
            pending: Touched::default(),
            position: Position::default(),
            stats: ReplayStats::default(),
            follow: None,
        }
    }

    /// A replayer at a checkpoint: its state, and the resources stored with it
    /// when this build generated them with `opts` (see `reuse`); otherwise every
    /// service is marked touched so that its resources are built when first
    /// needed (as `Generator::build` does).
    pub fn from_checkpoint(cp: Checkpoint, opts: GenOptions) -> Self {
        let stored = cp
            .resources
            .filter(|r| r.generator == generator_id(&opts))
            .filter(|r| reuse::spot_check(&cp.model, &r.set, &opts));
        let (generator, resources, resources_hash, pending) = match stored {
            Some(r) => (None, r.set, r.hash, Touched::default()),
            None => {
                let mut pending = Touched::default();
                pending
                    .services
                    .extend(cp.model.services().map(|s| s.hostname.clone()));
                (
                    Some(Generator::new(opts.clone())),
                    ResourceSet::default(),
                    0,
                    pending,
                )
            }
        };
        Replayer {
            model: cp.model.with_export_defaults(&opts.export_defaults),
            dropper: Releaser::new("replay-drop"),
            generator,
            opts,
            resources,
            resources_hash,
            pending,
            position: cp.position,
            stats: ReplayStats::default(),
            follow: None,
        }
    }

    /// Whether the resources came from the checkpoint rather than being built.
    pub fn reused_stored_resources(&self) -> bool {
        self.generator.is_none()
    }

    /// Regenerates what was touched since the last regeneration.
    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let touched = std::mem::take(&mut self.pending);
        let errors = match &mut self.generator {
            Some(g) => {
                let (set, _, errors) = g.regenerate(&self.resources, &self.model, &touched);
                self.resources = set;
                self.resources_hash = g.resources_hash();
                errors.len()
            }
            None if touched.services.is_empty()
                && !touched.configs
                && touched.rule_hosts.is_empty() =>
            {
                reuse::rebuild_assignments(
                    &mut self.resources,
                    &mut self.resources_hash,
                    &self.model,
                    &touched.endpoint_names(&self.model),
                )
            }
            None => self.build_generator(),
        };
        self.stats.gen_errors += errors as u64;
    }

    /// Builds the generator (and every resource) from the whole state.
    fn build_generator(&mut self) -> usize {
        let (g, set, errors) = Generator::build(&self.model, self.opts.clone());
        self.resources_hash = g.resources_hash();
        self.generator = Some(g);
        self.resources = set;
        errors.len()
    }

    /// Everything before this position is folded.
    pub fn position(&self) -> &Position {
        &self.position
    }

    /// The folded model.
    pub fn model(&self) -> &ModelState {
        &self.model
    }

    /// The resources at this position (regenerating what batches touched).
    pub fn resources(&mut self) -> &ResourceSet {
        self.flush();
        &self.resources
    }

    /// Counts so far.
    pub fn stats(&self) -> ReplayStats {
        self.stats
    }

    /// The snapshot the engine would publish at this position (its `seq`, change
    /// history and observation time are not replayed and stay 0 and empty);
    /// `hash` equals the engine's.
    pub fn snapshot(&mut self) -> Snapshot {
        self.flush();
        let resources = self.resources_hash;
        let views = deltapilot_xds::view::Views::build(&self.model, &self.resources, &self.opts);
        Snapshot {
            position: self.position.clone(),
            model: self.model.clone(),
            resources: self.resources.clone(),
            views,
            hash: snapshot_hash(self.model.hash(), resources),
            ..Default::default()
        }
    }

    /// Folds a batch of records (resources are regenerated when next needed).
    /// Records already folded are ignored; records that do not decode are
    /// skipped and counted, as the engine skips them.
    pub fn apply_records(&mut self, records: &[Record]) {
        self.apply_decoded(decode_records(records, &self.position));
    }

    /// Folds a batch of decoded events (see [`decode_records`]); positions already
    /// folded are the caller's to leave out. The state is folded in place
    /// ([`fold_prepared_owned`]: nothing else holds it, so no tree node is copied
    /// and none freed), and the batch is freed on the dropper thread: freeing 64k
    /// decoded events was a sixteenth of a replay's folding thread.
    pub fn apply_decoded(&mut self, decoded: Decoded) {
        let events = &decoded.events;
        let out = fold_prepared_owned(std::mem::take(&mut self.model), events, &decoded.prepared);
        for pos in events
            .iter()
            .map(|(p, _)| p)
            .chain(decoded.skipped.iter().map(|s| &s.pos))
        {
            self.position.advance(*pos);
        }
        self.stats.records += (events.len() + decoded.skipped.len()) as u64;
        self.stats.skipped += (out.skipped.len() + decoded.skipped.len()) as u64;
        self.pending.extend(out.touched);
        self.model = out.state;
        self.dropper.release(decoded);
    }

    /// Passes over a record that did not decode (see [`undecodable`](crate::runner::undecodable)),
    /// as the engine does: its position is folded, nothing else changes, and the
    /// report says why.
    pub fn skip_record(&mut self, skipped: Skipped) -> EventReport {
        self.position.advance(skipped.pos);
        self.stats.records += 1;
        self.stats.skipped += 1;
        EventReport {
            skipped: Some(skipped),
            ..Default::default()
        }
    }

    /// From now on, [`Replayer::apply_event`] also reports what changed in
    /// `proxy`'s own view ([`EventReport::proxy_changes`]): its key is
    /// recomputed after every event, and its Sidecar-scoped view (if any) is
    /// kept as the engine keeps it (`Views::update`), so the report is what
    /// that proxy was sent.
    pub fn follow_proxy(&mut self, proxy: Proxy) {
        self.flush();
        let views = Views::build(&self.model, &self.resources, &self.opts);
        self.follow = Some(Follow {
            proxy,
            views,
            step: 0,
        });
    }

    /// Folds one event at `pos` and reports every resource it changed.
    pub fn apply_event(&mut self, pos: RecordPos, event: &Event) -> EventReport {
        self.flush();
        if self.generator.is_none() {
            self.stats.gen_errors += self.build_generator() as u64;
        }
        let out = fold_iter(&self.model, std::iter::once((pos, event)));
        self.position.advance(pos);
        self.stats.records += 1;
        let mut report = EventReport {
            skipped: out.skipped.into_iter().next(),
            ..Default::default()
        };
        if report.skipped.is_some() {
            self.stats.skipped += 1;
        }
        if out.touched.is_empty() {
            self.model = out.state;
            return report;
        }
        let Some(generator) = self.generator.as_mut() else {
            // Built just above; never reached, and never a panic.
            self.model = out.state;
            return report;
        };
        let (set, changes, errors) =
            generator.regenerate(&self.resources, &out.state, &out.touched);
        for t in ResourceType::ALL {
            let tc = changes.of(t);
            let names: std::collections::BTreeSet<&Arc<str>> =
                tc.upserted.iter().chain(tc.removed.iter()).collect();
            for name in names {
                for kind in ResourceKind::of_type(t) {
                    let old = kind.map(&self.resources).get(name).cloned();
                    let new = kind.map(&set).get(name).cloned();
                    if old.is_none() && new.is_none() {
                        continue;
                    }
                    if old.as_ref().map(|r| &r.bytes) == new.as_ref().map(|r| &r.bytes) {
                        continue;
                    }
                    report.changes.push(ResourceChange {
                        kind: *kind,
                        name: name.clone(),
                        old,
                        new,
                    });
                }
            }
        }
        if let Some(f) = self.follow.as_mut() {
            let before = f.views.key_for(&f.proxy, &self.model);
            let (views, _) = f.views.update(
                &out.state,
                &set,
                &changes,
                &out.touched,
                &self.opts,
                f.step + 1,
            );
            f.step += 1;
            let after = views.key_for(&f.proxy, &out.state);
            let mut found = Vec::new();
            for t in ResourceType::ALL {
                let old_map = view_map(&f.views, &self.resources, &before, t);
                let new_map = view_map(&views, &set, &after, t);
                let names: std::collections::BTreeSet<Arc<str>> = if before != after {
                    old_map.keys().chain(new_map.keys()).cloned().collect()
                } else {
                    let tc = changes.of(t);
                    let mut n: std::collections::BTreeSet<Arc<str>> = tc
                        .upserted
                        .iter()
                        .chain(tc.removed.iter())
                        .cloned()
                        .collect();
                    if let Some(cs) = views_log(&views, &after, f.step) {
                        let vt = cs.of(t);
                        n.extend(vt.upserted.iter().chain(vt.removed.iter()).cloned());
                    }
                    n
                };
                let kind = match (t, after.proxy_type()) {
                    (ResourceType::Listener, deltapilot_model::ProxyType::ProxylessGrpc) => {
                        ResourceKind::GrpcListener
                    }
                    (ResourceType::Listener, _) => ResourceKind::SidecarListener,
                    (ResourceType::Cluster, deltapilot_model::ProxyType::ProxylessGrpc) => {
                        ResourceKind::GrpcCluster
                    }
                    (ResourceType::Cluster, _) => ResourceKind::Cluster,
                    (ResourceType::Endpoint, _) => ResourceKind::Endpoint,
                    (ResourceType::Route, _) => ResourceKind::Route,
                    (ResourceType::VirtualHost, _) => ResourceKind::VirtualHost,
                    // Not in `ALL`: secrets never enter snapshots or views.
                    (ResourceType::Secret, _) => continue,
                };
                for name in names {
                    let old = old_map.get(&name).cloned();
                    let new = new_map.get(&name).cloned();
                    if old.as_ref().map(|r| &r.bytes) != new.as_ref().map(|r| &r.bytes) {
                        found.push(ResourceChange {
                            kind,
                            name,
                            old,
                            new,
                        });
                    }
                }
            }
            f.views = views;
            report.proxy_changes = Some(found);
        }
        self.stats.gen_errors += errors.len() as u64;
        report.gen_errors = errors;
        self.model = out.state;
        self.resources = set;
        self.resources_hash = generator.resources_hash();
        report
    }
}

/// What the scoped or gateway view under `key` logged at `step` (none for default keys).
fn views_log(views: &Views, key: &ViewKey, step: u64) -> Option<deltapilot_xds::ChangeSet> {
    match key {
        ViewKey::Sidecar {
            sidecar,
            visible,
            sources,
        } => views
            .get(sidecar, visible, sources)?
            .changes_since(step - 1, step),
        ViewKey::Gateway { gateways, visible } => {
            (views.gateway(gateways, visible)?).changes_since(step - 1, step)
        }
        ViewKey::Default(_) => None,
    }
}

/// A batch of decoded events, each with what the fold derives from it alone.
#[derive(Debug, Default)]
pub struct Decoded {
    /// The events, in log order.
    pub events: Vec<(RecordPos, Event)>,
    /// `prepared[i]` is [`Prepared::of`] `events[i]`.
    pub prepared: Vec<Prepared>,
    /// The records that did not decode, in log order.
    pub skipped: Vec<Skipped>,
}

/// Decodes records not yet covered by `folded` and prepares each for the fold;
/// a record that does not decode is listed in [`Decoded::skipped`]. Pure, so a
/// caller may run it on another thread while the previous batch folds.
pub fn decode_records(records: &[Record], folded: &Position) -> Decoded {
    let mut out = Decoded {
        events: Vec::with_capacity(records.len()),
        prepared: Vec::with_capacity(records.len()),
        skipped: Vec::new(),
    };
    for r in records {
        if folded.contains(r.pos) {
            continue;
        }
        match r.decode() {
            Ok(ev) => {
                out.prepared.push(Prepared::of(&ev));
                out.events.push((r.pos, ev));
            }
            Err(e) => out.skipped.push(crate::runner::undecodable(r.pos, &e)),
        }
    }
    out
}
