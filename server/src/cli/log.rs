//! `deltapilot log …` (stub: being built).

/// Arguments of `deltapilot log`.
#[derive(Debug, clap::Args)]
pub(crate) struct LogArgs {}

pub(crate) async fn main(_args: LogArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
