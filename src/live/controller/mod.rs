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
pub mod decider;
pub mod events;
pub mod forced;
pub mod gate;
pub mod jobs;
mod ledger;
pub mod masters;
pub mod poller;
pub mod record;
pub mod services;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use tokio::sync::{watch, Notify};

use self::actuator::{Actuator, ActuatorConfig};
use self::decider::Decider;
use self::jobs::JobDirectory;
use self::ledger::Actuation;
use self::masters::{MasterClients, MasterDiscovery};
use self::poller::Poller;
use self::record::DecisionRecorder;
use self::services::ServiceDirectory;
use crate::core::Core;
use crate::live::adapters::AdapterJobs;
use crate::live::config::RunConfig;
use crate::live::lease::{default_identity, LeaderElector, LeaseConfig};
use crate::live::master::{ClientConfigError, RetryPolicy};
use crate::live::sampler::Sampler;
use crate::live::watch::{Caches, WatchStats};
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
    #[error("leader election: {0}")]
    Lease(String),
    #[error(transparent)]
    Sampler(#[from] crate::live::sampler::SamplerError),
    #[error("adapters: {0}")]
    Adapters(String),
    #[error("the reflectors stopped before listing the cluster")]
    ReflectorsStopped,
}

/// Runs the controller until `shutdown` resolves; then stops deciding, lets commands in
/// flight finish (bounded), and releases the Lease so another replica takes over at once.
pub async fn run(
    config: RunConfig,
    client: Client,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let metrics = Arc::new(Metrics::new());
    metrics.set_target_utilization(config.controller.target_utilization);
    let health = Health::new();
    let (stop_tx, stop) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };

    let listener = tokio::net::TcpListener::bind(config.metrics_addr)
        .await
        .map_err(|source| StartError::Listen { addr: config.metrics_addr, source })?;
    tracing::info!(addr = %listener.local_addr().map_or(config.metrics_addr, |a| a), "serving /metrics, /healthz, /readyz");
    let server = tokio::spawn(telemetry::server::serve(listener, metrics.clone(), health.clone(), stopped()));

    let token = match &config.master_token_file {
        Some(path) => Some(crate::live::master::read_token_file(path)?),
        None => None,
    };
    // Certificates are read once, at start, as check-config reads them.
    let master_tls = config.master_tls.load("run.master_tls")?;
    let prometheus_tls = config.prometheus_tls.load("run.prometheus_tls")?;
    let prometheus_token = match &config.prometheus_token_file {
        Some(path) => Some(crate::live::master::read_token_file(path)?),
        None => None,
    };
    // Watch events, polled statuses and fresh samples all wake the decision loop.
    let changed = Arc::new(Notify::new());
    let sources = config.services.iter().any(|s| s.load.is_some() || s.latency_p99.is_some());
    let sampler = match sources {
        true => Some(Arc::new(
            Sampler::new(
                &config.services,
                config.prometheus_url.as_deref(),
                config.sample_stale_after,
                // The trend's window ends at the newest sample, which may be up to the stale
                // limit old: cut at `now`, the oldest sample it fits would vanish between two
                // samples and the trend with it (core/forecast.rs, `load_trend_factor`).
                config.controller.trend_window + config.sample_stale_after,
                metrics.clone(),
            )?
            .with_tls(&prometheus_tls)?
            .with_prometheus_token(prometheus_token.as_deref())?
            .with_wake(changed.clone()),
        )),
        false => None,
    };
    let stats = Arc::new(WatchStats::default());
    let (caches, drivers) = Caches::new(client.clone(), changed.clone(), stats.clone());
    let mut reflectors: Vec<_> = drivers.into_iter().map(tokio::spawn).collect();
    let adapters = match config.adapters {
        true => {
            let (adapters, drivers) = AdapterJobs::start(client.clone(), changed.clone())
                .await
                .map_err(|e| StartError::Adapters(e.to_string()))?;
            tracing::info!(watched = ?adapters.watched_kinds(), absent = ?adapters.absent_kinds(), "adapters on");
            reflectors.extend(drivers.into_iter().map(tokio::spawn));
            Some(adapters)
        }
        false => None,
    };

    let identity = default_identity();
    let lease =
        LeaseConfig::with_duration(&config.lease_namespace, &config.lease_name, &identity, config.lease_duration);
    // No other replica may lead sooner than this after we stop publishing leadership.
    let margin = lease.lease_duration.saturating_sub(lease.renew_deadline);
    let elector = Arc::new(
        LeaderElector::new(Api::<Lease>::namespaced(client.clone(), &config.lease_namespace), lease)
            .map_err(|e| StartError::Lease(e.to_string()))?,
    );
    let campaign = tokio::spawn({
        let (elector, stopped) = (elector.clone(), stopped());
        async move { elector.run(stopped).await }
    });
    let leader_metric = tokio::spawn({
        let (mut rx, metrics) = (elector.subscribe(), metrics.clone());
        async move {
            loop {
                metrics.set_leader(*rx.borrow_and_update());
                if rx.changed().await.is_err() {
                    break;
                }
            }
        }
    });

    let status_timeout = config.status_interval.min(config.master_timeout);
    let poller = Arc::new(Poller::new(status_timeout, config.status_interval * 3, metrics.clone(), changed.clone()));
    let master_http = crate::live::master::MasterClient::http_client(&master_tls)?;
    let factory =
        MasterClients { http: master_http, token, timeout: config.master_timeout, retry: RetryPolicy::default() };
    let directory = Arc::new(JobDirectory {
        masters: MasterDiscovery::new(Box::new(factory)),
        master_services: caches.masters.clone(),
        state: caches.state.clone(),
        adapters: adapters.clone(),
        namespaces: config.job_namespaces.clone(),
    });

    tracing::info!(identity = %identity, dry_run = config.dry_run, "waiting for the reflectors to list the cluster");
    let shutdown = {
        let stop_tx = stop_tx.clone();
        let health = health.clone();
        async move {
            shutdown.await;
            tracing::info!("shutting down");
            health.begin_shutdown();
            let _ = stop_tx.send(true);
        }
    };
    let shutdown = tokio::spawn(shutdown);
    tokio::select! {
        ready = async {
            caches.wait_until_ready().await?;
            if let Some(a) = &directory.adapters {
                a.wait_until_ready().await;
            }
            Ok::<(), crate::live::watch::WatchStopped>(())
        } => ready.map_err(|_| StartError::ReflectorsStopped)?,
        _ = stopped() => {
            finish(&elector, campaign, reflectors, server, leader_metric).await;
            return Ok(());
        }
    }
    health.set_synced();
    metrics.set_reflectors_ready(true);
    // One guard for both counts: a second lock in the same statement would wait for the first.
    let (nodes, pods) = {
        let state = caches.state();
        (state.node_count(), state.pod_count())
    };
    tracing::info!(nodes, pods, hpas = caches.hpas.state().len(), "reflectors synced");

    let polling = tokio::spawn({
        let (poller, directory, interval, stopped) =
            (poller.clone(), directory.clone(), config.status_interval, stopped());
        async move {
            tokio::pin!(stopped);
            let mut ticker = tokio::time::interval(interval);
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = ticker.tick() => poller.discover_and_poll(&directory).await,
                }
            }
        }
    });
    let sampling = tokio::spawn({
        let (sampler, interval, stopped) = (sampler.clone(), config.sample_interval, stopped());
        async move {
            if let Some(s) = sampler {
                s.run(interval, stopped).await;
            }
        }
    });
    let stats_sync = tokio::spawn({
        let (metrics, stats, adapters, stopped) = (metrics.clone(), stats.clone(), adapters.clone(), stopped());
        async move {
            tokio::pin!(stopped);
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {
                        for (kind, total) in stats.restart_counts() {
                            metrics.sync_watch_restarts(kind, total);
                        }
                        if let Some(a) = &adapters {
                            metrics.sync_watch_restarts(ADAPTER_JOBS_WATCH_KIND, a.watch_restarts());
                        }
                    }
                }
            }
        }
    });

    let (actuation_tx, actuation_rx) = watch::channel(Actuation::default());
    // Every write checks leadership as it goes out and ends within the margin the Lease leaves
    // before another replica may lead (lease.rs, "Safety").
    let gate = Arc::new(gate::WriteGate::new(elector.subscribe(), margin, metrics.clone()));
    let actuator = Actuator {
        config: ActuatorConfig {
            release_deadline: config.controller.release_deadline,
            // Three attempts and the jittered waits between them.
            command_timeout: config.master_timeout * 3 + Duration::from_secs(5),
            max_backoff: Duration::from_secs(30),
        },
        client: client.clone(),
        state: caches.state.clone(),
        poller: poller.clone(),
        metrics: metrics.clone(),
        recorder: Arc::new(DecisionRecorder::new(client.clone(), identity.clone(), gate.clone())),
        gate,
    };
    let actuating = tokio::spawn(actuator.run(actuation_rx, stopped()));

    let decider = Decider {
        core: Core::new(config.controller.clone()),
        caches: caches.clone(),
        poller: poller.clone(),
        services: ServiceDirectory::new(client.clone(), config.services.clone()),
        readings: match sampler {
            Some(s) => Box::new(move |now| s.readings(now)),
            None => Box::new(|_| BTreeMap::new()),
        },
        metrics: metrics.clone(),
        leader: elector.subscribe(),
        dry_run: config.dry_run,
        actuation: actuation_tx,
        known_problems: Vec::new(),
    };
    // The first status poll before the first decision, so that jobs are known from the start.
    poller.discover_and_poll(&directory).await;
    decider.run(changed, config.tick, config.debounce, stopped()).await;

    for task in [polling, sampling, stats_sync] {
        let _ = task.await;
    }
    let _ = actuating.await;
    shutdown.abort();
    finish(&elector, campaign, reflectors, server, leader_metric).await;
    Ok(())
}

async fn finish(
    elector: &LeaderElector,
    campaign: tokio::task::JoinHandle<()>,
    reflectors: Vec<tokio::task::JoinHandle<()>>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    leader_metric: tokio::task::JoinHandle<()>,
) {
    let _ = campaign.await;
    match elector.release().await {
        Ok(true) => tracing::info!("released the leader Lease"),
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, "could not release the leader Lease; it expires by itself"),
    }
    for r in reflectors {
        r.abort();
    }
    leader_metric.abort();
    let _ = server.await;
}
