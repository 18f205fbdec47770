//! Make-before-break ordering across resource types on one stream.
//!
//! Additions and updates flow forward (CDS → EDS → LDS → RDS → VHDS): a type's upserts wait
//! while an earlier type has upserts pending or a response in flight, so a proxy
//! never receives a listener or route that points at a cluster it does not have yet.
//! A type whose work cannot matter to later types says so (`ungated`): EDS churn on
//! clusters the proxy already holds does not hold back listeners and routes, only the
//! assignments of clusters just (re)sent do (the caller tracks which); nor do
//! removals (a later type's upserts come from snapshots without the removed names).
//! Removals flow by reference (LDS → RDS → CDS/EDS): a removal waits while a type
//! that can reference it has work pending or in flight *from a snapshot at or
//! before the one the removal was decided at*, so routes stop referencing a
//! cluster before the cluster goes. Later listener and route work cannot
//! reference it (it is gone from every later snapshot, and a re-added name is an
//! upsert again), so it does not hold the removal back: under continuous route
//! churn to a slow proxy a removal goes as soon as the changes that were current
//! with it are ACKed, not when the proxy happens to be idle. Each type reports
//! the oldest snapshot its unfinished work may come from (`unfinished_since`,
//! conservative: never later than the truth) and the oldest of its pending
//! removals. Only listeners and routes reference other resources (a listener its
//! route configuration and clusters, a route configuration its clusters); CDS
//! and EDS do not wait on each other, so continuous endpoint churn (EDS always
//! busy) cannot starve a cluster's removal. Upserts never wait on removals, so
//! the two flows cannot deadlock.
//!
//! What it does NOT do: look at names or versions; callers summarise each type's
//! pending work as three flags.

use deltapilot_xds::ResourceType;

/// One type's pending work on a stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TypeWork {
    /// Resources to add or update are waiting.
    pub(crate) upserts: bool,
    /// Removals are waiting.
    pub(crate) removals: bool,
    /// A response of this type is not yet ACKed or NACKed.
    pub(crate) in_flight: bool,
    /// Its pending and in-flight work never holds back later types' upserts
    /// (default `false`: it does).
    pub(crate) ungated: bool,
    /// The oldest snapshot seq any of its pending or in-flight work may come
    /// from; `None` when it has none.
    pub(crate) unfinished_since: Option<u64>,
    /// The seq at which its oldest pending removal was decided (meaningful only
    /// with `removals`).
    pub(crate) oldest_removal: u64,
}

/// What to send next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pick {
    /// The type to answer.
    pub(crate) t: ResourceType,
    /// Send its pending upserts.
    pub(crate) upserts: bool,
    /// Send its pending removals (only when no later type still has work).
    pub(crate) removals: bool,
}

/// Whether resources of type `j` can reference resources of type `i` (so `i`'s
/// removals must wait for `j`'s work). Only LDS, RDS and VHDS reference
/// anything: a listener its route configuration and clusters (a `tcp_proxy`),
/// a route configuration or a VHDS virtual host its clusters; a cluster's
/// assignment goes with its cluster. (A VHDS route configuration names its
/// virtual hosts only by namespace: Envoy takes them in any order.) So
/// a listener is removed before the route configuration it names, as Envoy
/// expects (it ignores, with an error, the removal of a route configuration a
/// listener still uses).
fn references(j: usize, i: usize) -> bool {
    let (listener, route) = (ResourceType::Listener.index(), ResourceType::Route.index());
    let vhost = ResourceType::VirtualHost.index();
    if j == listener {
        i != listener && i != vhost
    } else if j == route || j == vhost {
        i < listener
    } else {
        false
    }
}

/// Type `i`'s removals decided at a seq below this may go now: the oldest seq
/// of unfinished work among the types that can reference it (`u64::MAX` when
/// they have none).
///
/// Assignment (EDS) removals keep the strict rule: none goes while a
/// referencing type has any work (bound 0). Envoy drops a removed cluster's
/// assignment itself, so they need not be prompt, and each one sent alone would
/// hold EDS's one in-flight slot for a round trip ahead of the next endpoint
/// change, which with slow proxies delays endpoint pushes by a round trip each.
pub(crate) fn removal_bound(w: &[TypeWork], i: usize) -> u64 {
    let oldest = w
        .iter()
        .enumerate()
        .filter(|(j, _)| references(*j, i))
        .filter_map(|(_, v)| v.unfinished_since)
        .min();
    match oldest {
        None => u64::MAX,
        Some(_) if i == ResourceType::Endpoint.index() => 0,
        Some(seq) => seq,
    }
}

fn removals_unblocked(w: &[TypeWork], i: usize) -> bool {
    w[i].oldest_removal < removal_bound(w, i)
}

/// The next response to send, if any type may send now. `w` is indexed by
/// [`ResourceType::index`]; types past its end have no work.
pub(crate) fn pick(w: &[TypeWork]) -> Option<Pick> {
    for (i, t) in ResourceType::ALL.into_iter().enumerate().take(w.len()) {
        let earlier_busy = w[..i]
            .iter()
            .any(|u| !u.ungated && (u.in_flight || u.upserts));
        if w[i].upserts && !w[i].in_flight && !earlier_busy {
            return Some(Pick {
                t,
                upserts: true,
                removals: w[i].removals && removals_unblocked(w, i),
            });
        }
    }
    for (i, t) in ResourceType::ALL
        .into_iter()
        .enumerate()
        .take(w.len())
        .rev()
    {
        if w[i].removals && !w[i].in_flight && removals_unblocked(w, i) {
            return Some(Pick {
                t,
                upserts: false,
                removals: true,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Work from one snapshot, seq 1 (removals decided then too).
    fn w(upserts: bool, removals: bool, in_flight: bool) -> TypeWork {
        TypeWork {
            upserts,
            removals,
            in_flight,
            ungated: false,
            unfinished_since: (upserts || removals || in_flight).then_some(1),
            oldest_removal: 1,
        }
    }

    /// A listener goes before the route configuration it names: Envoy ignores
    /// the removal of a route configuration a listener still references.
    #[test]
    fn a_listener_is_removed_before_its_route_configuration() {
        let idle = TypeWork::default();
        let (l, r) = (ResourceType::Listener.index(), ResourceType::Route.index());
        let mut work = [idle; ResourceType::SNAPSHOT_COUNT];
        work[l] = w(false, true, false);
        work[r] = w(false, true, false);
        let first = pick(&work).expect("something to send");
        assert_eq!((first.t, first.removals), (ResourceType::Listener, true));
        // While the listener removal is in flight, the route removal waits.
        work[l] = w(false, false, true);
        assert_eq!(pick(&work), None);
        // Once it is ACKed, the route removal goes.
        work[l] = idle;
        let next = pick(&work).expect("the route removal");
        assert_eq!((next.t, next.removals), (ResourceType::Route, true));
        // A pending route removal never holds a listener removal back.
        let mut work = [idle; ResourceType::SNAPSHOT_COUNT];
        work[l] = w(false, true, false);
        work[r] = w(false, true, true);
        let only = pick(&work).expect("the listener removal");
        assert_eq!(only.t, ResourceType::Listener);
    }

    #[test]
    fn ungated_endpoint_churn_does_not_hold_back_routes() {
        let idle = TypeWork::default();
        let churn = TypeWork {
            ungated: true,
            ..w(true, false, true)
        };
        let p = pick(&[idle, churn, idle, w(true, false, false)]).expect("rds goes");
        assert_eq!((p.t, p.upserts), (ResourceType::Route, true));
        let fresh = w(true, false, true);
        assert_eq!(
            pick(&[idle, fresh, idle, w(true, false, false)]),
            None,
            "a just-sent cluster's assignment still goes before routes"
        );
    }

    #[test]
    fn additions_go_forward_and_wait_for_earlier_types() {
        let idle = TypeWork::default();
        let all = [
            w(true, false, false),
            w(true, false, false),
            idle,
            w(true, false, false),
        ];
        assert_eq!(pick(&all).map(|p| p.t), Some(ResourceType::Cluster));
        let cds_in_flight = [
            w(false, false, true),
            w(true, false, false),
            idle,
            w(true, false, false),
        ];
        assert_eq!(
            pick(&cds_in_flight),
            None,
            "EDS and RDS wait for the CDS ACK"
        );
    }

    #[test]
    fn removals_go_backward_after_references_are_gone() {
        let idle = TypeWork::default();
        let both = [w(false, true, false), idle, idle, w(true, false, false)];
        let p = pick(&both).expect("rds first");
        assert_eq!((p.t, p.upserts), (ResourceType::Route, true));
        let rds_in_flight = [w(false, true, false), idle, idle, w(false, false, true)];
        assert_eq!(
            pick(&rds_in_flight),
            None,
            "the cluster goes only after RDS is ACKed"
        );
        let done = [w(false, true, false), idle, idle, idle];
        assert_eq!(
            pick(&done).map(|p| (p.t, p.removals)),
            Some((ResourceType::Cluster, true))
        );
    }

    #[test]
    fn cluster_removals_go_through_continuous_endpoint_churn() {
        let idle = TypeWork::default();
        // EDS is never idle under churn: a push in flight, the next one pending.
        let churn = [
            w(false, false, true),
            w(false, false, false),
            w(true, false, true),
            w(false, false, false),
            w(true, false, false),
        ];
        for eds in churn {
            let p = pick(&[w(false, true, false), eds, idle, idle]).expect("something goes");
            let cds_removal = p.t == ResourceType::Cluster && p.removals;
            let eds_upsert = p.t == ResourceType::Endpoint && p.upserts;
            assert!(
                cds_removal || eds_upsert,
                "EDS {eds:?}: got {p:?}; the removal must not wait for EDS"
            );
            if !eds.upserts || eds.in_flight {
                assert!(cds_removal, "EDS {eds:?}: the removal goes now, got {p:?}");
            }
        }
        // Listeners and routes still hold it back.
        assert_eq!(
            pick(&[
                w(false, true, false),
                w(true, false, true),
                idle,
                w(false, false, true)
            ]),
            None
        );
    }

    #[test]
    fn later_route_work_does_not_hold_back_an_earlier_removal() {
        let idle = TypeWork::default();
        let removal_at_5 = TypeWork {
            oldest_removal: 5,
            ..w(false, true, false)
        };
        let rds_since = |seq: u64, upserts: bool, in_flight: bool| TypeWork {
            unfinished_since: Some(seq),
            ..w(upserts, false, in_flight)
        };
        // Route work from seq 5 or earlier may be what drops the reference.
        for since in [3, 5] {
            assert_eq!(
                pick(&[removal_at_5, idle, idle, rds_since(since, false, true)]),
                None,
                "RDS unfinished since {since}"
            );
        }
        // Route work that only started after seq 5 cannot reference the cluster.
        let p = pick(&[removal_at_5, idle, idle, rds_since(6, false, true)]).expect("goes");
        assert_eq!((p.t, p.removals), (ResourceType::Cluster, true));
        assert_eq!(
            removal_bound(
                &[
                    removal_at_5,
                    idle,
                    rds_since(9, true, false),
                    rds_since(6, false, true)
                ],
                0
            ),
            6,
            "the oldest unfinished work of LDS and RDS"
        );
        assert_eq!(
            removal_bound(&[removal_at_5, idle, idle, idle], 0),
            u64::MAX
        );
        assert_eq!(
            removal_bound(&[idle, removal_at_5, idle, rds_since(6, false, true)], 1),
            0,
            "assignment removals wait for routes to be idle"
        );
        assert_eq!(
            removal_bound(&[idle, removal_at_5, idle, idle], 1),
            u64::MAX
        );
    }

    /// A VHDS virtual host references clusters as a route configuration
    /// does; nothing else waits for it.
    #[test]
    fn a_cluster_removal_waits_for_virtual_host_work() {
        let idle = TypeWork::default();
        let (vh, r) = (
            ResourceType::VirtualHost.index(),
            ResourceType::Route.index(),
        );
        let mut work = [idle; ResourceType::SNAPSHOT_COUNT];
        work[0] = w(false, true, false);
        work[vh] = w(false, false, true);
        assert_eq!(pick(&work), None, "VHDS work in flight holds it");
        work[vh] = idle;
        let p = pick(&work).map(|p| (p.t, p.removals));
        assert_eq!(p, Some((ResourceType::Cluster, true)));
        let mut work = [idle; ResourceType::SNAPSHOT_COUNT];
        work[r] = w(false, true, false);
        work[vh] = w(false, false, true);
        let p = pick(&work).map(|p| (p.t, p.removals));
        assert_eq!(p, Some((ResourceType::Route, true)));
        let mut work = [idle; ResourceType::SNAPSHOT_COUNT];
        work[r] = w(true, false, true);
        work[vh] = w(true, false, false);
        assert_eq!(pick(&work), None, "VHDS upserts follow RDS");
    }

    #[test]
    fn upserts_of_a_type_go_without_its_blocked_removals() {
        let idle = TypeWork::default();
        let p = pick(&[w(true, true, false), idle, idle, w(false, true, false)]).expect("cds");
        assert_eq!(
            (p.t, p.upserts, p.removals),
            (ResourceType::Cluster, true, false)
        );
    }
}
