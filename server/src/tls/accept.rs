//! The TLS handshake of every connection the xDS listener admits.
//!
//! Each handshake runs in its own task, so a slow client never holds up the
//! accept loop; their number is bounded by the listener's connection cap (each
//! holds its gate slot) and their time by the handshake timeout (the
//! connection's first-request deadline covers the handshake's reads). Finished
//! connections queue for the HTTP/2 server in a bounded channel.
//!
//! A refused handshake is counted in
//! `deltapilot_xds_tls_handshake_failures_total{reason}` and logged with the
//! peer's address and the reason: every one is counted, but at most one warning
//! is logged every few seconds (with the number refused since the last), so a
//! misconfigured fleet or a scanner cannot flood the log.
//!
//! What it does NOT do: decide what a verified client may ask for (see
//! `identity`, checked per stream).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{PeerIdentity, XdsTls};
use crate::conn::accept::Acceptor;
use crate::conn::{ConnInfo, GatedIo};
use crate::metrics::Metrics;

/// Connections whose handshake finished, waiting for the HTTP/2 server to take
/// them; a full queue pauses the handshakes that finish next.
const HANDSHAKED_QUEUE: usize = 1024;

/// At most one warning about refused handshakes this often.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(5);

/// When the last refusal warning was, and the refusals since.
#[derive(Debug, Default)]
struct RefusalLog(Mutex<(Option<Instant>, u64)>);

impl RefusalLog {
    /// Whether to log this refusal, and how many were refused since the last
    /// warning (this one included).
    fn note(&self) -> Option<u64> {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        g.1 += 1;
        let now = Instant::now();
        if g.0
            .is_some_and(|at| now.duration_since(at) < REFUSAL_LOG_EVERY)
        {
            return None;
        }
        let n = g.1;
        *g = (Some(now), 0);
        Some(n)
    }
}

/// A connection after its TLS handshake.
#[derive(Debug)]
pub(crate) struct TlsIo {
    stream: tokio_rustls::server::TlsStream<GatedIo>,
    info: ConnInfo,
}

/// The connections of `acceptor`, each after its TLS handshake with `tls`'s
/// config of the moment. The accept loop ends when the stream is dropped.
pub(crate) fn incoming(
    mut acceptor: Acceptor,
    tls: Arc<XdsTls>,
    metrics: Arc<Metrics>,
) -> ReceiverStream<io::Result<TlsIo>> {
    let (tx, rx) = mpsc::channel(HANDSHAKED_QUEUE);
    let log = Arc::new(RefusalLog::default());
    tokio::spawn(async move {
        loop {
            let io = tokio::select! {
                io = acceptor.next() => io,
                () = tx.closed() => return,
            };
            let (tls, metrics, tx, log) = (tls.clone(), metrics.clone(), tx.clone(), log.clone());
            tokio::spawn(async move {
                if let Some(conn) = handshake(io, &tls, &metrics, &log).await {
                    let _ = tx.send(Ok(conn)).await;
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

async fn handshake(
    io: GatedIo,
    tls: &XdsTls,
    metrics: &Metrics,
    log: &RefusalLog,
) -> Option<TlsIo> {
    let info = io.info().clone();
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.config());
    match acceptor.accept(io).await {
        Ok(stream) => {
            let peer = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(PeerIdentity::of)
                .map(|mut p| {
                    p.allowed = p.allowed_by(tls.allow());
                    Arc::new(p)
                });
            if tls.mutual() && peer.is_none() {
                // The verifier accepted a certificate this cannot read back:
                // refuse rather than serve a client of unknown identity.
                refused(
                    (metrics, log),
                    &info,
                    "unreadable_client_certificate",
                    "the client certificate's names cannot be read",
                );
                return None;
            }
            let info = info.with_peer(peer);
            Some(TlsIo { stream, info })
        }
        Err(e) => {
            let (reason, why) = reason_of(&e);
            refused((metrics, log), &info, reason, &why);
            None
        }
    }
}

fn refused(
    (metrics, log): (&Metrics, &RefusalLog),
    info: &ConnInfo,
    reason: &'static str,
    why: &str,
) {
    metrics
        .xds_tls_handshake_failures
        .get_or_create(&[("reason", reason)])
        .inc();
    if let Some(refused) = log.note() {
        tracing::warn!(
            peer = %info.remote_addr(), reason, error = %why, refused,
            "refused an xDS TLS handshake; `refused` counts those refused since the last such \
             warning (all are in deltapilot_xds_tls_handshake_failures_total)"
        );
    }
}

/// The metric's `reason` for a failed handshake, and the text to log.
fn reason_of(e: &io::Error) -> (&'static str, String) {
    use rustls::Error as R;
    let text = e.to_string();
    let reason = match e.get_ref().and_then(|i| i.downcast_ref::<R>()) {
        Some(R::NoCertificatesPresented) => "no_client_certificate",
        Some(R::InvalidCertificate(_)) => "bad_client_certificate",
        Some(R::NoApplicationProtocol) => "no_h2_alpn",
        Some(R::AlertReceived(_)) => "alert_received",
        Some(
            R::InvalidMessage(_)
            | R::InappropriateMessage { .. }
            | R::InappropriateHandshakeMessage { .. },
        ) => "not_tls",
        Some(R::PeerIncompatible(_)) => "incompatible",
        Some(_) => "other",
        None if e.kind() == io::ErrorKind::TimedOut => "timeout",
        None => "io",
    };
    (reason, text)
}

impl AsyncRead for TlsIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
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

impl tonic::transport::server::Connected for TlsIo {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}
