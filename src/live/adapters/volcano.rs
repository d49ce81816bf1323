//! A [`WorkerBackend`] over a Volcano Job (`batch.volcano.sh/v1alpha1`), which has no `/scale`:
//! the workers are the replicas of one task (`colocate.dev/worker-task`, default `worker`).
//!
//! - `observe`: the target is that task's `replicas`; `current`/`pending` count the job's worker
//!   pods ([`WorkerPods`]); the phase comes from `status.state.phase`.
//! - `scale`: one JSON patch, computed from the object just read ([`replicas_patch`]):
//!   - `test` that the task at index `i` is still the worker task, then `replace` its replicas:
//!     tasks are addressed by index, so a task list reordered since the read makes the patch
//!     fail (and be retried on a fresh read) instead of scaling another task;
//!   - lowers `spec.minAvailable` when it would exceed the job's new total replicas, and the
//!     task's own `minAvailable` when it would exceed the new replicas, each behind a `test` of
//!     the value read. Volcano's admission webhook rejects a job whose `minAvailable` is above
//!     its replicas, and the PodGroup's `minMember` follows `minAvailable`: a gang minimum above
//!     the workers left would keep the shrunk job from being scheduled again. `colocate.dev/min-workers`
//!     is the job's stated floor, so it wins; a grow leaves `minAvailable` alone (raising it
//!     would make the gang harder to schedule).
//!
//! Volcano's job controller removes the highest-indexed pods of the task on a shrink whatever
//! `release_pods` asks, which the protocol allows.

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use super::adapted_kinds::{task_index, volcano_phase};
use super::object::AdaptedObject;
use crate::live::kube_backend::kube_failure;
use crate::master_protocol::{BackendError, BackendErrorKind, Observed, ScaleCommand, WorkerBackend};

/// A JSON patch setting the worker task's replicas, and what it changes besides.
#[derive(Clone, Debug, PartialEq)]
pub struct VolcanoPatch {
    /// The JSON patch (an array of operations).
    pub ops: Value,
    /// Index of the worker task in `spec.tasks`.
    pub index: usize,
    /// `spec.minAvailable` lowered: (from, to).
    pub min_available: Option<(u64, u64)>,
    /// The task's `minAvailable` lowered: (from, to).
    pub task_min_available: Option<(u64, u64)>,
}

/// The patch that sets task `task`'s replicas to `target` in the job `data` was read as; see the
/// module docs.
pub fn replicas_patch(data: &Value, task: &str, target: u32) -> Result<VolcanoPatch, String> {
    let (index, _) = task_index(data, task)?;
    let tasks = data.pointer("/spec/tasks").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let replicas = |t: &Value| t["replicas"].as_u64().unwrap_or(0);
    let others: u64 = tasks.iter().enumerate().filter(|(j, _)| *j != index).map(|(_, t)| replicas(t)).sum();
    let total = others + u64::from(target);
    let mut ops = vec![
        json!({"op": "test", "path": format!("/spec/tasks/{index}/name"), "value": task}),
        json!({"op": "replace", "path": format!("/spec/tasks/{index}/replicas"), "value": target}),
    ];
    let mut lower = |path: String, read: Option<u64>, limit: u64| {
        let from = read.filter(|m| *m > limit)?;
        ops.push(json!({"op": "test", "path": path, "value": from}));
        ops.push(json!({"op": "replace", "path": path, "value": limit}));
        Some((from, limit))
    };
    let min_available =
        lower("/spec/minAvailable".into(), data.pointer("/spec/minAvailable").and_then(Value::as_u64), total);
    let task_min_available =
        lower(format!("/spec/tasks/{index}/minAvailable"), tasks[index]["minAvailable"].as_u64(), u64::from(target));
    Ok(VolcanoPatch { ops: Value::Array(ops), index, min_available, task_min_available })
}

/// The worker count of one Volcano Job; see the module docs.
#[derive(Clone)]
pub struct VolcanoBackend {
    job: AdaptedObject,
    task: String,
}

impl VolcanoBackend {
    /// The Job `namespace/name` (kind `resource`), whose task `task` holds the workers labelled
    /// as `job`'s. Nothing is read until the first call.
    pub fn new(
        client: Client,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
        job: &str,
        task: &str,
    ) -> VolcanoBackend {
        VolcanoBackend { job: AdaptedObject::new(client, resource, namespace, name, job), task: task.to_string() }
    }

    async fn read(&self) -> Result<DynamicObject, BackendError> {
        self.job.api.get(&self.job.name).await.map_err(|e| self.job.failed("reading", &e))
    }

    fn rejected(&self, problem: String) -> BackendError {
        BackendError::new(format!("{}: {problem}", self.job.object)).with_kind(BackendErrorKind::Rejected, None)
    }

    /// Sets the worker replicas to `target` with the patch computed from `seen`, the job as last
    /// read. Fails (kind `Rejected`, status 422) without changing anything if the worker task is
    /// no longer at the index it had in `seen`.
    pub async fn scale_from(&self, seen: &DynamicObject, target: u32) -> Result<(), BackendError> {
        let patch = replicas_patch(&seen.data, &self.task, target).map_err(|e| self.rejected(e))?;
        if let Some((from, to)) = patch.min_available {
            tracing::warn!(object = %self.job.object, from, to, "lowering spec.minAvailable to the job's new total replicas");
        }
        if let Some((from, to)) = patch.task_min_available {
            tracing::warn!(object = %self.job.object, task = %self.task, from, to,
                "lowering the worker task's minAvailable to its new replicas");
        }
        let ops =
            serde_json::from_value(patch.ops).map_err(|e| self.rejected(format!("building the JSON patch: {e}")))?;
        self.job.api.patch(&self.job.name, &PatchParams::default(), &Patch::<()>::Json(ops)).await.map_err(|e| {
            // The API server answers a failed `test` with 422 and the patch's own words.
            let hint = match &e {
                kube::Error::Api(s) if s.code == 422 => " (the job changed since it was read: task moved?)",
                _ => "",
            };
            let context = format!(
                "setting spec.tasks[{}] ({}) replicas to {target} on {}{hint}",
                patch.index, self.task, self.job.object
            );
            kube_failure(context, &e)
        })?;
        Ok(())
    }
}

impl WorkerBackend for VolcanoBackend {
    async fn observe(&self) -> Result<Observed, BackendError> {
        let job = self.read().await?;
        let (_, task) = task_index(&job.data, &self.task).map_err(|e| self.rejected(e))?;
        let target = task["replicas"].as_u64().unwrap_or(0).min(u64::from(u32::MAX)) as u32;
        self.job.workers.observed(target, volcano_phase(&job.data)).await
    }

    async fn scale(&self, command: &ScaleCommand) -> Result<(), BackendError> {
        let job = self.read().await?;
        if !command.release_pods.is_empty() {
            tracing::debug!(object = %self.job.object, release_pods = ?command.release_pods,
                "release_pods cannot be honoured for a Volcano Job; its controller removes the highest indices");
        }
        self.scale_from(&job, command.target).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(min_available: Option<u64>, worker_min: Option<u64>) -> Value {
        let mut worker = json!({"name": "worker", "replicas": 6});
        if let Some(m) = worker_min {
            worker["minAvailable"] = json!(m);
        }
        let mut spec = json!({"tasks": [{"name": "ps", "replicas": 2}, worker]});
        if let Some(m) = min_available {
            spec["minAvailable"] = json!(m);
        }
        json!({"spec": spec})
    }

    #[test]
    fn patch_tests_the_task_name_at_its_index() {
        let p = replicas_patch(&job(Some(3), None), "worker", 4).unwrap();
        assert_eq!(p.index, 1);
        assert_eq!(
            p.ops,
            json!([
                {"op": "test", "path": "/spec/tasks/1/name", "value": "worker"},
                {"op": "replace", "path": "/spec/tasks/1/replicas", "value": 4}
            ])
        );
        assert_eq!((p.min_available, p.task_min_available), (None, None));
    }

    #[test]
    fn min_available_is_lowered_only_when_above_the_new_replicas() {
        // Total after: 2 (ps) + 1 = 3 < 8; the worker task's own 5 > 1.
        let p = replicas_patch(&job(Some(8), Some(5)), "worker", 1).unwrap();
        assert_eq!(p.min_available, Some((8, 3)));
        assert_eq!(p.task_min_available, Some((5, 1)));
        let ops = p.ops.as_array().unwrap();
        assert_eq!(ops[2], json!({"op": "test", "path": "/spec/minAvailable", "value": 8}));
        assert_eq!(ops[3], json!({"op": "replace", "path": "/spec/minAvailable", "value": 3}));
        assert_eq!(ops[5], json!({"op": "replace", "path": "/spec/tasks/1/minAvailable", "value": 1}));
        // A grow never raises it.
        let grow = replicas_patch(&job(Some(3), Some(1)), "worker", 10).unwrap();
        assert_eq!((grow.min_available, grow.task_min_available, grow.ops.as_array().unwrap().len()), (None, None, 2));
    }

    #[test]
    fn missing_task_names_the_tasks() {
        assert_eq!(
            replicas_patch(&job(None, None), "trainer", 1).unwrap_err(),
            "no task named `trainer` in spec.tasks (tasks: ps, worker); name it in annotation colocate.dev/worker-task"
        );
        assert_eq!(replicas_patch(&json!({"spec": {}}), "worker", 1).unwrap_err(), "no spec.tasks");
    }
}
