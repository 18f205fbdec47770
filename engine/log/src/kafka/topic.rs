//! Topic creation on first use, and discovery of the topic's real partition count.
//!
//! A topic created here is compacted (`cleanup.policy=compact`); its other settings
//! are the cluster's defaults.
//!
//! What it does NOT do: change an existing topic. A topic that already exists keeps
//! its partition count and configuration; growing it would move keys to other
//! partitions and break per-key order, so that is left to an operator (with a
//! re-created topic).

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::Producer as _;
use tokio::time::Instant;

use super::config::{LastError, Producer};
use super::{KafkaOptions, Target, config, settings};
use crate::Result;

/// `cleanup.policy` of a topic this backend creates.
pub(super) const TOPIC_CLEANUP_POLICY: &str = "compact";

/// Pause between metadata polls while a just-created topic propagates to the brokers.
const METADATA_RETRY: Duration = Duration::from_millis(50);

/// Slack on top of librdkafka's own request timeout before our outer guard fires;
/// librdkafka checks its timeouts on a timer, so it can be a little late.
const GUARD_SLACK: Duration = Duration::from_secs(1);

/// Creates the topic with `opts.partitions` partitions unless it exists, then returns
/// the partition count the brokers report for it. `client` is any client of the
/// cluster (the log's producer), used for the metadata request.
pub(super) async fn ensure(
    target: &Target,
    opts: &KafkaOptions,
    client: &Producer,
) -> Result<usize> {
    let created = create(target, opts).await?;
    let partitions = partition_count(target, opts, client).await?;
    let wanted = opts.partitions as usize;
    if partitions != wanted {
        if created {
            // We created it and the broker reports another count: not a topic we can
            // reason about (e.g. a racing creator with another count that won).
            tracing::warn!(
                topic = %target.topic,
                brokers = %target.brokers,
                created_with = wanted,
                reported = partitions,
                "topic was created but the brokers report a different partition count; using the reported count"
            );
        } else {
            tracing::warn!(
                topic = %target.topic,
                brokers = %target.brokers,
                configured = wanted,
                existing = partitions,
                "topic already exists with a different partition count; using the existing count (the `partitions` option only applies when the topic is created)"
            );
        }
    } else {
        tracing::info!(topic = %target.topic, partitions, created, "kafka event log topic ready");
    }
    Ok(partitions)
}

/// Sends CreateTopics. `Ok(true)`: created now; `Ok(false)`: it already existed.
async fn create(target: &Target, opts: &KafkaOptions) -> Result<bool> {
    let admin: AdminClient<LastError> = config::admin(target)
        .create_with_context(target.last_error.clone())
        .map_err(|e| target.err("create admin client", settings::client_error(e)))?;
    let admin_opts = AdminOptions::new()
        .request_timeout(Some(opts.request_timeout))
        .operation_timeout(Some(opts.request_timeout));
    // Replication -1: the cluster's `default.replication.factor` (KIP-464). The
    // durability of an acknowledged append comes from acks=all plus the cluster's
    // `min.insync.replicas`, which are the operator's to set per cluster.
    // Compacted: the log keeps the latest event per key (entity key, or
    // `resync/<source>/<phase>` for markers), which is all a fold from the start needs (see
    // the module docs of [`crate::kafka`]), instead of deleting old events by
    // age (the broker's default `delete` policy would lose live entities).
    let new = NewTopic::new(&target.topic, opts.partitions, TopicReplication::Fixed(-1))
        .set("cleanup.policy", TOPIC_CLEANUP_POLICY);
    let results = tokio::time::timeout(
        opts.request_timeout + GUARD_SLACK,
        admin.create_topics([&new], &admin_opts),
    )
    .await
    .map_err(|_| {
        target.err(
            "create topic",
            target.with_cause(format!(
                "no answer within {:?} (request_timeout); is the broker reachable?",
                opts.request_timeout
            )),
        )
    })?
    .map_err(|e| target.err("create topic", target.with_cause(reachability(e))))?;
    match results.first() {
        Some(Ok(_)) => Ok(true),
        Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => Ok(false),
        Some(Err((_, code))) => {
            Err(target.err("create topic", target.with_cause(reachability(code))))
        }
        None => Err(target.err(
            "create topic",
            "the broker answered CreateTopics without a result for the topic",
        )),
    }
}

/// Adds a hint to the errors a dead or unreachable broker produces.
fn reachability(e: impl std::fmt::Display) -> String {
    let text = e.to_string();
    if text.contains("Timed out") || text.contains("transport") || text.contains("brokers down") {
        format!("{text} (is the broker running and reachable at the listed address?)")
    } else {
        text
    }
}

/// Polls the topic's metadata until it lists partitions (a new topic takes a moment
/// to reach every broker), bounded by `request_timeout`.
async fn partition_count(target: &Target, opts: &KafkaOptions, client: &Producer) -> Result<usize> {
    let deadline = Instant::now() + opts.request_timeout;
    let mut last = String::from("no metadata answer");
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(target.err(
                "read topic metadata",
                target.with_cause(format!(
                    "topic has no usable metadata after {:?}: {last}",
                    opts.request_timeout
                )),
            ));
        }
        let producer = client.clone();
        let topic = target.topic.clone();
        // fetch_metadata blocks its thread until the broker answers or the timeout.
        let answer = tokio::task::spawn_blocking(move || {
            let md = producer.client().fetch_metadata(Some(&topic), remaining)?;
            let found = md.topics().iter().find(|t| t.name() == topic).map(|t| {
                let mut ids: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
                ids.sort_unstable();
                (t.error().map(RDKafkaErrorCode::from), ids)
            });
            Ok::<_, rdkafka::error::KafkaError>(found)
        })
        .await
        .map_err(|e| target.err("read topic metadata", e))?;
        match answer {
            Ok(Some((None, ids))) if !ids.is_empty() => {
                let contiguous = ids.iter().enumerate().all(|(i, &id)| id == i as i32);
                if !contiguous {
                    return Err(target.err(
                        "read topic metadata",
                        format!("partition ids are not 0..n: {ids:?}"),
                    ));
                }
                return Ok(ids.len());
            }
            Ok(Some((Some(code), _))) => last = format!("topic error: {code}"),
            Ok(Some((None, _))) => last = "topic listed with no partitions".into(),
            Ok(None) => last = "topic not listed".into(),
            Err(e) => last = reachability(e),
        }
        tokio::time::sleep(METADATA_RETRY).await;
    }
}
