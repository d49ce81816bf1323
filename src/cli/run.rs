//! `colocate run`: the controller, until SIGTERM or SIGINT. A first signal shuts down cleanly
//! (stop deciding, finish or abandon commands in flight, release the Lease); a second one
//! exits at once. A controller task that ends or panics unexpectedly stops the controller the
//! same clean way, and the process exits non-zero with an error naming the task.

use anyhow::Context;
use colocate::live::config::{RunConfig, RunFlags};
use colocate::live::controller;

use super::logging;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The configuration is wrong: exit code 2.
    #[error(transparent)]
    Config(#[from] colocate::yaml::InputError),
    #[error("{0:#}")]
    Runtime(anyhow::Error),
}

pub fn run(flags: &RunFlags) -> Result<(), RunError> {
    let config = RunConfig::resolve(flags, std::env::var("POD_NAMESPACE").ok())?;
    logging::init(config.run.log_format);
    tracing::info!(settings = %config.describe(), "starting");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
        .map_err(RunError::Runtime)?;
    runtime
        .block_on(async move {
            let client = kube::Client::try_default()
                .await
                .context("connecting to Kubernetes (in-cluster config, or KUBECONFIG / ~/.kube/config)")?;
            let shutdown = signals().context("installing signal handlers")?;
            controller::run(config, client, shutdown).await.context("colocate run")?;
            tracing::info!("stopped");
            Ok::<(), anyhow::Error>(())
        })
        .map_err(RunError::Runtime)
}

/// Resolves on the first SIGTERM or SIGINT; a second one exits the process at once.
fn signals() -> anyhow::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(signal = name, "shutting down; a second signal exits at once");
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            tracing::warn!("second signal: exiting without cleanup");
            std::process::exit(130);
        });
    })
}
