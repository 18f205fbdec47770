//! `deltapilot run` (stub: being built).

/// Arguments of `deltapilot run`.
#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {}

pub(crate) async fn main(_args: RunArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
