//! Cluster-wide watches of the objects the controller decides on. Nodes and Pods go into the
//! cluster state (`live::state`), translated as they change; HorizontalPodAutoscalers
//! (autoscaling/v2) and master Services into reflector stores. Objects are stripped of what the
//! decision never reads before they are kept (managed fields, most annotations, images,
//! container details), to keep memory low on large clusters. Every change wakes the decision
//! loop; watch errors are counted and retried with backoff.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::{future, StreamExt};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource, ResourceExt};
use thiserror::Error;
use tokio::sync::{watch, Notify};

use super::names::MASTER_LABEL;
use super::state::{lock, ClusterState, SharedState};

/// Read handles of the caches.
#[derive(Clone)]
pub struct Caches {
    /// Nodes and Pods as the core sees them.
    pub state: SharedState,
    /// Becomes true once the state holds the first complete lists of both kinds.
    listed: watch::Receiver<bool>,
    pub hpas: Store<HorizontalPodAutoscaler>,
    pub masters: Store<Service>,
}

/// A watch ended before the caches were filled (the process is shutting down).
#[derive(Debug, Error)]
#[error("a watch stopped before the caches were filled")]
pub struct WatchStopped;

/// Watch health, exported as metrics.
#[derive(Default, Debug)]
pub struct WatchStats {
    /// Errors per kind (nodes, pods, hpas, masters) after which the watch restarted.
    pub restarts: [AtomicU64; 4],
    pub events: AtomicU64,
}

/// The watched kinds, indexing `WatchStats::restarts`; their names are the metrics' labels.
pub use crate::telemetry::metrics::WATCH_KINDS as KINDS;

impl WatchStats {
    /// Restarts so far, per watched kind.
    pub fn restart_counts(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        KINDS.iter().zip(&self.restarts).map(|(k, n)| (*k, n.load(std::sync::atomic::Ordering::Relaxed)))
    }
}

/// A reflector's driving future (the caller spawns it).
pub type Driver = Pin<Box<dyn Future<Output = ()> + Send>>;

impl Caches {
    /// Starts nothing by itself: returns the caches and the futures that fill them (spawn
    /// them). `changed` is notified on every event.
    pub fn new(client: Client, changed: Arc<Notify>, stats: Arc<WatchStats>) -> (Caches, Vec<Driver>) {
        let (listed_tx, listed) = watch::channel(false);
        let feed = StateFeed { state: Arc::new(Mutex::new(ClusterState::default())), listed: Arc::new(listed_tx) };
        let d0 = feed.driver(Api::all(client.clone()), strip_node, ClusterState::apply_node, 0, &changed, &stats);
        let d1 = feed.driver(Api::all(client.clone()), strip_pod, ClusterState::apply_pod, 1, &changed, &stats);
        let (hpas, d2) = reflect(Api::all(client.clone()), watcher::Config::default(), strip_meta, 2, &changed, &stats);
        let masters_only = watcher::Config::default().labels(&format!("{MASTER_LABEL}=true"));
        let (masters, d3) = reflect(Api::all(client), masters_only, strip_service, 3, &changed, &stats);
        (Caches { state: feed.state, listed, hpas, masters }, vec![d0, d1, d2, d3])
    }

    /// Resolves once every cache has seen its initial list: never decide on a partial view.
    pub async fn wait_until_ready(&self) -> Result<(), WatchStopped> {
        self.listed.clone().wait_for(|l| *l).await.map_err(|_| WatchStopped)?;
        self.hpas.wait_until_ready().await.map_err(|_| WatchStopped)?;
        self.masters.wait_until_ready().await.map_err(|_| WatchStopped)
    }

    /// The cluster state, for one decision or one read: held briefly, never across an await.
    pub fn state(&self) -> MutexGuard<'_, ClusterState> {
        lock(&self.state)
    }
}

/// Where the Node and Pod watches put what they see: the cluster state, and whether it holds a
/// complete list of both kinds yet.
struct StateFeed {
    state: SharedState,
    listed: Arc<watch::Sender<bool>>,
}

impl StateFeed {
    /// A watch whose events `apply` takes into the state, under its lock.
    fn driver<K>(
        &self,
        api: Api<K>,
        strip: fn(&mut K),
        apply: fn(&mut ClusterState, &Event<K>),
        kind: usize,
        changed: &Arc<Notify>,
        stats: &Arc<WatchStats>,
    ) -> Driver
    where
        K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    {
        let (state, listed) = (self.state.clone(), self.listed.clone());
        let take_in = move |e: &Event<K>| {
            let mut s = lock(&state);
            apply(&mut s, e);
            if s.is_listed() {
                listed.send_if_modified(|l| !std::mem::replace(l, true));
            }
        };
        counted(api, watcher::Config::default(), strip, take_in, kind, changed, stats)
    }
}

fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
    strip: fn(&mut K),
    kind: usize,
    changed: &Arc<Notify>,
    stats: &Arc<WatchStats>,
) -> (Store<K>, Driver)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, mut writer) = reflector::store();
    let driver = counted(api, config, strip, move |e: &Event<K>| writer.apply_watcher_event(e), kind, changed, stats);
    (reader, driver)
}

/// [`drive`] with the cache's events and restarts counted in `stats` under `KINDS[kind]`.
fn counted<K>(
    api: Api<K>,
    config: watcher::Config,
    strip: fn(&mut K),
    apply: impl FnMut(&Event<K>) + Send + 'static,
    kind: usize,
    changed: &Arc<Notify>,
    stats: &Arc<WatchStats>,
) -> Driver
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (on_event, on_error) = (stats.clone(), stats.clone());
    drive(
        api,
        config,
        strip,
        apply,
        KINDS[kind],
        changed.clone(),
        move || {
            on_event.events.fetch_add(1, Ordering::Relaxed);
        },
        move || {
            on_error.restarts[kind].fetch_add(1, Ordering::Relaxed);
        },
    )
}

/// Drives one watch into `apply` (a reflector store's writer, or the cluster state): every
/// event wakes `changed` and is counted by
/// `on_event`; every watch error is counted by `on_error` and logged, and the watcher restarts
/// with backoff. The one watch loop of the controller: the caches here and the adapters' job
/// watches run it.
#[allow(clippy::too_many_arguments)]
pub fn drive<K>(
    api: Api<K>,
    config: watcher::Config,
    strip: fn(&mut K),
    mut apply: impl FnMut(&Event<K>) + Send + 'static,
    kind: &str,
    changed: Arc<Notify>,
    on_event: impl Fn() + Send + 'static,
    on_error: impl Fn() + Send + 'static,
) -> Driver
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let kind = kind.to_string();
    let stream = watcher::watcher(api, config).default_backoff().modify(strip);
    Box::pin(stream.for_each(move |event| {
        match event {
            Ok(e) => {
                apply(&e);
                on_event();
                changed.notify_one();
            }
            Err(e) => {
                on_error();
                tracing::warn!(kind = %kind, error = %e, "watch failed; restarting with backoff");
            }
        }
        future::ready(())
    }))
}

fn strip_meta<K: ResourceExt>(o: &mut K) {
    o.managed_fields_mut().clear();
}

fn strip_node(n: &mut Node) {
    n.managed_fields_mut().clear();
    n.annotations_mut().clear();
    if let Some(s) = n.status.as_mut() {
        s.images = None;
        s.node_info = None;
        s.volumes_attached = None;
        s.volumes_in_use = None;
        s.addresses = None;
        s.capacity = None;
    }
}

/// Keeps what classification and capacity need: labels, node, phase, Ready, deletion, and
/// per container only its name and resource requests. Master Pods also keep their annotations
/// (job overrides) and container ports (the port named `master`).
fn strip_pod(p: &mut Pod) {
    p.managed_fields_mut().clear();
    let is_master = p.labels().get(MASTER_LABEL).is_some_and(|v| v == "true");
    if !is_master {
        p.annotations_mut().clear();
    }
    p.metadata.owner_references = None;
    if let Some(spec) = p.spec.as_mut() {
        spec.volumes = None;
        spec.affinity = None;
        spec.tolerations = None;
        for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
            c.env = None;
            c.env_from = None;
            c.command = None;
            c.args = None;
            c.volume_mounts = None;
            c.liveness_probe = None;
            c.readiness_probe = None;
            c.startup_probe = None;
            if !is_master {
                c.ports = None;
            }
            c.image = None;
            c.security_context = None;
            if let Some(r) = c.resources.as_mut() {
                r.limits = None;
            }
        }
    }
    if let Some(s) = p.status.as_mut() {
        s.container_statuses = None;
        s.init_container_statuses = None;
        s.pod_ips = None;
        s.host_ips = None;
        s.message = None;
    }
}

/// Master Services keep their annotations (job overrides) and ports.
fn strip_service(s: &mut Service) {
    s.managed_fields_mut().clear();
    s.metadata.owner_references = None;
    s.status = None;
}
