//! `colocate example-master`: a master protocol v1 server for a job whose workers are the
//! replicas of one Deployment, and the template for framework integrators.
//!
//! It is the reference master ([`MasterState`], [`serve_with_shutdown`]) over a
//! [`DeploymentBackend`]. An integrator writing a master for their framework keeps the shape of
//! [`run`] and replaces:
//! - the backend: [`DeploymentBackend`] becomes their own [`WorkerBackend`](colocate::master_protocol::WorkerBackend),
//!   which asks the framework's workers to leave gracefully (checkpoint, leave the rendezvous)
//!   before lowering the count, and reports throughput, progress and the `Completed`/`Failed`
//!   phase, which only the job knows;
//! - the flags: the job's bounds and per-worker resources usually come from the framework's own
//!   job spec rather than from flags;
//! - the logging: `tracing` events go to stderr through [`super::logging`] (text or JSON); an
//!   integrator plugs in their own subscriber there.
//!
//! Run it next to the workers, behind a Service labelled `colocate.dev/master: "true"` with a port
//! named `master` (see `docs/master-protocol.md`); the RBAC it needs is in
//! [`colocate::reference_master::deployment_backend`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context};
use colocate::core::resources::{parse_cpu, parse_memory};
use colocate::live::config::LogFormat;
use colocate::master_protocol::{MasterConfig, MasterState, WorkerBackend, WorkerResources};
use colocate::reference_master::deployment_backend::DeploymentBackend;
use colocate::reference_master::modelled::{ModelledTraining, TrainingModel};
use colocate::reference_master::serve_with_shutdown;
use colocate::reference_master::tls_listener::{server_config, TlsListener};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::net::TcpListener;

/// Flags of `colocate example-master`; each has an environment variable (for a pod spec).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Job name reported in /v1/status (the `colocate.dev/job` label of its workers).
    #[arg(long, env = "COLOCATE_MASTER_JOB", value_name = "NAME")]
    pub job: String,
    /// Namespace of the worker Deployment (default: the kube config's namespace; in a pod, its own).
    #[arg(long, env = "COLOCATE_MASTER_NAMESPACE", value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// The worker Deployment, scaled through its /scale subresource.
    #[arg(long, env = "COLOCATE_MASTER_DEPLOYMENT", value_name = "NAME")]
    pub deployment: String,
    /// Fewest workers the job runs with; the controller never asks for fewer.
    #[arg(long, env = "COLOCATE_MASTER_MIN_WORKERS", value_name = "N")]
    pub min_workers: u32,
    /// Most workers the job can use.
    #[arg(long, env = "COLOCATE_MASTER_MAX_WORKERS", value_name = "N")]
    pub max_workers: u32,
    /// CPU one worker requests (a Kubernetes quantity: 2, 500m), reported as worker_resources.cpu.
    #[arg(long, env = "COLOCATE_MASTER_WORKER_CPU", value_name = "QUANTITY", value_parser = cpu_quantity)]
    pub worker_cpu: String,
    /// Memory one worker requests (4Gi, 512Mi), reported as worker_resources.memory.
    #[arg(long, env = "COLOCATE_MASTER_WORKER_MEMORY", value_name = "QUANTITY", value_parser = memory_quantity)]
    pub worker_memory: String,
    /// How long the whole job pauses on a membership change (10s, 1m); reported as rescale_cost_s.
    #[arg(long, env = "COLOCATE_MASTER_RESCALE_COST", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub rescale_cost: Option<Duration>,
    /// Workers the job gives up are gone within this time (5s): the master deletes them with it
    /// as their grace period (and again any the ReplicaSet removed), and announces it as
    /// worker_release_s (protocol v1.1) so the controller plans releases that far ahead.
    /// Default: the worker pods' own terminationGracePeriodSeconds, which the controller then
    /// assumes.
    #[arg(long, env = "COLOCATE_MASTER_WORKER_RELEASE", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub worker_release: Option<Duration>,
    /// Workers the job gives up first give their room back by an in-place resize (`/resize`,
    /// Kubernetes 1.33+): their requests drop to 1m CPU and 1Mi memory, the scheduler frees
    /// the rest once the kubelet reports it (about a second), and they exit within their grace
    /// period on almost no CPU. Announces worker_release_s 3 (the longest it waits for the
    /// kubelet) unless --worker-release is shorter. Needs Burstable workers and `pods/resize patch`.
    #[arg(long, env = "COLOCATE_MASTER_RELEASE_IN_PLACE")]
    pub release_in_place: bool,
    /// Report the throughput and progress of a modelled job of this many samples (for test beds
    /// and demos whose workers do no real work; see `--model-samples-per-worker-s`). A real
    /// master reports what its framework measures.
    #[arg(long, env = "COLOCATE_MASTER_MODEL_SAMPLES", value_name = "N", requires = "model_samples_per_worker_s")]
    pub model_samples: Option<u64>,
    /// Samples/s of one worker of the modelled job.
    #[arg(long, env = "COLOCATE_MASTER_MODEL_SAMPLES_PER_WORKER_S", value_name = "RATE", requires = "model_samples")]
    pub model_samples_per_worker_s: Option<f64>,
    /// Speedup of the modelled job: n workers process n^EXPONENT times one worker's samples.
    #[arg(
        long,
        env = "COLOCATE_MASTER_MODEL_EXPONENT",
        value_name = "EXPONENT",
        default_value_t = 0.8,
        requires = "model_samples"
    )]
    pub model_exponent: f64,
    /// Address to serve master protocol v1 on.
    #[arg(long, env = "COLOCATE_MASTER_LISTEN", value_name = "ADDR", default_value = "0.0.0.0:8090")]
    pub listen: SocketAddr,
    /// File holding the bearer token every request must carry (a mounted Secret); without it,
    /// requests need no token.
    #[arg(long, env = "COLOCATE_MASTER_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Serve https with this PEM certificate chain (with --tls-key-file); the controller then
    /// needs the master's Service port to say `appProtocol: https`.
    #[arg(long, env = "COLOCATE_MASTER_TLS_CERT_FILE", value_name = "FILE", requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file.
    #[arg(long, env = "COLOCATE_MASTER_TLS_KEY_FILE", value_name = "FILE", requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
    /// Accept only clients presenting a certificate this PEM bundle signed (mTLS).
    #[arg(long, env = "COLOCATE_MASTER_TLS_CLIENT_CA_FILE", value_name = "FILE", requires = "tls_cert_file")]
    pub tls_client_ca_file: Option<PathBuf>,
    /// Kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the pod's ServiceAccount).
    #[arg(long, env = "COLOCATE_MASTER_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Log as `text` (default) or `json`, one object per line.
    #[arg(long, env = "COLOCATE_LOG_FORMAT", value_name = "FORMAT", default_value = "text")]
    pub log_format: LogFormat,
}

fn cpu_quantity(s: &str) -> Result<String, String> {
    parse_cpu(s).map(|_| s.to_string()).map_err(|e| e.to_string())
}

fn memory_quantity(s: &str) -> Result<String, String> {
    parse_memory(s).map(|_| s.to_string()).map_err(|e| e.to_string())
}

/// Failures of `example-master`: bad flags or configuration exit with 2, anything later with 1.
#[derive(Debug, thiserror::Error)]
pub enum ExampleMasterError {
    #[error("{}", chain(.0))]
    Config(anyhow::Error),
    #[error("{}", chain(.0))]
    Runtime(anyhow::Error),
}

/// The error and its causes, skipping a cause whose text its parent already quotes.
fn chain(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text = format!("{text}: {cause}");
        }
    }
    text
}

/// Serves until SIGTERM or SIGINT, then finishes the requests in flight.
pub fn run(args: Args) -> Result<(), ExampleMasterError> {
    super::logging::init(args.log_format);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
        .map_err(ExampleMasterError::Runtime)?;
    runtime.block_on(serve(args))
}

async fn serve(args: Args) -> Result<(), ExampleMasterError> {
    use ExampleMasterError::{Config, Runtime};

    // Everything the flags decide is checked before the cluster is contacted.
    if args.min_workers > args.max_workers {
        return Err(Config(anyhow!(
            "--min-workers ({}) is above --max-workers ({})",
            args.min_workers,
            args.max_workers
        )));
    }
    let model = match (args.model_samples, args.model_samples_per_worker_s) {
        (Some(total), Some(rate)) => {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(Config(anyhow!("--model-samples-per-worker-s must be a positive number, got {rate}")));
            }
            if !(args.model_exponent > 0.0 && args.model_exponent <= 1.0) {
                return Err(Config(anyhow!("--model-exponent must be in (0, 1], got {}", args.model_exponent)));
            }
            Some(TrainingModel { total, samples_per_worker_s: rate, exponent: args.model_exponent })
        }
        _ => None,
    };
    let token = match &args.token_file {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("reading --token-file {}", path.display()));
            let token = text.map_err(Config)?.trim().to_string();
            if token.is_empty() {
                return Err(Config(anyhow!("--token-file {} is empty", path.display())));
            }
            Some(token)
        }
        None => None,
    };
    let tls = match (&args.tls_cert_file, &args.tls_key_file) {
        (Some(cert), Some(key)) => Some(
            server_config(cert, key, args.tls_client_ca_file.as_deref())
                .context("--tls-cert-file / --tls-key-file / --tls-client-ca-file")
                .map_err(Config)?,
        ),
        _ => None,
    };
    let kube_config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading --kubeconfig {}", path.display()))
                .map_err(Config)?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading --kubeconfig {}", path.display()))
                .map_err(Config)?
        }
        None => kube::Config::infer().await.context("finding a kube config (no --kubeconfig given)").map_err(Config)?,
    };
    let namespace = args.namespace.clone().unwrap_or_else(|| kube_config.default_namespace.clone());
    let client = kube::Client::try_from(kube_config).context("building the Kubernetes client").map_err(Config)?;

    // An integrator replaces this backend with one that drives their framework's workers.
    let mut backend = DeploymentBackend::new(client, &namespace, &args.deployment);
    if let Some(release) = args.worker_release {
        backend = backend.with_release_grace(release);
    }
    if args.release_in_place {
        backend = backend.with_release_in_place();
    }
    let generation = backend.generation().await.map_err(|e| Runtime(e.into()))?;
    let worker_release = backend.worker_release();

    let mut config = MasterConfig::new(
        args.job.clone(),
        args.min_workers,
        args.max_workers,
        WorkerResources::new(args.worker_cpu.clone(), args.worker_memory.clone()),
    );
    config.rescale_cost_s = args.rescale_cost.map(|d| d.as_secs_f64());
    config.worker_release_s = worker_release.map(|d| d.as_secs_f64());
    config.token = token;
    config.initial_generation = generation;
    match model {
        Some(model) => listen(&args, &namespace, config, ModelledTraining::new(backend, model), tls).await,
        None => listen(&args, &namespace, config, backend, tls).await,
    }
}

/// Serves the protocol over `backend` until a shutdown signal.
async fn listen<B: WorkerBackend>(
    args: &Args,
    namespace: &str,
    config: MasterConfig,
    backend: B,
    tls: Option<std::sync::Arc<rustls::ServerConfig>>,
) -> Result<(), ExampleMasterError> {
    use ExampleMasterError::{Config, Runtime};
    let generation = config.initial_generation;
    let state = MasterState::new(config, backend).map_err(|e| Config(e.into()))?;

    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {} for master protocol v1 (set another with --listen)", args.listen))
        .map_err(Runtime)?;
    let addr = listener.local_addr().context("reading the listening address").map_err(Runtime)?;
    let shutdown = shutdown_signal().map_err(Runtime)?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(job = %args.job, deployment = %format!("{namespace}/{}", args.deployment), generation, %addr, scheme,
        "listening on {addr}");
    let served = match tls {
        Some(tls) => {
            let listener = TlsListener::new(listener, tls).context("reading the listening address").map_err(Runtime)?;
            serve_with_shutdown(listener, state, shutdown).await
        }
        None => serve_with_shutdown(listener, state, shutdown).await,
    };
    served.context("serving master protocol v1").map_err(Runtime)?;
    tracing::info!("stopped");
    Ok(())
}

/// Completes on the first SIGTERM (what the kubelet sends) or SIGINT (Ctrl-C). The handlers are
/// installed before it returns, so a signal arriving while the server starts is not lost.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(signal = name, "finishing requests in flight");
    })
}
