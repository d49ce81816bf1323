//! Finds the job objects that opted in (label `colocate.dev/elastic: "true"`) among the kinds
//! the API server serves, with cluster-wide reflectors, and turns each into a
//! [`DiscoveredJob`] whose endpoint drives it.
//!
//! Endpoints are cached by object uid: the idempotency memory and the generation live in them,
//! so the same object keeps the same endpoint from one call to the next. A change of the bounds,
//! resources or rescale cost is applied to the cached endpoint in place
//! ([`MasterState::reconfigure`]); a change of what it drives (job name, scale-via, worker task)
//! builds a new endpoint, whose generation starts from the object's `metadata.generation`, which
//! every earlier replicas change has already raised.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use kube::api::{ApiResource, DynamicObject};
use kube::error::DiscoveryError;
use kube::runtime::reflector::{store::Writer, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{discovery, Api, Client};
use tokio::sync::Notify;

use super::adapted_kinds::{strip, AdapterKind, KINDS};
use super::in_process_master::AdapterEndpoint;
use super::object::AdaptedObject;
use super::scale::ScaleSubresourceBackend;
use super::settings::{settings, AdapterSettings, ScaleVia};
use super::volcano::VolcanoBackend;
use super::workers::{check_worker_labels, worker_resources};
use crate::live::batch::BatchNames;
use crate::live::endpoint::{DiscoveredJob, JobEndpoint, JobObject};
use crate::live::names::{object_key, ELASTIC_LABEL, SCALE_VIA_ANNOTATION};
use crate::live::translate::JobOverrides;
use crate::live::watch::{drive, Driver, Watch};
use crate::master_protocol::{MasterConfig, MasterState, WorkerResources};

/// Discovery failed for a reason other than the kind being absent.
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    #[error("asking the API server whether it serves {kind}: {message}")]
    Discovery { kind: String, message: String },
}

/// The adapted jobs of the cluster. Cheap to clone.
#[derive(Clone)]
pub struct AdapterJobs {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    watched: Vec<Watched>,
    absent: Vec<String>,
    restarts: Arc<AtomicU64>,
    endpoints: Mutex<HashMap<String, Cached>>,
    batch_names: BatchNames,
}

struct Watched {
    kind: &'static AdapterKind,
    resource: ApiResource,
    has_scale: bool,
    store: Store<DynamicObject>,
}

impl AdapterJobs {
    /// Reflectors for the adapter kinds present in the cluster; `changed` is notified on every
    /// event. Returns the futures that drive them (the caller spawns them). A kind the API server
    /// does not serve (its CRD is not installed) is logged and skipped; it is picked up only by
    /// a later `start`.
    /// Workers that request batch resources under `batch_names` (`capacity: usage`) have them
    /// counted as their size.
    pub async fn start(
        client: Client,
        changed: Arc<Notify>,
        batch_names: BatchNames,
    ) -> Result<(AdapterJobs, Vec<Driver>), AdapterError> {
        let restarts = Arc::new(AtomicU64::new(0));
        let (mut watched, mut absent, mut drivers) = (Vec::new(), Vec::new(), Vec::new());
        for kind in &KINDS {
            let name = kind.display_name();
            let (resource, caps) = match discovery::pinned_kind(&client, &kind.gvk()).await {
                Ok(found) => found,
                Err(e) if is_absent(&e) => {
                    tracing::info!(kind = %name, api_version = %kind.api_version(),
                        "not served by the API server (CRD not installed?); jobs of this kind are not adapted");
                    absent.push(name);
                    continue;
                }
                Err(e) => {
                    let message = crate::live::error_chain(&e);
                    return Err(AdapterError::Discovery { kind: format!("{name} ({})", kind.api_version()), message });
                }
            };
            let has_scale = caps.subresources.iter().any(|(r, _)| r.plural == "scale");
            let mut writer = Writer::new(resource.clone());
            let store = writer.as_reader();
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            let config = watcher::Config::default().labels(&format!("{ELASTIC_LABEL}=true"));
            let counter = Arc::clone(&restarts);
            drivers.push(drive(
                Watch { api, config, strip },
                move |e: &watcher::Event<DynamicObject>| writer.apply_watcher_event(e),
                &name,
                Arc::clone(&changed),
                || {},
                move || {
                    counter.fetch_add(1, Ordering::Relaxed);
                },
            ));
            tracing::info!(kind = %name, scale_subresource = has_scale, "watching adapter jobs");
            watched.push(Watched { kind, resource, has_scale, store });
        }
        let inner = Inner { client, watched, absent, restarts, endpoints: Mutex::new(HashMap::new()), batch_names };
        Ok((AdapterJobs { inner: Arc::new(inner) }, drivers))
    }

    /// Resolves once every reflector has seen its initial list (or its driver was dropped).
    pub async fn wait_until_ready(&self) {
        for w in &self.inner.watched {
            // A dropped writer means the driver is gone; waiting longer would never end.
            let _ = w.store.wait_until_ready().await;
        }
    }

    /// Kinds watched (`Deployment`, `PyTorchJob.kubeflow.org`, ...).
    pub fn watched_kinds(&self) -> Vec<String> {
        self.inner.watched.iter().map(|w| w.kind.display_name()).collect()
    }

    /// Kinds the API server did not serve at start.
    pub fn absent_kinds(&self) -> Vec<String> {
        self.inner.absent.clone()
    }

    /// Watch errors after which a reflector restarted, all kinds together.
    pub fn watch_restarts(&self) -> u64 {
        self.inner.restarts.load(Ordering::Relaxed)
    }

    /// Current adapter jobs sorted by key, and problems (sentences naming the object and what
    /// is wrong). An object with a problem is not driven.
    pub fn jobs(&self) -> (Vec<DiscoveredJob>, Vec<String>) {
        let mut problems = Vec::new();
        let mut candidates = Vec::new();
        // Endpoints are kept while their object exists, also while it has a problem: fixing it
        // brings back the same ledger.
        let mut present = HashSet::new();
        for (w, watched) in self.inner.watched.iter().enumerate() {
            for object in watched.store.state() {
                present.extend(object.metadata.uid.clone());
                match evaluate(watched.kind, &watched.resource, watched.has_scale, &object, self.inner.batch_names) {
                    Ok(c) => candidates.push((w, c)),
                    Err(problem) => problems.push(problem),
                }
            }
        }
        let mut by_key: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, (_, c)) in candidates.iter().enumerate() {
            by_key.entry(c.key()).or_default().push(i);
        }
        let mut claimed_twice = HashSet::new();
        for (key, claimants) in by_key.iter().filter(|(_, v)| v.len() > 1) {
            let mut names: Vec<&str> = claimants.iter().map(|&i| candidates[i].1.describe.as_str()).collect();
            names.sort_unstable();
            problems.push(format!(
                "job {key} is claimed by {} (annotation colocate.dev/job, or their names): none of them is driven \
                 until only one claims it",
                names.join(" and ")
            ));
            claimed_twice.extend(claimants.iter().copied());
        }
        let mut cache = self.inner.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        let mut jobs = Vec::new();
        for (i, (w, c)) in candidates.iter().enumerate() {
            if claimed_twice.contains(&i) {
                continue;
            }
            match self.endpoint(&mut cache, &self.inner.watched[*w], c) {
                Ok(endpoint) => jobs.push(c.discovered(endpoint)),
                Err(problem) => problems.push(problem),
            }
        }
        cache.retain(|uid, _| present.contains(uid));
        jobs.sort_by_key(DiscoveredJob::key);
        problems.sort();
        (jobs, problems)
    }

    /// The cached endpoint of `c`'s object, reconfigured if its settings changed, or a new one.
    fn endpoint(
        &self,
        cache: &mut HashMap<String, Cached>,
        watched: &Watched,
        c: &Candidate,
    ) -> Result<Arc<dyn JobEndpoint>, String> {
        let identity = c.identity();
        let config = c.master_config();
        if let Some(cached) = cache.get_mut(&c.uid).filter(|cached| cached.identity == identity) {
            if !same_settings(&cached.config, &config) {
                cached.built.reconfigure(config.clone()).map_err(|e| format!("{}: {e}", c.describe))?;
                tracing::info!(object = %c.describe, min = config.min, max = config.max, "adapter job settings changed");
                cached.config = config;
            }
            return Ok(cached.built.endpoint());
        }
        let built = self.build(watched, c, config.clone())?;
        let endpoint = built.endpoint();
        tracing::info!(object = %c.describe, job = %c.key(), endpoint = %endpoint.describe(), "adapter job found");
        cache.insert(c.uid.clone(), Cached { identity, config, built });
        Ok(endpoint)
    }

    fn build(&self, watched: &Watched, c: &Candidate, config: MasterConfig) -> Result<Built, String> {
        let client = self.inner.client.clone();
        let (namespace, name, job) = (&c.object.namespace, &c.object.name, &c.settings.job);
        let bad_config = |e| format!("{}: {e}", c.describe);
        Ok(match c.settings.scale_via {
            ScaleVia::ScaleSubresource => {
                let mut backend =
                    ScaleSubresourceBackend::new(AdaptedObject::new(client, &watched.resource, namespace, name, job));
                if watched.kind.deletion_cost {
                    backend = backend.with_deletion_cost();
                }
                // The phase is read from the cache: it only stops growth, so a little lag is harmless,
                // and it saves a read per status.
                let (store, phase) = (watched.store.clone(), watched.kind.phase);
                let key = ObjectRef::new_with(name, watched.resource.clone()).within(namespace);
                backend = backend.with_phase(Arc::new(move || store.get(&key).and_then(|o| phase(&o.data))));
                let state = MasterState::new(config, backend).map_err(bad_config)?;
                Built::Scale(Arc::new(AdapterEndpoint::new(format!("{} via /scale", c.describe), state)))
            }
            ScaleVia::VolcanoReplicas => {
                let task = &c.settings.worker_task;
                let backend = VolcanoBackend::new(client, &watched.resource, namespace, name, job, task);
                let state = MasterState::new(config, backend).map_err(bad_config)?;
                let describe = format!("{} via task {task} replicas", c.describe);
                Built::Volcano(Arc::new(AdapterEndpoint::new(describe, state)))
            }
        })
    }
}

fn is_absent(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 404,
        kube::Error::Discovery(d) => matches!(d, DiscoveryError::MissingKind(_) | DiscoveryError::MissingApiGroup(_)),
        _ => false,
    }
}

/// A job object that passed every check.
#[derive(Debug)]
struct Candidate {
    object: JobObject,
    /// `Deployment ml/wd`, for messages.
    describe: String,
    uid: String,
    settings: AdapterSettings,
    resources: WorkerResources,
    generation: u64,
}

impl Candidate {
    fn key(&self) -> String {
        object_key(&self.object.namespace, &self.settings.job)
    }

    fn identity(&self) -> Identity {
        Identity {
            kind: format!("{}/{}", self.object.api_version, self.object.kind),
            namespace: self.object.namespace.clone(),
            name: self.object.name.clone(),
            job: self.settings.job.clone(),
            scale_via: self.settings.scale_via,
            worker_task: self.settings.worker_task.clone(),
        }
    }

    fn master_config(&self) -> MasterConfig {
        let s = &self.settings;
        let mut config = MasterConfig::new(s.job.clone(), s.min_workers, s.max_workers, self.resources.clone());
        config.rescale_cost_s = s.rescale_cost.map(|d| d.as_secs_f64());
        config.initial_generation = self.generation;
        config
    }

    fn discovered(&self, endpoint: Arc<dyn JobEndpoint>) -> DiscoveredJob {
        let s = &self.settings;
        DiscoveredJob {
            namespace: self.object.namespace.clone(),
            name: s.job.clone(),
            object: self.object.clone(),
            endpoint,
            overrides: JobOverrides {
                priority: s.priority,
                weight: s.weight,
                min_workers: Some(s.min_workers),
                max_workers: Some(s.max_workers),
            },
        }
    }
}

/// Checks one object: its annotations, that its kind can be scaled the way they ask, and its
/// worker pod template (labels, requests).
fn evaluate(
    kind: &AdapterKind,
    resource: &ApiResource,
    has_scale: bool,
    o: &DynamicObject,
    batch_names: BatchNames,
) -> Result<Candidate, String> {
    let name = o.metadata.name.clone().unwrap_or_default();
    let namespace = o.metadata.namespace.clone().unwrap_or_default();
    let describe = format!("{} {namespace}/{name}", kind.display_name());
    let s = settings(&describe, &name, o.metadata.annotations.as_ref()).map_err(|e| e.to_string())?;
    let via = s.scale_via;
    if !kind.scale_via.contains(&via) {
        let supported: Vec<String> = kind.scale_via.iter().map(|v| format!("`{v}`")).collect();
        return Err(format!(
            "{describe}: annotation {SCALE_VIA_ANNOTATION}=`{via}`: a {} is scaled via {}",
            kind.display_name(),
            supported.join(" or ")
        ));
    }
    if via == ScaleVia::ScaleSubresource && !has_scale {
        return Err(format!(
            "{describe}: annotation {SCALE_VIA_ANNOTATION}=`{via}`: the API server serves no /scale subresource for \
             {} (its CRD declares none)",
            kind.display_name()
        ));
    }
    let template = kind.worker_template(&describe, &o.data, &s.worker_task)?;
    check_worker_labels(&describe, &s.job, &template)?;
    let resources = worker_resources(&describe, &template, batch_names)?;
    let uid = o.metadata.uid.clone().ok_or_else(|| format!("{describe}: no metadata.uid"))?;
    let generation = o.metadata.generation.and_then(|g| u64::try_from(g).ok()).unwrap_or(1).max(1);
    let object = JobObject {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
        namespace,
        name,
        uid: Some(uid.clone()),
    };
    Ok(Candidate { object, describe, uid, settings: s, resources, generation })
}

/// What an endpoint drives; a change means a new endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Identity {
    kind: String,
    namespace: String,
    name: String,
    job: String,
    scale_via: ScaleVia,
    worker_task: String,
}

/// Settings an endpoint takes in place.
fn same_settings(a: &MasterConfig, b: &MasterConfig) -> bool {
    (a.min, a.max, &a.worker_resources, a.rescale_cost_s) == (b.min, b.max, &b.worker_resources, b.rescale_cost_s)
}

struct Cached {
    identity: Identity,
    config: MasterConfig,
    built: Built,
}

enum Built {
    Scale(Arc<AdapterEndpoint<ScaleSubresourceBackend>>),
    Volcano(Arc<AdapterEndpoint<VolcanoBackend>>),
}

impl Built {
    fn endpoint(&self) -> Arc<dyn JobEndpoint> {
        match self {
            Built::Scale(e) => Arc::clone(e) as Arc<dyn JobEndpoint>,
            Built::Volcano(e) => Arc::clone(e) as Arc<dyn JobEndpoint>,
        }
    }

    fn reconfigure(&self, config: MasterConfig) -> Result<(), crate::master_protocol::MasterConfigError> {
        match self {
            Built::Scale(e) => e.state().reconfigure(config),
            Built::Volcano(e) => e.state().reconfigure(config),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn resource(kind: &AdapterKind, plural: &str) -> ApiResource {
        ApiResource {
            group: kind.group.into(),
            version: kind.version.into(),
            api_version: kind.api_version(),
            kind: kind.kind.into(),
            plural: plural.into(),
        }
    }

    fn deployment(annotations: Value, labels: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "wd", "namespace": "ml", "uid": "u-1", "generation": 7, "annotations": annotations},
            "spec": {"replicas": 3, "template": {"metadata": {"labels": labels},
                "spec": {"containers": [{"name": "w", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]}}}
        }))
        .unwrap()
    }

    fn good_annotations() -> Value {
        json!({"colocate.dev/scale-via": "scale-subresource", "colocate.dev/min-workers": "1",
            "colocate.dev/max-workers": "8", "colocate.dev/priority": "3", "colocate.dev/rescale-cost": "20s"})
    }

    fn worker_labels(job: &str) -> Value {
        json!({"colocate.dev/job": job, "colocate.dev/role": "worker"})
    }

    #[test]
    fn a_good_deployment_becomes_a_candidate() {
        let kind = &KINDS[0];
        let c = evaluate(
            kind,
            &resource(kind, "deployments"),
            true,
            &deployment(good_annotations(), worker_labels("wd")),
            BatchNames::Colocate,
        )
        .unwrap();
        assert_eq!(c.key(), "ml/wd");
        assert_eq!(c.object.to_string(), "Deployment ml/wd");
        assert_eq!((c.object.api_version.as_str(), c.object.uid.as_deref()), ("apps/v1", Some("u-1")));
        let config = c.master_config();
        assert_eq!((config.min, config.max, config.initial_generation, config.rescale_cost_s), (1, 8, 7, Some(20.0)));
        assert_eq!(config.worker_resources, WorkerResources::new("2", "4Gi"));
    }

    #[test]
    fn problems_name_the_object() {
        let kind = &KINDS[0];
        let r = resource(kind, "deployments");
        let missing_labels =
            evaluate(kind, &r, true, &deployment(good_annotations(), json!({"app": "wd"})), BatchNames::Colocate)
                .unwrap_err();
        assert!(
            missing_labels.starts_with("Deployment ml/wd: the worker pod template lacks label(s)"),
            "{missing_labels}"
        );
        let mut volcano = good_annotations();
        volcano["colocate.dev/scale-via"] = json!("volcano-replicas");
        assert_eq!(
            evaluate(kind, &r, true, &deployment(volcano, worker_labels("wd")), BatchNames::Colocate).unwrap_err(),
            "Deployment ml/wd: annotation colocate.dev/scale-via=`volcano-replicas`: a Deployment is scaled via \
             `scale-subresource`"
        );
        let pytorch = &KINDS[2];
        let mut o = deployment(good_annotations(), worker_labels("wd"));
        o.data = json!({"spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"metadata": {"labels": worker_labels("wd")},
            "spec": {"containers": [{"name": "w", "resources": {"requests": {"cpu": "1"}}}]}}}}}});
        let no_scale =
            evaluate(pytorch, &resource(pytorch, "pytorchjobs"), false, &o, BatchNames::Colocate).unwrap_err();
        assert!(no_scale.contains("PyTorchJob.kubeflow.org ml/wd: annotation colocate.dev/scale-via=`scale-subresource`: the API server serves no /scale"), "{no_scale}");
        assert!(evaluate(pytorch, &resource(pytorch, "pytorchjobs"), true, &o, BatchNames::Colocate).is_ok());
    }
}
