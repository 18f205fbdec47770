//! The admin HTTP server: `/healthz` (the process is up), `/readyz` (caught up,
//! serving the last good state, or catching up; see `readiness`), `/metrics`
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
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::conn::ConnLimits;
use crate::metrics::Metrics;
use crate::readiness::Readiness;

pub mod debug;
pub mod dump;
pub mod events;
pub mod guard;
pub mod impact;
mod listen;
pub mod registry_view;
pub mod render;
mod rules_refs;
pub mod rules_view;
pub mod syncz;

pub use debug::DebugState;

/// Answers "is this replica ready to serve, and how current is it?" (see
/// `readiness` for the states and the HTTP status of each).
pub type ReadyFn = Arc<dyn Fn() -> Readiness + Send + Sync>;

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

/// The admin routes plus the `/debug/` views when `debug` is given, with the
/// default request limits and no token.
pub fn router_with_debug(
    metrics: Arc<Metrics>,
    ready: ReadyFn,
    debug: Option<DebugState>,
) -> Router {
    router_guarded(metrics, ready, debug, None, guard::RequestLimits::default())
}

/// The admin routes plus the `/debug/` views when `debug` is given; those need
/// `token` when it is given (see [`guard`]), and every route has `limits`.
pub fn router_guarded(
    metrics: Arc<Metrics>,
    ready: ReadyFn,
    debug: Option<DebugState>,
    token: Option<Arc<guard::AdminToken>>,
    limits: guard::RequestLimits,
) -> Router {
    let base = router(metrics, ready);
    let routes = match (debug, token) {
        (Some(d), Some(t)) => base.merge(debug::routes(d).layer(
            axum::middleware::from_fn_with_state(t, guard::require_token),
        )),
        (Some(d), None) => base.merge(debug::routes(d)),
        (None, _) => base,
    };
    routes
        .layer(axum::extract::DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            limits,
            guard::limit_requests,
        ))
}

async fn readyz(State(s): State<AdminState>) -> impl IntoResponse {
    let r = (s.ready)();
    s.metrics.set_serving_state(r.state);
    (
        r.http_status(),
        [(header::CONTENT_TYPE, "application/json")],
        r.to_json(),
    )
}

async fn metrics_text(State(s): State<AdminState>) -> impl IntoResponse {
    s.metrics.set_serving_state((s.ready)().state);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

/// Serves `routes` (see [`router_with_debug`]) on `listener` under `limits`
/// (counted in `metrics`' connection metrics) until `shutdown` resolves.
pub async fn serve_routes(
    listener: tokio::net::TcpListener,
    routes: Router,
    limits: ConnLimits,
    metrics: &Metrics,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    listen::serve_gated(listener, routes, limits, &metrics.connections, shutdown).await;
    Ok(())
}

/// Serves the admin routes on `listener`, with the default connection limits,
/// until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    ready: ReadyFn,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let routes = router(metrics.clone(), ready);
    serve_routes(listener, routes, ConnLimits::ADMIN, &metrics, shutdown).await
}
