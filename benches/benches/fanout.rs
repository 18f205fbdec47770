//! In-process fan-out of one endpoint change to 1k and 10k delta streams: the push
//! path after the fold, without sockets.
//!
//! Setup: a mesh of 100 services × 10 endpoints folded by the real engine, and N
//! tasks each owning a synced `deltapilot_server::xds::delta::DeltaStream` (the
//! server's per-stream state machine: CDS and LDS wildcard, EDS and RDS by name,
//! every response ACKed), waiting on its `SnapshotReader::changed`.
//!
//! Each iteration publishes the next snapshot (one endpoint's weight flipped:
//! exactly one ClusterLoadAssignment changed) and waits until every task has
//! - `delta_stream`: noted the snapshot, computed its next response with the
//!   server's state machine, encoded it with the server's wire encoder into a
//!   per-stream buffer, and ACKed it;
//! - `wake_and_clone` (the floor): woken and cloned the changed resource's
//!   `Bytes`, nothing else.
//!
//! Throughput is in streams per second. Run with
//! `cargo bench -p deltapilot-benches --bench fanout -- --warm-up-time 2 --measurement-time 5`.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_main};
use deltapilot_engine::runner::Engine;
use deltapilot_log::RecordPos;
use deltapilot_proto::{self as pb, Event, SCHEMA_VERSION, event::Payload};
use deltapilot_server::xds::Limits;
use deltapilot_server::xds::delta::DeltaStream;
use deltapilot_server::xds::request::DeltaRequest;
use deltapilot_xds::ResourceType;
use deltapilot_xds::generate::GenOptions;
use deltapilot_xds::snapshot::{Snapshot, SnapshotReader, SnapshotWriter};
use tokio::sync::Notify;

const SERVICES: usize = 100;
const ENDPOINTS_PER_SERVICE: usize = 10;

fn event(payload: Payload) -> Event {
    Event {
        schema_version: SCHEMA_VERSION,
        source: "bench".into(),
        generation: 1,
        observed_at_unix_micros: 0,
        payload: Some(payload),
    }
}

fn host(s: usize) -> String {
    format!("svc-{s}.ns-{}.svc.cluster.local", s % 10)
}

fn endpoint(s: usize, k: usize, weight: u32) -> Event {
    let i = s * ENDPOINTS_PER_SERVICE + k;
    event(Payload::EndpointUpsert(pb::EndpointUpsert {
        key: format!("ep/bench/{s}/{k}"),
        endpoint: Some(pb::Endpoint {
            address: format!("10.0.{}.{}", i >> 8, i & 255),
            weight,
            services: vec![pb::ServiceRef {
                namespace: format!("ns-{}", s % 10),
                hostname: host(s),
            }],
            ..Default::default()
        }),
    }))
}

fn mesh_events() -> Vec<Event> {
    let mut out = Vec::new();
    for s in 0..SERVICES {
        out.push(event(Payload::ServiceUpsert(pb::ServiceUpsert {
            service: Some(pb::Service {
                hostname: host(s),
                namespace: format!("ns-{}", s % 10),
                ports: vec![pb::Port {
                    name: "http".into(),
                    number: 8080,
                    protocol: pb::Protocol::Http as i32,
                }],
                ..Default::default()
            }),
        })));
        out.extend((0..ENDPOINTS_PER_SERVICE).map(|k| endpoint(s, k, 1)));
    }
    out
}

fn apply(engine: &mut Engine, events: Vec<Event>, offset: &mut u64) -> Arc<Snapshot> {
    let batch: Vec<(RecordPos, Event)> = events
        .into_iter()
        .map(|e| {
            *offset += 1;
            (
                RecordPos {
                    partition: 0,
                    offset: *offset,
                },
                e,
            )
        })
        .collect();
    engine.apply_events(&batch);
    engine.current()
}

/// The synced mesh and the two states one endpoint flips between, each with the
/// change set that leads to it.
struct States {
    synced: Arc<Snapshot>,
    flip: [Arc<Snapshot>; 2],
}

fn states() -> States {
    let mut engine = Engine::new(GenOptions::default());
    let mut offset = 0;
    let synced = apply(&mut engine, mesh_events(), &mut offset);
    let a = apply(&mut engine, vec![endpoint(7, 3, 2)], &mut offset);
    let b = apply(&mut engine, vec![endpoint(7, 3, 1)], &mut offset);
    for s in [&a, &b] {
        let (_, cs) = s.recent.back().expect("a change");
        assert_eq!(cs.of(ResourceType::Endpoint).upserted.len(), 1);
        assert!(cs.of(ResourceType::Cluster).is_empty() && cs.of(ResourceType::Route).is_empty());
    }
    States {
        synced,
        flip: [a, b],
    }
}

/// Snapshot `seq` of the flip sequence: resources of one of the two states, and
/// exactly the change set that leads there from `seq - 1`.
fn flipped(st: &States, seq: u64) -> Snapshot {
    let src = &st.flip[((seq - st.synced.seq - 1) % 2) as usize];
    let (_, cs) = src.recent.back().expect("a change").clone();
    Snapshot {
        seq,
        position: src.position.clone(),
        hash: src.hash,
        model: src.model.clone(),
        resources: src.resources.clone(),
        recent: [(seq, cs)].into_iter().collect(),
        observed_at_micros: 0,
        views: src.views.clone(),
    }
}

/// Sends a delta request (subscription and/or ACK) to `st`, decoded the way the
/// server decodes it (`DeltaRequest`: strings left as bytes, `node` undecoded).
fn request(
    st: &mut DeltaStream,
    snap: &Snapshot,
    t: ResourceType,
    sub: Vec<String>,
    nonce: &str,
    node_id: Option<String>,
) {
    let r = DeltaRequest {
        type_url: t.type_url().into(),
        subscribe: sub.into_iter().map(Into::into).collect(),
        response_nonce: nonce.to_owned().into(),
        // `Node { id = 1 }`, encoded by hand: the benches crate has no envoy-types.
        node: node_id.map(|id| {
            let mut b = vec![0x0a, u8::try_from(id.len()).expect("short id")];
            b.extend_from_slice(id.as_bytes());
            b.into()
        }),
        ..Default::default()
    };
    st.on_request(&r, snap).expect("request accepted");
}

/// A stream subscribed like Envoy and holding the whole mesh.
fn synced_stream(id: u64, snap: &Snapshot) -> DeltaStream {
    let mut st = DeltaStream::new(None, Limits::default(), snap);
    let node = format!(
        "sidecar~10.1.{}.{}~p-{id}.ns~ns.svc.cluster.local",
        id >> 8 & 255,
        id & 255
    );
    request(
        &mut st,
        snap,
        ResourceType::Cluster,
        Vec::new(),
        "",
        Some(node),
    );
    let eds: Vec<String> = snap
        .resources
        .clusters
        .keys()
        .map(|k| k.to_string())
        .collect();
    let rds: Vec<String> = snap
        .resources
        .routes
        .keys()
        .map(|k| k.to_string())
        .collect();
    request(&mut st, snap, ResourceType::Endpoint, eds, "", None);
    request(&mut st, snap, ResourceType::Listener, Vec::new(), "", None);
    request(&mut st, snap, ResourceType::Route, rds, "", None);
    for _ in 0..16 {
        let Some(p) = st.next_response(snap) else {
            break;
        };
        request(&mut st, snap, p.t, Vec::new(), &p.out.nonce, None);
    }
    assert_eq!(st.in_flight(), 0, "synced");
    st
}

#[derive(Clone, Copy)]
enum Work {
    DeltaStream,
    WakeAndClone,
}

struct Fleet {
    writer: SnapshotWriter,
    done: Arc<AtomicUsize>,
    all_done: Arc<Notify>,
    seq: u64,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn spawn_fleet(rt: &tokio::runtime::Runtime, st: &States, n: usize, work: Work) -> Fleet {
    let (writer, reader) = SnapshotWriter::new((*st.synced).clone());
    let done = Arc::new(AtomicUsize::new(0));
    let all_done = Arc::new(Notify::new());
    let changed: Arc<str> = st.flip[0]
        .recent
        .back()
        .and_then(|(_, cs)| cs.of(ResourceType::Endpoint).upserted.first().cloned())
        .expect("changed name");
    let tasks = (0..n)
        .map(|i| {
            let mut reader: SnapshotReader = reader.clone();
            let (done, all_done, changed) = (done.clone(), all_done.clone(), changed.clone());
            let mut stream =
                matches!(work, Work::DeltaStream).then(|| synced_stream(i as u64, &st.synced));
            rt.spawn(async move {
                let mut buf: Vec<u8> = Vec::with_capacity(4096);
                while let Some(snap) = reader.changed().await {
                    match &mut stream {
                        Some(s) => {
                            s.on_snapshot(&snap);
                            while let Some(p) = s.next_response(&snap) {
                                buf.clear();
                                p.out.encode(&mut buf);
                                black_box(&buf);
                                request(s, &snap, p.t, Vec::new(), &p.out.nonce, None);
                            }
                        }
                        None => {
                            let r = snap
                                .resources
                                .endpoints
                                .get(&changed)
                                .map(|r| r.bytes.clone());
                            black_box(r);
                        }
                    }
                    if done.fetch_add(1, Ordering::AcqRel) + 1 == n {
                        all_done.notify_one();
                    }
                }
            })
        })
        .collect();
    Fleet {
        writer,
        done,
        all_done,
        seq: st.synced.seq,
        tasks,
    }
}

fn fanout(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let st = states();
    let mut g = c.benchmark_group("fanout_one_endpoint_change");
    g.sample_size(10);
    for n in [1_000usize, 10_000] {
        g.throughput(Throughput::Elements(n as u64));
        for (name, work) in [
            ("delta_stream", Work::DeltaStream),
            ("wake_and_clone", Work::WakeAndClone),
        ] {
            let mut fleet = spawn_fleet(&rt, &st, n, work);
            g.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        fleet.seq += 1;
                        fleet.done.store(0, Ordering::Release);
                        let next = flipped(&st, fleet.seq);
                        let start = Instant::now();
                        fleet.writer.publish(next);
                        rt.block_on(fleet.all_done.notified());
                        total += start.elapsed();
                    }
                    total
                })
            });
            drop(fleet.writer);
            for t in fleet.tasks {
                let _ = rt.block_on(t);
            }
        }
    }
    g.finish();
}

/// The fan-out benchmarks as one criterion group (written out: the function
/// `criterion_group!` generates has no doc comment).
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    fanout(&mut c);
}

criterion_main!(benches);
