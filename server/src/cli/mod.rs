//! Subcommands of the `deltapilot` binary.

pub(crate) mod adapter;
pub(crate) mod log;
pub(crate) mod proxy_status;
pub(crate) mod replay;
pub(crate) mod run;

/// Logs go to stderr (stdout carries command output such as JSON lines), filtered by
/// `RUST_LOG` (default `info`).
pub(crate) fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colour codes only on a terminal: logs piped to files or journald stay clean.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
}
