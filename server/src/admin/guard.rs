//! What guards the admin server: the bearer token of `/debug/*` (which shows
//! every proxy's configuration, the event log and the registry), and the
//! request size and time limits of every route.
//!
//! The token lives in a file (`--admin-token-file`, a mounted Secret), re-read
//! when it changes: its resolved target's inode, size and modification time are
//! compared on each guarded request, so a rotated Secret (Kubernetes' `..data`
//! swap) takes effect at the next request. A file that can no longer be read
//! refuses every guarded request (fail closed), saying so.
//!
//! What it does NOT do: guard `/healthz`, `/readyz` or `/metrics` (probes and
//! scrapers reach them without credentials), or authenticate by client
//! certificate.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Request limits of the admin server (`--admin-max-body-bytes`,
/// `--admin-request-timeout-secs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    /// Largest request body accepted; larger ones get 413.
    pub max_body_bytes: usize,
    /// Longest a request may take, its body included; then 408 and the
    /// connection is closed.
    pub timeout: Duration,
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits {
            max_body_bytes: 1024 * 1024,
            timeout: Duration::from_secs(30),
        }
    }
}

/// The bearer token `/debug/*` requires, read from its file.
#[derive(Debug)]
pub struct AdminToken {
    path: PathBuf,
    cached: Mutex<Cached>,
}

/// The file's stamp when last read, and what reading it gave.
type Cached = (Option<Stamp>, Result<Arc<str>, String>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    inode: u64,
    len: u64,
    modified: Option<SystemTime>,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        inode: m.ino(),
        len: m.len(),
        modified: m.modified().ok(),
    })
}

fn read_token(path: &Path) -> Result<Arc<str>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--admin-token-file {}: cannot read: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!(
            "--admin-token-file {}: holds no token (the file is empty)",
            path.display()
        ));
    }
    if token.chars().any(char::is_whitespace) {
        return Err(format!(
            "--admin-token-file {}: the token holds whitespace; a bearer token is one word",
            path.display()
        ));
    }
    Ok(Arc::from(token))
}

impl AdminToken {
    /// Reads the token from `path`; an unreadable or empty file is an error
    /// (at start, so that a typo fails the start, not the first request).
    pub fn new(path: PathBuf) -> Result<Arc<Self>, String> {
        let s = stamp(&path);
        let token = read_token(&path)?;
        Ok(Arc::new(AdminToken {
            path,
            cached: Mutex::new((s, Ok(token))),
        }))
    }

    /// The token now, re-read if the file changed.
    fn current(&self) -> Result<Arc<str>, String> {
        let now = stamp(&self.path);
        let mut c = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if now.is_none() || c.0 != now {
            c.1 = read_token(&self.path);
            c.0 = now;
        }
        c.1.clone()
    }
}

/// Whether `a` equals `b`, in time that depends only on their lengths.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn unauthorized(body: &'static str) -> Response {
    let mut r = (StatusCode::UNAUTHORIZED, body).into_response();
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

/// Middleware of the `/debug/*` routes: `Authorization: Bearer TOKEN` or 401.
pub async fn require_token(
    State(token): State<Arc<AdminToken>>,
    req: Request,
    next: Next,
) -> Response {
    let want = match token.current() {
        Ok(t) => t,
        Err(why) => {
            tracing::warn!(error = %why, "refusing /debug/* requests: the admin token cannot be read");
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("503: the server's admin token cannot be read ({why}); /debug/* is closed until it can\n"),
            )
                .into_response();
        }
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    match given {
        None => unauthorized(
            "401: /debug/* needs `Authorization: Bearer TOKEN`, the token in the server's --admin-token-file\n",
        ),
        Some(g) if !same(g.as_bytes(), want.as_bytes()) => {
            unauthorized("401: the bearer token does not match the server's --admin-token-file\n")
        }
        Some(_) => next.run(req).await,
    }
}

/// Middleware of every admin route: a declared body above the limit gets 413
/// at once (a streamed one gets it from the body limit when read), and a
/// request taking longer than the timeout gets 408 and its connection closed.
pub async fn limit_requests(
    State(limits): State<RequestLimits>,
    req: Request,
    next: Next,
) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_body_bytes as u64) {
        return too_large(limits.max_body_bytes);
    }
    match tokio::time::timeout(limits.timeout, next.run(req)).await {
        Ok(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => too_large(limits.max_body_bytes),
        Ok(r) => r,
        Err(_) => {
            let mut r = Response::new(Body::from(format!(
                "408: the request took longer than {}s (--admin-request-timeout-secs)\n",
                limits.timeout.as_secs()
            )));
            *r.status_mut() = StatusCode::REQUEST_TIMEOUT;
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            r
        }
    }
}

fn too_large(max: usize) -> Response {
    let mut r = Response::new(Body::from(format!(
        "413: the request body is larger than {max} bytes (--admin-max-body-bytes)\n"
    )));
    *r.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"abcd"));
        assert!(!same(b"", b"a"));
    }

    #[test]
    fn the_token_file_is_reread_when_it_changes_and_must_hold_a_token() {
        let tmp = tempfile::tempdir().expect("tmp");
        let p = tmp.path().join("token");
        std::fs::write(&p, "").expect("write");
        assert!(
            AdminToken::new(p.clone())
                .expect_err("empty")
                .contains("holds no token")
        );
        std::fs::write(&p, "first\n").expect("write");
        let t = AdminToken::new(p.clone()).expect("token");
        assert_eq!(&*t.current().expect("read"), "first");
        let tmp2 = tmp.path().join("token.new");
        std::fs::write(&tmp2, "second-token").expect("write");
        std::fs::rename(&tmp2, &p).expect("rename");
        assert_eq!(&*t.current().expect("read"), "second-token");
        std::fs::remove_file(&p).expect("rm");
        assert!(t.current().expect_err("gone").contains("cannot read"));
    }
}
