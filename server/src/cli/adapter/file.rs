//! `deltapilot adapter file` (stub: being built).

/// Arguments of `deltapilot adapter file`.
#[derive(Debug, clap::Args)]
pub(super) struct Args {}

pub(super) async fn main(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
