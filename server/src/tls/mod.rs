//! xDS over TLS and mutual TLS: the server certificate (reloaded when its files
//! change), the optional client CA that every client certificate must chain to,
//! and the client identities a certificate carries.
//!
//! - [`load`]: reading the PEM files into a rustls `ServerConfig` (ALPN `h2`).
//! - [`reload`]: polling the files (following symlinks, so Kubernetes' `..data`
//!   swap is seen as well as a rewrite) and swapping the config that new
//!   connections get; open connections keep theirs, so no stream is dropped.
//! - [`accept`]: the TLS handshake of every admitted connection, off the accept
//!   loop, with refusals counted by reason and logged with the peer address.
//! - [`identity`]: the SAN DNS names and SPIFFE URIs of a client certificate,
//!   the `--xds-tls-allow` list, and the rule tying a node id to them.
//!
//! What it does NOT do: check a certificate's revocation (no CRL or OCSP), or
//! authorize anything beyond "which client may connect, as which node".

pub(crate) mod accept;
pub mod identity;
mod load;
pub mod reload;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use rustls::ServerConfig;

use crate::Error;
pub use identity::PeerIdentity;

/// The PEM files of the xDS listener's TLS (`--xds-tls-cert`, `--xds-tls-key`,
/// `--xds-tls-client-ca`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server's certificate chain, leaf first.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates a client certificate must chain to; `None`: clients
    /// present none (TLS, not mutual TLS).
    pub client_ca: Option<PathBuf>,
}

/// The xDS listener's TLS: the current server config and the allow-list.
#[derive(Debug)]
pub struct XdsTls {
    files: TlsFiles,
    /// Client identities allowed to connect (`--xds-tls-allow`); empty: every
    /// certificate the client CA verifies.
    allow: Vec<String>,
    /// What each new connection handshakes with.
    current: RwLock<Arc<ServerConfig>>,
    /// The files as last loaded, to tell when they changed.
    stamps: Mutex<reload::Stamps>,
}

impl XdsTls {
    /// Loads `files` (any problem is an error naming the file and why: a bad
    /// certificate must fail the start, not the first handshake).
    pub fn new(files: TlsFiles, allow: Vec<String>) -> Result<Arc<Self>, Error> {
        let stamps = reload::Stamps::of(&files);
        let config = load::server_config(&files)?;
        Ok(Arc::new(XdsTls {
            files,
            allow,
            current: RwLock::new(config),
            stamps: Mutex::new(stamps),
        }))
    }

    /// The files served.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// Whether clients must present a certificate.
    pub fn mutual(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// The `--xds-tls-allow` list.
    pub fn allow(&self) -> &[String] {
        &self.allow
    }

    /// The config a new connection handshakes with.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn swap(&self, config: Arc<ServerConfig>) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = config;
    }
}
