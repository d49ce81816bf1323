//! How the controller reaches one elastic job: an HTTP master speaking protocol v1, or a
//! Kubernetes adapter for jobs without one (`/scale` subresource, Volcano replicas patch).
//! The poller and the actuator see only [`JobEndpoint`]; discovery decides which kind a job is.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::names::object_key;
use super::translate::JobOverrides;
use crate::live::master_client::{MasterClient, MasterError};
use crate::master_protocol::{ScaleAccepted, ScaleCommand, Status};

/// Reads and changes one job's worker count with protocol v1's semantics: `status` as
/// `GET /v1/status`, `scale` as `POST /v1/scale` (idempotent per `command_id`, 409 as
/// [`MasterError::OutOfBounds`] outside `[min, max]`). Adapters map their failures onto the
/// same [`MasterError`] kinds so that metrics and retries treat every job alike.
pub trait JobEndpoint: Send + Sync + 'static {
    /// What it talks to, for logs: a URL, or `Deployment ml/wd-workers`.
    fn describe(&self) -> String;
    fn status(&self) -> BoxFuture<'_, Result<Status, MasterError>>;
    fn scale<'a>(&'a self, command: &'a ScaleCommand) -> BoxFuture<'a, Result<ScaleAccepted, MasterError>>;
}

impl JobEndpoint for MasterClient {
    fn describe(&self) -> String {
        self.base_url().to_string()
    }
    fn status(&self) -> BoxFuture<'_, Result<Status, MasterError>> {
        Box::pin(MasterClient::status(self))
    }
    fn scale<'a>(&'a self, command: &'a ScaleCommand) -> BoxFuture<'a, Result<ScaleAccepted, MasterError>> {
        Box::pin(MasterClient::scale(self, command))
    }
}

/// The Kubernetes object that stands for a job: where the controller writes its decisions
/// (an event and an annotation), so that `kubectl describe` shows why the job shrank.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobObject {
    /// `v1`, `apps/v1`, `kubeflow.org/v1`, ...
    pub api_version: String,
    /// `Service`, `Deployment`, `PyTorchJob`, ...
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
}

impl fmt::Display for JobObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// A job found in the cluster: its name (the value of its workers' `colocate.dev/job` label),
/// how to reach it and the overrides from its annotations.
#[derive(Clone)]
pub struct DiscoveredJob {
    pub namespace: String,
    pub name: String,
    pub object: JobObject,
    pub endpoint: Arc<dyn JobEndpoint>,
    pub overrides: JobOverrides,
}

impl DiscoveredJob {
    /// `namespace/name`, the key the core and the metrics use.
    pub fn key(&self) -> String {
        object_key(&self.namespace, &self.name)
    }
}

impl fmt::Debug for DiscoveredJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiscoveredJob")
            .field("key", &self.key())
            .field("object", &self.object)
            .field("endpoint", &self.endpoint.describe())
            .field("overrides", &self.overrides)
            .finish()
    }
}
