//! `deltapilot proxy-status` and `proxy-config` (stub: being built).

/// Arguments of `deltapilot proxy-status`.
#[derive(Debug, clap::Args)]
pub(crate) struct ProxyStatusArgs {}

/// Arguments of `deltapilot proxy-config`.
#[derive(Debug, clap::Args)]
pub(crate) struct ProxyConfigArgs {}

pub(crate) async fn status(_args: ProxyStatusArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}

pub(crate) async fn config(_args: ProxyConfigArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
