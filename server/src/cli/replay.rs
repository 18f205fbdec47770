//! `deltapilot replay` (stub: being built).

/// Arguments of `deltapilot replay`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReplayArgs {}

pub(crate) async fn main(_args: ReplayArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
