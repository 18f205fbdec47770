//! Embedded event log throughput: appending batches of ~200-byte events with the
//! default `fsync=interval` (batches of 100 and 1,000), reading raw records back
//! sequentially (1,000 and 4,096 per read call), and opening a multi-segment log
//! read-only (alone, and followed by reading its last 1,000 records, as a replay
//! from a checkpoint near the end does).
//!
//! Targets (issue "Spine 1/3"): append ≥ 500k events/s in batches of 1,000; read
//! ≥ 2M events/s. Opening read-only should cost the last segment, not the whole
//! log (issue 7: replay from a checkpoint near the end < 100 ms). Run with
//! `cargo bench -p deltapilot-benches --bench log -- --warm-up-time 1 --measurement-time 5`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_main};
use deltapilot_log::file::{FileLog, FileLogOptions, FsyncPolicy};
use deltapilot_log::{EventLog, FOLLOW_BATCH_MAX, Position, encode_event};
use deltapilot_proto::{Endpoint, EndpointUpsert, Event, SCHEMA_VERSION, event};

/// Encoded size of each benchmark event, as in the issue.
const EVENT_BYTES: usize = 200;
/// Events in the log the read benchmark scans.
const READ_LOG_EVENTS: u64 = 200_000;
/// Events in the log the open benchmark opens: about 220 MB, so four segments of
/// the default 64 MiB, the last one partly filled (the shape of the replay
/// benchmark's log). Writing it takes a few seconds.
const OPEN_LOG_EVENTS: u64 = 1_000_000;
/// Records the open-then-read benchmark reads from the end of the log.
const OPEN_TAIL_READ: u64 = 1_000;

/// An endpoint upsert of about [`EVENT_BYTES`] encoded bytes.
fn endpoint_event(i: u64) -> Event {
    let mut ep = Endpoint {
        address: format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255),
        weight: 1,
        service_account: "reviews".into(),
        ..Default::default()
    };
    ep.ports.insert("http".into(), 9080);
    let mk = |ep: Endpoint| Event {
        schema_version: SCHEMA_VERSION,
        source: "bench".into(),
        generation: 1,
        observed_at_unix_micros: 1_700_000_000_000_000,
        payload: Some(event::Payload::EndpointUpsert(EndpointUpsert {
            key: format!("ep/k8s/default/reviews-{i}"),
            endpoint: Some(ep),
        })),
    };
    let pad = EVENT_BYTES.saturating_sub(encode_event(&mk(ep.clone())).len() + 8);
    ep.labels.insert("app".into(), "r".repeat(pad));
    mk(ep)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn append(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("log_append");
    for batch in [100u64, 1_000] {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = FileLogOptions {
            fsync: FsyncPolicy::Interval(FsyncPolicy::DEFAULT_INTERVAL),
            ..FileLogOptions::default()
        };
        let log = FileLog::open(dir.path(), opts).expect("open log");
        let events: Vec<Event> = (0..batch).map(endpoint_event).collect();
        group.throughput(Throughput::Elements(batch));
        group.bench_with_input(
            BenchmarkId::new("fsync_interval", batch),
            &events,
            |b, events| {
                b.to_async(&rt)
                    .iter(|| async { black_box(log.append(events).await.expect("append")) })
            },
        );
    }
    group.finish();
}

fn read(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = FileLog::open(dir.path(), FileLogOptions::default()).expect("open log");
    rt.block_on(async {
        let events: Vec<Event> = (0..1_000).map(endpoint_event).collect();
        for _ in 0..READ_LOG_EVENTS / 1_000 {
            log.append(&events).await.expect("append");
        }
    });
    let mut group = c.benchmark_group("log_read");
    group.throughput(Throughput::Elements(READ_LOG_EVENTS));
    for limit in [1_000, FOLLOW_BATCH_MAX] {
        group.bench_with_input(
            BenchmarkId::new("sequential", limit),
            &limit,
            |b, &limit| {
                b.to_async(&rt).iter(|| async {
                    let mut from = 0;
                    while from < READ_LOG_EVENTS {
                        let recs = log
                            .read(&Position::single(from), limit)
                            .await
                            .expect("read");
                        from += recs.len() as u64;
                        black_box(recs);
                    }
                })
            },
        );
    }
    group.finish();
}

fn open_read_only(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let log = FileLog::open(dir.path(), FileLogOptions::default()).expect("open log");
        rt.block_on(async {
            let events: Vec<Event> = (0..1_000).map(endpoint_event).collect();
            for _ in 0..OPEN_LOG_EVENTS / 1_000 {
                log.append(&events).await.expect("append");
            }
        });
    }
    let mut group = c.benchmark_group("log_open");
    group.bench_function(BenchmarkId::new("read_only", OPEN_LOG_EVENTS), |b| {
        b.iter(|| black_box(FileLog::open_read_only(dir.path()).expect("open read-only")))
    });
    let from = Position::single(OPEN_LOG_EVENTS - OPEN_TAIL_READ);
    group.bench_function(
        BenchmarkId::new("read_only_then_read_tail", OPEN_LOG_EVENTS),
        |b| {
            b.to_async(&rt).iter(|| async {
                let log = FileLog::open_read_only(dir.path()).expect("open read-only");
                let recs = log
                    .read(&from, OPEN_TAIL_READ as usize)
                    .await
                    .expect("read");
                assert_eq!(recs.len() as u64, OPEN_TAIL_READ);
                black_box(recs)
            })
        },
    );
    group.finish();
}

/// The log benchmarks as one criterion group (written out rather than with
/// `criterion_group!`, whose generated function has no doc comment).
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    append(&mut c);
    read(&mut c);
    open_read_only(&mut c);
}

criterion_main!(benches);
