//! Cold start: the engine runner following a log it finds at start until it is
//! ready (the path `deltapilot run` takes without a checkpoint), against a
//! replay's fold of the same log to its final snapshot, in the same run.
//!
//! Two shapes of embedded log, each generated once (see
//! `deltapilot_benches::workload`): `churn_1m` (10k services, 100k endpoints,
//! 1M events of churn, the replay bench's log) and `large_services` (1k
//! services of 1,040 endpoints each, 1.04M upserts). Per shape:
//! `fold/SHAPE` opens the log read-only, folds it with a `Replayer` and computes
//! the final snapshot (as `deltapilot replay` does); `run/SHAPE` opens it
//! read-only, runs `Engine::run` from the start and stops the clock when the
//! engine is ready (its first snapshot covering the head published). Both
//! reach the same snapshot hash (checked before measuring). The targets and
//! figures are in BENCHMARKS.md ("Replay and checkpoint").
//!
//! `cargo bench -p deltapilot-benches --bench catch_up -- --warm-up-time 1 --measurement-time 10`.
//! `CATCH_UP_BENCH_DIR=DIR` keeps (and reuses) the generated logs in
//! `DIR/SHAPE`. `CATCH_UP_BENCH_RUNS=N` instead runs `fold` and `run`
//! alternately N times per shape and prints each one's wall time, their minimum
//! and median and the ratio of the medians (a machine shared with other work
//! moves both alike when they alternate); with `CATCH_UP_BENCH_PER_BATCH=1`
//! it also folds the log once through `Engine::apply_records` in follower-sized
//! batches, each regenerated and published (how `run` caught up before).
//! `CATCH_UP_BENCH_SHAPES=a,b` picks shapes by name.

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use deltapilot_benches::workload::{CHURN_1M, LARGE_SERVICES, Shape, events};
use deltapilot_engine::replay::Replayer;
use deltapilot_engine::replay::drive::fold_to;
use deltapilot_engine::runner::Engine;
use deltapilot_log::EventLog;
use deltapilot_log::file::{FileLog, FileLogOptions, FsyncPolicy};
use deltapilot_xds::generate::GenOptions;
use tokio::sync::watch;

/// The allocator `deltapilot` itself runs with, so the figures are the binary's.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The shapes measured, by name.
const SHAPES: [(&str, Shape); 2] = [("churn_1m", CHURN_1M), ("large_services", LARGE_SERVICES)];

/// Longest a catch-up may take before the bench gives up on it.
const READY_TIMEOUT: Duration = Duration::from_secs(600);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Writes `shape`'s log into `dir/log`.
async fn prepare(dir: &Path, shape: Shape) {
    let started = Instant::now();
    let log = FileLog::open(
        &dir.join("log"),
        FileLogOptions {
            fsync: FsyncPolicy::Never,
            ..Default::default()
        },
    )
    .expect("open log");
    for chunk in events(shape).chunks(10_000) {
        log.append(chunk).await.expect("append");
    }
    println!(
        "catch-up bench: wrote {} events into {} in {:?}",
        shape.events,
        dir.display(),
        started.elapsed()
    );
}

/// A replay of the whole log to its final snapshot: how long it took, the
/// snapshot's hash, and what to drop outside the measurement.
async fn fold(dir: &Path) -> (Duration, u64, Replayer) {
    let started = Instant::now();
    let log = FileLog::open_read_only(&dir.join("log")).expect("open");
    let head = log.head().await.expect("head");
    let mut r = Replayer::new(GenOptions::default());
    let stopped = fold_to(&log, &mut r, &head, &mut |_| {})
        .await
        .expect("fold");
    assert!(stopped.is_none(), "the log reads to its head");
    let hash = r.snapshot().hash;
    (started.elapsed(), hash, r)
}

/// The engine runner from the start of the log to ready: how long it took, the
/// hash of the snapshot published at readiness, and the engine (stopped), to
/// drop outside the measurement.
async fn catch_up(dir: &Path) -> (Duration, u64, Engine) {
    let started = Instant::now();
    let log = FileLog::open_read_only(&dir.join("log")).expect("open");
    let head = log.head().await.expect("head");
    let engine = Engine::new(GenOptions::default());
    let mut ready = engine.ready();
    let reader = engine.reader();
    let (stop_tx, stop_rx) = watch::channel(false);
    let run = engine.run(&log, log.start(), stop_rx);
    let wait = async {
        let became = tokio::time::timeout(READY_TIMEOUT, ready.wait_for(|r| *r)).await;
        let took = started.elapsed();
        let snap = reader.load();
        let _ = stop_tx.send(true);
        assert!(
            matches!(became, Ok(Ok(_))),
            "engine not ready within {READY_TIMEOUT:?}"
        );
        assert_eq!(snap.position, head, "ready at the head");
        (took, snap.hash)
    };
    let (engine, (took, hash)) = tokio::join!(run, wait);
    (took, hash, engine.expect("engine run"))
}

/// The whole log folded through [`Engine::apply_records`] in follower-sized
/// batches, each regenerated and published: the path `run` took before it
/// caught up as a replay does, for comparison. How long it took.
async fn per_batch(dir: &Path) -> Duration {
    let started = Instant::now();
    let log = FileLog::open_read_only(&dir.join("log")).expect("open");
    let mut engine = Engine::new(GenOptions::default());
    let mut at = log.start();
    loop {
        let records = log
            .read(&at, deltapilot_log::FOLLOW_BATCH_MAX)
            .await
            .expect("read");
        if records.is_empty() {
            break;
        }
        for r in &records {
            at.advance(r.pos);
        }
        engine.apply_records(&records);
    }
    let took = started.elapsed();
    drop(engine);
    took
}

/// Minimum and median of `v` (sorted in place).
fn summary(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v.first().copied().unwrap_or(0.0), v[v.len() / 2])
}

/// `runs` folds and catch-ups alternately over `dir`'s log, printed.
fn alternate(rt: &tokio::runtime::Runtime, name: &str, dir: &Path, runs: usize) {
    let (mut folds, mut catch_ups) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let (f, _, r) = rt.block_on(fold(dir));
        drop(r);
        let (c, _, e) = rt.block_on(catch_up(dir));
        drop(e);
        println!(
            "catch-up bench {name}: run {run}: fold {:.3} s, run to ready {:.3} s",
            f.as_secs_f64(),
            c.as_secs_f64()
        );
        folds.push(f.as_secs_f64());
        catch_ups.push(c.as_secs_f64());
    }
    if std::env::var_os("CATCH_UP_BENCH_PER_BATCH").is_some() {
        let took = rt.block_on(per_batch(dir));
        println!(
            "catch-up bench {name}: folded batch by batch, each published, in {:.3} s",
            took.as_secs_f64()
        );
    }
    let ((fold_min, fold_median), (run_min, run_median)) =
        (summary(&mut folds), summary(&mut catch_ups));
    println!(
        "catch-up bench {name}: {runs} runs: fold min {fold_min:.3} s, median {fold_median:.3} s; \
         run to ready min {run_min:.3} s, median {run_median:.3} s; ratio of medians {:.2}",
        run_median / fold_median
    );
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let kept = std::env::var_os("CATCH_UP_BENCH_DIR").map(std::path::PathBuf::from);
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = kept.clone().unwrap_or_else(|| tmp.path().to_owned());
    let picked: Option<Vec<String>> = std::env::var("CATCH_UP_BENCH_SHAPES")
        .ok()
        .map(|v| v.split(',').map(str::to_owned).collect());
    let runs = std::env::var("CATCH_UP_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0);
    let mut group = c.benchmark_group("catch_up");
    group.sample_size(10);
    for (name, shape) in SHAPES {
        if picked
            .as_ref()
            .is_some_and(|p| !p.iter().any(|s| s == name))
        {
            continue;
        }
        let dir = root.join(name);
        if !dir.join("log").is_dir() {
            rt.block_on(prepare(&dir, shape));
        }
        // Both paths reach the same snapshot.
        let (_, folded, r) = rt.block_on(fold(&dir));
        drop(r);
        let (_, caught_up, e) = rt.block_on(catch_up(&dir));
        drop(e);
        assert_eq!(
            folded, caught_up,
            "{name}: run publishes the replay's snapshot"
        );
        if let Some(n) = runs {
            alternate(&rt, name, &dir, n);
            continue;
        }
        group.throughput(Throughput::Elements(shape.events as u64));
        group.bench_function(format!("fold/{name}"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let (took, _, r) = rt.block_on(fold(&dir));
                        drop(r);
                        took
                    })
                    .sum()
            })
        });
        group.bench_function(format!("run/{name}"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let (took, _, e) = rt.block_on(catch_up(&dir));
                        drop(e);
                        took
                    })
                    .sum()
            })
        });
    }
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
