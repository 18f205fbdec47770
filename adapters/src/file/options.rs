//! [`FileAdapterOptions`]: every knob of the file adapter, with the defaults
//! `deltapilot run` uses.
//!
//! What it does NOT do: parse flags or config files (the server's CLI maps its
//! flags onto this struct).

use std::path::PathBuf;
use std::time::Duration;

use crate::{Error, Result};

/// Options of a [`FileAdapter`](super::FileAdapter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileAdapterOptions {
    /// The source id stamped on every event. Default: `file:` followed by the
    /// canonical paths of the watched directories, sorted and comma-separated.
    ///
    /// The engine scopes resync sweeps and key ownership by source, so the id must
    /// stay the same across restarts: set it explicitly when the set of directories
    /// may change, and give each adapter appending to one log its own id.
    pub source_id: Option<String>,
    /// Directory for the adapter's state file (last generation, last good objects of
    /// every file). `None` keeps no state: generations come from the clock alone and
    /// a file that is broken at start-up loses its entities until fixed.
    /// `deltapilot run` uses a directory under `--data-dir`.
    pub state_dir: Option<PathBuf>,
    /// A burst of filesystem events ends after this long without a new one.
    pub debounce: Duration,
    /// A burst ends at the latest this long after its first event, so a file that
    /// is written continuously is still picked up.
    pub max_debounce: Duration,
    /// Every directory is rescanned this often even without events: the safety net
    /// for anything a watch can miss.
    pub rescan_interval: Duration,
    /// Files larger than this are reported and skipped (their last good state kept).
    pub max_file_bytes: u64,
    /// Most events appended in one batch (resync markers included); at least 3.
    pub append_batch_max: usize,
    /// First delay before retrying a failed append.
    pub retry_initial: Duration,
    /// Cap of the exponential retry delay.
    pub retry_max: Duration,
}

impl FileAdapterOptions {
    /// Default [`Self::debounce`].
    pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(100);
    /// Default [`Self::max_debounce`].
    pub const DEFAULT_MAX_DEBOUNCE: Duration = Duration::from_secs(1);
    /// Default [`Self::rescan_interval`].
    pub const DEFAULT_RESCAN_INTERVAL: Duration = Duration::from_secs(30);
    /// Default [`Self::max_file_bytes`]: far above any hand-written mesh config, low
    /// enough that a runaway file cannot exhaust memory.
    pub const DEFAULT_MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
    /// Default [`Self::append_batch_max`]: large enough to amortise an fsync, small
    /// enough to stay far below Kafka's default message batch limits.
    pub const DEFAULT_APPEND_BATCH_MAX: usize = 1000;

    /// Checks the options; called by `FileAdapter::new`.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        if self
            .source_id
            .as_ref()
            .is_some_and(|id| id.trim().is_empty())
        {
            return bad("the file adapter's source id is empty".into());
        }
        if self.max_debounce < self.debounce {
            return bad(format!(
                "max_debounce {:?} is below debounce {:?}",
                self.max_debounce, self.debounce
            ));
        }
        if self.rescan_interval.is_zero() {
            return bad("rescan_interval must be above zero".into());
        }
        if self.max_file_bytes == 0 {
            return bad("max_file_bytes must be above zero".into());
        }
        crate::common::append::check_append_options(
            self.append_batch_max,
            self.retry_initial,
            self.retry_max,
        )
    }

    /// Delay before retry number `attempt` (1-based): exponential from
    /// `retry_initial`, capped at `retry_max`, with jitter in `[50%, 100%)`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        crate::common::append::backoff(self.retry_initial, self.retry_max, attempt)
    }
}

impl Default for FileAdapterOptions {
    fn default() -> Self {
        Self {
            source_id: None,
            state_dir: None,
            debounce: Self::DEFAULT_DEBOUNCE,
            max_debounce: Self::DEFAULT_MAX_DEBOUNCE,
            rescan_interval: Self::DEFAULT_RESCAN_INTERVAL,
            max_file_bytes: Self::DEFAULT_MAX_FILE_BYTES,
            append_batch_max: Self::DEFAULT_APPEND_BATCH_MAX,
            retry_initial: Duration::from_millis(100),
            retry_max: Duration::from_secs(10),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_nonsense_is_refused() {
        assert!(FileAdapterOptions::default().validate().is_ok());
        let o = |f: fn(&mut FileAdapterOptions)| {
            let mut o = FileAdapterOptions::default();
            f(&mut o);
            o.validate()
        };
        assert!(o(|o| o.rescan_interval = Duration::ZERO).is_err());
        assert!(o(|o| o.append_batch_max = 2).is_err());
        assert!(o(|o| o.max_debounce = Duration::from_millis(1)).is_err());
        assert!(o(|o| o.source_id = Some(" ".into())).is_err());
        assert!(o(|o| o.retry_max = Duration::from_millis(1)).is_err());
    }
}
