//! The admin HTTP server of `deltapilot adapter …` (`--admin-addr`): `/healthz`
//! (the process is up), `/readyz` (503 until the adapter's start-up resync is in
//! the log, see [`adapter_health::process_readiness`]) and `/metrics` (the
//! adapter's part of the server's metrics, under the same names, see
//! [`Metrics::for_adapter`]), so Kubernetes can probe the adapter and Prometheus
//! scrape it.
//!
//! It is `deltapilot run`'s admin server (the same routes, request limits and
//! connection caps), without `/debug/*`: an adapter has no snapshot or proxies
//! to show, so there is nothing behind a token, and the three routes are
//! unguarded by design (see `admin::guard`).
//!
//! What it does NOT do: stop the adapter (it serves until [`AdminServer::stop`],
//! which the caller calls once the adapter has drained).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use deltapilot_log::Log;
use deltapilot_server::adapter_health::{self, AdapterWatch};
use deltapilot_server::admin::{self, ReadyFn, guard::RequestLimits};
use deltapilot_server::conn::ConnLimits;
use deltapilot_server::log_health::{self, LogWatch};
use deltapilot_server::metrics::Metrics;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// The adapter's admin address unless `--admin-addr` says otherwise: loopback,
/// and one port above `deltapilot run`'s 15014 so that both can run on one host.
pub(super) const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:15015";

/// How long the admin server may take to close its connections once the adapter
/// has stopped: requests are small, and a probe or scrape in flight finishes
/// well within it.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The admin flags every `deltapilot adapter …` shares.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct AdminArgs {
    /// Admin HTTP listen address (/healthz, /readyz, /metrics); a pod address
    /// such as 0.0.0.0:15015 for Kubernetes probes and Prometheus.
    #[arg(long, env = "DELTAPILOT_ADAPTER_ADMIN_ADDR", default_value = DEFAULT_ADMIN_ADDR, value_name = "ADDR")]
    admin_addr: SocketAddr,
}

/// A bound admin listener, not yet serving (so that a port in use fails the start
/// before the log is opened).
pub(super) struct Bound {
    listener: TcpListener,
    addr: SocketAddr,
}

impl AdminArgs {
    /// Binds `--admin-addr`.
    pub(super) async fn bind(&self) -> anyhow::Result<Bound> {
        let listener = TcpListener::bind(self.admin_addr).await.with_context(|| {
            format!(
                "cannot listen on {} for admin (port in use? pick another with --admin-addr)",
                self.admin_addr
            )
        })?;
        let addr = listener.local_addr().unwrap_or(self.admin_addr);
        Ok(Bound { listener, addr })
    }
}

/// The running admin server and the tasks that keep its metrics current.
pub(super) struct AdminServer {
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl Bound {
    /// Serves the adapter whose status is `status`, appending to `log`.
    pub(super) fn serve(self, status: AdapterWatch, log: &Arc<Log>) -> AdminServer {
        let metrics = Arc::new(Metrics::for_adapter());
        let (stop, stopped) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let log_watch = LogWatch::new(log);
        {
            let watch = log_watch.clone();
            metrics.on_scrape(move |m| watch.export(m));
            let (log, watch, stopped) = (log.clone(), log_watch.clone(), stopped.clone());
            tasks.spawn(log_health::probe(log, watch, stopped));
        }
        tasks.spawn(adapter_health::export(
            vec![status.clone()],
            metrics.clone(),
            stopped.clone(),
        ));
        let ready: ReadyFn = Arc::new(move || {
            adapter_health::process_readiness(
                &status.report(),
                log_watch.health(),
                log_watch.probe_error(),
            )
        });
        let routes =
            admin::router_guarded(metrics.clone(), ready, None, None, RequestLimits::default());
        let addr = self.addr;
        tasks.spawn(async move {
            let mut stopped = stopped;
            let shutdown = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            if let Err(e) =
                admin::serve_routes(self.listener, routes, ConnLimits::ADMIN, &metrics, shutdown)
                    .await
            {
                tracing::error!(error = %e, %addr, "the adapter's admin server failed");
            }
        });
        tracing::info!(admin = %addr, "adapter admin server listening (/healthz, /readyz, /metrics)");
        AdminServer { stop, tasks }
    }
}

impl AdminServer {
    /// Stops serving and waits (bounded) for the server and its tasks.
    pub(super) async fn stop(mut self) {
        let _ = self.stop.send(true);
        let all = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(STOP_GRACE, all).await.is_err() {
            tracing::warn!(
                "the adapter's admin server did not close within {STOP_GRACE:?}; leaving it"
            );
            self.tasks.abort_all();
        }
    }
}
