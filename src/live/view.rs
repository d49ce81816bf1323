//! The cluster as the decision core sees it: the cluster state (`live::state`, kept up to date
//! by the watches) completed with the services, their samples and what the masters report. A
//! pure function of its inputs, so it is tested without a cluster.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;

use super::names::object_key;
use super::sampler::usage::PodUsages;
use super::selector::LabelSelector;
use super::state::{Classifier, ClusterState, DEFAULT_GRACE};
use super::translate::{self, JobOverrides};
use crate::core::name_map::NameMap;
use crate::core::resources::{parse_cpu, parse_memory};
use crate::core::{Job, Latency, PodClass, Resources, Sample, Service, Snapshot, WorkReport};
use crate::master_protocol::{Phase, Status};

/// An online service with what is known about it right now.
#[derive(Clone, Debug)]
pub struct OnlineService {
    pub namespace: String,
    pub name: String,
    /// Its pods: the configured selector, or its HPA scale target's selector.
    pub selector: Option<LabelSelector>,
    pub hpa: Option<String>,
    pub slo_p99: Option<Duration>,
    /// Standing headroom, in replicas (`ServiceSource::headroom_replicas`).
    pub headroom_replicas: u32,
    /// Fresh load samples (stale ones already dropped by the sampler).
    pub load: Vec<Sample>,
    /// `None` when the latency sample is missing or stale.
    pub p99: Option<Duration>,
}

impl OnlineService {
    pub fn key(&self) -> String {
        object_key(&self.namespace, &self.name)
    }
}

/// A training job as its master reported it (`None`: the master did not answer). Its priority
/// and weight come from its object's annotations (`overrides`) alone: protocol v1's status
/// carries neither, and without them a job has [`DEFAULT_PRIORITY`] and [`DEFAULT_WEIGHT`].
#[derive(Clone, Debug)]
pub struct JobSource {
    pub namespace: String,
    pub name: String,
    pub status: Option<Status>,
    pub overrides: JobOverrides,
}

/// A job's priority without a `colocate.dev/priority` annotation.
pub const DEFAULT_PRIORITY: i32 = 0;
/// A job's weight without a `colocate.dev/weight` annotation.
pub const DEFAULT_WEIGHT: f64 = 1.0;

impl JobSource {
    pub fn key(&self) -> String {
        object_key(&self.namespace, &self.name)
    }
}

/// What a snapshot is made of besides the cluster state.
pub struct Inputs<'a> {
    pub now: Duration,
    pub hpas: &'a [Arc<HorizontalPodAutoscaler>],
    pub services: &'a [OnlineService],
    pub jobs: &'a [JobSource],
    /// Pods' measured usage by `namespace/name` (empty in `capacity: requests`).
    pub usage: &'a Arc<PodUsages>,
}

/// The snapshot of the state with these services and jobs, and what could not be used (each a
/// sentence naming the object).
pub fn snapshot<'s>(state: &'s mut ClusterState, inputs: &Inputs) -> (&'s Snapshot, Vec<String>) {
    let mut problems: Vec<String> = state.problems().cloned().collect();
    let mut managed: BTreeMap<String, &JobSource> = BTreeMap::new();
    for j in inputs.jobs {
        match &j.status {
            Some(s) if !matches!(s.phase, Phase::Completed | Phase::Failed) => {
                managed.insert(j.key(), j);
            }
            Some(_) => {}
            None => problems.push(format!("job {}: master unreachable; its workers are left as they are", j.key())),
        }
    }
    let mut classifier = Classifier { managed: managed.keys().cloned().collect(), ..Classifier::default() };
    for s in inputs.services {
        if let Some(sel) = &s.selector {
            classifier.selectors.entry(s.namespace.clone()).or_default().push((s.key(), sel.clone()));
        }
    }
    state.set_classifier(classifier);
    state.set_usage(inputs.usage);

    // One replica's requests per service, and per job the longest termination grace period of
    // its workers (its release latency when the master does not announce one).
    // This walks every pod each decision (150,000 at 5,000 nodes): it goes by the state's shared
    // copy of each name (one per service or job, core::SharedName), then by name. A service's
    // replica is its first pod's, whatever copies of its name there are.
    let mut replica_by_copy: NameMap<*const u8, (&str, usize, Resources)> = NameMap::default();
    let mut grace_by_copy: NameMap<*const u8, (&str, Duration)> = NameMap::default();
    for (i, (p, g)) in state.pods_with_grace().enumerate() {
        match &p.class {
            PodClass::Online { service } => {
                replica_by_copy.entry(service.as_ptr()).or_insert((&**service, i, p.requests));
            }
            PodClass::Worker { job } => {
                let e = grace_by_copy.entry(job.as_ptr()).or_insert((&**job, g));
                e.1 = e.1.max(g);
            }
            _ => {}
        }
    }
    let mut first: NameMap<&str, (usize, Resources)> = NameMap::default();
    for (name, i, requests) in replica_by_copy.into_values() {
        let e = first.entry(name).or_insert((i, requests));
        if i < e.0 {
            *e = (i, requests);
        }
    }
    let replica: NameMap<&str, Resources> = first.into_iter().map(|(name, (_, r))| (name, r)).collect();
    let mut grace: NameMap<&str, Duration> = NameMap::default();
    for (name, g) in grace_by_copy.into_values() {
        let e = grace.entry(name).or_insert(g);
        *e = (*e).max(g);
    }

    let services = inputs
        .services
        .iter()
        .map(|s| {
            let key = s.key();
            let hpa = s.hpa.as_ref().and_then(|name| {
                let found = inputs.hpas.iter().find(|h| {
                    h.metadata.namespace.as_deref() == Some(s.namespace.as_str())
                        && h.metadata.name.as_deref() == Some(name.as_str())
                });
                if found.is_none() {
                    problems.push(format!("service {key}: HPA {}/{name} not found", s.namespace));
                }
                found.map(|h| translate::hpa(h))
            });
            Service {
                replica: replica.get(key.as_str()).copied().unwrap_or_default(),
                name: key,
                hpa,
                load: s.load.clone(),
                latency: s.slo_p99.map(|slo| Latency { p99: s.p99, slo_p99: slo }),
                headroom_replicas: s.headroom_replicas,
            }
        })
        .collect();

    let jobs = managed
        .iter()
        .filter_map(|(key, j)| {
            let status = j.status.as_ref()?;
            let grace = grace.get(key.as_str()).copied().unwrap_or(DEFAULT_GRACE);
            job(key, j, status, grace).map_err(|e| problems.push(e)).ok()
        })
        .collect();
    (state.snapshot(inputs.now, services, jobs), problems)
}

/// Longest `worker_release_s` taken from a master (an hour); beyond it, or negative, or not a
/// number, the pods' grace period is used.
const MAX_WORKER_RELEASE_S: f64 = 3600.0;

fn job(key: &str, source: &JobSource, status: &Status, grace: Duration) -> Result<Job, String> {
    let r = &status.worker_resources;
    let bad = |what: &str, e: String| format!("job {key}: worker_resources.{what}: {e}");
    let cpu = parse_cpu(&r.cpu.0).map_err(|e| bad("cpu", e.to_string()))?;
    let memory = parse_memory(&r.memory.0).map_err(|e| bad("memory", e.to_string()))?;
    let gpu = match r.other.get(translate::GPU) {
        Some(q) => parse_cpu(&q.0).map_err(|e| bad(translate::GPU, e.to_string()))? / 1000,
        None => 0,
    };
    let o = &source.overrides;
    let min = o.min_workers.unwrap_or(status.workers.min);
    let max = o.max_workers.unwrap_or(status.workers.max).max(min);
    let w = &status.workers;
    // The protocol refuses targets above `max`, so a master's own target is at most that or the
    // workers it already has. Anything larger is a broken master; believing it would make the
    // core reserve room for that many starting workers (one by one, for 4e9 of them).
    let plausible = w.max.max(w.current).saturating_add(w.pending);
    if w.target > plausible {
        return Err(format!(
            "job {key}: workers.target {} is above workers.max {} and the {} workers it has; its status is not used",
            w.target,
            w.max,
            w.current.saturating_add(w.pending)
        ));
    }
    Ok(Job {
        name: key.to_string(),
        priority: o.priority.unwrap_or(DEFAULT_PRIORITY),
        weight: o.weight.unwrap_or(DEFAULT_WEIGHT),
        worker: Resources::new(cpu, memory, gpu),
        min_workers: min,
        max_workers: max,
        target_workers: w.target,
        rescaling: status.phase == Phase::Rescaling || w.current != w.target || w.pending > 0,
        rescale_cost: Duration::from_secs_f64(status.rescale_cost_s.unwrap_or(0.0).max(0.0)),
        release_latency: status
            .worker_release_s
            .filter(|s| (0.0..=MAX_WORKER_RELEASE_S).contains(s))
            .map_or(grace, Duration::from_secs_f64),
        work: work_report(status),
    })
}

/// `progress` and `throughput` as the core reads them. A progress with no total (0), or done
/// beyond it, says nothing about what is left; a throughput that is not a positive number is
/// left out.
fn work_report(status: &Status) -> Option<WorkReport> {
    let p = status.progress.filter(|p| p.total > 0 && p.done <= p.total)?;
    Some(WorkReport {
        done: p.done as f64,
        total: p.total as f64,
        throughput: status.throughput.map(|t| t.samples_per_s).filter(|t| t.is_finite() && *t > 0.0),
        workers: status.workers.current,
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Node as KubeNode, Pod as KubePod};
    use serde_json::json;

    use super::*;

    fn from<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).expect("valid object")
    }

    fn node(name: &str) -> KubeNode {
        from(json!({
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "32", "memory": "128Gi"}, "conditions": [{"type": "Ready", "status": "True"}]}
        }))
    }

    fn pod(ns: &str, name: &str, labels: serde_json::Value, node: Option<&str>, cpu: &str) -> KubePod {
        from(json!({
            "metadata": {"namespace": ns, "name": name, "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
    }

    fn status(job: &str, current: u32, target: u32) -> Status {
        from(json!({
            "job": job, "generation": 3, "phase": "Running",
            "workers": {"current": current, "target": target, "min": 1, "max": 32, "pending": 0},
            "worker_resources": {"cpu": "2", "memory": "4Gi"},
            "rescale_cost_s": 10.0
        }))
    }

    fn source(ns: &str, name: &str, status: Option<Status>) -> JobSource {
        JobSource { namespace: ns.into(), name: name.into(), status, overrides: JobOverrides::default() }
    }

    #[test]
    fn pods_jobs_and_services_are_qualified_by_namespace() {
        let nodes = [node("n1")];
        let pods = [
            pod("web", "nginx-1", json!({"app": "nginx"}), Some("n1"), "1"),
            pod("other", "nginx-x", json!({"app": "nginx"}), Some("n1"), "1"),
            pod("ml", "wd-w-0", json!({"colocate.dev/job": "wd", "colocate.dev/role": "worker"}), Some("n1"), "2"),
            pod("ml", "wd-w-1", json!({"colocate.dev/job": "wd", "colocate.dev/role": "worker"}), None, "2"),
            pod(
                "ml",
                "wd-master",
                json!({"colocate.dev/job": "wd", "colocate.dev/role": "master"}),
                Some("n1"),
                "500m",
            ),
        ];
        let hpas: [Arc<HorizontalPodAutoscaler>; 1] = [Arc::new(from(json!({
            "metadata": {"namespace": "web", "name": "nginx"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "nginx"}, "minReplicas": 1, "maxReplicas": 10},
            "status": {"currentReplicas": 1, "desiredReplicas": 3}
        })))];
        let services = [OnlineService {
            namespace: "web".into(),
            name: "nginx".into(),
            selector: Some(LabelSelector::parse("app=nginx").unwrap()),
            hpa: Some("nginx".into()),
            slo_p99: Some(Duration::from_millis(250)),
            headroom_replicas: 0,
            load: Vec::new(),
            p99: None,
        }];
        let jobs = [source("ml", "wd", Some(status("wd", 1, 2)))];
        let inputs = Inputs {
            now: Duration::from_secs(7),
            hpas: &hpas,
            services: &services,
            jobs: &jobs,
            usage: &Default::default(),
        };
        let mut state = ClusterState::from_objects(&nodes, &pods);
        let (snap, problems) = snapshot(&mut state, &inputs);
        assert!(problems.is_empty(), "{problems:?}");
        let class = |name: &str| snap.pods.iter().find(|p| p.name == name).map(|p| p.class.clone()).unwrap();
        assert_eq!(class("web/nginx-1"), PodClass::Online { service: "web/nginx".into() });
        assert_eq!(class("other/nginx-x"), PodClass::System, "a selector only applies in its namespace");
        assert_eq!(class("ml/wd-w-0"), PodClass::Worker { job: "ml/wd".into() });
        assert_eq!(class("ml/wd-master"), PodClass::Master { job: "ml/wd".into() });
        let svc = &snap.services[0];
        assert_eq!(svc.replica, Resources::new(1000, 1 << 30, 0));
        assert_eq!(svc.hpa.as_ref().map(|h| h.desired_replicas), Some(3));
        assert_eq!(svc.latency.map(|l| (l.p99, l.slo_p99)), Some((None, Duration::from_millis(250))));
        let job = &snap.jobs[0];
        assert_eq!((job.name.as_str(), job.target_workers, job.rescaling), ("ml/wd", 2, true));
        assert_eq!(job.worker, Resources::new(2000, 4 << 30, 0));
        assert_eq!(job.rescale_cost, Duration::from_secs(10));
    }

    #[test]
    fn an_unreachable_master_leaves_its_workers_alone_and_says_so() {
        let nodes = [node("n1")];
        let pods =
            [pod("ml", "wd-w-0", json!({"colocate.dev/job": "wd", "colocate.dev/role": "worker"}), Some("n1"), "2")];
        let jobs = [source("ml", "wd", None)];
        let inputs = Inputs { now: Duration::ZERO, hpas: &[], services: &[], jobs: &jobs, usage: &Default::default() };
        let mut state = ClusterState::from_objects(&nodes, &pods);
        let (snap, problems) = snapshot(&mut state, &inputs);
        assert!(snap.jobs.is_empty());
        assert_eq!(snap.pods[0].class, PodClass::System, "still counted as allocated, never released");
        assert_eq!(problems, ["job ml/wd: master unreachable; its workers are left as they are"]);
    }

    #[test]
    fn overrides_win_and_bad_resources_are_reported() {
        let mut j = source("ml", "wd", Some(status("wd", 4, 4)));
        j.overrides = JobOverrides { priority: Some(7), weight: Some(3.0), min_workers: Some(2), max_workers: Some(8) };
        let mut broken = source("ml", "bad", Some(status("bad", 1, 1)));
        broken.status.as_mut().unwrap().worker_resources.cpu.0 = "two".into();
        let jobs = [j, broken];
        let inputs = Inputs { now: Duration::ZERO, hpas: &[], services: &[], jobs: &jobs, usage: &Default::default() };
        let mut state = ClusterState::default();
        let (snap, problems) = snapshot(&mut state, &inputs);
        let job = &snap.jobs[0];
        assert_eq!((job.priority, job.weight, job.min_workers, job.max_workers), (7, 3.0, 2, 8));
        assert_eq!(snap.jobs.len(), 1);
        assert!(
            problems[0].starts_with("job ml/bad: worker_resources.cpu: `two` is not a Kubernetes quantity"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_target_no_master_could_have_is_refused_by_name() {
        // Above its max (32) and its 4 workers: refused. A target above max that the workers
        // already reach (a master started larger than its max) is believed.
        let jobs = [
            source("ml", "huge", Some(status("huge", 4, 4_000_000_000))),
            source("ml", "started-big", Some(status("started-big", 40, 40))),
        ];
        let inputs = Inputs { now: Duration::ZERO, hpas: &[], services: &[], jobs: &jobs, usage: &Default::default() };
        let mut state = ClusterState::default();
        let (snap, problems) = snapshot(&mut state, &inputs);
        assert_eq!(
            problems,
            ["job ml/huge: workers.target 4000000000 is above workers.max 32 and the 4 workers it has; its status is not used"]
        );
        assert_eq!(
            snap.jobs.iter().map(|j| (j.name.as_str(), j.target_workers)).collect::<Vec<_>>(),
            [("ml/started-big", 40)]
        );
    }

    #[test]
    fn progress_and_throughput_reach_the_core_when_they_say_something() {
        let with = |progress: serde_json::Value, throughput: serde_json::Value| {
            let mut st = serde_json::to_value(status("wd", 4, 6)).unwrap();
            st["progress"] = progress;
            st["throughput"] = throughput;
            let jobs = [source("ml", "wd", Some(from(st)))];
            let inputs =
                Inputs { now: Duration::ZERO, hpas: &[], services: &[], jobs: &jobs, usage: &Default::default() };
            snapshot(&mut ClusterState::default(), &inputs).0.jobs[0].work
        };
        let work = with(json!({"done": 250, "total": 1000}), json!({"samples_per_s": 40.5}));
        assert_eq!(work, Some(WorkReport { done: 250.0, total: 1000.0, throughput: Some(40.5), workers: 4 }));
        // No rate yet (or a nonsense one): what is left is still known.
        let work = with(json!({"done": 0, "total": 1000}), json!({"samples_per_s": -1.0}));
        assert_eq!(work.map(|w| w.throughput), Some(None));
        // A total of 0, or more done than the total, says nothing about what is left.
        assert_eq!(with(json!({"done": 0, "total": 0}), json!({"samples_per_s": 1.0})), None);
        assert_eq!(with(json!({"done": 5, "total": 4}), json!({"samples_per_s": 1.0})), None);
        assert_eq!(with(serde_json::Value::Null, json!({"samples_per_s": 1.0})), None);
    }
}
