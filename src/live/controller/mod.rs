//! `colocate run`: the live controller. Wiring only; each part is its own module.
//!
//! ```text
//! reflectors (nodes, pods, HPAs, master Services) --changed--> decider --intents--> actuator
//! poller (job statuses) ---------------------------^              |                    |
//! sampler (load, p99) -----------------------------^              v                    v
//!                                                             /metrics        masters, pod deletes
//! ```
//! Nothing is decided before every reflector has listed its objects; only the Lease holder
//! acts (the others decide too, so their caches and memory are warm when they take over).

pub mod actuator;
pub mod book;
pub mod decider;
pub mod events;
pub mod forced;
pub mod gate;
pub mod jobs;
mod ledger;
pub mod masters;
pub mod node_status;
pub mod poller;
pub mod record;
pub mod services;
mod tasks;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use tokio::sync::{watch, Notify};

pub use self::tasks::TaskFailed;
use self::tasks::{Supervisor, Until};

use self::actuator::{Actuator, ActuatorConfig};
use self::decider::Decider;
use self::jobs::JobDirectory;
use self::ledger::Actuation;
use self::masters::{MasterClients, MasterDiscovery};
use self::poller::Poller;
use self::record::DecisionRecorder;
use self::services::ServiceDirectory;
use crate::core::config::CapacityMode;
use crate::core::Core;
use crate::live::adapters::{AdapterError, AdapterJobs};
use crate::live::config::{http_url, RunConfig};
use crate::live::kinds::KindResources;
use crate::live::lease::{default_identity, LeaderElector, LeaseConfig, LeaseError};
use crate::live::master_client::{ClientConfigError, RetryPolicy};
use crate::live::sampler::usage::{PodUsages, UsageError, UsageSampler};
use crate::live::sampler::{self, Sampler, SamplerError};
use crate::live::watch::{Caches, WatchStats, WatchStopped, KINDS};
use crate::telemetry::metrics::ADAPTER_JOBS_WATCH_KIND;
use crate::telemetry::{self, Health, Metrics};

/// What stops `run` from starting; everything later is logged and retried instead.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr} for /metrics (set another with --metrics-addr or run.metrics_addr)")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    MasterToken(#[from] ClientConfigError),
    #[error(transparent)]
    Tls(#[from] crate::live::tls::TlsError),
    #[error("leader election on Lease {namespace}/{name}")]
    Lease {
        namespace: String,
        name: String,
        #[source]
        source: Box<LeaseError>,
    },
    #[error(transparent)]
    Sampler(#[from] crate::live::sampler::SamplerError),
    #[error("controller.capacity: usage")]
    Usage(#[source] UsageError),
    #[error("adapters (run.adapters): cannot start the watches of the adapted job kinds")]
    Adapters(#[from] AdapterError),
    #[error("the reflectors stopped before listing the cluster")]
    ReflectorsStopped,
}

/// Why `run` returned an error: it could not start, or one of its tasks stopped it.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    Task(#[from] TaskFailed),
}

/// Runs the controller until `shutdown` resolves; then stops deciding, lets commands in
/// flight finish (bounded), and releases the Lease so another replica takes over at once. A
/// task that ends or panics before then stops the controller the same way, and `run` returns
/// its error.
pub async fn run(
    config: RunConfig,
    client: Client,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let metrics = Arc::new(Metrics::new());
    metrics.set_target_utilization(config.controller.target_utilization);
    metrics.set_usage_memory_margin(config.controller.usage_memory_margin);
    let health = Health::new();
    let mut tasks = Supervisor::new(shutdown, health.clone());
    serve_metrics(&config, &metrics, &health, &mut tasks).await?;
    let secrets = Secrets::read(&config)?;
    // Watch events, polled statuses and fresh samples all wake the decision loop.
    let changed = Arc::new(Notify::new());
    let sampler = sampler(&config, &secrets, &metrics, &changed)?;
    let stats = Arc::new(WatchStats::default());
    let (caches, adapters) = start_reflectors(&config, &client, &changed, &stats, &mut tasks).await?;
    let usage = usage_sampler(&config, &secrets, &metrics, &changed, &caches)?;
    let identity = default_identity();
    let (elector, margin) = start_election(&config, &client, &identity, &metrics, &mut tasks)?;
    let status_timeout = config.run.status_interval.min(config.run.master_timeout);
    let poller =
        Arc::new(Poller::new(status_timeout, config.run.status_interval * 3, metrics.clone(), changed.clone()));
    let directory = Arc::new(job_directory(&config, secrets, &caches, adapters.clone())?);

    tracing::info!(identity = %identity, dry_run = config.run.dry_run, "waiting for the reflectors to list the cluster");
    match tasks.until(listed(&caches, adapters.as_ref())).await {
        Some(Ok(())) => {}
        Some(Err(_)) => return Err(StartError::ReflectorsStopped.into()),
        None => return stop(tasks, &elector).await,
    }
    health.set_synced();
    metrics.set_reflectors_ready(true);
    // One guard for both counts: a second lock in the same statement would wait for the first.
    let (nodes, pods) = {
        let state = caches.state();
        (state.node_count(), state.pod_count())
    };
    tracing::info!(nodes, pods, hpas = caches.hpas.state().len(), "reflectors synced");
    if let Some(usage) = &usage {
        // Nothing is decided on usage that is not there: a query answering nothing past the
        // stale limit stops the start, naming it.
        match tasks.until(usage.check(config.run.sample_stale_after, USAGE_CHECK_RETRY)).await {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(StartError::Usage(e).into()),
            None => return stop(tasks, &elector).await,
        }
        let (usage, interval, stopped) = (usage.clone(), config.run.sample_interval, tasks.stopped());
        tasks.spawn_infallible("usage sampler", Until::Stop, async move { usage.run(interval, stopped).await });
    }

    spawn_polling(&mut tasks, &poller, &directory, config.run.status_interval);
    if let Some(sampler) = &sampler {
        let (sampler, interval, stopped) = (sampler.clone(), config.run.sample_interval, tasks.stopped());
        tasks.spawn_infallible("sampler", Until::Stop, async move { sampler.run(interval, stopped).await });
    }
    export_watch_restarts(&metrics, &stats, adapters);
    let (actuation_tx, actuation_rx) = watch::channel(Actuation::default());
    // Every write checks leadership as it goes out and ends within the margin the Lease leaves
    // before another replica may lead (lease.rs, "Safety").
    let gate = Arc::new(gate::WriteGate::new(elector.subscribe(), margin, metrics.clone()));
    let actuator_config = ActuatorConfig {
        release_deadline: config.controller.release_deadline,
        // Three attempts and the jittered waits between them.
        command_timeout: config.run.master_timeout * 3 + Duration::from_secs(5),
        max_backoff: Duration::from_secs(30),
    };
    // Which API resource serves a kind, found once for the recorder and the services alike.
    let kinds = Arc::new(KindResources::new(client.clone()));
    let recorder = Arc::new(DecisionRecorder::new(client.clone(), identity.clone(), gate.clone(), kinds.clone()));
    let state = caches.state.clone();
    let node_gate = gate.clone();
    let actuator =
        Actuator::new(actuator_config, client.clone(), state, poller.book(), metrics.clone(), recorder, gate);
    let stopped = tasks.stopped();
    tasks.spawn_infallible("actuator", Until::Stop, actuator.run(actuation_rx, stopped));

    let sources = decider::Sources {
        caches: caches.clone(),
        poller: poller.clone(),
        services: ServiceDirectory::new(client.clone(), config.services.clone(), kinds),
        readings: match sampler {
            Some(s) => Box::new(move |now| s.readings(now)),
            None => Box::new(|_| BTreeMap::new()),
        },
        usage: match usage {
            Some(u) => Box::new(move |now| u.usage(now)),
            None => {
                let none = Arc::new(PodUsages::default());
                Box::new(move |_| none.clone())
            }
        },
    };
    let core = Core::new(config.controller.clone());
    let (batches_tx, batches_rx) = watch::channel(node_status::NodeBatches::new());
    let names = config.run.batch_resources;
    let writer = node_status::NodeStatusWriter::new(Api::all(client.clone()), node_gate, names, metrics.clone());
    let stopped = tasks.stopped();
    tasks.spawn_infallible("node-status", Until::Stop, writer.run(batches_rx, stopped));
    let decider = Decider::new(core, sources, metrics.clone(), elector.subscribe(), config.run.dry_run, actuation_tx)
        .publishing(batches_tx, names == crate::live::batch::BatchNames::Colocate);
    let (tick, debounce, stopped) = (config.run.tick, config.run.debounce, tasks.stopped());
    tasks.spawn_infallible("decider", Until::Stop, async move {
        // The first status poll before the first decision, so that jobs are known from the start.
        poller.discover_and_poll(&directory).await;
        decider.run(changed, tick, debounce, stopped).await
    });

    tasks.run_until_stopped().await;
    stop(tasks, &elector).await
}

/// Serves /metrics, /healthz and /readyz until the stop.
async fn serve_metrics(
    config: &RunConfig,
    metrics: &Arc<Metrics>,
    health: &Health,
    tasks: &mut Supervisor,
) -> Result<(), StartError> {
    let listener = tokio::net::TcpListener::bind(config.run.metrics_addr)
        .await
        .map_err(|source| StartError::Listen { addr: config.run.metrics_addr, source })?;
    tracing::info!(addr = %listener.local_addr().map_or(config.run.metrics_addr, |a| a), "serving /metrics, /healthz, /readyz");
    let server = telemetry::server::serve(listener, metrics.clone(), health.clone(), tasks.stopped());
    tasks.spawn("metrics server", Until::Stop, server);
    Ok(())
}

/// The tokens and certificates the controller presents, read once at start as check-config
/// reads them.
struct Secrets {
    master_token: Option<String>,
    master_tls: crate::live::tls::LoadedTls,
    prometheus_token: Option<String>,
    prometheus_tls: crate::live::tls::LoadedTls,
}

impl Secrets {
    fn read(config: &RunConfig) -> Result<Secrets, StartError> {
        let token = |path: &Option<std::path::PathBuf>| {
            path.as_deref().map(crate::live::master_client::read_token_file).transpose()
        };
        Ok(Secrets {
            master_token: token(&config.run.master_token_file)?,
            master_tls: config.run.master_tls.load("run.master_tls")?,
            prometheus_token: token(&config.run.prometheus_token_file)?,
            prometheus_tls: config.run.prometheus_tls.load("run.prometheus_tls")?,
        })
    }
}

/// The sampler of the services' load and latency, when any service has a source.
fn sampler(
    config: &RunConfig,
    secrets: &Secrets,
    metrics: &Arc<Metrics>,
    changed: &Arc<Notify>,
) -> Result<Option<Arc<Sampler>>, StartError> {
    if !config.services.iter().any(|s| s.load.is_some() || s.latency_p99.is_some()) {
        return Ok(None);
    }
    let sampler = Sampler::new(
        &config.services,
        config.run.prometheus_url.as_deref(),
        config.run.sample_stale_after,
        // The trend's window ends at the newest sample, which may be up to the stale limit
        // old: cut at `now`, the oldest sample it fits would vanish between two samples and
        // the trend with it (core/forecast.rs, `load_trend_factor`).
        config.controller.trend_window + config.run.sample_stale_after,
        metrics.clone(),
    )?
    .with_tls(&secrets.prometheus_tls)?
    .with_prometheus_token(secrets.prometheus_token.as_deref())?
    .with_wake(changed.clone());
    Ok(Some(Arc::new(sampler)))
}

/// How often the usage queries are retried at start until they answer.
const USAGE_CHECK_RETRY: Duration = Duration::from_secs(2);

/// The sampler of pods' usage, in `controller.capacity: usage` (the configuration check made
/// sure a Prometheus server is set).
fn usage_sampler(
    config: &RunConfig,
    secrets: &Secrets,
    metrics: &Arc<Metrics>,
    changed: &Arc<Notify>,
    caches: &Caches,
) -> Result<Option<Arc<UsageSampler>>, StartError> {
    if config.controller.capacity != CapacityMode::Usage {
        return Ok(None);
    }
    let Some(url) = config.run.prometheus_url.as_deref() else { return Ok(None) };
    let base = http_url(url).map_err(|problem| SamplerError::PrometheusUrl { url: url.into(), problem })?;
    let auth = secrets.prometheus_token.as_deref().map(sampler::bearer).transpose()?;
    let usage = UsageSampler::new(
        sampler::http_client(&secrets.prometheus_tls)?,
        auth,
        base,
        &config.run.usage_cpu_query,
        &config.run.usage_memory_query,
        config.run.sample_stale_after,
        metrics.clone(),
    )
    // Each round's answers go into the cluster state in the sampler's task, so that a decision
    // finds them there rather than applying 30,000 pods' usage itself.
    .with_apply({
        let state = caches.state.clone();
        Box::new(move |usages| crate::live::state::lock(&state).set_usage(usages))
    })
    .with_wake(changed.clone());
    Ok(Some(Arc::new(usage)))
}

/// Starts the watches of nodes, pods, HPAs and master Services, and of the adapted job kinds
/// when adapters are on; each runs until the controller stops.
async fn start_reflectors(
    config: &RunConfig,
    client: &Client,
    changed: &Arc<Notify>,
    stats: &Arc<WatchStats>,
    tasks: &mut Supervisor,
) -> Result<(Caches, Option<AdapterJobs>), StartError> {
    let (caches, drivers) = Caches::new(client.clone(), changed.clone(), stats.clone(), config.run.batch_resources);
    for (kind, driver) in KINDS.iter().zip(drivers) {
        tasks.spawn_infallible(format!("reflector {kind}"), Until::Aborted, driver);
    }
    if !config.run.adapters {
        return Ok((caches, None));
    }
    let (adapters, drivers) = AdapterJobs::start(client.clone(), changed.clone(), config.run.batch_resources).await?;
    tracing::info!(watched = ?adapters.watched_kinds(), absent = ?adapters.absent_kinds(), "adapters on");
    for (kind, driver) in adapters.watched_kinds().iter().zip(drivers) {
        tasks.spawn_infallible(format!("reflector {kind}"), Until::Aborted, driver);
    }
    Ok((caches, Some(adapters)))
}

/// Resolves once every reflector has listed its objects.
async fn listed(caches: &Caches, adapters: Option<&AdapterJobs>) -> Result<(), WatchStopped> {
    caches.wait_until_ready().await?;
    if let Some(a) = adapters {
        a.wait_until_ready().await;
    }
    Ok(())
}

/// Campaigns for the Lease until the stop, and exports whether this replica leads. Returns the
/// elector and the margin: no other replica may lead sooner than this after we stop
/// publishing leadership.
fn start_election(
    config: &RunConfig,
    client: &Client,
    identity: &str,
    metrics: &Arc<Metrics>,
    tasks: &mut Supervisor,
) -> Result<(Arc<LeaderElector>, Duration), StartError> {
    let lease = LeaseConfig::with_duration(
        &config.run.lease_namespace,
        &config.run.lease_name,
        identity,
        config.run.lease_duration,
    );
    let margin = lease.lease_duration.saturating_sub(lease.renew_deadline);
    let api = Api::<Lease>::namespaced(client.clone(), &config.run.lease_namespace);
    let elector = LeaderElector::new(api, lease).map_err(|source| StartError::Lease {
        namespace: config.run.lease_namespace.clone(),
        name: config.run.lease_name.clone(),
        source: Box::new(source),
    })?;
    let elector = Arc::new(elector);
    let (campaigner, stopped) = (elector.clone(), tasks.stopped());
    tasks.spawn_infallible("leader election", Until::Stop, async move { campaigner.run(stopped).await });
    let (mut rx, metrics) = (elector.subscribe(), metrics.clone());
    tasks.spawn_infallible("leader gauge", Until::Aborted, async move {
        loop {
            metrics.set_leader(*rx.borrow_and_update());
            if rx.changed().await.is_err() {
                break;
            }
        }
    });
    Ok((elector, margin))
}

/// Where the jobs are found: master Services and Pods, and the adapted kinds.
fn job_directory(
    config: &RunConfig,
    secrets: Secrets,
    caches: &Caches,
    adapters: Option<AdapterJobs>,
) -> Result<JobDirectory, StartError> {
    let http = crate::live::master_client::MasterClient::http_client(&secrets.master_tls)?;
    let factory = MasterClients {
        http,
        token: secrets.master_token,
        timeout: config.run.master_timeout,
        retry: RetryPolicy::default(),
    };
    Ok(JobDirectory {
        masters: MasterDiscovery::new(Box::new(factory)),
        master_services: caches.masters.clone(),
        state: caches.state.clone(),
        adapters,
        namespaces: config.run.job_namespaces.clone(),
    })
}

/// Polls every job's status on `interval` until the stop.
fn spawn_polling(tasks: &mut Supervisor, poller: &Arc<Poller>, directory: &Arc<JobDirectory>, interval: Duration) {
    let (poller, directory, stopped) = (poller.clone(), directory.clone(), tasks.stopped());
    tasks.spawn_infallible("status poller", Until::Stop, async move {
        tokio::pin!(stopped);
        let mut ticker = tokio::time::interval(interval);
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                _ = ticker.tick() => poller.discover_and_poll(&directory).await,
            }
        }
    });
}

/// The watches' restart counts are kept by the reflectors (`WatchStats`,
/// `AdapterJobs::watch_restarts`), which do not hold the metrics: they are read into the
/// metrics whenever these are scraped.
fn export_watch_restarts(metrics: &Metrics, stats: &Arc<WatchStats>, adapters: Option<AdapterJobs>) {
    let stats = stats.clone();
    metrics.sync_before_encode(move |metrics| {
        for (kind, total) in stats.restart_counts() {
            metrics.sync_watch_restarts(kind, total);
        }
        if let Some(a) = &adapters {
            metrics.sync_watch_restarts(ADAPTER_JOBS_WATCH_KIND, a.watch_restarts());
        }
    });
}

/// After the stop: waits for the tasks that finish by themselves (the actuator lets its
/// commands in flight finish, bounded), releases the Lease so another replica takes over at
/// once, and stops the rest. A task that stopped the controller is its error.
async fn stop(mut tasks: Supervisor, elector: &LeaderElector) -> Result<(), RunError> {
    tasks.drain().await;
    match elector.release().await {
        Ok(true) => tracing::info!("released the leader Lease"),
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, "could not release the leader Lease; it expires by itself"),
    }
    tasks.finish().await?;
    Ok(())
}
