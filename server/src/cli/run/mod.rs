//! `deltapilot run`: one process holding the embedded log, the in-process adapters
//! (file, Kubernetes, Eureka), the engine, the xDS server and the admin server.
//!
//! Settings come from flags, their `DELTAPILOT_*` environment variables, and an
//! optional `--config FILE` whose keys mirror the long flag names
//! (`xds-addr: 127.0.0.1:18000`, `watch: [mesh]`). Precedence: flag, then
//! environment, then config file, then the built-in default. Relative paths in a
//! config file are relative to the file's directory. Everything is validated before
//! anything starts.
//!
//! The log is the embedded one in `DATA_DIR/log` unless `--log` names another: a
//! `kafka://` topic lets several replicas serve one registry, fed by adapters in
//! this process (`--watch`, `--kubeconfig`, `--eureka-url`) or in their own
//! (`deltapilot adapter`).
//!
//! - [`settings`]: every flag, variable and config key, declared once, and their
//!   validation.
//! - [`checkpoints`]: restoring the engine at start and writing checkpoints while
//!   it runs.
//! - [`security`]: the xDS listener's TLS and the admin server's token and
//!   limits, checked and loaded.
//! - [`wiring`]: the adapters, listeners and tasks, and the drain on shutdown.
//!
//! What it does NOT do: parse registries itself (the adapters do).

mod checkpoints;
mod security;
mod settings;
mod wiring;

use tokio::sync::watch;

use self::checkpoints::Checkpoints;
pub(crate) use self::settings::RunArgs;
use self::wiring::{Adapters, Listeners, Parts};

/// Runs until SIGTERM or SIGINT (then drains), or until a component fails.
pub(crate) async fn main(args: RunArgs) -> anyhow::Result<()> {
    let s = args.settings()?;
    if let Some(warning) = s.debug_exposure_warning() {
        tracing::warn!("{warning}");
    }
    // Adapters and listeners first: a bad kubeconfig or a port in use fails the
    // start before the log is opened.
    let adapters = Adapters::new(&s).await?;
    let listeners = Listeners::bind(&s).await?;
    let log = wiring::open_log(&s.log).await?;
    let (shutdown_tx, shutdown) = watch::channel(false);
    let checkpoints = s.checkpoints.map(|p| Checkpoints::new(&s.data_dir, p));
    let (engine, from) = checkpoints::start_engine(&s.gen_opts, &log, checkpoints.as_ref()).await?;
    let parts = Parts {
        adapters,
        listeners,
        log,
        engine,
        from,
        checkpoints,
    };
    let tasks = wiring::spawn_all(&s, parts, &shutdown);
    tracing::info!(
        xds = %s.xds_addr, xds_tls = s.xds_tls.as_ref().map_or("off", |t| if t.mutual() { "mutual" } else { "on" }), admin = %s.admin_addr, data_dir = %s.data_dir.display(),
        watch = ?s.watch, kubeconfig = ?s.kubeconfig, eureka = s.eureka.as_ref().map_or("", |e| e.base_url.as_str()),
        bind_outbound = s.gen_opts.bind_outbound, "deltapilot running"
    );
    if !s.gen_opts.export_defaults.service.is_empty() {
        // Istio applies it to every service; the model knows `exportTo` only
        // on ServiceEntries, so the rest stays public, and says so.
        tracing::warn!(
            default_service_export_to = ?s.gen_opts.export_defaults.service,
            "--default-service-export-to applies to ServiceEntries only: services of other \
             registries (Kubernetes Services, Eureka) stay visible to every namespace"
        );
    }
    wiring::run_until_stopped(tasks, shutdown_tx, s.drain_grace).await
}
