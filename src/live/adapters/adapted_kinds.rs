//! The kinds of job object the adapters drive, where each keeps its worker pod template, and
//! what its status says about the job. Pure: no client.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::api::{DynamicObject, GroupVersionKind};
use serde_json::Value;

use super::settings::ScaleVia;
use crate::live::names::{is_ours, WORKER_TASK_ANNOTATION};
use crate::master_protocol::Phase;

/// Where a kind keeps the pod template of its workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerAt {
    /// At this JSON pointer (a `PodTemplateSpec`).
    Template(&'static str),
    /// In `spec.tasks[i].template`, `i` being the task named by `colocate.dev/worker-task`.
    VolcanoTask,
}

/// One kind of job object.
#[derive(Debug)]
pub struct AdapterKind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub worker: WorkerAt,
    /// The `colocate.dev/scale-via` values that work for this kind.
    pub scale_via: &'static [ScaleVia],
    /// Whether its controller picks the pods to remove by `controller.kubernetes.io/pod-deletion-cost`
    /// (ReplicaSets do), so that `release_pods` can be honoured. StatefulSets remove the highest
    /// ordinals, the training operator and Volcano the highest indices, whatever is asked.
    pub deletion_cost: bool,
    /// `Completed`/`Failed`/`Pending` from the object's status, where the kind reports them.
    pub phase: fn(&Value) -> Option<Phase>,
}

/// The kinds watched, when the API server serves them.
pub static KINDS: [AdapterKind; 4] = [
    AdapterKind {
        group: "apps",
        version: "v1",
        kind: "Deployment",
        worker: WorkerAt::Template("/spec/template"),
        scale_via: &[ScaleVia::ScaleSubresource],
        deletion_cost: true,
        phase: no_phase,
    },
    AdapterKind {
        group: "apps",
        version: "v1",
        kind: "StatefulSet",
        worker: WorkerAt::Template("/spec/template"),
        scale_via: &[ScaleVia::ScaleSubresource],
        deletion_cost: false,
        phase: no_phase,
    },
    AdapterKind {
        group: "kubeflow.org",
        version: "v1",
        kind: "PyTorchJob",
        worker: WorkerAt::Template("/spec/pytorchReplicaSpecs/Worker/template"),
        scale_via: &[ScaleVia::ScaleSubresource],
        deletion_cost: false,
        phase: conditions_phase,
    },
    AdapterKind {
        group: "batch.volcano.sh",
        version: "v1alpha1",
        kind: "Job",
        worker: WorkerAt::VolcanoTask,
        scale_via: &[ScaleVia::VolcanoReplicas],
        deletion_cost: false,
        phase: volcano_phase,
    },
];

impl AdapterKind {
    pub fn gvk(&self) -> GroupVersionKind {
        GroupVersionKind::gvk(self.group, self.version, self.kind)
    }

    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }

    /// `Deployment`, `PyTorchJob.kubeflow.org`, `Job.batch.volcano.sh`: unambiguous in messages
    /// (a Volcano Job is not a `batch/v1` Job).
    pub fn display_name(&self) -> String {
        display_name(self.group, self.kind)
    }

    /// The worker pod template of an object of this kind (`data`: the object's JSON besides
    /// its metadata). `object` names it in the error.
    pub fn worker_template(&self, object: &str, data: &Value, task: &str) -> Result<PodTemplateSpec, String> {
        let (template, path) = match self.worker {
            WorkerAt::Template(pointer) => {
                let path = pointer.trim_start_matches('/').replace('/', ".");
                let found =
                    data.pointer(pointer).ok_or_else(|| format!("{object}: no worker pod template at {path}"))?;
                (found, path)
            }
            WorkerAt::VolcanoTask => {
                let (i, task) = task_index(data, task).map_err(|e| format!("{object}: {e}"))?;
                let path = format!("spec.tasks[{i}].template");
                let found =
                    task.get("template").ok_or_else(|| format!("{object}: no worker pod template at {path}"))?;
                (found, path)
            }
        };
        serde_path_to_error::deserialize(template).map_err(|e| {
            let at = e.path().to_string();
            let at = if at == "." { path.clone() } else { format!("{path}.{at}") };
            format!("{object}: {at}: {}", e.inner())
        })
    }
}

/// See [`AdapterKind::display_name`].
pub(super) fn display_name(group: &str, kind: &str) -> String {
    match group {
        "" | "apps" => kind.to_string(),
        group => format!("{kind}.{group}"),
    }
}

fn no_phase(_: &Value) -> Option<Phase> {
    None
}

/// Kubeflow training jobs: a `Succeeded` or `Failed` condition that is `True`.
fn conditions_phase(data: &Value) -> Option<Phase> {
    let conditions = data.pointer("/status/conditions")?.as_array()?;
    let holds = |t: &str| conditions.iter().any(|c| c["type"] == t && c["status"] == "True");
    if holds("Succeeded") {
        Some(Phase::Completed)
    } else if holds("Failed") {
        Some(Phase::Failed)
    } else {
        None
    }
}

/// Volcano's `status.state.phase`. An aborted or terminated job is not running and must not be
/// grown; protocol v1 has no closer phase than `Failed` for it.
pub(super) fn volcano_phase(data: &Value) -> Option<Phase> {
    match data.pointer("/status/state/phase")?.as_str()? {
        "Completing" | "Completed" => Some(Phase::Completed),
        "Failed" | "Terminating" | "Terminated" | "Aborting" | "Aborted" => Some(Phase::Failed),
        "Pending" => Some(Phase::Pending),
        _ => None,
    }
}

/// Keeps what the adapters read, to keep the cache small: metadata without managed fields,
/// owner references and foreign annotations (`kubectl.kubernetes.io/last-applied-configuration`
/// alone can be as large as the object); the spec with pod templates cut down to container
/// names and resources; of the status only `conditions` and `state` (the phase).
pub fn strip(o: &mut DynamicObject) {
    o.metadata.managed_fields = None;
    o.metadata.owner_references = None;
    if let Some(a) = o.metadata.annotations.as_mut() {
        a.retain(|k, _| is_ours(k));
    }
    if let Some(status) = o.data.get_mut("status").and_then(Value::as_object_mut) {
        status.retain(|k, _| k == "conditions" || k == "state");
    }
    if let Some(spec) = o.data.get_mut("spec") {
        slim_pod_specs(spec);
    }
}

/// In every object with a `containers` array (a pod spec), keeps per container its name and
/// resources, and drops volumes, affinity and tolerations.
fn slim_pod_specs(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if map.get("containers").is_some_and(Value::is_array) {
                map.remove("volumes");
                map.remove("affinity");
                map.remove("tolerations");
                for key in ["containers", "initContainers"] {
                    for c in map.get_mut(key).and_then(Value::as_array_mut).into_iter().flatten() {
                        if let Some(c) = c.as_object_mut() {
                            c.retain(|k, _| k == "name" || k == "resources");
                        }
                    }
                }
                return;
            }
            map.values_mut().for_each(slim_pod_specs);
        }
        Value::Array(items) => items.iter_mut().for_each(slim_pod_specs),
        _ => {}
    }
}

/// The index and JSON of the task named `task` in `spec.tasks` (`data`: the object besides its
/// metadata).
pub fn task_index<'a>(data: &'a Value, task: &str) -> Result<(usize, &'a Value), String> {
    let Some(tasks) = data.pointer("/spec/tasks").and_then(Value::as_array) else {
        return Err("no spec.tasks".to_string());
    };
    if let Some(found) = tasks.iter().position(|t| t["name"] == task) {
        return Ok((found, &tasks[found]));
    }
    let names: Vec<&str> = tasks.iter().map(|t| t["name"].as_str().unwrap_or("?")).collect();
    Err(format!(
        "no task named `{task}` in spec.tasks (tasks: {}); name it in annotation {WORKER_TASK_ANNOTATION}",
        names.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn kind(name: &str) -> &'static AdapterKind {
        KINDS.iter().find(|k| k.kind == name).unwrap()
    }

    #[test]
    fn templates_by_kind() {
        let deployment = json!({"spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "w"}]}}}});
        let t = kind("Deployment").worker_template("Deployment ml/wd", &deployment, "worker").unwrap();
        assert_eq!(t.metadata.unwrap().labels.unwrap()["a"], "b");

        let pytorch = json!({"spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "m"}]}}},
            "Worker": {"replicas": 3, "template": {"spec": {"containers": [{"name": "w"}]}}}}}});
        let t = kind("PyTorchJob").worker_template("PyTorchJob ml/pt", &pytorch, "worker").unwrap();
        assert_eq!(t.spec.unwrap().containers[0].name, "w");
        let no_worker = json!({"spec": {"pytorchReplicaSpecs": {"Master": {}}}});
        assert_eq!(
            kind("PyTorchJob").worker_template("PyTorchJob ml/pt", &no_worker, "worker").unwrap_err(),
            "PyTorchJob ml/pt: no worker pod template at spec.pytorchReplicaSpecs.Worker.template"
        );

        let volcano = json!({"spec": {"tasks": [
            {"name": "ps", "replicas": 1, "template": {"spec": {"containers": [{"name": "ps"}]}}},
            {"name": "trainer", "replicas": 4, "template": {"spec": {"containers": [{"name": "t"}]}}}]}});
        let t = kind("Job").worker_template("Job.batch.volcano.sh ml/vj", &volcano, "trainer").unwrap();
        assert_eq!(t.spec.unwrap().containers[0].name, "t");
        assert_eq!(
            kind("Job").worker_template("Job.batch.volcano.sh ml/vj", &volcano, "worker").unwrap_err(),
            "Job.batch.volcano.sh ml/vj: no task named `worker` in spec.tasks (tasks: ps, trainer); \
             name it in annotation colocate.dev/worker-task"
        );
        let malformed = json!({"spec": {"template": {"spec": {"containers": "none"}}}});
        let e = kind("StatefulSet").worker_template("StatefulSet ml/s", &malformed, "worker").unwrap_err();
        assert!(e.starts_with("StatefulSet ml/s: spec.template.spec.containers: invalid type"), "{e}");
    }

    #[test]
    fn phases() {
        let pt = |conditions: Value| conditions_phase(&json!({"status": {"conditions": conditions}}));
        assert_eq!(pt(json!([{"type": "Running", "status": "True"}])), None);
        assert_eq!(
            pt(json!([{"type": "Running", "status": "False"}, {"type": "Succeeded", "status": "True"}])),
            Some(Phase::Completed)
        );
        assert_eq!(pt(json!([{"type": "Failed", "status": "True"}])), Some(Phase::Failed));
        assert_eq!(pt(json!([{"type": "Failed", "status": "False"}])), None);
        assert_eq!(conditions_phase(&json!({})), None);
        let vc = |phase: &str| volcano_phase(&json!({"status": {"state": {"phase": phase}}}));
        assert_eq!(vc("Running"), None);
        assert_eq!(vc("Completed"), Some(Phase::Completed));
        assert_eq!(vc("Aborted"), Some(Phase::Failed));
        assert_eq!(vc("Pending"), Some(Phase::Pending));
    }

    #[test]
    fn display_names_are_unambiguous() {
        let names: Vec<String> = KINDS.iter().map(AdapterKind::display_name).collect();
        assert_eq!(names, ["Deployment", "StatefulSet", "PyTorchJob.kubeflow.org", "Job.batch.volcano.sh"]);
    }

    #[test]
    fn strip_keeps_what_the_adapters_read() {
        let mut o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "vj", "namespace": "ml", "uid": "u1", "generation": 3,
                "labels": {"colocate.dev/elastic": "true"},
                "annotations": {"colocate.dev/max-workers": "8", "kubectl.kubernetes.io/last-applied-configuration": "{...}"},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"minAvailable": 2, "volumes": [{"name": "job-level"}], "tasks": [{"name": "worker", "replicas": 4, "template": {
                "metadata": {"labels": {"colocate.dev/job": "vj"}},
                "spec": {"volumes": [{"name": "data"}], "tolerations": [{}],
                    "containers": [{"name": "w", "image": "x", "env": [{"name": "A"}], "resources": {"requests": {"cpu": "2"}}}],
                    "initContainers": [{"name": "i", "command": ["sh"]}]}}}]},
            "status": {"state": {"phase": "Running"}, "taskStatusCount": {"worker": {}}, "conditions": []}
        }))
        .unwrap();
        strip(&mut o);
        assert!(o.metadata.managed_fields.is_none());
        assert_eq!(o.metadata.annotations.as_ref().unwrap().keys().collect::<Vec<_>>(), ["colocate.dev/max-workers"]);
        assert_eq!(o.metadata.generation, Some(3));
        let v = &o.data;
        assert_eq!(v["spec"]["minAvailable"], 2);
        assert_eq!(v["spec"]["volumes"][0]["name"], "job-level", "only pod specs are cut");
        let pod = &v["spec"]["tasks"][0]["template"]["spec"];
        assert_eq!(
            pod,
            &json!({"containers": [{"name": "w", "resources": {"requests": {"cpu": "2"}}}], "initContainers": [{"name": "i"}]})
        );
        assert_eq!(v["spec"]["tasks"][0]["template"]["metadata"]["labels"]["colocate.dev/job"], "vj");
        assert_eq!(v["status"], json!({"state": {"phase": "Running"}, "conditions": []}));
    }
}
