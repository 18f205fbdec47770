//! Connection limits over real sockets on loopback (issue 29, point 4): raw TCP
//! connections that never finish a request are closed after the handshake
//! timeout, connections above a cap are closed at once while a real gRPC client
//! still gets its configuration, a peer that stops answering HTTP/2 pings is
//! dropped while a healthy stream stays, and idle admin connections are closed.
//!
//! Timeouts here are behaviour bounds (closed after the timeout and within twice
//! it), not performance figures.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use deltapilot_server::admin::ReadyFn;
use deltapilot_server::conn::{ConnLimits, XdsConnOptions};
use deltapilot_server::metrics::Metrics;
use deltapilot_server::xds::Limits;
use deltapilot_server::xds::service::{PublishClock, XdsShared, serve_with};
use deltapilot_xds::snapshot::{Snapshot, SnapshotWriter};
use deltapilot_xds::{ChangeSet, Resource, ResourceType};
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse,
};
use support::metric;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

const WAIT: Duration = Duration::from_secs(10);

/// The HTTP/2 client preface, and an empty SETTINGS frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const EMPTY_SETTINGS: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];

struct Server {
    writer: SnapshotWriter,
    metrics: Arc<Metrics>,
    addr: SocketAddr,
    _drain: watch::Sender<bool>,
    _ready: watch::Sender<bool>,
}

fn with_cluster(prev: &Snapshot, name: &str) -> Snapshot {
    let mut s = prev.clone();
    s.seq += 1;
    let n: Arc<str> = Arc::from(name);
    s.resources.clusters.insert(Arc::new(Resource::new(
        n.clone(),
        Bytes::from(format!("\x0a\x02{name}")),
    )));
    let mut cs = ChangeSet::default();
    cs.of_mut(ResourceType::Cluster).upserted.insert(n);
    s.recent.push_back((s.seq, Arc::new(cs)));
    s
}

async fn start(opts: XdsConnOptions) -> Server {
    let (writer, reader) = SnapshotWriter::new(with_cluster(&Snapshot::default(), "c1"));
    let metrics = Arc::new(Metrics::new());
    let (drain, drain_rx) = watch::channel(false);
    let (ready, ready_rx) = watch::channel(true);
    let shared = XdsShared::new(
        reader,
        Limits::default(),
        metrics.clone(),
        drain_rx,
        ready_rx,
        Arc::new(PublishClock::default()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(serve_with(listener, shared, opts));
    Server {
        writer,
        metrics,
        addr,
        _drain: drain,
        _ready: ready,
    }
}

fn opts(limits: ConnLimits) -> XdsConnOptions {
    XdsConnOptions {
        limits,
        ..XdsConnOptions::default()
    }
}

/// A delta ADS stream on its own connection that has received (with `c1`) and
/// ACKed the clusters.
struct Client {
    tx: mpsc::Sender<DeltaDiscoveryRequest>,
    rx: Streaming<DeltaDiscoveryResponse>,
}

fn cds(nonce: &str) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        type_url: ResourceType::Cluster.type_url().into(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

impl Client {
    async fn connect(addr: SocketAddr) -> Client {
        let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .expect("uri")
            .connect()
            .await
            .expect("connect");
        let (tx, rx) = mpsc::channel(16);
        let mut client = AggregatedDiscoveryServiceClient::new(channel);
        let rx = client
            .delta_aggregated_resources(ReceiverStream::new(rx))
            .await
            .expect("stream")
            .into_inner();
        let mut c = Client { tx, rx };
        c.tx.send(cds("")).await.expect("send");
        let r = c.recv().await;
        assert!(
            names(&r).contains(&"c1"),
            "the initial clusters: {:?}",
            names(&r)
        );
        c.tx.send(cds(&r.nonce)).await.expect("ack");
        c
    }

    async fn recv(&mut self) -> DeltaDiscoveryResponse {
        tokio::time::timeout(WAIT, self.rx.message())
            .await
            .expect("a response in time")
            .expect("the stream is healthy")
            .expect("a message")
    }

    /// Publishes `name` on `srv` and checks this stream receives it (and ACKs).
    async fn gets_push(&mut self, srv: &Server, name: &str) {
        srv.writer
            .publish(with_cluster(&srv.writer.current(), name));
        let r = self.recv().await;
        assert_eq!(names(&r), [name]);
        self.tx.send(cds(&r.nonce)).await.expect("ack");
    }
}

fn names(r: &DeltaDiscoveryResponse) -> Vec<&str> {
    r.resources.iter().map(|r| r.name.as_str()).collect()
}

/// A raw TCP connection to `addr` from the loopback address `from`.
async fn raw_from(from: [u8; 4], addr: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().expect("socket");
    s.bind(SocketAddr::from((from, 0))).expect("bind source");
    s.connect(addr).await.expect("connect")
}

/// Reads (and discards, e.g. the server's SETTINGS) until the server closes the
/// connection, and returns how long after `since` that was; `Err` if it is
/// still open at `since + within`.
async fn closed_by(
    s: &mut TcpStream,
    since: Instant,
    within: Duration,
) -> Result<Duration, String> {
    let mut buf = [0u8; 4096];
    let deadline = since + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return Err(format!("still open after {within:?}")),
            Ok(Ok(0) | Err(_)) => return Ok(since.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

/// Polls `metrics` every 50 ms until `name{labels}` equals `want`, for at most
/// `within`.
async fn metric_becomes(
    metrics: &Metrics,
    name: &str,
    labels: &[&str],
    want: f64,
    within: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        let text = metrics.encode();
        let got = metric(&text, name, labels);
        if got == want {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{name}{labels:?} is {got}, not {want}, after {within:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const XDS: &str = "listener=\"xds\"";
const ADMIN: &str = "listener=\"admin\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_send_no_request_are_closed_after_the_handshake_timeout() {
    let timeout = Duration::from_secs(2);
    let srv = start(opts(ConnLimits {
        max_connections: 1000,
        max_per_source: 0,
        request_timeout: timeout,
    }))
    .await;
    let mut healthy = Client::connect(srv.addr).await;

    // 100 connections that never finish a request: 40 send nothing, 30 half a
    // preface, 30 the whole preface and their SETTINGS but open no stream.
    let mut raws = Vec::new();
    for i in 0..100 {
        let since = Instant::now();
        let mut s = raw_from([127, 0, 0, 1], srv.addr).await;
        if i >= 40 {
            s.write_all(&PREFACE[..12]).await.expect("write");
        }
        if i >= 70 {
            s.write_all(&PREFACE[12..]).await.expect("write");
            s.write_all(EMPTY_SETTINGS).await.expect("write");
        }
        raws.push((s, since));
    }
    let closed = futures::future::join_all(
        raws.iter_mut()
            .map(|(s, since)| closed_by(s, *since, 2 * timeout)),
    )
    .await;
    for (i, c) in closed.into_iter().enumerate() {
        let after = c.unwrap_or_else(|e| panic!("connection {i}: {e}"));
        assert!(
            after >= timeout,
            "connection {i} closed before the timeout, after {after:?}"
        );
    }
    let text = srv.metrics.encode();
    assert_eq!(
        metric(&text, "deltapilot_connections_timed_out_total", &[XDS]),
        100.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, "deltapilot_connections_accepted_total", &[XDS]),
        101.0,
        "{text}"
    );
    metric_becomes(
        &srv.metrics,
        "deltapilot_connections_open",
        &[XDS],
        1.0,
        WAIT,
    )
    .await
    .expect("only the healthy connection left");
    // The stream that made its request before the timeout is untouched by it.
    healthy.gets_push(&srv, "c2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_above_a_cap_are_closed_at_once_and_a_client_still_gets_its_config() {
    let srv = start(opts(ConnLimits {
        max_connections: 6,
        max_per_source: 3,
        request_timeout: Duration::from_secs(60),
    }))
    .await;
    let at_once = Duration::from_secs(5);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(raw_from([127, 0, 0, 2], srv.addr).await);
    }
    // A fourth from the same address is over the per-source cap.
    let mut over = raw_from([127, 0, 0, 2], srv.addr).await;
    closed_by(&mut over, Instant::now(), at_once)
        .await
        .expect("closed over the per-source cap");
    let mut others = Vec::new();
    for _ in 0..2 {
        others.push(raw_from([127, 0, 0, 3], srv.addr).await);
    }
    // The sixth connection: a real client, which gets its configuration.
    let mut client = Client::connect(srv.addr).await;
    // A seventh, from an address of its own, is over the listener's cap.
    let mut over = raw_from([127, 0, 0, 4], srv.addr).await;
    closed_by(&mut over, Instant::now(), at_once)
        .await
        .expect("closed over the total cap");
    let text = srv.metrics.encode();
    let refused = "deltapilot_connections_refused_total";
    assert_eq!(
        metric(&text, refused, &[XDS, "reason=\"max_connections\""]),
        1.0,
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            refused,
            &[XDS, "reason=\"max_connections_per_source\""]
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, "deltapilot_connections_open", &[XDS]),
        6.0,
        "{text}"
    );
    // The held connections are still open (a refusal closed only the one above
    // the cap).
    for s in held.iter_mut().chain(others.iter_mut()) {
        let r = closed_by(s, Instant::now(), Duration::from_millis(300)).await;
        assert!(r.is_err(), "a held connection was closed: {r:?}");
    }
    client.gets_push(&srv, "c2").await;
    // Closed connections free their slots: another client is served.
    drop(others);
    metric_becomes(
        &srv.metrics,
        "deltapilot_connections_open",
        &[XDS],
        4.0,
        WAIT,
    )
    .await
    .expect("slots freed");
    let _second = Client::connect(srv.addr).await;
}

/// A TCP proxy between a client and the server that can freeze: it then keeps
/// both sockets open and moves no byte, like a peer whose host vanished.
async fn freezable_proxy(upstream: SocketAddr) -> (SocketAddr, watch::Sender<bool>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind proxy");
    let addr = listener.local_addr().expect("addr");
    let (freeze, frozen) = watch::channel(false);
    tokio::spawn(async move {
        let Ok((down, _)) = listener.accept().await else {
            return;
        };
        let up = TcpStream::connect(upstream).await.expect("upstream");
        let (dr, dw) = down.into_split();
        let (ur, uw) = up.into_split();
        tokio::spawn(pipe(dr, uw, frozen.clone()));
        pipe(ur, dw, frozen).await;
    });
    (addr, freeze)
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut frozen: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            // `changed`, not `wait_for`: its guard would make the future !Send.
            _ = frozen.changed() => break,
            n = from.read(&mut buf) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => if to.write_all(&buf[..n]).await.is_err() { return },
            },
        }
    }
    // Frozen: hold both halves, read and write nothing, until the test ends.
    std::future::pending::<()>().await;
    drop((from, to));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_stops_answering_pings_is_dropped_and_a_healthy_stream_stays() {
    let (interval, timeout) = (Duration::from_secs(1), Duration::from_secs(2));
    let srv = start(XdsConnOptions {
        keepalive_interval: interval,
        keepalive_timeout: timeout,
        ..XdsConnOptions::default()
    })
    .await;
    let mut healthy = Client::connect(srv.addr).await;
    let (via_proxy, freeze) = freezable_proxy(srv.addr).await;
    let _vanishing = Client::connect(via_proxy).await;
    let text = srv.metrics.encode();
    assert_eq!(
        metric(&text, "deltapilot_connections_open", &[XDS]),
        2.0,
        "{text}"
    );
    freeze.send(true).expect("freeze");
    let frozen_at = Instant::now();
    metric_becomes(
        &srv.metrics,
        "deltapilot_connections_open",
        &[XDS],
        1.0,
        2 * (interval + timeout),
    )
    .await
    .expect("the silent peer's connection closed by keepalive");
    assert!(
        frozen_at.elapsed() >= timeout,
        "closed before a ping could time out"
    );
    // The healthy stream answered every ping meanwhile and still gets pushes.
    healthy.gets_push(&srv, "c2").await;
    let text = srv.metrics.encode();
    assert_eq!(
        metric(&text, "deltapilot_connections_open", &[XDS]),
        1.0,
        "{text}"
    );
}

/// `GET path` on `s` (kept alive); the status code, once the whole response
/// (with a content-length) is read.
async fn get_keep_alive(s: &mut TcpStream, path: &str) -> u16 {
    let req = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + WAIT;
    loop {
        let n = tokio::time::timeout_at(deadline, s.read(&mut buf))
            .await
            .expect("a response in time")
            .expect("read");
        assert!(
            n > 0,
            "closed before the response: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_owned)
                })
                .and_then(|v| v.trim().parse().ok())
                .expect("content-length");
            if body.len() >= len {
                return head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|c| c.parse().ok())
                    .expect("status");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_silent_admin_connections_are_closed_and_the_per_source_cap_holds() {
    let timeout = Duration::from_secs(2);
    let metrics = Arc::new(Metrics::new());
    let ready: ReadyFn = Arc::new(deltapilot_server::readiness::Readiness::caught_up);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let routes = deltapilot_server::admin::router(metrics.clone(), ready);
    let limits = ConnLimits {
        max_connections: 16,
        max_per_source: 2,
        request_timeout: timeout,
    };
    {
        let metrics = metrics.clone();
        tokio::spawn(async move {
            deltapilot_server::admin::serve_routes(
                listener,
                routes,
                limits,
                &metrics,
                std::future::pending(),
            )
            .await
        });
    }
    // Silent from the start.
    let since = Instant::now();
    let mut silent = raw_from([127, 0, 0, 5], addr).await;
    // Idle after one request on a kept-alive connection.
    let mut kept = raw_from([127, 0, 0, 6], addr).await;
    // The server's idle timer starts once it has written the response, which
    // is after the request left and before the client has read the answer:
    // the instant before the request is the bound that cannot be late.
    let idle_since = Instant::now();
    assert_eq!(get_keep_alive(&mut kept, "/healthz").await, 200);
    // The per-source cap: a third connection from 127.0.0.5 is closed at once.
    let _second = raw_from([127, 0, 0, 5], addr).await;
    let mut third = raw_from([127, 0, 0, 5], addr).await;
    let refused_at = Instant::now();
    closed_by(&mut third, refused_at, Duration::from_secs(5))
        .await
        .expect("closed over the per-source cap");
    let after = closed_by(&mut silent, since, 2 * timeout)
        .await
        .expect("silent connection closed");
    assert!(
        after >= timeout,
        "silent connection closed after {after:?}, before the timeout"
    );
    let after = closed_by(&mut kept, idle_since, 2 * timeout)
        .await
        .expect("idle kept-alive connection closed");
    assert!(
        after >= timeout,
        "idle connection closed after {after:?}, before the timeout"
    );
    // The metrics, over a connection of their own.
    let mut scrape = raw_from([127, 0, 0, 1], addr).await;
    assert_eq!(get_keep_alive(&mut scrape, "/metrics").await, 200);
    let text = metrics.encode();
    assert_eq!(
        metric(
            &text,
            "deltapilot_connections_refused_total",
            &[ADMIN, "reason=\"max_connections_per_source\""]
        ),
        1.0,
        "{text}"
    );
    assert!(
        metric(&text, "deltapilot_connections_timed_out_total", &[ADMIN]) >= 2.0,
        "{text}"
    );
}
