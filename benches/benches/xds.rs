//! xDS generation and per-proxy diffs: what one batch costs after the fold.
//!
//! - `xds_regenerate_100_endpoints`: `Generator::regenerate` (change set included)
//!   after a batch of 100 endpoint changes spread over 100 services, and the same
//!   with the fold of that batch in front. Target (issue "Spine 2/3"): ≤ 1 ms.
//! - `xds_build_all`: encoding every resource from scratch (throughput in
//!   resources), i.e. the cost of one encode per resource version.
//! - `xds_diff_one_endpoint_change`: one proxy's diff after one endpoint changed,
//!   by total snapshot size (1k, 10k, 100k resources): `diff_changed` (live push,
//!   O(changed): flat) next to the full `diff` (reconnect, O(view): grows).
//! - `resource_map_shared_write`: one write into a map that shares everything
//!   with another (a delta stream's record of what its proxy holds, shared with
//!   the snapshot's map until the next push), then dropping it, by map size:
//!   the path copy every stream pays per push.
//!
//! Run with
//! `cargo bench -p deltapilot-benches --bench xds -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_main};
use deltapilot_log::RecordPos;
use deltapilot_model::ProxyType;
use deltapilot_model::fold::fold;
use deltapilot_model::state::{ModelState, Touched};
use deltapilot_proto::{self as pb, Event, SCHEMA_VERSION, event::Payload};
use deltapilot_xds::generate::{GenOptions, Generator, build_all};
use deltapilot_xds::view::{diff, diff_changed, resources_for};
use deltapilot_xds::{ChangeSet, Resource, ResourceMap, ResourceSet, ResourceType};

const SOURCE: &str = "k8s:bench";

fn host(s: usize) -> String {
    format!("svc-{s}.ns-{}.svc.cluster.local", s % 50)
}

fn event(payload: Payload) -> Event {
    Event {
        schema_version: SCHEMA_VERSION,
        source: SOURCE.into(),
        generation: 1,
        observed_at_unix_micros: 0,
        payload: Some(payload),
    }
}

/// A service with the given ports (all HTTP-like: each adds a cluster, an
/// assignment, a gRPC listener and route, and a virtual host to the port's route).
fn service_event(s: usize, ports: &[(&str, u32, pb::Protocol)]) -> Event {
    event(Payload::ServiceUpsert(pb::ServiceUpsert {
        service: Some(pb::Service {
            hostname: host(s),
            namespace: format!("ns-{}", s % 50),
            ports: ports
                .iter()
                .map(|(name, number, protocol)| pb::Port {
                    name: (*name).into(),
                    number: *number,
                    protocol: *protocol as i32,
                })
                .collect(),
            labels: Default::default(),
            resolution: 0,
        }),
    }))
}

/// Endpoint `i`, belonging to service `i % services`, at `weight`.
fn endpoint_event(i: usize, services: usize, weight: u32) -> Event {
    let s = i % services;
    event(Payload::EndpointUpsert(pb::EndpointUpsert {
        key: format!("ep/k8s/ns-{}/pod-{i}", s % 50),
        endpoint: Some(pb::Endpoint {
            address: format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255),
            ports: Default::default(),
            labels: Default::default(),
            locality: Some(pb::Locality {
                region: "r1".into(),
                zone: format!("z{}", i % 3),
                subzone: String::new(),
            }),
            weight,
            health: pb::Health::Healthy as i32,
            service_account: String::new(),
            services: vec![pb::ServiceRef {
                namespace: format!("ns-{}", s % 50),
                hostname: host(s),
            }],
        }),
    }))
}

fn fold_events(state: &ModelState, events: &[Event]) -> (ModelState, Touched) {
    let batch: Vec<(RecordPos, Event)> = events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let pos = RecordPos {
                partition: 0,
                offset: i as u64,
            };
            (pos, e.clone())
        })
        .collect();
    let out = fold(state, &batch);
    assert!(out.skipped.is_empty(), "bench events all apply");
    (out.state, out.touched)
}

/// A registry of `services` services with `ports` each and `endpoints` endpoints.
fn registry(services: usize, endpoints: usize, ports: &[(&str, u32, pb::Protocol)]) -> ModelState {
    let mut events: Vec<Event> = (0..services).map(|s| service_event(s, ports)).collect();
    events.extend((0..endpoints).map(|i| endpoint_event(i, services, 1)));
    fold_events(&ModelState::default(), &events).0
}

/// 100 endpoint changes on 100 different services (the worst spread for one batch).
fn batch_of_100(services: usize, weight: u32) -> Vec<Event> {
    let stride = (services / 100).max(1);
    (0..100)
        .map(|k| endpoint_event(k * stride, services, weight))
        .collect()
}

const WEB: [(&str, u32, pb::Protocol); 2] = [
    ("http", 8080, pb::Protocol::Http),
    ("grpc", 9090, pb::Protocol::Grpc),
];

fn regenerate_100_endpoints(c: &mut Criterion) {
    let mut g = c.benchmark_group("xds_regenerate_100_endpoints");
    for (services, endpoints) in [(1_000usize, 10_000usize), (10_000, 100_000)] {
        let base = registry(services, endpoints, &WEB);
        let (mut generator, base_set, _) = Generator::build(&base, GenOptions::default());
        // Two states 100 endpoints apart; every regeneration flips between them, so
        // each one is a real change of 100 endpoints (200 assignments).
        let (changed, there) = fold_events(&base, &batch_of_100(services, 2));
        let (back_state, back) = fold_events(&changed, &batch_of_100(services, 1));
        let (changed_set, cs, _) = generator.regenerate(&base_set, &changed, &there);
        assert_eq!(cs.of(ResourceType::Endpoint).upserted.len(), 200);
        assert!(cs.of(ResourceType::Route).is_empty() && cs.of(ResourceType::Cluster).is_empty());
        let (mut set, _, _) = generator.regenerate(&changed_set, &back_state, &back);
        g.throughput(Throughput::Elements(100));
        let id = format!("{services}svc_{endpoints}ep");

        let mut forward = true;
        g.bench_function(BenchmarkId::new("regenerate", &id), |b| {
            b.iter(|| {
                let (model, touched) = if forward {
                    (&changed, &there)
                } else {
                    (&back_state, &back)
                };
                let (next, changes, _) = generator.regenerate(&set, model, touched);
                set = next;
                forward = !forward;
                black_box(changes)
            })
        });

        let batches = [batch_of_100(services, 2), batch_of_100(services, 1)];
        let positioned: Vec<Vec<(RecordPos, Event)>> = batches
            .iter()
            .map(|b| {
                b.iter()
                    .enumerate()
                    .map(|(i, e)| {
                        (
                            RecordPos {
                                partition: 0,
                                offset: i as u64,
                            },
                            e.clone(),
                        )
                    })
                    .collect()
            })
            .collect();
        let mut state = if forward {
            back_state.clone()
        } else {
            changed.clone()
        };
        let mut k = usize::from(!forward);
        g.bench_function(BenchmarkId::new("fold_and_regenerate", &id), |b| {
            b.iter(|| {
                let out = fold(&state, &positioned[k]);
                let (next, changes, _) = generator.regenerate(&set, &out.state, &out.touched);
                set = next;
                state = out.state;
                k ^= 1;
                black_box(changes)
            })
        });
    }
    g.finish();
}

fn build_all_resources(c: &mut Criterion) {
    let mut g = c.benchmark_group("xds_build_all");
    g.sample_size(10);
    for (services, endpoints) in [(1_000usize, 10_000usize), (10_000, 100_000)] {
        let model = registry(services, endpoints, &WEB);
        let (set, _) = build_all(&model, &GenOptions::default());
        let count = set.clusters.len()
            + set.endpoints.len()
            + set.sidecar_listeners.len()
            + set.grpc_listeners.len()
            + set.routes.len();
        let bytes: usize = [
            &set.clusters,
            &set.endpoints,
            &set.sidecar_listeners,
            &set.grpc_listeners,
            &set.routes,
        ]
        .iter()
        .flat_map(|m| m.values())
        .map(|r| r.bytes.len())
        .sum();
        println!(
            "xds_build_all {services} services / {endpoints} endpoints: {count} resources, {:.1} MiB encoded, \
             route `8080` {} KiB",
            bytes as f64 / (1024.0 * 1024.0),
            set.routes.get("8080").map_or(0, |r| r.bytes.len() / 1024)
        );
        g.throughput(Throughput::Elements(count as u64));
        g.bench_function(
            BenchmarkId::from_parameter(format!("{services}svc_{endpoints}ep")),
            |b| b.iter(|| black_box(build_all(&model, &GenOptions::default()))),
        );
    }
    g.finish();
}

/// What an in-sync delta stream holds: the server shares the snapshot's map as
/// its record of the proxy's resources (`DeltaStream`'s `known`), so that is
/// what a live push's diff reads.
fn known_of(view: &ResourceMap) -> ResourceMap {
    view.clone()
}

/// Total resources in `set` (both listener flavours).
fn total(set: &ResourceSet) -> usize {
    set.clusters.len()
        + set.endpoints.len()
        + set.sidecar_listeners.len()
        + set.grpc_listeners.len()
        + set.routes.len()
}

fn diff_one_endpoint_change(c: &mut Criterion) {
    let mut g = c.benchmark_group("xds_diff_one_endpoint_change");
    // One HTTP port per service: 4 resources each (cluster, assignment, gRPC
    // listener and route) plus the port's listener and route.
    const ONE: [(&str, u32, pb::Protocol); 1] = [("http", 8080, pb::Protocol::Http)];
    for services in [250usize, 2_500, 25_000] {
        let base = registry(services, services, &ONE);
        let (mut generator, set, _) = Generator::build(&base, GenOptions::default());
        let (changed, touched) = fold_events(&base, &[endpoint_event(services / 2, services, 7)]);
        let (next, changes, _): (ResourceSet, ChangeSet, _) =
            generator.regenerate(&set, &changed, &touched);
        assert_eq!(changes.of(ResourceType::Endpoint).upserted.len(), 1);
        let pt = ProxyType::Sidecar;
        let known: Vec<ResourceMap> = ResourceType::ALL
            .iter()
            .map(|t| known_of(resources_for(&set, pt, *t)))
            .collect();
        let id = format!("{}k_resources", total(&next) / 1000);
        g.throughput(Throughput::Elements(1));
        g.bench_function(BenchmarkId::new("diff_changed", &id), |b| {
            b.iter(|| {
                for t in ResourceType::ALL {
                    black_box(diff_changed(
                        resources_for(&next, pt, t),
                        &known[t.index()],
                        changes.of(t),
                    ));
                }
            })
        });
        if services <= 2_500 {
            g.bench_function(BenchmarkId::new("diff_full", &id), |b| {
                b.iter(|| {
                    for t in ResourceType::ALL {
                        black_box(diff(resources_for(&next, pt, t), &known[t.index()]));
                    }
                })
            });
        }
    }
    g.finish();
}

/// One write into a clone of a map of n resources, and dropping the clone: the
/// path a delta stream copies per push while its map shares the snapshot's.
fn resource_map_shared_write(c: &mut Criterion) {
    let mut g = c.benchmark_group("resource_map_shared_write");
    for n in [1_000usize, 10_000, 100_000] {
        let res = |i: usize, body: &'static [u8]| {
            let name = format!("outbound|8080||svc-{i}.ns-{}.svc.cluster.local", i % 50);
            Arc::new(Resource::new(name.into(), bytes::Bytes::from_static(body)))
        };
        let base: ResourceMap = (0..n).map(|i| res(i, b"a")).collect();
        let changed = res(n / 2, b"b");
        g.bench_function(BenchmarkId::new("insert_and_drop", n), |b| {
            b.iter(|| {
                let mut m = base.clone();
                black_box(m.insert(changed.clone()));
                black_box(&m);
            })
        });
    }
    g.finish();
}

/// Resident set size of this process, from `/proc/self/statm` (pages are 4 KiB
/// here). RSS, not an allocation count: a counting global allocator would need
/// `unsafe`, which the workspace forbids; figures are approximate.
fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    s.split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<u64>().ok())
        .unwrap_or(0)
        * 4096
}

/// Prints what the encoded resources plus the generator's indexes add to a
/// 10k-service / 100k-endpoint model.
fn memory_report() {
    let model = registry(10_000, 100_000, &WEB);
    let before = rss_bytes();
    let (generator, set, _) = Generator::build(&model, GenOptions::default());
    let after = rss_bytes();
    println!(
        "xds memory: 10000 services / 100000 endpoints: {} resources; resources + generator indexes grew RSS by {:.1} MiB",
        total(&set),
        after.saturating_sub(before) as f64 / (1024.0 * 1024.0)
    );
    drop((generator, set));
}

/// The xDS benchmarks as one criterion group (written out rather than with
/// `criterion_group!`, whose generated function has no doc comment).
fn benches() {
    memory_report();
    let mut c = Criterion::default().configure_from_args();
    regenerate_100_endpoints(&mut c);
    build_all_resources(&mut c);
    diff_one_endpoint_change(&mut c);
    resource_map_shared_write(&mut c);
}

criterion_main!(benches);
