//! The baseline phase: the same fleet against the replay server, the captured
//! pushes sent at their original pace, and the ratios of convergence to raw
//! fan-out. The run's tracked changes are registered again, each just before
//! the first captured push after its append, with a tracker of the replay's own:
//! the same proxies then judge, by the same rules, when each change has moved
//! raw, so every kind of change has a like-for-like raw figure.
//!
//! What it does NOT do: the replay server itself (see `baseline`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use super::phases::wait_sync;
use crate::baseline::{ReplayAcks, Replayer, split};
use crate::procstat;
use crate::progress::Progress;
use crate::proxy::Behaviour;
use crate::proxy::fleet::{Captured, Fleet, FleetConfig, Phase};
use crate::report::{BaselineReport, Report};
use crate::scenario::Scenario;
use crate::stats::{ms, percentiles, ratio};
use crate::tracker::{ChangeSpec, Tracker};

/// Runs the baseline and fills `report.baseline` and the ratios, from what
/// proxy 0 received in the run and the changes the run tracked.
pub(super) async fn baseline(
    sc: &Scenario,
    own: Option<&(std::path::PathBuf, Vec<String>)>,
    mut cfg: FleetConfig,
    (captured, changes): (&[Captured], &[ChangeSpec]),
    behaviours: &[Behaviour],
    report: &mut Report,
    progress: &Progress,
) -> anyhow::Result<()> {
    let (initial, pushes) = split(captured);
    let mut out = BaselineReport {
        pushes: pushes.len(),
        ..Default::default()
    };
    if initial.is_empty() {
        out.skipped = Some("proxy 0 captured no initial responses".into());
        report.baseline = Some(out);
        return Ok(());
    }
    let mut server = Replayer::start(own, initial, &pushes).await?;
    out.server = server.kind().into();
    let nonces: Vec<String> = pushes.iter().map(|p| p.nonce.clone()).collect();
    let expected = (report.behaviours.normal + report.behaviours.slow) as u32;
    let acks = Arc::new(ReplayAcks::new(&nonces, expected));
    let tracker = Arc::new(Tracker::new());
    tracker.set_expected(
        report.behaviours.normal as u32,
        report.behaviours.slow as u32,
    );
    // Each change goes before the first push proxy 0 received after its append.
    let mut at_push: Vec<Vec<&ChangeSpec>> = vec![Vec::new(); pushes.len()];
    for c in changes {
        let i = pushes.partition_point(|p| p.wall < c.start);
        if let Some(slot) = at_push.get_mut(i) {
            slot.push(c);
        }
    }
    cfg.target = server.addr();
    let rss0 = server.pid().and_then(procstat::sample).map(|s| s.rss_bytes);
    cfg.capture = false;
    let fleet = Fleet::start(cfg, behaviours, tracker.clone(), Some(acks.clone()))?;
    progress.phase(
        "baseline sync",
        Some((fleet.shared.clone(), fleet.size())),
        None,
    );
    let synced = wait_sync(&fleet, Duration::from_secs(sc.timeouts.sync_secs), None).await;
    if let Err(e) = synced {
        out.skipped = Some(format!("the baseline fleet did not sync: {e:#}"));
        report.baseline = Some(out);
        fleet.stop(Duration::from_secs(10)).await;
        server.stop(Duration::from_secs(5)).await;
        return Ok(());
    }
    out.initial_sync_ms = fleet
        .shared
        .sync_times()
        .iter()
        .map(|d| ms(*d))
        .reduce(f64::max);
    tokio::time::sleep(super::SETTLE).await;
    let rss1 = server.pid().and_then(procstat::sample).map(|s| s.rss_bytes);
    if let (Some(a), Some(b)) = (rss0, rss1) {
        out.server_rss_bytes_per_proxy = Some((b as f64 - a as f64) / fleet.size().max(1) as f64);
    }
    fleet.set_phase(Phase::Churn);
    progress.phase(
        "baseline replay",
        Some((fleet.shared.clone(), fleet.size())),
        None,
    );
    let cpu0 = server
        .pid()
        .and_then(procstat::sample)
        .map(|s| s.cpu_seconds);
    let start = Instant::now();
    let mut sent = Vec::with_capacity(pushes.len());
    for (i, p) in pushes.iter().enumerate() {
        tokio::time::sleep_until(tokio::time::Instant::from_std(start + p.offset)).await;
        let now = SystemTime::now();
        for c in &at_push[i] {
            let id = tracker.register_spec(c, now);
            out.changes_replayed += 1;
            if tracker.undoes_unconverged(id) {
                out.changes_out_of_order += 1;
            }
        }
        sent.push(Instant::now());
        server.push(i).await?;
    }
    let drain = Duration::from_secs(sc.timeouts.drain_secs);
    let drain_start = Instant::now();
    let all_done = || {
        let (n, done) = tracker.counts();
        n == done && (0..sent.len()).all(|i| acks.done(i))
    };
    while drain_start.elapsed() < drain && !all_done() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cpu1 = server
        .pid()
        .and_then(procstat::sample)
        .map(|s| s.cpu_seconds);
    out.server_cpu_seconds = cpu0.zip(cpu1).map(|(a, b)| b - a);
    let (mut raw, mut raw_eds) = (Vec::new(), Vec::new());
    for (i, at) in sent.iter().enumerate() {
        if acks.done(i)
            && let Some(last) = acks.last_ack(i)
        {
            let v = ms(last.saturating_duration_since(*at));
            raw.push(v);
            if pushes[i].eds {
                raw_eds.push(v);
            }
            report
                .baseline_samples
                .push((ms(at.duration_since(start)) / 1000.0, v));
        }
    }
    out.pushes_done = raw.len();
    out.raw_fanout_ms = percentiles(&raw);
    out.raw_fanout_eds_ms = percentiles(&raw_eds);
    let (mut per_change, mut per_endpoint) = (Vec::new(), Vec::new());
    for r in tracker.results() {
        let Some(v) = r
            .converged
            .and_then(|c| c.duration_since(r.start()).ok())
            .map(ms)
        else {
            continue;
        };
        per_change.push(v);
        if r.kind.is_endpoint() {
            per_endpoint.push(v);
        }
    }
    out.changes_converged = per_change.len();
    out.raw_change_ms = percentiles(&per_change);
    out.raw_change_endpoint_ms = percentiles(&per_endpoint);
    if out.changes_out_of_order > 0 {
        report.notes.push(format!(
            "baseline: {} changes were replayed while a change they undo had not converged there; they may count as converged early",
            out.changes_out_of_order
        ));
    }
    if fleet.shared.counters.errors.load(Ordering::Relaxed) > 0 {
        report.notes.push(format!(
            "baseline: {} proxies failed; first error: {}",
            fleet.shared.counters.errors.load(Ordering::Relaxed),
            fleet.shared.first_error().unwrap_or_default()
        ));
    }
    fleet.stop(Duration::from_secs(30)).await;
    server.stop(Duration::from_secs(5)).await;
    // Like for like: an endpoint change is one EDS response per proxy, so its
    // convergence is set against the raw fan-out of EDS responses; without
    // endpoint changes, everything against everything.
    let pair = match (&report.convergence_endpoint_ms, &out.raw_fanout_eds_ms) {
        (Some(c), Some(b)) => Some((c, b)),
        _ => report
            .convergence_ms
            .as_ref()
            .zip(out.raw_fanout_ms.as_ref()),
    };
    if let Some((c, b)) = pair {
        report.raw_fanout_ratio = ratio(Some(c.p99), Some(b.p99));
        report.raw_fanout_ratio_p50 = ratio(Some(c.p50), Some(b.p50));
    }
    if let Some((c, b)) = report
        .convergence_ms
        .as_ref()
        .zip(out.raw_change_ms.as_ref())
    {
        report.raw_fanout_ratio_all = ratio(Some(c.p99), Some(b.p99));
        report.raw_fanout_ratio_all_p50 = ratio(Some(c.p50), Some(b.p50));
    }
    report.baseline = Some(out);
    Ok(())
}
