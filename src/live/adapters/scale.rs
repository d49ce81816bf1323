//! A [`WorkerBackend`] over any object's `/scale` subresource: Deployments, StatefulSets and
//! custom resources that declare one (Kubeflow's PyTorchJob maps it to
//! `spec.pytorchReplicaSpecs.Worker.replicas`).
//!
//! - `observe`: the target is `/scale`'s `spec.replicas`; `current` and `pending` count the
//!   job's worker pods ([`WorkerPods`]), because `/scale`'s status has only a replica count
//!   (unready pods included) and, for custom resources, only what the CRD maps, often nothing.
//! - `scale`: a merge patch of `/scale`'s `spec.replicas`. For kinds whose controller honours
//!   `controller.kubernetes.io/pod-deletion-cost` (Deployments), a shrink first marks the pods in
//!   `release_pods` (see [`mark_released`]); the others remove the pods they choose, which the
//!   protocol allows (`release_pods` is a preference).

use std::sync::Arc;

use k8s_openapi::api::autoscaling::v1::Scale;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::object::AdaptedObject;
use crate::live::kube_backend::mark_released;
use crate::master_protocol::{BackendError, Observed, Phase, ScaleCommand, WorkerBackend};

/// The job's phase as the object's status reports it (`None`: derive it from the counts). A
/// closure so that discovery can read it from its cache instead of another API call.
pub type PhaseSource = Arc<dyn Fn() -> Option<Phase> + Send + Sync>;

/// The worker count behind one object's `/scale`.
#[derive(Clone)]
pub struct ScaleSubresourceBackend {
    job: AdaptedObject,
    deletion_cost: bool,
    phase: Option<PhaseSource>,
}

impl ScaleSubresourceBackend {
    /// The workers behind `job`'s object. Nothing is read until the first call.
    pub fn new(job: AdaptedObject) -> ScaleSubresourceBackend {
        ScaleSubresourceBackend { job, deletion_cost: false, phase: None }
    }

    /// Marks `release_pods` with a low pod-deletion-cost before a shrink (for objects whose pods
    /// a ReplicaSet removes).
    pub fn with_deletion_cost(mut self) -> ScaleSubresourceBackend {
        self.deletion_cost = true;
        self
    }

    pub fn with_phase(mut self, phase: PhaseSource) -> ScaleSubresourceBackend {
        self.phase = Some(phase);
        self
    }

    async fn read_scale(&self) -> Result<Scale, BackendError> {
        self.job.api.get_scale(&self.job.name).await.map_err(|e| self.job.failed("reading /scale of", &e))
    }
}

impl WorkerBackend for ScaleSubresourceBackend {
    async fn observe(&self) -> Result<Observed, BackendError> {
        let scale = self.read_scale().await?;
        let target = scale.spec.and_then(|s| s.replicas).unwrap_or(0).max(0) as u32;
        self.job.workers.observed(target, self.phase.as_ref().and_then(|p| p())).await
    }

    async fn scale(&self, command: &ScaleCommand) -> Result<(), BackendError> {
        if self.deletion_cost {
            let scale = self.read_scale().await?;
            let replicas = scale.spec.and_then(|s| s.replicas).unwrap_or(0);
            if i64::from(command.target) < i64::from(replicas) {
                // The ReplicaSet picks among the pods its selector matches; without one, the
                // job's worker labels name the same pods.
                let selector = scale.status.and_then(|s| s.selector).filter(|s| !s.is_empty());
                let selector = selector.unwrap_or_else(|| self.job.workers.selector().to_string());
                mark_released(
                    self.job.workers.api(),
                    &self.job.namespace,
                    &self.job.object,
                    &command.release_pods,
                    &selector,
                )
                .await?;
            }
        } else if !command.release_pods.is_empty() {
            tracing::debug!(object = %self.job.object, release_pods = ?command.release_pods,
                "release_pods cannot be honoured through /scale for this kind; its controller picks the pods");
        }
        let patch = json!({"spec": {"replicas": command.target}});
        self.job
            .api
            .patch_scale(&self.job.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| self.job.failed(&format!("setting replicas to {} through /scale of", command.target), &e))?;
        Ok(())
    }
}
