//! Connection limits of the xDS and admin listeners: a client that connects and
//! never completes a request, or opens connections without end, must not hold
//! the server's sockets.
//!
//! - [`accept`]: the accept loop; each socket passes a [`gate`] that caps the
//!   connections of the listener, in total and per source address, and closes
//!   one above a cap at once.
//! - [`io`]: the admitted connection; on the xDS listener it is closed when no
//!   first request arrived within the handshake timeout (the admin server has
//!   hyper's header read timeout for that, which also closes idle kept-alive
//!   connections).
//! - [`metrics`]: what both listeners count.
//!
//! HTTP/2 keepalive (pings with a timeout) closes an xDS connection whose peer
//! vanished later; see [`XdsConnOptions`].
//!
//! What it does NOT do: limit streams or requests (see `xds::Limits`).

pub(crate) mod accept;
pub(crate) mod gate;
pub mod io;
pub mod metrics;

use std::time::Duration;

pub use io::{ConnInfo, GatedIo};
pub use metrics::ConnMetrics;

/// Which listener a connection came to (the `listener` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerKind {
    /// The xDS gRPC listener.
    Xds,
    /// The admin HTTP listener.
    Admin,
}

impl ListenerKind {
    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ListenerKind::Xds => "xds",
            ListenerKind::Admin => "admin",
        }
    }
}

/// The connection limits of one listener. Every one is a flag of `deltapilot run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Most connections open at once; one more is closed as soon as it is
    /// accepted.
    pub max_connections: usize,
    /// Most connections open at once from one source address (0: no such cap).
    pub max_per_source: usize,
    /// How long a connection may take to send a request: on xDS the first one
    /// (HTTP/2 preface, settings and the first stream's headers); on admin the
    /// head of each request, so an idle kept-alive connection is closed too.
    pub request_timeout: Duration,
}

impl ConnLimits {
    /// The xDS listener's defaults.
    ///
    /// No per-source cap: proxies behind a NAT or a load balancer that does not
    /// keep client addresses all arrive from a few addresses, and a cap there
    /// would refuse a legitimate fleet. The total matches the default
    /// `--max-streams` (a proxy holds one connection). The handshake timeout
    /// leaves room for a reconnect storm on a loaded server, where a connection
    /// may wait for its first request to be read.
    pub const XDS: ConnLimits = ConnLimits {
        max_connections: 100_000,
        max_per_source: 0,
        request_timeout: Duration::from_secs(20),
    };

    /// The admin listener's defaults: its clients are a few scrapers, probes and
    /// operators, so the caps are low; hyper's own default header read timeout.
    pub const ADMIN: ConnLimits = ConnLimits {
        max_connections: 256,
        max_per_source: 32,
        request_timeout: Duration::from_secs(30),
    };
}

/// How the xDS server treats its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdsConnOptions {
    /// Caps and the handshake timeout.
    pub limits: ConnLimits,
    /// How often an HTTP/2 ping is sent on each connection.
    pub keepalive_interval: Duration,
    /// A connection whose ping is not answered within this is closed.
    pub keepalive_timeout: Duration,
    /// Connections older than this are told to go (HTTP/2 GOAWAY), so clients
    /// reconnect and spread again over the replicas, e.g. back to one that
    /// restarted; `None` keeps them for as long as they last.
    pub max_connection_age: Option<Duration>,
    /// How long a connection told to go may keep its streams before it is
    /// closed. An ADS stream never ends by itself, so this is when the client
    /// actually reconnects.
    pub max_connection_age_grace: Duration,
}

impl Default for XdsConnOptions {
    fn default() -> Self {
        XdsConnOptions {
            limits: ConnLimits::XDS,
            keepalive_interval: Duration::from_secs(30),
            // tonic's default.
            keepalive_timeout: Duration::from_secs(20),
            max_connection_age: None,
            max_connection_age_grace: Duration::from_secs(10),
        }
    }
}
