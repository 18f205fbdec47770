//! deltapilot's server side: the xDS gRPC server (delta and SotW ADS), the admin
//! HTTP server and its metrics, and the connection limits of both (`conn`). The
//! `deltapilot` binary (`src/main.rs`) wires them to the engine and the adapters.
//!
//! What it does NOT do: fold events or build resources (that is the engine), or
//! watch registries (that is the adapters).

pub mod adapter_health;
pub mod admin;
pub mod conn;
pub mod credentials;
pub mod log_health;
pub mod log_metrics;
pub mod metrics;
pub mod process;
pub mod readiness;
pub mod stale_proxies;
pub mod tls;
pub mod xds;

/// Result alias for the server crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the server can reject or fail at. Mapped to `tonic::Status` in one
/// place ([`Error::to_status`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request named a type this server does not serve.
    #[error(
        "unsupported type_url {0:?}; deltapilot serves CDS, EDS, LDS and RDS (envoy.config.*.v3)"
    )]
    UnknownTypeUrl(String),
    /// A per-type service (e.g. `DeltaClusters`) got a request for another type.
    #[error(
        "type_url {type_url:?} sent to the {service} service; use ADS or the matching per-type service"
    )]
    WrongService {
        /// The type asked for.
        type_url: String,
        /// The service's type.
        service: &'static str,
    },
    /// A stream subscribed to more names than allowed.
    #[error(
        "stream subscribes to {requested} resource names; the limit is {limit} (--max-names-per-stream)"
    )]
    TooManyNames {
        /// The configured limit.
        limit: usize,
        /// What the stream asked for.
        requested: usize,
    },
    /// Too many streams are open.
    #[error(
        "{limit} xDS streams are already open (--max-streams); retry later or use another replica"
    )]
    TooManyStreams {
        /// The configured limit.
        limit: usize,
    },
    /// The client sent nothing for too long while responses waited for its ACK.
    #[error(
        "no ACK or request for {0:?} with a response in flight; closing a stalled stream (--stall-timeout)"
    )]
    Stalled(std::time::Duration),
    /// A request could not be decoded (bad protobuf, a string that is not UTF-8).
    #[error("malformed discovery request: {0}")]
    Malformed(String),
    /// The server is shutting down.
    #[error("deltapilot is shutting down; reconnect to another replica")]
    Draining,
    /// A TLS file (`--xds-tls-*`) cannot be used.
    #[error("{flag} {}: {reason}", path.display())]
    TlsFile {
        /// The flag naming the file.
        flag: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The client certificate's identities are not in `--xds-tls-allow`.
    #[error(
        "client certificate identities {identities:?} are not in the server's --xds-tls-allow list"
    )]
    IdentityNotAllowed {
        /// The certificate's SAN DNS names and URIs.
        identities: Vec<String>,
    },
    /// The node a stream claims disagrees with its client certificate.
    #[error("authorization failed: {0}")]
    IdentityMismatch(String),
    /// Binding a listening socket failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// The gRPC status a client receives for this error.
    pub fn to_status(&self) -> tonic::Status {
        use tonic::Code;
        let code = match self {
            Error::UnknownTypeUrl(_) | Error::WrongService { .. } | Error::Malformed(_) => {
                Code::InvalidArgument
            }
            Error::TooManyNames { .. } | Error::TooManyStreams { .. } => Code::ResourceExhausted,
            Error::Stalled(_) => Code::DeadlineExceeded,
            Error::Draining => Code::Unavailable,
            Error::IdentityNotAllowed { .. } | Error::IdentityMismatch(_) => Code::PermissionDenied,
            Error::Bind { .. } | Error::TlsFile { .. } => Code::Internal,
        };
        tonic::Status::new(code, self.to_string())
    }
}
