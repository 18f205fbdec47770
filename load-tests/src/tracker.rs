//! End-to-end convergence tracking: for every change the load generator writes,
//! when did the last simulated proxy that should see it ACK a response that shows
//! it?
//!
//! A change is registered (before it is written) with the cluster it affects and
//! what a proxy will see once it has it: an endpoint address present in, or absent
//! from, that cluster's ClusterLoadAssignment, or the cluster gone from CDS. Each
//! proxy keeps a [`Cursor`] per cluster. When it ACKs a response for a cluster it
//! asks the tracker for the newest registered change whose effect it can see; that
//! change and every earlier one on the same cluster count as converged for that
//! proxy at that moment (the server's snapshots are ordered, so seeing a later
//! state means having passed the earlier ones, even when a slow proxy got them
//! coalesced into one response).
//!
//! A rule shift is registered under its rule, with the route configuration
//! that holds it: a proxy that ACKs that route configuration converges the
//! newest shift whose marker its bytes contain (markers are unique per shift,
//! and one rule's shifts are written in order).
//!
//! This is sound because addresses are never reused and churn never removes an
//! address (or a service) whose own addition has not converged yet (see `churn`):
//! "absent" can then only mean "removed", never "not yet added".
//!
//! What it does NOT do: decide which proxies are expected (the harness says how
//! many normal and slow proxies there are; NACKing and stalled proxies are not
//! expected), or compute percentiles (see `stats`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

/// Index of a registered change.
pub type EventId = usize;

/// What kind of change an event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// An endpoint appeared.
    EndpointAdd,
    /// An endpoint went away.
    EndpointRemove,
    /// A service (cluster) appeared with its endpoints.
    ServiceAdd,
    /// A service (cluster) went away.
    ServiceRemove,
    /// A VirtualService's weighted split moved.
    RuleShift,
}

impl ChangeKind {
    /// Whether the change is an endpoint change (the headline figure).
    pub fn is_endpoint(self) -> bool {
        matches!(self, ChangeKind::EndpointAdd | ChangeKind::EndpointRemove)
    }
}

/// What a proxy sees once it has a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// The address is in the cluster's assignment.
    Present(Arc<str>),
    /// The address is not in the cluster's assignment.
    Absent(Arc<str>),
    /// The cluster is gone from CDS.
    ClusterGone,
    /// The route configuration's bytes contain this marker.
    RouteHas(Arc<str>),
}

/// Which proxies count towards convergence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Group {
    /// Reads and ACKs at once.
    Normal,
    /// Reads slowly; still expected to converge.
    Slow,
    /// NACKs or stalls on purpose: not expected to converge.
    Untracked,
}

#[derive(Debug, Clone)]
struct Tracked {
    /// The list it joined (a cluster, or a rule).
    list: Arc<str>,
    /// For a rule shift, the route configuration that shows it.
    route: Option<Arc<str>>,
    expect: Expect,
    kind: ChangeKind,
    written: SystemTime,
    appended: Option<SystemTime>,
    remaining: u32,
    remaining_normal: u32,
    last: Option<SystemTime>,
    last_normal: Option<SystemTime>,
}

/// A registered change, as the baseline registers it again for its own fleet.
#[derive(Debug, Clone)]
pub struct ChangeSpec {
    list: Arc<str>,
    route: Option<Arc<str>>,
    expect: Expect,
    kind: ChangeKind,
    /// Its time zero in the run it came from (append, else write).
    pub start: SystemTime,
}

/// One change's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct EventResult {
    /// Its kind.
    pub kind: ChangeKind,
    /// When the load generator wrote it (a file or a log append).
    pub written: SystemTime,
    /// Its observed-at time in the log (the append), when known.
    pub appended: Option<SystemTime>,
    /// When the last expected proxy ACKed it, if all did.
    pub converged: Option<SystemTime>,
    /// When the last normal (not slow) proxy ACKed it, if all did.
    pub converged_normal: Option<SystemTime>,
}

impl EventResult {
    /// The time zero of the convergence measurement: the append when known, else
    /// the write.
    pub fn start(&self) -> SystemTime {
        self.appended.unwrap_or(self.written)
    }
}

#[derive(Debug, Default)]
struct Inner {
    events: Vec<Tracked>,
    by_cluster: HashMap<Arc<str>, Vec<EventId>>,
    by_key: HashMap<String, EventId>,
    /// Route configuration name → the rules (keys of `by_cluster`) it holds.
    rules_of_route: HashMap<Arc<str>, Vec<Arc<str>>>,
    normal: u32,
    slow: u32,
}

/// Shared by every proxy of a fleet.
#[derive(Debug, Default)]
pub struct Tracker {
    inner: Mutex<Inner>,
}

/// A proxy's position in each cluster's list of changes.
#[derive(Debug, Default)]
pub struct Cursor(HashMap<Arc<str>, usize>);

impl Tracker {
    /// An empty tracker expecting no proxies yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets how many proxies each later change waits for.
    pub fn set_expected(&self, normal: u32, slow: u32) {
        let mut i = self.lock();
        i.normal = normal;
        i.slow = slow;
    }

    /// Registers a change before it is written. `key` finds it again when its
    /// append shows up in the log (`+ADDR`, `-ADDR`, or the service key).
    pub fn register(
        &self,
        cluster: Arc<str>,
        expect: Expect,
        kind: ChangeKind,
        key: String,
        written: SystemTime,
    ) -> EventId {
        self.register_in(cluster, None, expect, kind, key, written)
    }

    fn register_in(
        &self,
        cluster: Arc<str>,
        route: Option<Arc<str>>,
        expect: Expect,
        kind: ChangeKind,
        key: String,
        written: SystemTime,
    ) -> EventId {
        let mut i = self.lock();
        if let Some(route) = &route {
            let rules = i.rules_of_route.entry(route.clone()).or_default();
            if !rules.contains(&cluster) {
                rules.push(cluster.clone());
            }
        }
        let id = i.events.len();
        let (normal, slow) = (i.normal, i.slow);
        i.events.push(Tracked {
            list: cluster.clone(),
            route,
            expect,
            kind,
            written,
            appended: None,
            remaining: normal + slow,
            remaining_normal: normal,
            last: None,
            last_normal: None,
        });
        i.by_cluster.entry(cluster).or_default().push(id);
        i.by_key.insert(key, id);
        id
    }

    /// Registers a rule shift before it is written: `rule` is the list it
    /// joins (one per rule), `route` the route configuration that shows it.
    pub fn register_route(
        &self,
        route: Arc<str>,
        rule: Arc<str>,
        expect: Expect,
        key: String,
        written: SystemTime,
    ) -> EventId {
        self.register_in(
            rule,
            Some(route),
            expect,
            ChangeKind::RuleShift,
            key,
            written,
        )
    }

    /// Every registered change, in registration order, to register again
    /// elsewhere with [`Tracker::register_spec`].
    pub fn specs(&self) -> Vec<ChangeSpec> {
        self.lock()
            .events
            .iter()
            .map(|e| ChangeSpec {
                list: e.list.clone(),
                route: e.route.clone(),
                expect: e.expect.clone(),
                kind: e.kind,
                start: e.appended.unwrap_or(e.written),
            })
            .collect()
    }

    /// Registers `spec` (from another tracker) as written at `written`.
    pub fn register_spec(&self, spec: &ChangeSpec, written: SystemTime) -> EventId {
        let key = format!("spec-{}", self.lock().events.len());
        self.register_in(
            spec.list.clone(),
            spec.route.clone(),
            spec.expect.clone(),
            spec.kind,
            key,
            written,
        )
    }

    /// Whether `id` was registered while a change it undoes had not converged:
    /// the removal of an address whose addition, or of a cluster whose earlier
    /// changes, some proxy has not ACKed yet. The churn never does that (it is
    /// what keeps "absent" meaning "removed"); a replay that falls behind may,
    /// and the tracker may then count `id` and those changes early.
    pub fn undoes_unconverged(&self, id: EventId) -> bool {
        let i = self.lock();
        let Some(e) = i.events.get(id) else {
            return false;
        };
        let Some(list) = i.by_cluster.get(&e.list) else {
            return false;
        };
        list.iter()
            .take_while(|&&k| k != id)
            .map(|&k| &i.events[k])
            .filter(|p| p.remaining > 0)
            .any(|p| match (&e.expect, &p.expect) {
                (Expect::Absent(a), Expect::Present(b)) => a == b,
                (Expect::ClusterGone, _) => true,
                _ => false,
            })
    }

    /// Corrects the write time of `id` to when the write actually happened.
    pub fn set_written(&self, id: EventId, at: SystemTime) {
        if let Some(e) = self.lock().events.get_mut(id) {
            e.written = at;
        }
    }

    /// Records the append (observed-at) time of `id`.
    pub fn set_appended(&self, id: EventId, at: SystemTime) {
        if let Some(e) = self.lock().events.get_mut(id) {
            e.appended.get_or_insert(at);
        }
    }

    /// Records the append time of the change registered under `key`, if any.
    pub fn set_appended_by_key(&self, key: &str, at: SystemTime) -> bool {
        let mut i = self.lock();
        let Some(&id) = i.by_key.get(key) else {
            return false;
        };
        if let Some(e) = i.events.get_mut(id) {
            e.appended.get_or_insert(at);
        }
        true
    }

    /// Whether every expected proxy has ACKed `id`.
    pub fn is_converged(&self, id: EventId) -> bool {
        self.lock().events.get(id).is_some_and(|e| e.remaining == 0)
    }

    /// (registered, converged) counts.
    pub fn counts(&self) -> (usize, usize) {
        let i = self.lock();
        let done = i.events.iter().filter(|e| e.remaining == 0).count();
        (i.events.len(), done)
    }

    /// A proxy of `group` ACKed an assignment of `cluster` holding `addrs`
    /// (sorted) at `now`.
    pub fn on_endpoints(
        &self,
        cursor: &mut Cursor,
        cluster: &str,
        addrs: &[String],
        group: Group,
        now: SystemTime,
    ) {
        if group == Group::Untracked {
            return;
        }
        let has = |a: &str| addrs.binary_search_by(|x| x.as_str().cmp(a)).is_ok();
        self.advance(cursor, cluster, group, now, |e| match &e.expect {
            Expect::Present(a) => has(a),
            Expect::Absent(a) => !has(a),
            Expect::ClusterGone | Expect::RouteHas(_) => false,
        });
    }

    /// A proxy of `group` ACKed route configuration `route` holding `bytes`.
    pub fn on_route(
        &self,
        cursor: &mut Cursor,
        route: &str,
        bytes: &[u8],
        group: Group,
        now: SystemTime,
    ) {
        if group == Group::Untracked {
            return;
        }
        let rules = match self.lock().rules_of_route.get(route) {
            Some(r) => r.clone(),
            None => return,
        };
        for rule in rules {
            self.advance(cursor, &rule, group, now, |e| match &e.expect {
                Expect::RouteHas(m) => memchr::memmem::find(bytes, m.as_bytes()).is_some(),
                _ => false,
            });
        }
    }

    /// A proxy of `group` ACKed a response that removed `cluster`, at `now`.
    pub fn on_cluster_gone(
        &self,
        cursor: &mut Cursor,
        cluster: &str,
        group: Group,
        now: SystemTime,
    ) {
        if group == Group::Untracked {
            return;
        }
        self.advance(cursor, cluster, group, now, |e| {
            e.expect == Expect::ClusterGone
        });
    }

    fn advance(
        &self,
        cursor: &mut Cursor,
        cluster: &str,
        group: Group,
        now: SystemTime,
        visible: impl Fn(&Tracked) -> bool,
    ) {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let Some((name, list)) = inner.by_cluster.get_key_value(cluster) else {
            return;
        };
        let start = cursor.0.get(cluster).copied().unwrap_or(0);
        if start >= list.len() {
            return;
        }
        let Some(newest) = (start..list.len())
            .rev()
            .find(|&k| visible(&inner.events[list[k]]))
        else {
            return;
        };
        for &id in &list[start..=newest] {
            let e = &mut inner.events[id];
            e.remaining = e.remaining.saturating_sub(1);
            e.last = Some(e.last.map_or(now, |l| l.max(now)));
            if group == Group::Normal {
                e.remaining_normal = e.remaining_normal.saturating_sub(1);
                e.last_normal = Some(e.last_normal.map_or(now, |l| l.max(now)));
            }
        }
        cursor.0.insert(name.clone(), newest + 1);
    }

    /// Whether a proxy with `cursor` has ACKed every registered change.
    pub fn caught_up(&self, cursor: &Cursor) -> bool {
        self.lock()
            .by_cluster
            .iter()
            .all(|(c, list)| cursor.0.get(c).copied().unwrap_or(0) >= list.len())
    }

    /// Every change's outcome, in registration order.
    pub fn results(&self) -> Vec<EventResult> {
        self.lock()
            .events
            .iter()
            .map(|e| EventResult {
                kind: e.kind,
                written: e.written,
                appended: e.appended,
                converged: (e.remaining == 0).then_some(e.last.unwrap_or(e.written)),
                converged_normal: (e.remaining_normal == 0)
                    .then_some(e.last_normal.unwrap_or(e.written)),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn t(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    }

    fn addrs(a: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = a.iter().map(|s| s.to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn a_later_visible_state_converges_earlier_changes_too() {
        let tr = Tracker::new();
        tr.set_expected(2, 0);
        let c: Arc<str> = Arc::from("c");
        let add = tr.register(
            c.clone(),
            Expect::Present("x".into()),
            ChangeKind::EndpointAdd,
            "+x".into(),
            t(0),
        );
        let rm = tr.register(
            c.clone(),
            Expect::Absent("a".into()),
            ChangeKind::EndpointRemove,
            "-a".into(),
            t(1),
        );
        let (mut p1, mut p2) = (Cursor::default(), Cursor::default());
        // p1 sees the add first, then the removal.
        tr.on_endpoints(&mut p1, "c", &addrs(&["a", "x"]), Group::Normal, t(10));
        assert!(!tr.is_converged(add), "p2 has not seen it");
        tr.on_endpoints(&mut p1, "c", &addrs(&["x"]), Group::Normal, t(20));
        // p2 gets both coalesced.
        tr.on_endpoints(&mut p2, "c", &addrs(&["x"]), Group::Normal, t(30));
        assert!(tr.is_converged(add) && tr.is_converged(rm));
        let r = tr.results();
        assert_eq!(r[0].converged, Some(t(30)));
        assert_eq!(r[1].converged, Some(t(30)));
        assert!(tr.set_appended_by_key("-a", t(5)));
        assert_eq!(tr.results()[1].start(), t(5));
    }

    #[test]
    fn specs_register_again_and_a_removal_before_its_addition_converged_is_flagged() {
        let tr = Tracker::new();
        tr.set_expected(1, 0);
        let c: Arc<str> = Arc::from("c");
        tr.register(
            c.clone(),
            Expect::Present("x".into()),
            ChangeKind::EndpointAdd,
            "+x".into(),
            t(0),
        );
        tr.register(
            c.clone(),
            Expect::Present("y".into()),
            ChangeKind::EndpointAdd,
            "+y".into(),
            t(1),
        );
        tr.register(
            c.clone(),
            Expect::Absent("x".into()),
            ChangeKind::EndpointRemove,
            "-x".into(),
            t(2),
        );
        tr.register_route(
            Arc::from("80"),
            Arc::from("r"),
            Expect::RouteHas("m".into()),
            "m".into(),
            t(3),
        );
        assert!(tr.set_appended_by_key("+y", t(5)));
        let specs = tr.specs();
        assert_eq!(
            specs.iter().map(|s| s.start).collect::<Vec<_>>(),
            [t(0), t(5), t(2), t(3)]
        );

        let again = Tracker::new();
        again.set_expected(1, 0);
        let ids: Vec<_> = specs
            .iter()
            .map(|s| again.register_spec(s, t(10)))
            .collect();
        // An independent addition is not flagged; removing x before +x converged is.
        assert!(!again.undoes_unconverged(ids[1]));
        assert!(again.undoes_unconverged(ids[2]));
        let mut p = Cursor::default();
        again.on_endpoints(&mut p, "c", &addrs(&["y"]), Group::Normal, t(11));
        assert!(
            again.is_converged(ids[2]),
            "and +x with it, counted early: why it is flagged"
        );
        again.on_route(&mut p, "80", b"..m..", Group::Normal, t(12));
        assert!(again.is_converged(ids[3]), "the rule keeps its route");
        assert_eq!(again.results()[3].start(), t(10));
    }

    #[test]
    fn unrelated_or_untracked_updates_do_not_converge_anything() {
        let tr = Tracker::new();
        tr.set_expected(1, 1);
        let c: Arc<str> = Arc::from("c");
        let add = tr.register(
            c.clone(),
            Expect::Present("x".into()),
            ChangeKind::EndpointAdd,
            "+x".into(),
            t(0),
        );
        let mut p = Cursor::default();
        tr.on_endpoints(&mut p, "c", &addrs(&["a"]), Group::Normal, t(1));
        tr.on_endpoints(&mut p, "other", &addrs(&["x"]), Group::Normal, t(1));
        tr.on_endpoints(
            &mut Cursor::default(),
            "c",
            &addrs(&["x"]),
            Group::Untracked,
            t(1),
        );
        assert!(!tr.is_converged(add));
        tr.on_endpoints(&mut p, "c", &addrs(&["x"]), Group::Normal, t(2));
        assert!(!tr.is_converged(add), "the slow proxy is still expected");
        assert_eq!(tr.results()[0].converged_normal, Some(t(2)));
        tr.on_endpoints(
            &mut Cursor::default(),
            "c",
            &addrs(&["x"]),
            Group::Slow,
            t(9),
        );
        assert_eq!(tr.results()[0].converged, Some(t(9)));
    }

    #[test]
    fn cluster_removal_converges_on_cds_only() {
        let tr = Tracker::new();
        tr.set_expected(1, 0);
        let c: Arc<str> = Arc::from("c");
        let gone = tr.register(
            c,
            Expect::ClusterGone,
            ChangeKind::ServiceRemove,
            "svc/ns/h".into(),
            t(0),
        );
        let mut p = Cursor::default();
        tr.on_endpoints(&mut p, "c", &[], Group::Normal, t(1));
        assert!(!tr.is_converged(gone));
        tr.on_cluster_gone(&mut p, "c", Group::Normal, t(2));
        assert!(tr.is_converged(gone));
    }

    #[test]
    fn a_rule_shift_converges_when_its_marker_is_in_the_route() {
        let tr = Tracker::new();
        tr.set_expected(1, 0);
        let route: Arc<str> = Arc::from("8080");
        let reg = |rule: &str, marker: &str| {
            tr.register_route(
                route.clone(),
                Arc::from(rule),
                Expect::RouteHas(Arc::from(marker)),
                marker.into(),
                t(0),
            )
        };
        let a1 = reg("a", "m-a-1");
        let b1 = reg("b", "m-b-1");
        let a2 = reg("a", "m-a-2");
        let mut p = Cursor::default();
        tr.on_route(&mut p, "9090", b"m-a-2 m-b-1", Group::Normal, t(1));
        assert!(!tr.is_converged(a1), "another route shows nothing");
        tr.on_route(&mut p, "8080", b"..m-a-1..m-b-0..", Group::Normal, t(2));
        assert!(tr.is_converged(a1) && !tr.is_converged(b1) && !tr.is_converged(a2));
        tr.on_route(&mut p, "8080", b"..m-a-2..m-b-1..", Group::Normal, t(3));
        assert!(tr.is_converged(b1) && tr.is_converged(a2));
        assert!(tr.caught_up(&p));
        assert_eq!(tr.results()[2].kind, ChangeKind::RuleShift);
    }
}
