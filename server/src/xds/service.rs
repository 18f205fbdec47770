//! The gRPC services: ADS (`DeltaAggregatedResources`, `StreamAggregatedResources`)
//! and the per-type CDS/EDS/LDS/RDS services, all running the same state machines.
//!
//! Each stream is a thin loop: send whatever the state machine allows, then wait
//! for the next request, snapshot, drain signal or stall deadline. The loop is the
//! response body itself (see `run_stream`): hyper's per-stream task polls it, so
//! there is no task or channel of ours per stream. Because at most one response per
//! type is in flight, nothing ever queues; a client that stops reading only stops
//! its own stream (its state keeps coalescing).
//!
//! The services are hand-written tower services rather than envoy-types' generated
//! ones, and frame messages themselves (see `frame`): responses are written from
//! shared resource bytes into one exactly sized buffer each, requests are decoded
//! leanly (see `request`), and no per-stream buffer outlives its message.
//!
//! What it does NOT do: decide what to send (see `delta` and `sotw`).

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use deltapilot_model::Proxy;
use deltapilot_xds::ResourceType;
use deltapilot_xds::snapshot::Snapshot;
use deltapilot_xds::snapshot::SnapshotReader;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use tokio::sync::watch;
use tonic::Status;
use tonic::codegen::{Body, BoxFuture, Context, Poll, Service, StdError, http};
use tonic::server::NamedService;

use super::delta::DeltaStream;
use super::encode::{DeltaOut, SotwOut, WireOut};
use super::frame::{Inbound, Outbound, response};
use super::registry::{Inspect, StreamRegistry, TypeStatus};
use super::request::DeltaRequest;
use super::sotw::SotwStream;
use super::{Limits, RequestOutcome};
use crate::Error;
use crate::conn::ConnInfo;
use crate::credentials::CredentialStore;
use crate::credentials::stream::{DeltaSecrets, SecretSide, SotwSecrets};
use crate::metrics::Metrics;
use crate::tls::PeerIdentity;

pub use super::clock::{CLOCK_HISTORY, ObservedAt, PublishClock};

/// Everything the streams share.
pub struct XdsShared {
    snapshots: SnapshotReader,
    limits: Limits,
    pub(super) metrics: Arc<Metrics>,
    pub(super) drain: watch::Receiver<bool>,
    ready: watch::Receiver<bool>,
    observed: Arc<dyn ObservedAt>,
    next_stream: AtomicU64,
    open_streams: AtomicUsize,
    streams: Arc<StreamRegistry>,
    credentials: OnceLock<Arc<CredentialStore>>,
}

impl XdsShared {
    /// Shared state for every service. `drain` turning `true` ends every stream with
    /// `UNAVAILABLE` and refuses new ones. Streams answer nothing until `ready` is
    /// `true` (the engine has caught up with the log): a half-folded snapshot would
    /// tell reconnecting proxies to delete what they correctly hold.
    pub fn new(
        snapshots: SnapshotReader,
        limits: Limits,
        metrics: Arc<Metrics>,
        drain: watch::Receiver<bool>,
        ready: watch::Receiver<bool>,
        observed: Arc<dyn ObservedAt>,
    ) -> Arc<Self> {
        Arc::new(XdsShared {
            snapshots,
            limits,
            metrics,
            drain,
            ready,
            observed,
            next_stream: AtomicU64::new(1),
            open_streams: AtomicUsize::new(0),
            streams: Arc::new(StreamRegistry::default()),
            credentials: OnceLock::new(),
        })
    }

    /// Serves SDS secrets from `store` (once, before streams start; without
    /// it, every secret a proxy asks for is missing). Returns `false` if a
    /// store was already set.
    pub fn set_credentials(&self, store: Arc<CredentialStore>) -> bool {
        self.credentials.set(store).is_ok()
    }

    /// The credential store the streams serve secrets from.
    pub fn credentials(&self) -> Arc<CredentialStore> {
        self.credentials
            .get_or_init(|| CredentialStore::new(None, Some(self.metrics.clone())))
            .clone()
    }

    /// The live streams, for the admin debug views.
    pub fn streams(&self) -> Arc<StreamRegistry> {
        self.streams.clone()
    }

    /// Streams currently open.
    pub fn open_streams(&self) -> usize {
        self.open_streams.load(Ordering::Relaxed)
    }

    fn admit(self: &Arc<Self>, api: &'static str) -> Result<StreamGuard, Status> {
        if *self.drain.borrow() {
            return Err(Error::Draining.to_status());
        }
        let open = self.open_streams.fetch_add(1, Ordering::AcqRel);
        let guard = StreamGuard {
            shared: self.clone(),
            api,
            proxy_type: None,
        };
        if open >= self.limits.max_streams {
            self.reject("too_many_streams");
            return Err(Error::TooManyStreams {
                limit: self.limits.max_streams,
            }
            .to_status());
        }
        self.metrics.streams.get_or_create(&[("api", api)]).inc();
        Ok(guard)
    }

    fn reject(&self, reason: &'static str) {
        self.metrics
            .rejected
            .get_or_create(&[("reason", reason)])
            .inc();
    }

    fn record(&self, api: &'static str, o: &RequestOutcome) {
        let Some(t) = o.t else { return };
        let ty = t.short_name();
        if o.stale_nonce {
            self.metrics.stale_nonces.inc();
        }
        if o.initial_versions > 0 {
            self.metrics
                .reconnect_known
                .get_or_create(&[("type", ty)])
                .inc_by(o.initial_versions as u64);
        }
        if let Some(msg) = &o.nack {
            self.metrics
                .nacks
                .get_or_create(&[("api", api), ("type", ty)])
                .inc();
            tracing::warn!(api, type_ = ty, error = %msg, "proxy NACKed a response");
        }
        if let Some(ack) = o.ack {
            self.metrics
                .acks
                .get_or_create(&[("api", api), ("type", ty)])
                .inc();
            if ack.push
                && let Some(at) = self.observed.observed_at(ack.seq)
                && let Ok(d) = SystemTime::now().duration_since(at)
            {
                self.metrics
                    .convergence
                    .get_or_create(&[("type", ty)])
                    .observe(d.as_secs_f64());
            }
        }
    }

    fn sent(&self, api: &'static str, t: ResourceType, resources: usize, removed: usize) {
        let ty = t.short_name();
        self.metrics
            .pushes
            .get_or_create(&[("api", api), ("type", ty)])
            .inc();
        self.metrics
            .resources_sent
            .get_or_create(&[("api", api), ("type", ty)])
            .inc_by(resources as u64);
        if removed > 0 {
            self.metrics
                .removals_sent
                .get_or_create(&[("type", ty)])
                .inc_by(removed as u64);
        }
    }
}

/// Counts a stream as open (and its proxy as connected) until dropped.
struct StreamGuard {
    shared: Arc<XdsShared>,
    api: &'static str,
    proxy_type: Option<&'static str>,
}

impl StreamGuard {
    fn identify(&mut self, proxy: Option<&Proxy>, snap: &Snapshot) {
        if self.proxy_type.is_none()
            && let Some(p) = proxy
        {
            if snap.views.missing_gateway_set(p, &snap.model) {
                // Not silently: only past `MAX_GATEWAY_SETS` does a router
                // selected by Gateways lack a view (it then gets the default
                // router view, with sidecar listeners).
                tracing::warn!(
                    proxy = %p.id,
                    gateways = ?snap.model.rules().gateways_selecting(&p.namespace, &p.labels, false),
                    max = deltapilot_xds::view::MAX_GATEWAY_SETS,
                    "router selected by a set of Gateways that has no gateway view: the Gateway \
                     selectors combine into more sets than deltapilot builds, so it gets the \
                     default router view; use fewer unrelated Gateway selectors"
                );
            }
            let pt = p.proxy_type.as_str();
            self.proxy_type = Some(pt);
            self.shared
                .metrics
                .connected
                .get_or_create(&[("api", self.api), ("proxy_type", pt)])
                .inc();
        }
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.shared.open_streams.fetch_sub(1, Ordering::AcqRel);
        if let Some(pt) = self.proxy_type {
            self.shared
                .metrics
                .connected
                .get_or_create(&[("api", self.api), ("proxy_type", pt)])
                .dec();
        }
    }
}

/// A response a stream's protocol state has ready, with what the metrics count.
struct NextResponse<O> {
    /// The encoded response.
    out: O,
    /// Its type.
    resource_type: ResourceType,
    /// Resources it carries.
    resources: usize,
    /// Names it removes (delta only).
    removed: usize,
    /// Resources sent at exactly the version the client reported on reconnect
    /// (delta only; a correct server keeps this at 0).
    resent_known: usize,
}

/// The protocol flavour a stream loop drives.
trait Protocol: Send + 'static {
    type Req: Send + 'static;
    type Out: WireOut;
    /// The SDS state beside it on the same stream.
    type Secrets: SecretSide<Req = Self::Req, Out = Self::Out>;
    const API: &'static str;
    fn decode(msg: Bytes) -> Result<Self::Req, Error>;
    /// The proxy the request's `node` names, if it has one.
    fn node_proxy(req: &Self::Req) -> Result<Option<Proxy>, Error>;
    fn on_request(&mut self, req: &Self::Req, snap: &Snapshot) -> Result<RequestOutcome, Error>;
    fn on_snapshot(&mut self, snap: &deltapilot_xds::snapshot::Snapshot);
    /// The next response to send, with what the metrics count about it.
    fn next(
        &mut self,
        snap: &deltapilot_xds::snapshot::Snapshot,
    ) -> Option<NextResponse<Self::Out>>;
    fn proxy(&self) -> Option<&Proxy>;
    fn in_flight(&self) -> usize;
    fn seq(&self) -> u64;
    fn type_statuses(&self) -> Vec<TypeStatus>;
}

/// A stream's state as the registry sees it: locked only while a debug view
/// reads it.
impl<P: Protocol> Inspect for Mutex<P> {
    fn inspect(&self) -> (Option<Proxy>, u64, Vec<TypeStatus>) {
        let s = lock(self);
        (s.proxy().cloned(), s.seq(), s.type_statuses())
    }
}

/// Locks a stream's state; a panic elsewhere cannot poison what is plain data.
fn lock<P>(m: &Mutex<P>) -> std::sync::MutexGuard<'_, P> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Protocol for DeltaStream {
    type Req = DeltaRequest;
    type Out = DeltaOut;
    type Secrets = DeltaSecrets;
    const API: &'static str = "delta";
    fn decode(msg: Bytes) -> Result<DeltaRequest, Error> {
        DeltaRequest::decode_from(msg)
    }
    fn node_proxy(req: &DeltaRequest) -> Result<Option<Proxy>, Error> {
        Ok(req
            .decode_node()?
            .map(|n| deltapilot_xds::proxy_from_node(&n)))
    }
    fn on_request(&mut self, req: &Self::Req, snap: &Snapshot) -> Result<RequestOutcome, Error> {
        DeltaStream::on_request(self, req, snap)
    }
    fn on_snapshot(&mut self, snap: &deltapilot_xds::snapshot::Snapshot) {
        DeltaStream::on_snapshot(self, snap)
    }
    fn next(
        &mut self,
        snap: &deltapilot_xds::snapshot::Snapshot,
    ) -> Option<NextResponse<DeltaOut>> {
        let p = self.next_response(snap)?;
        Some(NextResponse {
            resource_type: p.t,
            resources: p.out.resources.len(),
            removed: p.out.removed.len(),
            resent_known: p.resent_known,
            out: p.out,
        })
    }
    fn proxy(&self) -> Option<&Proxy> {
        DeltaStream::proxy(self)
    }
    fn in_flight(&self) -> usize {
        DeltaStream::in_flight(self)
    }
    fn seq(&self) -> u64 {
        DeltaStream::seq(self)
    }
    fn type_statuses(&self) -> Vec<TypeStatus> {
        DeltaStream::type_statuses(self)
    }
}

impl Protocol for SotwStream {
    type Req = DiscoveryRequest;
    type Out = SotwOut;
    type Secrets = SotwSecrets;
    const API: &'static str = "sotw";
    fn decode(msg: Bytes) -> Result<DiscoveryRequest, Error> {
        <DiscoveryRequest as prost::Message>::decode(msg)
            .map_err(|e| Error::Malformed(e.to_string()))
    }
    fn node_proxy(req: &DiscoveryRequest) -> Result<Option<Proxy>, Error> {
        Ok(req.node.as_ref().map(deltapilot_xds::proxy_from_node))
    }
    fn on_request(&mut self, req: &Self::Req, _snap: &Snapshot) -> Result<RequestOutcome, Error> {
        SotwStream::on_request(self, req)
    }
    fn on_snapshot(&mut self, snap: &deltapilot_xds::snapshot::Snapshot) {
        SotwStream::on_snapshot(self, snap)
    }
    fn next(&mut self, snap: &deltapilot_xds::snapshot::Snapshot) -> Option<NextResponse<SotwOut>> {
        let p = self.next_response(snap)?;
        Some(NextResponse {
            resource_type: p.t,
            resources: p.out.resources.len(),
            removed: 0,
            resent_known: 0,
            out: p.out,
        })
    }
    fn proxy(&self) -> Option<&Proxy> {
        SotwStream::proxy(self)
    }
    fn in_flight(&self) -> usize {
        SotwStream::in_flight(self)
    }
    fn seq(&self) -> u64 {
        SotwStream::seq(self)
    }
    fn type_statuses(&self) -> Vec<TypeStatus> {
        SotwStream::type_statuses(self)
    }
}

fn reject_reason(e: &Error) -> &'static str {
    match e {
        Error::UnknownTypeUrl(_) => "unknown_type",
        Error::Malformed(_) => "bad_message",
        Error::WrongService { .. } => "wrong_service",
        Error::TooManyNames { .. } => "too_many_names",
        Error::TooManyStreams { .. } => "too_many_streams",
        Error::Stalled(_) => "stalled",
        Error::IdentityNotAllowed { .. } => "identity_not_allowed",
        Error::IdentityMismatch(_) => "identity_mismatch",
        Error::Draining | Error::Bind { .. } | Error::TlsFile { .. } => "other",
    }
}

/// One stream's loop, as the stream of its responses: the response body polls it
/// directly, so a snapshot or an ACK wakes the one task hyper already runs for
/// the stream (no task of our own, no channel, no hop between the two). It ends
/// when the client goes away (hyper drops the body), on drain, on a fatal
/// protocol error or on a stall; those end with their status (the trailers).
///
/// Backpressure is HTTP/2's: the body is polled for the next response only when
/// the stream has send window, and at most one response per type is in flight,
/// so nothing queues. While a client withholds window entirely the loop is not
/// polled, so its stall timer cannot fire; HTTP/2 keepalive (see [`serve_with`]) still
/// closes a connection whose peer stopped reading its socket.
fn run_stream<P: Protocol>(
    shared: Arc<XdsShared>,
    (id, service): (u64, &'static str),
    state: P,
    (mut inbound, peer): (Inbound, Option<Arc<PeerIdentity>>),
    mut guard: StreamGuard,
) -> impl futures::Stream<Item = Result<P::Out, Status>> + Send + 'static {
    async_stream::stream! {
        // The node the first request names is checked against the client
        // certificate, before any response for it is built.
        let mut node_checked = peer.is_none();
        let state = Arc::new(Mutex::new(state));
        let _registered = shared.streams.register(id, P::API, service, state.clone());
        let mut drain = shared.drain.clone();
        let mut ready = shared.ready.clone();
        while !*ready.borrow_and_update() {
            let draining = tokio::select! {
                r = ready.changed() => if r.is_err() { return } else { false },
                r = drain.changed() => r.is_err() || *drain.borrow(),
            };
            if draining {
                yield Err(Error::Draining.to_status());
                return;
            }
        }
        let mut snapshots = shared.snapshots.clone();
        let mut snap = snapshots.load();
        lock(&state).on_snapshot(&snap);
        let mut snapshots_open = true;
        let store = shared.credentials();
        let mut secrets = P::Secrets::new(store.clone());
        let mut creds = store.subscribe();
        let mut secret_set = creds.borrow_and_update().clone();
        let mut creds_open = true;
        let mut last_heard = Instant::now();
        let stall = shared.limits.stall_timeout;
        let end: Option<Status> = loop {
            loop {
                let next = lock(&state).next(&snap);
                let Some(next) = next else {
                    // The snapshot types first; then secrets (listeners reference them).
                    if let Some((out, n)) = secrets.next(&secret_set) {
                        shared.sent(P::API, ResourceType::Secret, n, 0);
                        yield Ok(out);
                        continue;
                    }
                    break;
                };
                shared.sent(P::API, next.resource_type, next.resources, next.removed);
                if next.resent_known > 0 {
                    shared
                        .metrics
                        .reconnect_resent
                        .get_or_create(&[("type", next.resource_type.short_name())])
                        .inc_by(next.resent_known as u64);
                }
                yield Ok(next.out);
            }
            let waiting = lock(&state).in_flight() > 0 || secrets.in_flight();
            let deadline = tokio::time::Instant::from_std(last_heard + stall);
            tokio::select! {
                r = drain.changed() => {
                    if r.is_err() || *drain.borrow() {
                        break Some(Error::Draining.to_status());
                    }
                }
                msg = inbound.message() => match msg {
                    Ok(Some(msg)) => {
                        last_heard = Instant::now();
                        let result = P::decode(msg).and_then(|req| {
                            if !node_checked && let Some(peer) = &peer {
                                // The first request, whatever its type (an SDS
                                // one included), before it is applied.
                                node_checked = true;
                                match P::node_proxy(&req)? {
                                    Some(p) => peer.check_node(&p),
                                    None => peer.check_no_node(),
                                }
                                .map_err(Error::IdentityMismatch)?;
                            }
                            if P::Secrets::is_secret(&req) {
                                secrets.on_request(&req)
                            } else {
                                lock(&state).on_request(&req, &snap)
                            }
                        });
                        match result {
                            Ok(outcome) => {
                                guard.identify(lock(&state).proxy(), &snap);
                                shared.record(P::API, &outcome);
                            }
                            Err(e @ Error::UnknownTypeUrl(_)) => {
                                // One unknown type must not break the others on this ADS stream.
                                shared.reject(reject_reason(&e));
                                tracing::warn!(api = P::API, error = %e, "ignoring request");
                            }
                            Err(e) => {
                                shared.reject(reject_reason(&e));
                                tracing::warn!(api = P::API, error = %e, "closing stream");
                                break Some(e.to_status());
                            }
                        }
                    }
                    Ok(None) => break None,
                    Err(status) => {
                        // Oversized or malformed messages end here, and so does a client
                        // that went away; either way the status is returned, best effort.
                        if matches!(status.code(), tonic::Code::OutOfRange | tonic::Code::ResourceExhausted | tonic::Code::InvalidArgument) {
                            shared.reject("bad_message");
                            tracing::warn!(api = P::API, %status, "closing stream: bad request message");
                        } else {
                            tracing::debug!(api = P::API, %status, "stream ended by client");
                        }
                        break Some(status);
                    }
                },
                c = creds.changed(), if creds_open => match c {
                    Ok(()) => secret_set = creds.borrow_and_update().clone(),
                    Err(_) => creds_open = false,
                },
                s = snapshots.changed(), if snapshots_open => match s {
                    Some(s) => {
                        snap = s;
                        lock(&state).on_snapshot(&snap);
                    }
                    None => snapshots_open = false,
                },
                () = tokio::time::sleep_until(deadline), if waiting => {
                    shared.reject("stalled");
                    break Some(Error::Stalled(stall).to_status());
                }
            }
        };
        if let Some(status) = end {
            // Best effort: a client that stopped reading will not see it anyway.
            yield Err(status);
        }
    }
}

/// Names and methods of one discovery service.
pub trait ServiceKind: Send + Sync + 'static {
    /// Fully qualified gRPC service name.
    const NAME: &'static str;
    /// The one type it serves, or `None` for ADS.
    const TYPE: Option<ResourceType>;
    /// The delta method.
    const DELTA: &'static str;
    /// The state-of-the-world method.
    const SOTW: &'static str;
}

macro_rules! kind {
    ($(#[$doc:meta])* $k:ident, $name:literal, $t:expr, $delta:literal, $sotw:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $k;
        impl ServiceKind for $k {
            const NAME: &'static str = $name;
            const TYPE: Option<ResourceType> = $t;
            const DELTA: &'static str = $delta;
            const SOTW: &'static str = $sotw;
        }
    };
}

kind!(/// Aggregated discovery (ADS).
    Ads, "envoy.service.discovery.v3.AggregatedDiscoveryService", None, "DeltaAggregatedResources", "StreamAggregatedResources");
kind!(/// CDS.
    Cds, "envoy.service.cluster.v3.ClusterDiscoveryService", Some(ResourceType::Cluster), "DeltaClusters", "StreamClusters");
kind!(/// EDS.
    Eds, "envoy.service.endpoint.v3.EndpointDiscoveryService", Some(ResourceType::Endpoint), "DeltaEndpoints", "StreamEndpoints");
kind!(/// LDS.
    Lds, "envoy.service.listener.v3.ListenerDiscoveryService", Some(ResourceType::Listener), "DeltaListeners", "StreamListeners");
kind!(/// RDS.
    Rds, "envoy.service.route.v3.RouteDiscoveryService", Some(ResourceType::Route), "DeltaRoutes", "StreamRoutes");

/// One discovery service (ADS or a per-type one) as a tower service for tonic's
/// router.
pub struct XdsService<K> {
    shared: Arc<XdsShared>,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Clone for XdsService<K> {
    fn clone(&self) -> Self {
        XdsService {
            shared: self.shared.clone(),
            _kind: PhantomData,
        }
    }
}

impl<K: ServiceKind> XdsService<K> {
    /// The service over `shared`.
    pub fn new(shared: Arc<XdsShared>) -> Self {
        XdsService {
            shared,
            _kind: PhantomData,
        }
    }
}

impl<K: ServiceKind> NamedService for XdsService<K> {
    const NAME: &'static str = K::NAME;
}

fn open<P: Protocol>(
    shared: Arc<XdsShared>,
    service: &'static str,
    state: impl FnOnce(&Snapshot) -> P,
    (inbound, conn): (Inbound, Option<ConnInfo>),
) -> Result<Outbound<P::Out>, Status> {
    let peer = conn.as_ref().and_then(|c| c.peer().cloned());
    if let Some(p) = &peer
        && !p.allowed
    {
        let e = Error::IdentityNotAllowed {
            identities: p.names().map(str::to_owned).collect(),
        };
        shared.reject(reject_reason(&e));
        let remote = conn
            .as_ref()
            .map(|c| c.remote_addr().to_string())
            .unwrap_or_default();
        tracing::warn!(api = P::API, peer = %remote, error = %e, "refusing a stream");
        return Err(e.to_status());
    }
    let guard = shared.admit(P::API)?;
    let id = shared.next_stream.fetch_add(1, Ordering::Relaxed);
    let st = state(&shared.snapshots.load());
    Ok(Outbound::new(run_stream(
        shared,
        (id, service),
        st,
        (inbound, peer),
        guard,
    )))
}

fn reply<O: WireOut>(body: Result<Outbound<O>, Status>) -> http::Response<tonic::body::Body> {
    match body {
        Ok(b) => response(b),
        Err(status) => status.into_http(),
    }
}

impl<K, B> Service<http::Request<B>> for XdsService<K>
where
    K: ServiceKind,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let conn = req.extensions().get::<ConnInfo>().cloned();
        if let Some(conn) = &conn {
            conn.request_seen();
        }
        let shared = self.shared.clone();
        let max = shared.limits.max_request_bytes;
        let method = req
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        let resp = if method == K::DELTA {
            let inbound = Inbound::new(req.into_body(), max);
            let limits = shared.limits;
            reply(open(
                shared,
                K::NAME,
                |snap| DeltaStream::new(K::TYPE, limits, snap),
                (inbound, conn),
            ))
        } else if method == K::SOTW {
            let inbound = Inbound::new(req.into_body(), max);
            let limits = shared.limits;
            reply(open(
                shared,
                K::NAME,
                |snap| SotwStream::new(K::TYPE, limits, snap),
                (inbound, conn),
            ))
        } else {
            Status::unimplemented(format!(
                "{}/{method} is not served; use {} or {}",
                K::NAME,
                K::DELTA,
                K::SOTW
            ))
            .into_http()
        };
        Box::pin(std::future::ready(Ok(resp)))
    }
}

/// A tonic router serving ADS and the four per-type services.
pub fn routes(shared: Arc<XdsShared>) -> tonic::service::Routes {
    tonic::service::Routes::new(XdsService::<Ads>::new(shared.clone()))
        .add_service(XdsService::<Cds>::new(shared.clone()))
        .add_service(XdsService::<Eds>::new(shared.clone()))
        .add_service(XdsService::<Lds>::new(shared.clone()))
        .add_service(XdsService::<Rds>::new(shared))
}

pub use super::listen::{XDS_LISTEN_BACKLOG, bind_listener, serve, serve_tls, serve_with};
