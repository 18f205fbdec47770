//! `deltapilot bootstrap`: prints a ready bootstrap for a proxy of this
//! deployment, so operators never hand-write one: an Envoy bootstrap (YAML, or
//! JSON with `-o json`) for a sidecar or a router over delta or SotW ADS, or the
//! gRPC xDS bootstrap JSON that proxyless gRPC clients read from
//! `GRPC_XDS_BOOTSTRAP`.
//!
//! The node id is Istio's (`TYPE~IP~POD.NS~NS.svc.cluster.local`) and the node
//! metadata carries `NAMESPACE`, `INSTANCE_IPS`, `LABELS` (and `GENERATOR: grpc`
//! for proxyless clients), which is what deltapilot reads to tell proxies apart
//! (see `deltapilot_xds::node`).
//!
//! `--node-id` replaces Istio's id with a plain one (the examples' fixed
//! `demo-envoy-*` ids), leaving out the metadata not asked for.
//!
//! With `--xds-tls-ca` (and a client certificate, `--xds-tls-cert` and
//! `--xds-tls-key`, for a server with `--xds-tls-client-ca`) the proxy reaches
//! the control plane over TLS: Envoy's xds cluster gets a TLS transport socket
//! (ALPN `h2`, the server's certificate checked against the xDS host), and the
//! proxyless bootstrap `tls` channel credentials.
//!
//! What it does NOT do: read or check the certificate files (they are paths on
//! the proxy's machine, which may not be this one).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

/// The cluster name the Envoy bootstrap gives the control plane.
const XDS_CLUSTER: &str = "deltapilot-xds";

/// Which proxy the bootstrap is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ProxyKind {
    /// An Envoy next to a workload (node id `sidecar~…`).
    Sidecar,
    /// An Envoy gateway (node id `router~…`).
    Router,
    /// A gRPC client with built-in xDS (the GRPC_XDS_BOOTSTRAP JSON).
    ProxylessGrpc,
}

/// Delta or state-of-the-world ADS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Mode {
    /// Incremental xDS (`DELTA_GRPC`).
    Delta,
    /// State of the world (`GRPC`); the only one proxyless gRPC clients speak.
    Sotw,
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// YAML (Envoy only).
    Yaml,
    /// JSON.
    Json,
}

/// Prints a ready bootstrap for one proxy.
///
/// Plaintext unless `--xds-tls-ca` is given. For `--bind-outbound` deployments nothing
/// changes in the bootstrap (the server decides how listeners bind); pick the
/// sidecar's IP with `--ip`.
#[derive(Debug, clap::Args)]
pub(crate) struct BootstrapArgs {
    /// The kind of proxy.
    #[arg(
        long = "type",
        value_enum,
        default_value = "sidecar",
        env = "DELTAPILOT_BOOTSTRAP_TYPE"
    )]
    kind: ProxyKind,
    /// Delta or state-of-the-world ADS [default: delta; sotw for proxyless-grpc].
    #[arg(long, value_enum, env = "DELTAPILOT_BOOTSTRAP_MODE")]
    mode: Option<Mode>,
    /// Where the proxy reaches deltapilot's xDS server, HOST:PORT [default: the
    /// `xds-addr` of --config, else DELTAPILOT_XDS_ADDR, else 127.0.0.1:18000; an
    /// unspecified listen address (0.0.0.0, ::) becomes loopback].
    #[arg(
        long,
        value_name = "HOST:PORT",
        env = "DELTAPILOT_BOOTSTRAP_XDS_ADDRESS"
    )]
    xds_address: Option<String>,
    /// A `deltapilot run` config file to take the xDS address from.
    #[arg(long, value_name = "FILE", env = "DELTAPILOT_CONFIG")]
    config: Option<PathBuf>,
    /// The proxy's IP (node id and INSTANCE_IPS) [default: 127.0.0.1].
    #[arg(long, env = "DELTAPILOT_BOOTSTRAP_IP")]
    ip: Option<IpAddr>,
    /// The pod (or VM) name in the node id [default: demo].
    #[arg(long, env = "DELTAPILOT_BOOTSTRAP_POD", conflicts_with = "node_id")]
    pod: Option<String>,
    /// The namespace (node id and NAMESPACE) [default: default].
    #[arg(long, env = "DELTAPILOT_BOOTSTRAP_NAMESPACE")]
    namespace: Option<String>,
    /// The node id as given, instead of Istio's form: for a proxy outside any
    /// workload (a demo, a test). The node then carries only the metadata that
    /// --namespace, --ip and --labels give explicitly, so without them the proxy
    /// is in no namespace and gets its type's default view. A router's id must
    /// still start with `router~` (that is how deltapilot tells routers apart).
    #[arg(long, value_name = "ID", env = "DELTAPILOT_BOOTSTRAP_NODE_ID")]
    node_id: Option<String>,
    /// Workload labels, `k=v,k=v` (node metadata LABELS).
    #[arg(long, value_name = "K=V,...", env = "DELTAPILOT_BOOTSTRAP_LABELS")]
    labels: Option<String>,
    /// The node's `cluster` (Envoy's --service-cluster) [default: the namespace,
    /// else `default`].
    #[arg(long, env = "DELTAPILOT_BOOTSTRAP_CLUSTER")]
    cluster: Option<String>,
    /// Envoy's admin port, on 127.0.0.1 (0: none).
    #[arg(long, default_value_t = 9901, env = "DELTAPILOT_BOOTSTRAP_ADMIN_PORT")]
    admin_port: u16,
    /// YAML or JSON [default: yaml; json for proxyless-grpc, which reads only JSON].
    #[arg(short = 'o', long = "output", value_enum)]
    output: Option<Format>,
    /// Reach the xDS server over TLS, verifying its certificate with the CA
    /// certificates in this PEM file (a path on the proxy's machine) [default:
    /// plaintext].
    #[arg(long, value_name = "FILE", env = "DELTAPILOT_BOOTSTRAP_XDS_TLS_CA")]
    xds_tls_ca: Option<PathBuf>,
    /// The proxy's client certificate (PEM) for a server with
    /// --xds-tls-client-ca; needs --xds-tls-key and --xds-tls-ca.
    #[arg(long, value_name = "FILE", env = "DELTAPILOT_BOOTSTRAP_XDS_TLS_CERT")]
    xds_tls_cert: Option<PathBuf>,
    /// The private key of --xds-tls-cert (PEM).
    #[arg(long, value_name = "FILE", env = "DELTAPILOT_BOOTSTRAP_XDS_TLS_KEY")]
    xds_tls_key: Option<PathBuf>,
}

/// The TLS of the proxy's connection to the control plane.
struct ClientTls {
    ca: String,
    /// Certificate and key, for mutual TLS.
    pair: Option<(String, String)>,
}

fn client_tls(args: &BootstrapArgs) -> anyhow::Result<Option<ClientTls>> {
    let text = |p: &PathBuf| p.display().to_string();
    let pair = match (&args.xds_tls_cert, &args.xds_tls_key) {
        (Some(c), Some(k)) => Some((text(c), text(k))),
        (None, None) => None,
        (Some(_), None) => {
            bail!("--xds-tls-cert needs --xds-tls-key (the certificate's private key)")
        }
        (None, Some(_)) => {
            bail!("--xds-tls-key needs --xds-tls-cert (the certificate it belongs to)")
        }
    };
    match &args.xds_tls_ca {
        Some(ca) => Ok(Some(ClientTls { ca: text(ca), pair })),
        None if pair.is_some() => bail!(
            "--xds-tls-cert needs --xds-tls-ca: the proxy must verify the server's certificate too"
        ),
        None => Ok(None),
    }
}

/// `deltapilot bootstrap`.
pub(crate) fn main(args: BootstrapArgs) -> anyhow::Result<()> {
    let text = render(&args)?;
    // YAML ends with a newline already; JSON does not. Either way the output
    // ends with exactly one, so a file written from it (examples/) is the output.
    if text.ends_with('\n') {
        print!("{text}");
    } else {
        println!("{text}");
    }
    Ok(())
}

/// The bootstrap as text.
pub(crate) fn render(args: &BootstrapArgs) -> anyhow::Result<String> {
    let proxyless = args.kind == ProxyKind::ProxylessGrpc;
    let mode = args
        .mode
        .unwrap_or(if proxyless { Mode::Sotw } else { Mode::Delta });
    if proxyless && mode == Mode::Delta {
        bail!(
            "--type proxyless-grpc --mode delta: gRPC clients speak only state-of-the-world xDS; use --mode sotw"
        );
    }
    let format = args.output.unwrap_or(if proxyless {
        Format::Json
    } else {
        Format::Yaml
    });
    if proxyless && format == Format::Yaml {
        bail!(
            "--type proxyless-grpc -o yaml: gRPC clients read only a JSON bootstrap; use -o json"
        );
    }
    let (host, port) = xds_address(args)?;
    let labels = parse_labels(args.labels.as_deref())?;
    for (flag, v) in [("--pod", &args.pod), ("--namespace", &args.namespace)] {
        if let Some(v) = v
            && (v.is_empty() || v.contains(['~', '.']))
        {
            bail!("{flag} {v:?}: must be non-empty with no '~' or '.' (it is part of the node id)");
        }
    }
    let node = node(args, &labels)?;
    let tls = client_tls(args)?;
    let value = if proxyless {
        let creds = match &tls {
            None => json!({"type": "insecure"}),
            Some(t) => {
                let mut config = json!({"ca_certificate_file": t.ca});
                if let Some((cert, key)) = &t.pair {
                    config["certificate_file"] = json!(cert);
                    config["private_key_file"] = json!(key);
                }
                json!({"type": "tls", "config": config})
            }
        };
        json!({
            "xds_servers": [{
                "server_uri": format!("{host}:{port}"),
                "channel_creds": [creds],
                "server_features": ["xds_v3"],
            }],
            "node": node,
        })
    } else {
        let mut b = envoy(args, mode, node, &host, port);
        if let Some(t) = &tls {
            b["static_resources"]["clusters"][0]["transport_socket"] = transport_socket(t, &host);
        }
        b
    };
    Ok(match format {
        Format::Json => serde_json::to_string_pretty(&value)?,
        Format::Yaml => serde_yaml::to_string(&value)?,
    })
}

fn node(args: &BootstrapArgs, labels: &serde_json::Map<String, Value>) -> anyhow::Result<Value> {
    let prefix = match args.kind {
        ProxyKind::Router => "router",
        ProxyKind::Sidecar | ProxyKind::ProxylessGrpc => "sidecar",
    };
    let ns = args.namespace.as_deref().unwrap_or("default");
    let ip = args.ip.unwrap_or(IpAddr::from([127, 0, 0, 1]));
    let mut meta = serde_json::Map::new();
    let id = match &args.node_id {
        None => {
            let pod = args.pod.as_deref().unwrap_or("demo");
            meta.insert("NAMESPACE".into(), json!(ns));
            meta.insert("INSTANCE_IPS".into(), json!(ip.to_string()));
            meta.insert("LABELS".into(), Value::Object(labels.clone()));
            format!("{prefix}~{ip}~{pod}.{ns}~{ns}.svc.cluster.local")
        }
        Some(id) => {
            if id.is_empty() || id.chars().any(char::is_whitespace) {
                bail!("--node-id {id:?}: must be non-empty with no whitespace");
            }
            if args.kind == ProxyKind::Router && !id.starts_with("router~") {
                bail!(
                    "--type router --node-id {id:?}: deltapilot knows a router by its node id's \
                     `router~` prefix, so this proxy would be served as a sidecar; give an id in \
                     Istio's form (router~IP~POD.NS~NS.svc.cluster.local) or leave out --node-id"
                );
            }
            if let Some(ns) = &args.namespace {
                meta.insert("NAMESPACE".into(), json!(ns));
            }
            if let Some(ip) = args.ip {
                meta.insert("INSTANCE_IPS".into(), json!(ip.to_string()));
            }
            if !labels.is_empty() {
                meta.insert("LABELS".into(), Value::Object(labels.clone()));
            }
            id.clone()
        }
    };
    let mut node = json!({
        "id": id,
        "cluster": args.cluster.as_deref().unwrap_or(ns),
    });
    if args.kind == ProxyKind::ProxylessGrpc {
        meta.insert("GENERATOR".into(), json!("grpc"));
        // grpc-js-xds refuses a bootstrap without a locality.
        node["locality"] = json!({"zone": ""});
    }
    if !meta.is_empty() {
        node["metadata"] = Value::Object(meta);
    }
    Ok(node)
}

fn envoy(args: &BootstrapArgs, mode: Mode, node: Value, host: &str, port: u16) -> Value {
    let api_type = match mode {
        Mode::Delta => "DELTA_GRPC",
        Mode::Sotw => "GRPC",
    };
    // A literal IP needs no resolver; a host name is resolved (and re-resolved).
    let discovery = if host.parse::<IpAddr>().is_ok() {
        "STATIC"
    } else {
        "STRICT_DNS"
    };
    let mut bootstrap = json!({
        "node": node,
        "dynamic_resources": {
            "ads_config": {
                "api_type": api_type,
                "transport_api_version": "V3",
                "grpc_services": [{"envoy_grpc": {"cluster_name": XDS_CLUSTER}}],
            },
            "cds_config": {"ads": {}, "resource_api_version": "V3"},
            "lds_config": {"ads": {}, "resource_api_version": "V3"},
        },
        "static_resources": {
            "clusters": [{
                "name": XDS_CLUSTER,
                "type": discovery,
                "connect_timeout": "1s",
                "typed_extension_protocol_options": {
                    "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                        "explicit_http_config": {"http2_protocol_options": {}},
                    },
                },
                "load_assignment": {
                    "cluster_name": XDS_CLUSTER,
                    "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {
                        "socket_address": {"address": host, "port_value": port},
                    }}}]}],
                },
            }],
        },
    });
    if args.admin_port != 0 {
        bootstrap["admin"] = json!({"address": {"socket_address": {
            "address": "127.0.0.1", "port_value": args.admin_port,
        }}});
    }
    bootstrap
}

/// Envoy's TLS transport socket to the control plane: ALPN `h2`, the server's
/// certificate verified by the CA and matched against `host` (a DNS or IP SAN),
/// the client certificate if any.
fn transport_socket(t: &ClientTls, host: &str) -> Value {
    let is_ip = host.parse::<IpAddr>().is_ok();
    let san_type = if is_ip { "IP_ADDRESS" } else { "DNS" };
    let mut common = json!({
        "alpn_protocols": ["h2"],
        "validation_context": {
            "trusted_ca": {"filename": t.ca},
            "match_typed_subject_alt_names": [{"san_type": san_type, "matcher": {"exact": host}}],
        },
    });
    if let Some((cert, key)) = &t.pair {
        common["tls_certificates"] = json!([{
            "certificate_chain": {"filename": cert},
            "private_key": {"filename": key},
        }]);
    }
    let mut ctx = json!({
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
        "common_tls_context": common,
    });
    if !is_ip {
        // SNI is a host name; an IP literal is not sent as one.
        ctx["sni"] = json!(host);
    }
    json!({"name": "envoy.transport_sockets.tls", "typed_config": ctx})
}

/// HOST and PORT to reach the xDS server at.
fn xds_address(args: &BootstrapArgs) -> anyhow::Result<(String, u16)> {
    let text = match (&args.xds_address, &args.config) {
        (Some(a), _) => a.clone(),
        (None, Some(file)) => from_config(file)?
            .or_else(|| std::env::var("DELTAPILOT_XDS_ADDR").ok())
            .unwrap_or_else(|| "127.0.0.1:18000".into()),
        (None, None) => {
            std::env::var("DELTAPILOT_XDS_ADDR").unwrap_or_else(|_| "127.0.0.1:18000".into())
        }
    };
    if let Ok(sa) = text.parse::<SocketAddr>() {
        let ip = match sa.ip() {
            IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::from([127, 0, 0, 1]),
            IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        return Ok((ip.to_string(), sa.port()));
    }
    let (host, port) = text
        .rsplit_once(':')
        .with_context(|| format!("xDS address {text:?}: expected HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .with_context(|| format!("xDS address {text:?}: port {port:?} is not a number 0-65535"))?;
    if host.is_empty() {
        bail!("xDS address {text:?}: the host is empty");
    }
    Ok((host.to_owned(), port))
}

/// The `xds-addr` key of a `deltapilot run` config file, if it has one.
fn from_config(file: &std::path::Path) -> anyhow::Result<Option<String>> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("--config {}: cannot read", file.display()))?;
    let v: serde_yaml::Value = serde_yaml::from_str(&text)
        .with_context(|| format!("--config {}: not YAML or JSON", file.display()))?;
    match v.get("xds-addr") {
        None => Ok(None),
        Some(serde_yaml::Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => bail!(
            "--config {}: xds-addr is {other:?}, expected a HOST:PORT string",
            file.display()
        ),
    }
}

fn parse_labels(text: Option<&str>) -> anyhow::Result<serde_json::Map<String, Value>> {
    let mut out = serde_json::Map::new();
    for pair in text
        .unwrap_or("")
        .split(',')
        .filter(|p| !p.trim().is_empty())
    {
        let (k, v) = pair
            .split_once('=')
            .with_context(|| format!("--labels: {pair:?} is not KEY=VALUE"))?;
        let k = k.trim();
        if k.is_empty() {
            bail!("--labels: {pair:?} has an empty key");
        }
        out.insert(k.to_owned(), Value::String(v.trim().to_owned()));
    }
    Ok(out)
}
