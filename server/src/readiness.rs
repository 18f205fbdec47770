//! What `/readyz` answers: not ready while catching up, and once caught up,
//! either "caught up" or "serving the last good state" (the log is unreachable,
//! the engine is behind its head, or an adapter cannot append what its registry
//! changed).
//!
//! # HTTP status policy
//!
//! - `catching_up` → **503**: the replica has never caught up with the log since
//!   it started (or an in-process adapter's start-up resync is not in the log), so
//!   what it would serve may be an old run's view. Load balancers and Kubernetes
//!   keep traffic away until it is ready.
//! - `caught_up` → **200**.
//! - `serving_last_good_state` → **200**, with the reasons in the body. Every proxy
//!   connected to this replica keeps the state it has, and a proxy that connects
//!   gets the same last good state, which is what it would fall back to anyway.
//!   A 503 here would make Kubernetes drop every replica from the Service during a
//!   broker outage (they all lose the same broker at once), leaving new and
//!   reconnecting proxies with no control plane at all. So the outage is reported
//!   (this state, `deltapilot_serving_state`, `deltapilot_log_connected`), not
//!   turned into unreadiness; alert on those.
//!
//! The body is JSON: `{"ready": bool, "state": "...", "reasons": [...]}`.
//!
//! What it does NOT do: probe the log (see `log_health`) or serve HTTP (see
//! `admin`).

use axum::http::StatusCode;
use deltapilot_log::{LogHealth, Position};

use crate::adapter_health::AdapterReport;

/// Where a replica stands, for `/readyz` and the `serving_state` metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServingState {
    /// Not caught up with the log since start: not ready (503).
    CatchingUp,
    /// Caught up, the log answers, and nothing is waiting to be appended.
    CaughtUp,
    /// Caught up once, now serving what it has while the log is unreachable or
    /// ahead of it, or an adapter cannot append (200).
    ServingLastGoodState,
}

impl ServingState {
    /// Every state, in label order.
    pub const ALL: [ServingState; 3] = [
        ServingState::CatchingUp,
        ServingState::CaughtUp,
        ServingState::ServingLastGoodState,
    ];

    /// The label and the `state` field.
    pub fn as_str(self) -> &'static str {
        match self {
            ServingState::CatchingUp => "catching_up",
            ServingState::CaughtUp => "caught_up",
            ServingState::ServingLastGoodState => "serving_last_good_state",
        }
    }
}

/// The answer to "is this replica ready, and how current is what it serves?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// Where it stands.
    pub state: ServingState,
    /// Why it is not [`ServingState::CaughtUp`] (empty when it is).
    pub reasons: Vec<String>,
}

impl Readiness {
    /// Caught up, nothing to report.
    pub fn caught_up() -> Self {
        Self {
            state: ServingState::CaughtUp,
            reasons: Vec::new(),
        }
    }

    /// Serving: caught up without `reasons`, else the last good state for them.
    pub(crate) fn serving(reasons: Vec<String>) -> Self {
        if reasons.is_empty() {
            Self::caught_up()
        } else {
            Self {
                state: ServingState::ServingLastGoodState,
                reasons,
            }
        }
    }

    /// Whether it takes traffic (see the module docs).
    pub fn ready(&self) -> bool {
        self.state != ServingState::CatchingUp
    }

    /// The `/readyz` status code (see the module docs).
    pub fn http_status(&self) -> StatusCode {
        if self.ready() {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        }
    }

    /// The `/readyz` body.
    pub fn to_json(&self) -> String {
        let body = serde_json::json!({
            "ready": self.ready(),
            "state": self.state.as_str(),
            "reasons": self.reasons,
        });
        format!("{body}\n")
    }
}

/// What readiness is decided from, read fresh for every request.
#[derive(Debug)]
pub struct Inputs<'a> {
    /// The engine has caught up with the log at least once since start.
    pub engine_caught_up: bool,
    /// Every in-process adapter's report.
    pub adapters: &'a [AdapterReport],
    /// The log handle's health.
    pub log: &'a LogHealth,
    /// The last error of the log probe, while it fails.
    pub probe_error: Option<String>,
    /// A head the probe measured at least one probe interval ago, if any.
    pub settled_head: Option<Position>,
    /// Where the engine's current snapshot stands.
    pub engine_position: &'a Position,
}

/// Decides readiness (see the module docs).
pub fn evaluate(i: &Inputs<'_>) -> Readiness {
    if !i.engine_caught_up {
        return Readiness {
            state: ServingState::CatchingUp,
            reasons: vec!["the engine is catching up with the log".into()],
        };
    }
    let resyncing: Vec<String> = i
        .adapters
        .iter()
        .filter(|r| !r.resync_completed)
        .map(|r| match &r.last_error {
            Some(e) => format!(
                "{} adapter ({}) has not completed its resync: {e}",
                r.adapter, r.source
            ),
            None => format!(
                "{} adapter ({}) has not completed its resync yet",
                r.adapter, r.source
            ),
        })
        .collect();
    // The append succeeding is not enough: until the engine has folded past the
    // marker, what it serves may still be an old run's view of that registry.
    let unfolded = i.adapters.iter().filter_map(|r| match &r.resync_completed_at {
        Some(at) if r.resync_completed && !covers(i.engine_position, at) => Some(format!(
            "{} adapter ({}) completed its resync at {at}; the engine (at {}) has not folded it yet",
            r.adapter, r.source, i.engine_position
        )),
        _ => None,
    });
    let resyncing: Vec<String> = resyncing.into_iter().chain(unfolded).collect();
    if !resyncing.is_empty() {
        return Readiness {
            state: ServingState::CatchingUp,
            reasons: resyncing,
        };
    }
    let mut reasons: Vec<String> = log_unreachable(i.log, i.probe_error.as_deref())
        .into_iter()
        .collect();
    if let Some(head) = &i.settled_head
        && !covers(i.engine_position, head)
    {
        reasons.push(format!(
            "the engine (at {}) is behind the log head {head} measured a probe ago",
            i.engine_position
        ));
    }
    reasons.extend(i.adapters.iter().filter_map(append_stuck));
    Readiness::serving(reasons)
}

/// Why the log counts as unreachable, if it does: `probe_error` is the log
/// probe's last error while it fails. Shared with the adapter processes'
/// readiness (`adapter_health::process_readiness`).
pub(crate) fn log_unreachable(log: &LogHealth, probe_error: Option<&str>) -> Option<String> {
    (!log.connected()).then(|| match probe_error {
        Some(e) => format!("the log is unreachable: {e}"),
        None => "the log is unreachable (its last request failed)".into(),
    })
}

/// Why an adapter that has events waiting cannot append them, if it cannot:
/// "`<adapter>` adapter (`<source>`) cannot append N pending event(s): …".
pub(crate) fn append_stuck(r: &AdapterReport) -> Option<String> {
    let e = r
        .last_append_error
        .as_ref()
        .filter(|_| r.append_backlog > 0)?;
    Some(format!(
        "{} adapter ({}) cannot append {} pending event(s): {e}",
        r.adapter, r.source, r.append_backlog
    ))
}

/// Whether `pos` is at or past `head` on every partition.
fn covers(pos: &Position, head: &Position) -> bool {
    head.offsets()
        .iter()
        .enumerate()
        .all(|(p, &next)| pos.offset(p as u32) >= next)
}

/// An adapter's report for the readiness unit tests (here and in
/// `adapter_health`): one entity, one event emitted, the resync (when
/// `resynced`) completed at offset 5, and `err` as both last errors.
#[cfg(test)]
pub(crate) fn test_report(
    adapter: &'static str,
    source: &str,
    resynced: bool,
    backlog: usize,
    err: Option<&str>,
) -> AdapterReport {
    AdapterReport {
        adapter,
        source: source.into(),
        resync_completed: resynced,
        resync_completed_at: resynced.then(|| Position::single(5)),
        registry_healthy: true,
        entities_in_view: 1,
        events_emitted_total: 1,
        malformed_total: 0,
        oversized_total: 0,
        append_backlog: backlog,
        last_append_error: err.map(str::to_owned),
        last_error: err.map(str::to_owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(resynced: bool, backlog: usize, err: Option<&str>) -> AdapterReport {
        test_report("file", "file", resynced, backlog, err)
    }

    #[test]
    fn states_and_status_codes() {
        let health = LogHealth::new();
        let at = Position::single(5);
        let adapters = [report(true, 0, None)];
        let mut i = Inputs {
            engine_caught_up: false,
            adapters: &adapters,
            log: &health,
            probe_error: None,
            settled_head: Some(Position::single(5)),
            engine_position: &at,
        };
        let r = evaluate(&i);
        assert_eq!(r.state, ServingState::CatchingUp);
        assert_eq!(r.http_status(), StatusCode::SERVICE_UNAVAILABLE);

        i.engine_caught_up = true;
        let r = evaluate(&i);
        assert_eq!(r, Readiness::caught_up());
        assert_eq!(r.http_status(), StatusCode::OK);
        assert!(
            r.to_json().contains(r#""state":"caught_up""#),
            "{}",
            r.to_json()
        );

        // Behind a head measured a probe ago.
        i.settled_head = Some(Position::single(9));
        let r = evaluate(&i);
        assert_eq!(r.state, ServingState::ServingLastGoodState);
        assert_eq!(r.http_status(), StatusCode::OK);
        assert!(r.reasons[0].contains("behind"), "{:?}", r.reasons);

        // An adapter that cannot append.
        i.settled_head = None;
        let stuck = [report(true, 3, Some("timed out"))];
        i.adapters = &stuck;
        let r = evaluate(&i);
        assert_eq!(r.state, ServingState::ServingLastGoodState);
        assert!(r.reasons[0].contains("3 pending"), "{:?}", r.reasons);

        // An adapter that never resynced keeps it not ready.
        let fresh = [report(false, 3, None)];
        i.adapters = &fresh;
        assert_eq!(evaluate(&i).state, ServingState::CatchingUp);

        // A resync in the log that the engine has not folded yet keeps it not
        // ready, and folding past it makes it ready.
        let done = [report(true, 0, None)];
        i.adapters = &done;
        let behind = Position::single(4);
        i.engine_position = &behind;
        let r = evaluate(&i);
        assert_eq!(r.state, ServingState::CatchingUp, "{r:?}");
        assert!(r.reasons[0].contains("not folded"), "{:?}", r.reasons);
        let past = Position::single(5);
        i.engine_position = &past;
        assert_eq!(evaluate(&i), Readiness::caught_up());
    }
}
