//! Percentiles and small summaries over latency samples.
//!
//! What it does NOT do: decide what is measured (see `harness` and `report`).

use std::time::Duration;

/// p50, p90, p99 and max of a set of samples, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Percentiles {
    /// Number of samples.
    pub count: usize,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

/// Nearest-rank percentile of sorted samples.
fn rank(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    let k = ((p / 100.0) * n as f64).ceil() as usize;
    sorted[k.clamp(1, n) - 1]
}

/// Percentiles of `samples` (milliseconds), or `None` when there are none.
pub fn percentiles(samples: &[f64]) -> Option<Percentiles> {
    if samples.is_empty() {
        return None;
    }
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    Some(Percentiles {
        count: v.len(),
        p50: rank(&v, 50.0),
        p90: rank(&v, 90.0),
        p99: rank(&v, 99.0),
        max: v[v.len() - 1],
        mean,
    })
}

/// A duration in milliseconds with microsecond precision.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `a / b`, or `None` when either is missing or `b` is zero.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = percentiles(&v).expect("some");
        assert_eq!(
            (p.p50, p.p90, p.p99, p.max, p.count),
            (50.0, 90.0, 99.0, 100.0, 100)
        );
        let one = percentiles(&[7.0]).expect("one");
        assert_eq!((one.p50, one.p99), (7.0, 7.0));
        assert!(percentiles(&[]).is_none());
        assert_eq!(ratio(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(ratio(Some(3.0), Some(0.0)), None);
    }
}
