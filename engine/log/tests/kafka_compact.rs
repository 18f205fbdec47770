//! A replica starting on a compacted Kafka topic converges to the same state hash
//! as one that read the full history, against a real Apache Kafka broker whose
//! log cleaner really ran: the topic is made to roll segments and clean at once
//! (`segment.ms`, `min.cleanable.dirty.ratio`), and the test waits until every
//! superseded record is gone. The history holds relists that swept entities and a
//! newer `STARTED` after the last `COMPLETED`: the sweep must survive compaction
//! (the markers' message keys are per phase, see `kafka/produce.rs`).
//!
//! Needs `DELTAPILOT_KAFKA_BROKERS=HOST:PORT` (fails, never skips, without it):
//! `scripts/kafka.sh start 19092`, then `DELTAPILOT_KAFKA_BROKERS=127.0.0.1:19092
//! cargo test -p deltapilot-log --test kafka_compact` (`scripts/test.sh` does it).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use deltapilot_log::kafka::{KafkaLog, KafkaOptions};
use deltapilot_log::{EventLog, Position, Record};
use deltapilot_model::fold;
use deltapilot_model::state::ModelState;
use deltapilot_proto::event::Payload;
use deltapilot_proto::{self as pb, Event};
use deltapilot_testkit::events::{ep, ep_del, event, resync};
use deltapilot_testkit::kafka as support_kafka;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;

const PARTITIONS: i32 = 3;
/// Bound on one broker operation.
const WAIT: Duration = Duration::from_secs(30);
/// Bound on waiting for the cleaner to compact everything it can.
const COMPACTION_WAIT: Duration = Duration::from_secs(120);
/// Endpoints of the registry; the second relist keeps only the first [`KEPT`].
const ENDPOINTS: usize = 20;
const KEPT: usize = 12;
/// Endpoints re-written (with identical content) to roll the partitions'
/// segments: only closed segments are cleaned.
const FILLERS: usize = 12;

fn svc(generation: u64, host: &str) -> Event {
    event(
        "reg",
        generation,
        Payload::ServiceUpsert(pb::ServiceUpsert {
            service: Some(pb::Service {
                hostname: host.into(),
                namespace: "ns".into(),
                ports: vec![pb::Port {
                    name: "http".into(),
                    number: 80,
                    protocol: pb::Protocol::Http as i32,
                }],
                ..Default::default()
            }),
        }),
    )
}

fn fillers() -> Vec<Event> {
    (0..FILLERS)
        .map(|i| {
            ep(
                "reg",
                2,
                &format!("ep/fill/f{i}"),
                "10.1.0.1",
                &["h0.ns.svc"],
                1,
            )
        })
        .collect()
}

/// The history: two relists (the second sweeps `ENDPOINTS - KEPT` endpoints),
/// updates, a delete, and a third relist only started.
fn history() -> Vec<Vec<Event>> {
    let key = |k: usize| format!("ep/reg/k{k}");
    let addr = |k: usize| format!("10.0.0.{k}");
    let hosts = ["h0.ns.svc"];
    let mut appends = vec![vec![resync("reg", 1, false), svc(1, "h0.ns.svc")]];
    for round in 0..5 {
        appends.push(
            (0..ENDPOINTS)
                .map(|k| ep("reg", 1, &key(k), &addr(k), &hosts, 1 + round))
                .collect(),
        );
    }
    appends.push(vec![resync("reg", 1, true)]);
    let mut relist = vec![resync("reg", 2, false), svc(2, "h0.ns.svc")];
    relist.extend((0..KEPT).map(|k| ep("reg", 2, &key(k), &addr(k), &hosts, 7)));
    appends.push(relist);
    appends.push(vec![resync("reg", 2, true)]);
    // A newer relist starts: its STARTED is the source's newest marker.
    appends.push(vec![resync("reg", 3, false)]);
    appends.push(vec![ep_del("reg", 2, &key(0))]);
    appends.push(fillers());
    appends
}

async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {WAIT:?}"))
}

/// Creates the topic compacted, rolling segments fast and cleaning at once;
/// records younger than `lag` are not cleaned (so the full history can be read
/// first).
async fn create_topic(brokers: &str, topic: &str, lag: Duration) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("admin client");
    let lag_ms = lag.as_millis().to_string();
    let new = NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(1))
        .set("cleanup.policy", "compact")
        .set("segment.ms", "300")
        .set("min.cleanable.dirty.ratio", "0.01")
        .set("min.compaction.lag.ms", &lag_ms);
    let res = bounded(
        "create topic",
        admin.create_topics([&new], &AdminOptions::new()),
    )
    .await
    .expect("CreateTopics");
    assert!(
        matches!(res.first(), Some(Ok(_))),
        "create {topic}: {res:?}"
    );
}

async fn read_all(log: &KafkaLog) -> Vec<Record> {
    let mut pos = log.start();
    let mut out = Vec::new();
    for _ in 0..1_000 {
        let recs = bounded("read", log.read(&pos, 500)).await.expect("read");
        if recs.is_empty() {
            return out;
        }
        for r in &recs {
            pos.advance(r.pos);
        }
        out.extend(recs);
    }
    panic!("the topic did not end");
}

fn fold_all(recs: &[Record]) -> ModelState {
    let batch: Vec<_> = recs
        .iter()
        .map(|r| (r.pos, r.decode().expect("decode")))
        .collect();
    fold::fold(&ModelState::default(), &batch).state
}

/// Records per (partition, message key) outside the fillers; compaction is done
/// when each is 1.
fn duplicates(recs: &[Record]) -> usize {
    let mut n: HashMap<(u32, String), usize> = HashMap::new();
    for r in recs {
        let e = r.decode().expect("decode");
        let key = match &e.payload {
            Some(Payload::Resync(m)) => format!("{}/{}", e.source, m.phase().as_str_name()),
            _ => e.key().expect("key"),
        };
        if key.starts_with("ep/fill/") {
            continue;
        }
        *n.entry((r.pos.partition, key)).or_default() += 1;
    }
    n.values().map(|c| c - 1).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_on_a_compacted_topic_converges_to_the_full_history_hash() {
    let brokers = support_kafka::brokers("kafka_compact");
    let topic = support_kafka::unique_topic("compacted");
    create_topic(&brokers, &topic, Duration::from_secs(8)).await;
    let opts = KafkaOptions {
        partitions: PARTITIONS,
        append_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(20),
        ..KafkaOptions::default()
    };
    let log = bounded("connect", KafkaLog::connect(&brokers, &topic, opts.clone()))
        .await
        .expect("connect");
    let started = Instant::now();
    let mut appended = 0usize;
    for batch in history() {
        let copies = batch
            .iter()
            .filter(|e| matches!(&e.payload, Some(Payload::Resync(m)) if m.phase() == pb::resync_marker::Phase::Completed))
            .count();
        appended += batch.len() + copies * (PARTITIONS as usize - 1);
        bounded("append", log.append(&batch)).await.expect("append");
    }

    // The replica that read the full history.
    let full = read_all(&log).await;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the full read must finish before the cleaner may touch the records"
    );
    assert_eq!(full.len(), appended, "nothing cleaned yet");
    let reference = fold_all(&full);
    assert!(duplicates(&full) > 0);

    // Roll every partition's segment (identical fillers change no state) until
    // the cleaner has left one record per key and partition.
    let deadline = Instant::now() + COMPACTION_WAIT;
    let compacted = loop {
        tokio::time::sleep(Duration::from_millis(700)).await;
        bounded("append", log.append(&fillers()))
            .await
            .expect("append fillers");
        let now = read_all(&log).await;
        if duplicates(&now) == 0 {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "the broker did not compact topic {topic} within {COMPACTION_WAIT:?} \
             ({} duplicates left)",
            duplicates(&now)
        );
    };
    let non_filler = |recs: &[Record]| {
        recs.iter()
            .filter(|r| {
                !r.decode()
                    .expect("decode")
                    .key()
                    .expect("key")
                    .starts_with("ep/fill/")
            })
            .count()
    };
    assert!(
        non_filler(&compacted) * 2 < non_filler(&full),
        "compaction removed the superseded records"
    );

    // A new replica from the compacted topic: same state, same hash.
    let fresh = bounded("connect", KafkaLog::connect(&brokers, &topic, opts))
        .await
        .expect("connect");
    assert_eq!(fresh.start(), Position::start(PARTITIONS as usize));
    let replica = fold_all(&read_all(&fresh).await);
    assert_eq!(
        replica.hash(),
        reference.hash(),
        "same state as the full history"
    );
    let mut keys: Vec<String> = replica
        .raw_endpoints()
        .map(|(k, _)| k.to_string())
        .filter(|k| k.starts_with("ep/reg/"))
        .collect();
    keys.sort();
    let mut want: Vec<String> = (1..KEPT).map(|k| format!("ep/reg/k{k}")).collect();
    want.sort();
    assert_eq!(
        keys, want,
        "the relist's sweep and the delete survive compaction"
    );
}
