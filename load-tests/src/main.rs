//! `deltapilot-loadgen`: the load generator as its own binary; the same code runs as
//! `deltapilot loadgen`.

use clap::Parser;

/// deltapilot's load generator.
#[derive(Debug, Parser)]
#[command(name = "deltapilot-loadgen", version)]
struct Cli {
    #[command(flatten)]
    args: deltapilot_load_tests::LoadgenArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    deltapilot_load_tests::run(Cli::parse().args).await
}
