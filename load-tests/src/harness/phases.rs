//! The measured phases against the server under test: initial sync, reconnect
//! storm, churn (with its drain), and the figures derived from them.
//!
//! What it does NOT do: set up the server or the baseline (see `harness`,
//! `replay`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use anyhow::bail;
use tokio::sync::watch;

use super::{Server, ServerStats};
use crate::churn::Churn;
use crate::logwatch;
use crate::proxy::fleet::{Fleet, Phase};
use crate::report::{ReconnectReport, Report, Sample};
use crate::scenario::Scenario;
use crate::server::Spawned;
use crate::stats::{ms, percentiles, ratio};
use crate::tracker::Tracker;

/// How often waits look at the counters.
const POLL: Duration = Duration::from_millis(20);

/// How often the reconnect storm scrapes `/metrics`: fine enough for a 2-second
/// target, coarse enough not to load the server it measures.
const STORM_SCRAPE: Duration = Duration::from_millis(50);

/// Quiet time after the storm during which resent resources are still counted.
const STORM_QUIET: Duration = Duration::from_secs(1);

/// Most churn operations written in one pacing tick; at the largest allowed rate
/// a 5 ms tick needs 500, and a backlog beyond this is dropped, not queued.
const MAX_OPS_PER_TICK: usize = 10_000;

/// The churn pacing tick.
const TICK: Duration = Duration::from_millis(5);

fn fd_error() -> anyhow::Error {
    anyhow::anyhow!(
        "the load generator ran out of file descriptors while connecting proxies \
         (EMFILE). Raise the limit with `ulimit -n` (see the start-up check) or use fewer --proxies"
    )
}

/// Waits until every proxy has synced or failed, bounded by `within`; fails on
/// descriptor exhaustion, a dead server, or the timeout.
pub(super) async fn wait_sync(
    fleet: &Fleet,
    within: Duration,
    mut spawned: Option<&mut Spawned>,
) -> anyhow::Result<()> {
    let c = &fleet.shared.counters;
    let n = fleet.size() as u64;
    let deadline = Instant::now() + within;
    let mut ticks = 0u32;
    loop {
        if fleet.shared.fd_exhausted.load(Ordering::Acquire) {
            return Err(fd_error());
        }
        let (synced, errors) = (
            c.synced.load(Ordering::Relaxed),
            c.errors.load(Ordering::Relaxed),
        );
        if synced + errors >= n {
            if errors > 0 {
                bail!(
                    "{errors} of {n} proxies failed during the initial sync; first error: {}",
                    fleet.shared.first_error().unwrap_or_default()
                );
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {synced} of {n} proxies synced within {within:?} ({errors} failed)");
        }
        ticks += 1;
        if ticks.is_multiple_of(50)
            && let Some(s) = spawned.as_deref_mut()
        {
            s.check_alive()?;
        }
        tokio::time::sleep(POLL).await;
    }
}

fn storm_counts(s: &crate::metrics::Scrape) -> (f64, f64) {
    (
        s.sum("deltapilot_xds_reconnect_known_resources_total")
            .unwrap_or(0.0),
        s.sum("deltapilot_xds_reconnect_resent_resources_total")
            .unwrap_or(0.0),
    )
}

/// Every proxy drops its connection and reconnects at once.
pub(super) async fn storm(fleet: &Fleet, stats: &ServerStats, sc: &Scenario) -> ReconnectReport {
    let c = &fleet.shared.counters;
    let before = stats.scrape().await.map(|s| storm_counts(&s));
    let cpu0 = stats.sample().await.map(|s| s.cpu_seconds);
    fleet.set_phase(Phase::Storm);
    let n = fleet.size() as u64;
    let within = Duration::from_secs(sc.timeouts.reconnect_secs);
    let start = Instant::now();
    fleet.reconnect(1);
    let mut report = ReconnectReport {
        measured_by: if before.is_some() {
            "server-metrics"
        } else {
            "client-side"
        }
        .into(),
        ..Default::default()
    };
    let mut last_scrape = Instant::now() - STORM_SCRAPE;
    while start.elapsed() < within {
        let done = c.reconnected.load(Ordering::Relaxed) + c.errors.load(Ordering::Relaxed) >= n;
        if done {
            match before {
                None => {
                    report.reconnect_ms = Some(ms(start.elapsed()));
                    break;
                }
                Some((known0, _)) if last_scrape.elapsed() >= STORM_SCRAPE => {
                    last_scrape = Instant::now();
                    if let Some(s) = stats.scrape().await {
                        let (known, _) = storm_counts(&s);
                        if known - known0 >= c.reconnect_known.load(Ordering::Relaxed) as f64 {
                            report.reconnect_ms = Some(ms(start.elapsed()));
                            break;
                        }
                    }
                }
                Some(_) => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cpu1 = stats.sample().await.map(|s| s.cpu_seconds);
    report.server_cpu_seconds = cpu0.zip(cpu1).map(|(a, b)| b - a);
    tokio::time::sleep(STORM_QUIET).await;
    report.proxies_reconnected = c.reconnected.load(Ordering::Relaxed);
    report.known_reported = c.reconnect_known.load(Ordering::Relaxed);
    report.resources_resent = c.storm_resources.load(Ordering::Relaxed);
    if let (Some((_, resent0)), Some(s)) = (before, stats.scrape().await) {
        report.server_resent_known = Some(storm_counts(&s).1 - resent0);
    }
    report
}

/// What the churn phase measured.
pub(super) struct ChurnOutcome {
    started: SystemTime,
    window: Duration,
    cpu: Option<f64>,
    /// The server's own publish-to-ACK histogram over the phase: (sum s, count).
    publish_to_ack: Option<(f64, f64)>,
    /// Whether changes could get append times (from the server's log, or our
    /// own appends); a peer has no log, so its convergence runs from the write.
    append_times: bool,
    /// Soak samples, when the scenario asks for them.
    soak: Option<crate::soak::SoakReport>,
}

fn convergence_hist(s: &crate::metrics::Scrape) -> (f64, f64) {
    (
        s.sum("deltapilot_xds_convergence_seconds_sum")
            .unwrap_or(0.0),
        s.sum("deltapilot_xds_convergence_seconds_count")
            .unwrap_or(0.0),
    )
}

/// Writes churn at the scenario's rate for its duration, then waits (bounded)
/// for every change to converge.
pub(super) async fn churn(
    sc: &Scenario,
    churn: &mut Churn,
    server: &mut Server,
    tracker: &Arc<Tracker>,
    fleet: &Fleet,
) -> anyhow::Result<ChurnOutcome> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let append_times = !server.sink.stamps_itself() || server.observe_log.is_some();
    let watcher = match &server.observe_log {
        Some(dir) if server.sink.stamps_itself() => {
            let (log, head) = logwatch::open(dir).await?;
            Some(tokio::spawn(logwatch::follow(
                log,
                head,
                tracker.clone(),
                stop_rx,
            )))
        }
        _ => None,
    };
    fleet.set_phase(Phase::Churn);
    let cpu0 = server.stats.sample().await.map(|s| s.cpu_seconds);
    let hist0 = server.stats.scrape().await.map(|s| convergence_hist(&s));
    let started = SystemTime::now();
    let start = Instant::now();
    let duration = Duration::from_secs(sc.duration_secs);
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut emitted = 0.0f64;
    let soak_every = Duration::from_secs(sc.server.soak_sample_secs);
    let data_dir = server.dirs.as_ref().map(|d| d.data.clone());
    let mut soak_samples = Vec::new();
    let mut next_sample = start;
    while start.elapsed() < duration {
        tick.tick().await;
        if let Some(data) = data_dir.as_ref().filter(|_| !soak_every.is_zero())
            && Instant::now() >= next_sample
        {
            next_sample += soak_every;
            soak_samples.push(crate::soak::SoakSample {
                t_secs: start.elapsed().as_secs_f64(),
                rss_bytes: server.stats.sample().await.map_or(0, |s| s.rss_bytes),
                log_bytes: crate::soak::dir_bytes(&data.join("log")),
                checkpoint_bytes: crate::soak::dir_bytes(&data.join("checkpoints")),
            });
        }
        let allowed = sc.churn.rate * start.elapsed().as_secs_f64();
        for _ in 0..MAX_OPS_PER_TICK {
            if emitted >= allowed {
                break;
            }
            match churn.next(Instant::now()) {
                Some(w) => {
                    let at = server.sink.write(&w).await?;
                    for &id in &w.events {
                        tracker.set_written(id, at);
                        if !server.sink.stamps_itself() {
                            tracker.set_appended(id, at);
                        }
                    }
                    emitted += w.events.len() as f64;
                }
                None => emitted += 1.0,
            }
        }
        if fleet.shared.counters.errors.load(Ordering::Relaxed) > 0 && fleet.running() == 0 {
            bail!(
                "every proxy failed during churn; first error: {}",
                fleet.shared.first_error().unwrap_or_default()
            );
        }
    }
    let drain = Duration::from_secs(sc.timeouts.drain_secs);
    let drain_start = Instant::now();
    while drain_start.elapsed() < drain {
        let (n, done) = tracker.counts();
        if done >= n {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let window = start.elapsed();
    let cpu1 = server.stats.sample().await.map(|s| s.cpu_seconds);
    let hist1 = server.stats.scrape().await.map(|s| convergence_hist(&s));
    if let Some(w) = watcher {
        // The read-only follower polls every 100 ms: give it time for the tail.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = stop_tx.send(true);
        match w.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %format!("{e:#}"), "reading append times from the server's log failed")
            }
            Err(e) => tracing::warn!(error = %e, "the log reader panicked"),
        }
    }
    if let Some(s) = server.spawned.as_mut() {
        s.check_alive()?;
    }
    Ok(ChurnOutcome {
        started,
        window,
        cpu: match (cpu0, cpu1) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        },
        publish_to_ack: hist0.zip(hist1).map(|(a, b)| (b.0 - a.0, b.1 - a.1)),
        append_times,
        soak: (!soak_samples.is_empty()).then(|| {
            crate::soak::SoakReport::new(
                soak_samples,
                duration.as_secs_f64() * sc.server.soak_warmup_fraction,
            )
        }),
    })
}

fn c_push_responses(fleet: &Fleet) -> f64 {
    fleet.shared.counters.push_responses.load(Ordering::Relaxed) as f64
}

/// Fills the report's churn figures.
pub(super) fn churn_figures(
    sc: &Scenario,
    out: &ChurnOutcome,
    tracker: &Tracker,
    fleet: &Fleet,
    r: &mut Report,
) {
    let results = tracker.results();
    r.events = results.len();
    r.churn_secs = out.window.as_secs_f64();
    r.churn_server_cpu_seconds = out.cpu;
    r.soak = out.soak.clone();
    r.server_publish_to_ack_mean_ms = out
        .publish_to_ack
        .and_then(|(sum, n)| (n > 0.0).then(|| sum / n * 1000.0));
    let pushes = c_push_responses(fleet);
    r.server_cpu_us_per_response = out
        .cpu
        .and_then(|cpu| (pushes > 0.0).then(|| cpu / pushes * 1e6));
    r.events_without_append_time = results.iter().filter(|e| e.appended.is_none()).count();
    let since = |a: SystemTime, b: SystemTime| a.duration_since(b).map(ms).unwrap_or(0.0);
    let (mut all, mut endpoint, mut normal) = (vec![], vec![], vec![]);
    let (mut from_write, mut endpoint_from_write) = (vec![], vec![]);
    for e in &results {
        if let Some(done) = e.converged {
            let v = since(done, e.start());
            all.push(v);
            let w = since(done, e.written);
            if e.kind.is_endpoint() {
                endpoint.push(v);
                endpoint_from_write.push(w);
            }
            from_write.push(w);
            r.samples.push(Sample {
                t_s: since(e.start(), out.started) / 1000.0,
                ms: v,
                kind: e.kind,
            });
        }
        if let Some(done) = e.converged_normal {
            normal.push(since(done, e.start()));
        }
    }
    r.events_converged = all.len();
    r.convergence_ms = percentiles(&all);
    r.convergence_endpoint_ms = percentiles(&endpoint);
    r.convergence_normal_ms = percentiles(&normal);
    r.write_to_ack_ms = percentiles(&from_write);
    r.write_to_ack_endpoint_ms = percentiles(&endpoint_from_write);
    let c = &fleet.shared.counters;
    let push_bytes = c.push_bytes.load(Ordering::Relaxed) as f64;
    let changed = c.push_changed_bytes.load(Ordering::Relaxed) as f64;
    let receivers = (r.behaviours.normal + r.behaviours.slow + r.behaviours.nack) as f64;
    r.responses_per_sec =
        Some(c.push_responses.load(Ordering::Relaxed) as f64 / out.window.as_secs_f64().max(1e-9));
    if r.events > 0 && receivers > 0.0 {
        r.bytes_per_proxy_per_event = Some(push_bytes / (r.events as f64 * receivers));
    }
    r.bytes_per_change_ratio_all = ratio(Some(push_bytes), Some(changed));
    let routes = c.push_routes.load(Ordering::Relaxed);
    if routes > 0 {
        let mean = c.push_route_bytes.load(Ordering::Relaxed) as f64 / routes as f64;
        r.route_bytes_per_push = Some(mean);
        r.bytes_per_route_ratio = ratio(r.bytes_per_proxy_per_event, Some(mean));
    }
    r.bytes_per_change_ratio = ratio(
        Some(c.push_eds_bytes.load(Ordering::Relaxed) as f64),
        Some(c.push_eds_changed_bytes.load(Ordering::Relaxed) as f64),
    )
    .or(r.bytes_per_change_ratio_all);
    if r.events_converged < r.events {
        r.notes.push(format!(
            "{} of {} changes did not converge at every expected proxy within the {} s drain",
            r.events - r.events_converged,
            r.events,
            sc.timeouts.drain_secs
        ));
    }
    if !out.append_times {
        r.notes.push(
            "the server has no log to read append times from: convergence runs from each \
             file's write, as `from write` does"
                .into(),
        );
    } else if r.events_without_append_time > 0 {
        r.notes.push(format!(
            "{} changes had no append time from the log; their write time was used",
            r.events_without_append_time
        ));
    }
}
