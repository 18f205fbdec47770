//! An in-process fake Kubernetes API server over real HTTP (axum on 127.0.0.1),
//! for the Kubernetes adapter's tests: no real API server can run on these
//! machines, so this one speaks the parts of the real wire protocol the adapter
//! (through kube-rs) uses:
//!
//! - list: `GET /api/v1/[namespaces/{ns}/]{plural}` and
//!   `/apis/{group}/{version}/[namespaces/{ns}/]{plural}`, with
//!   `metadata.resourceVersion`, `limit`/`continue` pages (ignored for
//!   `resourceVersion=0`, as the API server's cache does), `labelSelector` and
//!   `fieldSelector`;
//! - watch: `?watch=1&resourceVersion=N&allowWatchBookmarks=true&timeoutSeconds=T`
//!   streaming newline-delimited JSON events (`ADDED`, `MODIFIED`, `DELETED`,
//!   `BOOKMARK`, `ERROR`), replaying every change after `N`, answering a
//!   compacted `N` with an `ERROR` event holding a `410 Expired` Status, closing
//!   the stream after `T` seconds, and turning label-selector transitions into
//!   `ADDED`/`DELETED`;
//! - objects are real k8s-openapi values (see `objects`), stored as JSON with a
//!   global resourceVersion counter;
//! - control knobs for tests: compaction, bookmarks, closing or cutting watch
//!   connections, injecting raw watch lines, uninstalling the Istio CRDs (404),
//!   failing every request, hanging lists, garbage lists, stopping and restarting
//!   on the same port.
//!
//! What it does NOT do: authentication, admission or validation (it stores what it
//! is given, so tests can store malformed objects), or anything the adapter does
//! not call.

#![allow(dead_code, unreachable_pub)]

pub mod harness;
mod http;
pub mod objects;
pub mod selector;
pub mod state;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{Method, Uri};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use state::{ResDef, Storage, Wire};

/// One request the fake received, for assertions about how the client behaved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
}

impl Request {
    /// A query parameter's (undecoded) value.
    pub fn param(&self, key: &str) -> Option<String> {
        self.query.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == key).then(|| v.to_owned())
        })
    }

    /// Whether this is a watch request.
    pub fn is_watch(&self) -> bool {
        matches!(self.param("watch").as_deref(), Some("1" | "true"))
    }

    /// Whether this is a list request.
    pub fn is_list(&self) -> bool {
        self.method == "GET" && !self.is_watch() && self.path != "/version"
    }
}

/// State shared by the HTTP handlers and the test's handle.
#[derive(Debug)]
pub struct Shared {
    pub storage: Storage,
    pub istio_installed: AtomicBool,
    pub hang_lists: AtomicBool,
    pub garbage_lists: AtomicBool,
    /// Watch streams currently subscribed to changes.
    pub open_watches: AtomicUsize,
    /// Wakes hanging lists.
    pub release: watch::Sender<bool>,
    fail: Mutex<Option<u16>>,
    requests: Mutex<Vec<Request>>,
}

/// Most requests remembered (a bound on memory in long tests).
const REQUESTS_MAX: usize = 100_000;

impl Shared {
    fn log_request(&self, method: &Method, uri: &Uri) {
        let mut r = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        if r.len() < REQUESTS_MAX {
            r.push(Request {
                method: method.to_string(),
                path: uri.path().to_owned(),
                query: uri.query().unwrap_or_default().to_owned(),
            });
        }
    }

    fn fail_with(&self) -> Option<u16> {
        *self.fail.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The fake API server. Dropping it stops serving.
pub struct FakeApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    serving: Option<(watch::Sender<bool>, JoinHandle<()>)>,
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        if let Some((stop, task)) = self.serving.take() {
            let _ = stop.send(true);
            task.abort();
        }
    }
}

impl FakeApiServer {
    /// A fake serving on a free port of 127.0.0.1, Istio CRDs installed.
    pub async fn start() -> Self {
        let mut s = Self::not_started();
        s.serve().await;
        s
    }

    /// A fake that has a port but does not listen yet (connections are refused
    /// until [`FakeApiServer::serve`]): an API server that is down.
    pub fn not_started() -> Self {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let addr = probe.local_addr().expect("local addr");
        drop(probe);
        let (release, _) = watch::channel(false);
        Self {
            addr,
            shared: Arc::new(Shared {
                storage: Storage::default(),
                istio_installed: AtomicBool::new(true),
                hang_lists: AtomicBool::new(false),
                garbage_lists: AtomicBool::new(false),
                open_watches: AtomicUsize::new(0),
                release,
                fail: Mutex::new(None),
                requests: Mutex::new(Vec::new()),
            }),
            serving: None,
        }
    }

    /// Starts listening (again) on this fake's port, with the same objects.
    pub async fn serve(&mut self) {
        if self.serving.is_some() {
            return;
        }
        let mut listener = None;
        for _ in 0..50 {
            match tokio::net::TcpListener::bind(self.addr).await {
                Ok(l) => {
                    listener = Some(l);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        let listener = listener.expect("re-bind the fake API server's port");
        let app = Router::new()
            .fallback(http::handle)
            .with_state(self.shared.clone());
        let (stop, mut stop_rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop_rx.wait_for(|s| *s).await;
                })
                .await;
        });
        self.serving = Some((stop, task));
    }

    /// Stops listening and cuts every open watch: the API server goes down. Its
    /// objects and history are kept for [`FakeApiServer::serve`].
    pub async fn stop(&mut self) {
        if let Some((stop, task)) = self.serving.take() {
            let _ = stop.send(true);
            // Keep closing watch streams until the server has drained: a client can
            // still send a new watch on a kept-alive connection after the first
            // broadcast, and that stream would otherwise outlive the "outage".
            let mut task = task;
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            loop {
                self.shared.storage.broadcast(Wire::Close { abrupt: true });
                match tokio::time::timeout(Duration::from_millis(50), &mut task).await {
                    Ok(_) => break,
                    // Connections that would not finish; the listener is gone anyway.
                    Err(_) if std::time::Instant::now() >= deadline => break,
                    Err(_) => {}
                }
            }
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube client for this fake, with an idle read timeout of `read_timeout`
    /// (keep it above the adapter's watch timeout).
    pub fn client(&self, read_timeout: Duration) -> kube::Client {
        let mut config = kube::Config::new(self.url().parse().expect("url"));
        config.read_timeout = Some(read_timeout);
        config.reset_reader_on_write = true;
        config.connect_timeout = Some(Duration::from_secs(2));
        // As `KubernetesAdapter::from_kubeconfig` configures it.
        config.default_retry = false;
        kube::Client::try_from(config).expect("kube client")
    }

    /// Creates or replaces a typed object; returns it as stored.
    pub fn apply<K>(&self, obj: &K) -> Value
    where
        K: kube::Resource<DynamicType = ()> + serde::Serialize,
    {
        let res = state::find(&K::group(&()), &K::version(&()), &K::plural(&()))
            .expect("a resource the fake serves");
        let v = serde_json::to_value(obj).expect("serialize");
        self.shared.storage.put(res, v, false).expect("stored")
    }

    /// Creates or replaces an object given as JSON, of a kind the fake serves
    /// (malformed content allowed).
    pub fn apply_json(&self, kind: &str, obj: Value) -> Value {
        let res = state::by_kind(kind).expect("a kind the fake serves");
        self.shared.storage.put(res, obj, false).expect("stored")
    }

    /// Deletes an object of a typed kind.
    pub fn delete<K>(&self, ns: &str, name: &str)
    where
        K: kube::Resource<DynamicType = ()>,
    {
        let res: &ResDef = state::find(&K::group(&()), &K::version(&()), &K::plural(&()))
            .expect("a resource the fake serves");
        self.shared.storage.delete(res, ns, name).expect("existed");
    }

    /// Deletes an object of a kind given by name.
    pub fn delete_kind(&self, kind: &str, ns: &str, name: &str) {
        let res = state::by_kind(kind).expect("a kind the fake serves");
        self.shared.storage.delete(res, ns, name).expect("existed");
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.storage.rv()
    }

    /// Forgets the change history: watches from any earlier resourceVersion get
    /// `410 Gone`.
    pub fn compact(&self) {
        self.shared.storage.compact();
    }

    /// Sends a BOOKMARK (at a new resourceVersion) on every open watch that
    /// allowed bookmarks; returns that resourceVersion.
    pub fn bookmark(&self) -> u64 {
        self.shared.storage.bookmark()
    }

    /// Ends every open watch cleanly (as `timeoutSeconds` does).
    pub fn close_watches(&self) {
        self.shared.storage.broadcast(Wire::Close { abrupt: false });
    }

    /// Cuts every open watch connection mid-stream.
    pub fn drop_watches(&self) {
        self.shared.storage.broadcast(Wire::Close { abrupt: true });
    }

    /// Open watches stop delivering changes until they end (see
    /// [`FakeApiServer::expire_watches`], [`FakeApiServer::drop_watches`]).
    pub fn pause_watches(&self) {
        self.shared.storage.broadcast(Wire::Pause);
    }

    /// Every open watch gets an `ERROR` event with `410 Expired` and ends: the
    /// client must relist.
    pub fn expire_watches(&self) {
        self.shared.storage.broadcast(Wire::Expire);
    }

    /// Writes `line` verbatim on every open watch.
    pub fn inject_watch_line(&self, line: &str) {
        self.shared.storage.broadcast(Wire::Raw(line.to_owned()));
    }

    /// Installs or uninstalls the Istio CRDs (uninstalled: their paths answer 404).
    pub fn set_istio_installed(&self, on: bool) {
        self.shared.istio_installed.store(on, Ordering::SeqCst);
    }

    /// Makes every API request answer `code` with a Status (or stop doing so).
    pub fn set_fail_with(&self, code: Option<u16>) {
        *self.shared.fail.lock().unwrap_or_else(|p| p.into_inner()) = code;
    }

    /// Makes lists hang without answering (or releases them).
    pub fn set_hang_lists(&self, on: bool) {
        self.shared.hang_lists.store(on, Ordering::SeqCst);
        self.shared.release.send_replace(!on);
    }

    /// Makes lists answer 200 with an HTML page (or stop doing so).
    pub fn set_garbage_lists(&self, on: bool) {
        self.shared.garbage_lists.store(on, Ordering::SeqCst);
    }

    /// Watch streams currently open and subscribed to changes.
    pub fn open_watches(&self) -> usize {
        self.shared.open_watches.load(Ordering::SeqCst)
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
