//! Subcommands of the `deltapilot` binary.

pub(crate) mod adapter;
pub(crate) mod analyze;
pub(crate) mod bootstrap;
pub(crate) mod log;
pub(crate) mod proxy_status;
pub(crate) mod replay;
pub(crate) mod run;

/// Logs go to stderr (stdout carries command output such as JSON lines), filtered by
/// `RUST_LOG` (default `default`: `info`, or `error` for commands whose report
/// already says everything, such as `analyze`, which reads files through the
/// file adapter's parser and would repeat each problem as a log line).
pub(crate) fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colour codes only on a terminal: logs piped to files or journald stay clean.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
}

/// Turns transparent huge pages off for this process (see
/// [`deltapilot_server::process::disable_transparent_huge_pages`] for why),
/// before the runtime allocates its heap. For `run` and `loadgen`: the load
/// generator's 10,000 simulated proxies touch memory the way a server's
/// connections do, and it shares the cores with the server it measures (with
/// huge pages it spends far more CPU in a reconnect storm; the baseline server
/// it starts is this binary again, and inherits the setting). Failing only
/// costs that memory, so it is logged and the process starts anyway.
pub(crate) fn disable_transparent_huge_pages() {
    if let Err(e) = deltapilot_server::process::disable_transparent_huge_pages() {
        tracing::warn!(
            error = %e,
            "could not turn transparent huge pages off; memory per connection will be higher"
        );
    }
}
