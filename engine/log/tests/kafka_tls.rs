//! The Kafka log over the real Apache Kafka's SASL_SSL listener (scripts/kafka.sh
//! with DELTAPILOT_KAFKA_TLS=1), with SCRAM-SHA-256 and the password from a file:
//! an append is read back, follow catches up, and a config file's typo is
//! refused with the key's name before any client exists. The `run` tests
//! (server/tests/run_kafka_tls.rs) cover SSL with client certificates, SCRAM-SHA-512,
//! PLAIN and the failures. Fails, never skips, without the broker's variables.

use std::time::Duration;

use deltapilot_log::kafka::{KafkaLog, KafkaOptions};
use deltapilot_log::{EventLog, FollowItem, parse_uri};
use deltapilot_proto::{EntityDelete, Event, SCHEMA_VERSION, event};
use deltapilot_testkit::kafka::unique_topic;
use futures::StreamExt;

const WAIT: Duration = Duration::from_secs(30);

fn var(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v,
        _ => panic!(
            "{name} is not set: start the broker with DELTAPILOT_KAFKA_TLS=1 \
             scripts/kafka.sh start PORT, then `eval \"$(scripts/kafka.sh env)\"`; \
             this test never skips"
        ),
    }
}

fn options(uri: &str) -> KafkaOptions {
    parse_uri(uri).expect("valid URI").1.kafka
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_sha_256_over_tls_appends_reads_and_follows() {
    let brokers = var("DELTAPILOT_KAFKA_SASL_BROKERS");
    let tls = std::path::PathBuf::from(var("DELTAPILOT_KAFKA_TLS_DIR"));
    let topic = unique_topic("tls-scram256");
    let uri = format!(
        "kafka://{brokers}/{topic}?security.protocol=SASL_SSL&ssl.ca.location={}\
         &sasl.mechanism=SCRAM-SHA-256&sasl.username=deltapilot&sasl.password.file={}",
        tls.join("ca.pem").display(),
        tls.join("sasl.password").display(),
    );
    let log = tokio::time::timeout(WAIT, KafkaLog::connect(&brokers, &topic, options(&uri)))
        .await
        .expect("connect within bound")
        .expect("connect over SASL_SSL");
    let ev = Event {
        schema_version: SCHEMA_VERSION,
        source: "tls-test".into(),
        generation: 1,
        observed_at_unix_micros: 1,
        payload: Some(event::Payload::EndpointDelete(EntityDelete {
            key: "ep/tls/one".into(),
        })),
    };
    let at = tokio::time::timeout(WAIT, log.append(std::slice::from_ref(&ev)))
        .await
        .expect("append within bound")
        .expect("append");
    assert_eq!(at.len(), 1);
    let read = tokio::time::timeout(WAIT, log.read(&log.start(), 10))
        .await
        .expect("read within bound")
        .expect("read");
    assert_eq!(read.len(), 1, "{read:?}");
    let mut follow = log.follow(log.start());
    let mut seen = 0;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let item = tokio::time::timeout_at(deadline, follow.next())
            .await
            .expect("follow catches up within bound")
            .expect("stream open")
            .expect("follow");
        match item {
            FollowItem::Records(r) => seen += r.len(),
            FollowItem::CaughtUp(_) if seen == 1 => break,
            FollowItem::CaughtUp(p) => panic!("caught up at {p:?} after {seen} records"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typo_in_the_config_file_is_refused_with_its_line_and_key() {
    let brokers = var("DELTAPILOT_KAFKA_SASL_BROKERS");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("kafka.properties");
    std::fs::write(&file, "security.protocol=SASL_SSL\nsasl.mechansim=PLAIN\n").expect("write");
    let uri = format!("kafka://{brokers}/t?config={}", file.display());
    let err = tokio::time::timeout(WAIT, KafkaLog::connect(&brokers, "t", options(&uri)))
        .await
        .expect("bounded")
        .expect_err("typo");
    let text = err.to_string();
    assert!(
        text.contains("line 2") && text.contains("sasl.mechansim"),
        "{text}"
    );
}
