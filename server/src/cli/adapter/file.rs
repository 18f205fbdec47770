//! `deltapilot adapter file`: the file adapter (directories of Istio YAML) as its own
//! process, appending to a log (`--log file://DIR` or `kafka://HOST:PORT/TOPIC`),
//! until SIGTERM or SIGINT.
//!
//! Also home of what every `deltapilot adapter …` command shares: the `--log` value,
//! opening the log for appends, and running an adapter until a signal with a grace
//! period (its admin server, see `admin`, serving until the adapter has drained).
//!
//! What it does NOT do: serve xDS (run `deltapilot run` or `serve` for that), or
//! parse YAML itself (the adapter does).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use deltapilot_adapters::file::{FileAdapter, FileAdapterOptions};
use deltapilot_log::{DEFAULT_LOG_URI, Log, LogOptions, LogUri, parse_uri};
use deltapilot_server::adapter_health::AdapterWatch;
use tokio::sync::watch;

use super::admin::{AdminArgs, AdminServer};

/// Arguments of `deltapilot adapter file`.
#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// A directory of Istio networking YAML to watch (repeatable; the env variable
    /// takes a comma-separated list).
    #[arg(
        long = "watch",
        value_name = "DIR",
        env = "DELTAPILOT_WATCH",
        value_delimiter = ',',
        required = true
    )]
    watch: Vec<PathBuf>,
    /// The log to append to: `file://DIR` or `kafka://HOST:PORT/TOPIC` (options in a
    /// query string, as for `deltapilot log`).
    #[arg(long = "log", env = "DELTAPILOT_LOG", value_name = "URI", default_value = DEFAULT_LOG_URI, value_parser = crate::cli::log::QuietUri(parse_log))]
    log: LogTarget,
    /// The source id on every event. Keep it stable across restarts and unique per
    /// adapter writing to the log: the engine sweeps and owns entities per source.
    #[arg(long, env = "DELTAPILOT_FILE_SOURCE", default_value = "file")]
    source: String,
    /// Directory for the adapter's state (generation, last good objects), so a file
    /// broken at start-up keeps its last good state. Without it, a broken file loses
    /// its entities until fixed.
    #[arg(long, env = "DELTAPILOT_FILE_STATE_DIR", value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Seconds between full rescans (the safety net behind the filesystem watch).
    #[arg(long, env = "DELTAPILOT_FILE_RESCAN_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    rescan_secs: u64,
    /// Seconds to wait for the adapter to finish its current append after
    /// SIGTERM/SIGINT.
    #[arg(long, env = "DELTAPILOT_DRAIN_GRACE_SECS", default_value_t = 10)]
    drain_grace_secs: u64,
    #[command(flatten)]
    admin: AdminArgs,
}

pub(super) async fn main(args: Args) -> anyhow::Result<()> {
    let opts = FileAdapterOptions {
        source_id: Some(args.source.clone()),
        state_dir: args.state_dir.clone(),
        rescan_interval: Duration::from_secs(args.rescan_secs),
        ..FileAdapterOptions::default()
    };
    let adapter =
        FileAdapter::new(args.watch.clone(), opts).context("starting the file adapter")?;
    let admin = args.admin.bind().await?;
    let log = open_log(&args.log).await?;
    let admin = admin.serve(AdapterWatch::File(adapter.status()), &log);
    tracing::info!(source = %adapter.source(), dirs = ?adapter.dirs(), log = %args.log.text, "file adapter running");
    run_until_signal(
        "file adapter",
        Duration::from_secs(args.drain_grace_secs),
        admin,
        |shutdown| adapter.run(log, shutdown),
    )
    .await
}

/// A parsed `--log` value, with its text kept for messages.
#[derive(Debug, Clone)]
pub(super) struct LogTarget {
    pub(super) text: String,
    uri: LogUri,
    opts: LogOptions,
}

/// Parses `--log` (through [`QuietUri`](crate::cli::log::QuietUri): a bad URI is a
/// usage error that does not echo the value).
pub(super) fn parse_log(text: &str) -> Result<LogTarget, String> {
    let (uri, opts) = parse_uri(text).map_err(|e| e.to_string())?;
    Ok(LogTarget {
        text: text.to_owned(),
        uri,
        opts,
    })
}

/// Opens the log for appends (creating it on first use; the embedded log takes its
/// writer lock, so this fails while another process writes that directory).
pub(super) async fn open_log(target: &LogTarget) -> anyhow::Result<Arc<Log>> {
    Log::open(&target.uri, &target.opts)
        .await
        .map(Arc::new)
        .with_context(|| format!("opening the log {}", target.text))
}

/// Runs `adapter` (given the shutdown signal) until it ends or SIGTERM/SIGINT
/// arrives; then signals shutdown and waits up to `grace` for it to finish.
/// `admin` serves until then, so probes and scrapes see the drain, and is
/// stopped last.
pub(super) async fn run_until_signal<F>(
    what: &str,
    grace: Duration,
    admin: AdminServer,
    adapter: impl FnOnce(watch::Receiver<bool>) -> F,
) -> anyhow::Result<()>
where
    F: Future<Output = deltapilot_adapters::Result<()>> + Send + 'static,
{
    let r = run_adapter(what, grace, adapter).await;
    admin.stop().await;
    r
}

async fn run_adapter<F>(
    what: &str,
    grace: Duration,
    adapter: impl FnOnce(watch::Receiver<bool>) -> F,
) -> anyhow::Result<()>
where
    F: Future<Output = deltapilot_adapters::Result<()>> + Send + 'static,
{
    let (tx, rx) = watch::channel(false);
    let mut task = tokio::spawn(adapter(rx));
    let ended = tokio::select! {
        () = terminated() => None,
        r = &mut task => Some(r),
    };
    let r = match ended {
        Some(r) => r,
        None => {
            let _ = tx.send(true);
            match tokio::time::timeout(grace, &mut task).await {
                Ok(r) => r,
                Err(_) => {
                    task.abort();
                    bail!("{what} did not stop within {grace:?} after the signal");
                }
            }
        }
    };
    match r {
        Ok(Ok(())) if *tx.borrow() => {
            tracing::info!("{what} stopped");
            Ok(())
        }
        Ok(Ok(())) => bail!("{what} stopped unexpectedly"),
        Ok(Err(e)) => Err(e).with_context(|| format!("{what} failed")),
        Err(e) => bail!("{what} panicked: {e}"),
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn terminated() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGTERM; only SIGINT stops the adapter");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = term => tracing::info!("SIGTERM: stopping"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping"),
    }
}
