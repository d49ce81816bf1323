//! Kubernetes objects as the decision core sees them: nodes, pods with their class and
//! effective requests, HPA status, and the job settings masters announce in annotations.
//! Pure functions of the objects: no client, no clock.

use std::collections::BTreeMap;

use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscaler, MetricTarget, MetricValueStatus};
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Node as KubeNode, Pod as KubePod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use thiserror::Error;

use crate::core::resources::{parse_cpu, parse_memory};
use crate::core::{Hpa, HpaMetric, Node, PodClass, Resources};
use crate::live::names::{
    JOB_LABEL, MASTER_LABEL, MAX_WORKERS_ANNOTATION, MIN_WORKERS_ANNOTATION, PRIORITY_ANNOTATION, ROLE_LABEL,
    WEIGHT_ANNOTATION,
};

pub const GPU: &str = "nvidia.com/gpu";

#[derive(Debug, Error, PartialEq, Eq)]
pub enum TranslateError {
    #[error("{object}: {field} `{value}` is not a quantity: {problem}")]
    Quantity { object: String, field: String, value: String, problem: String },
    #[error("{object}: annotation {annotation}=`{value}`: {problem}")]
    Annotation { object: String, annotation: &'static str, value: String, problem: String },
}

fn requests(r: Option<&ResourceRequirements>) -> Option<&BTreeMap<String, Quantity>> {
    r.and_then(|r| r.requests.as_ref())
}

/// A quantity that does not parse: which resource, its text and why.
struct BadQuantity {
    resource: &'static str,
    value: String,
    problem: String,
}

/// CPU, memory and GPU of a requests or allocatable map. The error names the object and field
/// only when there is one to report: both are built lazily, since this runs for every pod of
/// every decision.
fn resources(
    object: impl Fn() -> String,
    field: impl Fn() -> String,
    map: Option<&BTreeMap<String, Quantity>>,
) -> Result<Resources, TranslateError> {
    resources_in(map).map_err(|b| TranslateError::Quantity {
        object: object(),
        field: format!("{}.{}", field(), b.resource),
        value: b.value,
        problem: b.problem,
    })
}

fn resources_in(map: Option<&BTreeMap<String, Quantity>>) -> Result<Resources, BadQuantity> {
    let Some(map) = map else { return Ok(Resources::ZERO) };
    let get = |resource: &'static str, parse: fn(&str) -> Result<i64, crate::core::resources::QuantityError>| match map
        .get(resource)
    {
        Some(q) => parse(&q.0).map_err(|e| BadQuantity { resource, value: q.0.clone(), problem: e.to_string() }),
        None => Ok(0),
    };
    Ok(Resources::new(
        get("cpu", parse_cpu)?,
        get("memory", parse_memory)?,
        get(GPU, |s| parse_cpu(s).map(|m| m / 1000))?,
    ))
}

/// A node: its allocatable, and whether new pods can land (not cordoned, Ready).
pub fn node(n: &KubeNode) -> Result<Node, TranslateError> {
    let name = n.metadata.name.clone().unwrap_or_default();
    let status = n.status.as_ref();
    let allocatable = resources(
        || format!("node/{name}"),
        || "status.allocatable".into(),
        status.and_then(|s| s.allocatable.as_ref()),
    )?;
    let cordoned = n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    Ok(Node { name, allocatable, schedulable: !cordoned && ready, batch: None })
}

/// What the scheduler reserves for a pod, as kube-scheduler v1.34 counts it for a node
/// (`component-helpers/resource/helpers.go`, `PodRequests` with status resources and pod-level
/// resources, both on by default in 1.34):
/// - the containers' requests, each as counted while an in-place resize is under way
///   ([`container_requests`]): a released worker resized down keeps its room until the kubelet
///   reports the smaller allocation, and a plan that counted the new spec would hand out room
///   the scheduler does not yet see;
/// - plus the restartable init containers (native sidecars, `restartPolicy: Always`), which run
///   beside them;
/// - or, where larger, what the pod needs while an init container runs: that container's
///   requests plus every sidecar started before it;
/// - with the pod-level requests (`spec.resources.requests`) in place of the above for CPU and
///   memory where they are set;
/// - plus the pod overhead.
///
/// Counting less than the scheduler does would hand online pods room that is not there: they
/// would wait, or preempt workers, while colocate believes they fit.
pub fn pod_requests(p: &KubePod) -> Result<Resources, TranslateError> {
    let object = || {
        format!("pod/{}/{}", p.metadata.namespace.as_deref().unwrap_or(""), p.metadata.name.as_deref().unwrap_or(""))
    };
    let Some(spec) = p.spec.as_ref() else { return Ok(Resources::ZERO) };
    let status = p.status.as_ref();
    let statuses = status.and_then(|s| s.container_statuses.as_deref()).unwrap_or_default();
    let init_statuses = status.and_then(|s| s.init_container_statuses.as_deref()).unwrap_or_default();
    let infeasible = resize_is_infeasible(p);
    let mut sum = Resources::ZERO;
    for c in &spec.containers {
        let status = statuses.iter().find(|s| s.name == c.name);
        sum += container_requests(object, ContainerList::CONTAINERS, c, status, infeasible)?;
    }
    let mut sidecars = Resources::ZERO;
    let mut init_max = Resources::ZERO;
    for c in spec.init_containers.iter().flatten() {
        if c.restart_policy.as_deref() == Some("Always") {
            let status = init_statuses.iter().find(|s| s.name == c.name);
            let own = container_requests(object, ContainerList::SIDECARS, c, status, infeasible)?;
            sum += own;
            sidecars += own;
            init_max = init_max.max(sidecars);
        } else {
            // A regular init container has finished before its pod holds room a resize changes.
            let field = || format!("initContainers[{}].resources.requests", c.name);
            init_max = init_max.max(resources(object, field, requests(c.resources.as_ref()))? + sidecars);
        }
    }
    let mut total = sum.max(init_max);
    if let Some(pod_level) = requests(spec.resources.as_ref()) {
        let set = resources(object, || "resources.requests".into(), Some(pod_level))?;
        if pod_level.contains_key("cpu") {
            total.cpu_milli = set.cpu_milli;
        }
        if pod_level.contains_key("memory") {
            total.memory_bytes = set.memory_bytes;
        }
    }
    Ok(total + resources(object, || "overhead".into(), spec.overhead.as_ref())?)
}

/// One container's requests as the scheduler counts them (kubernetes v1.34
/// `component-helpers/resource/helpers.go`, `determineContainerReqs`): once the kubelet reports
/// the container's resources, the largest of the spec, the reported and the allocated
/// requests; the spec alone before that; the reported and allocated only when the kubelet
/// called the resize infeasible (it will never happen).
fn container_requests(
    object: impl Fn() -> String + Copy,
    list: ContainerList,
    c: &Container,
    status: Option<&ContainerStatus>,
    infeasible: bool,
) -> Result<Resources, TranslateError> {
    let desired =
        resources(object, || format!("{}[{}].resources.requests", list.spec, c.name), requests(c.resources.as_ref()))?;
    let Some(reported) = status.and_then(|s| s.resources.as_ref()) else { return Ok(desired) };
    let status_field = |what: &str| format!("status.{}[{}].{what}", list.status, c.name);
    let actual = resources(object, || status_field("resources.requests"), reported.requests.as_ref())?;
    let allocated =
        resources(object, || status_field("allocatedResources"), status.and_then(|s| s.allocated_resources.as_ref()))?;
    let held = actual.max(allocated);
    Ok(if infeasible { held } else { held.max(desired) })
}

/// Which of a pod's container lists a container is in, by the names of its spec and status
/// fields (for errors).
#[derive(Clone, Copy)]
struct ContainerList {
    spec: &'static str,
    status: &'static str,
}

impl ContainerList {
    const CONTAINERS: ContainerList = ContainerList { spec: "containers", status: "containerStatuses" };
    /// Native sidecars (restartable init containers), the only ones counted with their status.
    const SIDECARS: ContainerList = ContainerList { spec: "initContainers", status: "initContainerStatuses" };
}

/// The kubelet's verdict that a pending resize cannot fit its node (condition PodResizePending,
/// reason Infeasible): the scheduler stops counting the desired requests.
fn resize_is_infeasible(p: &KubePod) -> bool {
    has_condition(p, "PodResizePending", "Infeasible")
}

/// Whether the pod's status carries a condition of this type with this reason.
fn has_condition(p: &KubePod, type_: &str, reason: &str) -> bool {
    let conditions = p.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    conditions.iter().any(|c| c.type_ == type_ && c.reason.as_deref() == Some(reason))
}

/// A Kubernetes time (the API server's wall clock) on the live controller's clock
/// ([`crate::live::clock`]).
pub fn unix_time(t: &k8s_openapi::jiff::Timestamp) -> std::time::Duration {
    crate::live::clock::from_wall(crate::live::clock::unix(std::time::SystemTime::from(*t)))
}

/// kube-scheduler marks a victim before deleting it (kubernetes v1.34
/// `pkg/scheduler/framework/preemption/preemption.go`, `PreemptPod`).
pub fn pod_is_preempted(p: &KubePod) -> bool {
    has_condition(p, "DisruptionTarget", "PreemptionByScheduler")
}

/// Pods that hold no node resources any more (finished) are left out of snapshots.
pub fn pod_is_finished(p: &KubePod) -> bool {
    matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

pub fn pod_is_ready(p: &KubePod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// The value of [`MASTER_LABEL`] that makes an object a job's master.
const MASTER_LABEL_VALUE: &str = "true";

/// Whether a Service or Pod with these labels is a job's master (master protocol v1,
/// "Discovery": labelled `colocate.dev/master: "true"`). The one rule: the watch selects master
/// Services by it ([`master_selector`]) and keeps master Pods' annotations and ports by it, the
/// state keeps master Pods for discovery by it, and [`classify`] counts such pods as training.
pub fn is_master(labels: &BTreeMap<String, String>) -> bool {
    labels.get(MASTER_LABEL).is_some_and(|v| v == MASTER_LABEL_VALUE)
}

/// [`is_master`] as a label selector, for a watch that lists master objects only.
pub fn master_selector() -> String {
    format!("{MASTER_LABEL}={MASTER_LABEL_VALUE}")
}

/// The job whose worker a pod with these labels is (`colocate.dev/job: <job>` and
/// `colocate.dev/role: worker`).
pub fn worker_of(labels: &BTreeMap<String, String>) -> Option<&str> {
    let job = labels.get(JOB_LABEL)?;
    labels.get(ROLE_LABEL).is_some_and(|r| r == "worker").then_some(job.as_str())
}

/// Training pods are recognised by the protocol labels (a job's workers, its master, and the
/// pods in the `master` role of a job, such as a PyTorchJob's master replica); online pods by the
/// services whose selectors match them (HPA scale targets or configured selectors); the rest is
/// system.
pub fn classify(
    labels: &BTreeMap<String, String>,
    online: &[(String, crate::live::selector::LabelSelector)],
) -> PodClass {
    if let Some(job) = worker_of(labels) {
        return PodClass::Worker { job: job.into() };
    }
    let job = labels.get(JOB_LABEL);
    if is_master(labels) || (job.is_some() && labels.get(ROLE_LABEL).is_some_and(|r| r == "master")) {
        return PodClass::Master { job: job.map_or("", String::as_str).into() };
    }
    for (service, selector) in online {
        if selector.matches(labels) {
            return PodClass::Online { service: service.as_str().into() };
        }
    }
    PodClass::System
}

/// HPA (autoscaling/v2) status as the core reads it. The metric is the first one with both a
/// target and a current value in the same terms (utilization, average value or value); for CPU
/// utilization that is the ratio the HPA itself scales on.
pub fn hpa(h: &HorizontalPodAutoscaler) -> Hpa {
    let spec = h.spec.as_ref();
    let status = h.status.as_ref();
    let min = spec.and_then(|s| s.min_replicas).unwrap_or(1).max(0) as u32;
    let max = spec.map_or(min as i32, |s| s.max_replicas).max(0) as u32;
    let current = status.and_then(|s| s.current_replicas).unwrap_or(0).max(0) as u32;
    let desired = status.map_or(current as i32, |s| s.desired_replicas).max(0) as u32;
    let targets: Vec<(String, &MetricTarget)> = spec
        .and_then(|s| s.metrics.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|m| {
            let t = m.resource.as_ref().map(|r| (format!("Resource/{}", r.name), &r.target));
            t.or_else(|| m.pods.as_ref().map(|p| (format!("Pods/{}", p.metric.name), &p.target)))
                .or_else(|| m.object.as_ref().map(|o| (format!("Object/{}", o.metric.name), &o.target)))
                .or_else(|| m.external.as_ref().map(|e| (format!("External/{}", e.metric.name), &e.target)))
        })
        .collect();
    let currents: Vec<(String, &MetricValueStatus)> = status
        .and_then(|s| s.current_metrics.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|m| {
            let c = m.resource.as_ref().map(|r| (format!("Resource/{}", r.name), &r.current));
            c.or_else(|| m.pods.as_ref().map(|p| (format!("Pods/{}", p.metric.name), &p.current)))
                .or_else(|| m.object.as_ref().map(|o| (format!("Object/{}", o.metric.name), &o.current)))
                .or_else(|| m.external.as_ref().map(|e| (format!("External/{}", e.metric.name), &e.current)))
        })
        .collect();
    let metric = targets.iter().find_map(|(name, target)| {
        let (_, current) = currents.iter().find(|(n, _)| n == name)?;
        metric_pair(target, current)
    });
    Hpa { min_replicas: min, max_replicas: max, current_replicas: current, desired_replicas: desired, metric }
}

fn metric_pair(target: &MetricTarget, current: &MetricValueStatus) -> Option<HpaMetric> {
    let value = |q: &Option<Quantity>| q.as_ref().and_then(|q| parse_cpu(&q.0).ok()).map(|m| m as f64 / 1000.0);
    if let (Some(t), Some(c)) = (target.average_utilization, current.average_utilization) {
        return Some(HpaMetric { current: c as f64 / 100.0, target: t as f64 / 100.0 });
    }
    if let (Some(t), Some(c)) = (value(&target.average_value), value(&current.average_value)) {
        return Some(HpaMetric { current: c, target: t });
    }
    if let (Some(t), Some(c)) = (value(&target.value), value(&current.value)) {
        return Some(HpaMetric { current: c, target: t });
    }
    None
}

/// Job settings a master Service may override by annotation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobOverrides {
    pub priority: Option<i32>,
    pub weight: Option<f64>,
    pub min_workers: Option<u32>,
    pub max_workers: Option<u32>,
}

pub fn job_overrides(
    object: &str,
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<JobOverrides, TranslateError> {
    let Some(a) = annotations else { return Ok(JobOverrides::default()) };
    fn get<T: std::str::FromStr>(
        object: &str,
        a: &BTreeMap<String, String>,
        annotation: &'static str,
        valid: impl Fn(&T) -> bool,
        expected: &str,
    ) -> Result<Option<T>, TranslateError> {
        let Some(raw) = a.get(annotation) else { return Ok(None) };
        match raw.trim().parse::<T>() {
            Ok(v) if valid(&v) => Ok(Some(v)),
            _ => Err(TranslateError::Annotation {
                object: object.to_string(),
                annotation,
                value: raw.clone(),
                problem: format!("expected {expected}"),
            }),
        }
    }
    let o = JobOverrides {
        priority: get(object, a, PRIORITY_ANNOTATION, |_: &i32| true, "an integer")?,
        weight: get(object, a, WEIGHT_ANNOTATION, |w: &f64| w.is_finite() && *w > 0.0, "a number above 0")?,
        min_workers: get(object, a, MIN_WORKERS_ANNOTATION, |_: &u32| true, "a whole number 0 or more")?,
        max_workers: get(object, a, MAX_WORKERS_ANNOTATION, |_: &u32| true, "a whole number 0 or more")?,
    };
    if let (Some(min), Some(max)) = (o.min_workers, o.max_workers) {
        if min > max {
            return Err(TranslateError::Annotation {
                object: object.to_string(),
                annotation: MIN_WORKERS_ANNOTATION,
                value: min.to_string(),
                problem: format!("above {MAX_WORKERS_ANNOTATION} ({max})"),
            });
        }
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::live::selector::LabelSelector;

    fn from<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).expect("valid Kubernetes object")
    }

    #[test]
    fn node_allocatable_and_schedulability() {
        let n: KubeNode = from(json!({
            "metadata": {"name": "n1"},
            "spec": {},
            "status": {
                "allocatable": {"cpu": "31500m", "memory": "125Gi", "nvidia.com/gpu": "8", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        }));
        let v = node(&n).unwrap();
        assert_eq!(v.allocatable, Resources::new(31_500, 125 << 30, 8));
        assert!(v.schedulable);
        let cordoned: KubeNode = from(json!({
            "metadata": {"name": "n2"}, "spec": {"unschedulable": true},
            "status": {"allocatable": {"cpu": "4"}, "conditions": [{"type": "Ready", "status": "True"}]}
        }));
        assert!(!node(&cordoned).unwrap().schedulable);
        let not_ready: KubeNode = from(json!({
            "metadata": {"name": "n3"},
            "status": {"allocatable": {"cpu": "4"}, "conditions": [{"type": "Ready", "status": "Unknown"}]}
        }));
        assert!(!node(&not_ready).unwrap().schedulable);
    }

    #[test]
    fn bad_quantity_names_the_object_and_field() {
        let n: KubeNode = from(json!({"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "lots"}}}));
        let e = node(&n).unwrap_err();
        assert_eq!(
            e.to_string(),
            "node/n1: status.allocatable.cpu `lots` is not a quantity: `lots` is not a Kubernetes quantity (expected a number with an optional suffix such as 500m, 2, 512Mi, 4Gi)"
        );
    }

    #[test]
    fn pod_requests_take_init_containers_and_overhead_into_account() {
        let p: KubePod = from(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "250m"}}},
                    {"name": "c"}
                ],
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2", "memory": "512Mi"}}}],
                "overhead": {"cpu": "100m"}
            }
        }));
        // CPU: max(0.75, 2) + 0.1; memory: max(1Gi, 512Mi).
        assert_eq!(pod_requests(&p).unwrap(), Resources::new(2_100, 1 << 30, 0));
    }

    #[test]
    fn pod_requests_count_native_sidecars_beside_the_containers_and_before_later_init_containers() {
        // kube-scheduler's sum: containers 2 + sidecars 1 + 1 = 4 CPUs; while `migrate` runs,
        // 5 + the one sidecar started before it = 6, the larger. Counting sidecars as init
        // containers (the largest alone, 5) would count a CPU less than the scheduler.
        let p: KubePod = from(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "containers": [{"name": "main", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}],
                "initContainers": [
                    {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}},
                    {"name": "migrate", "resources": {"requests": {"cpu": "5"}}},
                    {"name": "log", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}
                ]
            }
        }));
        // Memory: the containers' 1Gi and the sidecar's 2Gi run together.
        assert_eq!(pod_requests(&p).unwrap(), Resources::new(6_000, 3 << 30, 0));
        // A sidecar resized down holds its room until the kubelet reports it, as a container.
        let mut resized = p.clone();
        let spec = resized.spec.as_mut().unwrap();
        spec.init_containers.as_mut().unwrap().remove(1);
        spec.init_containers.as_mut().unwrap()[1].resources = Some(from(json!({"requests": {"cpu": "1m"}})));
        resized.status = Some(from(json!({"initContainerStatuses": [{
            "name": "log", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
            "resources": {"requests": {"cpu": "1"}}, "allocatedResources": {"cpu": "1"}
        }]})));
        assert_eq!(pod_requests(&resized).unwrap(), Resources::new(4_000, 3 << 30, 0));
        // A bad quantity in a sidecar's status names its list.
        resized.status = Some(from(json!({"initContainerStatuses": [{
            "name": "log", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
            "resources": {"requests": {"cpu": "one"}}
        }]})));
        let err = pod_requests(&resized).unwrap_err().to_string();
        assert!(err.contains("status.initContainerStatuses[log].resources.requests.cpu"), "{err}");
    }

    #[test]
    fn pod_level_requests_replace_the_containers_where_they_are_set() {
        // PodLevelResources (beta, on by default in 1.34): the pod asks 3 CPUs, its container
        // 1; memory is not set at pod level, so the container's counts. Overhead comes on top.
        let p: KubePod = from(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "resources": {"requests": {"cpu": "3"}},
                "containers": [{"name": "main", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                "overhead": {"cpu": "100m"}
            }
        }));
        assert_eq!(pod_requests(&p).unwrap(), Resources::new(3_100, 1 << 30, 0));
        let mut bad = p.clone();
        bad.spec.as_mut().unwrap().resources = Some(from(json!({"requests": {"memory": "lots"}})));
        let err = pod_requests(&bad).unwrap_err().to_string();
        assert!(err.contains("pod/ns/p: resources.requests.memory `lots`"), "{err}");
    }

    #[test]
    fn a_resize_down_keeps_its_room_until_the_kubelet_reports_it() {
        let asking = |cpu: &str, status: serde_json::Value| -> KubePod {
            from(json!({
                "metadata": {"name": "w", "namespace": "ns"},
                "spec": {"containers": [{"name": "w", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
                "status": status
            }))
        };
        let pod = |status| asking("1m", status);
        let asked = |cpu: &str, allocated: &str| {
            json!({"containerStatuses": [{
                "name": "w", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}},
                "allocatedResources": {"cpu": allocated, "memory": "1Gi"}
            }]})
        };
        // Resized to 1m in spec; the kubelet still reports 2 CPUs: the scheduler counts 2.
        assert_eq!(pod_requests(&pod(asked("2", "2"))).unwrap(), Resources::new(2_000, 1 << 30, 0));
        // Allocated but not yet actuated: still 2.
        assert_eq!(pod_requests(&pod(asked("2", "1m"))).unwrap(), Resources::new(2_000, 1 << 30, 0));
        // Reported: the room is free.
        assert_eq!(pod_requests(&pod(asked("1m", "1m"))).unwrap(), Resources::new(1, 1 << 30, 0));
        // No reported resources (a kubelet without resize support): the spec alone.
        assert_eq!(pod_requests(&pod(json!({}))).unwrap(), Resources::new(1, 1 << 30, 0));
        // A resize up the kubelet calls infeasible: what it holds, not what was asked.
        let mut infeasible = asked("500m", "500m");
        infeasible["conditions"] = json!([{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]);
        let up = asking("4", infeasible);
        assert_eq!(pod_requests(&up).unwrap(), Resources::new(500, 1 << 30, 0));
        // A bad reported quantity names the status field.
        let e = pod_requests(&pod(asked("lots", "1m"))).unwrap_err().to_string();
        assert!(e.starts_with("pod/ns/w: status.containerStatuses[w].resources.requests.cpu `lots`"), "{e}");
    }

    #[test]
    fn classification_by_protocol_labels_and_service_selectors() {
        let pod = |labels: serde_json::Value| -> BTreeMap<String, String> { from(labels) };
        let online = vec![("nginx".to_string(), LabelSelector::parse("app=nginx").unwrap())];
        assert_eq!(
            classify(&pod(json!({"colocate.dev/job": "wd", "colocate.dev/role": "worker"})), &online),
            PodClass::Worker { job: "wd".into() }
        );
        assert_eq!(
            classify(&pod(json!({"colocate.dev/job": "wd", "colocate.dev/role": "master"})), &online),
            PodClass::Master { job: "wd".into() }
        );
        assert_eq!(classify(&pod(json!({"app": "nginx"})), &online), PodClass::Online { service: "nginx".into() });
        assert_eq!(classify(&pod(json!({"app": "redis"})), &online), PodClass::System);
        // A worker label wins over a service selector that happens to match too.
        let both = pod(json!({"app": "nginx", "colocate.dev/job": "wd", "colocate.dev/role": "worker"}));
        assert_eq!(classify(&both, &online), PodClass::Worker { job: "wd".into() });
        // A master by the protocol's label, with or without its job's name.
        let master = pod(json!({"colocate.dev/master": "true", "colocate.dev/job": "wd"}));
        assert!(is_master(&master) && worker_of(&master).is_none());
        assert_eq!(classify(&master, &online), PodClass::Master { job: "wd".into() });
        assert_eq!(
            classify(&pod(json!({"colocate.dev/master": "true"})), &online),
            PodClass::Master { job: "".into() }
        );
        // The `master` role counts as training, but only the label makes an object one to discover.
        assert!(!is_master(&pod(json!({"colocate.dev/job": "wd", "colocate.dev/role": "master"}))));
        assert!(!is_master(&pod(json!({"colocate.dev/master": "false"}))));
        assert_eq!(master_selector(), "colocate.dev/master=true");
    }

    #[test]
    fn hpa_status_and_cpu_utilization() {
        let h: HorizontalPodAutoscaler = from(json!({
            "metadata": {"name": "nginx"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"},
                "minReplicas": 2, "maxReplicas": 200,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}}]
            },
            "status": {
                "currentReplicas": 20, "desiredReplicas": 26,
                "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 78}}}]
            }
        }));
        let v = hpa(&h);
        assert_eq!((v.min_replicas, v.max_replicas, v.current_replicas, v.desired_replicas), (2, 200, 20, 26));
        let m = v.metric.unwrap();
        assert!((m.current - 0.78).abs() < 1e-9 && (m.target - 0.6).abs() < 1e-9, "{m:?}");
    }

    #[test]
    fn hpa_on_a_pods_metric_uses_average_values() {
        let h: HorizontalPodAutoscaler = from(json!({
            "metadata": {"name": "api"},
            "spec": {
                "scaleTargetRef": {"kind": "Deployment", "name": "api"},
                "maxReplicas": 10,
                "metrics": [{"type": "Pods", "pods": {"metric": {"name": "rps"}, "target": {"type": "AverageValue", "averageValue": "100"}}}]
            },
            "status": {"desiredReplicas": 3, "currentMetrics": [{"type": "Pods", "pods": {"metric": {"name": "rps"}, "current": {"averageValue": "150500m"}}}]}
        }));
        let v = hpa(&h);
        assert_eq!(v.min_replicas, 1, "minReplicas defaults to 1");
        let m = v.metric.unwrap();
        assert!((m.current - 150.5).abs() < 1e-9 && (m.target - 100.0).abs() < 1e-9, "{m:?}");
        // No status yet: no metric, no crash.
        let fresh: HorizontalPodAutoscaler = from(
            json!({"metadata": {"name": "x"}, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}, "maxReplicas": 3}}),
        );
        assert!(hpa(&fresh).metric.is_none());
    }

    #[test]
    fn job_overrides_from_annotations() {
        let a: BTreeMap<String, String> = [
            (PRIORITY_ANNOTATION, "5"),
            (WEIGHT_ANNOTATION, "2.5"),
            (MIN_WORKERS_ANNOTATION, "2"),
            (MAX_WORKERS_ANNOTATION, "16"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(
            job_overrides("service/ml/wd", Some(&a)).unwrap(),
            JobOverrides { priority: Some(5), weight: Some(2.5), min_workers: Some(2), max_workers: Some(16) }
        );
        let mut bad = a.clone();
        bad.insert(WEIGHT_ANNOTATION.into(), "-1".into());
        assert_eq!(
            job_overrides("service/ml/wd", Some(&bad)).unwrap_err().to_string(),
            "service/ml/wd: annotation colocate.dev/weight=`-1`: expected a number above 0"
        );
        let mut inverted = a;
        inverted.insert(MIN_WORKERS_ANNOTATION.into(), "20".into());
        assert!(job_overrides("s", Some(&inverted))
            .unwrap_err()
            .to_string()
            .contains("above colocate.dev/max-workers (16)"));
    }
}
