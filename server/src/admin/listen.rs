//! The admin server's accept loop: HTTP/1.1 (hyper) over gated connections.
//!
//! Each connection passes the admin listener's caps (see [`crate::conn`]), and
//! hyper's header read timeout closes one that does not send a complete request
//! head in time, the first one or the next one on a kept-alive connection: a
//! connection that opens and sends nothing, or goes idle, is closed either way.
//!
//! What it does NOT do: route (see `router`).

use std::future::Future;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;

use crate::conn::accept::Acceptor;
use crate::conn::{ConnLimits, ConnMetrics, ListenerKind};

/// Serves `routes` on `listener` under `limits` until `shutdown` resolves; then
/// stops listening, lets requests in progress finish, and returns once every
/// connection is closed (the caller bounds that with its grace period).
pub(super) async fn serve_gated(
    listener: tokio::net::TcpListener,
    routes: Router,
    limits: ConnLimits,
    metrics: &ConnMetrics,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let mut acceptor = Acceptor::new(listener, ListenerKind::Admin, &limits, metrics);
    let timed_out = acceptor.metrics().timed_out.clone();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.request_timeout)
        .keep_alive(true);
    let service = TowerToHyperService::new(routes);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            io = acceptor.next() => {
                let peer = io.info().remote_addr();
                let conn = graceful.watch(http.serve_connection(TokioIo::new(io), service.clone()));
                let timed_out = timed_out.clone();
                tokio::spawn(async move {
                    match conn.await {
                        Ok(()) => {}
                        Err(e) if e.is_timeout() => {
                            timed_out.inc();
                            tracing::debug!(%peer, "closed an admin connection that sent no request in time");
                        }
                        Err(e) => tracing::debug!(%peer, error = %e, "admin connection ended with an error"),
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    // Closes the listening socket first, so that no client connects to a server
    // that will not answer.
    drop(acceptor);
    graceful.shutdown().await;
}
