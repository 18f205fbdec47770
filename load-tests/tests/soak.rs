//! The soak scenario scaled down to a minute (`scenarios/soak.yaml`): steady churn
//! against a spawned `deltapilot run` whose embedded log compacts below its oldest
//! checkpoint. It checks that history stays bounded: every change converges, the
//! after warm-up the log (a sawtooth, as compaction cuts it back) peaks well
//! below the size it would have without compaction. The slopes of memory and
//! checkpoint bytes follow the live state, which random churn moves; they are
//! printed with the table, not judged.
//!
//! Needs the `deltapilot` binary (`cargo build -p deltapilot-server --bin
//! deltapilot`, or `DELTAPILOT_BIN`); fails, never skips, without it.

use std::path::{Path, PathBuf};

use deltapilot_load_tests::harness::{Plan, Target, execute};
use deltapilot_load_tests::scenario::Scenario;
use deltapilot_load_tests::server::find_binary;

fn deltapilot() -> PathBuf {
    let explicit = std::env::var_os("DELTAPILOT_BIN").map(PathBuf::from);
    find_binary(explicit.as_deref()).unwrap_or_else(|e| panic!("{e:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minute_of_churn_keeps_the_compacted_log_bounded() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/soak.yaml");
    let sc = Scenario::load(&path).expect("soak scenario");
    let r = execute(Plan {
        scenario: sc,
        target: Target::Spawn {
            bin: deltapilot(),
            keep: false,
            log: None,
        },
        progress: false,
        baseline_exe: None,
    })
    .await
    .expect("run");
    let table = r.table();
    println!("{table}");
    assert_eq!(r.errors, 0, "{table}");
    assert_eq!(r.events_converged, r.events, "{table}");
    let soak = r.soak.as_ref().expect("soak figures");
    assert!(soak.samples.len() >= 20, "{table}");
    let first = soak.samples.first().expect("a sample");
    let last = soak.samples.last().expect("a sample");
    // What the churn appended per minute: the sum of the log's growth between
    // samples (a compaction between two samples hides some, so this errs low).
    let grown: u64 = soak
        .samples
        .windows(2)
        .map(|w| w[1].log_bytes.saturating_sub(w[0].log_bytes))
        .sum();
    let append_rate = grown as f64 / (last.t_secs - first.t_secs) * 60.0;
    assert!(append_rate > 0.0, "churn appended to the log: {table}");
    let log_slope = soak.log_bytes_per_min.expect("log slope");
    let ckpt_slope = soak.checkpoint_bytes_per_min.expect("checkpoint slope");
    // Compaction makes the log a sawtooth: judge its peaks after warm-up against
    // the size it would have without compaction (its start plus all it grew).
    let uncompacted = first.log_bytes + grown;
    let peak = soak
        .samples
        .iter()
        .filter(|s| s.t_secs >= soak.warmup_secs)
        .map(|s| s.log_bytes)
        .max()
        .expect("samples after warm-up");
    assert!(
        (peak as f64) < uncompacted as f64 * 0.75,
        "the log peaks at {peak} B after warm-up; uncompacted it would hold {uncompacted} B \
         (t s / log B / checkpoint B: {:?})\n{table}",
        soak.samples
            .iter()
            .map(|s| (s.t_secs.round() as u64, s.log_bytes, s.checkpoint_bytes))
            .collect::<Vec<_>>()
    );
    // Checkpoints and memory follow the live state, which random churn moves:
    // their slopes are reported (printed above), not judged here.
    println!(
        "soak: appended {append_rate:.0} B/min; after warm-up log {log_slope:+.0} B/min, \
         checkpoints {ckpt_slope:+.0} B/min, rss {:+.0} B/min",
        soak.rss_bytes_per_min.unwrap_or(0.0)
    );
}
