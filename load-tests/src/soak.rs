//! The soak figures: while churn runs, the spawned server's resident memory, its
//! embedded log's bytes on disk and its checkpoints' bytes are sampled at a fixed
//! interval, and each series gets a least-squares slope over the samples after
//! the warm-up. A bounded history shows as slopes near zero (compaction keeps the
//! log to the live state plus what came after the oldest checkpoint, and
//! checkpoints hold the live state only); a leak shows as a steady positive one.
//!
//! What it does NOT do: decide what is flat (the figures are reported, and a test
//! or a reader judges them against the run's own sizes).

use std::path::Path;

use serde::Serialize;

/// One sample.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct SoakSample {
    /// Seconds since churn started.
    pub t_secs: f64,
    /// Server resident memory.
    pub rss_bytes: u64,
    /// Bytes of the embedded log's files (`DATA_DIR/log`).
    pub log_bytes: u64,
    /// Bytes of the checkpoint files (`DATA_DIR/checkpoints`).
    pub checkpoint_bytes: u64,
}

/// The soak part of the report.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SoakReport {
    /// Samples before this many seconds are warm-up, left out of the slopes.
    pub warmup_secs: f64,
    /// Every sample, in time order.
    pub samples: Vec<SoakSample>,
    /// Slope of the resident memory after warm-up, bytes per minute.
    pub rss_bytes_per_min: Option<f64>,
    /// Slope of the log's bytes after warm-up, bytes per minute.
    pub log_bytes_per_min: Option<f64>,
    /// Slope of the checkpoints' bytes after warm-up, bytes per minute.
    pub checkpoint_bytes_per_min: Option<f64>,
}

impl SoakReport {
    /// Computes the slopes from `samples` taken after `warmup_secs`.
    pub fn new(samples: Vec<SoakSample>, warmup_secs: f64) -> Self {
        let after: Vec<&SoakSample> = samples.iter().filter(|s| s.t_secs >= warmup_secs).collect();
        let slope = |f: &dyn Fn(&SoakSample) -> u64| {
            let pts: Vec<(f64, f64)> = after.iter().map(|s| (s.t_secs, f(s) as f64)).collect();
            per_minute(&pts)
        };
        SoakReport {
            warmup_secs,
            rss_bytes_per_min: slope(&|s| s.rss_bytes),
            log_bytes_per_min: slope(&|s| s.log_bytes),
            checkpoint_bytes_per_min: slope(&|s| s.checkpoint_bytes),
            samples,
        }
    }

    /// The table rows of the soak.
    pub fn rows(&self) -> Vec<(&'static str, String)> {
        let mib = |v: Option<f64>| match v {
            Some(b) => format!("{:+.3} MiB/min", b / (1024.0 * 1024.0)),
            None => "-".into(),
        };
        let last = self.samples.last().copied().unwrap_or_default();
        vec![
            (
                "soak samples",
                format!("{} (warm-up {:.0} s)", self.samples.len(), self.warmup_secs),
            ),
            (
                "soak slope rss / log / ckpt",
                format!(
                    "{} / {} / {}",
                    mib(self.rss_bytes_per_min),
                    mib(self.log_bytes_per_min),
                    mib(self.checkpoint_bytes_per_min)
                ),
            ),
            (
                "soak last rss / log / ckpt",
                format!(
                    "{:.1} / {:.2} / {:.2} MiB",
                    last.rss_bytes as f64 / 1048576.0,
                    last.log_bytes as f64 / 1048576.0,
                    last.checkpoint_bytes as f64 / 1048576.0
                ),
            ),
        ]
    }
}

/// Least-squares slope of `pts` (seconds, value), per minute; `None` with fewer
/// than two distinct times.
pub fn per_minute(pts: &[(f64, f64)]) -> Option<f64> {
    let n = pts.len() as f64;
    if pts.len() < 2 {
        return None;
    }
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    Some(sxy / sxx * 60.0)
}

/// Bytes of the regular files directly in `dir` (0 if it does not exist).
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_per_minute_of_a_line_and_of_flat_noise() {
        let line: Vec<(f64, f64)> = (0..10)
            .map(|i| (i as f64, 100.0 + 2.0 * i as f64))
            .collect();
        assert!((per_minute(&line).expect("slope") - 120.0).abs() < 1e-9);
        let flat = [(0.0, 5.0), (1.0, 7.0), (2.0, 5.0), (3.0, 7.0)];
        assert!(per_minute(&flat).expect("slope").abs() < 60.0);
        assert_eq!(per_minute(&[(1.0, 1.0)]), None);
        assert_eq!(per_minute(&[(1.0, 1.0), (1.0, 2.0)]), None);
    }

    #[test]
    fn warm_up_samples_are_left_out() {
        let samples: Vec<SoakSample> = (0..10)
            .map(|i| SoakSample {
                t_secs: i as f64,
                // Grows during warm-up, then flat.
                log_bytes: if i < 5 { i * 1000 } else { 5000 },
                ..Default::default()
            })
            .collect();
        let r = SoakReport::new(samples, 5.0);
        assert_eq!(r.log_bytes_per_min, Some(0.0));
        assert_eq!(r.samples.len(), 10);
    }
}
