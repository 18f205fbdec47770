//! The Kafka backend's options and every librdkafka setting it uses, in one place,
//! each with the reason it is set.
//!
//! What it does NOT do: talk to a broker. The clients are created by the modules
//! that use them (`topic`, `produce`, `consume`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{ConsumerContext, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::FutureProducer;

use super::Target;
use super::settings::ClientSettings;
use crate::{Error, Result};

/// Options of the Kafka backend.
#[derive(Debug, Clone)]
pub struct KafkaOptions {
    /// Partition count used when the topic is created on first use. An existing topic
    /// keeps its own count (a warning is logged when it differs).
    pub partitions: i32,
    /// How long one append may retry before it fails: librdkafka's
    /// `message.timeout.ms` (a.k.a. `delivery.timeout.ms`).
    pub append_timeout: Duration,
    /// Bound on one metadata/admin request, and on how long a reader may wait without
    /// any progress (no record and no end-of-partition) before it reports a stall.
    pub request_timeout: Duration,
    /// Bound on one [`read`](crate::EventLog::read) or
    /// [`head`](crate::EventLog::head) call as a whole. Larger than
    /// `request_timeout` because a `read` may fetch up to its limit of records from
    /// every partition (see the module docs of [`crate::kafka`]).
    pub read_timeout: Duration,
    /// The operator's librdkafka settings (TLS, SASL, tuning): the URI's dotted
    /// keys and its `config=FILE` (see [`ClientSettings`]).
    pub client: ClientSettings,
}

impl Default for KafkaOptions {
    fn default() -> Self {
        Self {
            partitions: 1,
            append_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(60),
            client: ClientSettings::default(),
        }
    }
}

impl KafkaOptions {
    /// Rejects values librdkafka would misread (0 ms means "forever" to it) or refuse.
    pub(super) fn validate(&self) -> Result<()> {
        let bad = |reason: String| Error::Kafka {
            op: "configure",
            reason,
        };
        if !(1..=MAX_PARTITIONS).contains(&self.partitions) {
            return Err(bad(format!(
                "partitions={} is outside 1..={MAX_PARTITIONS}",
                self.partitions
            )));
        }
        for (name, d) in [
            ("append_timeout", self.append_timeout),
            ("request_timeout", self.request_timeout),
            ("read_timeout", self.read_timeout),
        ] {
            if d < Duration::from_millis(1) || d.as_millis() > i32::MAX as u128 {
                return Err(bad(format!(
                    "{name}={d:?} must be between 1 ms and {} ms",
                    i32::MAX
                )));
            }
        }
        Ok(())
    }
}

/// Most partitions a topic may be created with (matches the `--log` URI check).
const MAX_PARTITIONS: i32 = 1024;

/// `fetch.wait.max.ms` for `read`/`head`. At the end of a partition the broker holds
/// an empty fetch this long before answering, and only that answer produces the
/// end-of-partition event, so this is the floor of every `read`'s latency.
const SCAN_FETCH_WAIT_MS: &str = "20";

/// `fetch.wait.max.ms` for followers. Apache Kafka answers a held fetch as soon as
/// data arrives, so there it only sets how often an idle follower asks; Tansu 0.6
/// always holds the fetch for the full wait (measured), so there it is also the worst
/// extra latency of a new record. 100 ms keeps both small.
const FOLLOW_FETCH_WAIT_MS: &str = "100";

/// `queued.max.messages.kbytes`: the consumer's prefetch buffer. librdkafka's default
/// (64 MiB per consumer) is more than a follower needs to keep
/// [`FOLLOW_BATCH_MAX`](crate::FOLLOW_BATCH_MAX) batches flowing; 16 MiB holds
/// ~80k typical events, so a slow follower costs at most that much memory.
const CONSUMER_PREFETCH_KBYTES: &str = "16384";

/// `linger.ms`: how long the producer waits to fill a batch. An append enqueues its
/// whole batch at once, so a short linger only costs latency.
const PRODUCER_LINGER_MS: &str = "5";

/// What a consumer is for; decides its fetch wait.
#[derive(Debug, Clone, Copy)]
pub(super) enum ConsumerRole {
    /// A bounded read: finish fast at the end of the log.
    Scan,
    /// A follower: wait for new records cheaply.
    Follow,
}

fn ms(d: Duration) -> String {
    d.as_millis().clamp(1, i32::MAX as u128).to_string()
}

/// `reconnect.backoff.max.ms`: librdkafka's reconnect backoff grows to this cap
/// (default 10 s). A lower cap lets a replica reconnect within a second of a broker
/// coming back, and keeps the producer's message-timeout checks, which run on the
/// broker thread's wake-ups, close to `append_timeout` while the broker is down.
const RECONNECT_BACKOFF_MAX_MS: &str = "1000";

/// The last error librdkafka reported on any client of one log. A failed TLS
/// handshake, refused credentials or a plaintext client on a TLS port surface only
/// here (the request itself just times out), so a timeout quotes it.
#[derive(Clone, Default)]
pub(super) struct LastError(Arc<Mutex<Reported>>);

/// The last specific error, and the last "all brokers are down", which follows
/// every specific one and says nothing about why.
#[derive(Default)]
struct Reported {
    cause: Option<String>,
    all_down: Option<String>,
}

impl LastError {
    /// What librdkafka last complained about, if anything: the last specific
    /// error, else "all brokers are down".
    pub(super) fn get(&self) -> Option<String> {
        let r = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        r.cause.clone().or_else(|| r.all_down.clone())
    }
}

impl ClientContext for LastError {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::error!(target: "librdkafka", %error, "{reason}");
        let mut r = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown) {
            r.all_down = Some(reason.to_owned());
        } else {
            r.cause = Some(reason.to_owned());
        }
    }

    /// As rdkafka's default (librdkafka's log lines under target `librdkafka`),
    /// and a connection failure (`FAIL`) is kept as a cause: a plaintext client
    /// on a TLS port learns nothing else (the broker just closes).
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        use RDKafkaLogLevel as L;
        match level {
            L::Emerg | L::Alert | L::Critical | L::Error => {
                tracing::error!(target: "librdkafka", "librdkafka: {fac} {message}")
            }
            L::Warning => tracing::warn!(target: "librdkafka", "librdkafka: {fac} {message}"),
            L::Notice | L::Info => {
                tracing::info!(target: "librdkafka", "librdkafka: {fac} {message}")
            }
            L::Debug => tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}"),
        }
        if fac == "FAIL" {
            self.0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .cause = Some(message.to_owned());
        }
    }
}

impl ConsumerContext for LastError {}

impl std::fmt::Debug for LastError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.get())
    }
}

/// The log's producer, reporting into [`LastError`].
pub(super) type Producer = FutureProducer<LastError>;

/// The log's consumers, reporting into [`LastError`].
pub(super) type Consumer = StreamConsumer<LastError>;

fn base(brokers: &str, client_id: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers)
        .set("client.id", client_id)
        .set("reconnect.backoff.max.ms", RECONNECT_BACKOFF_MAX_MS)
        // A deleted topic must not silently come back with the broker's default
        // partition count (which would break per-key order); `connect` creates it.
        .set("allow.auto.create.topics", "false");
    c
}

/// The producer: idempotent, `acks=all`, key-hashed with Java-compatible murmur2.
pub(super) fn producer(target: &Target, opts: &KafkaOptions) -> ClientConfig {
    let mut c = base(&target.brokers, "deltapilot-producer");
    c.set("enable.idempotence", "true")
        // Implied by idempotence; explicit so nobody "tunes" it away.
        .set("acks", "all")
        // Idempotence keeps per-partition order with up to 5 requests in flight.
        .set("max.in.flight.requests.per.connection", "5")
        // Same key -> same partition as the Java client (murmur2 of the key bytes);
        // keyless messages never happen (append rejects them).
        .set("partitioner", "murmur2_random")
        // The bounded retry: librdkafka retries internally until this much time has
        // passed since the message was enqueued, then fails its delivery report.
        .set("message.timeout.ms", ms(opts.append_timeout))
        .set("request.timeout.ms", ms(opts.request_timeout))
        .set("linger.ms", PRODUCER_LINGER_MS)
        // Events are small protobufs that compress well in batches (resyncs).
        .set("compression.type", "zstd");
    target.settings.apply(&mut c);
    c
}

/// The admin client used to create the topic.
pub(super) fn admin(target: &Target) -> ClientConfig {
    let mut c = base(&target.brokers, "deltapilot-admin");
    target.settings.apply(&mut c);
    c
}

/// A consumer that reads by assignment only.
pub(super) fn consumer(target: &Target, role: ConsumerRole) -> ClientConfig {
    let mut c = base(&target.brokers, "deltapilot-reader");
    let wait = match role {
        ConsumerRole::Scan => SCAN_FETCH_WAIT_MS,
        ConsumerRole::Follow => FOLLOW_FETCH_WAIT_MS,
    };
    // librdkafka insists on a group.id even for assign(); an assign()-only consumer
    // never joins the group and never commits, so a unique throwaway id leaves no
    // trace on the broker and no replica ever shares offsets with another.
    c.set("group.id", throwaway_group_id())
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // A partition also ends at these events (raised at the fetch response's high
        // watermark), so offsets at its end that hold no record never stall a read.
        .set("enable.partition.eof", "true")
        // A saved offset the broker no longer has (or never had) is an error, not a
        // silent jump to the start or end of the partition.
        .set("auto.offset.reset", "error")
        .set("fetch.wait.max.ms", wait)
        .set("queued.max.messages.kbytes", CONSUMER_PREFETCH_KBYTES);
    target.settings.apply(&mut c);
    c
}

/// A group id no other consumer uses: process id, a per-process counter, and the
/// current time (so two processes that reuse a pid do not collide either).
fn throwaway_group_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "deltapilot-assign-only-{}-{n}-{nanos:x}",
        std::process::id()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_timeouts_are_refused() {
        let o = KafkaOptions {
            append_timeout: Duration::ZERO,
            ..KafkaOptions::default()
        };
        let e = o.validate().expect_err("0 ms means forever to librdkafka");
        assert!(e.to_string().contains("append_timeout"), "{e}");
        let o = KafkaOptions {
            partitions: 0,
            ..KafkaOptions::default()
        };
        assert!(o.validate().is_err());
        KafkaOptions::default()
            .validate()
            .expect("defaults are valid");
    }

    #[test]
    fn group_ids_are_unique() {
        assert_ne!(throwaway_group_id(), throwaway_group_id());
    }

    #[test]
    fn librdkafka_accepts_every_config() {
        // Creating the clients validates every property name and value locally;
        // no broker is contacted until a request is made.
        use rdkafka::consumer::BaseConsumer;
        use rdkafka::producer::BaseProducer;
        let opts = KafkaOptions::default();
        let target = Target::new("127.0.0.1:1", "t", Default::default());
        let _: BaseProducer = producer(&target, &opts).create().expect("producer config");
        for role in [ConsumerRole::Scan, ConsumerRole::Follow] {
            let _: BaseConsumer = consumer(&target, role).create().expect("consumer config");
        }
    }
}
