//! Writes what the controller did onto the job's own object, so `kubectl describe` on the
//! master Service (or master Pod, or the adapted Deployment, PyTorchJob, ...) shows why it
//! shrank: an Event regarding the object, and on master Services also an annotation holding the
//! last decision. Other kinds get the Event only: annotating them would need `patch` on the
//! workloads themselves (Deployments, PyTorchJobs, any Pod), more than the controller should
//! hold when `/scale` is all it needs to act. Failures are logged, never fatal: the scale command
//! already happened.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube::{Api, Client};
use serde_json::json;
use std::sync::Arc;

use super::events::{EventNote, EventWriter};
use super::gate::{Write, WriteGate};

use crate::live::endpoint::JobObject;
use crate::live::kinds::KindResources;
use crate::live::names::LAST_DECISION_ANNOTATION;

/// Field manager of the annotation patch.
const MANAGER: &str = "colocate";

/// One change the controller made to a job, as written on the job.
#[derive(Clone, Debug)]
pub struct Record {
    /// Event reason: `Shrink`, `Grow` or `ForcedPreemption`.
    pub reason: &'static str,
    pub action: &'static str,
    /// Readable sentence (the intent's `why`, or what was deleted).
    pub note: String,
    /// The annotation value (None: leave the annotation as it is).
    pub annotation: Option<String>,
    pub warning: bool,
}

pub struct DecisionRecorder {
    client: Client,
    events: EventWriter,
    /// Shared with the service directory: one discovery request per kind.
    kinds: Arc<KindResources>,
    /// Events and annotations are writes: only the leader makes them.
    gate: Arc<WriteGate>,
}

impl DecisionRecorder {
    pub fn new(client: Client, instance: String, gate: Arc<WriteGate>, kinds: Arc<KindResources>) -> DecisionRecorder {
        DecisionRecorder { events: EventWriter::new(client.clone(), "colocate", &instance), kinds, client, gate }
    }

    pub async fn record(&self, object: &JobObject, record: &Record) {
        let reference = ObjectReference {
            api_version: Some(object.api_version.clone()),
            kind: Some(object.kind.clone()),
            namespace: Some(object.namespace.clone()),
            name: Some(object.name.clone()),
            uid: object.uid.clone(),
            ..ObjectReference::default()
        };
        // The events API caps the note at 1 kB.
        let note = truncate(&record.note, 1000);
        let event = EventNote {
            regarding: &reference,
            warning: record.warning,
            reason: record.reason,
            action: record.action,
            note: &note,
        };
        let what = object.to_string();
        match self.gate.write(Write::Event, &what, self.events.publish(&event)).await {
            Ok(Err(e)) => tracing::warn!(object = %object, error = %e, "could not publish the event"),
            Ok(Ok(())) => {}
            // Not leading any more: the annotation would not be ours to write either.
            Err(_) => return,
        }
        if let Some(value) =
            record.annotation.as_ref().filter(|_| object.kind == "Service" && object.api_version == "v1")
        {
            if let Ok(Err(e)) = self.gate.write(Write::Annotation, &what, self.annotate(object, value)).await {
                tracing::warn!(object = %object, error = %e, "could not annotate the job with the decision");
            }
        }
    }

    async fn annotate(&self, object: &JobObject, value: &str) -> Result<(), kube::Error> {
        let resource = self.resource(object).await?;
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &object.namespace, &resource);
        let patch = json!({"metadata": {"annotations": {LAST_DECISION_ANNOTATION: value}}});
        api.patch(&object.name, &PatchParams::apply(MANAGER), &Patch::Merge(&patch)).await.map(|_| ())
    }

    async fn resource(&self, object: &JobObject) -> Result<ApiResource, kube::Error> {
        if object.api_version == "v1" && object.kind == "Service" {
            return Ok(ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()));
        }
        self.kinds.resource(&object.api_version, &object.kind).await
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
