//! The typed Gateway (`networking.istio.io` v1, v1beta1 and v1alpha3 share this
//! schema), its servers checked into [`GatewayServer`]s, and which Gateways
//! select a proxy.
//!
//! ## Servers, as deltapilot reads them
//! - `port.number` (required), `port.name`, `port.protocol` (`HTTP`, `HTTP2`,
//!   `GRPC`, `HTTPS`, `TLS`, `TCP`; others are reported `DP1206`);
//! - `hosts` (required): `ns/host`, where `ns` is a namespace, `.` (the
//!   Gateway's own) or `*` (any); no `ns/` means any. `host` is an FQDN, a
//!   wildcard (`*.example.com`) or `*`;
//! - `tls.mode`: `SIMPLE` and `MUTUAL` terminate with `credentialName` (served
//!   over SDS as secrets `kubernetes://<credentialName>` and, for MUTUAL, the
//!   CA as `kubernetes://<credentialName>-cacert`, as Istio names them; a
//!   `credentialName` written `kubernetes://NAME` is `NAME`); `PASSTHROUGH`
//!   forwards by SNI;
//!   `ISTIO_MUTUAL`, `OPTIONAL_MUTUAL` and `AUTO_PASSTHROUGH` are reported
//!   (`DP1204`) and the server is dropped;
//! - `tls.httpsRedirect` on a plain HTTP server: every request answers 301 to
//!   `https`.
//!
//! A server that cannot be honoured is dropped and reported; the others stay.
//!
//! ## Selection
//! A Gateway selects a router proxy when every `selector` label is among the
//! proxy's labels (an empty selector selects every router), in any namespace:
//! Istio's `PILOT_SCOPE_GATEWAY_TO_NAMESPACE` defaults to `false`. With scoping
//! on, only Gateways of the proxy's own namespace select it.
//!
//! What it does NOT do: translate servers to listeners (the xDS crate), or read
//! credentials (the server).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::host::host_error;
use super::problem::Problem;
use crate::model::{Hostname, Labels};

/// A Gateway spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gateway {
    /// The servers (ports) the selected proxies expose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub servers: Option<Vec<Server>>,
    /// Labels a router proxy must carry to be selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<BTreeMap<String, String>>,
}

/// One server of a Gateway.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Server {
    /// The port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<ServerPort>,
    /// Address to bind: reported as not supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind: Option<String>,
    /// `ns/host` patterns this server exposes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// TLS settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServerTls>,
    /// Default endpoint: reported as not supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_endpoint: Option<String>,
    /// Server name (for stats).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A server's port.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerPort {
    /// Port number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<u32>,
    /// Protocol (`HTTP`, `HTTPS`, `GRPC`, `HTTP2`, `TLS`, `TCP`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Port name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Deprecated target port: reported as not supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_port: Option<u32>,
}

/// A server's TLS settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerTls {
    /// Answer plain HTTP with a redirect to HTTPS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub https_redirect: Option<bool>,
    /// `SIMPLE`, `MUTUAL`, `PASSTHROUGH`, `ISTIO_MUTUAL`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Name of the credential (a directory of `--credentials-dir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_name: Option<String>,
    /// Several credentials: reported as not supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_names: Option<Vec<String>>,
    /// Certificate file path: reported as not supported (use `credentialName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_certificate: Option<String>,
    /// Key file path: reported as not supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<String>,
    /// CA file path: reported as not supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_certificates: Option<String>,
    /// Accepted client SANs (MUTUAL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_alt_names: Option<Vec<String>>,
    /// Minimum TLS version: reported as not supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_protocol_version: Option<String>,
    /// Maximum TLS version: reported as not supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_protocol_version: Option<String>,
    /// Cipher suites: reported as not supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cipher_suites: Option<Vec<String>>,
}

/// What a checked server does with a connection.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ServerMode {
    /// Plain HTTP (HTTP/1.1, HTTP/2, gRPC), routed by VirtualService `http`
    /// routes; with `https_redirect`, every request answers 301 to `https`.
    Http {
        /// `tls.httpsRedirect`.
        https_redirect: bool,
    },
    /// TLS terminated with a credential, then routed as HTTP.
    Https {
        /// Secret name of the certificate and key.
        credential: Arc<str>,
        /// MUTUAL: clients must present a certificate signed by the CA secret
        /// `kubernetes://<credential>-cacert`.
        mutual: bool,
        /// Accepted client SANs (MUTUAL).
        subject_alt_names: Vec<String>,
    },
    /// TLS forwarded untouched, by SNI, through VirtualService `tls` routes.
    Passthrough,
    /// Plain TCP, forwarded through VirtualService `tcp` routes.
    Tcp,
}

/// One host pattern of a server.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerHost {
    /// Namespace whose VirtualServices may bind it; `None` means any.
    pub namespace: Option<Arc<str>>,
    /// The host pattern (lower case; may be a wildcard or `*`).
    pub host: Hostname,
}

/// A server, checked: what deltapilot honours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayServer {
    /// Index in `servers` (for problem paths).
    pub index: usize,
    /// Port number.
    pub port: u16,
    /// Port name (empty if none).
    pub port_name: Arc<str>,
    /// Host patterns.
    pub hosts: Vec<ServerHost>,
    /// What it does with a connection.
    pub mode: ServerMode,
}

/// A Gateway object's spec with its checked servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundGateway {
    /// The spec as written.
    pub spec: Gateway,
    /// The servers deltapilot honours, in spec order.
    pub servers: Vec<GatewayServer>,
}

impl BoundGateway {
    /// Whether this Gateway (of `namespace`) selects a router proxy of
    /// `proxy_namespace` with `labels` (see the module doc).
    pub fn selects(
        &self,
        namespace: &str,
        proxy_namespace: &str,
        labels: &Labels,
        scope_to_namespace: bool,
    ) -> bool {
        if scope_to_namespace && namespace != proxy_namespace {
            return false;
        }
        self.spec
            .selector
            .iter()
            .flatten()
            .all(|(k, v)| labels.get(k.as_str()).is_some_and(|l| **l == **v))
    }
}

/// The id of a Gateway: `<namespace>/<name>`, as VirtualServices name it.
pub fn gateway_id(namespace: &str, name: &str) -> Arc<str> {
    Arc::from(format!("{namespace}/{name}"))
}

/// The Gateway a VirtualService's `gateways` entry names: `ns/name`, or a bare
/// `name` in the rule's own namespace. `None` for `mesh`; `Err` for malformed.
pub fn resolve_gateway_ref(entry: &str, namespace: &str) -> Result<Option<Arc<str>>, String> {
    let e = entry.trim();
    if e == "mesh" {
        return Ok(None);
    }
    let (ns, name) = match e.split_once('/') {
        Some((ns, name)) => (ns, name),
        None => (namespace, e),
    };
    if ns.is_empty() || name.is_empty() || name.contains('/') {
        return Err(format!(
            "gateway {entry:?} is neither `<name>` nor `<namespace>/<name>`"
        ));
    }
    Ok(Some(gateway_id(ns, name)))
}

/// Checks the servers of `gw` (a Gateway of `namespace`), reporting what cannot
/// be honoured.
pub(crate) fn check_servers(
    gw: &Gateway,
    namespace: &str,
    problems: &mut Vec<Problem>,
) -> Vec<GatewayServer> {
    let servers = gw.servers.as_deref().unwrap_or_default();
    if servers.is_empty() {
        problems.push(Problem::warning(
            "DP1208",
            "servers",
            "a Gateway without servers gives its proxies nothing",
        ));
    }
    servers
        .iter()
        .enumerate()
        .filter_map(|(i, s)| check_server(i, s, namespace, problems))
        .collect()
}

fn check_server(
    i: usize,
    s: &Server,
    namespace: &str,
    problems: &mut Vec<Problem>,
) -> Option<GatewayServer> {
    let at = |f: &str| format!("servers[{i}].{f}");
    let port = s.port.as_ref();
    let number = port.and_then(|p| p.number);
    let Some(number) = number
        .and_then(|n| u16::try_from(n).ok())
        .filter(|n| *n > 0)
    else {
        problems.push(Problem::error(
            "DP1200",
            at("port.number"),
            format!("port number {number:?} is missing or not in 1..=65535: server dropped"),
        ));
        return None;
    };
    let mut hosts = Vec::new();
    for (j, h) in s.hosts.iter().flatten().enumerate() {
        match server_host(h, namespace) {
            Ok(sh) => hosts.push(sh),
            Err(why) => problems.push(Problem::error(
                "DP1202",
                at(&format!("hosts[{j}]")),
                format!("host {h:?} {why}: host dropped"),
            )),
        }
    }
    if hosts.is_empty() {
        problems.push(Problem::error(
            "DP1201",
            at("hosts"),
            "a server needs at least one valid host: server dropped",
        ));
        return None;
    }
    let protocol = port
        .and_then(|p| p.protocol.as_deref())
        .unwrap_or("HTTP")
        .to_ascii_uppercase();
    let tls = s.tls.as_ref();
    let mode_name = tls
        .and_then(|t| t.mode.as_deref())
        .map(str::to_ascii_uppercase);
    let mode = match (protocol.as_str(), mode_name.as_deref()) {
        ("HTTP" | "HTTP2" | "GRPC", None | Some("")) => ServerMode::Http {
            https_redirect: tls.and_then(|t| t.https_redirect).unwrap_or(false),
        },
        ("HTTPS" | "TLS", Some("PASSTHROUGH")) => ServerMode::Passthrough,
        ("TCP", None | Some("")) => ServerMode::Tcp,
        ("HTTPS", Some(m @ ("SIMPLE" | "MUTUAL"))) => {
            let t = tls?;
            // Istio keeps an explicit `kubernetes://` type: the same secret.
            let named = (t.credential_name.as_deref())
                .map(|c| c.strip_prefix("kubernetes://").unwrap_or(c));
            let Some(cred) = named.filter(|c| valid_credential(c)) else {
                problems.push(Problem::error(
                    "DP1205",
                    at("tls.credentialName"),
                    format!(
                        "{m} needs a credentialName (one path segment of letters, digits, \
                         `-`, `_`, `.`); certificate file paths are not supported: server dropped"
                    ),
                ));
                return None;
            };
            ServerMode::Https {
                credential: Arc::from(cred),
                mutual: m == "MUTUAL",
                subject_alt_names: t.subject_alt_names.clone().unwrap_or_default(),
            }
        }
        ("HTTPS", None | Some("")) => {
            problems.push(Problem::error(
                "DP1203",
                at("tls.mode"),
                "an HTTPS server needs tls.mode (SIMPLE, MUTUAL or PASSTHROUGH): server dropped",
            ));
            return None;
        }
        (_, Some(m @ ("ISTIO_MUTUAL" | "OPTIONAL_MUTUAL" | "AUTO_PASSTHROUGH"))) => {
            problems.push(Problem::error(
                "DP1204",
                at("tls.mode"),
                format!(
                    "tls.mode {m} is not supported (it needs Istio's CA or multi-cluster \
                     SNI routing): server dropped"
                ),
            ));
            return None;
        }
        (p, m) => {
            problems.push(Problem::error(
                "DP1206",
                at("port.protocol"),
                format!(
                    "protocol {p} with tls.mode {} is not supported (HTTP, HTTP2, GRPC; \
                     HTTPS with SIMPLE, MUTUAL or PASSTHROUGH; TLS with PASSTHROUGH; TCP): \
                     server dropped",
                    m.unwrap_or("unset")
                ),
            ));
            return None;
        }
    };
    if !matches!(mode, ServerMode::Http { .. }) && tls.and_then(|t| t.https_redirect) == Some(true)
    {
        problems.push(Problem::warning(
            "DP1209",
            at("tls.httpsRedirect"),
            "httpsRedirect applies to plain HTTP servers only: ignored",
        ));
    }
    Some(GatewayServer {
        index: i,
        port: number,
        port_name: Arc::from(port.and_then(|p| p.name.as_deref()).unwrap_or("")),
        hosts,
        mode,
    })
}

/// Whether a credentialName can name a directory under `--credentials-dir`
/// (no path traversal, no separators).
pub fn valid_credential(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name != "."
        && name != ".."
        && !name.starts_with("..")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn server_host(h: &str, namespace: &str) -> Result<ServerHost, String> {
    let h = h.trim();
    let (ns, host) = match h.split_once('/') {
        Some((ns, host)) => (Some(ns), host),
        None => (None, h),
    };
    let namespace = match ns {
        None | Some("*") => None,
        Some(".") => Some(Arc::from(namespace)),
        Some("") => return Err("has an empty namespace before `/`".to_string()),
        Some("~") => return Err("`~/` exposes no namespace".to_string()),
        Some(n) => Some(Arc::from(n)),
    };
    if let Some(why) = host_error(host) {
        return Err(why.to_string());
    }
    Ok(ServerHost {
        namespace,
        host: Hostname::new(&host.to_ascii_lowercase()),
    })
}
