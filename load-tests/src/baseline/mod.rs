//! The physical limit, measured in the same run: a plain tonic server that
//! implements the same ADS methods with no control-plane logic. Every
//! stream gets the initial responses proxy 0 captured from deltapilot, then every
//! response proxy 0 captured during churn, replayed byte for byte to all streams
//! at the same pace. The same simulated proxies (same code, same behaviours)
//! connect to it. Convergence ÷ raw fan-out says what the control plane costs on
//! top of moving the bytes.
//!
//! Each stream keeps one rule of a correct server, make-before-break order across
//! types (see [`gate`]): a listener or route waits for the ACK of the clusters
//! sent before it, so a service add costs the replay the round trips it costs
//! deltapilot. Reading the ACKs for that is the only per-stream work.
//!
//! The server runs as a child process (the load generator's own binary, see
//! [`child`]) when the load generator runs as a binary, and in this process (on
//! its own runtime) when it runs as a library, e.g. in tests.
//!
//! What it does NOT do: coalesce, or decide anything per stream beyond that order.

pub mod child;
pub mod gate;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::Stream;
use prost::Message;
use tokio::sync::{broadcast, watch};
use tonic::codegen::{Body, BoxFuture, Context, Poll, Service, StdError, http};
use tonic::server::{Grpc, NamedService, StreamingService};
use tonic::{Status, Streaming};

use crate::proxy::codec::BytesCodec;
use crate::proxy::fleet::{AckObserver, Captured, Phase};
use crate::tracker::Group;

/// Pushes a stream may fall behind before it misses some: replay waits for each
/// push to finish (or time out) before the next is due only at the original pace,
/// so a healthy stream never holds more than a few; a stalled one drops the rest.
const REPLAY_BACKLOG: usize = 1024;

/// Responses a stream's loop may hand to its connection ahead of the writes:
/// the gate releases in bursts only as ACKs arrive, so a few suffice.
const STREAM_OUT: usize = 16;

type RespStream = Pin<Box<dyn Stream<Item = Result<Bytes, Status>> + Send>>;

struct Replay {
    initial: Arc<Vec<gate::Msg>>,
    pushes: broadcast::Sender<gate::Msg>,
}

/// The two request fields that carry the answered nonce, per API.
#[derive(Clone, PartialEq, prost::Message)]
struct SotwAnswer {
    #[prost(string, tag = "5")]
    response_nonce: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct DeltaAnswer {
    #[prost(string, tag = "6")]
    response_nonce: String,
}

fn answered_nonce(delta: bool, req: &[u8]) -> Option<String> {
    let n = if delta {
        DeltaAnswer::decode(req).ok()?.response_nonce
    } else {
        SotwAnswer::decode(req).ok()?.response_nonce
    };
    (!n.is_empty()).then_some(n)
}

#[derive(Clone)]
struct Method {
    replay: Arc<Replay>,
    delta: bool,
}

impl StreamingService<Bytes> for Method {
    type Response = Bytes;
    type ResponseStream = RespStream;
    type Future = BoxFuture<tonic::Response<RespStream>, Status>;

    fn call(&mut self, req: tonic::Request<Streaming<Bytes>>) -> Self::Future {
        let inbound = req.into_inner();
        let rx = self.replay.pushes.subscribe();
        let mut g = gate::Gate::default();
        for m in self.replay.initial.iter() {
            g.push(m.clone());
        }
        let (tx, out) = tokio::sync::mpsc::channel(STREAM_OUT);
        tokio::spawn(stream_loop(g, inbound, rx, tx, self.delta));
        let stream: RespStream = Box::pin(tokio_stream::wrappers::ReceiverStream::new(out));
        Box::pin(async move { Ok(tonic::Response::new(stream)) })
    }
}

/// One stream: queue pushes, read answers, send what the gate releases. Ends
/// with the stream (either side), or when it falls [`REPLAY_BACKLOG`] pushes
/// behind (the lagged pushes are dropped, as a stalled proxy's would be).
async fn stream_loop(
    mut g: gate::Gate,
    mut inbound: Streaming<Bytes>,
    mut pushes: broadcast::Receiver<gate::Msg>,
    out: tokio::sync::mpsc::Sender<Result<Bytes, Status>>,
    delta: bool,
) {
    loop {
        while let Some(b) = g.next_ready() {
            if out.send(Ok(b)).await.is_err() {
                return;
            }
        }
        tokio::select! {
            req = inbound.message() => match req {
                Ok(Some(b)) => {
                    if let Some(n) = answered_nonce(delta, &b) {
                        g.answered(&n);
                    }
                }
                _ => return,
            },
            push = pushes.recv(), if g.queued() < REPLAY_BACKLOG => match push {
                Ok(m) => g.push(m),
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            },
        }
    }
}

/// The replaying ADS service.
#[derive(Clone)]
pub struct ReplayService(Arc<Replay>);

impl NamedService for ReplayService {
    const NAME: &'static str = "envoy.service.discovery.v3.AggregatedDiscoveryService";
}

impl<B> Service<http::Request<B>> for ReplayService
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let path = req.uri().path().to_owned();
        let method = Method {
            replay: self.0.clone(),
            delta: path.ends_with("/DeltaAggregatedResources"),
        };
        Box::pin(async move {
            if method.delta || path.ends_with("/StreamAggregatedResources") {
                let mut grpc =
                    Grpc::new(BytesCodec).apply_max_message_size_config(None, Some(usize::MAX));
                Ok(grpc.streaming(method, req).await)
            } else {
                Ok(Status::unimplemented(format!("{path} is not replayed")).into_http())
            }
        })
    }
}

/// Worker threads of the replay server's own runtime: as many as a spawned
/// deltapilot gets on this machine, so neither side is favoured.
const REPLAY_WORKERS: usize = 2;

/// A running replay server. It runs on its own runtime (its own threads), as a
/// separate server process would, so that its work and the simulated proxies'
/// work are scheduled by the OS, not interleaved on one runtime's workers.
pub struct BaselineServer {
    /// Where it listens.
    pub addr: SocketAddr,
    replay: Arc<Replay>,
    stop: watch::Sender<bool>,
    thread: std::thread::JoinHandle<()>,
}

impl BaselineServer {
    /// Starts on a free loopback port, answering every new stream with `initial`.
    pub async fn start(initial: Vec<Bytes>) -> anyhow::Result<Self> {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let (pushes, _) = broadcast::channel(REPLAY_BACKLOG);
        let replay = Arc::new(Replay {
            initial: Arc::new(initial.into_iter().map(gate::Msg::new).collect()),
            pushes,
        });
        let (stop, mut stopped) = watch::channel(false);
        let svc = ReplayService(replay.clone());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(REPLAY_WORKERS)
            .thread_name("baseline-server")
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("baseline-server".into())
            .spawn(move || {
                rt.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(std_listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::warn!(error = %e, "baseline server cannot listen");
                            return;
                        }
                    };
                    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
                    let r = tonic::transport::Server::builder()
                        .tcp_nodelay(true)
                        .add_routes(tonic::service::Routes::new(svc))
                        .serve_with_incoming_shutdown(incoming, async move {
                            let _ = stopped.wait_for(|s| *s).await;
                        })
                        .await;
                    if let Err(e) = r {
                        tracing::warn!(error = %e, "baseline server failed");
                    }
                });
                rt.shutdown_timeout(Duration::from_secs(5));
            })?;
        Ok(BaselineServer {
            addr,
            replay,
            stop,
            thread,
        })
    }

    /// Sends `bytes` to every open stream.
    pub fn push(&self, bytes: Bytes) {
        let _ = self.replay.pushes.send(gate::Msg::new(bytes));
    }

    /// Stops serving; waits up to `within` for its thread.
    pub async fn stop(self, within: Duration) {
        let _ = self.stop.send(true);
        let thread = self.thread;
        let deadline = std::time::Instant::now() + within;
        while !thread.is_finished() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if thread.is_finished() {
            let _ = thread.join();
        }
    }
}

/// The replay server, wherever it runs.
pub enum Replayer {
    /// On its own runtime in this process.
    InProcess {
        /// The server.
        server: BaselineServer,
        /// The pushes, by index.
        pushes: Vec<Bytes>,
    },
    /// A child process.
    Child(child::ChildServer),
}

impl Replayer {
    /// Starts a child process with `own` (the load generator's binary and the
    /// arguments before `--baseline-serve`), or an in-process server without it.
    pub async fn start(
        own: Option<&(PathBuf, Vec<String>)>,
        initial: Vec<Bytes>,
        pushes: &[Push],
    ) -> anyhow::Result<Self> {
        let bytes: Vec<Bytes> = pushes.iter().map(|p| p.bytes.clone()).collect();
        Ok(match own {
            Some((exe, prefix)) => {
                Replayer::Child(child::ChildServer::start(exe, prefix, &initial, &bytes).await?)
            }
            None => Replayer::InProcess {
                server: BaselineServer::start(initial).await?,
                pushes: bytes,
            },
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        match self {
            Replayer::InProcess { server, .. } => server.addr,
            Replayer::Child(c) => c.addr,
        }
    }

    /// Its process id when it is a child.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Replayer::InProcess { .. } => None,
            Replayer::Child(c) => c.pid(),
        }
    }

    /// `process` or `in-process`.
    pub fn kind(&self) -> &'static str {
        match self {
            Replayer::InProcess { .. } => "in-process",
            Replayer::Child(_) => "process",
        }
    }

    /// Sends push `i` to every stream.
    pub async fn push(&mut self, i: usize) -> anyhow::Result<()> {
        match self {
            Replayer::InProcess { server, pushes } => {
                if let Some(p) = pushes.get(i) {
                    server.push(p.clone());
                }
                Ok(())
            }
            Replayer::Child(c) => c.push(i).await,
        }
    }

    /// Stops it (bounded).
    pub async fn stop(self, within: Duration) {
        match self {
            Replayer::InProcess { server, .. } => server.stop(within).await,
            Replayer::Child(c) => c.stop(within).await,
        }
    }
}

/// One captured push to replay.
#[derive(Debug, Clone)]
pub struct Push {
    /// Offset from the first push.
    pub offset: Duration,
    /// The response, byte for byte.
    pub bytes: Bytes,
    /// Its nonce (what the ACKs echo).
    pub nonce: String,
    /// It is an EDS response (what an endpoint change costs).
    pub eds: bool,
    /// When proxy 0 received it, on the wall clock.
    pub wall: std::time::SystemTime,
}

/// Captured responses split for the replay: what a new stream gets, and the
/// pushes.
pub fn split(captured: &[Captured]) -> (Vec<Bytes>, Vec<Push>) {
    let initial = captured
        .iter()
        .filter(|c| c.phase == Phase::Sync)
        .map(|c| c.bytes.clone())
        .collect();
    let pushes: Vec<&Captured> = captured
        .iter()
        .filter(|c| c.phase == Phase::Churn)
        .collect();
    let first = pushes.first().map(|c| c.at);
    let eds_url = deltapilot_xds::ResourceType::Endpoint.type_url();
    let pushes = pushes
        .iter()
        .map(|c| {
            let head = gate::ResponseHead::of(&c.bytes);
            Push {
                offset: first.map(|f| c.at - f).unwrap_or_default(),
                nonce: head.nonce,
                eds: head.type_url == eds_url,
                wall: c.wall,
                bytes: c.bytes.clone(),
            }
        })
        .collect();
    (initial, pushes)
}

struct PushClock {
    remaining: AtomicU32,
    last_nanos: AtomicU64,
}

/// Counts ACKs of replayed pushes: for each, when the last expected proxy ACKed.
pub struct ReplayAcks {
    base: Instant,
    by_nonce: HashMap<String, usize>,
    clocks: Vec<PushClock>,
}

impl ReplayAcks {
    /// Tracks the pushes with these nonces, each expecting `expected` ACKs.
    pub fn new(nonces: &[String], expected: u32) -> Self {
        ReplayAcks {
            base: Instant::now(),
            by_nonce: nonces
                .iter()
                .enumerate()
                .map(|(i, n)| (n.clone(), i))
                .collect(),
            clocks: nonces
                .iter()
                .map(|_| PushClock {
                    remaining: AtomicU32::new(expected),
                    last_nanos: AtomicU64::new(0),
                })
                .collect(),
        }
    }

    /// Whether push `i` is ACKed by every expected proxy.
    pub fn done(&self, i: usize) -> bool {
        self.clocks
            .get(i)
            .is_some_and(|c| c.remaining.load(Ordering::Acquire) == 0)
    }

    /// When push `i` was last ACKed.
    pub fn last_ack(&self, i: usize) -> Option<Instant> {
        let c = self.clocks.get(i)?;
        let n = c.last_nanos.load(Ordering::Acquire);
        (n > 0).then(|| self.base + Duration::from_nanos(n))
    }
}

impl AckObserver for ReplayAcks {
    fn acked(&self, nonce: &str, group: Group, at: Instant) {
        if group == Group::Untracked {
            return;
        }
        let Some(&i) = self.by_nonce.get(nonce) else {
            return;
        };
        let c = &self.clocks[i];
        let n = at.saturating_duration_since(self.base).as_nanos().max(1) as u64;
        c.last_nanos.fetch_max(n, Ordering::AcqRel);
        let _ = c
            .remaining
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(1));
    }
}
