//! The xDS listening socket and the server loop: bind with a deep backlog,
//! accept through the connection gate (and TLS when configured), serve the
//! routes of [`super::service`] until drain.

use std::sync::Arc;

use super::service::{XdsShared, routes};
use crate::Error;
use crate::conn::accept::Acceptor;
use crate::conn::{ConnInfo, ListenerKind, XdsConnOptions};
use crate::tls::XdsTls;

/// Listen backlog asked for the xDS socket. A fleet reconnecting after a restart
/// or a network blip arrives as one burst (10,000 SYNs in well under a second);
/// with tokio's default of 1,024 the kernel drops the overflow and the clients
/// retry after 1 s and 3 s, which is most of a reconnect storm's duration. Linux
/// caps the value at `net.core.somaxconn` (4,096 on the reference machine).
pub const XDS_LISTEN_BACKLOG: u32 = 16_384;

/// Binds the xDS listening socket with [`XDS_LISTEN_BACKLOG`].
pub fn bind_listener(addr: std::net::SocketAddr) -> Result<tokio::net::TcpListener, Error> {
    let err = |source| Error::Bind { addr, source };
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }
    .map_err(err)?;
    // As std's `TcpListener::bind` does on Unix: a restarted server can rebind
    // while old connections sit in TIME_WAIT.
    socket.set_reuseaddr(true).map_err(err)?;
    socket.bind(addr).map_err(err)?;
    socket.listen(XDS_LISTEN_BACKLOG).map_err(err)
}

/// Serves xDS on `listener` with the default connection options (see
/// [`serve_with`]).
pub async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<XdsShared>,
) -> Result<(), tonic::transport::Error> {
    serve_with(listener, shared, XdsConnOptions::default()).await
}

/// Serves xDS on `listener` until `drain` turns true; open streams end with
/// `UNAVAILABLE` at that moment, and the caller bounds the rest with its grace
/// period.
///
/// Connections pass `opts`' caps and handshake timeout (see [`crate::conn`]), and
/// each is pinged every `keepalive_interval`: a peer that stops answering is
/// dropped after `keepalive_timeout`, even when it also withholds flow-control
/// window (which stops its streams' own timers, see `run_stream`). With a
/// `max_connection_age`, older connections get a GOAWAY and, after the grace,
/// are closed; the client reconnects with what it holds.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    shared: Arc<XdsShared>,
    opts: XdsConnOptions,
) -> Result<(), tonic::transport::Error> {
    serve_tls(listener, shared, opts, None).await
}

/// As [`serve_with`], over TLS when `tls` is given: every connection
/// handshakes with `tls`'s config of the moment (see [`crate::tls`]).
pub async fn serve_tls(
    listener: tokio::net::TcpListener,
    shared: Arc<XdsShared>,
    opts: XdsConnOptions,
    tls: Option<Arc<XdsTls>>,
) -> Result<(), tonic::transport::Error> {
    let acceptor = Acceptor::new(
        listener,
        ListenerKind::Xds,
        &opts.limits,
        &shared.metrics.connections,
    );
    match tls {
        Some(tls) => {
            let incoming = crate::tls::accept::incoming(acceptor, tls, shared.metrics.clone());
            serve_incoming(incoming, shared, opts).await
        }
        None => {
            let incoming = futures::stream::unfold(acceptor, |mut a| async move {
                let io = a.next().await;
                Some((Ok::<_, std::io::Error>(io), a))
            });
            serve_incoming(incoming, shared, opts).await
        }
    }
}

async fn serve_incoming<I, IO>(
    incoming: I,
    shared: Arc<XdsShared>,
    opts: XdsConnOptions,
) -> Result<(), tonic::transport::Error>
where
    I: futures::Stream<Item = Result<IO, std::io::Error>>,
    IO: tokio::io::AsyncRead
        + tokio::io::AsyncWrite
        + tonic::transport::server::Connected<ConnectInfo = ConnInfo>
        + Unpin
        + Send
        + 'static,
{
    let mut drain = shared.drain.clone();
    let mut builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(opts.keepalive_interval))
        .http2_keepalive_timeout(Some(opts.keepalive_timeout));
    if let Some(age) = opts.max_connection_age {
        builder = builder
            .max_connection_age(age)
            .max_connection_age_grace(opts.max_connection_age_grace);
    }
    builder
        .add_routes(routes(shared))
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = drain.wait_for(|d| *d).await;
        })
        .await
}
