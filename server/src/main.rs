//! The `deltapilot` binary: one CLI over every part of the system.
//!
//! Each subcommand lives in its own module under `cli/`; this file only parses the
//! command line, sets up logging and dispatches.

use clap::{Parser, Subcommand};

mod cli;

/// mimalloc instead of glibc malloc: the fold and the per-stream push path
/// allocate many small, short-lived values, and glibc's free-list upkeep was a
/// large part of the fold's time.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// deltapilot: an event-sourced service-discovery control plane for Envoy fleets.
#[derive(Debug, Parser)]
#[command(name = "deltapilot", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Read, write and follow the event log.
    Log(cli::log::LogArgs),
    /// Run everything in one process: embedded log, file adapter, engine, xDS server.
    Run(cli::run::RunArgs),
    /// Re-fold the log: what changed event by event, what a proxy held at a position,
    /// and which event first made a resource match.
    Replay(cli::replay::ReplayArgs),
    /// One row per connected proxy: SYNCED, STALE or NACKED per type (istioctl style).
    ProxyStatus(cli::proxy_status::ProxyStatusArgs),
    /// The config a connected proxy holds, by type (istioctl style).
    ProxyConfig(cli::proxy_status::ProxyConfigArgs),
    /// Every problem with the traffic rules of files or a running server, one
    /// message each with a stable code; with --impact, what a change would do.
    Analyze(cli::analyze::AnalyzeArgs),
    /// Print a ready bootstrap for a proxy of this deployment: Envoy sidecar or
    /// router (delta or SotW), or proxyless gRPC's GRPC_XDS_BOOTSTRAP JSON, in
    /// plaintext or over TLS (--xds-tls-ca, --xds-tls-cert, --xds-tls-key).
    Bootstrap(cli::bootstrap::BootstrapArgs),
    /// Run one registry adapter as its own process, appending to a log.
    Adapter(cli::adapter::AdapterArgs),
    /// The load generator: simulated Envoys plus churn, with a report.
    Loadgen(deltapilot_load_tests::LoadgenArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    cli::init_tracing(match cli.command {
        Command::Analyze(_) => "error",
        _ => "info",
    });
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The report is out; the status says error-level problems were found.
        Err(e) if e.is::<cli::analyze::ProblemsFound>() => {
            std::process::ExitCode::from(cli::analyze::EXIT_PROBLEMS)
        }
        Err(e) => {
            // The cause chain on one line, without anyhow's backtrace: operators read
            // this, and RUST_BACKTRACE is often set for other reasons.
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    if matches!(cli.command, Command::Run(_) | Command::Loadgen(_)) {
        cli::disable_transparent_huge_pages();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Log(args) => cli::log::main(args).await,
            Command::Run(args) => cli::run::main(args).await,
            Command::Replay(args) => cli::replay::main(args).await,
            Command::ProxyStatus(args) => cli::proxy_status::status(args).await,
            Command::ProxyConfig(args) => cli::proxy_status::config(args).await,
            Command::Analyze(args) => cli::analyze::main(args).await,
            Command::Bootstrap(args) => cli::bootstrap::main(args),
            Command::Adapter(args) => cli::adapter::main(args).await,
            Command::Loadgen(args) => deltapilot_load_tests::run(args).await,
        }
    })
}
