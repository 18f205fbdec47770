//! In-process adapters as the server reports them: one neutral [`AdapterReport`]
//! per adapter, exported as Prometheus metrics and used by `/readyz` (see `readiness`).
//!
//! Each adapter publishes its own rich status through a `watch` channel; this module
//! reduces those to the few facts an operator alerts on (is the registry reachable,
//! has the start-up resync landed, how big is the view, how many events were
//! emitted). An adapter running as its own process answers `/readyz` from its
//! report too ([`process_readiness`]). What it does NOT do: run adapters or
//! decide their retry policy.

use std::sync::Arc;
use std::time::Duration;

use deltapilot_adapters::eureka::EurekaAdapterStatus;
use deltapilot_adapters::file::FileAdapterStatus;
use deltapilot_adapters::kubernetes::KubernetesAdapterStatus;
use deltapilot_log::Position;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::readiness::{Readiness, ServingState};

/// How often adapter statuses are copied into metrics: frequent enough for a
/// scrape interval of a few seconds, cheap (a handful of gauges).
pub const EXPORT_INTERVAL: Duration = Duration::from_secs(1);

/// A live adapter's status channel.
#[derive(Debug, Clone)]
pub enum AdapterWatch {
    /// The file adapter.
    File(watch::Receiver<FileAdapterStatus>),
    /// The Eureka adapter.
    Eureka(watch::Receiver<EurekaAdapterStatus>),
    /// The Kubernetes adapter.
    Kubernetes(watch::Receiver<KubernetesAdapterStatus>),
}

/// What the server reports about one adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterReport {
    /// `file`, `eureka` or `kubernetes` (the metric label).
    pub adapter: &'static str,
    /// Its source id in the log.
    pub source: String,
    /// Whether its start-up resync is in the log.
    pub resync_completed: bool,
    /// Where the engine must be to have folded that resync (see the adapters'
    /// `resync_completed_at`).
    pub resync_completed_at: Option<Position>,
    /// Whether the registry answered its last request (files: the directories are
    /// readable and no file is broken).
    pub registry_healthy: bool,
    /// Entities in the adapter's last-known view.
    pub entities_in_view: usize,
    /// Events appended since start.
    pub events_emitted_total: u64,
    /// Malformed objects skipped since start.
    pub malformed_total: u64,
    /// Objects left out since start because their event is larger than the log
    /// accepts.
    pub oversized_total: u64,
    /// Events planned but not yet durably appended.
    pub append_backlog: usize,
    /// The last append error, until an append succeeds.
    pub last_append_error: Option<String>,
    /// The most recent registry or append error, if any.
    pub last_error: Option<String>,
}

impl AdapterWatch {
    /// The current report.
    pub fn report(&self) -> AdapterReport {
        match self {
            AdapterWatch::File(rx) => {
                let s = rx.borrow();
                AdapterReport {
                    adapter: "file",
                    source: s.source.clone(),
                    resync_completed: s.resync_completed,
                    resync_completed_at: s.resync_completed_at.clone(),
                    registry_healthy: s.files_bad == 0,
                    entities_in_view: s.entities_in_view,
                    events_emitted_total: s.events_emitted_total,
                    malformed_total: s.malformed_documents_total + s.invalid_files_total,
                    oversized_total: s.oversized_objects_total,
                    append_backlog: s.append_backlog,
                    last_append_error: s.last_append_error.clone(),
                    last_error: s
                        .last_append_error
                        .clone()
                        .or_else(|| s.problems.first().map(|p| p.to_string()))
                        .or(s.last_oversized_object.clone()),
                }
            }
            AdapterWatch::Eureka(rx) => {
                let s = rx.borrow();
                AdapterReport {
                    adapter: "eureka",
                    source: s.source.clone(),
                    resync_completed: s.resync_completed,
                    resync_completed_at: s.resync_completed_at.clone(),
                    registry_healthy: s.registry_reachable,
                    entities_in_view: s.entities_in_view,
                    events_emitted_total: s.events_emitted_total,
                    malformed_total: s.malformed_instances_total,
                    oversized_total: s.oversized_objects_total,
                    append_backlog: s.append_backlog,
                    last_append_error: s.last_append_error.clone(),
                    last_error: s
                        .last_fetch_error
                        .clone()
                        .or(s.last_append_error.clone())
                        .or(s.last_oversized_object.clone()),
                }
            }
            AdapterWatch::Kubernetes(rx) => {
                let s = rx.borrow();
                AdapterReport {
                    adapter: "kubernetes",
                    source: s.source.clone(),
                    resync_completed: s.resync_completed,
                    resync_completed_at: s.resync_completed_at.clone(),
                    registry_healthy: s.registry_healthy(),
                    entities_in_view: s.entities_in_view,
                    events_emitted_total: s.events_emitted_total,
                    malformed_total: s.malformed_objects_total,
                    oversized_total: s.oversized_objects_total,
                    append_backlog: s.append_backlog,
                    last_append_error: s.last_append_error.clone(),
                    last_error: s
                        .last_registry_error
                        .clone()
                        .or(s.last_append_error.clone())
                        .or(s.last_oversized_object.clone()),
                }
            }
        }
    }
}

/// What `/readyz` answers for an adapter running as its own process
/// (`deltapilot adapter …`), in the states and status codes of `readiness`:
/// `catching_up` (503) until its start-up resync (the first full list, with its
/// `COMPLETED` marker) is appended, so a rollout waits for it; afterwards 200,
/// `serving_last_good_state` with the reasons while the log is unreachable or
/// appends fail (the log keeps the last good view, and restarting the adapter
/// would not help), else `caught_up`.
pub fn process_readiness(
    r: &AdapterReport,
    log: &deltapilot_log::LogHealth,
    probe_error: Option<String>,
) -> Readiness {
    if !r.resync_completed {
        let why = match &r.last_error {
            Some(e) => format!(
                "the {} adapter ({}) has not appended its start-up resync: {e}",
                r.adapter, r.source
            ),
            None => format!(
                "the {} adapter ({}) has not appended its start-up resync yet",
                r.adapter, r.source
            ),
        };
        return Readiness {
            state: ServingState::CatchingUp,
            reasons: vec![why],
        };
    }
    let reasons = crate::readiness::log_unreachable(log, probe_error.as_deref())
        .into_iter()
        .chain(crate::readiness::append_stuck(r).map(|why| format!("the {why}")))
        .collect();
    Readiness::serving(reasons)
}

/// Copies adapter reports into `metrics` every [`EXPORT_INTERVAL`] until `shutdown`.
pub async fn export(
    adapters: Vec<AdapterWatch>,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut emitted_seen = vec![0u64; adapters.len()];
    let mut malformed_seen = vec![0u64; adapters.len()];
    let mut oversized_seen = vec![0u64; adapters.len()];
    let mut tick = tokio::time::interval(EXPORT_INTERVAL);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        for (i, a) in adapters.iter().enumerate() {
            let r = a.report();
            let l = [("adapter", r.adapter)];
            // Totals only grow; a counter is advanced by what is new since last time.
            let emitted = r.events_emitted_total.saturating_sub(emitted_seen[i]);
            metrics
                .adapter_events_emitted
                .get_or_create(&l)
                .inc_by(emitted);
            emitted_seen[i] = r.events_emitted_total.max(emitted_seen[i]);
            let malformed = r.malformed_total.saturating_sub(malformed_seen[i]);
            metrics
                .adapter_malformed
                .get_or_create(&l)
                .inc_by(malformed);
            malformed_seen[i] = r.malformed_total.max(malformed_seen[i]);
            let oversized = r.oversized_total.saturating_sub(oversized_seen[i]);
            metrics
                .adapter_oversized
                .get_or_create(&l)
                .inc_by(oversized);
            oversized_seen[i] = r.oversized_total.max(oversized_seen[i]);
            metrics
                .adapter_view_entities
                .get_or_create(&l)
                .set(i64::try_from(r.entities_in_view).unwrap_or(i64::MAX));
            metrics
                .adapter_registry_up
                .get_or_create(&l)
                .set(i64::from(r.registry_healthy));
            metrics
                .adapter_resync_completed
                .get_or_create(&l)
                .set(i64::from(r.resync_completed));
            metrics
                .adapter_append_backlog
                .get_or_create(&l)
                .set(i64::try_from(r.append_backlog).unwrap_or(i64::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(resynced: bool, backlog: usize, err: Option<&str>) -> AdapterReport {
        crate::readiness::test_report("kubernetes", "k8s:east", resynced, backlog, err)
    }

    #[test]
    fn an_adapter_process_is_ready_once_its_resync_is_appended() {
        let log = deltapilot_log::LogHealth::new();
        let r = process_readiness(&report(false, 3, Some("broker down")), &log, None);
        assert_eq!(r.state, ServingState::CatchingUp);
        assert_eq!(r.http_status(), axum::http::StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            r.reasons,
            ["the kubernetes adapter (k8s:east) has not appended its start-up resync: broker down"]
        );

        assert_eq!(
            process_readiness(&report(true, 0, None), &log, None),
            Readiness::caught_up()
        );

        // After the resync, failing appends are reported, not made unready.
        let r = process_readiness(&report(true, 2, Some("timed out")), &log, None);
        assert_eq!(r.state, ServingState::ServingLastGoodState);
        assert_eq!(r.http_status(), axum::http::StatusCode::OK);
        assert_eq!(
            r.reasons,
            ["the kubernetes adapter (k8s:east) cannot append 2 pending event(s): timed out"]
        );
    }
}
