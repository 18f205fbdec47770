//! The admin HTTP server: `/healthz` (the process is up), `/readyz` (the engine has
//! caught up with the log head, so what it serves is current), `/metrics`
//! (Prometheus text), and the read-only debug views under `/debug/` (see
//! `debug`): per-proxy sync status, config dumps in Envoy's format, the current
//! snapshot, log records and the service registry.
//!
//! Also here, because both the debug views and `deltapilot replay` use them: the
//! proto3 JSON renderer of encoded resources (`render`) and the config-dump
//! builder (`dump`).
//!
//! What it does NOT do: anything that mutates state.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

pub mod debug;
pub mod dump;
pub mod events;
pub mod registry_view;
pub mod render;
pub mod rules_view;
pub mod syncz;

pub use debug::DebugState;

/// Answers "is this replica ready to serve?": `Ok` once the engine has caught up
/// with the log head and every in-process adapter's start-up resync is in the log,
/// else `Err` with what is still missing (shown in the `/readyz` body).
pub type ReadyFn = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

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

/// The admin routes plus the `/debug/` views when `debug` is given.
pub fn router_with_debug(
    metrics: Arc<Metrics>,
    ready: ReadyFn,
    debug: Option<DebugState>,
) -> Router {
    let base = router(metrics, ready);
    match debug {
        Some(d) => base.merge(debug::routes(d)),
        None => base,
    }
}

async fn readyz(State(s): State<AdminState>) -> impl IntoResponse {
    match (s.ready)() {
        Ok(()) => {
            s.metrics.ready.set(1);
            (StatusCode::OK, "ready\n".to_owned())
        }
        Err(reason) => {
            s.metrics.ready.set(0);
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {reason}\n"),
            )
        }
    }
}

async fn metrics_text(State(s): State<AdminState>) -> impl IntoResponse {
    s.metrics.ready.set(i64::from((s.ready)().is_ok()));
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

/// Serves `routes` (see [`router_with_debug`]) on `listener` until `shutdown`
/// resolves.
pub async fn serve_routes(
    listener: tokio::net::TcpListener,
    routes: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, routes)
        .with_graceful_shutdown(shutdown)
        .await
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
