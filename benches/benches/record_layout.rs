//! Design probe for the fold at 100k endpoints (issue "Spine 2/3"): how much a
//! different layout of the endpoint records would buy, measured before the
//! engine is changed to it.
//!
//! It emulates the fold's common endpoint event, a rewrite of a stored
//! endpoint that keeps its shape, on 100k endpoints of 10k services: digest the
//! payload, find the record with one mutable lookup in a clone of the state (so
//! the tree path is copied, as the engine's fold into a published state does),
//! check owner and shape, hash the new content, write it, ask whether the first
//! hostname has a service, and record the touch. A batch is 4,096 events spread
//! over the registry and sorted by key hash; the clone is dropped inside the
//! timing, as in `fold`. The records were allocated in an order unrelated to
//! their keys, as after long churn.
//!
//! Three layouts of the value in the map's leaves:
//! - `today`: a reference to a record that holds a reference to the endpoint,
//!   which holds its key and shape (the engine's layout);
//! - `merged`: a reference to one record with the endpoint inline;
//! - `plain`: the fields a rewrite reads and writes as plain data in the leaf
//!   (key text, source and shape would live in a second map that only inserts,
//!   deletes and shape changes write, which this probe does not need).
//!
//! Copying a leaf clones its values: for the first two, 16 reference counts at
//! scattered addresses; for `plain`, a memcpy.
//!
//! Run: `cargo bench -p deltapilot-benches --bench record_layout -- --warm-up-time 1 --measurement-time 3`.
//! The machine's phases move every figure; compare the layouts within one run,
//! and over several runs.

use std::hint::black_box;
use std::sync::Arc;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput};
use imbl::OrdMap;
use xxhash_rust::xxh3::{xxh3_64, xxh3_128};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ENDPOINTS: usize = 100_000;
const SERVICES: usize = 10_000;
const BATCH: usize = 4_096;

/// A 128-bit key hash, as the engine's `HKey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key(u64, u64);

fn key_of(text: &str) -> Key {
    let h = xxh3_128(text.as_bytes());
    Key((h >> 64) as u64, h as u64)
}

struct Shape {
    source_digest: u128,
    digest: u64,
    first_host: Key,
    /// Stands for ports, labels, locality, identity and services.
    _rest: [u64; 14],
}

struct Endpoint {
    key: Arc<str>,
    address: [u8; 16],
    weight: u32,
    health: u8,
    shape: Arc<Shape>,
}

/// A reference-counted record: `V` is `Arc<Endpoint>` (`today`: the record
/// references the endpoint) or `Endpoint` (`merged`: inline).
struct Counted<V> {
    value: V,
    source: Arc<str>,
    generation: u64,
    digest: u64,
    hash: u64,
}

/// How a counted record holds its endpoint.
trait Holds {
    fn hold(ep: Endpoint) -> Self;
    fn endpoint(&self) -> &Endpoint;
}

impl Holds for Arc<Endpoint> {
    fn hold(ep: Endpoint) -> Self {
        Arc::new(ep)
    }
    fn endpoint(&self) -> &Endpoint {
        self
    }
}

impl Holds for Endpoint {
    fn hold(ep: Endpoint) -> Self {
        ep
    }
    fn endpoint(&self) -> &Endpoint {
        self
    }
}

/// `plain`: what a rewrite reads and writes, by value.
#[derive(Clone, Copy)]
struct PlainRecord {
    address: [u8; 16],
    weight: u32,
    health: u8,
    generation: u64,
    digest: u64,
    hash: u64,
    shape_source: [u64; 2],
    shape_digest: u64,
    source: Key,
    first_host: Key,
}

struct Event {
    key: String,
    hk: Key,
    address: [u8; 16],
    weight: u32,
    health: u8,
    generation: u64,
    /// Stands for the payload fields the shape digest reads.
    payload: Vec<u8>,
}

const SOURCE: &str = "k8s:bench";

fn fields_digest(key: &str, address: &[u8; 16], weight: u32, health: u8, shape: u64) -> u64 {
    let mut b = Vec::with_capacity(key.len() + 29);
    b.extend_from_slice(key.as_bytes());
    b.extend_from_slice(address);
    b.extend_from_slice(&weight.to_le_bytes());
    b.push(health);
    b.extend_from_slice(&shape.to_le_bytes());
    xxh3_64(&b)
}

fn entity_hash(key: &str, generation: u64, digest: u64) -> u64 {
    let mut b = Vec::with_capacity(key.len() + SOURCE.len() + 16);
    b.extend_from_slice(key.as_bytes());
    b.extend_from_slice(SOURCE.as_bytes());
    b.extend_from_slice(&generation.to_le_bytes());
    b.extend_from_slice(&digest.to_le_bytes());
    xxh3_64(&b)
}

fn host(s: usize) -> String {
    format!("svc-{s}.ns-{}.svc.cluster.local", s % 50)
}

/// The payload fields of an endpoint of service `s` in zone `z`: endpoints of a
/// shape share them, so their digest is the shape's source digest.
fn payload(s: usize, z: usize) -> Vec<u8> {
    format!("{}|us-east1-{z}|spiffe://cluster.local/sa/svc-{s}", host(s))
        .repeat(3)
        .into_bytes()
}

fn address(i: usize) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&[10, (i >> 16) as u8, (i >> 8) as u8, i as u8]);
    a
}

/// The registry every layout is built from, and the two alternating batches.
struct Setup {
    keys: Vec<String>,
    shapes: Vec<Arc<Shape>>,
    hosts: OrdMap<Key, Arc<str>>,
    batches: [Vec<Event>; 2],
}

impl Setup {
    fn new() -> Self {
        let hosts = (0..SERVICES)
            .map(|s| (key_of(&host(s)), Arc::from(host(s).as_str())))
            .collect();
        // Three shapes per service (one per zone).
        let shapes = (0..SERVICES * 3)
            .map(|i| {
                Arc::new(Shape {
                    source_digest: xxh3_128(&payload(i / 3, i % 3)),
                    digest: xxh3_64(&i.to_le_bytes()),
                    first_host: key_of(&host(i / 3)),
                    _rest: [0; 14],
                })
            })
            .collect();
        let keys: Vec<String> = (0..ENDPOINTS)
            .map(|i| format!("ep/k8s/ns-{}/pod-{i}", (i % SERVICES) % 50))
            .collect();
        let batch = |round: usize| {
            let mut events: Vec<Event> = (0..BATCH)
                .map(|k| {
                    let i = (k * 7_919 + round * 13) % ENDPOINTS;
                    Event {
                        key: keys[i].clone(),
                        hk: key_of(&keys[i]),
                        address: address(i),
                        weight: 2 + round as u32,
                        health: 0,
                        generation: 1,
                        payload: payload(i % SERVICES, i % 3),
                    }
                })
                .collect();
            events.sort_by_key(|e| e.hk);
            events
        };
        let batches = [batch(0), batch(1)];
        Setup {
            keys,
            shapes,
            hosts,
            batches,
        }
    }

    fn shape(&self, i: usize) -> &Arc<Shape> {
        &self.shapes[(i % SERVICES) * 3 + i % 3]
    }

    /// Endpoint indexes in an allocation order unrelated to key order.
    fn allocation_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..ENDPOINTS).collect();
        order.sort_by_key(|i| xxh3_64(&i.to_le_bytes()));
        order
    }

    fn endpoint(&self, i: usize) -> (Key, Endpoint, u64, u64) {
        let shape = self.shape(i).clone();
        let key: Arc<str> = Arc::from(self.keys[i].as_str());
        let digest = fields_digest(&key, &address(i), 1, 0, shape.digest);
        let hash = entity_hash(&key, 1, digest);
        let ep = Endpoint {
            key,
            address: address(i),
            weight: 1,
            health: 0,
            shape,
        };
        (key_of(&self.keys[i]), ep, digest, hash)
    }
}

/// Per batch: the state's hash moves, admitted events are counted, touches
/// are collected and deduplicated, as the fold does.
#[derive(Default)]
struct Tally {
    hash: u64,
    admitted: usize,
    touched: usize,
}

/// Times `apply` folding one batch into a clone of `base` per iteration (the
/// two batches alternate), the clone dropped inside the timing.
fn time_batches<M: Clone>(
    g: &mut BenchmarkGroup<WallTime>,
    s: &Setup,
    name: &str,
    base: &M,
    apply: impl Fn(&mut M, &[Event]) -> Tally,
) {
    let mut round = 0;
    g.bench_function(name, |b| {
        b.iter(|| {
            round += 1;
            let mut state = base.clone();
            let t = apply(&mut state, &s.batches[round % 2]);
            // Every event of the batch took the rewrite path.
            assert_eq!(t.admitted, BATCH);
            black_box((state, t.hash, t.touched))
        })
    });
}

/// `today` and `merged`: the layouts whose leaf values are references.
fn counted<V: Holds>(g: &mut BenchmarkGroup<WallTime>, s: &Setup, name: &str) {
    let source: Arc<str> = Arc::from(SOURCE);
    let mut base: OrdMap<Key, Arc<Counted<V>>> = OrdMap::new();
    for i in s.allocation_order() {
        let (k, ep, digest, hash) = s.endpoint(i);
        let record = Counted {
            value: V::hold(ep),
            source: source.clone(),
            generation: 1,
            digest,
            hash,
        };
        base.insert(k, Arc::new(record));
    }
    time_batches(g, s, name, &base, |state, events| {
        let (mut t, mut touched) = (Tally::default(), Vec::new());
        for e in events {
            let payload = xxh3_128(&e.payload);
            let Some(slot) = state.get_mut(&e.hk) else {
                continue;
            };
            let old = slot.value.endpoint();
            if *slot.source != *SOURCE || old.shape.source_digest != payload {
                continue;
            }
            let digest = fields_digest(&e.key, &e.address, e.weight, e.health, old.shape.digest);
            if digest == slot.digest && e.generation == slot.generation {
                continue;
            }
            let hash = entity_hash(&e.key, e.generation, digest);
            t.hash = t.hash.wrapping_sub(slot.hash).wrapping_add(hash);
            let shape = old.shape.clone();
            let value = V::hold(Endpoint {
                key: old.key.clone(),
                address: e.address,
                weight: e.weight,
                health: e.health,
                shape: shape.clone(),
            });
            *slot = Arc::new(Counted {
                value,
                source: slot.source.clone(),
                generation: e.generation,
                digest,
                hash,
            });
            t.admitted += usize::from(s.hosts.get(&shape.first_host).is_some());
            touched.push(shape);
        }
        touched.sort_by_key(|s| Arc::as_ptr(s) as usize);
        touched.dedup_by(|a, b| Arc::ptr_eq(a, b));
        t.touched = touched.len();
        t
    });
}

fn plain(g: &mut BenchmarkGroup<WallTime>, s: &Setup) {
    let source = key_of(SOURCE);
    let mut base: OrdMap<Key, PlainRecord> = OrdMap::new();
    for i in s.allocation_order() {
        let (k, ep, digest, hash) = s.endpoint(i);
        let sd = ep.shape.source_digest;
        base.insert(
            k,
            PlainRecord {
                address: ep.address,
                weight: ep.weight,
                health: ep.health,
                generation: 1,
                digest,
                hash,
                shape_source: [sd as u64, (sd >> 64) as u64],
                shape_digest: ep.shape.digest,
                source,
                first_host: ep.shape.first_host,
            },
        );
    }
    time_batches(g, s, "plain", &base, |state, events| {
        let (mut t, mut touched) = (Tally::default(), Vec::new());
        for e in events {
            let payload = xxh3_128(&e.payload);
            let Some(r) = state.get_mut(&e.hk) else {
                continue;
            };
            let stored = u128::from(r.shape_source[0]) | u128::from(r.shape_source[1]) << 64;
            if r.source != source || stored != payload {
                continue;
            }
            let digest = fields_digest(&e.key, &e.address, e.weight, e.health, r.shape_digest);
            if digest == r.digest && e.generation == r.generation {
                continue;
            }
            let hash = entity_hash(&e.key, e.generation, digest);
            t.hash = t.hash.wrapping_sub(r.hash).wrapping_add(hash);
            r.address = e.address;
            r.weight = e.weight;
            r.health = e.health;
            r.generation = e.generation;
            r.digest = digest;
            r.hash = hash;
            let host = r.first_host;
            t.admitted += usize::from(s.hosts.get(&host).is_some());
            touched.push(host);
        }
        touched.sort_unstable();
        touched.dedup();
        t.touched = touched.len();
        t
    });
}

fn layouts(c: &mut Criterion) {
    let s = Setup::new();
    let mut group = c.benchmark_group("record_layout");
    group.throughput(Throughput::Elements(BATCH as u64));
    // Each layout builds its own state and drops it before the next one.
    counted::<Arc<Endpoint>>(&mut group, &s, "today");
    counted::<Endpoint>(&mut group, &s, "merged");
    plain(&mut group, &s);
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    layouts(&mut c);
    c.final_summary();
}
