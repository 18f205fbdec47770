//! When each snapshot's registry change was observed, by snapshot sequence
//! number, for the convergence histogram (observation → the proxy's ACK).
//!
//! What it does NOT do: decide the time. `deltapilot run` records each
//! snapshot from the fold thread before publishing it (see the runner's
//! `StepObserver`), so no sequence number a stream can send is missing.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::SystemTime;

/// How many snapshot publication times [`PublishClock`] remembers; pushes are
/// ACKed within a few snapshots, and an older one is simply not measured.
pub const CLOCK_HISTORY: usize = 1024;

/// When the events folded into snapshot `seq` were observed, for the convergence
/// histogram.
pub trait ObservedAt: Send + Sync {
    /// The observed-at time of the newest event folded into snapshot `seq`, if known.
    fn observed_at(&self, seq: u64) -> Option<SystemTime>;
}

/// An [`ObservedAt`] fed per snapshot sequence: `deltapilot run` records each
/// snapshot's `observed_at_micros` (the registry observation time of its newest
/// event), or the time it first saw the snapshot when events carry none.
#[derive(Debug, Default)]
pub struct PublishClock {
    seen: Mutex<VecDeque<(u64, SystemTime)>>,
}

impl PublishClock {
    /// Records that snapshot `seq` was seen now (or at `at`).
    pub fn record(&self, seq: u64, at: SystemTime) {
        let Ok(mut seen) = self.seen.lock() else {
            return;
        };
        if seen.back().is_some_and(|(s, _)| *s >= seq) {
            return;
        }
        if seen.len() == CLOCK_HISTORY {
            seen.pop_front();
        }
        seen.push_back((seq, at));
    }
}

impl ObservedAt for PublishClock {
    fn observed_at(&self, seq: u64) -> Option<SystemTime> {
        let seen = self.seen.lock().ok()?;
        // Recorded in increasing order: a binary search keeps the lock, which
        // the fold thread also takes, short.
        let i = seen.binary_search_by_key(&seq, |(s, _)| *s).ok()?;
        Some(seen[i].1)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn each_recorded_seq_is_found_and_others_are_not() {
        let clock = PublishClock::default();
        let t = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        for seq in [1, 3, 5] {
            clock.record(seq, t(seq));
        }
        // A later record of a seq already known (the snapshot watcher's) keeps
        // the first time.
        clock.record(3, t(99));
        assert_eq!(clock.observed_at(3), Some(t(3)));
        assert_eq!(clock.observed_at(5), Some(t(5)));
        assert_eq!(clock.observed_at(4), None);
        assert_eq!(clock.observed_at(0), None);
    }

    #[test]
    fn the_history_is_bounded_and_keeps_the_newest() {
        let clock = PublishClock::default();
        let n = CLOCK_HISTORY as u64 + 10;
        for seq in 1..=n {
            clock.record(seq, SystemTime::UNIX_EPOCH);
        }
        assert_eq!(clock.observed_at(10), None);
        assert!(clock.observed_at(11).is_some());
        assert!(clock.observed_at(n).is_some());
    }
}
