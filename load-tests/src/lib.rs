//! deltapilot's load generator (stub: being built).

/// Arguments of the load generator.
#[derive(Debug, clap::Args)]
pub struct LoadgenArgs {}

/// Runs the load generator.
pub async fn run(_args: LoadgenArgs) -> anyhow::Result<()> {
    anyhow::bail!("the load generator is not built yet")
}
