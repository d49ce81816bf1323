//! Cluster-wide watches of the objects the controller decides on. Nodes and Pods go into the
//! cluster state (`live::state`), translated as they change; HorizontalPodAutoscalers
//! (autoscaling/v2) and master Services into reflector stores. Objects are stripped of what the
//! decision never reads before they are kept (managed fields, most annotations, images,
//! container details), to keep memory low on large clusters. Every change wakes the decision
//! loop; watch errors are counted and retried with backoff.

use crate::live::batch::BatchNames;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::{future, StreamExt};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ContainerStatus, Node, Pod, ResourceRequirements, Service};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource, ResourceExt};
use thiserror::Error;
use tokio::sync::{watch, Notify};

use super::state::{lock, ClusterState, SharedState};
use super::translate;

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

/// An object kind a watch can follow.
pub trait Watchable: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static {}
impl<K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static> Watchable for K {}

/// What one watch follows: its objects, the server-side filter, and what of each object is kept.
pub struct Watch<K> {
    pub api: Api<K>,
    pub config: watcher::Config,
    pub strip: fn(&mut K),
}

impl<K> Watch<K> {
    /// Every object of `api`, stripped by `strip`.
    pub fn all(api: Api<K>, strip: fn(&mut K)) -> Watch<K> {
        Watch { api, config: watcher::Config::default(), strip }
    }
}

/// Where the caches' watches report: the decision loop they wake, and their counters.
struct Reporting {
    changed: Arc<Notify>,
    stats: Arc<WatchStats>,
}

impl Caches {
    /// Starts nothing by itself: returns the caches and the futures that fill them (spawn
    /// them). `changed` is notified on every event.
    /// Nodes' and workers' batch resources are read by `batch_names`.
    pub fn new(
        client: Client,
        changed: Arc<Notify>,
        stats: Arc<WatchStats>,
        batch_names: BatchNames,
    ) -> (Caches, Vec<Driver>) {
        let (listed_tx, listed) = watch::channel(false);
        let state = ClusterState::with_batch_names(batch_names);
        let feed = StateFeed { state: Arc::new(Mutex::new(state)), listed: Arc::new(listed_tx) };
        let to = Reporting { changed, stats };
        let d0 = feed.driver(Watch::all(Api::all(client.clone()), strip_node), ClusterState::apply_node, 0, &to);
        let d1 = feed.driver(Watch::all(Api::all(client.clone()), strip_pod), ClusterState::apply_pod, 1, &to);
        let (hpas, d2) = reflect(Watch::all(Api::all(client.clone()), strip_meta), 2, &to);
        let masters_only = watcher::Config::default().labels(&translate::master_selector());
        let (masters, d3) =
            reflect(Watch { api: Api::all(client), config: masters_only, strip: strip_service }, 3, &to);
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
    fn driver<K: Watchable>(
        &self,
        watch: Watch<K>,
        apply: fn(&mut ClusterState, &Event<K>),
        kind: usize,
        to: &Reporting,
    ) -> Driver {
        let (state, listed) = (self.state.clone(), self.listed.clone());
        let take_in = move |e: &Event<K>| {
            let mut s = lock(&state);
            apply(&mut s, e);
            if s.is_listed() {
                listed.send_if_modified(|l| !std::mem::replace(l, true));
            }
        };
        counted(watch, take_in, kind, to)
    }
}

fn reflect<K: Watchable>(watch: Watch<K>, kind: usize, to: &Reporting) -> (Store<K>, Driver)
where
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, mut writer) = reflector::store();
    let driver = counted(watch, move |e: &Event<K>| writer.apply_watcher_event(e), kind, to);
    (reader, driver)
}

/// [`drive`] with the cache's events and restarts counted in `stats` under `KINDS[kind]`.
fn counted<K: Watchable>(
    watch: Watch<K>,
    apply: impl FnMut(&Event<K>) + Send + 'static,
    kind: usize,
    to: &Reporting,
) -> Driver {
    let (on_event, on_error) = (to.stats.clone(), to.stats.clone());
    drive(
        watch,
        apply,
        KINDS[kind],
        to.changed.clone(),
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
pub fn drive<K: Watchable>(
    watch: Watch<K>,
    mut apply: impl FnMut(&Event<K>) + Send + 'static,
    kind: &str,
    changed: Arc<Notify>,
    on_event: impl Fn() + Send + 'static,
    on_error: impl Fn() + Send + 'static,
) -> Driver {
    let kind = kind.to_string();
    let stream = watcher::watcher(watch.api, watch.config).default_backoff().modify(watch.strip);
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

/// Keeps what classification and capacity need: labels, node, phase, Ready, deletion, the
/// pod-level requests, and per container only its name, restart policy and resource requests
/// (with the requests and allocation its status reports). Master Pods also keep their
/// annotations (job overrides) and container ports (the port named `master`).
fn strip_pod(p: &mut Pod) {
    p.managed_fields_mut().clear();
    let is_master = translate::is_master(p.labels());
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
        // A container's reported resources stay: kube-scheduler counts a container mid-resize at
        // the larger of its spec and what its status reports (`translate::pod_requests`).
        for c in s.container_statuses.iter_mut().flatten().chain(s.init_container_statuses.iter_mut().flatten()) {
            strip_container_status(c);
        }
        s.pod_ips = None;
        s.host_ips = None;
        s.message = None;
    }
}

/// Keeps a container status' name and the resources it reports (requests and allocated).
fn strip_container_status(c: &mut ContainerStatus) {
    let reported = c.resources.take().map(|r| ResourceRequirements { requests: r.requests, ..Default::default() });
    *c = ContainerStatus {
        name: std::mem::take(&mut c.name),
        resources: reported,
        allocated_resources: c.allocated_resources.take(),
        ..Default::default()
    };
}

/// Master Services keep their annotations (job overrides) and ports.
fn strip_service(s: &mut Service) {
    s.managed_fields_mut().clear();
    s.metadata.owner_references = None;
    s.status = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::translate::pod_requests;

    #[test]
    fn a_stripped_pod_keeps_what_its_requests_are_counted_from() {
        // Mid-resize (spec 1m, status still 2 CPUs), with a sidecar and pod-level memory.
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "w", "namespace": "ml", "annotations": {"a": "b"}},
            "spec": {
                "resources": {"requests": {"memory": "8Gi"}},
                "initContainers": [{"name": "proxy", "image": "p", "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}}}],
                "containers": [{"name": "w", "image": "w", "env": [{"name": "X", "value": "1"}],
                    "resources": {"requests": {"cpu": "1m", "memory": "1Gi"}}}]
            },
            "status": {
                "containerStatuses": [{"name": "w", "image": "w", "imageID": "sha", "ready": true, "restartCount": 3,
                    "state": {"running": {"startedAt": "2026-11-28T00:00:00Z"}},
                    "resources": {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "4"}},
                    "allocatedResources": {"cpu": "2", "memory": "1Gi"}}],
                "initContainerStatuses": [{"name": "proxy", "image": "p", "imageID": "sha", "ready": true,
                    "restartCount": 0, "resources": {"requests": {"cpu": "500m"}}}]
            }
        }))
        .unwrap();
        let before = pod_requests(&pod).unwrap();
        assert_eq!(before, crate::core::Resources::new(2_500, 8 << 30, 0));
        strip_pod(&mut pod);
        assert_eq!(pod_requests(&pod).unwrap(), before);
        let status = &pod.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
        assert_eq!((status.image.as_str(), status.state.is_none()), ("", true), "{status:?}");
        assert!(status.resources.as_ref().unwrap().limits.is_none());
    }
}
