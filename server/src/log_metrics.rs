//! The embedded log's compaction and what it holds on disk, as metrics in the
//! server's one registry (registered by [`crate::metrics::Metrics::new`]). An
//! operator watches these to see that retention works: the disk stays flat after
//! warm-up, compactions run and reclaim, and failures are visible by reason
//! instead of only in the log output.
//!
//! Names (prefixed `deltapilot_`; counters get `_total`):
//! - `log_compactions_total{result}` — compactions `run` attempted while running
//!   (`ok`, `failed`); `deltapilot log compact` runs offline and is not counted.
//! - `log_compaction_failures_total{reason}` — the failed ones, by reason:
//!   `io` (a read, write, rename or fsync of the log directory failed), `corrupt`
//!   (a segment did not verify), `checkpoints` (the checkpoints could not be
//!   listed, so no safe position was known), `other`.
//! - `log_compaction_reclaimed_records_total`, `log_compaction_reclaimed_bytes_total`
//!   — records dropped and segment bytes freed by the compactions that succeeded.
//! - `log_last_compaction_timestamp_seconds` — Unix time of the last successful
//!   compaction (0: none yet).
//! - `log_compaction_horizon` — the end of the compacted range: replays from
//!   below it are refused.
//! - `log_segments`, `log_disk_bytes` — segment files of the embedded log and
//!   their bytes, read at each scrape.
//! - `log_oldest_offset` — the first offset still stored (0 until retention
//!   deletes segments): reads and replays from below it are refused.
//! - `log_retention_deleted_segments_total`, `log_retention_deleted_bytes_total`
//!   — segment files, and their bytes, deleted by retention (`delete=true`).
//! - `log_retention_failures_total{reason}` — deletions that failed, by the
//!   same reasons as compactions.
//!
//! What it does NOT do: report a Kafka topic's size (the broker's own metrics do).

use std::sync::atomic::AtomicU64;

use deltapilot_log::Error as LogError;
use deltapilot_log::file::{CompactReport, DeleteReport, DiskUsage};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::metrics::Labels;

/// Why a compaction while running failed (`log_compaction_failures_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionFailure {
    /// A file operation of the log directory failed.
    Io,
    /// A segment did not verify.
    Corrupt,
    /// The checkpoints could not be listed: no safe position.
    Checkpoints,
    /// Anything else.
    Other,
}

impl CompactionFailure {
    /// Every reason, so that each label exists (at 0) from the start.
    pub const ALL: [Self; 4] = [Self::Io, Self::Corrupt, Self::Checkpoints, Self::Other];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Io => "io",
            Self::Corrupt => "corrupt",
            Self::Checkpoints => "checkpoints",
            Self::Other => "other",
        }
    }

    /// The reason of a failed `FileLog::compact`.
    pub fn of(e: &LogError) -> Self {
        match e {
            LogError::Io { .. } => Self::Io,
            LogError::Corrupt { .. } | LogError::Decode { .. } => Self::Corrupt,
            _ => Self::Other,
        }
    }
}

/// The compaction and disk metric families (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct LogStoreMetrics {
    /// See the module docs.
    pub compactions: Family<Labels<1>, Counter>,
    /// See the module docs.
    pub failures: Family<Labels<1>, Counter>,
    /// See the module docs.
    pub reclaimed_records: Counter,
    /// See the module docs.
    pub reclaimed_bytes: Counter,
    /// See the module docs.
    pub last_compaction: Gauge<f64, AtomicU64>,
    /// See the module docs.
    pub horizon: Gauge,
    /// See the module docs.
    pub segments: Gauge,
    /// See the module docs.
    pub disk_bytes: Gauge,
    /// See the module docs.
    pub oldest_offset: Gauge,
    /// See the module docs.
    pub deleted_segments: Counter,
    /// See the module docs.
    pub deleted_bytes: Counter,
    /// See the module docs.
    pub delete_failures: Family<Labels<1>, Counter>,
}

fn gauge_value(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl LogStoreMetrics {
    /// Adds the families to `registry`, every label at 0.
    pub fn register(&self, registry: &mut Registry) {
        for result in ["ok", "failed"] {
            let _ = self.compactions.get_or_create(&[("result", result)]);
        }
        for reason in CompactionFailure::ALL {
            let _ = self.failures.get_or_create(&[("reason", reason.as_str())]);
            let _ = self
                .delete_failures
                .get_or_create(&[("reason", reason.as_str())]);
        }
        registry.register(
            "log_compactions",
            "Compactions of the embedded log attempted while running, by result",
            self.compactions.clone(),
        );
        registry.register(
            "log_compaction_failures",
            "Failed compactions of the embedded log, by reason",
            self.failures.clone(),
        );
        registry.register(
            "log_compaction_reclaimed_records",
            "Records dropped by successful compactions",
            self.reclaimed_records.clone(),
        );
        registry.register(
            "log_compaction_reclaimed_bytes",
            "Segment bytes freed by successful compactions",
            self.reclaimed_bytes.clone(),
        );
        registry.register(
            "log_last_compaction_timestamp_seconds",
            "Unix time of the last successful compaction (0: none yet)",
            self.last_compaction.clone(),
        );
        registry.register(
            "log_compaction_horizon",
            "End of the compacted range; replays from below it are refused",
            self.horizon.clone(),
        );
        registry.register(
            "log_segments",
            "Segment files of the embedded log",
            self.segments.clone(),
        );
        registry.register(
            "log_disk_bytes",
            "Bytes of the embedded log's segment files",
            self.disk_bytes.clone(),
        );
        registry.register(
            "log_oldest_offset",
            "First offset the embedded log still stores",
            self.oldest_offset.clone(),
        );
        registry.register(
            "log_retention_deleted_segments",
            "Segment files of the embedded log deleted by retention",
            self.deleted_segments.clone(),
        );
        registry.register(
            "log_retention_deleted_bytes",
            "Bytes of the segment files deleted by retention",
            self.deleted_bytes.clone(),
        );
        registry.register(
            "log_retention_failures",
            "Failed deletions of embedded-log segments, by reason",
            self.delete_failures.clone(),
        );
    }

    /// Records a deletion that succeeded (possibly of nothing).
    pub fn deleted(&self, report: &DeleteReport) {
        self.deleted_segments.inc_by(report.segments as u64);
        self.deleted_bytes.inc_by(report.bytes);
        self.oldest_offset.set(gauge_value(report.start));
    }

    /// Records a deletion that failed.
    pub fn delete_failed(&self, why: CompactionFailure) {
        self.delete_failures
            .get_or_create(&[("reason", why.as_str())])
            .inc();
    }

    /// Records a compaction that succeeded at Unix time `now_secs`.
    pub fn compacted(&self, report: &CompactReport, now_secs: f64) {
        self.compactions.get_or_create(&[("result", "ok")]).inc();
        self.reclaimed_records
            .inc_by(report.records_before.saturating_sub(report.records_after));
        self.reclaimed_bytes
            .inc_by(report.bytes_before.saturating_sub(report.bytes_after));
        self.last_compaction.set(now_secs);
        self.horizon.set(gauge_value(report.horizon));
    }

    /// Records a compaction that failed.
    pub fn failed(&self, why: CompactionFailure) {
        self.compactions
            .get_or_create(&[("result", "failed")])
            .inc();
        self.failures
            .get_or_create(&[("reason", why.as_str())])
            .inc();
    }

    /// Sets the disk gauges (a scrape hook) and the horizon.
    pub fn set_disk(&self, usage: DiskUsage, horizon: u64) {
        self.segments
            .set(i64::try_from(usage.segments).unwrap_or(i64::MAX));
        self.disk_bytes.set(gauge_value(usage.bytes));
        self.oldest_offset.set(gauge_value(usage.oldest_offset));
        self.horizon.set(gauge_value(horizon));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compaction_counts_what_it_reclaimed_and_failures_their_reason() {
        let m = LogStoreMetrics::default();
        let report = CompactReport {
            horizon: 40,
            segments: 3,
            rewritten: 2,
            records_before: 40,
            records_after: 12,
            bytes_before: 9000,
            bytes_after: 3000,
        };
        m.compacted(&report, 1.5);
        m.failed(CompactionFailure::Io);
        assert_eq!(m.compactions.get_or_create(&[("result", "ok")]).get(), 1);
        assert_eq!(
            m.compactions.get_or_create(&[("result", "failed")]).get(),
            1
        );
        assert_eq!(m.failures.get_or_create(&[("reason", "io")]).get(), 1);
        assert_eq!(m.reclaimed_records.get(), 28);
        assert_eq!(m.reclaimed_bytes.get(), 6000);
        assert_eq!(m.horizon.get(), 40);
        assert!((m.last_compaction.get() - 1.5).abs() < f64::EPSILON);
    }

    #[test]
    fn a_deletion_counts_segments_and_bytes_and_moves_the_oldest_offset() {
        let m = LogStoreMetrics::default();
        let report = DeleteReport {
            start: 120,
            segments: 3,
            bytes: 12_288,
        };
        m.deleted(&report);
        m.deleted(&DeleteReport {
            start: 120,
            ..Default::default()
        });
        m.delete_failed(CompactionFailure::Checkpoints);
        assert_eq!(m.deleted_segments.get(), 3);
        assert_eq!(m.deleted_bytes.get(), 12_288);
        assert_eq!(m.oldest_offset.get(), 120);
        assert_eq!(
            m.delete_failures
                .get_or_create(&[("reason", "checkpoints")])
                .get(),
            1
        );
        assert_eq!(
            m.failures.get_or_create(&[("reason", "checkpoints")]).get(),
            0
        );
    }
}
