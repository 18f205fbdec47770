//! `deltapilot log …`: append, read, follow and inspect the event log, on either
//! backend (`--log file://DIR` or `--log kafka://HOST:PORT/TOPIC`).
//!
//! The human format is one JSON object per line (see `log/jsonl.rs` and the README):
//! `log read` prints exactly what `log append` accepts, so a log copies with
//! `deltapilot log read --log A | deltapilot log append --log B --file -`.
//!
//! Opening: `append` opens the log for writing (the embedded log takes its writer
//! lock, so it fails while a server writes that directory). `read`, `tail` and
//! `head` open the embedded log read-only (no lock, nothing written, works next to a
//! running writer) and need the directory to exist.
//!
//! What it does NOT do: interpret events (that is the fold) or repair a log.

mod append;
pub(crate) mod compact;
mod copies;
mod jsonl;
mod output;
mod read;

use anyhow::Context as _;
use deltapilot_log::file::FileLog;
use deltapilot_log::{DEFAULT_LOG_URI, Log, LogOptions, LogUri, parse_uri};

/// Arguments of `deltapilot log`.
#[derive(Debug, clap::Args)]
pub(crate) struct LogArgs {
    /// Event log URI: `file://DIR` (embedded) or `kafka://HOST:PORT/TOPIC`.
    ///
    /// Backend options ride in a query string. `file://`: `fsync=always|interval|never`,
    /// `fsync_interval_ms=N`, `segment_bytes=N`, `compact=true|false`,
    /// `delete=true|false` (a running server deletes old segments below its oldest
    /// checkpoint), `retention=DURATION` (the window: tombstones kept after
    /// compaction, and the age a segment is deleted at, e.g. `7d`),
    /// `retention_bytes=N` (with delete: keep at least N bytes). `kafka://` (several brokers separated
    /// by commas): `partitions=N` (used when the topic is created),
    /// `append_timeout_ms=N`, `request_timeout_ms=N`, `config=FILE` (librdkafka
    /// `key=value` lines), and any librdkafka property (a key with a dot: TLS, SASL,
    /// tuning, e.g. `security.protocol=SASL_SSL&sasl.mechanism=SCRAM-SHA-512`);
    /// secrets as `KEY.file=PATH` or `KEY.env=VAR`, never in the URI (README,
    /// "Operations: Kafka settings"). Example:
    /// `file:///var/lib/deltapilot/log?fsync=always`.
    #[arg(
        long = "log",
        global = true,
        env = "DELTAPILOT_LOG",
        value_name = "URI",
        default_value = DEFAULT_LOG_URI,
        value_parser = QuietUri(parse_target)
    )]
    log: LogTarget,

    #[command(subcommand)]
    command: LogCommand,
}

#[derive(Debug, clap::Subcommand)]
enum LogCommand {
    /// Append events from a JSON-lines file (`--file -` for stdin).
    ///
    /// Every line is checked before anything is written: one malformed line and
    /// nothing is appended. Then events are appended in batches of `--batch-size`.
    Append(append::AppendArgs),
    /// Print records as JSON lines, the format `append` accepts.
    ///
    /// Prints up to the head as it was when the command started, then exits.
    Read(read::ReadArgs),
    /// Print new records as JSON lines as they are appended.
    ///
    /// Follows until SIGINT/SIGTERM, or until stdout closes (noticed at the next
    /// write); both end with exit status 0.
    Tail(read::TailArgs),
    /// Print the head position: one past the last record, per partition.
    Head,
    /// Compact the embedded log offline: sealed segments below `--below` keep the
    /// latest effective record per entity (offsets stay).
    ///
    /// Needs the writer lock: stop the server first (a running server compacts by
    /// policy, `file://DIR?compact=true`).
    Compact(compact::CompactArgs),
}

/// A parsed `--log` value, with its text kept for messages.
#[derive(Debug, Clone)]
pub(crate) struct LogTarget {
    text: String,
    uri: LogUri,
    opts: LogOptions,
}

/// A clap value parser that reports a bad `--log` without echoing the value:
/// clap's own message quotes it whole, and a URI may hold a secret the parser
/// refuses (the parser's error names the URI with secrets redacted). A bad URI is
/// a usage error (exit status 2).
#[derive(Clone)]
pub(crate) struct QuietUri<T>(pub(crate) fn(&str) -> Result<T, String>);

impl<T: Clone + Send + Sync + 'static> clap::builder::TypedValueParser for QuietUri<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let flag = arg.and_then(|a| a.get_long()).unwrap_or("log");
        let fail = |why: String| {
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("--{flag}: {why}\n"),
            )
            .with_cmd(cmd)
        };
        let text = value
            .to_str()
            .ok_or_else(|| fail("not valid UTF-8".into()))?;
        (self.0)(text).map_err(fail)
    }
}

/// Parses `--log` (through [`QuietUri`]).
fn parse_target(text: &str) -> Result<LogTarget, String> {
    let (uri, opts) = parse_uri(text).map_err(|e| e.to_string())?;
    Ok(LogTarget {
        text: text.to_owned(),
        uri,
        opts,
    })
}

/// How a command uses the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Appends: creates the log on first use and, for the embedded log, takes the
    /// writer lock.
    Write,
    /// Only reads: the embedded log is opened without the lock, so this works while
    /// a server is writing it.
    ReadOnly,
}

/// Opens the log `target` names.
async fn open_log(target: &LogTarget, access: Access) -> anyhow::Result<Log> {
    let opened = match (&target.uri, access) {
        (LogUri::File { dir }, Access::ReadOnly) => {
            let dir = dir.clone();
            // Opening scans every segment: keep it off the async workers.
            tokio::task::spawn_blocking(move || FileLog::open_read_only(&dir))
                .await
                .context("opening the log")?
                .map(Log::File)
        }
        _ => Log::open(&target.uri, &target.opts).await,
    };
    opened.with_context(|| format!("opening the log {}", target.text))
}

/// Runs `deltapilot log …`.
pub(crate) async fn main(args: LogArgs) -> anyhow::Result<()> {
    let LogArgs { log, command } = args;
    match command {
        LogCommand::Append(a) => append::run(&log, a).await,
        LogCommand::Read(a) => read::read(&log, a).await,
        LogCommand::Tail(a) => read::tail(&log, a).await,
        LogCommand::Head => read::head(&log).await,
        LogCommand::Compact(a) => compact::run(&log, a).await,
    }
}
