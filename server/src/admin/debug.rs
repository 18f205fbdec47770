//! The `/debug/*` routes of the admin server:
//!
//! | route | answers |
//! | --- | --- |
//! | `/debug/syncz` | every connected proxy: sent/ACKed versions and nonces, NACKs, how far behind (see `syncz`) |
//! | `/debug/config_dump?proxy=ID[&type=cds,eds]` | what that proxy should hold now, in Envoy's `config_dump` format (see `dump`) |
//! | `/debug/snapshot` | the current snapshot: seq, position, hash, entity and resource counts |
//! | `/debug/events?from=POS&limit=N` | log records as `deltapilot log read` prints them (see `events`) |
//! | `/debug/registry[?host=H[&port=P[&labels=k=v]]][?ip=A]` | the ServiceDiscovery query API (see `registry_view`) |
//! | `/debug/rules` | every VirtualService, DestinationRule and Gateway: status and problems with stable codes (see `rules_view`) |
//! | `POST /debug/impact` | what proposed objects would change, folded onto a copy of the state (see `impact`) |
//! | `/debug/credentials` | every gateway credential: `loaded`, `error` (why; the last good one stays served) or `missing` (asked for, absent), subscribers; never key material (see `credentials`) |
//!
//! Every answer is computed on request from the current snapshot and the stream
//! registry; nothing here changes state (`/debug/impact` folds onto a copy and
//! writes nothing). An unknown proxy id is a 404 naming the
//! connected ones.
//!
//! What it does NOT do: authenticate. The admin server listens on loopback by
//! default, and `deltapilot run` only mounts these routes on a non-loopback
//! address when asked to (`--debug-endpoints on`).

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use deltapilot_adapters::file::FileAdapterStatus;
use deltapilot_engine::replay::bisect::parse_type;
use deltapilot_log::Log;
use deltapilot_xds::ResourceType;
use deltapilot_xds::generate::GenOptions;
use deltapilot_xds::snapshot::SnapshotReader;
use serde::Deserialize;

use super::dump::config_dump;
use super::events::{EventsError, read_lines};
use super::impact::{IMPACT_CONCURRENCY, MAX_IMPACT_BODY, decode_events, impact};
use super::registry_view::{RegistryQuery, query};
use super::rules_view::rules_report_placed;
use super::syncz::syncz;
use crate::xds::registry::StreamRegistry;

/// What the debug routes read.
#[derive(Clone)]
pub struct DebugState {
    /// The published snapshots.
    pub snapshots: SnapshotReader,
    /// The live xDS streams.
    pub streams: Arc<StreamRegistry>,
    /// The event log, for `/debug/events` (absent: that route answers 404).
    pub log: Option<Arc<Log>>,
    /// The server's resource options, for `/debug/impact` to build as it does.
    pub gen_opts: GenOptions,
    /// Bounds `/debug/impact` to [`IMPACT_CONCURRENCY`] at a time.
    pub impact_permits: Arc<tokio::sync::Semaphore>,
    /// The in-process file adapters' statuses: where each object was written,
    /// for `/debug/rules` (empty: no file and line there).
    pub file_status: Vec<tokio::sync::watch::Receiver<FileAdapterStatus>>,
    /// The gateway credentials, for `/debug/credentials` (names and states
    /// only, never key material; absent: that route answers 404).
    pub credentials: Option<Arc<crate::credentials::CredentialStore>>,
}

impl DebugState {
    /// The debug state of a server with these parts.
    pub fn new(
        snapshots: SnapshotReader,
        streams: Arc<StreamRegistry>,
        log: Option<Arc<Log>>,
        gen_opts: GenOptions,
        file_status: Vec<tokio::sync::watch::Receiver<FileAdapterStatus>>,
    ) -> Self {
        DebugState {
            snapshots,
            streams,
            log,
            gen_opts,
            impact_permits: Arc::new(tokio::sync::Semaphore::new(IMPACT_CONCURRENCY)),
            file_status,
            credentials: None,
        }
    }

    /// The same, with the gateway credentials for `/debug/credentials`.
    pub fn with_credentials(mut self, store: Arc<crate::credentials::CredentialStore>) -> Self {
        self.credentials = Some(store);
        self
    }
}

/// What [`routes`] exposes, in words, for the warning `deltapilot run` logs when
/// it serves them on a non-loopback address. Kept next to the routes so that a
/// new route is named here too.
pub const EXPOSES: &str = "/debug/syncz (every connected proxy: node ids, versions, NACK \
     messages), /debug/config_dump (any proxy's full configuration), /debug/snapshot, \
     /debug/events (the event log's records), /debug/registry (every service and \
     endpoint address), /debug/rules, POST /debug/impact (a preview that rebuilds \
     every resource) and /debug/credentials (credential names and their state, no keys)";

/// The debug routes.
pub fn routes(state: DebugState) -> Router {
    Router::new()
        .route("/debug/syncz", get(syncz_route))
        .route("/debug/config_dump", get(config_dump_route))
        .route("/debug/snapshot", get(snapshot_route))
        .route("/debug/events", get(events_route))
        .route("/debug/registry", get(registry_route))
        .route("/debug/rules", get(rules_route))
        .route(
            "/debug/impact",
            post(impact_route).layer(DefaultBodyLimit::max(MAX_IMPACT_BODY)),
        )
        .route("/debug/credentials", get(credentials_route))
        .with_state(state)
}

fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response {
    let mut text = serde_json::to_vec_pretty(body)
        .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}").into_bytes());
    text.push(b'\n');
    (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}

fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    json_response(status, &serde_json::json!({ "error": msg.into() }))
}

async fn syncz_route(State(s): State<DebugState>) -> Response {
    let snap = s.snapshots.load();
    json_response(StatusCode::OK, &syncz(&s.streams.statuses(), &snap))
}

#[derive(Debug, Deserialize)]
struct DumpQuery {
    proxy: Option<String>,
    #[serde(rename = "type")]
    types: Option<String>,
}

/// Parses `type=cds,eds` (empty: all).
pub fn parse_types(list: Option<&str>) -> Result<Vec<ResourceType>, String> {
    list.unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(parse_type)
        .collect()
}

async fn config_dump_route(State(s): State<DebugState>, Query(q): Query<DumpQuery>) -> Response {
    let statuses = s.streams.statuses();
    let ids: BTreeSet<String> = statuses
        .iter()
        .filter_map(|st| st.proxy.as_ref().map(|p| p.id.to_string()))
        .collect();
    let Some(id) = q.proxy.filter(|p| !p.is_empty()) else {
        return error(
            StatusCode::BAD_REQUEST,
            format!("give ?proxy=NODE_ID; connected: {}", list(&ids)),
        );
    };
    let types = match parse_types(q.types.as_deref()) {
        Ok(t) => t,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let mine: Vec<_> = statuses
        .iter()
        .filter(|st| st.proxy.as_ref().is_some_and(|p| *p.id == *id))
        .collect();
    let Some(first) = mine.first() else {
        return error(
            StatusCode::NOT_FOUND,
            format!(
                "no connected proxy has node id {id:?}; connected: {}",
                list(&ids)
            ),
        );
    };
    // The union of what its streams subscribed to (a proxy may use per-type services).
    let keep = |t: ResourceType, name: &str| {
        mine.iter().any(|st| {
            st.types.iter().any(|ts| {
                ts.resource_type == t
                    && ts.requested
                    && (ts.wildcard || ts.names.iter().any(|n| &**n == name))
            })
        })
    };
    let snap = s.snapshots.load();
    let key = match first.proxy.as_ref() {
        Some(p) => snap.view_key(p),
        None => deltapilot_xds::view::ViewKey::Default(Default::default()),
    };
    let dump = config_dump(|t| snap.view(&key, t), &types, &keep);
    let mut text = dump.to_pretty().into_bytes();
    if text.is_empty() {
        text.push(b'\n');
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        text,
    )
        .into_response()
}

fn list(ids: &BTreeSet<String>) -> String {
    if ids.is_empty() {
        "none".into()
    } else {
        ids.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

async fn snapshot_route(State(s): State<DebugState>) -> Response {
    let snap = s.snapshots.load();
    let c = snap.model.counts();
    let r = &snap.resources;
    json_response(
        StatusCode::OK,
        &serde_json::json!({
            "seq": snap.seq,
            "position": snap.position.to_string(),
            "hash": format!("{:016x}", snap.hash),
            "counts": {
                "services": c.services,
                "service_definitions": c.service_definitions,
                "endpoints": c.endpoints,
                "hostnames_with_endpoints": c.hostnames_with_endpoints,
                "configs": c.configs,
                "sources": c.sources,
            },
            "resources": {
                "clusters": r.clusters.len(),
                "endpoints": r.endpoints.len(),
                "grpc_clusters": r.grpc_clusters.len(),
                "sidecar_listeners": r.sidecar_listeners.len(),
                "grpc_listeners": r.grpc_listeners.len(),
                "routes": r.routes.len(),
            },
            "recent_change_sets": snap.recent.len(),
        }),
    )
}

#[derive(Debug, Deserialize)]
struct EventsQuery {
    from: Option<String>,
    limit: Option<usize>,
}

async fn events_route(State(s): State<DebugState>, Query(q): Query<EventsQuery>) -> Response {
    let Some(log) = &s.log else {
        return error(
            StatusCode::NOT_FOUND,
            "this server has no event log attached",
        );
    };
    match read_lines(log, q.from.as_deref(), q.limit).await {
        Ok(lines) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/x-ndjson")],
            lines,
        )
            .into_response(),
        Err(EventsError::BadRequest(m)) => error(StatusCode::BAD_REQUEST, m),
        Err(EventsError::Log(m)) => error(StatusCode::INTERNAL_SERVER_ERROR, m),
    }
}

async fn registry_route(State(s): State<DebugState>, Query(q): Query<RegistryQuery>) -> Response {
    let snap = s.snapshots.load();
    match query(&snap.model, &q) {
        Ok(v) => json_response(StatusCode::OK, &v),
        Err((true, m)) => error(StatusCode::NOT_FOUND, m),
        Err((false, m)) => error(StatusCode::BAD_REQUEST, m),
    }
}

async fn credentials_route(State(s): State<DebugState>) -> Response {
    let Some(store) = &s.credentials else {
        return error(StatusCode::NOT_FOUND, "no credential store");
    };
    let (credentials, scan_error) = store.report();
    json_response(
        StatusCode::OK,
        &serde_json::json!({
            "dir": store.dir().map(|d| d.display().to_string()),
            "scan_error": scan_error,
            "credentials": credentials,
        }),
    )
}

async fn rules_route(State(s): State<DebugState>) -> Response {
    let snap = s.snapshots.load();
    let origins: Vec<_> = s
        .file_status
        .iter()
        .map(|rx| rx.borrow().origins.clone())
        .collect();
    let place = |key: &str| {
        origins
            .iter()
            .find_map(|o| o.get(key))
            .map(|o| (o.path.display().to_string(), o.line))
    };
    json_response(
        StatusCode::OK,
        &rules_report_placed(&snap.model, &s.gen_opts, &place),
    )
}

async fn impact_route(State(s): State<DebugState>, body: Bytes) -> Response {
    let Ok(_permit) = s.impact_permits.clone().try_acquire_owned() else {
        return error(
            StatusCode::TOO_MANY_REQUESTS,
            "another impact preview is running (one at a time: each rebuilds every resource); retry shortly",
        );
    };
    let events = match decode_events(&body) {
        Ok(e) if e.is_empty() => {
            return error(
                StatusCode::BAD_REQUEST,
                "the body holds no events: send length-delimited protobuf Events (upserts and deletes)",
            );
        }
        Ok(e) => e,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let snap = s.snapshots.load();
    let statuses = s.streams.statuses();
    let opts = s.gen_opts.clone();
    let answer = tokio::task::spawn_blocking(move || impact(&snap, events, &opts, &statuses)).await;
    match answer {
        Ok(Ok(v)) => json_response(StatusCode::OK, &v),
        Ok(Err(e)) => error(StatusCode::BAD_REQUEST, e.to_string()),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the preview failed: {e}"),
        ),
    }
}
