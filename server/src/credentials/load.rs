//! Reading one credential directory (`tls.crt`, `tls.key`, optional `ca.crt`,
//! the layout of a mounted Kubernetes TLS Secret) into SDS `Secret`s.
//!
//! The certificate and key are read as a matched pair: the key's public half
//! must be the one in the first certificate, so a rewrite caught between its
//! two files (or a pair that simply does not belong together) is refused and
//! the last good pair stays served. A read is also repeated until the
//! certificate reads the same before and after the key, so that a swap of the
//! `..data` symlink between the two reads cannot mix old and new.
//!
//! Errors name the file and the reason, never the content.

use std::path::Path;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::{DataSource, data_source::Specifier};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CertificateValidationContext, Secret, TlsCertificate, secret::Type,
};
use prost::Message;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// Largest credential file read; a Secret holds a few kilobytes.
pub(crate) const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// How many times a read is retried while the files change under it.
const STABLE_READ_ATTEMPTS: usize = 3;

/// The PEM contents of one credential, checked.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Pem {
    /// Certificate chain (leaf first).
    pub cert: Vec<u8>,
    /// Private key.
    pub key: Vec<u8>,
    /// CA bundle for MUTUAL (`ca.crt`), if present.
    pub ca: Option<Vec<u8>>,
}

impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the bytes: this is key material.
        f.debug_struct("Pem")
            .field("cert_bytes", &self.cert.len())
            .field("key", &"<redacted>")
            .field("ca_bytes", &self.ca.as_ref().map(Vec::len))
            .finish()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", path.display()));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!(
            "{}: {} bytes, more than the {MAX_FILE_BYTES} a credential file may have",
            path.display(),
            meta.len()
        ));
    }
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn optional(path: &Path) -> Result<Option<Vec<u8>>, String> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        _ => read(path).map(Some),
    }
}

/// Reads and checks the credential in `dir`.
pub(crate) fn load_dir(dir: &Path) -> Result<Pem, String> {
    let mut last = String::new();
    for _ in 0..STABLE_READ_ATTEMPTS {
        let cert = read(&dir.join("tls.crt"))?;
        let key = read(&dir.join("tls.key"))?;
        let ca = optional(&dir.join("ca.crt"))?;
        let again = read(&dir.join("tls.crt"))?;
        if again != cert {
            last = format!("{}: changed while being read", dir.display());
            continue;
        }
        check_pair(&cert, &key).map_err(|why| format!("{}: {why}", dir.display()))?;
        if let Some(ca) = &ca {
            parse_certs(ca).map_err(|why| format!("{}: ca.crt: {why}", dir.display()))?;
        }
        return Ok(Pem { cert, key, ca });
    }
    Err(last)
}

fn parse_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("not PEM certificates ({e:?})"))?;
    if certs.is_empty() {
        return Err("holds no PEM certificate".to_string());
    }
    Ok(certs)
}

/// Whether `key` is the private key of the first certificate of `cert`.
pub fn check_pair(cert: &[u8], key: &[u8]) -> Result<(), String> {
    let certs = parse_certs(cert).map_err(|e| format!("tls.crt {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| format!("tls.key is not a PEM private key ({e:?})"))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| format!("tls.key is not a supported key ({e})"))?;
    match CertifiedKey::new(certs, signing).keys_match() {
        Ok(()) => Ok(()),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(()),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err("tls.key does not belong to the certificate in tls.crt".to_string())
        }
        Err(e) => Err(format!("tls.crt cannot be read as X.509 ({e})")),
    }
}

fn inline(bytes: &[u8]) -> Option<DataSource> {
    Some(DataSource {
        specifier: Some(Specifier::InlineBytes(bytes.to_vec())),
        ..Default::default()
    })
}

/// The encoded `Secret` holding the certificate and key, named `name`.
pub(crate) fn certificate_secret(name: &str, pem: &Pem) -> Bytes {
    Bytes::from(
        Secret {
            name: name.to_string(),
            r#type: Some(Type::TlsCertificate(TlsCertificate {
                certificate_chain: inline(&pem.cert),
                private_key: inline(&pem.key),
                ..Default::default()
            })),
        }
        .encode_to_vec(),
    )
}

/// The encoded `Secret` holding the CA bundle, named `name`.
pub(crate) fn ca_secret(name: &str, ca: &[u8]) -> Bytes {
    Bytes::from(
        Secret {
            name: name.to_string(),
            r#type: Some(Type::ValidationContext(CertificateValidationContext {
                trusted_ca: inline(ca),
                ..Default::default()
            })),
        }
        .encode_to_vec(),
    )
}
