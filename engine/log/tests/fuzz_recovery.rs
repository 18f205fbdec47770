//! Fuzzing the embedded log's recovery: arbitrary bytes as a segment file, and real
//! segments with arbitrary damage (flipped bytes, cut tails, junk appended), opened
//! both as the writer and read-only. Asserts no panic, an error (never silence) for
//! a segment that is not one, and bounded output: a log never yields more records
//! than its bytes can hold.
//!
//! Cases per property: `DELTAPILOT_FUZZ_CASES` (default [`CI_CASES`]), so CI stays
//! quick and a long run is one env var away.

use std::path::Path;

use deltapilot_log::file::{FileLog, FileLogOptions, FsyncPolicy};
use deltapilot_log::{EventLog, Position, Record};
use deltapilot_testkit::segments::batch;
use proptest::prelude::*;
use proptest::test_runner::Config;

/// Cases per property in CI.
const CI_CASES: u32 = 48;
/// Largest arbitrary segment; recovery reads in chunks, so this bounds the test,
/// not the code under test.
const MAX_SEGMENT_BYTES: usize = 8 * 1024;
/// Segment header plus record header: the fewest bytes a record can take.
const MIN_FRAMED: u64 = 20;
/// Records per `read` call while draining.
const READ_CHUNK: usize = 32;

fn cases() -> u32 {
    std::env::var("DELTAPILOT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CI_CASES)
}

fn config() -> Config {
    Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

const SEGMENT_0: &str = "00000000000000000000.log";

/// Reads every record of `log`; fails the case if a read errors more than the
/// bounded loop allows or yields more records than `file_len` can hold.
fn drain(log: &FileLog, file_len: u64) -> Result<Vec<Record>, String> {
    let cap = (file_len / MIN_FRAMED) as usize + 1;
    rt().block_on(async {
        let mut out = Vec::new();
        let mut from = Position::single(0);
        for _ in 0..=cap {
            let got = match log.read(&from, READ_CHUNK).await {
                Ok(r) => r,
                // Damage a read-only open did not scan is reported by the read.
                Err(_) => return Ok(out),
            };
            if got.is_empty() {
                return Ok(out);
            }
            for r in &got {
                from.advance(r.pos);
            }
            out.extend(got);
            if out.len() > cap {
                return Err(format!("{} records from {file_len} bytes", out.len()));
            }
        }
        Err("read loop did not end".into())
    })
}

/// Opens `dir` both ways and checks what comes back; `must_fail` when the segment
/// cannot be a deltapilot segment at all.
fn open_both(dir: &Path, file_len: u64, must_fail: bool) -> Result<(), TestCaseError> {
    match FileLog::open_read_only(dir) {
        Ok(log) => {
            prop_assert!(!must_fail, "read-only open accepted a non-segment");
            let recs = drain(&log, file_len).map_err(TestCaseError::fail)?;
            for r in &recs {
                // Decoding may fail (the CRC does not prove a valid event); it
                // must not panic.
                let _ = r.decode();
            }
        }
        Err(e) => prop_assert!(!e.to_string().is_empty()),
    }
    let opts = FileLogOptions {
        fsync: FsyncPolicy::Never,
        ..FileLogOptions::default()
    };
    match FileLog::open(dir, opts) {
        Ok(log) => {
            prop_assert!(!must_fail, "writer open accepted a non-segment");
            drain(&log, file_len).map_err(TestCaseError::fail)?;
        }
        Err(e) => prop_assert!(!e.to_string().is_empty()),
    }
    Ok(())
}

/// A one-segment log holding `n` records written as batches of `per`.
fn valid_segment(dir: &Path, n: u64, per: u64) -> Vec<u8> {
    let opts = FileLogOptions {
        fsync: FsyncPolicy::Never,
        ..FileLogOptions::default()
    };
    let log = FileLog::open(dir, opts).expect("open");
    rt().block_on(async {
        let mut i = 0;
        while i < n {
            let k = per.min(n - i);
            log.append(&batch(i, k)).await.expect("append");
            i += k;
        }
    });
    drop(log);
    std::fs::read(dir.join(SEGMENT_0)).expect("read segment")
}

#[derive(Debug, Clone)]
enum Damage {
    Flip { at: usize, xor: u8 },
    Cut { keep: usize },
    Junk(Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(at, xor)| Damage::Flip { at, xor }),
        any::<usize>().prop_map(|keep| Damage::Cut { keep }),
        proptest::collection::vec(any::<u8>(), 1..64).prop_map(Damage::Junk),
    ]
}

fn apply(bytes: &mut Vec<u8>, d: &Damage) {
    match d {
        Damage::Flip { at, xor } if !bytes.is_empty() => {
            let i = at % bytes.len();
            bytes[i] ^= xor;
        }
        Damage::Flip { .. } => {}
        Damage::Cut { keep } => bytes.truncate(keep % (bytes.len() + 1)),
        Damage::Junk(j) => bytes.extend_from_slice(j),
    }
}

proptest! {
    #![proptest_config(config())]

    /// Arbitrary bytes as the only segment: a file of at least a header's length
    /// whose magic is not a segment magic must be refused, not read as empty.
    #[test]
    fn arbitrary_bytes_as_segment(bytes in proptest::collection::vec(any::<u8>(), 0..MAX_SEGMENT_BYTES)) {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(SEGMENT_0), &bytes).expect("write");
        let must_fail = bytes.len() >= 16 && &bytes[..6] != b"DPLOGv";
        open_both(dir.path(), bytes.len() as u64, must_fail)?;
    }

    /// A real segment, then a few arbitrary damages: recovery cuts or refuses,
    /// never panics, and never yields more records than the file can hold.
    #[test]
    fn damaged_real_segment(
        n in 1u64..12,
        per in 1u64..4,
        damages in proptest::collection::vec(damage(), 1..4),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut bytes = valid_segment(dir.path(), n, per);
        for d in &damages {
            apply(&mut bytes, d);
        }
        std::fs::write(dir.path().join(SEGMENT_0), &bytes).expect("write");
        open_both(dir.path(), bytes.len() as u64, false)?;
    }
}
