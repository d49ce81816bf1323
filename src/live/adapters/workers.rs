//! The workers of an adapted job: what one requests (from the pod template) and how many take
//! part (pods carrying the job's worker labels).

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ListParams;
use kube::{Api, Client};

use crate::core::Resources;
use crate::live::batch::{self, BatchNames};
use crate::live::kube_backend::kube_failure;
use crate::live::names::{JOB_LABEL, ROLE_LABEL};
use crate::live::translate::{pod_is_finished, pod_is_ready, pod_requests, TranslateError, GPU};
use crate::master_protocol::{BackendError, Observed, Phase, Quantity, WorkerResources};

/// The label selector of a job's workers, as the controller classifies pods.
pub fn worker_selector(job: &str) -> String {
    format!("{JOB_LABEL}={job},{ROLE_LABEL}=worker")
}

/// Checks that the template labels its pods as workers of `job`: without those labels the
/// controller would count them as system pods and the adapter would see no workers.
pub fn check_worker_labels(object: &str, job: &str, template: &PodTemplateSpec) -> Result<(), String> {
    let labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
    let has = |key: &str, value: &str| labels.and_then(|l| l.get(key)).is_some_and(|v| v == value);
    let missing: Vec<String> = [(JOB_LABEL, job), (ROLE_LABEL, "worker")]
        .into_iter()
        .filter(|(k, v)| !has(k, v))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{object}: the worker pod template lacks label(s) {}; the controller finds a job's workers by \
         {JOB_LABEL}=<job> and {ROLE_LABEL}=worker",
        missing.join(", ")
    ))
}

/// What one worker requests, as the scheduler counts it (containers, init containers, overhead),
/// in the quantities protocol v1 reports: its `cpu` and `memory`, and the batch resources named
/// `batch_names` (`capacity: usage`: a BestEffort worker asks for those alone).
pub fn worker_resources(
    object: &str,
    template: &PodTemplateSpec,
    batch_names: BatchNames,
) -> Result<WorkerResources, String> {
    let pod = Pod { metadata: ObjectMeta::default(), spec: template.spec.clone(), status: None };
    let r = pod_requests(&pod).map_err(|e| match e {
        TranslateError::Quantity { field, value, problem, .. } => {
            format!("{object}: worker pod template: {field} `{value}` is not a quantity: {problem}")
        }
        other => format!("{object}: worker pod template: {other}"),
    })?;
    let batch = batch::requested(&pod, batch_names).map_err(|e| format!("{object}: worker pod template: {e}"))?;
    let r = r + batch;
    if r.cpu_milli <= 0 && r.memory_bytes <= 0 {
        return Err(format!(
            "{object}: the worker pod template requests no CPU and no memory, nor {} and {}; the controller places \
             workers by their requests",
            batch_names.cpu(),
            batch_names.memory()
        ));
    }
    Ok(quantities(r))
}

fn quantities(r: Resources) -> WorkerResources {
    let mut w = WorkerResources::new(cpu_quantity(r.cpu_milli), memory_quantity(r.memory_bytes));
    if r.gpu > 0 {
        w.other.insert(GPU.to_string(), Quantity(r.gpu.to_string()));
    }
    w
}

fn cpu_quantity(milli: i64) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

fn memory_quantity(bytes: i64) -> String {
    for (suffix, unit) in [("Ti", 1i64 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
        if bytes != 0 && bytes % unit == 0 {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// Counts a job's worker pods in one namespace.
#[derive(Clone)]
pub struct WorkerPods {
    pods: Api<Pod>,
    namespace: String,
    selector: String,
}

impl WorkerPods {
    pub fn new(client: Client, namespace: &str, job: &str) -> WorkerPods {
        WorkerPods {
            pods: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            selector: worker_selector(job),
        }
    }

    pub fn selector(&self) -> &str {
        &self.selector
    }

    pub fn api(&self) -> &Api<Pod> {
        &self.pods
    }

    /// `(current, pending)`: see [`count_workers`].
    pub async fn count(&self) -> Result<(u32, u32), BackendError> {
        let list = self.pods.list(&ListParams::default().labels(&self.selector)).await.map_err(|e| {
            kube_failure(format!("listing pods ({}) in namespace {}", self.selector, self.namespace), &e)
        })?;
        Ok(count_workers(&list.items))
    }

    /// What a backend reports: the replicas its object asks for (`target`), the worker pods
    /// counted now, and the job's phase where the object tells it.
    pub async fn observed(&self, target: u32, phase: Option<Phase>) -> Result<Observed, BackendError> {
        let (current, pending) = self.count().await?;
        Ok(Observed { target, current, pending, phase, ..Observed::default() })
    }
}

/// `(current, pending)`: Ready workers, and the others that are neither terminating nor finished
/// (created, unscheduled or starting). Terminating workers are leaving and count as neither.
pub fn count_workers(pods: &[Pod]) -> (u32, u32) {
    let (mut current, mut pending) = (0, 0);
    for p in pods {
        if p.metadata.deletion_timestamp.is_some() || pod_is_finished(p) {
            continue;
        }
        if pod_is_ready(p) {
            current += 1;
        } else {
            pending += 1;
        }
    }
    (current, pending)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn template(v: serde_json::Value) -> PodTemplateSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn resources_of_a_template() {
        let t = template(json!({"spec": {
            "containers": [
                {"name": "w", "resources": {"requests": {"cpu": "1500m", "memory": "3Gi", "nvidia.com/gpu": "1"}}},
                {"name": "sidecar", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}],
            "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "4"}}}]}}));
        let r = worker_resources("Deployment ml/wd", &t, BatchNames::Colocate).unwrap();
        assert_eq!((r.cpu.as_str(), r.memory.as_str()), ("4", "4Gi"));
        assert_eq!(r.other.get(GPU), Some(&Quantity::from("1")));
        let odd = template(
            json!({"spec": {"containers": [{"name": "w", "resources": {"requests": {"cpu": "250m", "memory": "1000"}}}]}}),
        );
        let r = worker_resources("x", &odd, BatchNames::Colocate).unwrap();
        assert_eq!((r.cpu.as_str(), r.memory.as_str()), ("250m", "1000"));
        assert!(r.other.is_empty());
    }

    #[test]
    fn a_best_effort_worker_is_the_size_of_its_batch_resources_under_the_configured_names() {
        let limits = |cpu: &str, memory: &str| {
            template(json!({"spec": {"containers": [{"name": "w", "resources": {"limits": {
                "colocate.dev/batch-cpu": cpu, "colocate.dev/batch-memory": memory}}}]}}))
        };
        let r = worker_resources("Deployment ml/wd", &limits("4000", "8Gi"), BatchNames::Colocate).unwrap();
        assert_eq!((r.cpu.as_str(), r.memory.as_str()), ("4", "8Gi"));
        let e = worker_resources("Deployment ml/wd", &limits("4000", "8Gi"), BatchNames::Koordinator).unwrap_err();
        assert!(e.contains("nor kubernetes.io/batch-cpu and kubernetes.io/batch-memory"), "{e}");
        let e = worker_resources("Deployment ml/wd", &limits("lots", "8Gi"), BatchNames::Colocate).unwrap_err();
        assert!(e.starts_with("Deployment ml/wd: worker pod template: ") && e.contains("lots"), "{e}");
    }

    #[test]
    fn template_problems_name_the_object() {
        let bad = template(json!({"spec": {"containers": [{"name": "w", "resources": {"requests": {"cpu": "two"}}}]}}));
        let e = worker_resources("StatefulSet ml/s", &bad, BatchNames::Colocate).unwrap_err();
        assert!(
            e.starts_with(
                "StatefulSet ml/s: worker pod template: containers[w].resources.requests.cpu `two` is not a quantity"
            ),
            "{e}"
        );
        let none = template(json!({"spec": {"containers": [{"name": "w"}]}}));
        assert!(worker_resources("StatefulSet ml/s", &none, BatchNames::Colocate)
            .unwrap_err()
            .contains("requests no CPU and no memory"));
    }

    #[test]
    fn worker_labels_are_required() {
        let ok = template(json!({"metadata": {"labels": {"colocate.dev/job": "wd", "colocate.dev/role": "worker"}}}));
        assert!(check_worker_labels("Deployment ml/wd", "wd", &ok).is_ok());
        let other_job = check_worker_labels("Deployment ml/wd", "wide-deep", &ok).unwrap_err();
        assert!(other_job
            .starts_with("Deployment ml/wd: the worker pod template lacks label(s) colocate.dev/job=wide-deep;"));
        let none = check_worker_labels("Deployment ml/wd", "wd", &template(json!({}))).unwrap_err();
        assert!(none.contains("lacks label(s) colocate.dev/job=wd, colocate.dev/role=worker;"), "{none}");
    }

    #[test]
    fn counting_workers() {
        let pod = |ready: &str, phase: &str, deleting: bool| -> Pod {
            let mut meta = json!({"name": "p"});
            if deleting {
                meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            serde_json::from_value(json!({"metadata": meta,
                "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}}))
            .unwrap()
        };
        let pods = [
            pod("True", "Running", false),
            pod("True", "Running", false),
            pod("False", "Pending", false),
            pod("True", "Running", true),
            pod("False", "Succeeded", false),
            pod("False", "Failed", false),
        ];
        assert_eq!(count_workers(&pods), (2, 1));
        assert_eq!(worker_selector("wd"), "colocate.dev/job=wd,colocate.dev/role=worker");
    }
}
