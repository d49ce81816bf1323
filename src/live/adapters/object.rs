//! The object an adapter backend steers and the job's worker pods, reached and named the same
//! way by every backend.

use kube::api::{ApiResource, DynamicObject};
use kube::{Api, Client};

use super::adapted_kinds::display_name;
use super::workers::WorkerPods;
use crate::live::kube_backend::kube_failure;
use crate::master_protocol::BackendError;

/// One adapted job's object (of any kind, read as a [`DynamicObject`]) and its workers.
#[derive(Clone)]
pub struct AdaptedObject {
    pub api: Api<DynamicObject>,
    /// `Deployment ml/wd`, `Job.batch.volcano.sh ml/vj`: the object as messages name it.
    pub object: String,
    pub namespace: String,
    pub name: String,
    pub workers: WorkerPods,
}

impl AdaptedObject {
    /// The object `namespace/name` of kind `resource`, whose workers are labelled as `job`'s.
    /// Nothing is read until the first call.
    pub fn new(client: Client, resource: &ApiResource, namespace: &str, name: &str, job: &str) -> AdaptedObject {
        AdaptedObject {
            api: Api::namespaced_with(client.clone(), namespace, resource),
            object: format!("{} {namespace}/{name}", display_name(&resource.group, &resource.kind)),
            namespace: namespace.to_string(),
            name: name.to_string(),
            workers: WorkerPods::new(client, namespace, job),
        }
    }

    /// A call about the object that failed: `{action} {object}: ...` (`reading /scale of
    /// Deployment ml/wd: ...`).
    pub fn failed(&self, action: &str, e: &kube::Error) -> BackendError {
        kube_failure(format!("{action} {}", self.object), e)
    }
}
