//! `deltapilot log compact [DIR] [--below POS]`: compacts the embedded log offline.
//!
//! It opens the log as its writer (so it fails, naming the holder, while a server
//! writes the directory) and rewrites the sealed segments below `--below` (default:
//! the head, i.e. every sealed segment) to the latest effective record per entity,
//! tombstones younger than `--retention` kept (see
//! `engine/log/src/file/compact.rs`). Offsets stay; the log's horizon becomes the
//! end of the compacted range: replays refuse positions below it and `run` no
//! longer restores checkpoints taken below it (it folds from the start, which is
//! exact). To keep a checkpoint usable, pass `--below` at or below its position.
//!
//! What it does NOT do: compact a Kafka topic (the broker does that), or touch
//! checkpoints.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use deltapilot_log::file::{CompactPolicy, FileLog, FileLogOptions};
use deltapilot_log::{EventLog, LogUri, Position};

use super::LogTarget;

/// Arguments of `deltapilot log compact`.
#[derive(Debug, clap::Args)]
pub(crate) struct CompactArgs {
    /// The embedded log's directory [default: the `--log` URI's].
    dir: Option<PathBuf>,
    /// Compact only segments whose records all lie below this position
    /// [default: the head: every sealed segment].
    #[arg(long, value_name = "POS", env = "DELTAPILOT_COMPACT_BELOW")]
    below: Option<Position>,
    /// Keep tombstones (deletes) younger than this: `90s`, `30m`, `12h`, `7d`
    /// [default: the URI's `retention=`, else 1d].
    #[arg(long, value_name = "DURATION", env = "DELTAPILOT_COMPACT_RETENTION")]
    retention: Option<String>,
}

/// Runs `deltapilot log compact`.
pub(crate) async fn run(target: &LogTarget, args: CompactArgs) -> anyhow::Result<()> {
    let (dir, mut opts) = match (&args.dir, &target.uri) {
        (Some(d), _) => (d.clone(), FileLogOptions::default()),
        (None, LogUri::File { dir }) => (dir.clone(), target.opts.file.clone()),
        (None, LogUri::Kafka { .. }) => bail!(
            "log compact works on the embedded log (file://DIR); a Kafka topic is compacted \
             by the broker (cleanup.policy=compact, set when deltapilot creates it)"
        ),
    };
    if let Some(r) = &args.retention {
        let uri = format!("file://{}?retention={r}", dir.display());
        let (_, parsed) = deltapilot_log::parse_uri(&uri).context("--retention")?;
        opts.retention = parsed.file.retention;
    }
    if !dir.is_dir() {
        bail!("{}: no such log directory", dir.display());
    }
    let retention = opts.retention.tombstone_retention;
    let open_dir = dir.clone();
    let log = tokio::task::spawn_blocking(move || FileLog::open(&open_dir, opts))
        .await
        .context("opening the log")?
        .with_context(|| format!("opening the log in {} for compaction", dir.display()))?;
    let head = log.head().await?;
    let below = match &args.below {
        Some(p) if p.partitions() > 1 => {
            bail!("--below {p}: the embedded log has one partition; give a plain offset")
        }
        Some(p) if !head.covers(p) => {
            bail!("--below {p} is past the log's head {head}")
        }
        Some(p) => p.offset(0),
        None => head.offset(0),
    };
    let policy = CompactPolicy {
        tombstone_retention: retention,
        now_unix_micros: now_unix_micros(),
    };
    let report = log
        .compact(below, Arc::new(deltapilot_model::fold::admits), policy)
        .await
        .with_context(|| format!("compacting {}", dir.display()))?;
    println!(
        "compacted {}: horizon {} (below {below}); {} of {} segments rewritten; \
         records {} -> {}; bytes {} -> {}",
        dir.display(),
        report.horizon,
        report.rewritten,
        report.segments,
        report.records_before,
        report.records_after,
        report.bytes_before,
        report.bytes_after
    );
    Ok(())
}

/// The wall clock as Unix microseconds, for tombstone ages.
pub(crate) fn now_unix_micros() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
}
