//! The admin HTTP server: `/healthz` (the process is up), `/readyz` (the engine has
//! caught up with the log head, so what it serves is current) and `/metrics`
//! (Prometheus text).
//!
//! What it does NOT do: expose debug views or anything that mutates state.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

/// Answers "has the engine caught up with the log head?".
pub type ReadyFn = Arc<dyn Fn() -> bool + Send + Sync>;

#[derive(Clone)]
struct AdminState {
    metrics: Arc<Metrics>,
    ready: ReadyFn,
}

/// The admin routes.
pub fn router(metrics: Arc<Metrics>, ready: ReadyFn) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(AdminState { metrics, ready })
}

async fn readyz(State(s): State<AdminState>) -> impl IntoResponse {
    if (s.ready)() {
        s.metrics.ready.set(1);
        (StatusCode::OK, "ready\n")
    } else {
        s.metrics.ready.set(0);
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the engine is catching up with the log\n",
        )
    }
}

async fn metrics_text(State(s): State<AdminState>) -> impl IntoResponse {
    s.metrics.ready.set(i64::from((s.ready)()));
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

/// Serves the admin routes on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    ready: ReadyFn,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(metrics, ready))
        .with_graceful_shutdown(shutdown)
        .await
}
