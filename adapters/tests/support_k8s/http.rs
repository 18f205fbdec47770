//! The fake API server's HTTP side: the REST paths of the resources it serves
//! (`/api/v1/...`, `/apis/<group>/<version>/...`, namespaced and not), list with
//! `limit`/`continue`, watch as newline-delimited JSON events with
//! `resourceVersion`, `allowWatchBookmarks`, `timeoutSeconds`, label and field
//! selectors, `410 Gone` as an `ERROR` event when the resourceVersion is too old;
//! get, create, replace and delete for the real-cluster smoke flow; `/version`.
//! Failure switches (`fail_with`, hanging lists, garbage lists) let tests play a
//! broken API server.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::Shared;
use super::selector::{FieldSelector, LabelSelector};
use super::state::{ChangeType, ResDef, Scope, Wire, find};

/// Lines buffered per watch response before the writer waits for the client.
const WATCH_LINES_CAPACITY: usize = 64;

/// Every request lands here; the path is routed by hand, as the API server's
/// paths overlap (`/api/v1/namespaces/x` vs `/api/v1/namespaces/x/pods`).
pub async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    Query(query): Query<BTreeMap<String, String>>,
    body: Bytes,
) -> Response {
    shared.log_request(&method, &uri);
    let path = uri.path();
    if path == "/version" {
        return json_response(
            StatusCode::OK,
            &json!({"major": "1", "minor": "34", "gitVersion": "v1.34.0-fake", "platform": "linux/amd64"}),
        );
    }
    if let Some(code) = shared.fail_with() {
        return status(code, "Failure", "the fake API server was told to fail");
    }
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return not_found(),
    };
    let (ns, plural, name) = match rest {
        [plural] => (None, *plural, None),
        ["namespaces", ns, plural] => (Some(*ns), *plural, None),
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name)),
        [plural, name] => (None, *plural, Some(*name)),
        _ => return not_found(),
    };
    let Some(res) = find(group, version, plural) else {
        return not_found();
    };
    if res.istio && !shared.istio_installed.load(Ordering::SeqCst) {
        return not_found();
    }
    if ns.is_some() && !res.namespaced {
        return not_found();
    }
    match (method, name) {
        (Method::GET, None) => {
            let watch = matches!(query.get("watch").map(String::as_str), Some("1" | "true"));
            let scope = match scope(res, ns, &query) {
                Ok(s) => s,
                Err(e) => return status(400, "BadRequest", &e),
            };
            if watch {
                watch_response(&shared, scope, &query)
            } else {
                list_response(&shared, scope, &query).await
            }
        }
        (Method::GET, Some(name)) => match shared.storage.get(res, ns.unwrap_or_default(), name) {
            Some(v) => json_response(StatusCode::OK, &v),
            None => status(
                404,
                "NotFound",
                &format!("{} {name:?} not found", res.plural),
            ),
        },
        (Method::POST, None) | (Method::PUT, Some(_)) => {
            let Ok(mut obj) = serde_json::from_slice::<Value>(&body) else {
                return status(400, "BadRequest", "body is not JSON");
            };
            if let Some(ns) = ns {
                obj["metadata"]["namespace"] = Value::String(ns.to_owned());
            }
            let create = name.is_none();
            match shared.storage.put(res, obj, create) {
                Ok(v) => json_response(
                    if create {
                        StatusCode::CREATED
                    } else {
                        StatusCode::OK
                    },
                    &v,
                ),
                Err(409) => status(409, "AlreadyExists", "already exists"),
                Err(code) => status(code, "Invalid", "invalid object"),
            }
        }
        (Method::DELETE, Some(name)) => {
            match shared.storage.delete(res, ns.unwrap_or_default(), name) {
                Some(v) => json_response(StatusCode::OK, &v),
                None => status(
                    404,
                    "NotFound",
                    &format!("{} {name:?} not found", res.plural),
                ),
            }
        }
        _ => status(405, "MethodNotAllowed", "method not allowed"),
    }
}

fn scope(
    res: &'static ResDef,
    ns: Option<&str>,
    q: &BTreeMap<String, String>,
) -> Result<Scope, String> {
    Ok(Scope {
        res,
        namespace: ns.map(str::to_owned),
        labels: LabelSelector::parse(q.get("labelSelector").map_or("", String::as_str))?,
        fields: FieldSelector::parse(q.get("fieldSelector").map_or("", String::as_str))?,
    })
}

async fn list_response(shared: &Shared, scope: Scope, q: &BTreeMap<String, String>) -> Response {
    if shared.hang_lists.load(Ordering::SeqCst) {
        // A hanging registry: never answers (the client's timeout must fire).
        let mut released = shared.release.subscribe();
        let _ = released.wait_for(|r| *r).await;
    }
    if shared.garbage_lists.load(Ordering::SeqCst) {
        return Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "text/html")
            .body(Body::from("<html><body>not an API server</body></html>"))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    }
    let (items, rv) = shared.storage.list(&scope);
    // Like the API server: resourceVersion=0 is served from the cache, which
    // ignores `limit`; otherwise pages of `limit` items continue after a name.
    let from_cache = q.get("resourceVersion").is_some_and(|v| v == "0");
    let limit = q
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0 && !from_cache);
    let after = q.get("continue").cloned().unwrap_or_default();
    let mut page: Vec<Value> = items
        .into_iter()
        .filter(|v| after.is_empty() || item_id(v) > after)
        .collect();
    let mut cont = None;
    if let Some(limit) = limit
        && page.len() > limit
    {
        page.truncate(limit);
        cont = page.last().map(item_id);
    }
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = Value::String(c);
    }
    json_response(
        StatusCode::OK,
        &json!({
            "kind": format!("{}List", scope.res.kind),
            "apiVersion": scope.res.api_version(),
            "metadata": meta,
            "items": page,
        }),
    )
}

fn item_id(v: &Value) -> String {
    format!(
        "{}/{}",
        v["metadata"]["namespace"].as_str().unwrap_or_default(),
        v["metadata"]["name"].as_str().unwrap_or_default()
    )
}

fn watch_response(shared: &Arc<Shared>, scope: Scope, q: &BTreeMap<String, String>) -> Response {
    let bookmarks = q
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true" || v == "1");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs);
    let from = q
        .get("resourceVersion")
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|v| *v > 0);
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(WATCH_LINES_CAPACITY);
    let line = |v: &Value| Ok(Bytes::from(format!("{v}\n")));
    match from {
        None => {
            // No resourceVersion: synthetic ADDED events for what exists, then live.
            let (items, rv) = shared.storage.list(&scope);
            match shared.storage.watch_from(rv) {
                Ok((backlog, live)) => {
                    let first: Vec<_> = items
                        .iter()
                        .map(|o| line(&json!({"type": "ADDED", "object": o})))
                        .collect();
                    let open = OpenWatch::new(shared);
                    tokio::spawn(pump(
                        tx, first, backlog, live, scope, bookmarks, timeout, open,
                    ));
                }
                Err(_) => return status(500, "InternalError", "history lost"),
            }
        }
        Some(from) => match shared.storage.watch_from(from) {
            Ok((backlog, live)) => {
                let open = OpenWatch::new(shared);
                tokio::spawn(pump(
                    tx,
                    Vec::new(),
                    backlog,
                    live,
                    scope,
                    bookmarks,
                    timeout,
                    open,
                ));
            }
            Err(compacted) => {
                // As the API server: 200, then one ERROR event with a 410 Status.
                let gone = expired_line(&format!("too old resource version: {from} ({compacted})"));
                let _ = tx.try_send(Ok(gone));
            }
        },
    }
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Counts an open watch for as long as it lives.
struct OpenWatch(Arc<Shared>);

impl OpenWatch {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.open_watches.fetch_add(1, Ordering::SeqCst);
        Self(shared.clone())
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.open_watches.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Writes one watch's events until it times out, is closed, falls behind, or the
/// client goes away.
#[allow(clippy::too_many_arguments)]
async fn pump(
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    first: Vec<Result<Bytes, std::io::Error>>,
    backlog: Vec<Arc<super::state::Change>>,
    mut live: broadcast::Receiver<Wire>,
    scope: Scope,
    bookmarks: bool,
    timeout: Option<Duration>,
    _open: OpenWatch,
) {
    let deadline = tokio::time::Instant::now() + timeout.unwrap_or(Duration::from_secs(1800));
    for l in first {
        if tx.send(l).await.is_err() {
            return;
        }
    }
    for c in backlog {
        if let Some(l) = event_line(&c, &scope)
            && tx.send(Ok(l)).await.is_err()
        {
            return;
        }
    }
    let mut paused = false;
    loop {
        let wire = tokio::select! {
            () = tokio::time::sleep_until(deadline) => return,
            w = live.recv() => w,
        };
        let out = match wire {
            Ok(Wire::Change(_)) if paused => None,
            Ok(Wire::Change(c)) => event_line(&c, &scope).map(Ok),
            Ok(Wire::Pause) => {
                paused = true;
                None
            }
            Ok(Wire::Expire) => {
                let gone = expired_line(&format!(
                    "too old resource version (watch of {} expired)",
                    scope.res.plural
                ));
                let _ = tx.send(Ok(gone)).await;
                return;
            }
            Ok(Wire::Bookmark(rv)) if bookmarks => Some(Ok(Bytes::from(format!(
                "{}\n",
                json!({"type": "BOOKMARK", "object": {
                    "kind": scope.res.kind, "apiVersion": scope.res.api_version(),
                    "metadata": {"resourceVersion": rv.to_string()}}})
            )))),
            Ok(Wire::Bookmark(_)) => None,
            Ok(Wire::Raw(s)) => Some(Ok(Bytes::from(format!("{s}\n")))),
            Ok(Wire::Close { abrupt: false }) => return,
            Ok(Wire::Close { abrupt: true }) => {
                Some(Err(std::io::Error::other("connection dropped")))
            }
            // Too slow: closed, as the API server closes a lagging watcher; the
            // client resumes from its last resourceVersion.
            Err(broadcast::error::RecvError::Lagged(_)) => return,
            Err(broadcast::error::RecvError::Closed) => return,
        };
        if let Some(item) = out {
            let stop = item.is_err();
            if tx.send(item).await.is_err() || stop {
                return;
            }
        }
    }
}

/// The watch event a change is for this scope, if any. A modification that moves
/// an object into or out of a label selector is an ADDED or DELETED for it.
fn event_line(c: &super::state::Change, scope: &Scope) -> Option<Bytes> {
    if !std::ptr::eq(c.res, scope.res) {
        return None;
    }
    let now = scope.matches(&c.object);
    let before = c.old.as_ref().is_some_and(|o| scope.matches(o));
    let ty = match c.ty {
        ChangeType::Added if now => "ADDED",
        ChangeType::Modified if now && before => "MODIFIED",
        ChangeType::Modified if now => "ADDED",
        ChangeType::Modified if before => "DELETED",
        ChangeType::Deleted if before => "DELETED",
        _ => return None,
    };
    Some(Bytes::from(format!(
        "{}\n",
        json!({"type": ty, "object": c.object})
    )))
}

/// An `ERROR` watch event holding a `410 Expired` Status.
fn expired_line(message: &str) -> Bytes {
    let gone = json!({"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": "Expired", "code": 410}});
    Bytes::from(format!("{gone}\n"))
}

fn json_response(code: StatusCode, v: &Value) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(v.to_string()))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    json_response(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code}),
    )
}

fn not_found() -> Response {
    status(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}
