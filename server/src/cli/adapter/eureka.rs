//! `deltapilot adapter eureka`: the Eureka adapter as its own process, polling one
//! Eureka server and appending to a log (`--log file://DIR` or
//! `kafka://HOST:PORT/TOPIC`) until SIGTERM or SIGINT.
//!
//! Every flag has a `DELTAPILOT_EUREKA_*` environment variable (`--log`:
//! `DELTAPILOT_LOG`). Everything is validated before the first request.
//!
//! It serves `/healthz`, `/readyz` and `/metrics` on `--admin-addr` (see `admin`).
//!
//! What it does NOT do: serve xDS, or register with Eureka.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use deltapilot_adapters::eureka::{EurekaAdapter, EurekaOptions};
use deltapilot_log::DEFAULT_LOG_URI;
use deltapilot_server::adapter_health::AdapterWatch;

use super::admin::AdminArgs;
use super::file::{LogTarget, open_log, parse_log, run_until_signal};

/// Arguments of `deltapilot adapter eureka`.
#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// The Eureka REST base URL, everything before `/apps`: e.g.
    /// `http://HOST:8080/eureka/v2` or (Spring Cloud) `http://HOST:8761/eureka`.
    #[arg(long, env = "DELTAPILOT_EUREKA_URL", value_name = "URL")]
    url: String,
    /// The log to append to: `file://DIR` or `kafka://HOST:PORT/TOPIC` (options in a
    /// query string, as for `deltapilot log`).
    #[arg(long = "log", env = "DELTAPILOT_LOG", value_name = "URI", default_value = DEFAULT_LOG_URI, value_parser = crate::cli::log::QuietUri(parse_log))]
    log: LogTarget,
    /// Seconds between delta polls (`GET /apps/delta`); fractions allowed.
    #[arg(
        long,
        env = "DELTAPILOT_EUREKA_REFRESH_SECS",
        default_value_t = 30.0,
        value_name = "SECS"
    )]
    refresh_secs: f64,
    /// Seconds between full fetches (`GET /apps`), the safety net behind deltas;
    /// 0: only at start, after failures and on hashcode mismatches.
    #[arg(
        long,
        env = "DELTAPILOT_EUREKA_FULL_FETCH_SECS",
        default_value_t = 600,
        value_name = "SECS"
    )]
    full_fetch_secs: u64,
    /// Seconds every request may take, connect to last byte; fractions allowed.
    #[arg(
        long,
        env = "DELTAPILOT_EUREKA_TIMEOUT_SECS",
        default_value_t = 10.0,
        value_name = "SECS"
    )]
    timeout_secs: f64,
    /// Largest response accepted, in bytes.
    #[arg(long, env = "DELTAPILOT_EUREKA_MAX_RESPONSE_BYTES", default_value_t = EurekaOptions::DEFAULT_MAX_RESPONSE_BYTES, value_name = "N")]
    max_response_bytes: u64,
    /// The source id on every event and in every endpoint key
    /// (`ep/<source>/<APP>/<instanceId>`). Keep it stable across restarts and unique
    /// per Eureka adapter writing to the log.
    #[arg(long, env = "DELTAPILOT_EUREKA_SOURCE", default_value = EurekaOptions::DEFAULT_SOURCE, value_name = "ID")]
    source: String,
    /// Namespace of the services the adapter writes (`svc/<namespace>/<vip>`).
    #[arg(long, env = "DELTAPILOT_EUREKA_NAMESPACE", default_value = EurekaOptions::DEFAULT_SOURCE, value_name = "NS")]
    namespace: String,
    /// Directory for the adapter's state (its last resync generation), so
    /// generations increase even if the clock steps back across a restart.
    #[arg(long, env = "DELTAPILOT_EUREKA_STATE_DIR", value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Seconds to wait for the adapter to finish its current append after
    /// SIGTERM/SIGINT.
    #[arg(long, env = "DELTAPILOT_DRAIN_GRACE_SECS", default_value_t = 10)]
    drain_grace_secs: u64,
    #[command(flatten)]
    admin: AdminArgs,
}

/// Seconds (fractions allowed) as a duration, for `--flag`.
fn secs(v: f64, flag: &str) -> anyhow::Result<Duration> {
    if !(v.is_finite() && v > 0.0 && v <= 86_400.0) {
        bail!("--{flag} {v}: must be above 0 and at most 86400");
    }
    Ok(Duration::from_secs_f64(v))
}

impl Args {
    /// The adapter's options, validated.
    fn options(&self) -> anyhow::Result<EurekaOptions> {
        let opts = EurekaOptions {
            source_id: self.source.clone(),
            namespace: self.namespace.clone(),
            state_dir: self.state_dir.clone(),
            refresh_interval: secs(self.refresh_secs, "refresh-secs")?,
            full_fetch_interval: (self.full_fetch_secs > 0)
                .then(|| Duration::from_secs(self.full_fetch_secs)),
            request_timeout: secs(self.timeout_secs, "timeout-secs")?,
            max_response_bytes: self.max_response_bytes,
            ..EurekaOptions::new(self.url.clone())
        };
        opts.validate().context("invalid Eureka adapter settings")?;
        Ok(opts)
    }
}

pub(super) async fn main(args: Args) -> anyhow::Result<()> {
    let opts = args.options()?;
    let adapter = EurekaAdapter::new(opts).context("starting the eureka adapter")?;
    let admin = args.admin.bind().await?;
    let log = open_log(&args.log).await?;
    let admin = admin.serve(AdapterWatch::Eureka(adapter.status()), &log);
    tracing::info!(source = %adapter.source(), url = %args.url, log = %args.log.text, "eureka adapter running");
    run_until_signal(
        "eureka adapter",
        Duration::from_secs(args.drain_grace_secs),
        admin,
        |shutdown| adapter.run(log, shutdown),
    )
    .await
}
