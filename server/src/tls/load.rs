//! Reading the PEM files into a rustls `ServerConfig`.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use super::TlsFiles;
use crate::Error;

/// The one application protocol served: gRPC is HTTP/2, and grpcio refuses a
/// TLS server that does not negotiate it.
pub(super) const ALPN_H2: &[u8] = b"h2";

fn err(flag: &'static str, path: &Path, reason: impl Into<String>) -> Error {
    Error::TlsFile {
        flag,
        path: path.to_owned(),
        reason: reason.into(),
    }
}

fn certs(flag: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let pem = std::fs::read(path).map_err(|e| err(flag, path, format!("cannot read: {e}")))?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| err(flag, path, format!("not PEM certificates ({e:?})")))?;
    if certs.is_empty() {
        return Err(err(flag, path, "holds no PEM certificate"));
    }
    Ok(certs)
}

/// The server config for `files`: their certificate and key, the client CA's
/// verifier if any, ALPN `h2`, rustls' safe protocol versions (TLS 1.2 and 1.3).
pub(super) fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, Error> {
    let chain = certs("--xds-tls-cert", &files.cert)?;
    let key_pem = std::fs::read(&files.key)
        .map_err(|e| err("--xds-tls-key", &files.key, format!("cannot read: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        err(
            "--xds-tls-key",
            &files.key,
            format!("not a PEM private key ({e:?})"),
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| err("--xds-tls-cert", &files.cert, e.to_string()))?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in certs("--xds-tls-client-ca", ca)? {
                roots.add(c).map_err(|e| {
                    err(
                        "--xds-tls-client-ca",
                        ca,
                        format!("not a usable CA certificate ({e})"),
                    )
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| err("--xds-tls-client-ca", ca, e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        err(
            "--xds-tls-key",
            &files.key,
            format!(
                "does not fit the certificate in {} ({e})",
                files.cert.display()
            ),
        )
    })?;
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(Arc::new(config))
}
