//! Fuzzing the JSON-lines reader of `deltapilot log append`: arbitrary bytes, and
//! the sample log (`examples/events.jsonl`) with arbitrary line edits. Asserts no
//! panic, that every line that is neither blank nor a comment yields exactly one
//! event or one error (never silence), errors name a line in the input and say why,
//! and what parses re-encodes no larger than a bounded multiple of its line.
//!
//! Cases per property: `DELTAPILOT_FUZZ_CASES` (default [`CI_CASES`]).

use proptest::prelude::*;
use proptest::test_runner::Config;
use prost::Message;

use super::*;

/// Cases per property in CI.
const CI_CASES: u32 = 128;
const SAMPLE: &str = include_str!("../../../../examples/events.jsonl");
const NOW: i64 = 1_800_000_000_000_000;

fn config() -> Config {
    let cases = std::env::var("DELTAPILOT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CI_CASES);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Lines that must yield an event or an error.
fn event_lines(input: &[u8]) -> usize {
    let input = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    input
        .split(|b| *b == b'\n')
        .filter(|raw| {
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            match std::str::from_utf8(raw) {
                Ok(t) => {
                    let t = t.trim_start();
                    !t.is_empty() && !t.starts_with('#')
                }
                Err(_) => true,
            }
        })
        .count()
}

fn check(input: &[u8]) -> Result<(), TestCaseError> {
    let parsed = parse_all(input, NOW);
    let lines = input.split(|b| *b == b'\n').count();
    prop_assert_eq!(
        parsed.events.len() + parsed.errors.len(),
        event_lines(input)
    );
    for e in &parsed.errors {
        prop_assert!(e.line >= 1 && e.line <= lines, "line {} of {lines}", e.line);
        prop_assert!(!e.reason.is_empty(), "an error without a reason");
    }
    for ev in &parsed.events {
        prop_assert!(ev.line >= 1 && ev.line <= lines);
        // Binary protobuf is never much larger than its JSON text (field tags
        // replace names); a margin covers the defaults filled in.
        prop_assert!(ev.event.encoded_len() <= input.len() + 64);
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum Edit {
    Replace {
        line: usize,
        at: usize,
        with: String,
    },
    Cut {
        line: usize,
        keep: usize,
    },
    Swap(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), any::<usize>(), "[\\PC\"{}\\[\\]:,0-9]{0,4}")
            .prop_map(|(line, at, with)| Edit::Replace { line, at, with }),
        (any::<usize>(), any::<usize>()).prop_map(|(line, keep)| Edit::Cut { line, keep }),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::Swap(a, b)),
    ]
}

fn apply(lines: &mut [Vec<char>], e: &Edit) {
    let n = lines.len();
    match e {
        Edit::Replace { line, at, with } => {
            let l = &mut lines[line % n];
            let i = at % (l.len() + 1);
            let end = (i + with.chars().count()).min(l.len());
            l.splice(i..end, with.chars());
        }
        Edit::Cut { line, keep } => {
            let l = &mut lines[line % n];
            l.truncate(keep % (l.len() + 1));
        }
        Edit::Swap(a, b) => lines.swap(a % n, b % n),
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes(input in proptest::collection::vec(any::<u8>(), 0..1024)) {
        check(&input)?;
    }

    #[test]
    fn damaged_sample(edits in proptest::collection::vec(edit(), 1..8)) {
        let mut lines: Vec<Vec<char>> = SAMPLE.lines().map(|l| l.chars().collect()).collect();
        for e in &edits {
            apply(&mut lines, e);
        }
        let text: Vec<String> = lines.into_iter().map(|l| l.into_iter().collect()).collect();
        check(text.join("\n").as_bytes())?;
    }
}

/// The sample parses whole: the damaged-sample property starts from valid input.
#[test]
fn the_sample_parses() {
    let parsed = parse_all(SAMPLE.as_bytes(), NOW);
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    assert!(!parsed.events.is_empty());
}
