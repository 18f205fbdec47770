//! `deltapilot adapter …`: each registry adapter as its own process, appending to a
//! shared log (usually Kafka), so adapters scale and fail separately from the xDS
//! servers. Each serves `/healthz`, `/readyz` and `/metrics` on `--admin-addr`
//! (see `admin`).

mod admin;
mod eureka;
mod file;
mod kubernetes;

/// Arguments of `deltapilot adapter`.
#[derive(Debug, clap::Args)]
pub(crate) struct AdapterArgs {
    #[command(subcommand)]
    which: Which,
}

#[derive(Debug, clap::Subcommand)]
enum Which {
    /// Watch a Kubernetes cluster (Services, EndpointSlices, Pods, Nodes, Istio CRDs).
    Kubernetes(kubernetes::Args),
    /// Poll a Eureka server (full fetch, then deltas).
    Eureka(eureka::Args),
    /// Watch directories of Istio YAML.
    File(file::Args),
}

pub(crate) async fn main(args: AdapterArgs) -> anyhow::Result<()> {
    match args.which {
        Which::Kubernetes(a) => kubernetes::main(a).await,
        Which::Eureka(a) => eureka::main(a).await,
        Which::File(a) => file::main(a).await,
    }
}
