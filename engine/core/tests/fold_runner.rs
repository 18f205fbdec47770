//! The engine runner against a real embedded log: it follows the log, folds what is
//! there and what is appended later, becomes ready on catch-up, counts skipped
//! events, and stops on the drain signal.

mod fold_support;

use std::time::Duration;

use deltapilot_engine::runner::{Engine, FOLD_THREAD};
use deltapilot_log::file::{FileLog, FileLogOptions};
use deltapilot_log::{EventLog, Position};
use deltapilot_model::fold::SkipReason;
use deltapilot_xds::generate::GenOptions;
use deltapilot_xds::hash::full_snapshot_hash;
use deltapilot_xds::snapshot::SnapshotReader;
use fold_support::*;
use tokio::sync::watch;

/// Polls the published snapshot until its position reaches `offset` (bounded).
async fn wait_for_offset(reader: &SnapshotReader, offset: u64) {
    for _ in 0..1000 {
        if reader.load().position.offset(0) >= offset {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "engine did not reach offset {offset}; at {}",
        reader.load().position
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_a_file_log_until_shutdown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = std::sync::Arc::new(
        FileLog::open(dir.path(), FileLogOptions::default()).expect("open log"),
    );
    log.append(&[
        svc("file", 1, "ns", "a.ns.svc", 80),
        ep("file", 1, "ep/1", "10.0.0.1", &["a.ns.svc"], 1),
        ep("file", 1, "ep/orphan", "10.0.0.2", &["missing.ns.svc"], 1),
    ])
    .await
    .expect("append");

    let engine = Engine::new(GenOptions::default());
    let reader = engine.reader();
    let stats = engine.stats();
    let mut ready = engine.ready();
    let (stop_tx, stop_rx) = watch::channel(false);
    let follower = log.clone();
    let task = tokio::spawn(async move {
        let from = follower.start();
        engine.run(&*follower, from, stop_rx).await
    });

    tokio::time::timeout(Duration::from_secs(10), ready.wait_for(|r| *r))
        .await
        .expect("ready within bound")
        .expect("engine alive");
    wait_for_offset(&reader, 3).await;
    assert!(
        thread_names().iter().any(|n| n == FOLD_THREAD),
        "the fold runs on its own OS thread, not a tokio worker: {:?}",
        thread_names()
    );
    let snap = reader.load();
    assert_eq!(snap.model.endpoint_count("a.ns.svc"), 1);
    assert_eq!(stats.skipped(SkipReason::UnknownService), 1);

    // Appended while the engine follows.
    log.append(&[
        ep("file", 1, "ep/2", "10.0.0.3", &["a.ns.svc"], 1),
        ep_del("file", 1, "ep/1"),
    ])
    .await
    .expect("append");
    wait_for_offset(&reader, 5).await;
    let snap = reader.load();
    let keys: Vec<String> = snap
        .model
        .endpoints_of("a.ns.svc")
        .map(|e| e.key.to_string())
        .collect();
    assert_eq!(keys, ["ep/2"]);
    assert_eq!(snap.hash, full_snapshot_hash(&snap));
    assert_eq!(stats.events_applied(), 4);

    stop_tx.send(true).expect("engine listening");
    let engine = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("stops within bound")
        .expect("task did not panic")
        .expect("clean stop");
    assert_eq!(engine.position(), &Position::single(5));
    assert!(stats.caught_up());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_the_same_file_log_gives_the_same_hash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = FileLog::open(dir.path(), FileLogOptions::default()).expect("open log");
    let mut events = vec![resync("file", 1, false)];
    for i in 0..50u32 {
        let host = format!("s{}.ns.svc", i % 7);
        events.push(svc("file", 1, "ns", &host, 80 + i % 3));
        events.push(ep(
            "file",
            1,
            &format!("ep/{i}"),
            &format!("10.0.1.{i}"),
            &[&host],
            i % 4,
        ));
    }
    events.push(resync("file", 1, true));
    log.append(&events).await.expect("append");
    let head = log.head().await.expect("head");

    let mut hashes = Vec::new();
    for _ in 0..2 {
        let mut engine = Engine::new(GenOptions::default());
        let mut offset = Position::single(0);
        for _ in 0..100 {
            let records = log.read(&offset, 17).await.expect("read");
            if records.is_empty() {
                break;
            }
            for r in &records {
                offset.advance(r.pos);
            }
            engine.apply_records(&records);
        }
        assert_eq!(engine.position(), &head);
        hashes.push(engine.current().hash);
    }
    assert_eq!(hashes[0], hashes[1]);
}

/// The names of this process's threads, as the kernel reports them.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .collect()
}

/// The snapshot a replay of `log` up to its head computes: the state every
/// engine publishing at that position must hold.
async fn replayed_hash(log: &FileLog) -> u64 {
    let head = log.head().await.expect("head");
    let mut r = deltapilot_engine::replay::Replayer::new(GenOptions::default());
    let stopped = deltapilot_engine::replay::drive::fold_to(log, &mut r, &head, &mut |_| {})
        .await
        .expect("fold");
    assert!(stopped.is_none(), "the log reads to its head");
    r.snapshot().hash
}

/// The log an engine finds at start (several follower batches of it) is folded
/// as a replay folds it: readiness comes with one snapshot, the replay's, that
/// covers the head; the batches before it publish nothing. After readiness the
/// live path takes over: an append is folded and published at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catching_up_publishes_the_replays_snapshot_once_then_follows_live() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = std::sync::Arc::new(
        FileLog::open(dir.path(), FileLogOptions::default()).expect("open log"),
    );
    let mut events = Vec::new();
    for s in 0..20u32 {
        events.push(svc("file", 1, "ns", &format!("s{s}.ns.svc"), 80));
    }
    // Three and a half follower batches: endpoints that come, change and go.
    let total = deltapilot_log::FOLLOW_BATCH_MAX * 7 / 2;
    for i in 0..total {
        let host = format!("s{}.ns.svc", i % 20);
        let key = format!("ep/{}", i % 600);
        if i % 11 == 0 {
            events.push(ep_del("file", 1, &key));
        } else {
            let addr = format!("10.0.{}.{}", (i / 250) % 250, i % 250);
            events.push(ep("file", 1, &key, &addr, &[&host], (i % 4) as u32));
        }
    }
    for chunk in events.chunks(1000) {
        log.append(chunk).await.expect("append");
    }
    let head = log.head().await.expect("head");
    let expected = replayed_hash(&log).await;

    let engine = Engine::new(GenOptions::default());
    let reader = engine.reader();
    let mut ready = engine.ready();
    let (stop_tx, stop_rx) = watch::channel(false);
    let follower = log.clone();
    let task = tokio::spawn(async move {
        let from = follower.start();
        engine.run(&*follower, from, stop_rx).await
    });
    tokio::time::timeout(Duration::from_secs(60), ready.wait_for(|r| *r))
        .await
        .expect("ready within bound")
        .expect("engine alive");
    let snap = reader.load();
    assert_eq!(snap.position, head, "ready only once the head is covered");
    assert_eq!(snap.hash, expected, "the replay's snapshot");
    assert_eq!(
        snap.hash,
        full_snapshot_hash(&snap),
        "consistent with its content"
    );
    assert_eq!(
        snap.seq, 1,
        "one snapshot for the whole catch-up, not one per follower batch"
    );
    assert_eq!(snap.recent.len(), 1, "one change set: the catch-up's");

    // Live: an appended change is folded and published by itself.
    log.append(&[
        svc("file", 1, "ns", "late.ns.svc", 80),
        ep("file", 1, "ep/late", "10.9.9.9", &["late.ns.svc"], 1),
    ])
    .await
    .expect("append");
    wait_for_offset(&reader, head.offset(0) + 2).await;
    let snap = reader.load();
    assert_eq!(snap.model.endpoint_count("late.ns.svc"), 1);
    assert!(
        snap.seq >= 2,
        "the live change is a new snapshot: seq {}",
        snap.seq
    );
    assert_eq!(snap.hash, replayed_hash(&log).await, "still the replay's");

    stop_tx.send(true).expect("engine listening");
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("stops within bound")
        .expect("task did not panic")
        .expect("clean stop");
}

/// An engine stopped while catching up hands back a consistent state: what it
/// folded is regenerated and published (and it is not ready).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_during_the_catch_up_publishes_what_was_folded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = std::sync::Arc::new(
        FileLog::open(dir.path(), FileLogOptions::default()).expect("open log"),
    );
    log.append(&[
        svc("file", 1, "ns", "a.ns.svc", 80),
        ep("file", 1, "ep/1", "10.0.0.1", &["a.ns.svc"], 1),
    ])
    .await
    .expect("append");
    let engine = Engine::new(GenOptions::default());
    let reader = engine.reader();
    // Stopped at once: the fold thread may have folded none, some or all of
    // the records; whatever it folded must be what it publishes.
    let (stop_tx, stop_rx) = watch::channel(false);
    let follower = log.clone();
    let task = tokio::spawn(async move {
        let from = follower.start();
        engine.run(&*follower, from, stop_rx).await
    });
    stop_tx.send(true).expect("engine listening");
    let engine = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("stops within bound")
        .expect("task did not panic")
        .expect("clean stop");
    let snap = reader.load();
    assert_eq!(
        &snap.position,
        engine.position(),
        "what was folded is published"
    );
    assert_eq!(snap.hash, full_snapshot_hash(&snap));
}
