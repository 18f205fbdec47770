//! Checkpoints against a real embedded log: a replay from any checkpoint equals a
//! replay from zero byte for byte (every resource and the snapshot hash, which also
//! equal what the fold runner publishes); a damaged, foreign or too-new checkpoint
//! is skipped for an older one or for zero; the periodic writer writes on its
//! thresholds and at shutdown, and a restored engine continues where it stopped.

mod replay_support;

use std::time::Duration;

use deltapilot_engine::checkpoint::{
    CheckpointFailure, CheckpointPolicy, CheckpointStats, CheckpointStore, fingerprints,
    generator_id, load_verified, run_checkpointer, run_counted,
};
use deltapilot_engine::replay::Replayer;
use deltapilot_engine::replay::drive::{fold_to, start_before};
use deltapilot_engine::runner::Engine;
use deltapilot_log::{EventLog, Position};
use deltapilot_xds::generate::GenOptions;
use deltapilot_xds::hash::full_snapshot_hash;
use replay_support::*;
use tokio::sync::watch;

/// Writes a checkpoint of the log's state at `at` into `store`.
async fn checkpoint_at(log: &impl EventLog, store: &CheckpointStore, at: u64) {
    checkpoint_with(log, store, at, true).await;
}

/// Writes a checkpoint of the log's state at `at` into `store`, with the
/// resources when `with_resources`.
async fn checkpoint_with(
    log: &impl EventLog,
    store: &CheckpointStore,
    at: u64,
    with_resources: bool,
) {
    let at = Position::single(at);
    let mut r = Replayer::new(GenOptions::default());
    assert!(
        fold_to(log, &mut r, &at, &mut |_| {})
            .await
            .expect("fold")
            .is_none()
    );
    let fps = fingerprints(log, &at).await.expect("fingerprints");
    let id = generator_id(&GenOptions::default());
    let set = r.resources().clone();
    let resources = with_resources.then_some((id.as_str(), &set));
    store
        .write(&at, &fps, r.model(), resources)
        .expect("write checkpoint");
}

#[tokio::test]
async fn replay_from_a_checkpoint_equals_replay_from_zero_byte_for_byte() {
    let dir = tempfile::tempdir().expect("tmp");
    let events = history();
    let log = log_with(&dir.path().join("log"), &events).await;
    let head = log.head().await.expect("head");
    let store = CheckpointStore::new(dir.path().join("checkpoints"), 100);

    let mut zero = Replayer::new(GenOptions::default());
    assert!(
        fold_to(&log, &mut zero, &head, &mut |_| {})
            .await
            .expect("fold")
            .is_none()
    );
    let want = zero.snapshot();
    assert_eq!(
        want.hash,
        full_snapshot_hash(&want),
        "the running hash from zero"
    );
    let want_bytes = all_bytes(&want.resources);
    assert!(
        want_bytes.len() > 10,
        "a real resource set: {}",
        want_bytes.len()
    );

    // The fold runner, fed the same records, publishes the same thing.
    let mut engine = Engine::new(GenOptions::default());
    let recs = log.read(&log.start(), 10_000).await.expect("read");
    for chunk in recs.chunks(5) {
        engine.apply_records(chunk);
    }
    assert_eq!(
        engine.current().hash,
        want.hash,
        "replayer and runner agree"
    );
    assert_eq!(all_bytes(&engine.current().resources), want_bytes);

    // Odd positions store resources (reused where the tail allows), even ones not.
    for at in [
        1u64,
        5,
        17,
        26,
        29,
        33,
        events.len() as u64 - 1,
        events.len() as u64,
    ] {
        checkpoint_with(&log, &store, at, at % 2 == 1).await;
        let start = start_before(&log, Some(&store), &head, GenOptions::default())
            .await
            .expect("start");
        assert!(start.rejected.is_empty(), "{:?}", start.rejected);
        assert_eq!(
            start.replayer.position(),
            &Position::single(at),
            "the newest checkpoint is used"
        );
        assert_eq!(
            start.replayer.reused_stored_resources(),
            at % 2 == 1,
            "at {at}"
        );
        let mut r = start.replayer;
        assert!(
            fold_to(&log, &mut r, &head, &mut |_| {})
                .await
                .expect("fold")
                .is_none()
        );
        let got = r.snapshot();
        assert_eq!(
            got.hash, want.hash,
            "snapshot hash from the checkpoint at {at}"
        );
        assert_eq!(
            got.hash,
            full_snapshot_hash(&got),
            "the replayer's running hash, from the checkpoint at {at}"
        );
        assert_eq!(
            all_bytes(&got.resources),
            want_bytes,
            "resources from the checkpoint at {at}"
        );
        assert_eq!(got.model, want.model, "model from the checkpoint at {at}");

        // An engine restored from it and fed the rest publishes the same too.
        let (_, cp) = load_verified(&store, &log, None)
            .await
            .expect("load")
            .checkpoint
            .expect("cp");
        let mut restored = Engine::from_checkpoint(GenOptions::default(), cp);
        let rest: Vec<_> = recs
            .iter()
            .filter(|r| r.pos.offset >= at)
            .cloned()
            .collect();
        restored.apply_records(&rest);
        assert_eq!(
            restored.current().hash,
            want.hash,
            "runner restored at {at}"
        );
    }

    // A position before every checkpoint starts from zero.
    let early = start_before(
        &log,
        Some(&store),
        &Position::single(0),
        GenOptions::default(),
    )
    .await
    .expect("start");
    assert!(early.checkpoint.is_none());
    assert_eq!(
        early.rejected.len(),
        8,
        "every checkpoint lies after position 0: {:?}",
        early.rejected
    );
}

#[tokio::test]
async fn a_corrupt_checkpoint_is_skipped_for_an_older_one_or_zero() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = log_with(&dir.path().join("log"), &history()).await;
    let head = log.head().await.expect("head");
    let store = CheckpointStore::new(dir.path().join("checkpoints"), 10);
    for at in [10, 20, 30] {
        checkpoint_at(&log, &store, at).await;
    }
    let mut zero = Replayer::new(GenOptions::default());
    fold_to(&log, &mut zero, &head, &mut |_| {})
        .await
        .expect("fold");
    let want = zero.snapshot().hash;

    let files = store.list().expect("list");
    let flip = |path: &std::path::Path, at: usize| {
        let mut b = std::fs::read(path).expect("read");
        let i = at.min(b.len() - 1);
        b[i] ^= 0x20;
        std::fs::write(path, b).expect("write");
    };
    let len = std::fs::metadata(&files[2].path).expect("meta").len() as usize;
    flip(&files[2].path, len / 2);
    let loaded = load_verified(&store, &log, None).await.expect("load");
    let (path, cp) = loaded.checkpoint.expect("the older one");
    assert_eq!(
        (path, cp.position.clone()),
        (files[1].path.clone(), Position::single(20))
    );
    assert_eq!(loaded.rejected.len(), 1);
    assert!(
        loaded.rejected[0].reason.contains("body checksum"),
        "{}",
        loaded.rejected[0]
    );

    // Truncated and header-damaged too: nothing usable, so zero.
    std::fs::write(
        &files[1].path,
        &std::fs::read(&files[1].path).expect("read")[..100],
    )
    .expect("truncate");
    flip(&files[0].path, 20);
    let start = start_before(&log, Some(&store), &head, GenOptions::default())
        .await
        .expect("start");
    assert!(start.checkpoint.is_none());
    let reasons: Vec<&str> = start.rejected.iter().map(|r| r.reason.as_str()).collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(
        reasons[1].contains("truncated") && reasons[2].contains("header checksum"),
        "{reasons:?}"
    );
    let mut r = start.replayer;
    fold_to(&log, &mut r, &head, &mut |_| {})
        .await
        .expect("fold");
    assert_eq!(r.snapshot().hash, want, "replay from zero still gets there");
}

#[tokio::test]
async fn a_checkpoint_of_another_log_or_beyond_the_head_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let events = history();
    let log = log_with(&dir.path().join("log"), &events).await;
    let store = CheckpointStore::new(dir.path().join("checkpoints"), 10);
    checkpoint_at(&log, &store, 12).await;

    // Same length, different record 11.
    let mut other_events = events.clone();
    other_events[11] = ep("k8s", 1, "ep/other", "10.9.9.9", &["a.ns.svc"], 1);
    let other = log_with(&dir.path().join("other"), &other_events).await;
    let loaded = load_verified(&store, &other, None).await.expect("load");
    assert!(loaded.checkpoint.is_none());
    assert!(
        loaded.rejected[0].reason.contains("another log"),
        "{}",
        loaded.rejected[0]
    );

    // A shorter log (as after a truncated tail).
    let short = log_with(&dir.path().join("short"), &events[..8]).await;
    let loaded = load_verified(&store, &short, None).await.expect("load");
    assert!(loaded.checkpoint.is_none());
    assert!(
        loaded.rejected[0].reason.contains("beyond the log's head"),
        "{}",
        loaded.rejected[0]
    );

    // The right log accepts it.
    assert!(
        load_verified(&store, &log, None)
            .await
            .expect("load")
            .checkpoint
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_checkpoints_on_its_threshold_and_at_shutdown() {
    let dir = tempfile::tempdir().expect("tmp");
    let events = history();
    let log = std::sync::Arc::new(log_with(&dir.path().join("log"), &events[..12]).await);
    let store = CheckpointStore::new(dir.path().join("checkpoints"), 2);
    let policy = CheckpointPolicy {
        every_events: 10,
        every: Duration::from_secs(3600),
        keep: 2,
    };
    let engine = Engine::new(GenOptions::default());
    let reader = engine.reader();
    let (stop_tx, stop_rx) = watch::channel(false);
    let writer = tokio::spawn(run_checkpointer(
        log.clone(),
        store.clone(),
        policy,
        GenOptions::default(),
        reader.clone(),
        Position::default(),
        stop_rx.clone(),
    ));
    let follower = log.clone();
    let fold = tokio::spawn(async move {
        let from = follower.start();
        engine.run(&*follower, from, stop_rx).await.expect("engine");
    });

    let wait_files = |n: usize, last: u64| {
        let store = store.clone();
        async move {
            for _ in 0..500 {
                let files = store.list().expect("list");
                if files.len() == n && files.last().is_some_and(|f| f.records == last) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            panic!("no checkpoint at {last} within 10 s: {:?}", store.list());
        }
    };
    wait_files(1, 12).await;
    log.append(&events[12..25]).await.expect("append");
    wait_files(2, 25).await;
    log.append(&events[25..29]).await.expect("append");
    // 4 records are below the threshold; the last one comes at shutdown.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        store.list().expect("list").last().map(|f| f.records),
        Some(25)
    );
    stop_tx.send(true).expect("stop");
    tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("writer stops")
        .expect("no panic")
        .expect("writer ok");
    tokio::time::timeout(Duration::from_secs(10), fold)
        .await
        .expect("fold stops")
        .expect("no panic");
    let files = store.list().expect("list");
    assert_eq!(
        files.iter().map(|f| f.records).collect::<Vec<_>>(),
        [25, 29],
        "keep = 2"
    );

    let (_, cp) = load_verified(&store, &*log, None)
        .await
        .expect("load")
        .checkpoint
        .expect("cp");
    assert_eq!(cp.position, Position::single(29));
    let restored = Engine::from_checkpoint(GenOptions::default(), cp);
    assert_eq!(
        restored.current().hash,
        reader.load().hash,
        "a restart resumes the same state"
    );
}

#[tokio::test]
async fn stored_resources_are_only_reused_by_the_same_generator() {
    let dir = tempfile::tempdir().expect("tmp");
    // Up to the marker that completes the second resync: the records after 34 are
    // endpoint upserts only, so the stored resources serve to the head with only
    // their assignments built again.
    let events = history()[..38].to_vec();
    let log = log_with(&dir.path().join("log"), &events).await;
    let head = log.head().await.expect("head");
    let store = CheckpointStore::new(dir.path().join("checkpoints"), 10);
    checkpoint_at(&log, &store, 34).await;

    let mut zero = Replayer::new(GenOptions::default());
    fold_to(&log, &mut zero, &head, &mut |_| {})
        .await
        .expect("fold");
    let want = zero.snapshot();

    let (_, cp) = load_verified(&store, &log, None)
        .await
        .expect("load")
        .checkpoint
        .expect("cp");
    let mut reused = Replayer::from_checkpoint(cp.clone(), GenOptions::default());
    assert!(reused.reused_stored_resources());
    fold_to(&log, &mut reused, &head, &mut |_| {})
        .await
        .expect("fold");
    assert_eq!(reused.snapshot().hash, want.hash);
    assert_eq!(all_bytes(reused.resources()), all_bytes(&want.resources));

    // Other options: another generator, so everything is built instead.
    let other = GenOptions {
        bind_outbound: true,
        ..Default::default()
    };
    assert!(!Replayer::from_checkpoint(cp.clone(), other).reused_stored_resources());

    // A stored resource that this generator would not produce fails the spot check.
    let mut tampered = cp.clone();
    let stored = tampered.resources.as_mut().expect("stored");
    let name = stored
        .set
        .clusters
        .keys()
        .next()
        .expect("a cluster")
        .clone();
    let fake = deltapilot_xds::Resource::new(name, bytes::Bytes::from_static(b"\x0a\x01x"));
    stored.set.clusters.insert(std::sync::Arc::new(fake));
    let mut r = Replayer::from_checkpoint(tampered, GenOptions::default());
    assert!(!r.reused_stored_resources());
    fold_to(&log, &mut r, &head, &mut |_| {})
        .await
        .expect("fold");
    assert_eq!(
        r.snapshot().hash,
        want.hash,
        "built from the entity set instead"
    );
}

/// A checkpoint that cannot be written (its directory's path is a regular file)
/// is counted as a `write_io` failure, and the writer keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_is_counted_by_reason() {
    let dir = tempfile::tempdir().expect("tmp");
    let events = history();
    let log = std::sync::Arc::new(log_with(&dir.path().join("log"), &events[..12]).await);
    let blocked = dir.path().join("checkpoints");
    std::fs::write(&blocked, b"not a directory").expect("block the directory");
    let store = CheckpointStore::new(&blocked, 2);
    let policy = CheckpointPolicy {
        every_events: 1,
        every: Duration::from_secs(3600),
        keep: 2,
    };
    let engine = Engine::new(GenOptions::default());
    let reader = engine.reader();
    let stats = std::sync::Arc::new(CheckpointStats::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let writer = tokio::spawn(run_counted(
        log.clone(),
        store,
        policy,
        GenOptions::default(),
        reader,
        Position::default(),
        stop_rx.clone(),
        stats.clone(),
    ));
    let follower = log.clone();
    let fold = tokio::spawn(async move {
        let from = follower.start();
        engine.run(&*follower, from, stop_rx).await.expect("engine");
    });
    let mut counted = 0;
    for _ in 0..500 {
        counted = stats.failures(CheckpointFailure::WriteIo);
        if counted > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(counted > 0, "no write_io failure counted within 10 s");
    for other in CheckpointFailure::ALL
        .into_iter()
        .filter(|r| *r != CheckpointFailure::WriteIo)
    {
        assert_eq!(stats.failures(other), 0, "{}", other.as_str());
    }
    stop_tx.send(true).expect("stop");
    tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("writer stops")
        .expect("no panic")
        .expect("a failed write never stops the writer");
    fold.await.expect("fold");
}
