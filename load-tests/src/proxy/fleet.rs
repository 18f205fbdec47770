//! N simulated proxies as tasks: connecting them (a bounded number at a time),
//! running each one's read–handle–ACK loop, counting what they receive, capturing
//! one proxy's responses for the baseline replay, and steering them all (reconnect
//! storm, stop) through one `watch` channel.
//!
//! Each proxy opens its own `Channel` (so its own TCP connection), sends its
//! opening requests, then loops: read a response, handle it, send the ACK and any
//! subscription change, then report the ACK to the convergence tracker. A slow
//! proxy sleeps before handling; a stalled one stops reading once synced. Running
//! out of file descriptors is detected and reported, never retried.
//!
//! What it does NOT do: decide what is subscribed or ACKed (see `delta`, `sotw`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use deltapilot_xds::ResourceType;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Endpoint;

use super::codec::BytesCodec;
use super::{Behaviour, ClientState, node};
use crate::scenario::Api;
use crate::tracker::{Cursor, Group, Tracker};

/// Requests a proxy may have queued for its connection: at most an ACK and a
/// subscription change per type (8), plus the four opening requests of a
/// reconnect; more would mean the connection stopped taking requests, and then
/// waiting is right.
const REQUEST_QUEUE: usize = 16;

/// Largest response a proxy accepts. A large mesh's initial CDS or route
/// configuration runs to megabytes; Envoy's own limit is far higher than gRPC's
/// default of 4 MiB.
const MAX_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

/// HTTP/2 flow-control windows: large enough that a multi-megabyte initial sync
/// is not throttled to one window per round trip. Windows are credit, not memory.
const WINDOW: u32 = 4 * 1024 * 1024;

/// Most connections one proxy opens in a run: the first, one per reconnect storm,
/// and slack; a proxy never retries a failed connection on its own.
const MAX_CONNECTIONS: usize = 4;

/// Most responses captured from proxy 0 for the baseline replay; a run with more
/// pushes than this replays the first ones.
const MAX_CAPTURE: usize = 20_000;

/// What the fleet is doing; responses are counted per phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum Phase {
    /// Connecting and the initial sync.
    Sync = 0,
    /// The reconnect storm.
    Storm = 1,
    /// Churn, and the drain after it.
    Churn = 2,
}

/// Orders for every proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Keep going.
    Run,
    /// Drop the connection and reconnect (generation `n`, counted from 1).
    Reconnect(u32),
    /// Close and end.
    Stop,
}

/// One captured response of proxy 0.
#[derive(Debug, Clone)]
pub struct Captured {
    /// The phase it arrived in.
    pub phase: Phase,
    /// When it arrived.
    pub at: Instant,
    /// The same moment on the wall clock (what change append times are on).
    pub wall: SystemTime,
    /// Its bytes, exactly as received.
    pub bytes: Bytes,
}

/// Told of every ACK (the baseline's raw fan-out clock).
pub trait AckObserver: Send + Sync {
    /// Proxy of `group` ACKed the response with `nonce` at `at`.
    fn acked(&self, nonce: &str, group: Group, at: Instant);
}

/// Counters over the whole fleet.
#[derive(Debug, Default)]
pub struct Counters {
    /// Streams opened.
    pub connected: AtomicU64,
    /// Proxies that finished their initial sync.
    pub synced: AtomicU64,
    /// Responses received, all phases.
    pub responses: AtomicU64,
    /// Bytes of responses received, all phases.
    pub bytes: AtomicU64,
    /// Responses received during churn by proxies already synced.
    pub push_responses: AtomicU64,
    /// Their bytes.
    pub push_bytes: AtomicU64,
    /// Bytes of what actually changed in them.
    pub push_changed_bytes: AtomicU64,
    /// Bytes of EDS responses among them (what endpoint changes cost).
    pub push_eds_bytes: AtomicU64,
    /// Bytes of what actually changed in those EDS responses.
    pub push_eds_changed_bytes: AtomicU64,
    /// Route configurations with new content received during churn.
    pub push_routes: AtomicU64,
    /// Their bytes (each route configuration's own size).
    pub push_route_bytes: AtomicU64,
    /// Resources received during the reconnect storm.
    pub storm_resources: AtomicU64,
    /// Responses received during the reconnect storm.
    pub storm_responses: AtomicU64,
    /// Streams re-opened by the reconnect storm.
    pub reconnected: AtomicU64,
    /// Names reported in `initial_resource_versions` by reconnecting proxies.
    pub reconnect_known: AtomicU64,
    /// NACKs sent.
    pub nacks: AtomicU64,
    /// Proxies that ended with an error.
    pub errors: AtomicU64,
    /// Stream openings retried after a failure.
    pub connect_retries: AtomicU64,
    /// Expected proxies that, when stopped, had ACKed every tracked change.
    pub converged: AtomicU64,
}

/// Fixed settings of a fleet.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// The xDS server.
    pub target: SocketAddr,
    /// The protocol.
    pub api: Api,
    /// Slow proxies' delay per response.
    pub slow_delay: Duration,
    /// Most connection attempts in flight.
    pub connect_concurrency: usize,
    /// Bound on one connection attempt (TCP connect plus the stream opening).
    pub connect_timeout: Duration,
    /// Capture proxy 0's responses.
    pub capture: bool,
}

/// State shared by every proxy task.
pub struct FleetShared {
    cfg: FleetConfig,
    /// Counters.
    pub counters: Counters,
    tracker: Arc<Tracker>,
    observer: Option<Arc<dyn AckObserver>>,
    started: Instant,
    sync_times: Mutex<Vec<Duration>>,
    capture: Mutex<Vec<Captured>>,
    phase: AtomicU8,
    connect: Semaphore,
    first_error: Mutex<Option<String>>,
    /// Set when a connection failed for lack of file descriptors.
    pub fd_exhausted: AtomicBool,
}

/// A running fleet.
pub struct Fleet {
    /// Shared state (counters, captured responses).
    pub shared: Arc<FleetShared>,
    control: watch::Sender<Control>,
    tasks: JoinSet<()>,
    size: usize,
}

/// Whether an error chain is the process running out of descriptors.
pub fn is_fd_exhaustion(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && matches!(io.raw_os_error(), Some(23 | 24))
        {
            return true;
        }
        if err.to_string().contains("Too many open files") {
            return true;
        }
        cur = err.source();
    }
    false
}

impl FleetShared {
    fn fail(&self, msg: String) {
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        first.get_or_insert(msg);
    }

    /// Records the exhaustion as the first error (if none yet) *before* raising
    /// the flag, so whoever sees the flag also sees why; the caller still counts
    /// the error through `fail` when the proxy gives up.
    fn note_fd_exhausted(&self, msg: &str) {
        {
            let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
            first.get_or_insert_with(|| msg.to_owned());
        }
        self.fd_exhausted.store(true, Ordering::Release);
    }

    /// The first error any proxy hit.
    pub fn first_error(&self) -> Option<String> {
        self.first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// When each synced proxy finished its initial sync, from the fleet's start.
    pub fn sync_times(&self) -> Vec<Duration> {
        self.sync_times
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Proxy 0's captured responses.
    pub fn captured(&self) -> Vec<Captured> {
        self.capture
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// When the fleet started connecting.
    pub fn started(&self) -> Instant {
        self.started
    }

    fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Relaxed) {
            0 => Phase::Sync,
            1 => Phase::Storm,
            _ => Phase::Churn,
        }
    }
}

impl Fleet {
    /// Starts one task per entry of `behaviours` (proxy `i` gets `node(i)`).
    pub fn start(
        cfg: FleetConfig,
        behaviours: &[Behaviour],
        tracker: Arc<Tracker>,
        observer: Option<Arc<dyn AckObserver>>,
    ) -> anyhow::Result<Fleet> {
        let endpoint = endpoint(cfg.target, cfg.connect_timeout)?;
        let shared = Arc::new(FleetShared {
            connect: Semaphore::new(cfg.connect_concurrency),
            cfg,
            counters: Counters::default(),
            tracker,
            observer,
            started: Instant::now(),
            sync_times: Mutex::new(Vec::with_capacity(behaviours.len())),
            capture: Mutex::new(Vec::new()),
            phase: AtomicU8::new(Phase::Sync as u8),
            first_error: Mutex::new(None),
            fd_exhausted: AtomicBool::new(false),
        });
        let (control, rx) = watch::channel(Control::Run);
        let mut tasks = JoinSet::new();
        for (i, b) in behaviours.iter().copied().enumerate() {
            let endpoint = endpoint
                .clone()
                .local_address(source_address(shared.cfg.target, i));
            let (shared, rx) = (shared.clone(), rx.clone());
            tasks.spawn(async move {
                if let Err(e) = run_proxy(i, b, &shared, endpoint, rx).await {
                    shared.fail(format!("proxy {i}: {e}"));
                }
            });
        }
        Ok(Fleet {
            shared,
            control,
            tasks,
            size: behaviours.len(),
        })
    }

    /// Number of proxies.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Counts responses as belonging to `phase` from now on.
    pub fn set_phase(&self, phase: Phase) {
        self.shared.phase.store(phase as u8, Ordering::Relaxed);
    }

    /// Tells every proxy to drop its connection and reconnect.
    pub fn reconnect(&self, generation: u32) {
        let _ = self.control.send(Control::Reconnect(generation));
    }

    /// Proxy tasks still running.
    pub fn running(&self) -> usize {
        self.tasks.len()
    }

    /// Stops every proxy, closing its connection; tasks still running after
    /// `within` are aborted.
    pub async fn stop(mut self, within: Duration) {
        let _ = self.control.send(Control::Stop);
        let all = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(within, all).await.is_err() {
            self.tasks.abort_all();
            while self.tasks.join_next().await.is_some() {}
        }
    }
}

/// A stream's responses.
pub type Inbound = tonic::Streaming<Bytes>;

/// Why a stream could not be opened.
#[derive(Debug)]
pub struct OpenError {
    /// What went wrong, with the whole error chain.
    pub message: String,
    /// The process ran out of file descriptors.
    pub fd_exhausted: bool,
}

/// The address proxy `i` connects from when the server is on IPv4 loopback: its
/// own `127.x.y.z`, as distinct hosts would each have their own. From one
/// shared address, every connect must find a free ephemeral port towards the
/// same destination, and during a reconnect storm (10,000 connects at once,
/// with the previous 10,000 connections in TIME_WAIT) that search
/// (`__inet_hash_connect`) took a large share of the load generator's CPU on
/// the shared cores: a cost of the simulation, not of any proxy. Elsewhere the
/// OS picks, as before.
pub fn source_address(target: SocketAddr, i: usize) -> Option<std::net::IpAddr> {
    match target.ip() {
        std::net::IpAddr::V4(v4) if v4.is_loopback() => {
            let [_, a, b, c] = u32::try_from(i).ok()?.to_be_bytes();
            // 127.1.0.0 upwards: never 127.0.0.1 itself, and 2^24 proxies fit.
            Some(std::net::Ipv4Addr::new(127, a.checked_add(1)?, b, c).into())
        }
        _ => None,
    }
}

/// The ADS endpoint of an xDS server at `target`, with the settings every
/// simulated proxy uses.
pub fn endpoint(target: SocketAddr, connect_timeout: Duration) -> anyhow::Result<Endpoint> {
    Ok(Endpoint::from_shared(format!("http://{target}"))?
        .tcp_nodelay(true)
        .connect_timeout(connect_timeout)
        .initial_stream_window_size(Some(WINDOW))
        .initial_connection_window_size(Some(WINDOW)))
}

/// Opens a new connection and one ADS stream on it, with `opening` queued as the
/// first requests.
pub async fn open_stream(
    endpoint: &Endpoint,
    api: Api,
    timeout: Duration,
    opening: Vec<Bytes>,
) -> Result<(mpsc::Sender<Bytes>, Inbound), OpenError> {
    let fail = |message: String| OpenError {
        message,
        fd_exhausted: false,
    };
    let path = match api {
        Api::Delta => {
            "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
        }
        Api::Sotw => {
            "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
        }
    };
    let channel = match endpoint.connect().await {
        Ok(c) => c,
        Err(e) => {
            let mut message = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                message = format!("{message}: {s}");
                src = s.source();
            }
            return Err(OpenError {
                fd_exhausted: is_fd_exhaustion(&e),
                message: format!("connecting to {}: {message}", endpoint.uri()),
            });
        }
    };
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_RESPONSE_BYTES);
    grpc.ready()
        .await
        .map_err(|e| fail(format!("channel not ready: {e}")))?;
    let (tx, rx) = mpsc::channel(REQUEST_QUEUE);
    for r in opening {
        tx.send(r)
            .await
            .map_err(|_| fail("request queue closed".to_owned()))?;
    }
    let call = grpc.streaming(
        tonic::Request::new(ReceiverStream::new(rx)),
        PathAndQuery::from_static(path),
        BytesCodec,
    );
    let resp = tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| fail(format!("no response headers within {timeout:?}")))?
        .map_err(|s| fail(format!("opening the stream: {s}")))?;
    Ok((tx, resp.into_inner()))
}

/// Attempts to open a stream before a proxy gives up, as an Envoy would retry:
/// a burst of thousands of connections now and then meets a reset.
const OPEN_ATTEMPTS: u32 = 4;

/// First retry delay; doubled per attempt, plus up to as much again of jitter.
const OPEN_BACKOFF: Duration = Duration::from_millis(100);

async fn open(
    shared: &FleetShared,
    endpoint: &Endpoint,
    opening: Vec<Bytes>,
) -> Result<(mpsc::Sender<Bytes>, Inbound), String> {
    let mut last = String::new();
    for attempt in 0..OPEN_ATTEMPTS {
        if attempt > 0 {
            shared
                .counters
                .connect_retries
                .fetch_add(1, Ordering::Relaxed);
            let base = OPEN_BACKOFF * 2u32.pow(attempt - 1);
            let jitter = base.mul_f64(rand::random::<f64>());
            tokio::time::sleep(base + jitter).await;
        }
        let permit = shared
            .connect
            .acquire()
            .await
            .map_err(|_| "connection limiter closed".to_owned())?;
        let r = open_stream(
            endpoint,
            shared.cfg.api,
            shared.cfg.connect_timeout,
            opening.clone(),
        )
        .await;
        drop(permit);
        match r {
            Ok(ok) => return Ok(ok),
            Err(e) if e.fd_exhausted => {
                shared.note_fd_exhausted(&e.message);
                return Err(e.message);
            }
            Err(e) => last = e.message,
        }
    }
    Err(format!("{last} (after {OPEN_ATTEMPTS} attempts)"))
}

enum Next {
    Reconnect,
    Stop,
}

async fn run_proxy(
    i: usize,
    behaviour: Behaviour,
    shared: &FleetShared,
    endpoint: Endpoint,
    mut control: watch::Receiver<Control>,
) -> Result<(), String> {
    let group = behaviour.group();
    let mut state = ClientState::new(shared.cfg.api, node(i));
    let mut cursor = Cursor::default();
    let mut generation = 0u32;
    let mut reconnect = false;
    let mut synced = false;
    let c = &shared.counters;
    for _ in 0..MAX_CONNECTIONS {
        if *control.borrow() == Control::Stop {
            return Ok(());
        }
        let opening = state.initial_requests(reconnect);
        let known = state.known_count();
        let (tx, mut inbound) = tokio::select! {
            r = open(shared, &endpoint, opening) => r?,
            _ = control.wait_for(|c| *c == Control::Stop) => return Ok(()),
        };
        c.connected.fetch_add(1, Ordering::Relaxed);
        if reconnect {
            c.reconnected.fetch_add(1, Ordering::Relaxed);
            c.reconnect_known.fetch_add(known as u64, Ordering::Relaxed);
        }
        let mut stalled = behaviour == Behaviour::Stall && synced;
        let next = loop {
            tokio::select! {
                biased;
                r = control.changed() => {
                    if r.is_err() {
                        break Next::Stop;
                    }
                    match *control.borrow_and_update() {
                        Control::Stop => break Next::Stop,
                        Control::Reconnect(g) if g > generation => {
                            generation = g;
                            break Next::Reconnect;
                        }
                        _ => {}
                    }
                }
                msg = inbound.message(), if !stalled => {
                    let bytes = match msg {
                        Ok(Some(b)) => b,
                        Ok(None) => return Err("the server ended the stream".into()),
                        Err(s) => return Err(format!("stream failed: {s}")),
                    };
                    if behaviour == Behaviour::Slow {
                        tokio::time::sleep(shared.cfg.slow_delay).await;
                    }
                    let phase = shared.phase();
                    if i == 0 && shared.cfg.capture {
                        let mut cap = shared.capture.lock().unwrap_or_else(|p| p.into_inner());
                        if cap.len() < MAX_CAPTURE {
                            cap.push(Captured { phase, at: Instant::now(), wall: SystemTime::now(), bytes: bytes.clone() });
                        }
                    }
                    let nack = behaviour == Behaviour::Nack && synced;
                    let h = state
                        .on_response(&bytes, nack)
                        .map_err(|e| format!("undecodable response: {e}"))?;
                    c.responses.fetch_add(1, Ordering::Relaxed);
                    c.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    match phase {
                        Phase::Storm => {
                            c.storm_responses.fetch_add(1, Ordering::Relaxed);
                            c.storm_resources.fetch_add(h.resources as u64, Ordering::Relaxed);
                        }
                        Phase::Churn if synced => {
                            c.push_responses.fetch_add(1, Ordering::Relaxed);
                            c.push_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                            c.push_changed_bytes.fetch_add(h.changed_bytes as u64, Ordering::Relaxed);
                            if h.t == Some(ResourceType::Endpoint) {
                                c.push_eds_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                                c.push_eds_changed_bytes.fetch_add(h.changed_bytes as u64, Ordering::Relaxed);
                            }
                            c.push_routes.fetch_add(h.routes.len() as u64, Ordering::Relaxed);
                            let route_bytes: usize = h.routes.iter().map(|(_, b)| b.len()).sum();
                            c.push_route_bytes.fetch_add(route_bytes as u64, Ordering::Relaxed);
                        }
                        _ => {}
                    }
                    if h.nacked {
                        c.nacks.fetch_add(1, Ordering::Relaxed);
                    }
                    for r in h.requests {
                        tx.send(r).await.map_err(|_| "the connection stopped taking requests".to_owned())?;
                    }
                    let now = SystemTime::now();
                    for (cluster, addrs) in &h.cla {
                        shared.tracker.on_endpoints(&mut cursor, cluster, addrs, group, now);
                    }
                    for cluster in &h.gone {
                        shared.tracker.on_cluster_gone(&mut cursor, cluster, group, now);
                    }
                    for (route, bytes) in &h.routes {
                        shared.tracker.on_route(&mut cursor, route, bytes, group, now);
                    }
                    if !h.nacked && let Some(o) = &shared.observer {
                        o.acked(&h.nonce, group, Instant::now());
                    }
                    if !synced && state.synced() {
                        synced = true;
                        c.synced.fetch_add(1, Ordering::Relaxed);
                        shared
                            .sync_times
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(shared.started.elapsed());
                        stalled = behaviour == Behaviour::Stall;
                    }
                }
            }
        };
        match next {
            Next::Stop => {
                if group != Group::Untracked && synced && shared.tracker.caught_up(&cursor) {
                    c.converged.fetch_add(1, Ordering::Relaxed);
                }
                return Ok(());
            }
            Next::Reconnect => reconnect = true,
        }
    }
    Err(format!("reconnected more than {MAX_CONNECTIONS} times"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxies_on_loopback_get_distinct_source_addresses() {
        let lo: SocketAddr = "127.0.0.1:18000".parse().expect("addr");
        let a: Vec<_> = [0, 1, 256, 65_536]
            .iter()
            .map(|i| source_address(lo, *i).expect("loopback source").to_string())
            .collect();
        assert_eq!(a, ["127.1.0.0", "127.1.0.1", "127.1.1.0", "127.2.0.0"]);
        let remote: SocketAddr = "10.0.0.1:18000".parse().expect("addr");
        assert_eq!(source_address(remote, 3), None);
    }
}
