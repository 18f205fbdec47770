//! A resync on a multi-partition Kafka topic, against a real Apache Kafka broker: the `COMPLETED` marker lands once on every partition after the
//! relist's entity events, and folding the relist in the worst order a reader may
//! see (partition by partition, the marker's own partition first) never removes an
//! entity the registry still has, and finally removes exactly the one it dropped.
//!
//! Needs `DELTAPILOT_KAFKA_BROKERS=HOST:PORT` (fails, never skips, without it):
//! `scripts/install-test-deps.sh`, `scripts/kafka.sh start 19092`, then
//! `DELTAPILOT_KAFKA_BROKERS=127.0.0.1:19092 cargo test -p deltapilot-engine --test
//! kafka_resync_partitions` (`scripts/test.sh` does all of this). Every test uses its
//! own topic.

mod fold_support;
use deltapilot_testkit::kafka as support_kafka;

use support_kafka::unique_topic;

use std::collections::BTreeSet;
use std::time::Duration;

use deltapilot_log::kafka::{KafkaLog, KafkaOptions};
use deltapilot_log::{EventLog, Position, RecordPos};
use deltapilot_model::fold::fold;
use deltapilot_model::state::ModelState;
use deltapilot_proto::Event;
use deltapilot_proto::event::Payload;
use deltapilot_proto::resync_marker::Phase;
use fold_support::{ep, resync, svc};

/// Bound on any single broker operation in these tests.
const WAIT: Duration = Duration::from_secs(30);

/// The adapter instance whose relist is tested.
const SOURCE: &str = "k8s-resync";

/// Services in the registry; each has [`PODS`] endpoints. 8 services and 24
/// endpoints spread over every one of 3 partitions (asserted, not assumed).
const SERVICES: usize = 8;
const PODS: usize = 3;

/// Random partition interleavings the relist is also folded in.
const INTERLEAVINGS: usize = 40;

/// Most `read` calls to drain the topic (each returns up to [`READ_LIMIT`]).
const MAX_READS: usize = 100;
const READ_LIMIT: usize = 16;

fn brokers() -> String {
    support_kafka::brokers("kafka_resync_partitions")
}

async fn open(name: &str, partitions: i32) -> KafkaLog {
    let topic = unique_topic(name);
    let opts = KafkaOptions {
        partitions,
        append_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(20),
        ..KafkaOptions::default()
    };
    let log = bounded("connect", KafkaLog::connect(&brokers(), &topic, opts))
        .await
        .unwrap_or_else(|e| panic!("connect to {} topic {topic}: {e}", brokers()));
    assert_eq!(log.partitions(), partitions as usize, "topic {topic}");
    log
}

async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {WAIT:?}"))
}

async fn append(log: &KafkaLog, events: &[Event]) -> Vec<RecordPos> {
    let at = bounded("append", log.append(events))
        .await
        .unwrap_or_else(|e| panic!("append of {} events: {e}", events.len()));
    assert_eq!(at.len(), events.len(), "one position per appended event");
    at
}

/// Every record from `from` to the head, decoded, in `read`'s partition-major order.
async fn read_from(log: &KafkaLog, from: &Position) -> Vec<(RecordPos, Event)> {
    let mut at = from.clone();
    let mut out = Vec::new();
    for _ in 0..MAX_READS {
        let records = bounded("read", log.read(&at, READ_LIMIT))
            .await
            .unwrap_or_else(|e| panic!("read from {at}: {e}"));
        if records.is_empty() {
            return out;
        }
        for r in records {
            at.advance(r.pos);
            let ev = r
                .decode()
                .unwrap_or_else(|e| panic!("decode {}: {e}", r.pos));
            out.push((r.pos, ev));
        }
    }
    panic!("the topic did not drain within {MAX_READS} reads of {READ_LIMIT}");
}

fn host(i: usize) -> String {
    format!("s{i}.ns.svc.cluster.local")
}

fn pod(i: usize, j: usize) -> String {
    format!("ep/{SOURCE}/ns/s{i}-pod-{j}")
}

/// The registry's services at `generation`.
fn services(generation: u64) -> Vec<Event> {
    (0..SERVICES)
        .map(|i| svc(SOURCE, generation, "ns", &host(i), 8080))
        .collect()
}

/// The registry's endpoints at `generation`, without `dropped`.
fn endpoints(generation: u64, dropped: Option<&str>) -> Vec<Event> {
    let mut out = Vec::new();
    for i in 0..SERVICES {
        for j in 0..PODS {
            let key = pod(i, j);
            if Some(key.as_str()) != dropped {
                let addr = format!("10.0.{i}.{}", j + 1);
                out.push(ep(SOURCE, generation, &key, &addr, &[&host(i)], 1));
            }
        }
    }
    out
}

/// Entities the registry holds after the relist: every service, every endpoint
/// but the dropped one. `(is_service, name)`.
fn live(dropped: &str) -> Vec<(bool, String)> {
    let mut out: Vec<(bool, String)> = (0..SERVICES).map(|i| (true, host(i))).collect();
    for i in 0..SERVICES {
        for j in 0..PODS {
            if pod(i, j) != dropped {
                out.push((false, pod(i, j)));
            }
        }
    }
    out
}

fn present(st: &ModelState, (is_service, name): &(bool, String)) -> bool {
    if *is_service {
        st.get_service(name.as_str()).is_some()
    } else {
        st.raw_endpoint(name.as_str()).is_some()
    }
}

fn marker(ev: &Event) -> Option<(Phase, u32)> {
    match &ev.payload {
        Some(Payload::Resync(m)) => Some((m.phase(), m.copies)),
        _ => None,
    }
}

/// Folds `records` one at a time from `st`, asserting after each that nothing was
/// skipped and that every entity of `must_stay` is still present. Returns the end
/// state.
fn fold_one_by_one(
    mut st: ModelState,
    records: &[(RecordPos, Event)],
    must_stay: &[(bool, String)],
    order: &str,
) -> ModelState {
    for (pos, ev) in records {
        let out = fold(&st, &[(*pos, ev.clone())]);
        assert!(
            out.skipped.is_empty(),
            "{order}: record {pos} skipped: {:?}",
            out.skipped
        );
        st = out.state;
        let gone: Vec<&String> = must_stay
            .iter()
            .filter(|e| !present(&st, e))
            .map(|(_, name)| name)
            .collect();
        assert!(
            gone.is_empty(),
            "{order}: after record {pos} ({}), live entities are absent: {gone:?}",
            ev.kind_name()
        );
    }
    st
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relist_on_three_partitions_never_removes_a_live_entity() {
    const PARTITIONS: u32 = 3;
    let log = open("resync3", PARTITIONS as i32).await;
    let dropped = pod(0, 1);

    // Generation 1, written the way an adapter writes a resync: STARTED, the
    // services, the endpoints, then COMPLETED in an append of its own.
    append(&log, &[resync(SOURCE, 1, false)]).await;
    let svc_at = append(&log, &services(1)).await;
    let ep_at = append(&log, &endpoints(1, None)).await;
    let svc_parts: BTreeSet<u32> = svc_at.iter().map(|p| p.partition).collect();
    let ep_parts: BTreeSet<u32> = ep_at.iter().map(|p| p.partition).collect();
    let every: BTreeSet<u32> = (0..PARTITIONS).collect();
    assert_eq!(svc_parts, every, "services should be on every partition");
    assert_eq!(ep_parts, every, "endpoints should be on every partition");
    let done1 = append(&log, &[resync(SOURCE, 1, true)]).await;

    // The engine was caught up here; fold generation 1 services first (admission
    // needs a service before its endpoints, which is not what is tested here).
    let gen1_end = bounded("head", log.head()).await.expect("head");
    let mut gen1 = read_from(&log, &log.start()).await;
    gen1.sort_by_key(|(_, e)| !matches!(e.payload, Some(Payload::ServiceUpsert(_))));
    let before = fold(&ModelState::default(), &gen1);
    assert!(before.skipped.is_empty(), "{:?}", before.skipped);
    let before = before.state;
    assert!(live("none").iter().all(|e| present(&before, e)));
    assert_eq!(before.source_gen(SOURCE).completed, 1);
    assert_eq!(before.pending_resync(SOURCE), None);

    // The adapter restarts and relists at generation 2 without `dropped`. The last
    // endpoint append also carries COMPLETED: the backend acknowledges the
    // endpoints before it writes the copies.
    append(&log, &[resync(SOURCE, 2, false)]).await;
    append(&log, &services(2)).await;
    let mut eps = endpoints(2, Some(&dropped));
    let tail = eps.split_off(eps.len() - 5);
    append(&log, &eps).await;
    let mut last = tail;
    last.push(resync(SOURCE, 2, true));
    let last_at = append(&log, &last).await;

    let relist = read_from(&log, &gen1_end).await;

    // Fold the relist partition by partition, in every rotation of the partitions
    // (so each partition's copy, including the one where a keyed marker would
    // sit, is read first in one of them), record by record.
    let must_stay = live(&dropped);
    let mut ends = Vec::new();
    for first in 0..PARTITIONS {
        let order: Vec<u32> = (0..PARTITIONS).map(|k| (first + k) % PARTITIONS).collect();
        let records: Vec<(RecordPos, Event)> = order
            .iter()
            .flat_map(|p| relist.iter().filter(move |(pos, _)| pos.partition == *p))
            .cloned()
            .collect();
        let name = format!("partitions in order {order:?}");
        let end = fold_one_by_one(before.clone(), &records, &must_stay, &name);
        assert!(
            end.raw_endpoint(dropped.as_str()).is_none(),
            "{name}: the dropped endpoint is swept"
        );
        assert_eq!(end.source_gen(SOURCE).completed, 2, "{name}");
        assert_eq!(end.pending_resync(SOURCE), None, "{name}");
        assert_eq!(end.hash(), end.recompute_hash(), "{name}");
        ends.push(end);
    }
    // A follower interleaves partitions as fetches come back: any merge that keeps
    // each partition's order. A fixed-seed sample of such merges.
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for round in 0..INTERLEAVINGS {
        let queues: Vec<Vec<&(RecordPos, Event)>> = (0..PARTITIONS)
            .map(|p| {
                relist
                    .iter()
                    .filter(|(pos, _)| pos.partition == p)
                    .collect()
            })
            .collect();
        let mut heads = vec![0usize; queues.len()];
        let mut records = Vec::with_capacity(relist.len());
        while records.len() < relist.len() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let open: Vec<usize> = (0..queues.len())
                .filter(|q| heads[*q] < queues[*q].len())
                .collect();
            let q = open[(seed % open.len() as u64) as usize];
            records.push(queues[q][heads[q]].clone());
            heads[q] += 1;
        }
        let name = format!("interleaving {round}");
        let end = fold_one_by_one(before.clone(), &records, &must_stay, &name);
        assert_eq!(end, ends[0], "{name} ends like partition-major order");
    }

    // Only the dropped endpoint went: the end state is the generation-2 registry.
    let want = ModelState::from_events(&[services(2), endpoints(2, Some(&dropped))].concat());
    for end in &ends {
        let mut end_entities: Vec<String> =
            end.raw_endpoints().map(|(k, _)| k.to_string()).collect();
        let mut want_entities: Vec<String> =
            want.raw_endpoints().map(|(k, _)| k.to_string()).collect();
        end_entities.sort();
        want_entities.sort();
        assert_eq!(end_entities, want_entities);
        assert_eq!(end.services().count(), SERVICES);
    }
    assert!(
        ends.windows(2).all(|w| w[0] == w[1]),
        "every order ends alike"
    );

    // The copies: one per partition, each the last record of its partition, and
    // the position `append` reports for a marker is its copy on the last one.
    assert_eq!(done1[0].partition, PARTITIONS - 1);
    assert_eq!(last_at[last.len() - 1].partition, PARTITIONS - 1);
    assert_eq!(
        relist.len(),
        1 + SERVICES + SERVICES * PODS - 1 + PARTITIONS as usize,
        "STARTED once, every entity once, COMPLETED once per partition"
    );
    for p in 0..PARTITIONS {
        let on_p: Vec<&Event> = relist
            .iter()
            .filter(|(pos, _)| pos.partition == p)
            .map(|(_, e)| e)
            .collect();
        let completed: Vec<usize> = on_p
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(marker(e), Some((Phase::Completed, _))))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(completed, [on_p.len() - 1], "partition {p}: {on_p:?}");
        let copy = on_p[on_p.len() - 1];
        assert_eq!(marker(copy), Some((Phase::Completed, PARTITIONS)));
        assert_eq!((copy.generation, copy.source.as_str()), (2, SOURCE));
        assert_eq!(copy.key().as_deref(), Some("resync/k8s-resync"));
    }
    let started: Vec<u32> = relist
        .iter()
        .filter(|(_, e)| matches!(marker(e), Some((Phase::Started, 0))))
        .map(|(pos, _)| pos.partition)
        .collect();
    assert_eq!(started.len(), 1, "STARTED is written once, by key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_partition_writes_the_marker_once_unchanged() {
    let log = open("resync1", 1).await;
    let events = [
        resync(SOURCE, 1, false),
        svc(SOURCE, 1, "ns", &host(0), 8080),
        resync(SOURCE, 1, true),
    ];
    let at = append(&log, &events).await;
    assert_eq!(at.iter().map(|p| p.offset).collect::<Vec<_>>(), [0, 1, 2]);
    let back = read_from(&log, &log.start()).await;
    let back: Vec<Event> = back.into_iter().map(|(_, e)| e).collect();
    assert_eq!(back, events, "no copies, `copies` left as written");
}
