//! An admitted connection: the TCP stream, its slot in the gate, and (on the xDS
//! listener) the deadline for its first request.
//!
//! The deadline lives in the read side: while no request has been seen, every
//! read also polls the deadline's timer, so when it passes, the connection's
//! task (hyper's, which always has a read pending on an idle connection) wakes
//! and the read fails with `TimedOut`; hyper then drops the connection. The
//! request is seen by the service, through the [`ConnInfo`] tonic puts in every
//! request's extensions, so this works whatever bytes the client sent (nothing,
//! half a preface, a preface and settings but no stream).
//!
//! What it does NOT do: parse HTTP/2 (hyper does), or time anything after the
//! first request (HTTP/2 keepalive covers a peer that goes away later).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::gate::Permit;

/// What a request learns about its connection (in its extensions, from tonic's
/// `Connected`), and how it tells the connection that a request arrived.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    remote: SocketAddr,
    requested: Arc<AtomicBool>,
    /// The verified client certificate's identities (mutual TLS only).
    peer: Option<Arc<crate::tls::PeerIdentity>>,
}

impl ConnInfo {
    /// The client's address.
    pub fn remote_addr(&self) -> SocketAddr {
        self.remote
    }

    /// The verified client certificate's identities, on a mutual TLS
    /// connection.
    pub fn peer(&self) -> Option<&Arc<crate::tls::PeerIdentity>> {
        self.peer.as_ref()
    }

    /// This connection's info once its TLS handshake verified `peer`.
    pub(crate) fn with_peer(mut self, peer: Option<Arc<crate::tls::PeerIdentity>>) -> Self {
        self.peer = peer;
        self
    }

    /// Marks that the connection carried a request: its handshake deadline no
    /// longer applies.
    pub fn request_seen(&self) {
        self.requested.store(true, Ordering::Release);
    }
}

/// An admitted TCP connection (see the module docs).
#[derive(Debug)]
pub struct GatedIo {
    stream: TcpStream,
    info: ConnInfo,
    /// Until the first request, when it must have come; `None` after it (or
    /// when this listener has no such deadline).
    deadline: Option<Pin<Box<Sleep>>>,
    /// The deadline passed: every read and write fails from then on.
    expired: bool,
    /// Counts expiries; `None` when there is no deadline.
    timed_out: Option<prometheus_client::metrics::counter::Counter>,
    /// Frees the gate's slot when the connection is dropped.
    _permit: Permit,
}

impl GatedIo {
    /// Wraps an admitted stream; `first_request_by` is the handshake deadline,
    /// if this listener has one.
    pub(crate) fn new(
        stream: TcpStream,
        remote: SocketAddr,
        permit: Permit,
        first_request_by: Option<Instant>,
        timed_out: prometheus_client::metrics::counter::Counter,
    ) -> Self {
        let deadline = first_request_by.map(|at| Box::pin(tokio::time::sleep_until(at)));
        GatedIo {
            stream,
            info: ConnInfo {
                remote,
                requested: Arc::new(AtomicBool::new(false)),
                peer: None,
            },
            timed_out: deadline.is_some().then_some(timed_out),
            deadline,
            expired: false,
            _permit: permit,
        }
    }

    /// This connection's [`ConnInfo`].
    pub fn info(&self) -> &ConnInfo {
        &self.info
    }

    /// Checks the handshake deadline: `Err` once it has passed with no request.
    /// Registers the timer with `cx` while it is still ahead.
    fn check_deadline(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if let Some(deadline) = &mut self.deadline {
            if self.info.requested.load(Ordering::Acquire) {
                self.deadline = None;
            } else if deadline.as_mut().poll(cx).is_ready() {
                self.deadline = None;
                self.expired = true;
                if let Some(c) = &self.timed_out {
                    c.inc();
                }
                tracing::debug!(peer = %self.info.remote, "closing a connection that sent no request in time");
            }
        }
        if self.expired {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no request within the handshake timeout",
            ));
        }
        Ok(())
    }
}

impl AsyncRead for GatedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(e) = this.check_deadline(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for GatedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.expired {
            return Poll::Ready(Err(io::ErrorKind::TimedOut.into()));
        }
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.expired {
            return Poll::Ready(Err(io::ErrorKind::TimedOut.into()));
        }
        Pin::new(&mut this.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for GatedIo {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}
