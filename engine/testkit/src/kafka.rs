//! The real Kafka-protocol broker the Kafka tests run against: where it is (a
//! missing broker fails the test with how to start one; it never skips), and
//! topic names no other test or earlier run uses.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// `DELTAPILOT_KAFKA_BROKERS`, or a panic saying how to start a broker for `test`.
pub fn brokers(test: &str) -> String {
    match std::env::var("DELTAPILOT_KAFKA_BROKERS") {
        Ok(b) if !b.trim().is_empty() => b,
        _ => panic!(
            "DELTAPILOT_KAFKA_BROKERS is not set. This test needs a real Kafka-protocol \
             broker; start one and point the test at it:\n  \
             scripts/install-test-deps.sh\n  \
             scripts/tansu.sh start 19092\n  \
             DELTAPILOT_KAFKA_BROKERS=127.0.0.1:19092 cargo test -p deltapilot-engine --test {test}\n\
             (scripts/test.sh does all of this.)"
        ),
    }
}

/// A topic name no other test (or earlier run against the same broker) uses.
pub fn unique_topic(name: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "dp-test-{name}-{}-{}-{:x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        nanos
    )
}
