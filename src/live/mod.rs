//! The live controller's edges: Kubernetes objects in, the master protocol out.

pub mod adapters;
pub mod batch;
pub mod clock;
pub mod config;
pub mod controller;
pub mod endpoint;
pub mod kinds;
pub mod kube_backend;
pub mod lease;
pub mod master_client;
pub mod names;
pub mod sampler;
pub mod selector;
pub mod state;
pub mod tls;
pub mod translate;
pub mod view;
pub mod watch;

/// An error followed by those of its causes its message does not already contain: client
/// libraries often say only what failed, and the cause says why.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    text
}
