//! Churn: realistic changes to the mesh, one operation at a time, each registered
//! with the convergence tracker before it is written.
//!
//! Operations (weighted by the scenario's `churn.mix`):
//! - **flap**: an endpoint goes away; `flap-down-ms` later a replacement appears
//!   with a new address (a restarted pod);
//! - **scale-up** / **scale-down**: a service gains or loses 1..=`max-step`
//!   endpoints (never below one);
//! - **service-add** / **service-remove**: a service appears with
//!   `endpoints-per-service` endpoints, or disappears (never one a rule routes
//!   to);
//! - **rule-shift**: a VirtualService's weighted split moves, with a new
//!   marker in its response headers (see `mesh::RULE_MARKER_HEADER`), once its
//!   previous shift has converged.
//!
//! Which service changes follows a Zipf distribution over the services' popularity
//! rank: a few services change constantly, most rarely, as with real deployments.
//!
//! Nothing is removed before its own addition has converged at every expected
//! proxy; that keeps the tracker's "absent means removed" reasoning sound. When no
//! target qualifies, the operation is skipped and another is drawn (bounded).
//!
//! What it does NOT do: write anything (see `sink`) or pace itself (the harness
//! calls [`Churn::next`] at the scenario's rate).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use deltapilot_proto as pb;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::mesh::{Endpoint, Mesh, Rule, Service};
use crate::scenario::ChurnSpec;
use crate::tracker::{ChangeKind, EventId, Expect, Tracker};

/// How many times an operation looks for an eligible target before giving up.
const PICK_ATTEMPTS: usize = 8;

/// One write: a service's new state (or its removal) and the tracked changes it
/// carries.
#[derive(Debug, Clone)]
pub struct Write {
    /// The service after the change (before it, for a removal).
    pub service: Service,
    /// The service is new.
    pub new_service: bool,
    /// The service is gone.
    pub removed_service: bool,
    /// Endpoint addresses added.
    pub added: Vec<Arc<str>>,
    /// Endpoint addresses removed.
    pub removed: Vec<Arc<str>>,
    /// The tracked changes (one per event).
    pub events: Vec<EventId>,
    /// The rule after a shift: only it is written (`service` is the one it
    /// routes, unchanged).
    pub rule: Option<Rule>,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Flap,
    ScaleUp,
    ScaleDown,
    ServiceAdd,
    ServiceRemove,
    RuleShift,
}

/// Zipf weights over ranks `0..n`, rebuilt when `n` changes.
#[derive(Debug, Default)]
struct Zipf {
    exponent: f64,
    cdf: Vec<f64>,
}

impl Zipf {
    fn sample(&mut self, n: usize, rng: &mut StdRng) -> usize {
        if self.cdf.len() != n {
            let mut acc = 0.0;
            self.cdf = (0..n)
                .map(|i| {
                    acc += 1.0 / ((i + 1) as f64).powf(self.exponent);
                    acc
                })
                .collect();
        }
        let total = self.cdf.last().copied().unwrap_or(0.0);
        let u = rng.random::<f64>() * total;
        self.cdf
            .partition_point(|&c| c < u)
            .min(n.saturating_sub(1))
    }
}

/// The churn generator.
#[derive(Debug)]
pub struct Churn {
    mesh: Mesh,
    rng: StdRng,
    spec: ChurnSpec,
    zipf: Zipf,
    flaps: VecDeque<(Instant, u64)>,
    tracker: Arc<Tracker>,
    skipped: u64,
}

fn eligible(tracker: &Tracker, by: Option<EventId>) -> bool {
    by.is_none_or(|id| tracker.is_converged(id))
}

impl Churn {
    /// A generator over `mesh` (already written), registering with `tracker`.
    pub fn new(mesh: Mesh, spec: ChurnSpec, seed: u64, tracker: Arc<Tracker>) -> Self {
        Churn {
            mesh,
            rng: StdRng::seed_from_u64(seed ^ 0x5eed_c4a2),
            zipf: Zipf {
                exponent: spec.zipf_exponent,
                cdf: Vec::new(),
            },
            spec,
            flaps: VecDeque::new(),
            tracker,
            skipped: 0,
        }
    }

    /// The mesh as it stands.
    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }

    /// Operations skipped because no target qualified.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The next write: a flap replacement that is due, else a random operation.
    /// `None` when nothing qualified this time.
    pub fn next(&mut self, now: Instant) -> Option<Write> {
        if let Some(&(due, id)) = self.flaps.front()
            && due <= now
        {
            self.flaps.pop_front();
            if let Some(w) = self.scale_up_at(id, 1) {
                return Some(w);
            }
        }
        for _ in 0..PICK_ATTEMPTS {
            let w = match self.pick_op() {
                Op::Flap => self.flap(now),
                Op::ScaleUp => self.scale_up(),
                Op::ScaleDown => self.scale_down(),
                Op::ServiceAdd => Some(self.service_add()),
                Op::ServiceRemove => self.service_remove(),
                Op::RuleShift => self.rule_shift(),
            };
            if w.is_some() {
                return w;
            }
        }
        self.skipped += 1;
        None
    }

    fn pick_op(&mut self) -> Op {
        let m = &self.spec.mix;
        let table = [
            (Op::Flap, m.flap),
            (Op::ScaleUp, m.scale_up),
            (Op::ScaleDown, m.scale_down),
            (Op::ServiceAdd, m.service_add),
            (Op::ServiceRemove, m.service_remove),
            (Op::RuleShift, m.rule_shift),
        ];
        let total: u32 = table.iter().map(|(_, w)| w).sum();
        let mut x = self.rng.random_range(0..total.max(1));
        for (op, w) in table {
            if x < w {
                return op;
            }
            x -= w;
        }
        Op::Flap
    }

    fn pick_service(&mut self) -> Option<usize> {
        let n = self.mesh.services.len();
        if n == 0 {
            return None;
        }
        Some(self.zipf.sample(n, &mut self.rng))
    }

    /// Positions of endpoints of service `pos` that may be removed.
    fn removable(&self, pos: usize) -> Vec<usize> {
        self.mesh.services[pos]
            .endpoints
            .iter()
            .enumerate()
            .filter(|(_, e)| eligible(&self.tracker, e.introduced_by))
            .map(|(i, _)| i)
            .collect()
    }

    fn remove_endpoints(&mut self, pos: usize, k: usize) -> Option<Write> {
        let mut candidates = self.removable(pos);
        let len = self.mesh.services[pos].endpoints.len();
        let k = k.min(len.saturating_sub(1)).min(candidates.len());
        if k == 0 {
            return None;
        }
        let mut victims = Vec::with_capacity(k);
        for _ in 0..k {
            let i = self.rng.random_range(0..candidates.len());
            victims.push(candidates.swap_remove(i));
        }
        victims.sort_unstable_by(|a, b| b.cmp(a));
        let now = SystemTime::now();
        let svc = &mut self.mesh.services[pos];
        let mut removed = Vec::with_capacity(k);
        let mut events = Vec::with_capacity(k);
        for v in victims {
            let e = svc.endpoints.remove(v);
            events.push(self.tracker.register(
                svc.cluster.clone(),
                Expect::Absent(e.addr.clone()),
                ChangeKind::EndpointRemove,
                format!("-{}", e.addr),
                now,
            ));
            removed.push(e.addr);
        }
        Some(Write {
            service: svc.clone(),
            new_service: false,
            removed_service: false,
            added: Vec::new(),
            removed,
            events,
            rule: None,
        })
    }

    fn flap(&mut self, now: Instant) -> Option<Write> {
        let pos = self.pick_service()?;
        let w = self.remove_endpoints(pos, 1)?;
        let down = Duration::from_millis(self.spec.flap_down_ms);
        self.flaps.push_back((now + down, w.service.id));
        Some(w)
    }

    fn scale_down(&mut self) -> Option<Write> {
        let pos = self.pick_service()?;
        let k = self.rng.random_range(1..=self.spec.max_step);
        self.remove_endpoints(pos, k)
    }

    fn scale_up(&mut self) -> Option<Write> {
        let pos = self.pick_service()?;
        let k = self.rng.random_range(1..=self.spec.max_step);
        let id = self.mesh.services[pos].id;
        self.scale_up_at(id, k)
    }

    fn scale_up_at(&mut self, id: u64, k: usize) -> Option<Write> {
        let pos = self.mesh.position(id)?;
        let now = SystemTime::now();
        let mut added = Vec::with_capacity(k);
        let mut events = Vec::with_capacity(k);
        for _ in 0..k {
            let addr = self.mesh.new_address();
            let svc = &mut self.mesh.services[pos];
            let ev = self.tracker.register(
                svc.cluster.clone(),
                Expect::Present(addr.clone()),
                ChangeKind::EndpointAdd,
                format!("+{addr}"),
                now,
            );
            svc.endpoints.push(Endpoint {
                addr: addr.clone(),
                introduced_by: Some(ev),
            });
            added.push(addr);
            events.push(ev);
        }
        Some(Write {
            service: self.mesh.services[pos].clone(),
            new_service: false,
            removed_service: false,
            added,
            removed: Vec::new(),
            events,
            rule: None,
        })
    }

    fn service_add(&mut self) -> Write {
        let mut svc = self.mesh.new_service(&mut self.rng, None);
        let marker = svc.endpoints[0].addr.clone();
        let ev = self.tracker.register(
            svc.cluster.clone(),
            Expect::Present(marker.clone()),
            ChangeKind::ServiceAdd,
            format!("+{marker}"),
            SystemTime::now(),
        );
        svc.introduced_by = Some(ev);
        for e in &mut svc.endpoints {
            e.introduced_by = Some(ev);
        }
        let at = self.rng.random_range(0..=self.mesh.services.len());
        self.mesh.services.insert(at, svc.clone());
        Write {
            added: svc.endpoints.iter().map(|e| e.addr.clone()).collect(),
            service: svc,
            new_service: true,
            removed_service: false,
            removed: Vec::new(),
            events: vec![ev],
            rule: None,
        }
    }

    fn service_remove(&mut self) -> Option<Write> {
        if self.mesh.services.len() <= 1 {
            return None;
        }
        for _ in 0..PICK_ATTEMPTS {
            let pos = self.rng.random_range(0..self.mesh.services.len());
            let s = &self.mesh.services[pos];
            let ok = !s.ruled
                && eligible(&self.tracker, s.introduced_by)
                && s.endpoints
                    .iter()
                    .all(|e| eligible(&self.tracker, e.introduced_by));
            if !ok {
                continue;
            }
            let svc = self.mesh.services.remove(pos);
            let ev = self.tracker.register(
                svc.cluster.clone(),
                Expect::ClusterGone,
                ChangeKind::ServiceRemove,
                pb::service_key(&svc.namespace, &svc.host),
                SystemTime::now(),
            );
            return Some(Write {
                removed: svc.endpoints.iter().map(|e| e.addr.clone()).collect(),
                service: svc,
                new_service: false,
                removed_service: true,
                added: Vec::new(),
                events: vec![ev],
                rule: None,
            });
        }
        None
    }

    fn rule_shift(&mut self) -> Option<Write> {
        let n = self.mesh.rules.len();
        if n == 0 {
            return None;
        }
        let k = self.zipf.sample(n, &mut self.rng);
        if !eligible(&self.tracker, self.mesh.rules[k].last_shift) {
            return None;
        }
        let host = &self.mesh.rules[k].host;
        let service = self.mesh.services.iter().find(|s| &s.host == host)?.clone();
        let rule = &mut self.mesh.rules[k];
        rule.shift();
        let rule = rule.clone();
        let marker = rule.marker();
        let ev = self.tracker.register_route(
            rule.route(),
            rule.track_key(),
            Expect::RouteHas(Arc::from(marker.as_str())),
            marker,
            SystemTime::now(),
        );
        self.mesh.rules[k].last_shift = Some(ev);
        Some(Write {
            service,
            new_service: false,
            removed_service: false,
            added: Vec::new(),
            removed: Vec::new(),
            events: vec![ev],
            rule: Some(rule),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::MeshSpec;

    fn churn(exponent: f64) -> Churn {
        let mut rng = StdRng::seed_from_u64(9);
        let mesh = Mesh::new(
            &MeshSpec {
                services: 50,
                endpoints_per_service: 4,
                http_fraction: 1.0,
                namespaces: 2,
                rules: 0,
            },
            &mut rng,
        );
        let spec = ChurnSpec {
            zipf_exponent: exponent,
            ..ChurnSpec::default()
        };
        let tracker = Arc::new(Tracker::new());
        tracker.set_expected(1, 0);
        Churn::new(mesh, spec, 1, tracker)
    }

    #[test]
    fn zipf_prefers_the_first_ranks() {
        let mut c = churn(1.0);
        let mut hits = [0usize; 50];
        for _ in 0..5000 {
            hits[c.zipf.sample(50, &mut c.rng)] += 1;
        }
        assert!(hits[0] > hits[10] * 3, "{hits:?}");
        assert!(hits[49] > 0, "the tail still changes: {hits:?}");
    }

    #[test]
    fn nothing_unconverged_is_removed_and_services_keep_an_endpoint() {
        let mut c = churn(1.0);
        let now = Instant::now();
        let mut writes = 0;
        for _ in 0..400 {
            if let Some(w) = c.next(now) {
                writes += 1;
                for r in &w.removed {
                    assert!(!w.added.contains(r));
                }
            }
        }
        assert!(writes > 0);
        // Nothing converged, so every churn-added endpoint is still there.
        for s in &c.mesh().services {
            assert!(!s.endpoints.is_empty(), "{} lost every endpoint", s.name);
        }
        let (registered, converged) = c.tracker.counts();
        assert!(registered >= writes && converged == 0);
        for s in &c.mesh().services {
            for e in &s.endpoints {
                if let Some(id) = e.introduced_by {
                    assert!(!c.tracker.is_converged(id));
                }
            }
        }
    }
}
