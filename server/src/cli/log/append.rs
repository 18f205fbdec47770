//! `deltapilot log append`: JSON lines in, events appended.
//!
//! The whole input is parsed and checked before anything is written: one bad line
//! and nothing from the input is appended. Then the events are appended in batches
//! (one `EventLog::append` call each); each batch is all-or-nothing and durable per
//! the log's policy once acknowledged. If a later batch fails, the earlier batches
//! stay appended and the error says how far the input got.
//!
//! The per-partition copies of a `COMPLETED` resync marker (read from a
//! multi-partition Kafka log) are merged into one marker first; see `copies`.
//!
//! What it does NOT do: deduplicate (appending the same file twice appends twice) or
//! validate against the log's state (a delete of an unknown key is appended).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use deltapilot_log::{EventLog, RecordPos};
use deltapilot_proto::Event;
use prost::Message as _;

use super::copies;
use super::jsonl::{self, LineError};
use super::{Access, LogTarget, open_log};

/// Events per `EventLog::append` call unless `--batch-size` says otherwise: large
/// enough to amortise a round trip or an fsync, small enough that a batch is a few
/// hundred KB.
pub(super) const DEFAULT_BATCH: u32 = 1000;

/// At most this many bad lines are listed in the error; the rest are counted.
const MAX_LISTED_ERRORS: usize = 20;

/// Arguments of `deltapilot log append`.
#[derive(Debug, clap::Args)]
pub(crate) struct AppendArgs {
    /// JSON-lines file to append, one event per line; `-` reads stdin. Blank lines
    /// and lines starting with `#` are skipped.
    #[arg(long, short = 'f', value_name = "PATH")]
    file: PathBuf,

    /// Events per append call. Each call is all-or-nothing and durable (per the
    /// log's fsync policy) once acknowledged; the input as a whole is validated
    /// before the first call.
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_BATCH,
        value_parser = clap::value_parser!(u32).range(1..=100_000)
    )]
    batch_size: u32,
}

/// Runs `log append`.
pub(super) async fn run(target: &LogTarget, args: AppendArgs) -> anyhow::Result<()> {
    let (name, input) = read_input(&args.file).await?;
    let parsed = jsonl::parse_all(&input, now_unix_micros());
    drop(input);
    if !parsed.errors.is_empty() {
        anyhow::bail!("{}", describe_errors(&name, &parsed.errors));
    }
    if parsed.events.is_empty() {
        eprintln!("{name}: no events (only blank or comment lines); nothing appended");
        return Ok(());
    }
    let merged = copies::merge(
        parsed
            .events
            .into_iter()
            .map(|e| (e.line, e.event))
            .collect(),
    );
    if merged.incomplete > 0 {
        eprintln!(
            "{name}: {} COMPLETED resync marker(s) lack some of their per-partition copies in \
             this input and were left out (appending one could sweep entities whose \
             re-upserts are not in the input; the source's next resync sweeps instead)",
            merged.incomplete
        );
    }
    let (lines, events): (Vec<usize>, Vec<Event>) = merged.events.into_iter().unzip();

    let log = open_log(target, Access::Write).await?;
    // Every line is checked before anything is written, the backend's size limit
    // included: an oversized event would otherwise fail a later batch after the
    // earlier ones were appended.
    let limit = log.max_event_bytes();
    let oversized: Vec<String> = lines
        .iter()
        .zip(&events)
        .filter_map(|(line, e)| {
            let n = e.encoded_len();
            (n > limit).then(|| format!("{name}:{line}: the event encodes to {n} bytes, above {}'s limit of {limit} bytes", target.text))
        })
        .collect();
    if !oversized.is_empty() {
        anyhow::bail!(
            "{} event(s) too large; nothing was appended:\n{}",
            oversized.len(),
            oversized.join("\n")
        );
    }
    let batch = args.batch_size as usize;
    let batches = events.len().div_ceil(batch);
    let mut first: Option<RecordPos> = None;
    let mut last: Option<RecordPos> = None;
    let mut appended = 0usize;
    for (i, chunk) in events.chunks(batch).enumerate() {
        let from_line = lines[appended];
        let to_line = lines[appended + chunk.len() - 1];
        let positions = log.append(chunk).await.map_err(|e| {
            // A refused batch (a bad event) was checked before anything of it was
            // written; any other failure may have written part or all of it.
            let this = if matches!(e, deltapilot_log::Error::InvalidEvent(_)) {
                "this batch was not written"
            } else {
                "this batch may or may not have been written"
            };
            let done = match last {
                Some(at) => format!(
                    "the {appended} events of the earlier batches were appended (last at {at}); "
                ),
                None => String::new(),
            };
            anyhow::Error::new(e).context(format!(
                "appending batch {} of {batches} ({name} lines {from_line}-{to_line}) to {} \
                 failed; {done}{this}",
                i + 1,
                target.text
            ))
        })?;
        anyhow::ensure!(
            positions.len() == chunk.len(),
            "the log acknowledged {} positions for a batch of {} events",
            positions.len(),
            chunk.len()
        );
        first = first.or_else(|| positions.first().copied());
        last = positions.last().copied().or(last);
        appended += chunk.len();
    }
    let span = match (first, last) {
        (Some(f), Some(l)) => format!("first at {f}, last at {l}"),
        _ => String::from("no positions"),
    };
    eprintln!(
        "appended {appended} events from {name} to {} in {batches} batch(es): {span}",
        target.text
    );
    Ok(())
}

/// Reads the whole input (a file or stdin) and names it for messages.
async fn read_input(path: &Path) -> anyhow::Result<(String, Vec<u8>)> {
    if path == Path::new("-") {
        let bytes = tokio::task::spawn_blocking(|| {
            let mut buf = Vec::new();
            std::io::stdin().lock().read_to_end(&mut buf).map(|_| buf)
        })
        .await
        .context("reading stdin")?
        .context("reading stdin")?;
        return Ok(("stdin".to_owned(), bytes));
    }
    let bytes = tokio::fs::read(path)
        .await
        .with_context(|| format!("reading {}", path.display()))?;
    Ok((path.display().to_string(), bytes))
}

/// The error for an input with bad lines: each line number and reason.
fn describe_errors(name: &str, errors: &[LineError]) -> String {
    let mut text = format!(
        "{name}: {} malformed line(s); nothing was appended",
        errors.len()
    );
    for e in errors.iter().take(MAX_LISTED_ERRORS) {
        text.push_str(&format!("\n  line {}: {}", e.line, e.reason));
    }
    if errors.len() > MAX_LISTED_ERRORS {
        text.push_str(&format!(
            "\n  … and {} more",
            errors.len() - MAX_LISTED_ERRORS
        ));
    }
    text
}

/// Now as Unix microseconds, the default `observedAtUnixMicros`.
fn now_unix_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}
