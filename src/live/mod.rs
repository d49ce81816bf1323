//! The live controller's edges: Kubernetes objects in, the master protocol out.

pub mod adapters;
pub mod config;
pub mod controller;
pub mod endpoint;
pub mod kinds;
pub mod lease;
pub mod master;
pub mod sampler;
pub mod selector;
pub mod tls;
pub mod translate;
pub mod view;
pub mod watch;
