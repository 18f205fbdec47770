//! The settings of `deltapilot run`, and their validation.
//!
//! Each setting is declared once, in [`RunConfig`]: its long flag, its
//! `DELTAPILOT_*` variable and its `--config` key (the flag's name) come from the
//! same field, and its doc comment is the `--help` text with the default. A
//! config file is read into a `RunConfig`; the flags and variables actually given
//! are then written over it (clap's `update_from_arg_matches` touches only what
//! was given), and [`RunConfig::validate`] fills in the defaults and checks
//! everything before anything starts.
//!
//! What it does NOT do: open, bind or start anything (see `wiring`).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{ArgMatches, FromArgMatches};
use deltapilot_adapters::eureka::EurekaOptions;
use deltapilot_engine::checkpoint::CheckpointPolicy;
use deltapilot_log::{LogOptions, LogUri, parse_uri};
use deltapilot_model::rules::ExportDefaults;
use deltapilot_server::conn::{ConnLimits, XdsConnOptions};
use deltapilot_server::xds::Limits;
use deltapilot_xds::generate::GenOptions;
use deltapilot_xds::view::RouteDelivery;
use serde::Deserialize;

/// Every setting of `deltapilot run`, as a flag, its environment variable and its
/// `--config` key at once. Every field is optional, so that a config file can
/// supply what the command line leaves out; the defaults are applied last, in
/// [`RunConfig::validate`].
#[derive(Debug, Default, clap::Args, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RunConfig {
    /// xDS gRPC listen address [default: 127.0.0.1:18000].
    #[arg(long, env = "DELTAPILOT_XDS_ADDR")]
    xds_addr: Option<SocketAddr>,
    /// Admin HTTP listen address (/healthz, /readyz, /metrics) [default: 127.0.0.1:15014].
    #[arg(long, env = "DELTAPILOT_ADMIN_ADDR")]
    admin_addr: Option<SocketAddr>,
    /// Data directory: checkpoints, adapter state, and the embedded log in
    /// DATA_DIR/log unless --log names another [default: ./data].
    #[arg(long, env = "DELTAPILOT_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// The event log to follow and serve: `file://DIR` (embedded) or
    /// `kafka://HOST:PORT[,HOST:PORT…]/TOPIC[?…]` (many replicas, adapters in
    /// their own processes). Kafka TLS, SASL and tuning: librdkafka properties in
    /// the query (`security.protocol=SSL&ssl.ca.location=FILE`) or `config=FILE`;
    /// secrets as `KEY.file=PATH` or `KEY.env=VAR`, never in the URI (see `deltapilot
    /// log --help`) [default: file://DATA_DIR/log].
    #[arg(long, env = "DELTAPILOT_LOG", value_name = "URI")]
    log: Option<String>,
    /// A directory of Istio ServiceEntry YAML files to watch (repeatable; the env
    /// variable takes a comma-separated list).
    #[arg(
        long = "watch",
        value_name = "DIR",
        env = "DELTAPILOT_WATCH",
        value_delimiter = ','
    )]
    #[serde(default)]
    watch: Vec<PathBuf>,
    /// A kubeconfig naming a Kubernetes cluster to watch in-process (Services,
    /// EndpointSlices, Pods, Nodes, Istio networking objects).
    #[arg(long, env = "DELTAPILOT_KUBECONFIG", value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// A directory of gateway credentials served over SDS: a Gateway's
    /// `credentialName: NAME` reads DIR/NAME/tls.crt and DIR/NAME/tls.key (and
    /// DIR/NAME/ca.crt for MUTUAL), the layout of a mounted Kubernetes TLS
    /// Secret; changes are picked up without a restart [default: none].
    #[arg(long, env = "DELTAPILOT_CREDENTIALS_DIR", value_name = "DIR")]
    credentials_dir: Option<PathBuf>,
    /// Base URL of a Eureka server to read in-process, everything before `/apps`
    /// (e.g. `http://HOST:8080/eureka/v2`, or Spring Cloud's `http://HOST:8761/eureka`).
    #[arg(long, env = "DELTAPILOT_EUREKA_URL", value_name = "URL")]
    eureka_url: Option<String>,
    /// Seconds between Eureka delta polls, fractions allowed [default: 30].
    #[arg(long, env = "DELTAPILOT_EUREKA_REFRESH_SECS", value_name = "SECS")]
    eureka_refresh_secs: Option<f64>,
    /// A YAML or JSON file whose keys mirror these flags (e.g. `xds-addr`, `watch`).
    #[arg(long, value_name = "FILE", env = "DELTAPILOT_CONFIG")]
    // Not a key of the file itself: a file naming another is refused as unknown.
    #[serde(skip)]
    config: Option<PathBuf>,
    /// Make sidecar outbound listeners bind their service port directly (no iptables
    /// capture needed) [default: false].
    #[arg(long, env = "DELTAPILOT_BIND_OUTBOUND", num_args = 0..=1, default_missing_value = "true")]
    bind_outbound: Option<bool>,
    /// Address sidecar outbound listeners listen on [default: 0.0.0.0].
    #[arg(long, env = "DELTAPILOT_OUTBOUND_ADDRESS")]
    outbound_address: Option<IpAddr>,
    /// Namespace whose Sidecar without workloadSelector is the mesh-wide default
    /// [default: istio-system].
    #[arg(long, env = "DELTAPILOT_ROOT_NAMESPACE", value_name = "NAMESPACE")]
    root_namespace: Option<String>,
    /// `exportTo` of the ServiceEntries that set none, as Istio's MeshConfig
    /// `defaultServiceExportTo` (`*`, `.`, `~` or namespaces; comma-separated)
    /// [default: public].
    #[arg(
        long,
        env = "DELTAPILOT_DEFAULT_SERVICE_EXPORT_TO",
        value_name = "NS",
        value_delimiter = ','
    )]
    #[serde(default)]
    default_service_export_to: Vec<String>,
    /// `exportTo` of the VirtualServices that set none, as MeshConfig
    /// `defaultVirtualServiceExportTo` [default: public].
    #[arg(
        long,
        env = "DELTAPILOT_DEFAULT_VIRTUAL_SERVICE_EXPORT_TO",
        value_name = "NS",
        value_delimiter = ','
    )]
    #[serde(default)]
    default_virtual_service_export_to: Vec<String>,
    /// `exportTo` of the DestinationRules that set none, as MeshConfig
    /// `defaultDestinationRuleExportTo` [default: public].
    #[arg(
        long,
        env = "DELTAPILOT_DEFAULT_DESTINATION_RULE_EXPORT_TO",
        value_name = "NS",
        value_delimiter = ','
    )]
    #[serde(default)]
    default_destination_rule_export_to: Vec<String>,
    /// Most resource names one xDS stream may subscribe to [default: 100000].
    #[arg(long, env = "DELTAPILOT_MAX_NAMES_PER_STREAM")]
    max_names_per_stream: Option<usize>,
    /// Largest xDS request accepted, in bytes [default: 4194304].
    #[arg(long, env = "DELTAPILOT_MAX_REQUEST_BYTES")]
    max_request_bytes: Option<usize>,
    /// Most resources in one delta response; the rest follow after the ACK [default: 10000].
    #[arg(long, env = "DELTAPILOT_MAX_RESOURCES_PER_RESPONSE")]
    max_resources_per_response: Option<usize>,
    /// Most concurrent xDS streams [default: 100000].
    #[arg(long, env = "DELTAPILOT_MAX_STREAMS")]
    max_streams: Option<usize>,
    /// How delta Envoys get HTTP routes: `inline` (virtual hosts inside each
    /// route configuration) or `vhds` (one VirtualHost resource each, so a
    /// rule edit resends one virtual host; the bootstrap's ADS must be
    /// DELTA_GRPC). SotW and proxyless clients always get inline [default: inline].
    #[arg(
        long,
        env = "DELTAPILOT_ROUTE_DELIVERY",
        value_enum,
        value_name = "HOW"
    )]
    route_delivery: Option<RouteDeliveryArg>,
    /// Seconds a stream may stay silent with a response un-ACKed before it is closed [default: 300].
    #[arg(long, env = "DELTAPILOT_STALL_TIMEOUT_SECS")]
    stall_timeout_secs: Option<u64>,
    /// Most TCP connections open at once on the xDS port; more are closed on accept [default: 100000].
    #[arg(long, env = "DELTAPILOT_XDS_MAX_CONNECTIONS", value_name = "N")]
    xds_max_connections: Option<usize>,
    /// Most xDS connections open at once from one source address, 0 for no such
    /// cap (proxies behind a NAT share one) [default: 0].
    #[arg(
        long,
        env = "DELTAPILOT_XDS_MAX_CONNECTIONS_PER_SOURCE",
        value_name = "N"
    )]
    xds_max_connections_per_source: Option<usize>,
    /// Seconds an xDS connection may take to send its first request (HTTP/2
    /// preface and the first stream) before it is closed [default: 20].
    #[arg(
        long,
        env = "DELTAPILOT_XDS_HANDSHAKE_TIMEOUT_SECS",
        value_name = "SECS"
    )]
    xds_handshake_timeout_secs: Option<u64>,
    /// Seconds between HTTP/2 pings on each xDS connection [default: 30].
    #[arg(
        long,
        env = "DELTAPILOT_XDS_KEEPALIVE_INTERVAL_SECS",
        value_name = "SECS"
    )]
    xds_keepalive_interval_secs: Option<u64>,
    /// Seconds an xDS connection may leave a ping unanswered before it is closed [default: 20].
    #[arg(
        long,
        env = "DELTAPILOT_XDS_KEEPALIVE_TIMEOUT_SECS",
        value_name = "SECS"
    )]
    xds_keepalive_timeout_secs: Option<u64>,
    /// Seconds after which an xDS connection is sent an HTTP/2 GOAWAY, so its
    /// proxy reconnects and replicas rebalance (e.g. 1800, Istio's default);
    /// off unless set. The age is the same for every connection (no jitter).
    #[arg(
        long,
        env = "DELTAPILOT_XDS_MAX_CONNECTION_AGE_SECS",
        value_name = "SECS"
    )]
    xds_max_connection_age_secs: Option<u64>,
    /// Seconds a connection sent that GOAWAY keeps its streams before it is
    /// closed [default: 10].
    #[arg(
        long,
        env = "DELTAPILOT_XDS_MAX_CONNECTION_AGE_GRACE_SECS",
        value_name = "SECS"
    )]
    xds_max_connection_age_grace_secs: Option<u64>,
    /// Most TCP connections open at once on the admin port [default: 256].
    #[arg(long, env = "DELTAPILOT_ADMIN_MAX_CONNECTIONS", value_name = "N")]
    admin_max_connections: Option<usize>,
    /// Most admin connections open at once from one source address, 0 for no such cap [default: 32].
    #[arg(
        long,
        env = "DELTAPILOT_ADMIN_MAX_CONNECTIONS_PER_SOURCE",
        value_name = "N"
    )]
    admin_max_connections_per_source: Option<usize>,
    /// Seconds an admin connection may take to send a request head, the first or
    /// the next on a kept-alive connection, before it is closed [default: 30].
    #[arg(long, env = "DELTAPILOT_ADMIN_IDLE_TIMEOUT_SECS", value_name = "SECS")]
    admin_idle_timeout_secs: Option<u64>,
    /// Seconds to wait for streams and tasks to finish after SIGTERM/SIGINT [default: 10].
    #[arg(long, env = "DELTAPILOT_DRAIN_GRACE_SECS")]
    drain_grace_secs: Option<u64>,
    /// Write a checkpoint after this many log records (0: no checkpoints) [default: 100000].
    #[arg(long, env = "DELTAPILOT_CHECKPOINT_EVERY_EVENTS", value_name = "N")]
    checkpoint_every_events: Option<u64>,
    /// Write a checkpoint after this many seconds if the log moved [default: 300].
    #[arg(long, env = "DELTAPILOT_CHECKPOINT_EVERY_SECS", value_name = "SECS")]
    checkpoint_every_secs: Option<u64>,
    /// Checkpoints to keep in DATA_DIR/checkpoints [default: 3].
    #[arg(long, env = "DELTAPILOT_CHECKPOINT_KEEP", value_name = "K")]
    checkpoint_keep: Option<usize>,
    /// Serve /debug/* on the admin server: auto (only on a loopback admin address), on, off [default: auto].
    #[arg(
        long,
        env = "DELTAPILOT_DEBUG_ENDPOINTS",
        value_enum,
        value_name = "WHEN"
    )]
    debug_endpoints: Option<DebugEndpoints>,
    /// A file holding the bearer token `/debug/*` requires (`Authorization:
    /// Bearer TOKEN`); re-read when it changes [default: none].
    #[arg(long, env = "DELTAPILOT_ADMIN_TOKEN_FILE", value_name = "FILE")]
    admin_token_file: Option<PathBuf>,
    /// Serve /debug/* on a non-loopback admin address without a token (else
    /// the start is refused) [default: false].
    #[arg(long, env = "DELTAPILOT_ADMIN_INSECURE", num_args = 0..=1, default_missing_value = "true")]
    admin_insecure: Option<bool>,
    /// Largest admin request body accepted, in bytes; larger ones get 413 [default: 1048576].
    #[arg(long, env = "DELTAPILOT_ADMIN_MAX_BODY_BYTES", value_name = "N")]
    admin_max_body_bytes: Option<usize>,
    /// Seconds an admin request may take, its body included, before it gets 408
    /// and its connection is closed [default: 30].
    #[arg(
        long,
        env = "DELTAPILOT_ADMIN_REQUEST_TIMEOUT_SECS",
        value_name = "SECS"
    )]
    admin_request_timeout_secs: Option<u64>,
    /// Serve xDS over TLS with this PEM certificate chain (with --xds-tls-key);
    /// its SANs must include the host or IP clients dial. Reloaded when it
    /// changes [default: plaintext].
    #[arg(long, env = "DELTAPILOT_XDS_TLS_CERT", value_name = "FILE")]
    xds_tls_cert: Option<PathBuf>,
    /// The PEM private key of --xds-tls-cert.
    #[arg(long, env = "DELTAPILOT_XDS_TLS_KEY", value_name = "FILE")]
    xds_tls_key: Option<PathBuf>,
    /// Require xDS clients to present a certificate signed by a CA in this PEM
    /// file (mutual TLS) [default: no client certificate asked].
    #[arg(long, env = "DELTAPILOT_XDS_TLS_CLIENT_CA", value_name = "FILE")]
    xds_tls_client_ca: Option<PathBuf>,
    /// With --xds-tls-client-ca, only clients whose certificate has this SAN DNS
    /// name or URI (e.g. `spiffe://cluster.local/ns/NS/sa/SA`) may connect
    /// (repeatable; the env variable takes a comma-separated list) [default: any
    /// verified client].
    #[arg(
        long = "xds-tls-allow",
        value_name = "ID",
        env = "DELTAPILOT_XDS_TLS_ALLOW",
        value_delimiter = ','
    )]
    #[serde(default)]
    xds_tls_allow: Vec<String>,
}

/// `--route-delivery` (see `RouteDelivery`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum RouteDeliveryArg {
    /// Virtual hosts inline in each route configuration.
    Inline,
    /// Route configurations point at VHDS; each virtual host is a resource.
    Vhds,
}

/// `--debug-endpoints`: whether the admin server mounts `/debug/*`, which exposes
/// the whole mesh's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum DebugEndpoints {
    /// Only when the admin server listens on a loopback address.
    Auto,
    /// Always.
    On,
    /// Never.
    Off,
}

/// The arguments of `deltapilot run` as given on the command line and in the
/// environment. It keeps clap's matches rather than a parsed struct, so that only
/// the flags and variables actually given override the config file.
#[derive(Debug, Clone)]
pub(crate) struct RunArgs {
    given: ArgMatches,
}

impl clap::FromArgMatches for RunArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(RunArgs {
            given: matches.clone(),
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for RunArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        RunConfig::augment_args(cmd)
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        RunConfig::augment_args_for_update(cmd)
    }
}

impl RunArgs {
    /// The config file (if any), with the flags and environment given written
    /// over it, validated.
    pub(crate) fn settings(&self) -> anyhow::Result<Settings> {
        let given = RunConfig::from_arg_matches(&self.given)?;
        let mut merged = match &given.config {
            Some(path) => read_config(path)?,
            None => RunConfig::default(),
        };
        merged.update_from_arg_matches(&self.given)?;
        merged.validate()
    }
}

/// Validated settings, defaults applied.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(super) xds_addr: SocketAddr,
    pub(super) admin_addr: SocketAddr,
    pub(super) data_dir: PathBuf,
    pub(super) log: LogSetting,
    pub(super) watch: Vec<PathBuf>,
    pub(super) kubeconfig: Option<PathBuf>,
    /// `--credentials-dir`, checked to be a directory.
    pub(super) credentials_dir: Option<PathBuf>,
    pub(super) eureka: Option<EurekaOptions>,
    pub(super) gen_opts: GenOptions,
    pub(super) limits: Limits,
    /// The xDS listener's connection caps, handshake timeout and keepalive.
    pub(super) xds_conn: XdsConnOptions,
    /// The admin listener's connection caps and idle timeout.
    pub(super) admin_conn: ConnLimits,
    pub(super) drain_grace: Duration,
    /// `None`: checkpoints are off.
    pub(super) checkpoints: Option<CheckpointPolicy>,
    /// Whether `/debug/*` is mounted.
    pub(super) debug_endpoints: bool,
    /// The admin server's token and request limits.
    pub(super) admin_guard: super::security::AdminGuard,
    /// xDS over TLS, loaded (`None`: plaintext).
    pub(super) xds_tls: Option<std::sync::Arc<deltapilot_server::tls::XdsTls>>,
}

/// The log to serve.
#[derive(Debug, Clone)]
pub(crate) struct LogSetting {
    /// The URI as given (or as defaulted), for messages.
    pub(super) text: String,
    /// The URI, parsed.
    pub(super) uri: LogUri,
    /// The options its query string carried.
    pub(super) options: LogOptions,
}

/// Reads a `--config` file (YAML, or JSON, which is YAML too) and makes its
/// relative paths relative to the file's directory.
fn read_config(path: &Path) -> anyhow::Result<RunConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --config {}", path.display()))?;
    let parsed: Result<RunConfig, _> = serde_yaml::from_str(&text);
    let mut cfg = parsed.with_context(|| format!("--config {}: invalid config", path.display()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let rebase = |p: PathBuf| if p.is_relative() { base.join(p) } else { p };
    cfg.data_dir = cfg.data_dir.map(rebase);
    cfg.log = cfg.log.map(|uri| rebase_file_uri(&uri, base));
    cfg.watch = cfg.watch.into_iter().map(rebase).collect();
    cfg.kubeconfig = cfg.kubeconfig.map(rebase);
    cfg.credentials_dir = cfg.credentials_dir.map(rebase);
    cfg.admin_token_file = cfg.admin_token_file.map(rebase);
    cfg.xds_tls_cert = cfg.xds_tls_cert.map(rebase);
    cfg.xds_tls_key = cfg.xds_tls_key.map(rebase);
    cfg.xds_tls_client_ca = cfg.xds_tls_client_ca.map(rebase);
    Ok(cfg)
}

/// A `file://` URI whose directory is relative, made relative to `base` (the
/// config file's directory, like every other path in it); any other URI as is.
fn rebase_file_uri(uri: &str, base: &Path) -> String {
    match uri.strip_prefix("file://") {
        Some(rest) => {
            let (dir, query) = rest
                .split_once('?')
                .map_or((rest, None), |(d, q)| (d, Some(q)));
            if Path::new(dir).is_relative() {
                let joined = base.join(dir);
                match query {
                    Some(q) => format!("file://{}?{q}", joined.display()),
                    None => format!("file://{}", joined.display()),
                }
            } else {
                uri.to_owned()
            }
        }
        None => uri.to_owned(),
    }
}

impl RunConfig {
    /// Applies the defaults and checks every setting.
    fn validate(self) -> anyhow::Result<Settings> {
        let limits = self.limits()?;
        let xds_tls = super::security::xds_tls(
            self.xds_tls_cert.clone(),
            self.xds_tls_key.clone(),
            self.xds_tls_client_ca.clone(),
            self.xds_tls_allow.clone(),
        )?;
        let (xds_conn, admin_conn) = self.conn_options()?;
        for w in &self.watch {
            if !w.is_dir() {
                bail!(
                    "--watch {}: not a directory (create it, or fix the path)",
                    w.display()
                );
            }
        }
        let xds_addr = self
            .xds_addr
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 18000)));
        let admin_addr = self
            .admin_addr
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 15014)));
        if xds_addr == admin_addr && xds_addr.port() != 0 {
            bail!("--xds-addr and --admin-addr are both {xds_addr}; they need different ports");
        }
        let data_dir = self.data_dir.unwrap_or_else(|| PathBuf::from("./data"));
        if data_dir.exists() && !data_dir.is_dir() {
            bail!(
                "--data-dir {}: exists and is not a directory",
                data_dir.display()
            );
        }
        let log = log_setting(self.log, &data_dir)?;
        if let Some(k) = &self.kubeconfig
            && !k.is_file()
        {
            bail!(
                "--kubeconfig {}: not a file (fix the path, or leave the flag out)",
                k.display()
            );
        }
        if let Some(d) = &self.credentials_dir
            && !d.is_dir()
        {
            bail!(
                "--credentials-dir {}: not a directory (create it, fix the path, or leave \
                 the flag out)",
                d.display()
            );
        }
        let eureka = eureka_options(self.eureka_url, self.eureka_refresh_secs, &data_dir)?;
        let defaults = GenOptions::default();
        let gen_opts = GenOptions {
            outbound_address: self
                .outbound_address
                .map(|a| a.to_string())
                .unwrap_or(defaults.outbound_address),
            bind_outbound: self.bind_outbound.unwrap_or(false),
            root_namespace: self.root_namespace.unwrap_or(defaults.root_namespace),
            export_defaults: ExportDefaults {
                service: export_list("default-service-export-to", self.default_service_export_to)?,
                virtual_service: export_list(
                    "default-virtual-service-export-to",
                    self.default_virtual_service_export_to,
                )?,
                destination_rule: export_list(
                    "default-destination-rule-export-to",
                    self.default_destination_rule_export_to,
                )?,
            },
            ..defaults
        };
        let drain_grace = Duration::from_secs(self.drain_grace_secs.unwrap_or(10));
        let checkpoints = checkpoint_policy(
            self.checkpoint_every_events,
            self.checkpoint_every_secs,
            self.checkpoint_keep,
        )?;
        if checkpoints.is_none() && log.options.file.retention.compact {
            bail!(
                "--log {}: compact=true compacts below the oldest checkpoint, but checkpoints \
                 are off (--checkpoint-every-events 0); turn them on or drop compact=true",
                log.text
            );
        }
        if checkpoints.is_none() && log.options.file.retention.delete {
            bail!(
                "--log {}: delete=true deletes segments below the oldest checkpoint, and the \
                 state they held lives on only in the checkpoints, but checkpoints are off \
                 (--checkpoint-every-events 0); turn them on or drop delete=true",
                log.text
            );
        }
        let admin_guard = super::security::admin_guard(
            admin_addr,
            self.debug_endpoints,
            self.admin_token_file,
            self.admin_insecure.unwrap_or(false),
            self.admin_max_body_bytes,
            self.admin_request_timeout_secs,
        )?;
        let debug_endpoints = admin_guard.debug_endpoints;
        Ok(Settings {
            xds_addr,
            admin_addr,
            data_dir,
            log,
            watch: self.watch,
            kubeconfig: self.kubeconfig,
            credentials_dir: self.credentials_dir,
            eureka,
            gen_opts,
            limits,
            xds_conn,
            admin_conn,
            drain_grace,
            checkpoints,
            debug_endpoints,
            admin_guard,
            xds_tls,
        })
    }

    /// The per-stream limits, each at least 1.
    fn limits(&self) -> anyhow::Result<Limits> {
        let d = Limits::default();
        let limits = Limits {
            max_names_per_stream: self.max_names_per_stream.unwrap_or(d.max_names_per_stream),
            max_request_bytes: self.max_request_bytes.unwrap_or(d.max_request_bytes),
            max_resources_per_response: self
                .max_resources_per_response
                .unwrap_or(d.max_resources_per_response),
            max_streams: self.max_streams.unwrap_or(d.max_streams),
            route_delivery: match self.route_delivery {
                None => d.route_delivery,
                Some(RouteDeliveryArg::Inline) => RouteDelivery::Inline,
                Some(RouteDeliveryArg::Vhds) => RouteDelivery::Vhds,
            },
            stall_timeout: self
                .stall_timeout_secs
                .map(Duration::from_secs)
                .unwrap_or(d.stall_timeout),
        };
        for (name, v) in [
            ("max-names-per-stream", limits.max_names_per_stream),
            ("max-request-bytes", limits.max_request_bytes),
            (
                "max-resources-per-response",
                limits.max_resources_per_response,
            ),
            ("max-streams", limits.max_streams),
            (
                "stall-timeout-secs",
                limits.stall_timeout.as_secs() as usize,
            ),
        ] {
            if v == 0 {
                bail!("--{name} must be at least 1");
            }
        }
        if limits.max_request_bytes < 1024 {
            bail!(
                "--max-request-bytes must be at least 1024 (Envoy's first request alone is larger)"
            );
        }
        Ok(limits)
    }
}

impl RunConfig {
    /// The connection options of both listeners; caps and timeouts at least 1
    /// (a per-source cap of 0 means none).
    fn conn_options(&self) -> anyhow::Result<(XdsConnOptions, ConnLimits)> {
        let d = XdsConnOptions::default();
        let secs = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_secs);
        let xds = XdsConnOptions {
            limits: ConnLimits {
                max_connections: self.xds_max_connections.unwrap_or(d.limits.max_connections),
                max_per_source: self
                    .xds_max_connections_per_source
                    .unwrap_or(d.limits.max_per_source),
                request_timeout: secs(self.xds_handshake_timeout_secs, d.limits.request_timeout),
            },
            keepalive_interval: secs(self.xds_keepalive_interval_secs, d.keepalive_interval),
            keepalive_timeout: secs(self.xds_keepalive_timeout_secs, d.keepalive_timeout),
            max_connection_age: self.xds_max_connection_age_secs.map(Duration::from_secs),
            max_connection_age_grace: secs(
                self.xds_max_connection_age_grace_secs,
                d.max_connection_age_grace,
            ),
        };
        let a = ConnLimits::ADMIN;
        let admin = ConnLimits {
            max_connections: self.admin_max_connections.unwrap_or(a.max_connections),
            max_per_source: self
                .admin_max_connections_per_source
                .unwrap_or(a.max_per_source),
            request_timeout: secs(self.admin_idle_timeout_secs, a.request_timeout),
        };
        for (name, v) in [
            ("xds-max-connections", xds.limits.max_connections as u64),
            (
                "xds-handshake-timeout-secs",
                xds.limits.request_timeout.as_secs(),
            ),
            (
                "xds-keepalive-interval-secs",
                xds.keepalive_interval.as_secs(),
            ),
            (
                "xds-keepalive-timeout-secs",
                xds.keepalive_timeout.as_secs(),
            ),
            // Unset means off: nothing to check then.
            (
                "xds-max-connection-age-secs",
                xds.max_connection_age.map_or(1, |d| d.as_secs()),
            ),
            ("admin-max-connections", admin.max_connections as u64),
            ("admin-idle-timeout-secs", admin.request_timeout.as_secs()),
        ] {
            if v == 0 {
                bail!("--{name} must be at least 1");
            }
        }
        Ok((xds, admin))
    }
}

impl Settings {
    /// The warning to log at start when `/debug/*` is served on a non-loopback
    /// admin address: anyone who reaches it reads the whole mesh's
    /// configuration, and nothing authenticates them.
    pub(super) fn debug_exposure_warning(&self) -> Option<String> {
        if !self.debug_endpoints
            || self.admin_addr.ip().is_loopback()
            || self.admin_guard.token.is_some()
        {
            return None;
        }
        Some(format!(
            "the admin server listens on {} (not loopback) with --debug-endpoints on and \
             --admin-insecure: anyone who can reach it can read {} without authentication; \
             give --admin-token-file, keep the address on a trusted network, or set \
             --debug-endpoints off",
            self.admin_addr,
            deltapilot_server::admin::debug::EXPOSES
        ))
    }
}

/// The log to serve: `--log` (or the config file's `log`), else the embedded log
/// in `DATA_DIR/log`. A bad URI is refused with the reason, before anything starts.
/// A `--default-*-export-to` list, trimmed: each entry `*`, `.`, `~` or a
/// namespace name (a DNS label), as Istio's MeshConfig takes them.
fn export_list(flag: &str, given: Vec<String>) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::with_capacity(given.len());
    for e in given {
        let e = e.trim().to_string();
        let label = !e.is_empty()
            && e.len() <= 63
            && e.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !e.starts_with('-')
            && !e.ends_with('-');
        if !(label || ["*", ".", "~"].contains(&e.as_str())) {
            bail!(
                "--{flag} {e:?}: not `*`, `.`, `~` or a namespace name (lower-case letters, \
                 digits and `-`, at most 63)"
            );
        }
        out.push(e);
    }
    Ok(out)
}

fn log_setting(given: Option<String>, data_dir: &Path) -> anyhow::Result<LogSetting> {
    match given {
        Some(text) => {
            // Redacted: `text` may hold a secret the parser refuses.
            let (uri, options) = parse_uri(&text)
                .with_context(|| format!("--log {}", deltapilot_log::redact_uri(&text)))?;
            Ok(LogSetting { text, uri, options })
        }
        None => {
            let dir = data_dir.join("log");
            Ok(LogSetting {
                text: format!("file://{}", dir.display()),
                uri: LogUri::File { dir },
                options: LogOptions::default(),
            })
        }
    }
}

/// When to write checkpoints and how many to keep; `None` when
/// `--checkpoint-every-events 0` turns them off (a restart then re-folds the whole
/// log).
fn checkpoint_policy(
    every_events: Option<u64>,
    every_secs: Option<u64>,
    keep: Option<usize>,
) -> anyhow::Result<Option<CheckpointPolicy>> {
    let d = CheckpointPolicy::default();
    let every_events = every_events.unwrap_or(d.every_events);
    let every_secs = every_secs.unwrap_or(d.every.as_secs());
    let keep = keep.unwrap_or(d.keep);
    if every_events > 0 && (every_secs == 0 || keep == 0) {
        bail!(
            "--checkpoint-every-secs and --checkpoint-keep must be at least 1 (turn checkpoints off with --checkpoint-every-events 0)"
        );
    }
    Ok((every_events > 0).then_some(CheckpointPolicy {
        every_events,
        every: Duration::from_secs(every_secs),
        keep,
    }))
}

/// The Eureka adapter's options for `--eureka-url`, validated before anything runs.
fn eureka_options(
    url: Option<String>,
    refresh_secs: Option<f64>,
    data_dir: &Path,
) -> anyhow::Result<Option<EurekaOptions>> {
    let Some(url) = url else {
        if refresh_secs.is_some() {
            bail!("--eureka-refresh-secs needs --eureka-url");
        }
        return Ok(None);
    };
    let mut opts = EurekaOptions::new(url);
    if let Some(secs) = refresh_secs {
        if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
            bail!("--eureka-refresh-secs {secs}: must be above 0 and at most 86400");
        }
        opts.refresh_interval = Duration::from_secs_f64(secs);
    }
    // A fixed source id (see `wiring::file_adapter`), and the generation kept next
    // to the log.
    opts.source_id = EurekaOptions::DEFAULT_SOURCE.into();
    opts.state_dir = Some(data_dir.join("eureka-adapter"));
    opts.validate().context("--eureka-url")?;
    Ok(Some(opts))
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
