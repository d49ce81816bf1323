//! The controller's telemetry: Prometheus metrics ([`metrics`]) and the HTTP server that exposes
//! them with the health probes ([`server`]: `/metrics`, `/healthz`, `/readyz`).

pub mod metrics;
pub mod server;

pub use metrics::Metrics;
pub use server::{router, serve, Health, OPENMETRICS_CONTENT_TYPE};
