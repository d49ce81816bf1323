//! The telemetry HTTP server: `GET /metrics` (OpenMetrics text), `GET /healthz` (200 while the
//! process runs) and `GET /readyz` (200 only once every reflector has synced and while the
//! controller is not shutting down; 503 with the reason otherwise).

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

use super::metrics::Metrics;

/// Content type of `/metrics`.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What `/readyz` answers from. Clones share the same state.
#[derive(Clone, Debug, Default)]
pub struct Health {
    synced: Arc<AtomicBool>,
    shutting_down: Arc<AtomicBool>,
}

impl Health {
    pub fn new() -> Health {
        Health::default()
    }

    /// Every reflector has listed its objects: the controller can decide.
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }

    /// The controller is stopping: take it out of service before it stops answering.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }

    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// `Ok` when ready, else why not.
    pub fn readiness(&self) -> Result<(), &'static str> {
        if self.is_shutting_down() {
            Err("shutting down")
        } else if !self.is_synced() {
            Err("reflectors not synced yet")
        } else {
            Ok(())
        }
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    health: Health,
}

/// The telemetry routes over `metrics` and `health`.
pub fn router(metrics: Arc<Metrics>, health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found: serving /metrics, /healthz and /readyz\n") })
        .with_state(AppState { metrics, health })
}

/// Serves the telemetry routes on `listener` until `shutdown` completes; from then on `/readyz`
/// answers 503 while the requests in flight finish.
pub async fn serve<F>(listener: TcpListener, metrics: Arc<Metrics>, health: Health, shutdown: F) -> io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    let on_shutdown = health.clone();
    axum::serve(listener, router(metrics, health))
        .with_graceful_shutdown(async move {
            shutdown.await;
            on_shutdown.begin_shutdown();
        })
        .await
}

async fn metrics_handler(State(state): State<AppState>) -> Response {
    state.metrics.set_reflectors_ready(state.health.is_synced());
    ([(CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], state.metrics.encode()).into_response()
}

async fn readyz(State(state): State<AppState>) -> Response {
    match state.health.readiness() {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")).into_response(),
    }
}
