//! The run's report: one JSON document (`--report FILE.json`) and the same figures
//! as a terminal table.
//!
//! Field meanings (all times in milliseconds unless the name says otherwise):
//! - `convergence_ms`: per tracked change, from its append to the log (observed-at)
//!   to the moment the last expected proxy (normal and slow ones; not the
//!   NACKing or stalled) ACKed a response showing it. p50/p90/p99/max over changes.
//! - `raw_fanout_ms`: per replayed response, from the baseline server sending it to
//!   the last expected ACK; `raw_fanout_ratio` = convergence p99 ÷ raw fan-out p99
//!   (`raw_fanout_ratio_p50` the same at p50), endpoint changes against EDS
//!   responses when there are any (like for like), else everything.
//! - `raw_change_ms`: per tracked change, replayed: from the baseline server
//!   sending the first response proxy 0 received after the change's append, to
//!   the last expected ACK of a response showing it, judged by the same tracker
//!   as `convergence_ms` (a service add is its CDS, ACK, then its assignment).
//!   `raw_fanout_ratio_all` = `convergence_ms` p99 ÷ its p99 (`_p50` at p50):
//!   every kind of change against the same changes moved raw.
//! - `bytes_per_proxy_per_event`: bytes of responses received during churn ÷
//!   (changes × expected proxies).
//! - `bytes_per_change_ratio`: bytes of EDS responses received during churn ÷ the
//!   bytes of the assignments in them whose content actually changed for the
//!   receiving proxy (1.0 = nothing but the change; what an endpoint change
//!   costs). `bytes_per_change_ratio_all` is the same over every type.
//! - `route_bytes_per_push`: the mean size of the route configurations whose
//!   content changed, received during churn; `bytes_per_route_ratio` =
//!   `bytes_per_proxy_per_event` ÷ that (1.0 = a change costs one route
//!   configuration per proxy, as a rule shift should).
//! - `server_rss_bytes_per_proxy`: server RSS growth from before the proxies
//!   connected (the shared snapshot already built) to after they all synced, ÷
//!   proxies.
//!
//! What it does NOT do: measure (see `harness`) or draw (see `plot`).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;

use crate::stats::Percentiles;
use crate::tracker::ChangeKind;

/// How many proxies behave each way.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct BehaviourCounts {
    /// ACK at once.
    pub normal: usize,
    /// Read slowly.
    pub slow: usize,
    /// NACK after their initial sync.
    pub nack: usize,
    /// Stop reading after their initial sync.
    pub stall: usize,
}

/// The reconnect storm's outcome.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReconnectReport {
    /// From the disconnect to the server having answered every reconnected
    /// stream's opening requests (its `xds_reconnect_known_resources_total`
    /// reached what the proxies reported), or to every proxy being reconnected
    /// when the server's metrics are out of reach.
    pub reconnect_ms: Option<f64>,
    /// How `reconnect_ms` ended: `server-metrics` or `client-side`.
    pub measured_by: String,
    /// Streams re-opened.
    pub proxies_reconnected: u64,
    /// Names proxies reported in `initial_resource_versions`.
    pub known_reported: u64,
    /// Resources the proxies received during the storm (0 when nothing changed).
    pub resources_resent: u64,
    /// The server's own count of resources resent at a version the client had.
    pub server_resent_known: Option<f64>,
    /// Server CPU from the disconnect to the end of the storm.
    pub server_cpu_seconds: Option<f64>,
}

/// The baseline replay's outcome.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BaselineReport {
    /// Initial sync of every proxy from the replay server (same bytes).
    pub initial_sync_ms: Option<f64>,
    /// Pushes replayed.
    pub pushes: usize,
    /// Pushes ACKed by every expected proxy.
    pub pushes_done: usize,
    /// Raw fan-out time per push.
    pub raw_fanout_ms: Option<Percentiles>,
    /// Raw fan-out time of EDS pushes only.
    pub raw_fanout_eds_ms: Option<Percentiles>,
    /// Raw fan-out time per tracked change (every kind), by the same tracker.
    pub raw_change_ms: Option<Percentiles>,
    /// The same for endpoint changes only.
    pub raw_change_endpoint_ms: Option<Percentiles>,
    /// Tracked changes the replay registered (those with a captured response
    /// after their append).
    pub changes_replayed: usize,
    /// Of those, the ones every expected proxy ACKed within the drain.
    pub changes_converged: usize,
    /// Changes registered while a change they undo (an address's addition, a
    /// cluster's earlier changes) had not converged in the replay; the tracker
    /// may then count them early.
    pub changes_out_of_order: usize,
    /// Why it did not run, if it did not.
    pub skipped: Option<String>,
    /// Where the replay server ran: `process` (a child process, like the server
    /// under test) or `in-process` (library use).
    pub server: String,
    /// The replay server's CPU during the replay (child process only).
    pub server_cpu_seconds: Option<f64>,
    /// The replay server's RSS growth per synced proxy (child process only): what
    /// plain tonic holds per connection after sending the same initial sync.
    pub server_rss_bytes_per_proxy: Option<f64>,
}

/// One change on the latency-over-time plot.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    /// Seconds from the start of churn to the change's append.
    pub t_s: f64,
    /// Its convergence time.
    pub ms: f64,
    /// Its kind.
    pub kind: ChangeKind,
}

/// The whole report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// `delta` or `sotw`.
    pub api: String,
    /// `spawn` or `target`.
    pub server: String,
    /// How churn reached the log: `file-adapter` or `log`.
    pub churn_path: String,
    /// Simulated proxies.
    pub proxies: usize,
    /// By behaviour.
    pub behaviours: BehaviourCounts,
    /// Proxies whose initial sync completed.
    pub synced_proxies: u64,
    /// Expected proxies that ACKed every tracked change by the end.
    pub converged_proxies: u64,
    /// NACKs sent by the proxies.
    pub nacks: u64,
    /// Proxies that failed (connection or stream errors).
    pub errors: u64,
    /// The first such error.
    pub first_error: Option<String>,
    /// Stream openings retried after a failure (reset or refused connections).
    pub connect_retries: u64,
    /// Services in the initial mesh.
    pub mesh_services: usize,
    /// Endpoints in the initial mesh.
    pub mesh_endpoints: usize,
    /// From the first connection attempt to the last proxy's initial sync.
    pub initial_sync_ms: Option<f64>,
    /// Per-proxy initial sync completion times.
    pub initial_sync_per_proxy_ms: Option<Percentiles>,
    /// Server CPU during connection and initial sync.
    pub initial_sync_server_cpu_seconds: Option<f64>,
    /// The reconnect storm, if it ran.
    pub reconnect: Option<ReconnectReport>,
    /// Churn rate asked for (events/s).
    pub churn_rate: f64,
    /// Churn phase length, drain included, in seconds.
    pub churn_secs: f64,
    /// Tracked changes written.
    pub events: usize,
    /// Changes ACKed by every expected proxy.
    pub events_converged: usize,
    /// Changes whose append time was not found in the log (their write time is
    /// used instead).
    pub events_without_append_time: usize,
    /// Convergence over every tracked change.
    pub convergence_ms: Option<Percentiles>,
    /// Convergence of endpoint changes only (the headline figure).
    pub convergence_endpoint_ms: Option<Percentiles>,
    /// Convergence counting only the normal (not slow) proxies.
    pub convergence_normal_ms: Option<Percentiles>,
    /// From the load generator's write (file or append) to the last ACK.
    pub write_to_ack_ms: Option<Percentiles>,
    /// The same for endpoint changes only: what `--peer` compares, since it
    /// starts at the same moment for every server.
    pub write_to_ack_endpoint_ms: Option<Percentiles>,
    /// The server's own view (`deltapilot_xds_convergence_seconds`, mean over the
    /// pushes ACKed during churn): from when it saw a snapshot to each ACK of a
    /// push built from it. Convergence minus this is roughly append → publish.
    pub server_publish_to_ack_mean_ms: Option<f64>,
    /// Server CPU during churn ÷ responses the proxies received then, in µs.
    pub server_cpu_us_per_response: Option<f64>,
    /// The baseline replay.
    pub baseline: Option<BaselineReport>,
    /// Memory, log and checkpoint sizes over the churn, with their slopes after
    /// warm-up (scenarios with `server.soak-sample-secs`).
    pub soak: Option<crate::soak::SoakReport>,
    /// Convergence p99 ÷ raw fan-out p99 (endpoint changes ÷ EDS pushes when
    /// there are any).
    pub raw_fanout_ratio: Option<f64>,
    /// Convergence p50 ÷ raw fan-out p50.
    pub raw_fanout_ratio_p50: Option<f64>,
    /// Convergence p99 of every change ÷ the replay's p99 of the same changes.
    pub raw_fanout_ratio_all: Option<f64>,
    /// The same at p50.
    pub raw_fanout_ratio_all_p50: Option<f64>,
    /// Responses received per second during churn, over all proxies.
    pub responses_per_sec: Option<f64>,
    /// Bytes received per expected proxy per change.
    pub bytes_per_proxy_per_event: Option<f64>,
    /// EDS bytes received ÷ EDS bytes that changed.
    pub bytes_per_change_ratio: Option<f64>,
    /// All bytes received ÷ all bytes that changed.
    pub bytes_per_change_ratio_all: Option<f64>,
    /// Mean size of a changed route configuration received during churn.
    pub route_bytes_per_push: Option<f64>,
    /// Bytes per proxy per change ÷ `route_bytes_per_push`.
    pub bytes_per_route_ratio: Option<f64>,
    /// Server CPU over the whole run.
    pub server_cpu_seconds: Option<f64>,
    /// Server CPU during churn and drain.
    pub churn_server_cpu_seconds: Option<f64>,
    /// Server RSS before the proxies connected.
    pub server_rss_bytes_before: Option<u64>,
    /// Server RSS after every proxy synced.
    pub server_rss_bytes_synced: Option<u64>,
    /// Peak server RSS.
    pub server_peak_rss_bytes: Option<u64>,
    /// RSS growth per connected proxy.
    pub server_rss_bytes_per_proxy: Option<f64>,
    /// Where the server figures came from: `/proc/<pid>`, `/metrics`, or none.
    pub server_stats_source: String,
    /// The load generator's own CPU over the run (it shares the machine).
    pub loadgen_cpu_seconds: Option<f64>,
    /// The load generator's peak RSS.
    pub loadgen_peak_rss_bytes: Option<u64>,
    /// Convergence samples for the plot.
    pub samples: Vec<Sample>,
    /// Raw fan-out samples for the plot (seconds from replay start, ms).
    pub baseline_samples: Vec<(f64, f64)>,
    /// Things worth knowing about this run.
    pub notes: Vec<String>,
}

fn f(v: Option<f64>, unit: &str) -> String {
    match v {
        Some(x) if x.abs() >= 100.0 => format!("{x:.0}{unit}"),
        Some(x) => format!("{x:.2}{unit}"),
        None => "—".into(),
    }
}

fn pct(p: &Option<Percentiles>) -> String {
    match p {
        Some(p) => format!(
            "p50 {} · p90 {} · p99 {} · max {} (n={})",
            f(Some(p.p50), ""),
            f(Some(p.p90), ""),
            f(Some(p.p99), ""),
            f(Some(p.max), ""),
            p.count
        ),
        None => "—".into(),
    }
}

fn kib(v: Option<f64>) -> String {
    v.map(|b| format!("{:.1} KiB", b / 1024.0))
        .unwrap_or_else(|| "—".into())
}

impl Report {
    /// Writes the JSON report.
    pub fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("writing --report {}", path.display()))
    }

    /// The terminal table.
    pub fn table(&self) -> String {
        let b = &self.behaviours;
        let mut rows: Vec<(&str, String)> = vec![
            (
                "scenario",
                format!(
                    "{} ({}, server: {}, churn via {})",
                    self.scenario, self.api, self.server, self.churn_path
                ),
            ),
            (
                "proxies",
                format!(
                    "{} (normal {}, slow {}, nack {}, stall {})",
                    self.proxies, b.normal, b.slow, b.nack, b.stall
                ),
            ),
            (
                "synced / converged",
                format!("{} / {}", self.synced_proxies, self.converged_proxies),
            ),
            (
                "nacks / errors",
                format!(
                    "{} / {} ({} connection retries)",
                    self.nacks, self.errors, self.connect_retries
                ),
            ),
            (
                "mesh",
                format!(
                    "{} services, {} endpoints",
                    self.mesh_services, self.mesh_endpoints
                ),
            ),
            (
                "initial sync",
                format!(
                    "{} ms (server CPU {} s)",
                    f(self.initial_sync_ms, ""),
                    f(self.initial_sync_server_cpu_seconds, "")
                ),
            ),
        ];
        if let Some(r) = &self.reconnect {
            rows.push((
                "reconnect storm",
                format!(
                    "{} ms ({}), {} reconnected, {} resources resent (server: {}), server CPU {} s",
                    f(r.reconnect_ms, ""),
                    r.measured_by,
                    r.proxies_reconnected,
                    r.resources_resent,
                    f(r.server_resent_known, ""),
                    f(r.server_cpu_seconds, "")
                ),
            ));
        }
        if self.events > 0 {
            rows.push((
                "changes",
                format!(
                    "{} at {}/s, {} converged",
                    self.events, self.churn_rate, self.events_converged
                ),
            ));
            let with_ratio =
                |p: &Option<Percentiles>, r99: Option<f64>, r50: Option<f64>| match (p, r99, r50) {
                    (None, ..) | (_, None, None) => pct(p),
                    _ => format!(
                        "{} (÷ raw: p99 {} · p50 {})",
                        pct(p),
                        f(r99, ""),
                        f(r50, "")
                    ),
                };
            rows.push((
                "convergence ms",
                with_ratio(
                    &self.convergence_ms,
                    self.raw_fanout_ratio_all,
                    self.raw_fanout_ratio_all_p50,
                ),
            ));
            rows.push((
                "  endpoint changes",
                with_ratio(
                    &self.convergence_endpoint_ms,
                    self.raw_fanout_ratio,
                    self.raw_fanout_ratio_p50,
                ),
            ));
            rows.push(("  normal proxies", pct(&self.convergence_normal_ms)));
            rows.push(("  from write", pct(&self.write_to_ack_ms)));
            rows.push((
                "  server publish→ACK",
                format!(
                    "mean {} (server histogram)",
                    f(self.server_publish_to_ack_mean_ms, " ms")
                ),
            ));
        }
        if let Some(bl) = &self.baseline {
            let v = match &bl.skipped {
                Some(why) => format!("skipped: {why}"),
                None => format!(
                    "{} (sync {} ms, {} server, CPU {} s, RSS/proxy {})",
                    pct(&bl.raw_fanout_ms),
                    f(bl.initial_sync_ms, ""),
                    bl.server,
                    f(bl.server_cpu_seconds, ""),
                    kib(bl.server_rss_bytes_per_proxy)
                ),
            };
            rows.push(("raw fan-out ms", v));
            let v = match &bl.skipped {
                Some(_) => "—".into(),
                None => pct(&bl.raw_fanout_eds_ms),
            };
            rows.push(("  EDS pushes", v));
            rows.push((
                "  per change, all",
                match &bl.skipped {
                    Some(_) => "—".into(),
                    None => format!(
                        "{} ({} of {} replayed changes converged, {} out of order)",
                        pct(&bl.raw_change_ms),
                        bl.changes_converged,
                        bl.changes_replayed,
                        bl.changes_out_of_order
                    ),
                },
            ));
            rows.push((
                "  per change, endpoint",
                match &bl.skipped {
                    Some(_) => "—".into(),
                    None => pct(&bl.raw_change_endpoint_ms),
                },
            ));
        }
        if self.events > 0 {
            rows.push(("responses/s", f(self.responses_per_sec, "")));
            rows.push((
                "bytes/proxy/change",
                f(self.bytes_per_proxy_per_event, " B"),
            ));
            rows.push((
                "bytes ÷ changed bytes",
                format!(
                    "{} EDS, {} all types",
                    f(self.bytes_per_change_ratio, ""),
                    f(self.bytes_per_change_ratio_all, "")
                ),
            ));
            if self.route_bytes_per_push.is_some() {
                rows.push((
                    "route config pushed",
                    format!(
                        "{} mean; bytes/proxy/change ÷ it: {}",
                        f(self.route_bytes_per_push, " B"),
                        f(self.bytes_per_route_ratio, "")
                    ),
                ));
            }
        }
        rows.push((
            "server CPU",
            format!(
                "{} s total, {} s during churn, {} µs per response ({})",
                f(self.server_cpu_seconds, ""),
                f(self.churn_server_cpu_seconds, ""),
                f(self.server_cpu_us_per_response, ""),
                self.server_stats_source
            ),
        ));
        rows.push((
            "server RSS/proxy",
            format!(
                "{} (before {}, synced {}, peak {})",
                kib(self.server_rss_bytes_per_proxy),
                kib(self.server_rss_bytes_before.map(|v| v as f64)),
                kib(self.server_rss_bytes_synced.map(|v| v as f64)),
                kib(self.server_peak_rss_bytes.map(|v| v as f64))
            ),
        ));
        rows.push((
            "loadgen",
            format!(
                "CPU {} s, peak RSS {}",
                f(self.loadgen_cpu_seconds, ""),
                kib(self.loadgen_peak_rss_bytes.map(|v| v as f64))
            ),
        ));
        if let Some(soak) = &self.soak {
            rows.extend(soak.rows());
        }
        let w = rows
            .iter()
            .map(|(k, _)| k.chars().count())
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        for (k, v) in rows {
            let _ = writeln!(out, "{k:<w$}  {v}");
        }
        for n in &self.notes {
            let _ = writeln!(out, "note: {n}");
        }
        if let Some(e) = &self.first_error {
            let _ = writeln!(out, "first error: {e}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_the_issue_fields_and_the_table_renders() {
        let r = Report {
            proxies: 3,
            convergence_ms: Some(Percentiles {
                count: 1,
                p50: 1.0,
                p90: 2.0,
                p99: 3.0,
                max: 4.0,
                mean: 2.0,
            }),
            ..Default::default()
        };
        let v: serde_json::Value = serde_json::to_value(&r).expect("json");
        for k in [
            "proxies",
            "converged_proxies",
            "nacks",
            "convergence_ms",
            "raw_fanout_ratio",
            "raw_fanout_ratio_all",
            "server_rss_bytes_per_proxy",
            "bytes_per_change_ratio",
            "responses_per_sec",
            "initial_sync_ms",
            "server_cpu_seconds",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert_eq!(v["convergence_ms"]["p99"], 3.0);
        assert!(r.table().contains("proxies"));
    }
}
