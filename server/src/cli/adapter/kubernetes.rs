//! `deltapilot adapter kubernetes`: the Kubernetes adapter as its own process,
//! watching one cluster (Services, EndpointSlices, Pods, Nodes, Istio networking
//! objects) and appending to a log (`--log file://DIR` or
//! `kafka://HOST:PORT/TOPIC`) until SIGTERM or SIGINT.
//!
//! Every flag has a `DELTAPILOT_K8S_*` environment variable (`--log`:
//! `DELTAPILOT_LOG`, `--kubeconfig`: `KUBECONFIG` is read when the flag is unset).
//! Options are validated and the kubeconfig loaded before anything is opened; an
//! unreachable API server is not fatal (the adapter retries and logs it).
//!
//! It serves `/healthz`, `/readyz` and `/metrics` on `--admin-addr` (see `admin`).
//!
//! What it does NOT do: serve xDS, or write to the cluster.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use deltapilot_adapters::kubernetes::{KubernetesAdapter, KubernetesOptions};
use deltapilot_log::DEFAULT_LOG_URI;
use deltapilot_server::adapter_health::AdapterWatch;

use super::admin::AdminArgs;
use super::file::{LogTarget, open_log, parse_log, run_until_signal};

/// Arguments of `deltapilot adapter kubernetes`.
#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// The kubeconfig file naming the cluster [default: $KUBECONFIG, then
    /// ~/.kube/config, then the in-cluster service account].
    #[arg(long, env = "DELTAPILOT_K8S_KUBECONFIG", value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// The log to append to: `file://DIR` or `kafka://HOST:PORT/TOPIC` (options in a
    /// query string, as for `deltapilot log`).
    #[arg(long = "log", env = "DELTAPILOT_LOG", value_name = "URI", default_value = DEFAULT_LOG_URI, value_parser = crate::cli::log::QuietUri(parse_log))]
    log: LogTarget,
    /// A namespace to watch (repeatable; the env variable takes a comma-separated
    /// list) [default: all namespaces].
    #[arg(
        long = "namespace",
        value_name = "NS",
        env = "DELTAPILOT_K8S_NAMESPACES",
        value_delimiter = ','
    )]
    namespaces: Vec<String>,
    /// A label selector restricting the Services and Istio objects watched
    /// (`app=web,tier in (a,b),!canary`); endpoints follow their Services.
    #[arg(long, env = "DELTAPILOT_K8S_LABEL_SELECTOR", value_name = "SEL")]
    label_selector: Option<String>,
    /// The cluster's name in endpoint keys (`ep/k8s/<cluster>/...`) and in the
    /// default source id; give each cluster appending to one log its own.
    #[arg(long, env = "DELTAPILOT_K8S_CLUSTER_ID", default_value = KubernetesOptions::DEFAULT_CLUSTER_ID, value_name = "ID")]
    cluster_id: String,
    /// The cluster DNS domain: Services become `<name>.<ns>.svc.<domain>`.
    #[arg(long, env = "DELTAPILOT_K8S_CLUSTER_DOMAIN", default_value = KubernetesOptions::DEFAULT_CLUSTER_DOMAIN, value_name = "DOMAIN")]
    cluster_domain: String,
    /// The source id on every event [default: k8s:<cluster-id>]. Keep it stable
    /// across restarts.
    #[arg(long, env = "DELTAPILOT_K8S_SOURCE", value_name = "ID")]
    source: Option<String>,
    /// Do not watch the Istio networking.istio.io/v1 kinds (e.g. when RBAC forbids
    /// reading them; a CRD that is merely not installed is handled either way).
    #[arg(long, env = "DELTAPILOT_K8S_NO_ISTIO")]
    no_istio: bool,
    /// Directory for the adapter's state (its last resync generation), so
    /// generations increase even if the clock steps back across a restart.
    #[arg(long, env = "DELTAPILOT_K8S_STATE_DIR", value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Seconds each watch request lasts before it is resumed (`timeoutSeconds`);
    /// requests idle for 15 s longer fail and are retried.
    #[arg(
        long,
        env = "DELTAPILOT_K8S_WATCH_TIMEOUT_SECS",
        default_value_t = 60,
        value_name = "SECS"
    )]
    watch_timeout_secs: u64,
    /// Objects per list page; 0 lists in one response from the API server's cache.
    #[arg(long, env = "DELTAPILOT_K8S_PAGE_SIZE", default_value_t = KubernetesOptions::DEFAULT_PAGE_SIZE, value_name = "N")]
    page_size: u32,
    /// Seconds to wait for the adapter to finish its current append after
    /// SIGTERM/SIGINT.
    #[arg(long, env = "DELTAPILOT_DRAIN_GRACE_SECS", default_value_t = 10)]
    drain_grace_secs: u64,
    #[command(flatten)]
    admin: AdminArgs,
}

impl Args {
    fn options(&self) -> anyhow::Result<KubernetesOptions> {
        if !(1..=86_400).contains(&self.watch_timeout_secs) {
            bail!(
                "--watch-timeout-secs {}: must be 1 to 86400",
                self.watch_timeout_secs
            );
        }
        let watch_timeout = Duration::from_secs(self.watch_timeout_secs);
        let opts = KubernetesOptions {
            cluster_id: self.cluster_id.clone(),
            source_id: self.source.clone(),
            cluster_domain: self.cluster_domain.clone(),
            namespaces: self.namespaces.clone(),
            label_selector: self.label_selector.clone(),
            istio: !self.no_istio,
            state_dir: self.state_dir.clone(),
            watch_timeout,
            read_timeout: watch_timeout + Duration::from_secs(15),
            page_size: (self.page_size > 0).then_some(self.page_size),
            ..KubernetesOptions::default()
        };
        opts.validate()
            .context("invalid Kubernetes adapter options")?;
        Ok(opts)
    }
}

pub(super) async fn main(args: Args) -> anyhow::Result<()> {
    let opts = args.options()?;
    let adapter = KubernetesAdapter::from_kubeconfig(args.kubeconfig.as_deref(), opts)
        .await
        .context("setting up the Kubernetes client")?;
    let admin = args.admin.bind().await?;
    let log = open_log(&args.log).await?;
    let admin = admin.serve(AdapterWatch::Kubernetes(adapter.status()), &log);
    let mut status = adapter.status();
    tracing::info!(source = %adapter.source(), log = %args.log.text, "kubernetes adapter starting");
    // Say once when the start-up resync is in the log, so operators see the
    // adapter became useful (the status has everything else).
    tokio::spawn(async move {
        if status.wait_for(|s| s.resync_completed).await.is_ok() {
            let s = status.borrow();
            tracing::info!(
                generation = s.generation,
                entities = s.entities_in_view,
                "kubernetes adapter: start-up resync appended"
            );
        }
    });
    run_until_signal(
        "the Kubernetes adapter",
        Duration::from_secs(args.drain_grace_secs),
        admin,
        |shutdown| adapter.run(log, shutdown),
    )
    .await
}
