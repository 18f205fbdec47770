//! Make-before-break ordering across resource types on one stream.
//!
//! Additions and updates flow forward (CDS → EDS → LDS → RDS): a type's upserts wait
//! while an earlier type has upserts pending or a response in flight, so a proxy
//! never receives a listener or route that points at a cluster it does not have yet.
//! Removals flow backward (RDS → LDS → EDS → CDS): a type's removals wait while any
//! later type has work pending or in flight, so routes stop referencing a cluster
//! before the cluster goes. Upserts never wait on removals, so the two flows cannot
//! deadlock.
//!
//! What it does NOT do: look at names or versions; callers summarise each type's
//! pending work as three flags.

use deltapilot_engine::xds::ResourceType;

/// One type's pending work on a stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TypeWork {
    /// Resources to add or update are waiting.
    pub(crate) upserts: bool,
    /// Removals are waiting.
    pub(crate) removals: bool,
    /// A response of this type is not yet ACKed or NACKed.
    pub(crate) in_flight: bool,
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

fn removals_unblocked(w: &[TypeWork; 4], i: usize) -> bool {
    w[i + 1..]
        .iter()
        .all(|v| !v.in_flight && !v.upserts && !v.removals)
}

/// The next response to send, if any type may send now.
pub(crate) fn pick(w: &[TypeWork; 4]) -> Option<Pick> {
    for (i, t) in ResourceType::ALL.into_iter().enumerate() {
        let earlier_busy = w[..i].iter().any(|u| u.in_flight || u.upserts);
        if w[i].upserts && !w[i].in_flight && !earlier_busy {
            return Some(Pick {
                t,
                upserts: true,
                removals: w[i].removals && removals_unblocked(w, i),
            });
        }
    }
    for (i, t) in ResourceType::ALL.into_iter().enumerate().rev() {
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

    fn w(upserts: bool, removals: bool, in_flight: bool) -> TypeWork {
        TypeWork {
            upserts,
            removals,
            in_flight,
        }
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
    fn upserts_of_a_type_go_without_its_blocked_removals() {
        let idle = TypeWork::default();
        let p = pick(&[w(true, true, false), idle, idle, w(false, true, false)]).expect("cds");
        assert_eq!(
            (p.t, p.upserts, p.removals),
            (ResourceType::Cluster, true, false)
        );
    }
}
