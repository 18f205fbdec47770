//! The baseline phase: the same fleet against the in-process replay server, the
//! captured pushes sent at their original pace, and the ratio of convergence to
//! raw fan-out.
//!
//! What it does NOT do: the replay server itself (see `baseline`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::phases::wait_sync;
use crate::baseline::{ReplayAcks, Replayer, split};
use crate::procstat;
use crate::progress::Progress;
use crate::proxy::Behaviour;
use crate::proxy::fleet::{Captured, Fleet, FleetConfig, Phase};
use crate::report::{BaselineReport, Report};
use crate::scenario::Scenario;
use crate::stats::{ms, percentiles, ratio};
use crate::tracker::Tracker;

/// Runs the baseline and fills `report.baseline` and the ratios.
pub(super) async fn baseline(
    sc: &Scenario,
    own: Option<&(std::path::PathBuf, Vec<String>)>,
    mut cfg: FleetConfig,
    captured: &[Captured],
    behaviours: &[Behaviour],
    report: &mut Report,
    progress: &Progress,
) -> anyhow::Result<()> {
    let (initial, pushes) = split(sc.api, captured);
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
    cfg.target = server.addr();
    let rss0 = server.pid().and_then(procstat::sample).map(|s| s.rss_bytes);
    cfg.capture = false;
    let fleet = Fleet::start(
        cfg,
        behaviours,
        Arc::new(Tracker::new()),
        Some(acks.clone()),
    )?;
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
        sent.push(Instant::now());
        server.push(i).await?;
    }
    let drain = Duration::from_secs(sc.timeouts.drain_secs);
    let drain_start = Instant::now();
    while drain_start.elapsed() < drain && !(0..sent.len()).all(|i| acks.done(i)) {
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
    report.baseline = Some(out);
    Ok(())
}
