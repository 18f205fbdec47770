//! The accept loop of one listener: every accepted socket passes the gate (or is
//! closed at once) and becomes a [`GatedIo`] with its handshake deadline.
//!
//! What it does NOT do: speak HTTP (the xDS and admin servers do).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use super::gate::{ConnGate, Refused};
use super::io::GatedIo;
use super::{ConnLimits, ListenerKind};
use crate::conn::metrics::ConnMetrics;

/// Pause after an accept error that is not about one connection (out of file
/// descriptors, out of memory): such an error lasts until something closes, and
/// retrying at once would spin the loop.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// At most one warning per listener this often about refused connections (with
/// the count since the last one): a flood of refusals must not flood the log.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// Accepts connections on one listener (see the module docs).
#[derive(Debug)]
pub(crate) struct Acceptor {
    listener: TcpListener,
    gate: ConnGate,
    kind: ListenerKind,
    /// The xDS listener's first-request deadline; `None` on admin (hyper times
    /// request heads there).
    handshake: Option<Duration>,
    nodelay: bool,
    /// Refusals not yet logged, and when the last warning was.
    refused_since_log: u64,
    last_log: Option<Instant>,
}

impl Acceptor {
    /// An acceptor for `listener` under `limits`, counting into `metrics`.
    pub(crate) fn new(
        listener: TcpListener,
        kind: ListenerKind,
        limits: &ConnLimits,
        metrics: &ConnMetrics,
    ) -> Self {
        let handshake = match kind {
            ListenerKind::Xds => Some(limits.request_timeout),
            ListenerKind::Admin => None,
        };
        Acceptor {
            listener,
            gate: ConnGate::new(
                limits.max_connections,
                limits.max_per_source,
                metrics.of(kind),
            ),
            kind,
            handshake,
            nodelay: kind == ListenerKind::Xds,
            refused_since_log: 0,
            last_log: None,
        }
    }

    /// The gate's metrics, for what the server counts per connection.
    pub(crate) fn metrics(&self) -> &super::metrics::ListenerMetrics {
        self.gate.metrics()
    }

    /// The next admitted connection. Connections above a cap are closed here, and
    /// accept errors are logged and retried, so this only returns a connection.
    pub(crate) async fn next(&mut self) -> GatedIo {
        loop {
            match self.listener.accept().await {
                Ok((stream, peer)) => {
                    if let Some(io) = self.admit(stream, peer) {
                        return io;
                    }
                }
                Err(e) if is_per_connection(&e) => {}
                Err(e) => {
                    tracing::warn!(listener = self.kind.as_str(), error = %e, "accepting a connection failed; retrying");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            }
        }
    }

    fn admit(&mut self, stream: TcpStream, peer: SocketAddr) -> Option<GatedIo> {
        match self.gate.admit(peer.ip()) {
            Ok(permit) => {
                if self.nodelay {
                    let _ = stream.set_nodelay(true);
                }
                let by = self.handshake.map(|t| Instant::now() + t);
                let timed_out = self.gate.metrics().timed_out.clone();
                Some(GatedIo::new(stream, peer, permit, by, timed_out))
            }
            Err(reason) => {
                // Dropping the stream closes it: the client sees the connection
                // end before any byte and retries (or goes to another replica).
                drop(stream);
                self.log_refusal(peer, reason);
                None
            }
        }
    }

    fn log_refusal(&mut self, peer: SocketAddr, reason: Refused) {
        self.refused_since_log += 1;
        let now = Instant::now();
        if self
            .last_log
            .is_some_and(|at| now.duration_since(at) < REFUSAL_LOG_EVERY)
        {
            return;
        }
        let (flag, what) = match (self.kind, reason) {
            (ListenerKind::Xds, Refused::Total) => ("--xds-max-connections", "on this listener"),
            (ListenerKind::Xds, Refused::PerSource) => {
                ("--xds-max-connections-per-source", "from this address")
            }
            (ListenerKind::Admin, Refused::Total) => {
                ("--admin-max-connections", "on this listener")
            }
            (ListenerKind::Admin, Refused::PerSource) => {
                ("--admin-max-connections-per-source", "from this address")
            }
        };
        tracing::warn!(
            listener = self.kind.as_str(),
            %peer,
            refused = self.refused_since_log,
            "refusing connections: the cap of connections {what} is reached ({flag}); \
             `refused` counts those refused since the last such warning"
        );
        self.refused_since_log = 0;
        self.last_log = Some(now);
    }
}

/// Errors about one connection that went away before it was accepted; the next
/// accept is unaffected.
fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    )
}
