//! The Kafka log against a real Apache Kafka broker: the shared behavioural suite
//! on one- and multi-partition topics, plus what only a keyed, partitioned,
//! networked log has: key placement, reads from saved per-partition offsets, topic
//! creation (compacted), heads from the high watermarks, tailing from the head,
//! and bounded failure when the broker is unreachable or dies.
//!
//! Needs `DELTAPILOT_KAFKA_BROKERS=HOST:PORT` (fails, never skips, without it). The
//! broker-death test also starts a private Apache Kafka of its own with
//! `scripts/kafka.sh` (jars from `DELTAPILOT_KAFKA_HOME` or
//! `$DELTAPILOT_TOOLS/kafka-*`). Every test uses its own topic.

mod suite;
use deltapilot_testkit::kafka as support_kafka;

use support_kafka::{PrivateKafka, free_port, unique_topic};

use std::time::{Duration, Instant};

use deltapilot_log::Error;
use deltapilot_log::kafka::{KafkaLog, KafkaOptions};
use deltapilot_log::{EventLog, FOLLOW_BATCH_MAX, FollowItem, Position, RecordPos, encode_event};
use deltapilot_proto::{EntityDelete, Event, SCHEMA_VERSION, event};
use futures::StreamExt;
use proptest::test_runner::{Config, TestRunner};
use rdkafka::Message;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

/// Bound on any single wait in these tests that is not itself under test.
const WAIT: Duration = Duration::from_secs(30);

/// Cases of the property test; each gets a fresh topic.
const PROPTEST_CASES: u32 = 10;

fn brokers() -> String {
    support_kafka::brokers("kafka_log")
}

fn opts(partitions: i32) -> KafkaOptions {
    KafkaOptions {
        partitions,
        append_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(20),
        ..KafkaOptions::default()
    }
}

async fn open(name: &str, partitions: i32) -> KafkaLog {
    let topic = unique_topic(name);
    bounded(
        "connect",
        KafkaLog::connect(&brokers(), &topic, opts(partitions)),
    )
    .await
    .unwrap_or_else(|e| panic!("connect to {} topic {topic}: {e}", brokers()))
}

async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {WAIT:?}"))
}

fn endpoint_delete(key: &str, generation: u64, observed_at_unix_micros: i64) -> Event {
    Event {
        schema_version: SCHEMA_VERSION,
        source: "kafka-test".into(),
        generation,
        observed_at_unix_micros,
        payload: Some(event::Payload::EndpointDelete(EntityDelete {
            key: key.into(),
        })),
    }
}

// ---- The shared suite ------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_round_trip_one_partition() {
    suite::round_trip(&open("rt1", 1).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_round_trip_three_partitions() {
    suite::round_trip(&open("rt3", 3).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_read_from_position() {
    suite::read_from_position(&open("rfp", 3).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_head_reports_end() {
    let log = open("head", 3).await;
    suite::head_reports_end(&log).await;
    // Again on the same log: the second check starts from a non-zero head.
    suite::head_reports_end(&log).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_tail_follow_while_appending() {
    suite::tail_follow_while_appending(&open("tail", 3).await).await;
}

/// Any sequence of appended batches reads back identically and in order; each case
/// on a fresh topic (the suite's own runner reuses one log across cases).
#[test]
fn suite_any_batches_read_back_fresh_topic_per_case() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut runner = TestRunner::new(Config {
        cases: PROPTEST_CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (suite::batches(), 1i32..=3);
    let result = runner.run(&strategy, |(batches, partitions)| {
        rt.block_on(async {
            let log = open("prop", partitions).await;
            bounded("batches_read_back", suite::batches_read_back(&log, batches)).await
        })
        .map_err(proptest::test_runner::TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("any_batches_read_back on kafka: {e}");
    }
}

// ---- Keys and partitions ---------------------------------------------------------

/// Kafka's `Utils.murmur2`, as the Java client's default partitioner uses it.
fn java_murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

#[test]
fn java_murmur2_matches_kafkas_test_vectors() {
    // From Apache Kafka's UtilsTest.testMurmur2.
    for (input, expected) in [
        ("21", -973932308i32),
        ("foobar", -790332482),
        ("a-little-bit-long-string", -985981536),
        ("a-little-bit-longer-string", -1486304829),
        (
            "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58897971,
        ),
        ("abc", 479470107),
    ] {
        assert_eq!(java_murmur2(input.as_bytes()) as i32, expected, "{input}");
    }
}

/// Same key, same partition, in append order; and it is the partition the Java
/// client would pick, so writers in any language agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_placement_matches_java_client_and_keeps_order() {
    const PARTITIONS: u32 = 3;
    let log = open("keys", PARTITIONS as i32).await;
    let keys: Vec<String> = (0..12).map(|i| format!("ep/keys/ns/pod-{i}")).collect();
    let mut events = Vec::new();
    for round in 0..5u64 {
        for k in &keys {
            events.push(endpoint_delete(k, round, 0));
        }
    }
    let mut landed = Vec::new();
    // Two appends, so order holds across batches as well as within one.
    let (a, b) = events.split_at(events.len() / 2);
    for part in [a, b] {
        landed.extend(bounded("append", log.append(part)).await.expect("append"));
    }
    let mut used = std::collections::BTreeSet::new();
    let mut last: std::collections::BTreeMap<String, RecordPos> = Default::default();
    for (e, pos) in events.iter().zip(&landed) {
        let key = e.key().expect("key");
        let java = (java_murmur2(key.as_bytes()) & 0x7fff_ffff) % PARTITIONS;
        assert_eq!(
            pos.partition, java,
            "{key} landed on {pos}, Java client picks {java}"
        );
        if let Some(prev) = last.insert(key.clone(), *pos) {
            assert_eq!(prev.partition, pos.partition, "{key} moved partitions");
            assert!(
                prev.offset < pos.offset,
                "{key} out of order: {prev} then {pos}"
            );
        }
        used.insert(pos.partition);
    }
    assert_eq!(
        used.len(),
        PARTITIONS as usize,
        "12 keys should use all 3 partitions"
    );

    // And reading back gives each key's events in generation order.
    let records = suite::read_to_end(&log, &log.start()).await;
    let mut gens: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for r in &records {
        let e = r.decode().expect("decode");
        gens.entry(e.key().expect("key"))
            .or_default()
            .push(e.generation);
    }
    for k in &keys {
        assert_eq!(gens[k], vec![0, 1, 2, 3, 4], "{k}");
    }
}

/// A multi-partition topic reads back complete, in partition-major order, the
/// same way every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_partition_read_is_complete_and_deterministic() {
    let log = open("multi", 3).await;
    let events = suite::batch(0, 300);
    let landed = bounded("append", log.append(&events))
        .await
        .expect("append");
    let all = bounded("read", log.read(&log.start(), 10_000))
        .await
        .expect("read");
    assert_eq!(all.len(), 300);
    let order: Vec<RecordPos> = all.iter().map(|r| r.pos).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(
        order, sorted,
        "read is partition-major, offset order within"
    );
    let mut want = landed.clone();
    want.sort();
    assert_eq!(order, want, "read returns exactly what was appended");
    let again = bounded("read", log.read(&log.start(), 10_000))
        .await
        .expect("read");
    assert_eq!(all, again, "same log, same read");

    // A limit cuts the same prefix.
    let first = bounded("read", log.read(&log.start(), 120))
        .await
        .expect("read");
    assert_eq!(first, all[..120].to_vec());
}

/// Reads resume from saved per-partition offsets, including one in text form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_resume_from_saved_per_partition_offsets() {
    let log = open("saved", 3).await;
    let landed = bounded("append", log.append(&suite::batch(0, 90)))
        .await
        .expect("append");
    let mut count = [0u64; 3];
    for p in &landed {
        count[p.partition as usize] += 1;
    }
    assert!(
        count.iter().all(|&c| c >= 3),
        "each partition needs records: {count:?}"
    );

    // Skip 1 record of partition 0, none of 1, all of 2.
    let saved = Position::from_offsets(vec![1, 0, count[2]]);
    let text = saved.to_string();
    let parsed: Position = text.parse().expect("position text");
    assert_eq!(parsed, saved);
    let got = suite::read_to_end(&log, &parsed).await;
    let mut want: Vec<RecordPos> = landed
        .iter()
        .copied()
        .filter(|p| !saved.contains(*p))
        .collect();
    want.sort();
    assert_eq!(got.iter().map(|r| r.pos).collect::<Vec<_>>(), want);
    assert_eq!(got.len() as u64, count[0] - 1 + count[1]);

    // A follower from the same saved position sees the same records.
    let (records, at) = bounded(
        "follow from saved",
        suite::collect_following(log.follow(saved.clone()), want.len()),
    )
    .await;
    let mut seen: Vec<RecordPos> = records.iter().map(|r| r.pos).collect();
    seen.sort();
    assert_eq!(seen, want);
    assert_eq!(at, Position::from_offsets(count.to_vec()));

    // A position of more partitions than the topic has is refused.
    let err = log
        .read(&Position::from_offsets(vec![0; 4]), 10)
        .await
        .expect_err("4-partition position on a 3-partition topic");
    assert!(matches!(err, Error::InvalidPosition { .. }), "{err}");
}

// ---- Topic creation --------------------------------------------------------------

fn metadata_partitions(topic: &str) -> usize {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .expect("metadata client");
    let md = c
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    md.topics()
        .iter()
        .find(|t| t.name() == topic)
        .map(|t| t.partitions().len())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_is_created_on_first_use_and_existing_count_wins() {
    let topic = unique_topic("create");
    let log = bounded("connect", KafkaLog::connect(&brokers(), &topic, opts(3)))
        .await
        .expect("connect");
    assert_eq!(log.partitions(), 3);
    assert_eq!(log.start(), Position::start(3));
    let t = topic.clone();
    let seen = tokio::task::spawn_blocking(move || metadata_partitions(&t))
        .await
        .expect("metadata task");
    assert_eq!(seen, 3, "the broker's own metadata for the new topic");

    // Reconnecting with another count keeps the topic as it is.
    let again = bounded("reconnect", KafkaLog::connect(&brokers(), &topic, opts(5)))
        .await
        .expect("reconnect");
    assert_eq!(
        again.partitions(),
        3,
        "an existing topic keeps its partition count"
    );
    assert_eq!(again.start(), Position::start(3));
}

/// A topic the log creates is compacted (`cleanup.policy=compact`), as the
/// broker's own DescribeConfigs reports it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_topic_is_compacted() {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;
    let log = open("compact", 2).await;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .expect("admin client");
    let described = bounded(
        "describe configs",
        admin.describe_configs(
            [&ResourceSpecifier::Topic(log.topic())],
            &AdminOptions::new().request_timeout(Some(Duration::from_secs(10))),
        ),
    )
    .await
    .expect("DescribeConfigs");
    let resource = described
        .into_iter()
        .next()
        .expect("one resource")
        .expect("topic config");
    let policy = resource.get("cleanup.policy").and_then(|e| e.value.clone());
    assert_eq!(policy.as_deref(), Some("compact"), "{:?}", resource.entries);
}

// ---- Head from the high watermarks, and tailing from it ------------------------

fn raw_watermarks(topic: &str, partitions: i32) -> Vec<(i64, i64)> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .expect("client");
    (0..partitions)
        .map(|p| {
            c.fetch_watermarks(topic, p, Duration::from_secs(10))
                .expect("fetch_watermarks")
        })
        .collect()
}

/// `head` is where appends landed, from a fresh handle that knows nothing, and it
/// is exactly the broker's high watermarks (ListOffsets), including after a
/// multi-record last batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_is_the_high_watermark_from_a_fresh_handle() {
    let log = open("hwm", 2).await;
    // Single-event batches, then one big batch last: a broker that answers
    // ListOffsets with "last batch's base offset + 1" (Tansu 0.6) is off here.
    let mut landed = Vec::new();
    for i in 0..4 {
        landed.extend(
            bounded("append", log.append(&suite::batch(i, 1)))
                .await
                .expect("append"),
        );
    }
    landed.extend(
        bounded("append", log.append(&suite::batch(4, 40)))
            .await
            .expect("append"),
    );
    let mut expected = log.start();
    for p in &landed {
        expected.advance(*p);
    }
    let fresh = bounded(
        "connect",
        KafkaLog::connect(&brokers(), log.topic(), opts(2)),
    )
    .await
    .expect("connect");
    let t0 = Instant::now();
    let head = bounded("head", fresh.head()).await.expect("head");
    let took = t0.elapsed();
    assert_eq!(head, expected, "head from a fresh handle");
    assert_eq!(bounded("head", log.head()).await.expect("head"), expected);

    let topic = log.topic().to_owned();
    let watermarks = tokio::task::spawn_blocking(move || raw_watermarks(&topic, 2))
        .await
        .expect("watermark task");
    let high: Vec<u64> = watermarks.iter().map(|&(_, h)| h as u64).collect();
    assert_eq!(head.offsets(), high.as_slice(), "head = high watermarks");
    assert!(
        watermarks.iter().all(|&(low, _)| low == 0),
        "{watermarks:?}"
    );
    // One ListOffsets round trip, not a scan: a scan waits out a fetch at every
    // partition end, so it could not stay under this bound.
    assert!(took < Duration::from_secs(2), "head took {took:?}");
    eprintln!("head {head} in {took:?}; ListOffsets (low, high) = {watermarks:?}");

    // A read from the head returns nothing at once (no fetch needed).
    let t0 = Instant::now();
    let none = bounded("read", fresh.read(&head, 100)).await.expect("read");
    assert!(none.is_empty());
    eprintln!("read at the head: {:?}", t0.elapsed());
}

/// Tailing from the head: a raw consumer assigned at `Offset::End` and the log's
/// own follower started at `head()` see exactly the records appended afterwards,
/// the first of them at the head; the follower is caught up at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_from_the_head_sees_only_new_records() {
    let log = open("end", 1).await;
    bounded("append", log.append(&suite::batch(0, 10)))
        .await
        .expect("append");
    let head = bounded("head", log.head()).await.expect("head");
    assert_eq!(head, Position::from_offsets(vec![10]));

    let topic = log.topic().to_owned();
    let raw: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", unique_topic("end-reader"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()
        .expect("raw consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, rdkafka::Offset::End)
        .expect("tpl");
    raw.assign(&tpl).expect("assign at Offset::End");
    // librdkafka resolves Offset::End with ListOffsets, then fetches from there;
    // the partition-EOF event says it has (so the appends below come after it).
    let raw = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + WAIT;
        loop {
            assert!(
                Instant::now() < deadline,
                "no EOF after assigning at Offset::End"
            );
            match raw.poll(Duration::from_millis(100)) {
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(0))) => return raw,
                Some(Ok(m)) => panic!("a record at {} before any append", m.offset()),
                _ => {}
            }
        }
    })
    .await
    .expect("resolve task");

    let mut follower = log.follow(head.clone());
    match next_item(&mut follower).await {
        FollowItem::CaughtUp(p) => assert_eq!(p, head, "caught up at the head at once"),
        other => panic!("expected CaughtUp from the head, got {other:?}"),
    }

    let landed = bounded("append", log.append(&suite::batch(10, 5)))
        .await
        .expect("append");
    assert_eq!(landed.first().map(|p| p.offset), Some(10));

    let got = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + WAIT;
        let mut offsets = Vec::new();
        while offsets.len() < 5 {
            assert!(Instant::now() < deadline, "raw tail got {offsets:?}");
            match raw.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => offsets.push(m.offset()),
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) | None => {}
                Some(Err(e)) => panic!("raw tail: {e}"),
            }
        }
        offsets
    })
    .await
    .expect("raw tail");
    assert_eq!(
        got,
        vec![10, 11, 12, 13, 14],
        "Offset::End tails from the head"
    );

    let (records, at) = bounded("follow from head", suite::collect_following(follower, 5)).await;
    let seen: Vec<u64> = records.iter().map(|r| r.pos.offset).collect();
    assert_eq!(seen, vec![10, 11, 12, 13, 14]);
    assert_eq!(at, Position::from_offsets(vec![15]));
}

/// Other Kafka tools see a well-formed message: key = entity key, value = the
/// encoded event, timestamp = observed-at in milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_carry_key_value_and_observed_at_timestamp() {
    let log = open("wire", 1).await;
    let e = endpoint_delete("ep/wire/ns/pod-1", 7, 1_700_000_123_456_789);
    let at = bounded("append", log.append(std::slice::from_ref(&e)))
        .await
        .expect("append")[0];
    let topic = log.topic().to_owned();
    let (key, value, ts) = tokio::task::spawn_blocking(move || {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers())
            .set("group.id", unique_topic("raw-reader"))
            .set("enable.auto.commit", "false")
            .create()
            .expect("raw consumer");
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset(
            &topic,
            at.partition as i32,
            rdkafka::Offset::Offset(at.offset as i64),
        )
        .expect("tpl");
        c.assign(&tpl).expect("assign");
        let deadline = Instant::now() + WAIT;
        loop {
            assert!(Instant::now() < deadline, "raw consumer got nothing");
            if let Some(m) = c.poll(Duration::from_millis(200)) {
                let m = m.expect("message");
                return (
                    m.key().map(<[u8]>::to_vec),
                    m.payload().map(<[u8]>::to_vec),
                    m.timestamp().to_millis(),
                );
            }
        }
    })
    .await
    .expect("raw read");
    assert_eq!(key.as_deref(), Some(&b"ep/wire/ns/pod-1"[..]));
    assert_eq!(value, Some(encode_event(&e)));
    assert_eq!(ts, Some(1_700_000_123_456));
}

// ---- Follow ----------------------------------------------------------------------

async fn next_item(
    s: &mut futures::stream::BoxStream<'static, deltapilot_log::Result<FollowItem>>,
) -> FollowItem {
    bounded("follow item", s.next())
        .await
        .expect("stream ended")
        .expect("follow item")
}

/// An empty topic reports caught-up at the start; then records; then caught-up at
/// the new head; and it keeps following after that. Batches are never empty and
/// never larger than FOLLOW_BATCH_MAX (the last round appends more than that).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_reports_caught_up_then_keeps_following() {
    let log = open("follow", 3).await;
    let mut s = log.follow(log.start());
    match next_item(&mut s).await {
        FollowItem::CaughtUp(p) => assert_eq!(p, Position::start(3)),
        other => panic!("expected CaughtUp on an empty topic, got {other:?}"),
    }
    let mut head = log.start();
    let mut delivered = log.start();
    for (first, n) in [(0, 20), (20, 20), (40, FOLLOW_BATCH_MAX as u64 + 500)] {
        let events: Vec<Event> = (first..first + n).map(|i| suite::event(i, 50)).collect();
        let landed = bounded("append", log.append(&events))
            .await
            .expect("append");
        for p in &landed {
            head.advance(*p);
        }
        // The batch spreads over partitions that may become visible one by one, so
        // an early CaughtUp may come between them. Each one must be exactly where
        // the follower has read to; the last one is at the head.
        let mut got = 0;
        loop {
            match next_item(&mut s).await {
                FollowItem::Records(b) => {
                    assert!(!b.is_empty(), "empty batch");
                    assert!(b.len() <= FOLLOW_BATCH_MAX, "batch of {}", b.len());
                    got += b.len();
                    assert!(got as u64 <= n, "more records than appended");
                    for r in &b {
                        delivered.advance(r.pos);
                    }
                }
                FollowItem::CaughtUp(p) => {
                    assert_eq!(p, delivered, "CaughtUp position is what was read");
                    if got as u64 == n {
                        assert_eq!(p, head, "caught up at the head");
                        break;
                    }
                }
            }
        }
    }
}

// ---- Bad input -------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_without_key_is_refused_and_nothing_is_appended() {
    let log = open("nokey", 1).await;
    let keyless = Event {
        payload: None,
        ..endpoint_delete("x", 1, 0)
    };
    let batch = vec![endpoint_delete("ep/a", 1, 0), keyless];
    let err = log.append(&batch).await.expect_err("keyless event");
    assert!(matches!(err, Error::InvalidEvent(_)), "{err}");
    assert!(err.to_string().contains("event 1"), "{err}");
    assert_eq!(
        bounded("head", log.head()).await.expect("head"),
        log.start()
    );
}

// ---- Unreachable and dying brokers -----------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_a_closed_port_fails_fast_and_says_where() {
    let brokers = format!("127.0.0.1:{}", free_port());
    let o = KafkaOptions {
        request_timeout: Duration::from_secs(2),
        ..opts(1)
    };
    let t0 = Instant::now();
    let err = bounded("connect", KafkaLog::connect(&brokers, "dp-test-nowhere", o))
        .await
        .expect_err("no broker there");
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(6), "took {took:?}");
    let text = err.to_string();
    assert!(matches!(err, Error::Kafka { .. }), "{text}");
    assert!(
        text.contains(&brokers) && text.contains("dp-test-nowhere"),
        "{text}"
    );
    eprintln!("connect to a closed port failed after {took:?}: {text}");
}

/// The broker dies after the log connected: append fails within its bounded
/// timeout with a clear error, and reads, heads and followers fail within theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_death_fails_appends_and_reads_within_their_bounds() {
    let mut broker = tokio::task::spawn_blocking(|| PrivateKafka::start(None))
        .await
        .expect("private kafka");
    let o = KafkaOptions {
        partitions: 2,
        append_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(2),
        read_timeout: Duration::from_secs(4),
        ..KafkaOptions::default()
    };
    let log = bounded(
        "connect",
        KafkaLog::connect(&broker.addr, "dp-test-dies", o),
    )
    .await
    .expect("connect to the private broker");
    bounded("append", log.append(&suite::batch(0, 10)))
        .await
        .expect("append while the broker is up");
    let mut follower = log.follow(log.start());
    let mut got = 0;
    while got < 10 {
        if let FollowItem::Records(b) = next_item(&mut follower).await {
            got += b.len();
        }
    }

    broker.kill();

    let t0 = Instant::now();
    let err = bounded("append", log.append(&suite::batch(10, 5)))
        .await
        .expect_err("append with the broker dead");
    let took = t0.elapsed();
    let text = err.to_string();
    eprintln!("append after broker death failed after {took:?}: {text}");
    assert!(
        took >= Duration::from_millis(1500),
        "failed too early to have retried: {took:?}"
    );
    // librdkafka's report comes after append_timeout, or up to request_timeout later
    // for a message caught in flight; the log's own guard adds 1 s on top of both.
    assert!(
        took < Duration::from_secs(2 + 2 + 1 + 2),
        "append_timeout 2s + request_timeout 2s, took {took:?}"
    );
    match &err {
        Error::Kafka { op: "append", .. } => assert!(
            text.contains("not stored") && text.contains(&broker.addr),
            "{text}"
        ),
        Error::Timeout { .. } => {}
        other => panic!("unexpected error kind: {other}"),
    }

    // Read, head and a new follower, all at once: each reports within its bounds
    // (request_timeout 2s without progress; read_timeout 4s in all).
    let timed = |what: &'static str, t0: Instant, err: Error| {
        eprintln!(
            "{what} after broker death failed after {:?}: {err}",
            t0.elapsed()
        );
        assert!(t0.elapsed() < Duration::from_secs(4 + 3), "{what} bound");
        err
    };
    let mut late = log.follow(log.start());
    let start = log.start();
    let t0 = Instant::now();
    let (read, head, follow) = bounded("read, head and follow", async {
        tokio::join!(log.read(&start, 100), log.head(), late.next())
    })
    .await;
    timed("read", t0, read.expect_err("read with the broker dead"));
    timed("head", t0, head.expect_err("head with the broker dead"));
    let err = follow
        .expect("stream item")
        .expect_err("follow with the broker dead");
    let err = timed("follow", t0, err);
    assert!(
        err.to_string()
            .contains("no record and no end-of-partition"),
        "{err}"
    );
    drop(late);
    drop(follower);
}
