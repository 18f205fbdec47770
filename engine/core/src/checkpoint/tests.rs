//! Unit tests of the checkpoint format and store: round trips that equal the
//! original state, damage that is detected, retention.

use super::*;
use deltapilot_model::state::mk::*;

/// A state with every kind of entity and bookkeeping, including the cases a
/// re-fold would get wrong: an endpoint whose service was deleted after it was
/// admitted, two sources defining one hostname, a hostname spelled in capitals.
fn rich_state() -> ModelState {
    ModelState::from_events(&[
        resync("a", 3, false),
        resync("a", 3, true),
        resync("a", 5, false),
        svc("a", 3, "ns", "h1", &[80, 9090]),
        svc("b", 0, "ns", "h1", &[81]),
        svc("a", 5, "ns", "Upper.Case", &[8080]),
        svc("a", 3, "ns", "gone", &[80]),
        ep("a", 3, "ep/1", "10.0.0.1", &["h1"]),
        ep("a", 3, "ep/6", "fd00::6", &["h1", "upper.case"]),
        ep_labeled("a", 3, "ep/2", "10.0.0.2", &["gone"], &[("app", "x")]),
        svc_del("a", 3, "ns", "gone"),
        cfg("b", 0, "vs", r#"{"hosts":["h1"]}"#),
        rule(
            "b",
            0,
            deltapilot_proto::ConfigKind::VirtualService,
            "other",
            "wild",
            r#"{"hosts":["*.case"],"http":[{"route":[{"destination":{"host":"h1"}}]}]}"#,
        ),
        rule(
            "b",
            0,
            deltapilot_proto::ConfigKind::DestinationRule,
            "ns",
            "dr",
            r#"{"host":"h1","subsets":[{"name":"v1","labels":{"app":"x"}}]}"#,
        ),
    ])
}

fn fp() -> Vec<Fingerprint> {
    vec![Fingerprint {
        partition: 0,
        offset: 11,
        digest: 0xfeed,
    }]
}

#[test]
fn round_trip_equals_the_original_state() {
    let st = rich_state();
    assert!(
        st.raw_endpoint("ep/2").is_some(),
        "the orphan endpoint is kept by the fold"
    );
    let pos = Position::single(12);
    let bytes = encode(&pos, &fp(), &st, None);
    let cp = decode(&bytes).expect("decodes");
    assert_eq!(cp.position, pos);
    assert_eq!(cp.fingerprints, fp());
    assert_eq!(cp.model.hash(), st.hash());
    assert_eq!(
        cp.model, st,
        "restored state equals the original, merged view included"
    );
    assert_eq!(cp.model.rules().len(), 3, "traffic rules are indexed again");
    assert_eq!(cp.model.rules().statuses(), st.rules().statuses());
    assert!(
        cp.model
            .rules()
            .virtual_service_for(&deltapilot_model::Hostname::new("upper.case"))
            .is_some()
    );
    assert_eq!(cp.model.hash(), cp.model.recompute_hash());
    assert_eq!(
        encode(&pos, &fp(), &cp.model, None),
        bytes,
        "re-encoding is byte-identical"
    );
}

#[test]
fn empty_state_round_trips() {
    let cp = decode(&encode(
        &Position::default(),
        &[],
        &ModelState::default(),
        None,
    ))
    .expect("decodes");
    assert_eq!(cp.model, ModelState::default());
    assert_eq!(cp.position, Position::default());
}

#[test]
fn every_kind_of_damage_is_detected() {
    use deltapilot_xds::generate::{GenOptions, build_all};
    let st = rich_state();
    let (set, _) = build_all(&st, &GenOptions::default());
    let id = generator_id(&GenOptions::default());
    let bytes = encode(
        &Position::from_offsets(vec![4, 9]),
        &fp(),
        &st,
        Some((&id, &set)),
    );
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated", bytes[..bytes.len() - 3].to_vec(), "truncated"),
        (
            "extended",
            [bytes.clone(), vec![0]].concat(),
            "truncated or extended",
        ),
        ("too short", bytes[..20].to_vec(), "shorter than"),
        ("table cut", bytes[..50].to_vec(), "section table"),
        (
            "table byte",
            flip(&bytes, 45),
            "body checksum mismatch in the section table",
        ),
        (
            "state byte",
            flip(&bytes, 80),
            "body checksum mismatch in the state section",
        ),
        (
            "last byte",
            flip(&bytes, bytes.len() - 1),
            "body checksum mismatch in the resources section",
        ),
        ("header length", flip(&bytes, 17), "header checksum"),
        ("magic", flip(&bytes, 0), "bad magic"),
    ];
    for (what, damaged, needle) in cases {
        let e = decode(&damaged).expect_err(what);
        assert!(e.contains(needle), "{what}: {e}");
    }
}

#[test]
fn another_format_version_is_refused_not_misread() {
    let mut bytes = encode(&Position::single(1), &[], &rich_state(), None);
    bytes[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    reseal(&mut bytes);
    let e = decode(&bytes).expect_err("a newer version");
    assert!(
        e.contains(&format!("format version {}", FORMAT_VERSION + 1)),
        "{e}"
    );
}

/// A store passes over a checkpoint of another format version saying so, not
/// calling it corrupt, and over a damaged one calling it corrupt.
#[test]
fn another_builds_checkpoint_is_named_as_such_not_corrupt() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut bytes = encode(&Position::single(1), &[], &rich_state(), None);
    bytes[8..12].copy_from_slice(&(FORMAT_VERSION - 1).to_le_bytes());
    reseal(&mut bytes);
    let path = dir.path().join("old.dpc");
    std::fs::write(&path, &bytes).expect("write");
    let e = store::read_checked(&path, &|_| Ok(())).expect_err("another version");
    assert!(
        e.contains(&format!("format version {}", FORMAT_VERSION - 1))
            && e.contains("another deltapilot build")
            && !e.contains("corrupt"),
        "{e}"
    );
    std::fs::write(&path, flip(&bytes, 0)).expect("write");
    let e = store::read_checked(&path, &|_| Ok(())).expect_err("bad magic");
    assert!(e.starts_with("corrupt:"), "{e}");
}

fn flip(bytes: &[u8], at: usize) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[at] ^= 0x40;
    b
}

#[test]
fn store_keeps_the_newest_and_ignores_strangers() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = CheckpointStore::new(dir.path().join("cp"), 2);
    assert!(store.list().expect("missing dir is empty").is_empty());
    let st = rich_state();
    for n in [5u64, 50, 7, 100] {
        store
            .write(&Position::single(n), &[], &st, None)
            .expect("write");
    }
    std::fs::write(store.dir().join("notes.txt"), "x").expect("stranger");
    std::fs::write(
        store.dir().join(".checkpoint-00000000000000000001.tmp"),
        "x",
    )
    .expect("tmp");
    let records: Vec<u64> = store
        .list()
        .expect("list")
        .iter()
        .map(|f| f.records)
        .collect();
    assert_eq!(records, [50, 100]);
    store
        .write(&Position::single(101), &[], &st, None)
        .expect("write");
    let names: Vec<String> = std::fs::read_dir(store.dir())
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n != "notes.txt")
        .collect();
    assert_eq!(
        names.len(),
        2,
        "old checkpoints and temp files pruned: {names:?}"
    );
}

#[test]
fn a_large_state_restores_in_parallel_and_equal() {
    let mut events = vec![
        svc("a", 0, "ns", "h1", &[80]),
        svc("a", 0, "ns", "h2", &[81]),
    ];
    for i in 0..6000u32 {
        let host = if i % 2 == 0 { "h1" } else { "h2" };
        events.push(ep(
            "a",
            0,
            &format!("ep/{i}"),
            &format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255),
            &[host],
        ));
    }
    let st = ModelState::from_events(&events);
    let bytes = encode(&Position::single(6002), &[], &st, None);
    let cp = decode(&bytes).expect("decodes");
    assert_eq!(cp.model.counts().endpoints, 6000);
    assert_eq!(cp.model, st);
    let mut damaged = bytes.clone();
    // A payload byte far into the entity list: the body checksum catches it first.
    let at = damaged.len() - 40;
    damaged[at] ^= 1;
    assert!(decode(&damaged).is_err());
}

#[test]
fn stored_resources_round_trip_with_their_generator_id() {
    use deltapilot_xds::generate::{GenOptions, build_all};
    let st = rich_state();
    let (set, _) = build_all(&st, &GenOptions::default());
    let id = generator_id(&GenOptions::default());
    let cp = decode(&encode(&Position::single(3), &[], &st, Some((&id, &set)))).expect("decodes");
    let stored = cp.resources.expect("stored");
    assert_eq!(stored.generator, id);
    assert_eq!(stored.set, set, "every resource, byte for byte");
    assert_ne!(
        generator_id(&GenOptions {
            bind_outbound: true,
            ..Default::default()
        }),
        id,
        "options are part of the id"
    );
}

#[test]
fn a_pending_multi_copy_resync_round_trips() {
    let mut completed = resync("a", 6, true);
    if let Some(deltapilot_proto::event::Payload::Resync(m)) = &mut completed.payload {
        m.copies = 3;
    }
    let mut st = rich_state();
    for partition in [2, 0] {
        let pos = deltapilot_log::RecordPos {
            partition,
            offset: 40,
        };
        st = deltapilot_model::fold::fold(&st, &[(pos, completed.clone())]).state;
    }
    let pending = st
        .pending_resync("a")
        .expect("two copies of three are pending");
    assert_eq!(pending.partitions, [0, 2].into());

    let pos = Position::from_offsets(vec![41, 0, 41]);
    let bytes = encode(&pos, &fp(), &st, None);
    let cp = decode(&bytes).expect("decodes");
    assert_eq!(cp.model, st, "the pending set is restored exactly");
    assert_eq!(cp.model.hash(), st.hash());
    assert_eq!(cp.model.hash(), cp.model.recompute_hash());
    assert_eq!(encode(&pos, &fp(), &cp.model, None), bytes);

    // The restored state finishes the count where the original would.
    let last = [(
        deltapilot_log::RecordPos {
            partition: 1,
            offset: 0,
        },
        completed,
    )];
    let from_original = deltapilot_model::fold::fold(&st, &last).state;
    let from_restored = deltapilot_model::fold::fold(&cp.model, &last).state;
    assert_eq!(from_restored, from_original);
    assert_eq!(from_restored.source_gen("a").completed, 6);
    assert_eq!(from_restored.pending_resync("a"), None);
}

/// Recomputes every checksum after an edit (each section's, when the table's
/// lengths still fill the body, then the table's and the header's), so that the
/// content checks (not the checksums) are what meets the damage.
fn reseal(bytes: &mut [u8]) {
    let word = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8"));
    let (state, res) = (word(bytes, 40) as usize, word(bytes, 56) as usize);
    if state.checked_add(res) == Some(bytes.len() - 72) {
        let state_digest = xxh3_64(&bytes[72..72 + state]);
        let res_digest = xxh3_64(&bytes[72 + state..]);
        bytes[48..56].copy_from_slice(&state_digest.to_le_bytes());
        bytes[64..72].copy_from_slice(&res_digest.to_le_bytes());
    }
    let table = xxh3_64(&bytes[40..72]);
    bytes[24..32].copy_from_slice(&table.to_le_bytes());
    let header = xxh3_64(&bytes[..32]);
    bytes[32..40].copy_from_slice(&header.to_le_bytes());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Damage that the checksums do not catch (a writer bug, or a collision) is
    /// still an error or a state, never a panic: every length, count, number and
    /// payload in the body is checked before it is used.
    #[test]
    fn resealed_damage_never_panics(
        edits in proptest::collection::vec((0.0f64..1.0, proptest::prelude::any::<u8>()), 1..4),
        with_resources in proptest::prelude::any::<bool>(),
    ) {
        use deltapilot_xds::generate::{GenOptions, build_all};
        let st = ModelState::from_events(&[
            svc("a", 0, "ns", "h1", &[80, 9090]),
            ep("a", 0, "ep/1", "10.0.0.1", &["h1"]),
            ep("a", 0, "ep/2", "fd00::2", &["h1"]),
            ep_labeled("a", 0, "ep/3", "10.0.0.3", &["h1"], &[("app", "x")]),
            cfg("a", 0, "vs", r#"{"hosts":["h1"]}"#),
        ]);
        let (set, _) = build_all(&st, &GenOptions::default());
        let id = generator_id(&GenOptions::default());
        let stored = with_resources.then_some((id.as_str(), &set));
        let mut bytes = encode(&Position::single(5), &fp(), &st, stored);
        let body = bytes.len() - 40;
        for (at, value) in edits {
            let i = 40 + ((at * body as f64) as usize).min(body - 1);
            bytes[i] = value;
        }
        reseal(&mut bytes);
        match decode(&bytes) {
            Ok(cp) => proptest::prop_assert_eq!(cp.model.hash(), cp.model.recompute_hash()),
            Err(e) => proptest::prop_assert!(!e.is_empty()),
        }
    }
}

/// A checkpoint read ahead is the one the next load takes (a copy damaged on
/// disk after the prefetch read it is not read again), and a load gets the same
/// answer, with the same reasons, whether the files it passes over were read
/// ahead or not: a damaged newest file, one after the wanted position, one
/// beyond the log's head.
#[tokio::test]
async fn a_prefetch_is_taken_by_the_next_load_and_checked_like_a_read() {
    use deltapilot_log::EventLog;
    use deltapilot_log::file::{FileLog, FileLogOptions, FsyncPolicy};
    let dir = tempfile::tempdir().expect("tmp");
    let open = |name: &str| {
        let opts = FileLogOptions {
            fsync: FsyncPolicy::Never,
            ..Default::default()
        };
        FileLog::open(&dir.path().join(name), opts).expect("log")
    };
    let log = open("log");
    let events: Vec<_> = (0..12)
        .map(|i| svc("a", 1, "ns", &format!("h{i}"), &[80]))
        .collect();
    log.append(&events).await.expect("append");
    let store = CheckpointStore::new(dir.path().join("cp"), 10);
    let st = rich_state();
    for n in [5u64, 10] {
        store
            .write(&Position::single(n), &[], &st, None)
            .expect("write");
    }
    let files = store.list().expect("list");
    let (older, newest) = (files[0].path.clone(), files[1].path.clone());
    let seven = Position::single(7);
    let summary = |l: Loaded| {
        let (path, cp) = l.checkpoint.expect("a checkpoint");
        let reasons: Vec<String> = l.rejected.into_iter().map(|r| r.reason).collect();
        (path, cp.position, cp.model.hash(), reasons)
    };

    // Read ahead to the end, then damaged on disk: the load takes the copy.
    store.prefetch(None);
    let task = store.slot().take().expect("a prefetch started");
    let done = task.await.expect("the prefetch ran");
    assert_eq!(done.as_ref().map(|d| &d.path), Some(&newest));
    store.slot().put(tokio::spawn(async move { done }));
    let mut bytes = std::fs::read(&newest).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x20;
    std::fs::write(&newest, &bytes).expect("damage");
    let ahead = summary(load_verified(&store, &log, None).await.expect("load"));
    assert_eq!(ahead.0, newest, "{:?}", ahead.3);
    assert_eq!(ahead.2, st.hash());

    // Damaged newest, wanted position before it, head before it: with and
    // without a prefetch, the same file and the same reasons.
    let short = open("short");
    short.append(&events[..8]).await.expect("append");
    for (at_most, log) in [(None, &log), (Some(&seven), &log), (None, &short)] {
        let plain = summary(load_verified(&store, log, at_most).await.expect("load"));
        for ahead_of in [None, at_most, Some(&seven)] {
            store.prefetch(ahead_of);
            let got = summary(load_verified(&store, log, at_most).await.expect("load"));
            assert_eq!(got, plain, "prefetch {ahead_of:?}, load {at_most:?}");
        }
        assert_eq!(plain.0, older);
        assert_eq!(plain.3.len(), 1, "{:?}", plain.3);
    }
}
