//! The load-spike replay's inputs (tests/spike_replay.rs): the HPA decisions of a shipped
//! scenario, taken from the simulator's `online-only` run (the service alone, so the decisions
//! are the same whatever shares the cluster), and the cluster they are played on: the
//! scenario's nodes as kwok nodes, its service as Deployment `web/nginx` with an HPA, its jobs as
//! worker Deployments behind reference masters, online pods in a high PriorityClass and workers
//! in a low one.

use std::time::{Duration, Instant};

use colocate::live::names::{PRIORITY_ANNOTATION, WEIGHT_ANNOTATION};
use colocate::sim::scenario::{JobSpec, ServiceSpec};
use colocate::sim::window::{hpa_script, HpaSync};
use colocate::sim::Scenario;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{json, Value};

use super::cluster::{self, Announce, Behaviour, ElasticJob, WorkerPod};
use super::testbed::{node_manifest, Testbed};

pub const ONLINE_CLASS: &str = "online-high";
pub const TRAINING_CLASS: &str = "training-low";
pub const JOB_NAMESPACE: &str = "ml";

/// The HPA schedule of a window of a scenario.
pub struct Schedule {
    /// The last sync before the window: the state both runs start from.
    pub before: HpaSync,
    /// The syncs inside `[from_s, to_s)`.
    pub syncs: Vec<HpaSync>,
    pub from_s: f64,
    pub to_s: f64,
}

/// The scenario's only service's HPA syncs in `[from_s, to_s)`, from its `online-only` replay:
/// the same script the window replay plays (`colocate::sim::window::hpa_script`), so live and
/// replay see the same HPA.
pub fn hpa_schedule(scenario: &Scenario, from_s: f64, to_s: f64) -> Schedule {
    assert_eq!(scenario.spec.services.len(), 1, "{}: the spike replay plays one service", scenario.path.display());
    let mut syncs = hpa_script(scenario).remove(0);
    let before = syncs.iter().rev().find(|s| s.at_s < from_s).cloned().expect("an HPA sync before the window");
    syncs.retain(|s| s.at_s >= from_s && s.at_s < to_s);
    Schedule { before, syncs, from_s, to_s }
}

/// The utilization an HPA sync wrote to its status, in percent of requests.
pub fn utilization_pct(sync: &HpaSync) -> Option<i32> {
    sync.observed.map(|u| (u * 100.0).round() as i32)
}

pub fn sync_json(sync: &HpaSync) -> Value {
    json!({"t_s": sync.at_s, "current": sync.current, "desired": sync.desired,
           "utilization_pct": utilization_pct(sync)})
}

/// The two PriorityClasses: online pods preempt workers unless `online_never`; workers preempt
/// nothing.
pub fn priority_classes(bed: &Testbed, online_never: bool) {
    let online = if online_never { "Never" } else { "PreemptLowerPriority" };
    for (name, value, policy) in [(ONLINE_CLASS, 100_000, online), (TRAINING_CLASS, 100, "Never")] {
        bed.kubectl_apply(&json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value, "preemptionPolicy": policy
        }));
    }
}

/// The scenario's nodes (`<pool>-<i>`), their allocatable less the scenario's `system_reserved`
/// (what a kubelet's `--system-reserved` does).
pub fn nodes(bed: &Testbed, scenario: &Scenario) {
    let system = scenario.spec.cluster.system_reserved.map(|r| r.resources()).unwrap_or_default();
    for pool in &scenario.spec.cluster.nodes {
        let r = pool.allocatable.resources();
        let (cpu, memory) = (r.cpu_milli - system.cpu_milli, r.memory_bytes - system.memory_bytes);
        for i in 0..pool.count {
            bed.kubectl_apply(&node_manifest(&format!("{}-{i}", pool.pool), &format!("{cpu}m"), &memory.to_string()));
        }
    }
}

/// Deployment `web/nginx` (the scenario's replica CPU, high priority) and its HPA (the
/// scenario's bounds and target), with `sync`'s status, as its controller left it. With
/// `scenario_memory` the pods request the scenario's replica memory too: in `capacity: usage`
/// the memory coming replicas request is what the controller keeps from BestEffort workers.
pub async fn nginx(bed: &Testbed, client: &Client, svc: &ServiceSpec, sync: &HpaSync, scenario_memory: bool) {
    cluster::namespace(bed, "web");
    let r = svc.replica.resources();
    let cpu = format!("{}m", r.cpu_milli);
    let labels = json!({"app": "nginx"});
    let mut deployment = cluster::deployment("web", "nginx", labels, sync.desired, &cpu, Some(ONLINE_CLASS));
    if scenario_memory {
        deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] =
            json!(r.memory_bytes.to_string());
    }
    bed.kubectl_apply(&deployment);
    let target = (svc.hpa.target_utilization * 100.0).round() as i32;
    bed.kubectl_apply(&json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"namespace": "web", "name": "nginx"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"},
            "minReplicas": svc.hpa.min_replicas, "maxReplicas": svc.hpa.max_replicas,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": target}}}]
        }
    }));
    write_hpa_status(client, sync).await;
}

/// One HPA sync as the HPA controller performs it: the Deployment's scale first (when the
/// decision changed it), then the status with the metric it saw, in that order and back to back.
pub async fn play_hpa_sync(client: &Client, sync: &HpaSync) {
    if sync.desired != sync.current {
        cluster::scale_nginx(client, sync.desired).await;
    }
    write_hpa_status(client, sync).await;
}

async fn write_hpa_status(client: &Client, sync: &HpaSync) {
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), "web");
    let metrics = match utilization_pct(sync) {
        Some(pct) => json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": pct}}}]),
        None => json!([]),
    };
    let status = json!({"status": {"currentReplicas": sync.current, "desiredReplicas": sync.desired,
        "currentMetrics": metrics}});
    api.patch_status("nginx", &PatchParams::default(), &Patch::Merge(&status)).await.expect("HPA status patch");
}

/// The scenario's jobs "as large as fits", as the simulator's `preemption` policy starts them:
/// in arrival order, each Deployment asks for `max_workers`, the scheduler places what fits, then
/// the Deployment is set to the workers placed (no pending workers left). Each job's master
/// releases as its scenario entry says: in place (`release_in_place`), or within its
/// `release_time` when that is shorter than the pods' grace period. Returns the jobs and their
/// sizes.
pub async fn fill_with_jobs(bed: &Testbed, client: &Client, scenario: &Scenario) -> Vec<(ElasticJob, u32)> {
    let grace = scenario.spec.baselines.termination_grace_period;
    let mut jobs = Vec::new();
    for spec in in_arrival_order(bed, scenario) {
        let cpu = format!("{}m", spec.worker.resources().cpu_milli);
        let release_grace = spec.release_time.filter(|r| !spec.release_in_place && *r < grace);
        let worker = WorkerPod {
            cpu: &cpu,
            priority_class: Some(TRAINING_CLASS),
            termination_grace_s: grace.as_secs() as u32,
            release_grace_s: release_grace.map(|r| r.as_secs().max(1) as u32),
            release_in_place: spec.release_in_place,
            model: None,
            best_effort: false,
            memory: "256Mi",
        };
        let job = start_job(bed, client, spec, worker, spec.max_workers).await;
        let placed = placed_workers(client, &spec.name, spec.max_workers).await;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), JOB_NAMESPACE);
        let scale = json!({"spec": {"replicas": placed}});
        deployments
            .patch_scale(&format!("{}-workers", spec.name), &PatchParams::default(), &Patch::Merge(&scale))
            .await
            .expect("scale a job to the workers placed");
        cluster::eventually(
            Duration::from_secs(60),
            &format!("{}: only its {placed} placed workers", spec.name),
            || {
                let client = client.clone();
                let name = spec.name.clone();
                async move { (worker_pods(&client, &name).await.len() == placed as usize).then_some(()) }
            },
        )
        .await;
        jobs.push((job, placed));
    }
    jobs
}

/// The scenario's jobs as `capacity: usage` runs them: BestEffort workers asking the batch
/// capacity the running controller publishes (the scenario's worker CPU and memory), each job
/// started with no worker, for the controller to start and grow. Returns the jobs, at 0.
pub async fn start_jobs_empty(bed: &Testbed, client: &Client, scenario: &Scenario) -> Vec<(ElasticJob, u32)> {
    let grace = scenario.spec.baselines.termination_grace_period;
    let mut jobs = Vec::new();
    for spec in in_arrival_order(bed, scenario) {
        let r = spec.worker.resources();
        let (cpu, memory) = (format!("{}m", r.cpu_milli), r.memory_bytes.to_string());
        let release_grace = spec.release_time.filter(|r| *r < grace);
        let worker = WorkerPod {
            cpu: &cpu,
            priority_class: Some(TRAINING_CLASS),
            termination_grace_s: grace.as_secs() as u32,
            release_grace_s: release_grace.map(|r| r.as_secs().max(1) as u32),
            release_in_place: false,
            model: None,
            best_effort: true,
            memory: &memory,
        };
        jobs.push((start_job(bed, client, spec, worker, 0).await, 0));
    }
    jobs
}

/// The scenario's jobs in arrival order, their namespace created.
fn in_arrival_order<'s>(bed: &Testbed, scenario: &'s Scenario) -> Vec<&'s JobSpec> {
    cluster::namespace(bed, JOB_NAMESPACE);
    let mut specs: Vec<_> = scenario.spec.jobs.iter().collect();
    specs.sort_by_key(|j| j.arrival);
    specs
}

/// Job `spec` with an honest master announced by a Service carrying the job's priority and
/// weight (`colocate.dev/priority`, `colocate.dev/weight`: replay's controller shares room by
/// them), its workers like `worker`, its Deployment at `replicas`.
async fn start_job(bed: &Testbed, client: &Client, spec: &JobSpec, worker: WorkerPod<'_>, replicas: u32) -> ElasticJob {
    let bounds = (spec.min_workers, spec.max_workers, replicas);
    let annotations = [(PRIORITY_ANNOTATION, spec.priority.to_string()), (WEIGHT_ANNOTATION, spec.weight.to_string())];
    let (name, honest, announce) = (&spec.name, Behaviour::Honest, Announce::Service);
    ElasticJob::start_serving(bed, client, JOB_NAMESPACE, name, bounds, honest, worker, announce, None, &annotations)
        .await
}

/// Waits until all `replicas` workers of `job` exist and each is bound or found Unschedulable;
/// returns the bound ones.
async fn placed_workers(client: &Client, job: &str, replicas: u32) -> u32 {
    let start = Instant::now();
    loop {
        let pods = worker_pods(client, job).await;
        let bound = pods.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()).count();
        let unschedulable = pods
            .iter()
            .filter(|p| {
                let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
                conditions.into_iter().flatten().any(|c| c.type_ == "PodScheduled" && c.status == "False")
            })
            .count();
        if pods.len() == replicas as usize && bound + unschedulable == pods.len() {
            return bound as u32;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "job {job}: {} of {replicas} workers exist, {bound} bound, {unschedulable} unschedulable after 90 s",
            pods.len()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Workers of `job` bound to a node and not leaving.
pub async fn running_workers(client: &Client, job: &str) -> u32 {
    let pods = worker_pods(client, job).await;
    pods.iter().filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some())).count() as u32
}

async fn worker_pods(client: &Client, job: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), JOB_NAMESPACE);
    let selector = format!("colocate.dev/job={job},colocate.dev/role=worker");
    let pods = api.list(&ListParams::default().labels(&selector)).await.expect("list workers");
    pods.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
}

/// Waits until every node of the scenario carries the batch CPU colocate publishes in
/// `capacity: usage` (`colocate.dev/batch-cpu`), so that BestEffort workers can be placed.
pub async fn nodes_carry_batch_capacity(client: &Client, scenario: &Scenario) {
    let want: usize = scenario.spec.cluster.nodes.iter().map(|p| p.count as usize).sum();
    cluster::eventually(Duration::from_secs(60), "every node to carry colocate.dev/batch-cpu", || {
        let nodes: Api<Node> = Api::all(client.clone());
        async move {
            let list = nodes.list(&ListParams::default()).await.ok()?;
            let carrying = list
                .items
                .iter()
                .filter(|n| {
                    let allocatable = n.status.as_ref().and_then(|s| s.allocatable.as_ref());
                    allocatable.is_some_and(|a| a.contains_key("colocate.dev/batch-cpu"))
                })
                .count();
            (carrying >= want).then_some(())
        }
    })
    .await;
}
