//! The log as the server reports it: a probe that keeps the log's health current
//! while nothing is appended or read, and the head it measured, for readiness
//! ("behind the head") and the `log_*` metrics.
//!
//! What it does NOT do: decide readiness (see `readiness`), or retry anything
//! for the engine (its follower does its own retrying).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use deltapilot_log::{Log, LogHealth, Position};
use tokio::sync::watch;

use crate::metrics::Metrics;

/// How often the log is probed (one head request: a ListOffsets round trip on
/// Kafka). Often enough that an outage shows within a few seconds on an idle log;
/// cheap for the broker even with many replicas.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// What the probe learned, shared with readiness and metrics.
#[derive(Debug)]
pub struct LogWatch {
    health: Arc<LogHealth>,
    probe: Mutex<Probed>,
}

#[derive(Debug, Default)]
struct Probed {
    /// The head the last successful probe measured.
    last: Option<Position>,
    /// The head the successful probe before it measured: at least one interval
    /// old, so an engine that has not reached it is behind, not merely busy.
    settled: Option<Position>,
    /// The last probe's error, while probes fail.
    error: Option<String>,
}

impl LogWatch {
    /// Watches `log`'s health.
    pub fn new(log: &Log) -> Arc<Self> {
        Arc::new(Self {
            health: log.health(),
            probe: Mutex::new(Probed::default()),
        })
    }

    /// The log handle's health.
    pub fn health(&self) -> &LogHealth {
        &self.health
    }

    /// A head measured at least one probe interval ago, if any.
    pub fn settled_head(&self) -> Option<Position> {
        self.probed().settled.clone()
    }

    /// The last probe's error, while probes fail.
    pub fn probe_error(&self) -> Option<String> {
        self.probed().error.clone()
    }

    fn probed(&self) -> std::sync::MutexGuard<'_, Probed> {
        self.probe
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn record(&self, outcome: Result<Position, String>) {
        let mut p = self.probed();
        match outcome {
            Ok(head) => {
                p.settled = p.last.replace(head);
                p.error = None;
            }
            Err(e) => p.error = Some(e),
        }
    }

    /// Copies the health into `metrics` (a scrape hook).
    pub fn export(&self, m: &Metrics) {
        let h = &self.health;
        m.log_connected.set(i64::from(h.connected()));
        m.log_last_append_success
            .set(h.last_append_ok_unix_ms() as f64 / 1000.0);
        m.log_last_read_success
            .set(h.last_read_ok_unix_ms() as f64 / 1000.0);
        for reason in deltapilot_log::AppendFailure::ALL {
            let c = m
                .log_append_failures
                .get_or_create(&[("reason", reason.as_str())]);
            c.inc_by(h.append_failures(reason).saturating_sub(c.get()));
        }
        let rebuilt = h.producer_rebuilds_total();
        m.log_producer_rebuilds
            .inc_by(rebuilt.saturating_sub(m.log_producer_rebuilds.get()));
    }
}

/// Probes `log` every [`PROBE_INTERVAL`] until `shutdown`. Each probe is bounded
/// by the backend's own timeouts.
pub async fn probe(log: Arc<Log>, watch: Arc<LogWatch>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(PROBE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        let outcome = tokio::select! {
            r = log.probe() => r.map_err(|e| e.to_string()),
            _ = shutdown.wait_for(|s| *s) => return,
        };
        match (&outcome, failing) {
            (Err(e), false) => {
                tracing::warn!(error = %e, "log probe failed: serving the last good state");
                failing = true;
            }
            (Ok(_), true) => {
                tracing::info!("log probe answered again");
                failing = false;
            }
            _ => {}
        }
        watch.record(outcome);
    }
}
