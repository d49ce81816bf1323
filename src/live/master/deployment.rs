//! A [`WorkerBackend`] over a worker Deployment: the reference master for jobs whose workers are
//! plain Deployment replicas (`colocate example-master`).
//!
//! - [`observe`](WorkerBackend::observe) reads the Deployment once: the target is `spec.replicas`
//!   (what its `/scale` subresource shows as `spec.replicas`), `current` is
//!   `status.readyReplicas`, `pending` is `status.replicas - status.readyReplicas`. Reading the
//!   Deployment rather than `/scale` keeps target and readiness from the same version.
//! - [`scale`](WorkerBackend::scale) sets `spec.replicas` through `/scale`. On a shrink it first
//!   marks the pods named in `release_pods` with [`DELETION_COST_ANNOTATION`] =
//!   [`RELEASE_DELETION_COST`], so the ReplicaSet controller removes them first, and clears that
//!   mark from the Deployment's other pods (left over from an earlier shrink that removed fewer
//!   pods than were named). The ReplicaSet still prefers pods that are unscheduled, pending or
//!   not ready over any cost: the names are a preference, which the protocol allows.
//!
//! RBAC the master's ServiceAccount needs in the Deployment's namespace:
//!
//! ```yaml
//! rules:
//! - {apiGroups: [apps], resources: [deployments], verbs: [get]}
//! - {apiGroups: [apps], resources: [deployments/scale], verbs: [get, patch]}
//! - {apiGroups: [""], resources: [pods], verbs: [list, patch]}
//! ```

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{json, Value};

use super::backend::{BackendError, Observed, WorkerBackend};
use super::types::ScaleCommand;

/// The annotation the ReplicaSet controller reads to pick which pods to remove on a scale-down
/// (lowest first; absent means 0).
pub const DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

/// The cost given to released workers: below the default 0 of every unmarked worker.
pub const RELEASE_DELETION_COST: &str = "-1000";

/// The worker count of one Deployment; see the module docs.
#[derive(Clone)]
pub struct DeploymentBackend {
    namespace: String,
    name: String,
    deployments: Api<Deployment>,
    pods: Api<Pod>,
}

impl DeploymentBackend {
    /// The Deployment `namespace/name`. Nothing is read until the first call.
    pub fn new(client: Client, namespace: &str, name: &str) -> DeploymentBackend {
        DeploymentBackend {
            namespace: namespace.to_string(),
            name: name.to_string(),
            deployments: Api::namespaced(client.clone(), namespace),
            pods: Api::namespaced(client, namespace),
        }
    }

    /// The Deployment's `metadata.generation`, which grows on every replicas change: a restarted
    /// master seeds [`MasterConfig::initial_generation`](super::MasterConfig) with it so its own
    /// generation never goes back. Also checks at start-up that the Deployment is readable.
    pub async fn generation(&self) -> Result<u64, BackendError> {
        let d = self.deployments.get(&self.name).await.map_err(|e| self.failed("reading", &e))?;
        Ok(d.metadata.generation.and_then(|g| u64::try_from(g).ok()).unwrap_or(1))
    }

    fn failed(&self, action: &str, e: &kube::Error) -> BackendError {
        BackendError(format!("{action} deployment {}/{}: {}", self.namespace, self.name, describe(e)))
    }

    /// Marks exactly the named pods among the Deployment's (those matching `selector`) as the
    /// ones to remove first, and clears the mark from the others.
    async fn mark_released(&self, release_pods: &[String], selector: &str) -> Result<(), BackendError> {
        let mut named = BTreeSet::new();
        for pod in release_pods {
            let (namespace, name) = pod.split_once('/').unwrap_or((&self.namespace, pod));
            if namespace == self.namespace {
                named.insert(name);
            } else {
                tracing::warn!(pod = %pod, namespace = %self.namespace,
                    "release_pods: not in the Deployment's namespace; skipped");
            }
        }
        let pods = ListParams::default().labels(selector);
        let list =
            self.pods.list(&pods).await.map_err(|e| self.failed(&format!("listing pods ({selector}) of"), &e))?;
        let mut found = BTreeSet::new();
        for pod in &list.items {
            let Some(name) = pod.metadata.name.as_deref() else { continue };
            let cost = pod.metadata.annotations.as_ref().and_then(|a| a.get(DELETION_COST_ANNOTATION));
            let marked = cost.map(String::as_str) == Some(RELEASE_DELETION_COST);
            let wanted = named.contains(name);
            if wanted {
                found.insert(name);
            }
            if wanted != marked {
                self.set_mark(name, wanted).await?;
            }
        }
        for missing in named.difference(&found) {
            tracing::warn!(pod = %missing, deployment = %self.name, namespace = %self.namespace,
                "release_pods: no such pod among the Deployment's workers; skipped");
        }
        Ok(())
    }

    async fn set_mark(&self, pod: &str, mark: bool) -> Result<(), BackendError> {
        let value = if mark { Value::from(RELEASE_DELETION_COST) } else { Value::Null };
        let patch = json!({"metadata": {"annotations": {DELETION_COST_ANNOTATION: value}}});
        match self.pods.patch(pod, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {
                tracing::info!(pod, namespace = %self.namespace, released = mark, "pod deletion cost set");
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.is_not_found() => {
                tracing::warn!(pod, namespace = %self.namespace, "pod gone before it could be marked; skipped");
                Ok(())
            }
            Err(e) => Err(BackendError(format!(
                "annotating pod {}/{pod} for deployment {}: {}",
                self.namespace,
                self.name,
                describe(&e)
            ))),
        }
    }
}

impl WorkerBackend for DeploymentBackend {
    async fn observe(&self) -> Result<Observed, BackendError> {
        let d = self.deployments.get(&self.name).await.map_err(|e| self.failed("reading", &e))?;
        let count = |n: Option<i32>| n.and_then(|n| u32::try_from(n).ok()).unwrap_or(0);
        let status = d.status.unwrap_or_default();
        let ready = count(status.ready_replicas);
        Ok(Observed {
            // The API server defaults spec.replicas to 1; absent only in a hand-made object.
            target: d.spec.map_or(1, |s| count(s.replicas)),
            current: ready,
            pending: count(status.replicas).saturating_sub(ready),
            ..Observed::default()
        })
    }

    async fn scale(&self, command: &ScaleCommand) -> Result<(), BackendError> {
        let scale = self.deployments.get_scale(&self.name).await.map_err(|e| self.failed("reading /scale of", &e))?;
        let replicas = scale.spec.and_then(|s| s.replicas).unwrap_or(0);
        if i64::from(command.target) < i64::from(replicas) {
            let Some(selector) = scale.status.and_then(|s| s.selector).filter(|s| !s.is_empty()) else {
                return Err(BackendError(format!(
                    "deployment {}/{}: /scale reports no selector; cannot find its pods",
                    self.namespace, self.name
                )));
            };
            self.mark_released(&command.release_pods, &selector).await?;
        }
        let patch = json!({"spec": {"replicas": command.target}});
        self.deployments
            .patch_scale(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| self.failed(&format!("setting replicas to {} on", command.target), &e))?;
        Ok(())
    }
}

/// The API server's message and code, or the error with its causes.
fn describe(e: &kube::Error) -> String {
    if let kube::Error::Api(s) = e {
        return format!("{} ({} {})", s.message, s.code, s.reason);
    }
    super::error_chain(e)
}
