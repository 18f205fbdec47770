//! `deltapilot replay`: time travel over the event log.
//!
//! - `replay [--from POS] [--to POS]` re-folds the range event by event and prints
//!   each event, the xDS resources it changed (old and new version) and the proxy
//!   views they belong to (see `replay/print.rs` for the format, the filters and
//!   `--diff`). Events before `--from` are folded fast, starting from the newest
//!   checkpoint at or before it. With `--proxy`, the changes are those of that
//!   proxy's own view (its Sidecar scoping followed event by event, a move
//!   between views shown as their difference).
//! - `replay --dump --proxy NODE_ID_OR_FILE [--at POS]` prints what that proxy
//!   would have held at POS (default: the head) in Envoy's `config_dump` format,
//!   from its own view (Sidecar scoping included).
//! - `replay bisect --resource TYPE/NAME --until PREDICATE` finds the first event
//!   after which the resource matched (see `replay/bisect.rs`).
//!
//! Positions are next-offset positions as everywhere (`42`, or `0:42,1:17` for
//! Kafka): `--from 10 --to 20` replays the records at offsets 10 to 19, and
//! `--at 20` is the state after the record at offset 19. A position outside the
//! log is refused with the valid range. A corrupt record stops the replay: the
//! records before it are replayed, then the damage is reported with its position
//! and the command fails.
//!
//! Checkpoints are read from `--checkpoints DIR` (default: the `checkpoints`
//! directory next to a `file://` log's directory, which is where `deltapilot run`
//! writes them); `--no-checkpoints` replays from the start of the log. The resource
//! options (`--bind-outbound`, `--outbound-address`) must match the server's, as
//! they shape the resources; they read the same environment variables.
//!
//! What it does NOT do: write to the log or the checkpoints, or talk to a server
//! (see `proxy-status`/`proxy-config` for the live views).

mod bisect;
pub(crate) mod diff;
mod open;
mod print;
mod progress;
mod proxy;

use std::io::{IsTerminal, Write};
use std::net::IpAddr;
use std::ops::ControlFlow;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use deltapilot_engine::checkpoint::{CHECKPOINT_DIR, CheckpointStore};
use deltapilot_engine::replay::drive::{check_position, each_event, fold_to, start_before};
use deltapilot_engine::replay::{Replayer, StoppedAt};
use deltapilot_log::{DEFAULT_LOG_URI, EventLog, LogUri, Position, parse_uri};
use deltapilot_server::admin::debug::parse_types;
use deltapilot_server::admin::dump::config_dump;
use deltapilot_xds::generate::GenOptions;

use self::open::Opened;
use self::print::{DiffFormat, Filters, Output, ResourceFilter};
use self::progress::Progress;
use self::proxy::ProxyTypeArg;

/// Where to read from, shared by every replay mode.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Source {
    /// Event log URI: `file://DIR` (embedded; opened read-only, so a running server
    /// keeps writing) or `kafka://HOST:PORT/TOPIC`.
    #[arg(long = "log", global = true, env = "DELTAPILOT_LOG", value_name = "URI", default_value = DEFAULT_LOG_URI)]
    log: String,
    /// Directory of checkpoints to start from [default: `checkpoints` next to a
    /// `file://` log's directory; none for Kafka].
    #[arg(
        long,
        global = true,
        env = "DELTAPILOT_CHECKPOINTS",
        value_name = "DIR"
    )]
    checkpoints: Option<PathBuf>,
    /// Ignore checkpoints: fold from the start of the log.
    #[arg(long, global = true)]
    no_checkpoints: bool,
    /// As `deltapilot run --bind-outbound` (it shapes sidecar listeners).
    #[arg(long, global = true, env = "DELTAPILOT_BIND_OUTBOUND", num_args = 0..=1, default_missing_value = "true")]
    bind_outbound: Option<bool>,
    /// As `deltapilot run --outbound-address`.
    #[arg(long, global = true, env = "DELTAPILOT_OUTBOUND_ADDRESS")]
    outbound_address: Option<IpAddr>,
    /// As `run --root-namespace` (the Sidecar scoping a replayed proxy's view
    /// depends on it) [default: istio-system].
    #[arg(
        long,
        global = true,
        env = "DELTAPILOT_ROOT_NAMESPACE",
        value_name = "NAMESPACE"
    )]
    root_namespace: Option<String>,
    /// As `run --default-service-export-to` (comma-separated).
    #[arg(
        long,
        global = true,
        env = "DELTAPILOT_DEFAULT_SERVICE_EXPORT_TO",
        value_name = "NS",
        value_delimiter = ','
    )]
    default_service_export_to: Vec<String>,
    /// As `run --default-virtual-service-export-to` (comma-separated).
    #[arg(
        long,
        global = true,
        env = "DELTAPILOT_DEFAULT_VIRTUAL_SERVICE_EXPORT_TO",
        value_name = "NS",
        value_delimiter = ','
    )]
    default_virtual_service_export_to: Vec<String>,
    /// As `run --default-destination-rule-export-to` (comma-separated).
    #[arg(
        long,
        global = true,
        env = "DELTAPILOT_DEFAULT_DESTINATION_RULE_EXPORT_TO",
        value_name = "NS",
        value_delimiter = ','
    )]
    default_destination_rule_export_to: Vec<String>,
}

/// Arguments of `deltapilot replay`.
#[derive(Debug, clap::Args)]
#[command(subcommand_negates_reqs = true)]
pub(crate) struct ReplayArgs {
    #[command(flatten)]
    input: Source,
    /// First position to print [default: the start of the log].
    #[arg(long, value_name = "POS")]
    from: Option<Position>,
    /// Stop before this position [default: the head].
    #[arg(long, value_name = "POS")]
    to: Option<Position>,
    /// Print the config a proxy held, in Envoy's config_dump format (needs --proxy).
    #[arg(long)]
    dump: bool,
    /// With --dump: the position to dump at [default: the head].
    #[arg(long, value_name = "POS", requires = "dump")]
    at: Option<Position>,
    /// A node id, or a file with an Envoy bootstrap or node (JSON or YAML). With
    /// --dump: whose config; otherwise: print only changes in its view.
    #[arg(long, value_name = "NODE_ID_OR_FILE")]
    proxy: Option<String>,
    /// Override the proxy type inferred from --proxy.
    #[arg(long, value_enum, value_name = "TYPE")]
    proxy_type: Option<ProxyTypeArg>,
    /// With --dump: only these types (`cds,eds,lds,rds`).
    #[arg(long = "type", value_name = "TYPES")]
    types: Option<String>,
    /// Show a line diff of every changed resource.
    #[arg(long)]
    diff: bool,
    /// How --diff renders resources.
    #[arg(long, value_enum, default_value = "yaml")]
    diff_format: DiffFormat,
    /// Only changes of these resources: `NAME` or `TYPE/NAME`, `*` globs (repeatable).
    #[arg(long, value_name = "[TYPE/]NAME")]
    resource: Vec<ResourceFilter>,
    /// Only events from these sources (`*` globs, repeatable).
    #[arg(long, value_name = "SOURCE")]
    source: Vec<String>,
    /// Only events with these entity keys (`*` globs, repeatable).
    #[arg(long, value_name = "KEY")]
    key: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    output: Output,
    #[command(subcommand)]
    command: Option<ReplayCommand>,
}

#[derive(Debug, clap::Subcommand)]
enum ReplayCommand {
    /// Find the first event after which a resource matched a predicate.
    Bisect(bisect::BisectArgs),
}

/// Where a session's first replayer will start, as far as the command line
/// says before the log is open.
#[derive(Clone, Copy)]
pub(crate) enum StartAt<'a> {
    /// At the log's start: no checkpoint.
    LogStart,
    /// At the head.
    Head,
    /// At this position.
    At(&'a Position),
}

impl<'a> StartAt<'a> {
    /// `given`, or else `otherwise`.
    pub(crate) fn given_or(given: Option<&'a Position>, otherwise: StartAt<'a>) -> Self {
        given.map_or(otherwise, StartAt::At)
    }

    /// The position a checkpoint to start from must be at or before (`None`:
    /// any), when one can serve.
    fn checkpoint_wanted(self) -> Option<Option<&'a Position>> {
        match self {
            StartAt::LogStart => None,
            StartAt::Head => Some(None),
            StartAt::At(p) => Some(Some(p)),
        }
    }
}

/// The opened log and where replays may start.
pub(crate) struct Session {
    opened: Opened,
    store: Option<CheckpointStore>,
    opts: GenOptions,
    head: Position,
}

impl Source {
    fn gen_options(&self) -> GenOptions {
        let d = GenOptions::default();
        GenOptions {
            outbound_address: self
                .outbound_address
                .map(|a| a.to_string())
                .unwrap_or(d.outbound_address),
            bind_outbound: self.bind_outbound.unwrap_or(false),
            root_namespace: self.root_namespace.clone().unwrap_or(d.root_namespace),
            export_defaults: deltapilot_model::rules::ExportDefaults {
                service: self.default_service_export_to.clone(),
                virtual_service: self.default_virtual_service_export_to.clone(),
                destination_rule: self.default_destination_rule_export_to.clone(),
            },
            ..d
        }
    }

    /// Opens the log (and the checkpoint store), reading the checkpoint the
    /// session will start from (see [`StartAt`]) while the log opens.
    async fn open(&self, start: StartAt<'_>) -> anyhow::Result<Session> {
        let (uri, opts) = parse_uri(&self.log).map_err(|e| anyhow::anyhow!("--log: {e}"))?;
        let dir = match (&self.checkpoints, &uri, self.no_checkpoints) {
            (_, _, true) => None,
            (Some(d), _, _) => Some(d.clone()),
            (None, LogUri::File { dir }, _) => Some(
                dir.parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .unwrap_or(std::path::Path::new("."))
                    .join(CHECKPOINT_DIR),
            ),
            (None, LogUri::Kafka { .. }, _) => None,
        };
        let store = dir.map(|d| CheckpointStore::new(d, 1));
        if let (Some(store), Some(at_most)) = (&store, start.checkpoint_wanted()) {
            store.prefetch(at_most);
        }
        let opened = open::open(&uri, &opts, &self.log).await?;
        let head = opened
            .log
            .head()
            .await
            .context("asking the log for its head")?;
        if let Some(c) = &opened.corrupt {
            eprintln!(
                "replay: the log is corrupt at offset {}; only the records before it (up to position {head}) can be replayed: {}",
                c.offset, c.reason
            );
        }
        Ok(Session {
            opened,
            store,
            opts: self.gen_options(),
            head,
        })
    }
}

impl Session {
    /// Where a replay of events starts without `--from`: a compacted log's
    /// history starts at its horizon; once retention deleted the front of the
    /// log, only from a checkpoint, so at the oldest one kept at or after the
    /// start (where a checkpoint is needed anyway).
    fn first_replayable(&self) -> Position {
        let horizon = self.opened.log.horizon();
        if self.opened.log.start().total() == 0 {
            return horizon;
        }
        self.store
            .as_ref()
            .and_then(|s| s.list().ok())
            .and_then(|files| {
                files
                    .iter()
                    .map(|f| f.records)
                    .filter(|&r| r >= horizon.total())
                    .min()
            })
            // Deletion happens on the embedded log only: one partition.
            .map_or(horizon, Position::single)
    }

    /// Checks a position given as `flag`; with a corrupt log, positions past the
    /// readable part are clamped to its end (the replay then stops there and says
    /// so).
    async fn position(&self, flag: &str, given: Option<Position>) -> anyhow::Result<Position> {
        let Some(pos) = given else {
            return Ok(self.head.clone());
        };
        if self.opened.corrupt.is_some() && !self.head.covers(&pos) {
            return Ok(self.head.clone());
        }
        check_position(&self.opened.log, &pos)
            .await
            .with_context(|| format!("{flag} {pos}: a position is the next offset to read; it must lie between the log's start and head"))?;
        let horizon = self.opened.log.horizon();
        if !pos.covers(&horizon) {
            bail!(
                "{flag} {pos} is older than the log's retention: the log was compacted below \
                 position {horizon} (superseded records removed), so the state before it cannot \
                 be rebuilt; the oldest position still available is {horizon}"
            );
        }
        Ok(pos)
    }

    /// A replayer at `at`: the newest usable checkpoint at or before it, then the
    /// records up to `at` folded fast (with a progress bar on a terminal).
    async fn replayer_at(&self, at: &Position) -> anyhow::Result<Replayer> {
        let start = start_before(&self.opened.log, self.store.as_ref(), at, self.opts.clone())
            .await
            .context("looking for a checkpoint")?;
        for r in &start.rejected {
            eprintln!("replay: skipping checkpoint {r}");
        }
        match &start.checkpoint {
            Some(p) => eprintln!(
                "replay: starting from checkpoint {} (position {})",
                p.display(),
                start.replayer.position()
            ),
            None if self.opened.log.start().total() > 0 => bail!(
                "no usable checkpoint at or before {at}: the log starts at {} (retention \
                 deleted the records below it), so the state can only be rebuilt from a \
                 checkpoint taken at or after that position (the server's, in `checkpoints` \
                 next to the log by default, or --checkpoints DIR; not --no-checkpoints)",
                self.opened.log.start()
            ),
            None => eprintln!("replay: starting from the beginning of the log"),
        }
        let mut r = start.replayer;
        let todo = at.total().saturating_sub(r.position().total());
        let mut bar = Progress::new("folding", todo);
        let stop = fold_to(&self.opened.log, &mut r, at, &mut |n| bar.set(n))
            .await
            .context("reading the log")?;
        drop(bar);
        if let Some(s) = stop {
            bail!(stopped_message(&s, r.position()));
        }
        let skipped = r.stats().skipped;
        if skipped > 0 {
            eprintln!(
                "replay: {skipped} records skipped on the way, as the engine skips them (events it could not apply, records this build does not decode); replay event by event (--from) to see each"
            );
        }
        Ok(r)
    }

    /// Fails with the corruption if the log has one (called at the end of a
    /// replay that reached the readable end).
    fn finish(&self, reached: &Position) -> anyhow::Result<()> {
        match &self.opened.corrupt {
            Some(c) if reached.covers(&self.head) => bail!(
                "replay stopped at log offset {} (position {reached}): {}",
                c.offset,
                c.reason
            ),
            _ => Ok(()),
        }
    }
}

fn stopped_message(s: &StoppedAt, reached: &Position) -> String {
    format!(
        "replay stopped at the record at {}: {}; everything before it (up to position {reached}) was replayed",
        s.position, s.reason
    )
}

/// Runs `deltapilot replay`.
pub(crate) async fn main(args: ReplayArgs) -> anyhow::Result<()> {
    if let Some(ReplayCommand::Bisect(b)) = args.command {
        let event_flags = args.from.is_some()
            || args.to.is_some()
            || args.dump
            || args.proxy.is_some()
            || args.diff
            || !args.resource.is_empty()
            || !args.source.is_empty()
            || !args.key.is_empty();
        if event_flags {
            bail!(
                "`replay bisect` takes its own --resource, --from and --to; put them after `bisect` (other replay options do not apply to it)"
            );
        }
        return bisect::run(&args.input, b).await;
    }
    if args.dump {
        return dump(args).await;
    }
    if args.types.is_some() {
        bail!("--type applies to --dump");
    }
    events(args).await
}

async fn dump(args: ReplayArgs) -> anyhow::Result<()> {
    let Some(proxy_arg) = &args.proxy else {
        bail!("--dump needs --proxy NODE_ID_OR_FILE (whose config to print)");
    };
    let proxy = proxy::resolve(proxy_arg, args.proxy_type)?;
    let types = parse_types(args.types.as_deref()).map_err(|e| anyhow::anyhow!("--type: {e}"))?;
    let session = args
        .input
        .open(StartAt::given_or(args.at.as_ref(), StartAt::Head))
        .await?;
    let at = session.position("--at", args.at).await?;
    let mut r = session.replayer_at(&at).await?;
    // The proxy's own view at that position: its Sidecar scoping is derived
    // from the replayed model exactly as the engine derives it.
    let snap = r.snapshot();
    let key = snap.view_key(&proxy);
    let dump = config_dump(|t| snap.view(&key, t), &types, &|_, _| true);
    write_stdout(dump.to_pretty().as_bytes())?;
    eprintln!(
        "replay: config of {} ({}, view {key}) at position {}",
        proxy.id,
        proxy.proxy_type.as_str(),
        r.position()
    );
    let reached = r.position().clone();
    exit_without_freeing(r);
    session.finish(&reached)
}

/// Leaves a replayer's state to the process exit: freeing a large state piece by
/// piece takes longer than the replay of a checkpoint's tail, and the process is
/// about to end anyway.
fn exit_without_freeing(r: Replayer) {
    std::mem::forget(r);
}

/// Writes to stdout; a closed stdout (e.g. `| head`) is not an error.
fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("writing to stdout"),
        _ => Ok(()),
    }
}

async fn events(args: ReplayArgs) -> anyhow::Result<()> {
    let proxy = match &args.proxy {
        Some(p) => Some(proxy::resolve(p, args.proxy_type)?),
        None => None,
    };
    let session = args
        .input
        .open(StartAt::given_or(args.from.as_ref(), StartAt::LogStart))
        .await?;
    let from = match &args.from {
        Some(_) => session.position("--from", args.from.clone()).await?,
        None => session.first_replayable(),
    };
    let to = session.position("--to", args.to.clone()).await?;
    if !to.covers(&from) {
        bail!("--from {from} is after --to {to}");
    }
    let filters = Filters {
        resources: args.resource.clone(),
        sources: args.source.clone(),
        keys: args.key.clone(),
        proxy,
    };
    let diff = args.diff.then_some(args.diff_format);
    let mut r = session.replayer_at(&from).await?;
    // Everything up to `from` is folded; regenerate now so the first event's
    // changes are its own.
    r.resources();
    if let Some(p) = &filters.proxy {
        // What that proxy was sent: its own view, Sidecar scoping included.
        r.follow_proxy(p.clone());
    }

    let stdout = std::io::stdout();
    let flush_each = stdout.is_terminal();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let total = to.total().saturating_sub(from.total());
    let mut bar = Progress::new("replaying", total);
    let (mut seen, mut printed) = (0u64, 0u64);
    let mut write_error: Option<std::io::Error> = None;
    let stop = each_event(
        &session.opened.log,
        &mut r,
        &to,
        &mut |pos, ev, report, _| {
            seen += 1;
            if let Some(changes) = filters.select(ev, report) {
                bar.clear();
                let res = match args.output {
                    Output::Text => print::text(&mut out, pos, ev, report, &changes, diff),
                    Output::Json => print::json(&mut out, pos, ev, report, &changes, diff),
                }
                .and_then(|()| if flush_each { out.flush() } else { Ok(()) });
                if let Err(e) = res {
                    write_error = Some(e);
                    return ControlFlow::Break(());
                }
                printed += 1;
            }
            bar.set(seen);
            ControlFlow::Continue(())
        },
    )
    .await
    .context("reading the log")?;
    drop(bar);
    if let Some(e) = write_error {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return Ok(());
        }
        return Err(e).context("writing to stdout");
    }
    let snap = r.snapshot();
    let stats = r.stats();
    let end = serde_json::json!({
        "end": {
            "from": from.to_string(),
            "position": snap.position.to_string(),
            "records": seen,
            "printed": printed,
            "hash": format!("{:016x}", snap.hash),
            "stopped": stop.as_ref().map(|s| serde_json::json!({"position": s.position, "reason": s.reason})),
        }
    });
    let tail = match args.output {
        Output::Json => {
            let mut line = serde_json::to_vec(&end).unwrap_or_default();
            line.push(b'\n');
            line
        }
        Output::Text => Vec::new(),
    };
    match out.write_all(&tail).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        r => r.context("writing to stdout")?,
    }
    drop(out);
    eprintln!(
        "replay: {seen} records from {from} to {} ({printed} printed, {} skipped by the fold in all); snapshot hash {:016x}",
        snap.position, stats.skipped, snap.hash
    );
    let reached = r.position().clone();
    exit_without_freeing(r);
    if let Some(s) = stop {
        bail!(stopped_message(&s, &reached));
    }
    session.finish(&reached)
}
