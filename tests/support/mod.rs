//! Helpers shared by the integration tests. A test binary includes them with `mod support;`.

// Every test binary compiles all of `support` but uses only part of it.
#![allow(dead_code)]

pub mod cadvisor;
pub mod certs;
pub mod cluster;
pub mod grafana;
pub mod latency_exporter;
pub mod load_exporter;
pub mod metrics_server;
pub mod pod_recorder;
pub mod process;
pub mod prometheus;
pub mod proxy;
pub mod spike;
pub mod spike_acceptance;
pub mod spike_figures;
pub mod testbed;
