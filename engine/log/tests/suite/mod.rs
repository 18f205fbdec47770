//! Behavioural suite every [`EventLog`] backend must pass. A backend's test file
//! pulls it in with `mod suite;` and calls each check with an opened log.
//!
//! Contract of every check:
//! - It takes an already-opened log and may append to it. It works relative to the
//!   head it finds on entry, so the log may already hold records and one log may
//!   serve several checks in a row. Nobody else may append to the log while a check
//!   runs (checks compare the head with what they appended).
//! - It assumes only what the trait promises: records of one partition come back in
//!   offset order, in the order they were appended; nothing is assumed about the
//!   order across partitions or about how many partitions there are. Appended events
//!   are matched to records through the `RecordPos` that `append` returned.
//! - Events with the same key are appended in a known order, and per-key order is
//!   checked too (it follows from per-partition order for a keyed backend).
//! - Failures panic with a message naming the check; the property check returns its
//!   failure to proptest instead, so that the failing input is shrunk.

// Each backend's test file uses the checks that apply to it, not necessarily all.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use deltapilot_log::{EventLog, FollowItem, Position, Record, RecordPos, encode_event};
use deltapilot_proto::Event;
use futures::StreamExt;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// How long a check waits for a follower before it declares it stuck.
const FOLLOW_TIMEOUT: Duration = Duration::from_secs(30);

/// Records asked for per `read` call when a check reads everything back; small
/// enough that multi-call reads are exercised.
const READ_CHUNK: usize = 64;

pub(crate) use deltapilot_testkit::segments::{batch, event};

/// Reads everything from `from` until a read returns nothing.
pub(crate) async fn read_to_end<L: EventLog>(log: &L, from: &Position) -> Vec<Record> {
    let mut pos = from.clone();
    let mut out = Vec::new();
    loop {
        let recs = log.read(&pos, READ_CHUNK).await.expect("read");
        if recs.is_empty() {
            return out;
        }
        assert!(
            recs.len() <= READ_CHUNK,
            "read returned more than its limit"
        );
        for r in &recs {
            assert!(
                !pos.contains(r.pos),
                "read returned {} from before {pos}",
                r.pos
            );
            pos.advance(r.pos);
        }
        out.extend(recs);
    }
}

/// Checks that `records` hold exactly `appended` (events with where they landed):
/// same bytes at the same positions, per-partition offset order, per-key order.
fn check_same(appended: &[(Event, RecordPos)], records: &[Record]) -> Result<(), String> {
    if appended.len() != records.len() {
        return Err(format!(
            "appended {} events but read back {} records",
            appended.len(),
            records.len()
        ));
    }
    let by_pos: BTreeMap<RecordPos, &Record> = records.iter().map(|r| (r.pos, r)).collect();
    if by_pos.len() != records.len() {
        return Err("a position was read back twice".into());
    }
    let mut last_in_partition: BTreeMap<u32, u64> = BTreeMap::new();
    for r in records {
        if let Some(prev) = last_in_partition.insert(r.pos.partition, r.pos.offset)
            && prev >= r.pos.offset
        {
            return Err(format!(
                "partition {} out of order: {prev} then {}",
                r.pos.partition, r.pos.offset
            ));
        }
    }
    let mut last_for_key: BTreeMap<String, RecordPos> = BTreeMap::new();
    for (e, pos) in appended {
        let r = by_pos
            .get(pos)
            .ok_or_else(|| format!("nothing read back at {pos}"))?;
        if r.bytes.as_ref() != encode_event(e).as_slice() {
            return Err(format!("bytes at {pos} differ from the appended event"));
        }
        let decoded = r
            .decode()
            .map_err(|err| format!("decode at {pos}: {err}"))?;
        if &decoded != e {
            return Err(format!("event at {pos} decodes differently"));
        }
        let key = e.key().unwrap_or_default();
        if let Some(prev) = last_for_key.insert(key.clone(), *pos)
            && (prev.partition != pos.partition || prev.offset >= pos.offset)
        {
            return Err(format!("key {key} out of order: {prev} then {pos}"));
        }
    }
    Ok(())
}

/// Appends `events` as one batch and pairs each with where it landed, checking the
/// positions are fresh (not before `before`) and in order within each partition.
async fn append_checked<L: EventLog>(
    log: &L,
    before: &Position,
    events: Vec<Event>,
) -> Result<Vec<(Event, RecordPos)>, String> {
    let positions = log
        .append(&events)
        .await
        .map_err(|e| format!("append: {e}"))?;
    if positions.len() != events.len() {
        return Err(format!(
            "append of {} events returned {} positions",
            events.len(),
            positions.len()
        ));
    }
    if let Some(p) = positions.iter().find(|p| before.contains(**p)) {
        return Err(format!("append returned {p}, before the head {before}"));
    }
    Ok(events.into_iter().zip(positions).collect())
}

/// Append a batch, read it back: same bytes, same positions, same order.
pub(crate) async fn round_trip<L: EventLog>(log: &L) {
    let before = log.head().await.expect("head");
    let appended = append_checked(log, &before, batch(0, 50))
        .await
        .expect("round_trip");
    let empty = log.append(&[]).await.expect("empty append");
    assert!(
        empty.is_empty(),
        "round_trip: empty append returned positions"
    );
    let records = read_to_end(log, &before).await;
    check_same(&appended, &records).expect("round_trip");
}

/// Reading from a position inside what was appended returns exactly the records
/// not yet covered by it, in order; a limit of 1 steps through them one by one.
pub(crate) async fn read_from_position<L: EventLog>(log: &L) {
    let before = log.head().await.expect("head");
    let appended = append_checked(log, &before, batch(100, 40))
        .await
        .expect("read_from_position");
    let mut from = before.clone();
    for (_, p) in &appended[..25] {
        from.advance(*p);
    }
    let expected: Vec<_> = appended
        .iter()
        .filter(|(_, p)| !from.contains(*p))
        .cloned()
        .collect();
    assert_eq!(
        expected.len(),
        15,
        "read_from_position: position arithmetic"
    );
    let records = read_to_end(log, &from).await;
    check_same(&expected, &records).expect("read_from_position");

    let mut pos = from.clone();
    let mut stepped = Vec::new();
    loop {
        let one = log.read(&pos, 1).await.expect("read limit 1");
        assert!(
            one.len() <= 1,
            "read_from_position: limit 1 returned {}",
            one.len()
        );
        let Some(r) = one.into_iter().next() else {
            break;
        };
        pos.advance(r.pos);
        stepped.push(r);
    }
    check_same(&expected, &stepped).expect("read_from_position, one at a time");
    assert!(
        log.read(&before, 0).await.expect("read limit 0").is_empty(),
        "read_from_position: limit 0 returned records"
    );
}

/// The head is one past the last record in every partition: it covers what was
/// appended, reading from it yields nothing, and the start is not after it.
pub(crate) async fn head_reports_end<L: EventLog>(log: &L) {
    let before = log.head().await.expect("head");
    assert!(
        before.covers(&log.start()),
        "head_reports_end: start {} after head {before}",
        log.start()
    );
    let appended = append_checked(log, &before, batch(200, 10))
        .await
        .expect("head_reports_end");
    let mut expected = before.clone();
    for (_, p) in &appended {
        expected.advance(*p);
    }
    let head = log.head().await.expect("head");
    assert_eq!(head, expected, "head_reports_end: head after appending");
    assert!(
        log.read(&head, 10).await.expect("read at head").is_empty(),
        "head_reports_end: records at or after the head"
    );
    let everything = read_to_end(log, &log.start()).await;
    let mut end = log.start();
    for r in &everything {
        end.advance(r.pos);
    }
    assert!(
        head.covers(&end),
        "head_reports_end: records past head {head}"
    );
}

/// A follower started at the head sees every record appended afterwards, in order,
/// while the appends happen in several batches, and reports when it caught up.
pub(crate) async fn tail_follow_while_appending<L: EventLog>(log: &L) {
    const BATCHES: u64 = 6;
    const PER_BATCH: u64 = 25;
    let total = (BATCHES * PER_BATCH) as usize;
    let before = log.head().await.expect("head");
    let stream = log.follow(before.clone());
    let follower = tokio::spawn(collect_following(stream, total));

    let mut appended = Vec::new();
    let mut head = before.clone();
    for b in 0..BATCHES {
        let events = batch(1000 + b * PER_BATCH, PER_BATCH);
        let more = append_checked(log, &head, events)
            .await
            .expect("tail_follow_while_appending");
        for (_, p) in &more {
            head.advance(*p);
        }
        appended.extend(more);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (records, caught_up) = tokio::time::timeout(FOLLOW_TIMEOUT, follower)
        .await
        .expect("tail_follow_while_appending: follower stuck")
        .expect("follower task");
    check_same(&appended, &records).expect("tail_follow_while_appending");
    assert!(
        caught_up.covers(&head),
        "tail_follow_while_appending: caught up at {caught_up}, head is {head}"
    );
}

/// Pulls a follow stream until it has `total` records and then reports caught up;
/// returns the records and that position.
pub(crate) async fn collect_following(
    mut stream: futures::stream::BoxStream<'static, deltapilot_log::Result<FollowItem>>,
    total: usize,
) -> (Vec<Record>, Position) {
    let mut records = Vec::new();
    while let Some(item) = stream.next().await {
        match item.expect("follow item") {
            FollowItem::Records(batch) => {
                assert!(!batch.is_empty(), "follow yielded an empty batch");
                records.extend(batch);
                assert!(
                    records.len() <= total,
                    "follow yielded more than was appended"
                );
            }
            FollowItem::CaughtUp(pos) if records.len() == total => return (records, pos),
            FollowItem::CaughtUp(_) => {}
        }
    }
    panic!(
        "follow stream ended after {} of {total} records",
        records.len()
    );
}

/// Batches of events of varied sizes and keys, including empty batches.
pub(crate) fn batches() -> impl Strategy<Value = Vec<Vec<Event>>> {
    let one = (0u64..1_000_000, 0usize..600).prop_map(|(i, size)| event(i, size));
    prop::collection::vec(prop::collection::vec(one, 0..30), 1..8)
}

/// Appends `batches` in order and reads them back from the head found on entry.
pub(crate) async fn batches_read_back<L: EventLog>(
    log: &L,
    batches: Vec<Vec<Event>>,
) -> Result<(), String> {
    let before = log.head().await.map_err(|e| format!("head: {e}"))?;
    let mut head = before.clone();
    let mut appended = Vec::new();
    for events in batches {
        let more = append_checked(log, &head, events).await?;
        for (_, p) in &more {
            head.advance(*p);
        }
        appended.extend(more);
    }
    check_same(&appended, &read_to_end(log, &before).await)
}

/// Property: any sequence of appended batches reads back identically and in order.
/// Runs `cases` cases against one log (each case starts at the head the previous
/// one left), driving the async check on `rt`.
pub(crate) fn any_batches_read_back<L: EventLog>(
    rt: &tokio::runtime::Runtime,
    log: &L,
    cases: u32,
) {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&batches(), |b| {
        rt.block_on(batches_read_back(log, b))
            .map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("any_batches_read_back: {e}");
    }
}
