//! The xDS listener's TLS settings (`--xds-tls-*`), checked together and
//! loaded, so that a missing key or a bad certificate fails the start.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::bail;
use deltapilot_server::tls::{TlsFiles, XdsTls};

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
