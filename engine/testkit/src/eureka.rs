//! A fake Eureka server over real HTTP (axum on 127.0.0.1), for the Eureka adapter
//! tests: no Eureka server can run on these machines.
//!
//! It speaks the wire protocol the adapter relies on, in Eureka's real JSON shapes:
//! `GET {base}/apps` (the whole registry) and `GET {base}/apps/delta` (the recent
//! changes, each instance carrying `actionType`, plus the full registry's
//! `apps__hashcode`), answering JSON only when asked with `Accept: application/json`
//! (XML otherwise, as Eureka does). Like a real server, a delta repeats every change
//! since it was recorded until the test clears it. On top of that it can misbehave
//! on demand ([`Mode`]): garbage, huge, wrong content type, hanging, HTTP errors,
//! and it can be stopped (connection refused) and restarted on the same port.
//!
//! What it does NOT do: leases, registration, peers, or XML bodies beyond a stub.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How the fake answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Real answers.
    Normal,
    /// 200, `application/json`, a body that is not JSON.
    Garbage,
    /// 200, `application/json`, JSON that is not an `applications` document.
    WrongShape,
    /// 200, `application/json`, a declared `Content-Length` of `HUGE_BYTES`.
    HugeDeclared,
    /// 200, `application/json`, `HUGE_BYTES` streamed without a length.
    HugeStreamed,
    /// 200, `application/xml`: what Eureka answers without the JSON `Accept`.
    Xml,
    /// The request is accepted and never answered.
    Hang,
    /// Headers are sent, then the body never comes.
    HangBody,
    /// 500 with an HTML error page.
    ServerError,
}

/// Size of the huge answers: far above the caps the tests configure.
pub const HUGE_BYTES: usize = 4 * 1024 * 1024;

/// How long a hanging answer hangs at most (each test's timeout is far below).
const HANG: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct FakeState {
    /// app → instance id → instance JSON (without `actionType`).
    apps: BTreeMap<String, BTreeMap<String, Value>>,
    /// Changes served by `/apps/delta`, in order, each with `actionType`.
    recent: Vec<Value>,
    mode: Mode,
    /// Serialise lists of one as bare objects, as Eureka's codecs do.
    single_object_quirk: bool,
    /// Served instead of the computed `apps__hashcode` when set.
    hashcode_override: Option<String>,
    version: u64,
    full_requests: u64,
    delta_requests: u64,
}

/// The fake server; stops on drop.
pub struct FakeEureka {
    state: Arc<Mutex<FakeState>>,
    addr: SocketAddr,
    base: String,
    running: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
}

impl FakeEureka {
    /// Starts on a free loopback port, serving under `base` (e.g. `/eureka/v2`).
    pub async fn start(base: &str) -> FakeEureka {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake eureka");
        let addr = listener.local_addr().expect("addr");
        let mut fake = FakeEureka {
            state: Arc::new(Mutex::new(FakeState {
                apps: BTreeMap::new(),
                recent: Vec::new(),
                mode: Mode::Normal,
                single_object_quirk: false,
                hashcode_override: None,
                version: 1,
                full_requests: 0,
                delta_requests: 0,
            })),
            addr,
            base: base.trim_end_matches('/').to_owned(),
            running: None,
        };
        fake.serve(listener);
        fake
    }

    /// The base URL to give the adapter: `http://127.0.0.1:PORT{base}`.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.addr, self.base)
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let app = Router::new()
            .route(&format!("{}/apps", self.base), get(full))
            .route(&format!("{}/apps/delta", self.base), get(delta))
            .with_state(self.state.clone());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.await;
                })
                .await;
        });
        self.running = Some((tx, task));
    }

    /// Stops listening: new connections are refused, idle ones are closed.
    pub async fn stop(&mut self) {
        if let Some((tx, mut task)) = self.running.take() {
            let _ = tx.send(());
            if tokio::time::timeout(Duration::from_secs(2), &mut task)
                .await
                .is_err()
            {
                task.abort();
                let _ = task.await;
            }
        }
    }

    /// Listens again on the same port (bounded retries while the port is released).
    pub async fn restart(&mut self) {
        self.stop().await;
        for _ in 0..100 {
            match tokio::net::TcpListener::bind(self.addr).await {
                Ok(l) => {
                    self.serve(l);
                    return;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        panic!("cannot listen on {} again", self.addr);
    }

    fn lock(&self) -> MutexGuard<'_, FakeState> {
        self.state.lock().expect("fake eureka state")
    }

    /// Registers or replaces an instance (built with [`instance`]) and records the
    /// change for deltas (`ADDED` or `MODIFIED`).
    pub fn put(&self, inst: Value) {
        let mut s = self.lock();
        let action = if s.put(inst.clone()) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        s.record(inst, action);
    }

    /// Removes an instance and records `DELETED` for deltas.
    pub fn remove(&self, app: &str, id: &str) {
        let mut s = self.lock();
        if let Some(inst) = s.remove(app, id) {
            s.record(inst, "DELETED");
        }
    }

    /// Registers or replaces an instance WITHOUT recording a delta: the next delta
    /// is empty but its hashcode no longer matches.
    pub fn put_silently(&self, inst: Value) {
        self.lock().put(inst);
    }

    /// Removes an instance WITHOUT recording a delta.
    pub fn remove_silently(&self, app: &str, id: &str) {
        self.lock().remove(app, id);
    }

    /// Forgets the recorded changes (a real server forgets them after ~3 minutes).
    pub fn clear_recent(&self) {
        self.lock().recent.clear();
    }

    /// Sets how the fake answers from now on.
    pub fn set_mode(&self, mode: Mode) {
        self.lock().mode = mode;
    }

    /// Serialises lists of one as bare objects (`application` and `instance`).
    pub fn set_single_object_quirk(&self, on: bool) {
        self.lock().single_object_quirk = on;
    }

    /// Serves `hashcode` as `apps__hashcode` instead of the computed one.
    pub fn set_hashcode_override(&self, hashcode: Option<&str>) {
        self.lock().hashcode_override = hashcode.map(str::to_owned);
    }

    /// `(full, delta)` requests answered or attempted so far.
    pub fn requests(&self) -> (u64, u64) {
        let s = self.lock();
        (s.full_requests, s.delta_requests)
    }
}

impl Drop for FakeEureka {
    fn drop(&mut self) {
        if let Some((tx, task)) = self.running.take() {
            let _ = tx.send(());
            task.abort();
        }
    }
}

impl FakeState {
    /// Returns whether the instance existed.
    fn put(&mut self, inst: Value) -> bool {
        let app = inst["app"].as_str().expect("instance app").to_owned();
        let id = inst["instanceId"].as_str().expect("instanceId").to_owned();
        self.version += 1;
        self.apps.entry(app).or_default().insert(id, inst).is_some()
    }

    fn remove(&mut self, app: &str, id: &str) -> Option<Value> {
        let instances = self.apps.get_mut(app)?;
        let gone = instances.remove(id);
        if instances.is_empty() {
            self.apps.remove(app);
        }
        self.version += 1;
        gone
    }

    fn record(&mut self, mut inst: Value, action: &str) {
        inst["actionType"] = json!(action);
        self.recent.push(inst);
    }

    /// Eureka's `getReconcileHashCode`: `STATUS_COUNT_` per status, sorted.
    fn hashcode(&self) -> String {
        if let Some(h) = &self.hashcode_override {
            return h.clone();
        }
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        for inst in self.apps.values().flat_map(|m| m.values()) {
            let status = inst["status"].as_str().unwrap_or("UP").to_owned();
            *counts.entry(status).or_insert(0) += 1;
        }
        counts.iter().map(|(s, n)| format!("{s}_{n}_")).collect()
    }

    fn list(&self, items: Vec<Value>) -> Value {
        if self.single_object_quirk && items.len() == 1 {
            items.into_iter().next().unwrap_or(Value::Null)
        } else {
            Value::Array(items)
        }
    }

    /// The `applications` document over `by_app` (app → instances).
    fn document(&self, by_app: BTreeMap<String, Vec<Value>>) -> Value {
        let apps: Vec<Value> = by_app
            .into_iter()
            .map(|(name, instances)| json!({"name": name, "instance": self.list(instances)}))
            .collect();
        json!({"applications": {
            "versions__delta": self.version.to_string(),
            "apps__hashcode": self.hashcode(),
            "application": self.list(apps),
        }})
    }

    fn full_document(&self) -> Value {
        self.document(
            self.apps
                .iter()
                .map(|(a, m)| (a.clone(), m.values().cloned().collect()))
                .collect(),
        )
    }

    fn delta_document(&self) -> Value {
        let mut by_app: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for inst in &self.recent {
            let app = inst["app"].as_str().unwrap_or_default().to_owned();
            by_app.entry(app).or_default().push(inst.clone());
        }
        self.document(by_app)
    }
}

async fn full(State(s): State<Arc<Mutex<FakeState>>>, headers: HeaderMap) -> Response {
    let (mode, doc) = {
        let mut st = s.lock().expect("state");
        st.full_requests += 1;
        (st.mode, st.full_document())
    };
    answer(mode, &headers, doc).await
}

async fn delta(State(s): State<Arc<Mutex<FakeState>>>, headers: HeaderMap) -> Response {
    let (mode, doc) = {
        let mut st = s.lock().expect("state");
        st.delta_requests += 1;
        (st.mode, st.delta_document())
    };
    answer(mode, &headers, doc).await
}

fn json_response(body: impl Into<Body>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body.into()).into_response()
}

async fn answer(mode: Mode, headers: &HeaderMap, doc: Value) -> Response {
    let wants_json = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/json"));
    match mode {
        Mode::Xml => xml(),
        Mode::Normal if !wants_json => xml(),
        Mode::Normal => json_response(doc.to_string()),
        Mode::Garbage => json_response(r#"{"applications": {"application": [{"name": "ORD"#),
        Mode::WrongShape => json_response(r#"{"apps": []}"#),
        Mode::HugeDeclared => json_response(vec![b' '; HUGE_BYTES]),
        Mode::HugeStreamed => {
            let chunk = bytes_of(64 * 1024);
            let n = HUGE_BYTES / chunk.len();
            let stream =
                futures::stream::iter((0..n).map(move |_| Ok::<_, std::io::Error>(chunk.clone())));
            json_response(Body::from_stream(stream))
        }
        Mode::Hang => {
            tokio::time::sleep(HANG).await;
            json_response(doc.to_string())
        }
        Mode::HangBody => {
            let first = futures::stream::iter([Ok::<_, std::io::Error>(
                axum::body::Bytes::from_static(b"{\"applications\":"),
            )]);
            let stall = futures::stream::once(async {
                tokio::time::sleep(HANG).await;
                Ok::<_, std::io::Error>(axum::body::Bytes::from_static(b"{}}"))
            });
            json_response(Body::from_stream(futures::StreamExt::chain(first, stall)))
        }
        Mode::ServerError => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/html")],
            "<html><body>500 Internal Server Error</body></html>",
        )
            .into_response(),
    }
}

fn bytes_of(n: usize) -> axum::body::Bytes {
    axum::body::Bytes::from(vec![b' '; n])
}

fn xml() -> Response {
    (
        [(header::CONTENT_TYPE, "application/xml")],
        "<applications><versions__delta>1</versions__delta><apps__hashcode></apps__hashcode></applications>",
    )
        .into_response()
}

/// An instance in the shape Eureka's JSON codec writes, with everything a real
/// server sends (lease info, timestamps, data center, ...). Tests edit fields with
/// `inst["status"] = json!("DOWN")`.
pub fn instance(app: &str, id: &str, ip: &str, port: u16, status: &str, vip: &str) -> Value {
    json!({
        "instanceId": id,
        "hostName": format!("{}.internal", id.replace(':', "-")),
        "app": app,
        "ipAddr": ip,
        "status": status,
        "overriddenStatus": "UNKNOWN",
        "port": {"$": port, "@enabled": "true"},
        "securePort": {"$": 443, "@enabled": "false"},
        "countryId": 1,
        "dataCenterInfo": {
            "@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo",
            "name": "MyOwn"
        },
        "leaseInfo": {
            "renewalIntervalInSecs": 30, "durationInSecs": 90,
            "registrationTimestamp": 1_700_000_000_000_u64, "lastRenewalTimestamp": 1_700_000_000_000_u64,
            "evictionTimestamp": 0, "serviceUpTimestamp": 1_700_000_000_000_u64
        },
        "metadata": {"@class": "java.util.Collections$EmptyMap"},
        "homePageUrl": format!("http://{ip}:{port}/"),
        "statusPageUrl": format!("http://{ip}:{port}/info"),
        "healthCheckUrl": format!("http://{ip}:{port}/health"),
        "vipAddress": vip,
        "secureVipAddress": vip,
        "isCoordinatingDiscoveryServer": "false",
        "lastUpdatedTimestamp": "1700000000000",
        "lastDirtyTimestamp": "1700000000000"
    })
}
