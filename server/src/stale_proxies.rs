//! The `xds_stale_proxies` gauge: proxies that have stayed out of date for longer
//! than [`STALE_AFTER`].
//!
//! A stream is out of date when it identified a proxy and, for a type it
//! requested whose latest answer was not a NACK, a response waits for its ACK or
//! changes wait to be sent; or when it has not yet taken the current snapshot
//! into account. That is `/debug/syncz`'s `STALE` without the per-name view
//! check, so a check costs one brief lock per stream and no resource walk. A
//! task looks every [`CHECK_EVERY`] and remembers since when each stream has
//! been out of date; a stream that catches up, or closes, is forgotten. A scrape
//! only reads the gauge.
//!
//! What it does NOT do: judge NACKs (`xds_nacks_total` counts those) or touch
//! any stream.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use deltapilot_xds::snapshot::SnapshotReader;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::xds::registry::{StreamRegistry, StreamStatus};

/// How long a proxy may stay out of date before it counts as stale. A healthy
/// proxy ACKs a push within a round trip; one still waiting after this long is
/// stuck, overloaded or cut off.
pub const STALE_AFTER: Duration = Duration::from_secs(60);

/// How often the streams are looked at: a stale proxy shows within this long
/// after [`STALE_AFTER`].
pub const CHECK_EVERY: Duration = Duration::from_secs(5);

/// Whether `s` is out of date against the snapshot `current_seq`.
pub fn out_of_date(s: &StreamStatus, current_seq: u64) -> bool {
    if s.proxy.is_none() {
        return false;
    }
    let waiting = s
        .types
        .iter()
        .filter(|t| t.requested && t.last_nack.is_none())
        .any(|t| t.in_flight.is_some() || t.pending);
    let requested = s.types.iter().any(|t| t.requested);
    waiting || (requested && s.seq < current_seq)
}

/// Since when each live stream has been out of date.
#[derive(Debug, Default)]
pub struct Tracker {
    since: HashMap<u64, Instant>,
}

impl Tracker {
    /// Takes in one look at every live stream at `now`; returns how many have
    /// been out of date for at least `stale_after`.
    pub fn update(
        &mut self,
        streams: &[StreamStatus],
        current_seq: u64,
        now: Instant,
        stale_after: Duration,
    ) -> usize {
        let mut next = HashMap::with_capacity(self.since.len());
        for s in streams.iter().filter(|s| out_of_date(s, current_seq)) {
            let since = self.since.get(&s.stream).copied().unwrap_or(now);
            next.insert(s.stream, since);
        }
        self.since = next;
        self.since
            .values()
            .filter(|since| now.saturating_duration_since(**since) >= stale_after)
            .count()
    }
}

/// Keeps `metrics.stale_proxies` current until `shutdown`.
pub async fn export(
    streams: Arc<StreamRegistry>,
    snapshots: SnapshotReader,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tracker = Tracker::default();
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        let seq = snapshots.load().seq;
        let stale = tracker.update(&streams.statuses(), seq, Instant::now(), STALE_AFTER);
        metrics
            .stale_proxies
            .set(i64::try_from(stale).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
#[path = "stale_proxies_tests.rs"]
mod tests;
