//! The fold: throughput of endpoint upserts into a registry of 10k services with
//! 100k endpoints, the cost of one 100-endpoint batch end to end (fold, ChangeSet,
//! regeneration, hash, publish), and the memory a snapshot takes and shares.
//!
//! Targets (issue "Spine 2/3"): fold ≥ 1M events/s on one core; a 100-endpoint
//! batch ≤ 1 ms; report bytes per endpoint at 100k endpoints and show that two
//! consecutive snapshots share structure. Run with
//! `cargo bench -p deltapilot-benches --bench fold -- --warm-up-time 1 --measurement-time 3`.
//! Each registry is built only when a benchmark that needs it is selected, and
//! `DELTAPILOT_FOLD_SKIP_MEMORY=1` skips the memory report, so that repeated runs
//! of one benchmark (`scripts/bench-pair.sh`) start measuring within seconds.
//!
//! Memory is measured as resident set size (`/proc/self/statm`) growth, because a
//! counting global allocator needs `unsafe impl GlobalAlloc`, which the workspace
//! forbids. RSS counts pages, so figures are approximate (± a few pages), and
//! allocator reuse of freed memory makes them a lower bound on what was allocated
//! (the small per-batch figures especially). The report is printed before the
//! timed groups.

use std::cell::OnceCell;
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput};
use deltapilot_engine::runner::Engine;
use deltapilot_log::{FOLLOW_BATCH_MAX, Record, RecordPos, encode_event};
use deltapilot_model::endpoint_from_proto;
use deltapilot_model::fold::fold;
use deltapilot_model::state::ModelState;
use deltapilot_proto::{self as pb, Event, SCHEMA_VERSION, event::Payload};
use deltapilot_xds::generate::GenOptions;

/// The allocator `deltapilot` itself runs with, so the figures are the binary's.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Registry sizes: (services, endpoints); the is the last.
const SIZES: [(usize, usize); 2] = [(1_000, 10_000), (10_000, 100_000)];

fn host(s: usize) -> String {
    format!("svc-{s}.ns-{}.svc.cluster.local", s % 50)
}

fn service_event(s: usize) -> Event {
    Event {
        schema_version: SCHEMA_VERSION,
        source: "k8s:bench".into(),
        generation: 1,
        observed_at_unix_micros: 0,
        payload: Some(Payload::ServiceUpsert(pb::ServiceUpsert {
            service: Some(pb::Service {
                hostname: host(s),
                namespace: format!("ns-{}", s % 50),
                ports: vec![
                    pb::Port {
                        name: "http".into(),
                        number: 8080,
                        protocol: pb::Protocol::Http as i32,
                    },
                    pb::Port {
                        name: "grpc".into(),
                        number: 9090,
                        protocol: pb::Protocol::Grpc as i32,
                    },
                ],
                labels: [("app".to_string(), format!("svc-{s}"))].into(),
                resolution: 0,
            }),
        })),
    }
}

/// Endpoint `i` of a registry with `services` services, at load-balancing `weight`
/// (benchmarks change the weight to make every upsert a real change).
fn endpoint_event(i: usize, services: usize, weight: u32) -> Event {
    let s = i % services;
    Event {
        schema_version: SCHEMA_VERSION,
        source: "k8s:bench".into(),
        generation: 1,
        observed_at_unix_micros: 0,
        payload: Some(Payload::EndpointUpsert(pb::EndpointUpsert {
            key: format!("ep/k8s/ns-{}/pod-{i}", s % 50),
            endpoint: Some(pb::Endpoint {
                address: format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255),
                ports: [("http".to_string(), 8080), ("grpc".to_string(), 9090)].into(),
                labels: [
                    ("app".to_string(), format!("svc-{s}")),
                    ("version".to_string(), "v1".to_string()),
                ]
                .into(),
                locality: Some(pb::Locality {
                    region: "us-east1".into(),
                    zone: format!("us-east1-{}", ["b", "c", "d"][i % 3]),
                    subzone: String::new(),
                }),
                weight,
                health: pb::Health::Healthy as i32,
                service_account: format!("spiffe://cluster.local/ns/ns-{}/sa/svc-{s}", s % 50),
                services: vec![pb::ServiceRef {
                    namespace: format!("ns-{}", s % 50),
                    hostname: host(s),
                }],
            }),
        })),
    }
}

fn positioned(events: Vec<Event>, start: u64) -> Vec<(RecordPos, Event)> {
    events
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let pos = RecordPos {
                partition: 0,
                offset: start + i as u64,
            };
            (pos, e)
        })
        .collect()
}

/// The registry: every service, then every endpoint (weight 1).
fn registry(services: usize, endpoints: usize) -> Vec<(RecordPos, Event)> {
    let events = (0..services)
        .map(service_event)
        .chain((0..endpoints).map(|i| endpoint_event(i, services, 1)))
        .collect();
    positioned(events, 0)
}

/// `n` endpoint upserts spread over the registry (a stride coprime with its size),
/// each changing the weight to `weight`.
fn churn(
    n: usize,
    services: usize,
    endpoints: usize,
    weight: u32,
    start: u64,
) -> Vec<(RecordPos, Event)> {
    let events = (0..n)
        .map(|k| endpoint_event((k * 7_919) % endpoints, services, weight))
        .collect();
    positioned(events, start)
}

fn fold_throughput(c: &mut Criterion) {
    let mut group = c.benchmark_group("fold_endpoint_upserts");
    let n = FOLLOW_BATCH_MAX;
    group.throughput(Throughput::Elements(n as u64));
    for (services, endpoints) in SIZES {
        // Built on first use, so that a filter selecting other benchmarks
        // skips this size's setup.
        let (base_cell, batch_cell) = (OnceCell::new(), OnceCell::new());
        let base = || {
            base_cell
                .get_or_init(|| fold(&ModelState::default(), &registry(services, endpoints)).state)
        };
        let batch = || {
            batch_cell
                .get_or_init(|| churn(n, services, endpoints, 2, (services + endpoints) as u64))
        };
        group.bench_function(BenchmarkId::new("fold", endpoints), |b| {
            let (base, batch) = (base(), batch());
            b.iter(|| black_box(fold(base, batch)))
        });
        // The share of the fold that is payload validation and conversion.
        group.bench_function(BenchmarkId::new("convert_only", endpoints), |b| {
            let batch = batch();
            b.iter(|| {
                for (_, e) in batch {
                    if let Some(Payload::EndpointUpsert(u)) = &e.payload
                        && let Some(ep) = &u.endpoint
                    {
                        let _ = black_box(endpoint_from_proto(&u.key, ep));
                    }
                }
            })
        });
        let records = OnceCell::new();
        group.bench_function(BenchmarkId::new("decode_and_fold", endpoints), |b| {
            let base = base();
            let records: &Vec<Record> = records.get_or_init(|| {
                batch()
                    .iter()
                    .map(|(pos, e)| Record {
                        pos: *pos,
                        bytes: encode_event(e).into(),
                    })
                    .collect()
            });
            b.iter(|| {
                let events: Vec<(RecordPos, Event)> = records
                    .iter()
                    .filter_map(|r| r.decode().ok().map(|e| (r.pos, e)))
                    .collect();
                black_box(fold(base, &events))
            })
        });
    }
    group.finish();
}

fn batch_of_100(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch_100_endpoints");
    group.throughput(Throughput::Elements(100));
    for (services, endpoints) in SIZES {
        let start = (services + endpoints) as u64;
        // Alternate two batches so that every step really changes 100 endpoints.
        let batches = [
            churn(100, services, endpoints, 2, start),
            churn(100, services, endpoints, 1, start + 100),
        ];
        // Built on first use (see `fold_throughput`).
        let mut engine: Option<Engine> = None;
        let registry_engine = || {
            let mut engine = Engine::new(GenOptions::default());
            engine.apply_events(&registry(services, endpoints));
            engine
        };
        group.bench_function(BenchmarkId::new("fold_only", endpoints), |b| {
            let base = engine.get_or_insert_with(registry_engine).model().clone();
            b.iter(|| black_box(fold(&base, &batches[0])))
        });
        let mut flip = 0usize;
        group.bench_function(
            BenchmarkId::new("fold_regenerate_publish", endpoints),
            |b| {
                let engine = engine.get_or_insert_with(registry_engine);
                b.iter(|| {
                    flip ^= 1;
                    black_box(engine.apply_events(&batches[flip]))
                })
            },
        );
    }
    group.finish();
}

/// Resident set size in bytes, from `/proc/self/statm` (Linux); 0 elsewhere.
fn rss_bytes() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Environment variable that skips the memory report (three child processes,
/// several seconds), for repeated timing runs such as `scripts/bench-pair.sh`.
const SKIP_MEMORY_ENV: &str = "DELTAPILOT_FOLD_SKIP_MEMORY";

/// Environment variable that makes this binary run one memory measurement in a
/// fresh process (a fresh heap: no freed memory to reuse) and print its result.
const MEMORY_PROBE_ENV: &str = "DELTAPILOT_FOLD_MEMORY_PROBE";

/// One measurement, run in a child process: RSS growth (bytes) of building the
/// model alone (`model`) or a whole engine snapshot, model plus xDS resources
/// (`engine`), for the largest size; or, for `sharing`, the growth of each of five
/// following model states (one 100-endpoint batch each) with all earlier states
/// kept alive.
fn memory_probe(what: &str) -> Vec<u64> {
    let (services, endpoints) = SIZES[SIZES.len() - 1];
    let events = registry(services, endpoints);
    let before = rss_bytes();
    match what {
        "engine" => {
            let mut engine = Engine::new(GenOptions::default());
            engine.apply_events(&events);
            let grew = rss_bytes().saturating_sub(before);
            black_box(engine.current());
            vec![grew]
        }
        "sharing" => {
            let mut alive = vec![fold(&ModelState::default(), &events).state];
            let start = (services + endpoints) as u64;
            let mut extra = Vec::new();
            for round in 0..5u64 {
                let batch = churn(
                    100,
                    services,
                    endpoints,
                    2 + round as u32,
                    start + round * 100,
                );
                let at = rss_bytes();
                let next = fold(alive.last().unwrap_or(&ModelState::default()), &batch).state;
                extra.push(rss_bytes().saturating_sub(at));
                alive.push(next);
            }
            extra
        }
        _ => {
            let model = fold(&ModelState::default(), &events).state;
            let grew = rss_bytes().saturating_sub(before);
            black_box(model);
            vec![grew]
        }
    }
}

/// Runs [`memory_probe`] in a child process of this binary.
fn measure_in_child(what: &str) -> Vec<u64> {
    let Ok(exe) = std::env::current_exe() else {
        return Vec::new();
    };
    let out = std::process::Command::new(exe)
        .env(MEMORY_PROBE_ENV, what)
        .output();
    let Ok(out) = out else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect()
}

/// Prints the memory the folded model takes per endpoint at 100k endpoints, what
/// each following state adds while all earlier ones stay alive (structural
/// sharing), and the whole engine snapshot (model plus xDS resources).
fn memory_report() {
    let (services, endpoints) = SIZES[SIZES.len() - 1];
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let per = |b: u64| b as f64 / endpoints as f64;
    let model = measure_in_child("model").first().copied().unwrap_or(0);
    let engine = measure_in_child("engine").first().copied().unwrap_or(0);
    let sharing: Vec<u64> = measure_in_child("sharing")
        .iter()
        .map(|b| b / 1024)
        .collect();
    println!(
        "fold memory ({services} services, {endpoints} endpoints, RSS growth in a fresh process):\n  \
         model state: {:.1} MiB = {:.0} bytes per endpoint\n  \
         engine snapshot (model + xDS resources): {:.1} MiB = {:.0} bytes per endpoint\n  \
         five following model states, one 100-endpoint batch each, all kept alive: +{sharing:?} KiB each",
        mib(model),
        per(model),
        mib(engine),
        per(engine),
    );
}

/// Nanoseconds this thread has run on a CPU, from `/proc/thread-self/schedstat`
/// (Linux; 0 elsewhere). Unlike wall time it does not grow while other processes
/// hold the cores, so it stays meaningful on a shared machine.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// Minor page faults of this process so far, from `/proc/self/stat` (0 elsewhere).
fn minor_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            rest.split_whitespace().nth(7)?.parse().ok()
        })
        .unwrap_or(0)
}

/// Environment variable that makes this binary print the fold's on-CPU cost per
/// event instead of running criterion.
const CPU_PROBE_ENV: &str = "DELTAPILOT_FOLD_CPU";

/// On-CPU nanoseconds per endpoint upsert, for the live batch size
/// (`FOLLOW_BATCH_MAX`) and the replay's (64k), split into the fold itself and
/// releasing the state it superseded (which the runner and replay can leave to
/// another thread).
fn cpu_report() {
    // `DELTAPILOT_FOLD_CPU=profile` repeats the largest case for a profiler.
    let profile = std::env::var(CPU_PROBE_ENV).is_ok_and(|v| v == "profile");
    const ROUNDS: usize = 12;
    let sizes = if profile { &SIZES[1..] } else { &SIZES[..] };
    for &(services, endpoints) in sizes {
        let base = fold(&ModelState::default(), &registry(services, endpoints)).state;
        for n in [FOLLOW_BATCH_MAX, 65_536] {
            let batches: Vec<_> = (0..ROUNDS)
                .map(|r| {
                    let start = (services + endpoints + r * n) as u64;
                    churn(n, services, endpoints, 2 + r as u32, start)
                })
                .collect();
            let (mut fold_ns, mut drop_ns, mut faults) = (0u64, 0u64, 0u64);
            let mut state = base.clone();
            let passes = if profile { 8 } else { 1 };
            for batch in std::iter::repeat_n(&batches, passes).flatten() {
                let f = minor_faults();
                let t = thread_cpu_ns();
                let next = fold(&state, batch).state;
                let t2 = thread_cpu_ns();
                faults += minor_faults() - f;
                drop(std::mem::replace(&mut state, next));
                fold_ns += t2 - t;
                drop_ns += thread_cpu_ns() - t2;
            }
            let events = (ROUNDS * n * passes) as f64;
            println!(
                "fold cpu: {endpoints} endpoints, batch {n}: fold {:.0} ns/event ({:.2} M events/s), \
                 releasing the superseded state {:.0} ns/event; {:.3} page faults/event",
                fold_ns as f64 / events,
                events / fold_ns as f64 * 1e3,
                drop_ns as f64 / events,
                faults as f64 / events,
            );
        }
    }
}

fn main() {
    // As `deltapilot run` does before it starts the engine, so that the fold
    // is measured as the binary runs it (and the memory probes, which inherit
    // the setting, count the bytes the binary would hold).
    if let Err(e) = deltapilot_server::process::disable_transparent_huge_pages() {
        eprintln!(
            "could not turn transparent huge pages off ({e}); figures will differ from the binary's"
        );
    }
    if std::env::var_os(CPU_PROBE_ENV).is_some() {
        cpu_report();
        return;
    }
    if let Ok(what) = std::env::var(MEMORY_PROBE_ENV) {
        let figures: Vec<String> = memory_probe(&what).iter().map(u64::to_string).collect();
        println!("{}", figures.join(" "));
        return;
    }
    if std::env::var_os(SKIP_MEMORY_ENV).is_none() {
        memory_report();
    }
    let mut c = Criterion::default().configure_from_args();
    fold_throughput(&mut c);
    batch_of_100(&mut c);
    c.final_summary();
}
