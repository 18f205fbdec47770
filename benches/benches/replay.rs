//! Replay: re-folding a 1M-event embedded log to its final snapshot, from the start
//! and from a checkpoint near the end.
//!
//! The log is generated once in a temp dir: 10k services (HTTP and gRPC ports),
//! 100k endpoints, then churn as a Kubernetes registry produces it: endpoints
//! flipping health and weight, pods deleted and replaced under new keys, and now and
//! then a service relabelled (which touches its listeners and routes) — 1,000,000
//! events in all.
//!
//! Targets (issue 7): replay of 1M events to a final snapshot ≤ 3 s; replay from a
//! checkpoint near the end < 100 ms. Each measurement opens the log read-only,
//! folds to the head, and computes the final snapshot (hash included), as
//! `deltapilot replay --dump` does. Run with
//! `cargo bench -p deltapilot-benches --bench replay -- --warm-up-time 1 --measurement-time 10`.
//! `REPLAY_BENCH_DIR=DIR` keeps (and reuses) the generated log; `REPLAY_BENCH_PHASES=1`
//! first prints a breakdown (read, decode, fold, regeneration; checkpoint read,
//! restore, build). `REPLAY_BENCH_CPU=N` instead runs N replays from the start and
//! prints each one's wall time and its folding thread's CPU time, then their
//! minimum and median: the folding thread is the replay's critical path, and its
//! CPU time varies far less than wall time on a shared machine, so two builds can
//! be compared with it (interleaved) where criterion's means cannot tell them apart.
//! `REPLAY_BENCH_CP=N` runs N replays from the checkpoint in one process and
//! prints each one's wall time, their minimum and median, and the process's CPU
//! time per replay.

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use criterion::{Criterion, Throughput};
use deltapilot_benches::workload::{CHURN_1M, events};
use deltapilot_engine::checkpoint::{CheckpointStore, fingerprints, generator_id, load_verified};
use deltapilot_engine::replay::Replayer;
use deltapilot_engine::replay::drive::fold_to;
use deltapilot_log::file::{FileLog, FileLogOptions, FsyncPolicy};
use deltapilot_log::{EventLog, Position};
use deltapilot_xds::generate::GenOptions;
use deltapilot_xds::snapshot::Snapshot;

/// The allocator `deltapilot` itself runs with, so the figures are the binary's.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Events in the log.
const EVENTS: usize = CHURN_1M.events;
/// The checkpoint sits this many events before the head.
const TAIL: usize = 1_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Writes the log (and a checkpoint `TAIL` events before its head) into `dir`.
async fn prepare(dir: &Path) {
    let started = Instant::now();
    let log = FileLog::open(
        &dir.join("log"),
        FileLogOptions {
            fsync: FsyncPolicy::Never,
            ..Default::default()
        },
    )
    .expect("open log");
    for chunk in events(CHURN_1M).chunks(10_000) {
        log.append(chunk).await.expect("append");
    }
    let at = Position::single((EVENTS - TAIL) as u64);
    let mut r = Replayer::new(GenOptions::default());
    assert!(
        fold_to(&log, &mut r, &at, &mut |_| {})
            .await
            .expect("fold")
            .is_none()
    );
    let fps = fingerprints(&log, &at).await.expect("fingerprints");
    let id = generator_id(&GenOptions::default());
    let set = r.resources().clone();
    CheckpointStore::new(dir.join("checkpoints"), 3)
        .write(&at, &fps, r.model(), Some((&id, &set)))
        .expect("checkpoint");
    println!(
        "replay bench: wrote {EVENTS} events and a checkpoint at {at} in {:?}",
        started.elapsed()
    );
}

/// Opens the log read-only, starts from a checkpoint when `store` is given, folds
/// to the head and returns the final snapshot (its hash computed) with the
/// replayer. The caller drops them outside the measurement: freeing a 100k-entity
/// state is not part of reaching it (the CLI skips it at exit).
async fn replay(dir: &Path, store: Option<&CheckpointStore>) -> (Snapshot, Replayer) {
    // As `deltapilot replay` does: the checkpoint is read while the log opens.
    if let Some(store) = store {
        store.prefetch(None);
    }
    let log = FileLog::open_read_only(&dir.join("log")).expect("open");
    let head = log.head().await.expect("head");
    let mut r = match store {
        Some(store) => {
            let loaded = load_verified(store, &log, Some(&head)).await.expect("load");
            let (_, cp) = loaded.checkpoint.expect("a checkpoint");
            Replayer::from_checkpoint(cp, GenOptions::default())
        }
        None => Replayer::new(GenOptions::default()),
    };
    assert!(
        fold_to(&log, &mut r, &head, &mut |_| {})
            .await
            .expect("fold")
            .is_none()
    );
    (r.snapshot(), r)
}

/// Where the time of one replay from the start goes (printed, not asserted): the
/// phases `fold_to` runs, timed one by one, with fold batches of two sizes.
async fn phases(dir: &Path) {
    use deltapilot_model::fold::fold;
    use deltapilot_model::state::Touched;
    use deltapilot_xds::generate::Generator;
    let log = FileLog::open_read_only(&dir.join("log")).expect("open");
    let t = Instant::now();
    let mut recs = Vec::new();
    let mut at = 0u64;
    loop {
        let chunk = log.read(&Position::single(at), 4096).await.expect("read");
        if chunk.is_empty() {
            break;
        }
        at += chunk.len() as u64;
        recs.extend(chunk);
    }
    let read = t.elapsed();
    let t = Instant::now();
    let events: Vec<_> = recs
        .iter()
        .map(|r| (r.pos, r.decode().expect("decode")))
        .collect();
    let decode = t.elapsed();
    for batch in [4096usize, 65_536] {
        let t = Instant::now();
        let mut model = deltapilot_model::state::ModelState::default();
        let mut touched = Touched::default();
        for chunk in events.chunks(batch) {
            let out = fold(&model, chunk);
            touched.extend(out.touched);
            model = out.state;
        }
        let fold_t = t.elapsed();
        let t = Instant::now();
        let mut generator = Generator::new(GenOptions::default());
        let (set, _, _) = generator.regenerate(&Default::default(), &model, &touched);
        let gen_t = t.elapsed();
        println!(
            "replay bench phases: read {read:?}, decode {decode:?}, fold (batches of {batch}) {fold_t:?}, \
             one regeneration {gen_t:?} ({} clusters)",
            set.clusters.len()
        );
    }
}

/// Where the time of one replay from the checkpoint goes (printed, not asserted).
async fn checkpoint_phases(dir: &Path) {
    let log = FileLog::open_read_only(&dir.join("log")).expect("open");
    let head = log.head().await.expect("head");
    let store = CheckpointStore::new(dir.join("checkpoints"), 3);
    let t = Instant::now();
    let (path, cp) = load_verified(&store, &log, Some(&head))
        .await
        .expect("load")
        .checkpoint
        .expect("cp");
    let load = t.elapsed();
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let t = Instant::now();
    let mut r = Replayer::from_checkpoint(cp, GenOptions::default());
    assert!(
        fold_to(&log, &mut r, &head, &mut |_| {})
            .await
            .expect("fold")
            .is_none()
    );
    let fold = t.elapsed();
    let t = Instant::now();
    let _ = r.resources();
    let regen = t.elapsed();
    let t = Instant::now();
    let hash = r.snapshot().hash;
    let snap = t.elapsed();
    let t = Instant::now();
    drop(r);
    let dropped = t.elapsed();
    println!(
        "replay bench checkpoint phases: load and verify {load:?} ({size} bytes), fold the tail {fold:?}, \
         regenerate {regen:?}, snapshot hash {snap:?} ({hash:016x}), drop {dropped:?}"
    );
}

/// Nanoseconds this thread has run on a CPU, from `/proc/thread-self/schedstat`
/// (Linux; 0 elsewhere).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// Environment variable that makes this binary time `N` replays from the start on
/// the folding thread's CPU clock instead of running criterion.
const CPU_PROBE_ENV: &str = "REPLAY_BENCH_CPU";

/// `runs` replays from the start, each timed by wall clock and by the CPU time of
/// the thread that folds (the one `block_on` runs on; decoding and freeing run on
/// other threads). The previous replay's state is dropped before the next starts.
fn cpu_report(rt: &tokio::runtime::Runtime, dir: &Path, runs: usize) {
    let (mut walls, mut cpus) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let (t, c) = (Instant::now(), thread_cpu_ns());
        let done = rt.block_on(replay(dir, None));
        let (wall, cpu) = (
            t.elapsed().as_secs_f64(),
            (thread_cpu_ns() - c) as f64 / 1e9,
        );
        drop(done);
        println!("replay cpu: run {run}: wall {wall:.3} s, folding thread {cpu:.3} s");
        walls.push(wall);
        cpus.push(cpu);
    }
    let summary = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v.first().copied().unwrap_or(0.0), v[v.len() / 2])
    };
    let ((wall_min, wall_median), (cpu_min, cpu_median)) =
        (summary(&mut walls), summary(&mut cpus));
    println!(
        "replay cpu: {runs} runs from the start: wall min {wall_min:.3} s, median {wall_median:.3} s; \
         folding thread min {cpu_min:.3} s, median {cpu_median:.3} s"
    );
}

/// Environment variable that makes this binary time `N` replays from the
/// checkpoint in one process instead of running criterion.
const CHECKPOINT_PROBE_ENV: &str = "REPLAY_BENCH_CP";

/// CPU time of the whole process (every thread, live or exited), in clock ticks,
/// from `/proc/self/stat` (Linux; 0 elsewhere).
fn process_cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime: the 14th and 15th fields, the 12th and 13th after the name.
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

/// `runs` replays from the checkpoint in one process, each timed by wall clock,
/// with the process's CPU time per replay (all threads: the restore runs on
/// several). Unlike criterion, which keeps a batch's outputs alive, each replay
/// drops the previous one first, so later runs reuse freed memory: compare builds
/// with this, interleaved, and quote criterion for a one-shot replay.
fn checkpoint_report(rt: &tokio::runtime::Runtime, dir: &Path, runs: usize) {
    let store = CheckpointStore::new(dir.join("checkpoints"), 3);
    let mut walls = Vec::new();
    let ticks = process_cpu_ticks();
    for run in 0..runs {
        let t = Instant::now();
        let done = rt.block_on(replay(dir, Some(&store)));
        let wall = t.elapsed().as_secs_f64() * 1e3;
        drop(done);
        println!("replay checkpoint: run {run}: wall {wall:.1} ms");
        walls.push(wall);
    }
    // Clock ticks are 10 ms on Linux; the sum over all runs makes that fine enough.
    let cpu_ms = (process_cpu_ticks() - ticks) as f64 * 10.0 / runs.max(1) as f64;
    walls.sort_by(f64::total_cmp);
    println!(
        "replay checkpoint: {runs} runs: wall min {:.1} ms, median {:.1} ms; process CPU {cpu_ms:.0} ms per replay (drops included)",
        walls.first().copied().unwrap_or(0.0),
        walls.get(walls.len() / 2).copied().unwrap_or(0.0),
    );
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    // `REPLAY_BENCH_DIR=DIR` keeps the generated log in DIR (made on the first run,
    // reused after), to iterate without regenerating it.
    let kept = std::env::var_os("REPLAY_BENCH_DIR").map(std::path::PathBuf::from);
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = kept.clone().unwrap_or_else(|| tmp.path().to_owned());
    if kept.is_none() || !dir.join("checkpoints").is_dir() {
        rt.block_on(prepare(&dir));
    }
    // A positive count in one of the probe variables replaces criterion.
    let runs = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n > 0)
    };
    if let Some(n) = runs(CPU_PROBE_ENV) {
        cpu_report(&rt, &dir, n);
        return;
    }
    if let Some(n) = runs(CHECKPOINT_PROBE_ENV) {
        checkpoint_report(&rt, &dir, n);
        return;
    }
    // `REPLAY_BENCH_PHASES=1` prints where the time goes before measuring.
    if std::env::var_os("REPLAY_BENCH_PHASES").is_some() {
        rt.block_on(phases(&dir));
        rt.block_on(checkpoint_phases(&dir));
    }
    let store = CheckpointStore::new(dir.join("checkpoints"), 3);
    let t = Instant::now();
    let from_zero = rt.block_on(replay(&dir, None));
    let elapsed = t.elapsed();
    let from_zero_hash = from_zero.0.hash;
    drop(from_zero);
    println!("replay bench: one replay from the start took {elapsed:?}");
    let t = Instant::now();
    let from_cp = rt.block_on(replay(&dir, Some(&store)));
    let elapsed = t.elapsed();
    println!("replay bench: one replay from the checkpoint took {elapsed:?}");
    assert_eq!(
        from_zero_hash, from_cp.0.hash,
        "a checkpoint replays to the same snapshot hash"
    );
    drop(from_cp);

    let mut group = c.benchmark_group("replay_1m_events");
    group.sample_size(10);
    group.throughput(Throughput::Elements(EVENTS as u64));
    group.bench_function("from_start_to_final_snapshot", |b| {
        b.iter_with_large_drop(|| black_box(rt.block_on(replay(&dir, None))))
    });
    group.throughput(Throughput::Elements(TAIL as u64));
    group.bench_function("from_checkpoint_1000_before_head", |b| {
        b.iter_with_large_drop(|| black_box(rt.block_on(replay(&dir, Some(&store)))))
    });
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
