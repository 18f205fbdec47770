//! The security settings: the xDS listener's TLS (`--xds-tls-*`) and the admin
//! server's token and limits (`--admin-token-file`, `--admin-insecure`,
//! `--admin-max-body-bytes`, `--admin-request-timeout-secs`), checked together
//! and loaded, so that a missing key, a bad certificate or an unguarded
//! non-loopback `/debug/*` fails the start.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use deltapilot_server::admin::guard::{AdminToken, RequestLimits};
use deltapilot_server::tls::{TlsFiles, XdsTls};

use super::settings::DebugEndpoints;

/// The admin server's guard, as settled from its flags.
#[derive(Debug, Clone)]
pub(crate) struct AdminGuard {
    /// Whether `/debug/*` is mounted.
    pub(crate) debug_endpoints: bool,
    /// The token `/debug/*` needs (`None`: none).
    pub(crate) token: Option<Arc<AdminToken>>,
    /// Size and time limits of every request.
    pub(crate) limits: RequestLimits,
}

/// What the admin flags give, checked: `/debug/*` on a non-loopback address
/// needs a token unless `insecure` says otherwise.
pub(super) fn admin_guard(
    addr: SocketAddr,
    debug: Option<DebugEndpoints>,
    token_file: Option<PathBuf>,
    insecure: bool,
    max_body_bytes: Option<usize>,
    timeout_secs: Option<u64>,
) -> anyhow::Result<AdminGuard> {
    let d = RequestLimits::default();
    let limits = RequestLimits {
        max_body_bytes: max_body_bytes.unwrap_or(d.max_body_bytes),
        timeout: timeout_secs.map_or(d.timeout, Duration::from_secs),
    };
    if limits.max_body_bytes == 0 {
        bail!("--admin-max-body-bytes must be at least 1");
    }
    if limits.timeout.is_zero() {
        bail!("--admin-request-timeout-secs must be at least 1");
    }
    let token = match token_file {
        Some(p) => Some(AdminToken::new(p).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let loopback = addr.ip().is_loopback();
    let debug_endpoints = match debug.unwrap_or(DebugEndpoints::Auto) {
        // The views expose the whole mesh's configuration: served where only
        // this host reaches them, or behind the token.
        DebugEndpoints::Auto => loopback || token.is_some(),
        DebugEndpoints::On => true,
        DebugEndpoints::Off => false,
    };
    if debug_endpoints && !loopback && token.is_none() && !insecure {
        bail!(
            "refusing to serve /debug/* on the non-loopback admin address {addr} without \
             authentication: give --admin-token-file FILE (clients then send \
             `Authorization: Bearer TOKEN`), set --debug-endpoints off, bind --admin-addr to \
             loopback, or pass --admin-insecure to serve it to anyone who can reach {addr}"
        );
    }
    Ok(AdminGuard {
        debug_endpoints,
        token,
        limits,
    })
}

/// The loaded TLS of the xDS listener, or `None` for plaintext.
pub(super) fn xds_tls(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
    allow: Vec<String>,
) -> anyhow::Result<Option<Arc<XdsTls>>> {
    let (cert, key) = match (cert, key) {
        (Some(c), Some(k)) => (c, k),
        (None, None) => {
            if client_ca.is_some() {
                bail!(
                    "--xds-tls-client-ca needs --xds-tls-cert and --xds-tls-key (mutual TLS is TLS first)"
                );
            }
            if !allow.is_empty() {
                bail!(
                    "--xds-tls-allow needs mutual TLS: --xds-tls-cert, --xds-tls-key and --xds-tls-client-ca"
                );
            }
            return Ok(None);
        }
        (Some(_), None) => {
            bail!("--xds-tls-cert needs --xds-tls-key (the certificate's private key)")
        }
        (None, Some(_)) => {
            bail!("--xds-tls-key needs --xds-tls-cert (the certificate it belongs to)")
        }
    };
    if !allow.is_empty() && client_ca.is_none() {
        bail!(
            "--xds-tls-allow needs --xds-tls-client-ca: without client certificates there is no identity to allow"
        );
    }
    if let Some(bad) = allow
        .iter()
        .find(|a| a.trim().is_empty() || a.trim() != a.as_str())
    {
        bail!("--xds-tls-allow {bad:?}: an identity is a SAN DNS name or URI, with no spaces");
    }
    let tls = XdsTls::new(
        TlsFiles {
            cert,
            key,
            client_ca,
        },
        allow,
    )?;
    Ok(Some(tls))
}
