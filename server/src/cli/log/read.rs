//! `deltapilot log read`, `log tail` and `log head`: events out as JSON lines.
//!
//! `read` prints what the log held when it started (up to the head it saw then) and
//! stops; `tail` prints and then follows new records until SIGINT/SIGTERM or until
//! stdout closes. Both stop at the first record they cannot show (a schema newer
//! than this build, or garbage): they print everything before it, then one
//! `{"position":…,"error":…}` line that `log append` refuses (so a copy through a
//! pipe fails instead of copying a prefix), and exit with an error naming the
//! position.
//!
//! What it does NOT do: skip bad records (that is the engine's choice, not a debug
//! tool's) or write to the log.

use std::io::Write as _;
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context as _;
use deltapilot_log::Error as LogError;
use deltapilot_log::{EventLog, FollowItem, Log, Position, Record};
use futures::StreamExt as _;
use tokio::signal::unix::{SignalKind, signal};

use super::jsonl;
use super::output::{Output, Sent};
use super::{Access, LogTarget, open_log};

/// Records asked of the log per `EventLog::read` call: enough to amortise a Kafka
/// fetch or a file read, small enough that a chunk of lines is about a megabyte.
pub(super) const READ_CHUNK: usize = 4096;

/// How long `log tail` waits, after a signal, for queued lines to reach stdout.
const SIGNAL_GRACE: Duration = Duration::from_secs(1);

/// Where to start reading: `start`, `head`, or a position (`42`, `0:42,1:17`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StartAt {
    /// The first record of the log.
    Start,
    /// The head: only records appended from now on.
    Head,
    /// An explicit position (next offset to read, per partition).
    At(Position),
}

impl FromStr for StartAt {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "start" => Ok(StartAt::Start),
            "head" => Ok(StartAt::Head),
            other => other
                .parse::<Position>()
                .map(StartAt::At)
                .map_err(|e| format!("{e} (or `start`, `head`)")),
        }
    }
}

/// Arguments of `deltapilot log read`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReadArgs {
    /// First position to print: `start` (default), `head`, an offset (`42`) or
    /// per-partition offsets (`0:42,1:17`). A record printed with
    /// `"position":"P:O"` is re-read with `--from P:O`.
    #[arg(long, value_name = "POS")]
    from: Option<StartAt>,

    /// Print at most N records.
    #[arg(long, value_name = "N")]
    limit: Option<u64>,
}

/// Arguments of `deltapilot log tail`.
#[derive(Debug, clap::Args)]
pub(crate) struct TailArgs {
    /// Where to start following: `head` (default: only new records), `start`, or a
    /// position as for `log read --from`.
    #[arg(long, value_name = "POS")]
    from: Option<StartAt>,
}

/// Runs `log read`.
pub(super) async fn read(target: &LogTarget, args: ReadArgs) -> anyhow::Result<()> {
    let log = open_log(target, Access::ReadOnly).await?;
    let head = log.head().await.context("asking the log for its head")?;
    let mut pos = resolve(&log, &head, args.from.unwrap_or(StartAt::Start))?;
    let mut remaining = args.limit.unwrap_or(u64::MAX);
    let out = Output::spawn()?;
    while remaining > 0 && !pos.covers(&head) {
        let want = usize::try_from(remaining)
            .unwrap_or(usize::MAX)
            .min(READ_CHUNK);
        let records = log
            .read(&pos, want)
            .await
            .with_context(|| format!("reading the log at {pos}"))?;
        if records.is_empty() {
            break;
        }
        let mut chunk = Vec::new();
        let mut failure = None;
        for rec in records {
            // Records appended after we looked at the head are left for next time,
            // and a record handed back twice is printed once.
            if pos.contains(rec.pos) {
                continue;
            }
            pos.advance(rec.pos);
            if rec.pos.offset >= head.offset(rec.pos.partition) {
                continue;
            }
            if let Err(e) = format_record(&rec, &mut chunk) {
                failure = Some(e);
                break;
            }
            remaining -= 1;
            if remaining == 0 {
                break;
            }
        }
        if let Some(e) = failure {
            out.send(chunk).await;
            out.finish().await?;
            return Err(e);
        }
        if out.send(chunk).await == Sent::Stopped {
            break;
        }
    }
    out.finish().await
}

/// Runs `log tail`.
pub(super) async fn tail(target: &LogTarget, args: TailArgs) -> anyhow::Result<()> {
    // Listen before the first record can be printed, so a signal that arrives at
    // any point ends the command cleanly.
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    let mut shutdown = std::pin::pin!(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    });

    let log = open_log(target, Access::ReadOnly).await?;
    let head = log.head().await.context("asking the log for its head")?;
    let from = resolve(&log, &head, args.from.unwrap_or(StartAt::Head))?;
    tracing::info!(log = %target.text, from = %from, "following the log");
    let mut follower = log.follow(from);
    let out = Output::spawn()?;
    loop {
        let item = tokio::select! {
            () = &mut shutdown => return out.finish_within(SIGNAL_GRACE).await,
            () = out.stopped() => return out.finish().await,
            item = follower.next() => item,
        };
        let records = match item {
            None => anyhow::bail!("the log's follower ended unexpectedly"),
            Some(Err(e)) => return Err(e).context("following the log"),
            Some(Ok(FollowItem::CaughtUp(at))) => {
                tracing::debug!(position = %at, "caught up with the log head");
                continue;
            }
            Some(Ok(FollowItem::Records(records))) => records,
        };
        let mut chunk = Vec::new();
        let mut failure = None;
        for rec in &records {
            if let Err(e) = format_record(rec, &mut chunk) {
                failure = Some(e);
                break;
            }
        }
        let sent = tokio::select! {
            () = &mut shutdown => return out.finish_within(SIGNAL_GRACE).await,
            sent = out.send(chunk) => sent,
        };
        if let Some(e) = failure {
            out.finish().await?;
            return Err(e);
        }
        if sent == Sent::Stopped {
            return out.finish().await;
        }
    }
}

/// Runs `log head`: prints the head position (one past the last record, per
/// partition), e.g. `42` or `0:42,1:17`. When retention deleted the front of
/// the log, stderr says where it now starts (stdout stays the head alone, for
/// scripts).
pub(super) async fn head(target: &LogTarget) -> anyhow::Result<()> {
    let log = open_log(target, Access::ReadOnly).await?;
    let head = log.head().await.context("asking the log for its head")?;
    let start = log.start();
    if start.total() > 0 {
        eprintln!(
            "the log starts at {start}: retention deleted the records below it; the oldest \
             position still available is {start}"
        );
    }
    // Not `println!`, which panics when stdout is closed (`deltapilot log head | true`).
    match writeln!(std::io::stdout(), "{head}") {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("writing to stdout"),
        _ => Ok(()),
    }
}

/// Formats one record as a line into `chunk`. On a record that cannot be shown,
/// writes the error line instead and returns the error.
fn format_record(rec: &Record, chunk: &mut Vec<u8>) -> anyhow::Result<()> {
    match rec.decode() {
        Ok(event) => jsonl::write_line(rec.pos, &event, chunk)
            .with_context(|| format!("formatting the record at {}", rec.pos)),
        Err(e) => {
            jsonl::write_error_line(rec.pos, &e.to_string(), chunk)
                .context("formatting an error line")?;
            Err(e).with_context(|| format!("cannot show the record at {}", rec.pos))
        }
    }
}

/// Turns `--from` into a position and checks it lies within the log.
fn resolve(log: &Log, head: &Position, from: StartAt) -> anyhow::Result<Position> {
    let start = log.start();
    let pos = match from {
        StartAt::Start => return Ok(start),
        StartAt::Head => return Ok(head.clone()),
        StartAt::At(pos) => pos,
    };
    let partitions = head.partitions().max(start.partitions());
    if partitions == 1 && pos.partitions() <= 1 && pos.offset(0) < start.offset(0) {
        return Err(LogError::BeforeRetention {
            requested: pos.to_string(),
            oldest: start.to_string(),
        })
        .context(format!("--from {pos}"));
    }
    let beyond = pos.offsets().iter().skip(partitions).any(|o| *o > 0);
    let outside = (0..partitions).any(|p| {
        let p = u32::try_from(p).unwrap_or(u32::MAX);
        pos.offset(p) < start.offset(p) || pos.offset(p) > head.offset(p)
    });
    if beyond || outside {
        return Err(LogError::PositionOutOfRange {
            requested: pos.to_string(),
            start: start.to_string(),
            head: head.to_string(),
        })
        .context(format!(
            "--from {pos}: a position is the next offset to read in each partition \
             (this log has {partitions}), from its start up to its head"
        ));
    }
    Ok(pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_accepts_words_and_positions() {
        assert_eq!("start".parse::<StartAt>(), Ok(StartAt::Start));
        assert_eq!(" head ".parse::<StartAt>(), Ok(StartAt::Head));
        assert_eq!(
            "0:3".parse::<StartAt>(),
            Ok(StartAt::At(Position::single(3)))
        );
        let e = "x".parse::<StartAt>().expect_err("garbage");
        assert!(e.contains("`start`"), "{e}");
    }
}
