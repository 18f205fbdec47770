//! Appending an adapter's plans to the log, for every adapter: plan, append,
//! commit until the log matches the desired view; on a failed append keep the
//! state, count and show the failure, and retry after a capped, jittered
//! exponential backoff that resets on success.
//!
//! What it does NOT do: plan (see `emit`), or wait (the adapter's loop sleeps
//! until [`Outbox::retry_at`] among its other wake-ups).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deltapilot_log::{EventLog, Position};
use deltapilot_proto::Event;
use prost::Message as _;
use tokio::sync::watch;
use tokio::time::Instant;

use super::emit::{Emitter, EntityMap, ResyncPhase};
use crate::Result;

/// What an adapter core offers the append loop: its outbox and the desired view
/// to bring the log to, or `None` while nothing may be appended yet (before the
/// first complete listing of the registry, a resync would sweep what is missing).
pub(crate) trait Planner {
    /// The outbox and the desired view, when appending may proceed.
    fn outbox(&mut self) -> Option<(&mut Outbox, &EntityMap)>;
}

/// An adapter's side of the log: the emitter of the current generation (once the
/// resync began), the append loop's state, and the count of events appended.
#[derive(Debug)]
pub(crate) struct Outbox {
    emitter: Option<Emitter>,
    batch_max: usize,
    consecutive_failures: u32,
    retry_at: Option<Instant>,
    /// Events appended since start.
    pub(crate) events_total: u64,
    /// Appends the log refused, since start.
    pub(crate) failures_total: u64,
    /// The last refusal, until an append succeeds.
    pub(crate) last_error: Option<String>,
    /// Objects left out because their event is larger than the log accepts,
    /// since start (each time such a version is planned).
    pub(crate) oversized_total: u64,
    /// The last object left out for its size, and why.
    pub(crate) last_oversized: Option<String>,
    /// Just past every record this outbox appended, per partition.
    appended_through: Position,
    /// [`Self::appended_through`] when `resync COMPLETED` was appended.
    completed_at: Option<Position>,
}

impl Outbox {
    /// An outbox whose appends carry at most `batch_max` events.
    pub(crate) fn new(batch_max: usize) -> Self {
        Self {
            emitter: None,
            batch_max,
            consecutive_failures: 0,
            retry_at: None,
            events_total: 0,
            failures_total: 0,
            last_error: None,
            oversized_total: 0,
            last_oversized: None,
            appended_through: Position::default(),
            completed_at: None,
        }
    }

    /// Starts the resync of `desired` at `generation`.
    pub(crate) fn begin(&mut self, source: String, generation: u64, desired: &EntityMap) {
        self.emitter = Some(Emitter::new(source, generation, desired));
        self.completed_at = None;
    }

    /// Whether the resync has begun.
    pub(crate) fn begun(&self) -> bool {
        self.emitter.is_some()
    }

    /// The generation of the resync (0 before it begins).
    pub(crate) fn generation(&self) -> u64 {
        self.emitter.as_ref().map_or(0, Emitter::generation)
    }

    /// Whether `resync COMPLETED` is in the log.
    pub(crate) fn resync_completed(&self) -> bool {
        self.emitter
            .as_ref()
            .is_some_and(|e| e.phase() == ResyncPhase::Completed)
    }

    /// The log position just past the `resync COMPLETED` marker and everything
    /// appended before it, once it is in the log. A reader whose position covers
    /// it has folded the whole start-up view; readiness waits for that, not only
    /// for the append to succeed.
    pub(crate) fn resync_completed_at(&self) -> Option<Position> {
        self.completed_at.clone()
    }

    /// Entities appended and current.
    pub(crate) fn len(&self) -> usize {
        self.emitter.as_ref().map_or(0, Emitter::len)
    }

    /// Events planned but not yet durably appended (see [`Emitter::backlog`]); 0
    /// before the resync begins.
    pub(crate) fn backlog(&self) -> usize {
        self.emitter.as_ref().map_or(0, Emitter::backlog)
    }

    /// Marks keys whose desired entity may have changed (see [`Emitter::mark`]).
    pub(crate) fn mark(&mut self, keys: impl IntoIterator<Item = String>) {
        if let Some(em) = &mut self.emitter {
            em.mark(keys);
        }
    }

    /// Marks a rebuilt desired view (see [`Emitter::mark_all`]).
    pub(crate) fn mark_all(&mut self, desired: &EntityMap) {
        if let Some(em) = &mut self.emitter {
            em.mark_all(desired);
        }
    }

    /// The next batch, or empty when the log matches `desired` (or before the
    /// resync begins).
    pub(crate) fn plan(&mut self, desired: &EntityMap, now_micros: i64) -> Vec<Event> {
        match &mut self.emitter {
            Some(em) => em.plan(desired, self.batch_max, now_micros),
            None => Vec::new(),
        }
    }

    /// Records that `events`, planned from `desired`, are in the log.
    pub(crate) fn commit(&mut self, events: &[Event], desired: &EntityMap) {
        if let Some(em) = &mut self.emitter {
            em.commit(events, desired);
            self.events_total += events.len() as u64;
        }
        if self.completed_at.is_none() && self.resync_completed() {
            self.completed_at = Some(self.appended_through.clone());
        }
    }

    /// When the next attempt is due after a failure; `None` when not waiting.
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }

    fn due(&self) -> bool {
        self.retry_at.is_none_or(|t| Instant::now() >= t)
    }
}

/// Unless a retry is pending and not yet due, appends plans until the log matches
/// the desired view, a batch fails, or shutdown is requested. A failure is logged,
/// counted and scheduled for retry after `backoff(consecutive failures)`.
pub(crate) async fn flush_if_due<L: EventLog, P: Planner>(
    core: &mut P,
    log: &L,
    shutdown: &watch::Receiver<bool>,
    adapter: &str,
    backoff: impl Fn(u32) -> Duration,
) {
    let Some((outbox, desired)) = core.outbox() else {
        return;
    };
    if !outbox.due() {
        return;
    }
    match flush(outbox, desired, log, shutdown).await {
        Ok(()) => {
            if outbox.consecutive_failures > 0 {
                tracing::info!(
                    adapter,
                    after_failures = outbox.consecutive_failures,
                    "adapter: the log accepts appends again"
                );
            }
            outbox.consecutive_failures = 0;
            outbox.retry_at = None;
            outbox.last_error = None;
        }
        Err(e) => {
            outbox.consecutive_failures = outbox.consecutive_failures.saturating_add(1);
            let delay = backoff(outbox.consecutive_failures);
            tracing::warn!(adapter, error = %e, retry_in = ?delay,
                "adapter: append failed; keeping state and retrying");
            outbox.failures_total += 1;
            outbox.last_error = Some(e.to_string());
            outbox.retry_at = Some(Instant::now() + delay);
        }
    }
}

async fn flush<L: EventLog>(
    outbox: &mut Outbox,
    desired: &EntityMap,
    log: &L,
    shutdown: &watch::Receiver<bool>,
) -> Result<()> {
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        let plan = outbox.plan(desired, now_micros());
        if plan.is_empty() {
            return Ok(());
        }
        // An object whose event the log cannot take is skipped, counted and
        // reported, and the rest goes on: retrying it forever would block every
        // later change of the registry, deletes included. It is committed as if
        // appended, so the log keeps its last good version until it changes.
        let limit = log.max_event_bytes();
        let (fit, too_big): (Vec<Event>, Vec<Event>) =
            plan.iter().cloned().partition(|e| e.encoded_len() <= limit);
        for e in &too_big {
            let what = format!(
                "{} {} encodes to {} bytes, above the log's limit of {limit}; left out",
                e.kind_name(),
                e.key().unwrap_or_default(),
                e.encoded_len()
            );
            tracing::warn!(%what, "adapter: an object is too large for the log");
            outbox.oversized_total += 1;
            outbox.last_oversized = Some(what);
        }
        if !fit.is_empty() {
            for rec in log.append(&fit).await? {
                outbox.appended_through.advance(rec);
            }
        }
        outbox.commit(&plan, desired);
    }
}

/// Now, in Unix microseconds (the events' `observed_at`, and the clock part of
/// new generations).
pub(crate) fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Sends `next` to status subscribers only when it differs from the current one,
/// so they wake on real change only.
pub(crate) fn publish<T: PartialEq>(tx: &watch::Sender<T>, next: T) {
    tx.send_if_modified(|s| {
        if *s == next {
            false
        } else {
            *s = next;
            true
        }
    });
}

/// Capped exponential backoff with jitter, as every adapter retries: `initial`
/// doubled per consecutive failure (`attempt` 1 is the first), capped at `max`,
/// then scaled by a random factor in `[0.5, 1.0)` so that many adapters that lost
/// the same peer do not retry in lockstep.
pub(crate) fn backoff(initial: Duration, max: Duration, attempt: u32) -> Duration {
    let exp = initial.saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
    exp.min(max).mul_f64(rand::random_range(0.5..1.0))
}

/// Checks the options every adapter's append loop takes, for its `validate`.
pub(crate) fn check_append_options(
    append_batch_max: usize,
    retry_initial: Duration,
    retry_max: Duration,
) -> crate::Result<()> {
    let bad = |m: String| Err(crate::Error::InvalidConfig(m));
    if append_batch_max < 3 {
        return bad(format!(
            "append_batch_max {append_batch_max} is below 3 (two resync markers and an entity)"
        ));
    }
    if retry_initial.is_zero() || retry_max < retry_initial {
        return bad(format!(
            "retry delays must satisfy 0 < retry_initial ({retry_initial:?}) <= retry_max ({retry_max:?})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let (initial, max) = (Duration::from_millis(100), Duration::from_secs(30));
        for attempt in 1..40 {
            let d = backoff(initial, max, attempt);
            let ceiling = (initial * (1 << (attempt - 1).min(20))).min(max);
            assert!(
                d >= ceiling / 2 && d <= ceiling,
                "attempt {attempt}: {d:?} vs {ceiling:?}"
            );
        }
    }

    #[test]
    fn append_options_need_room_for_the_markers_and_ordered_delays() {
        let s = Duration::from_secs(1);
        assert!(check_append_options(3, s, s).is_ok());
        assert!(check_append_options(2, s, s).is_err());
        assert!(check_append_options(3, Duration::ZERO, s).is_err());
        assert!(check_append_options(3, s * 2, s).is_err());
    }
}
