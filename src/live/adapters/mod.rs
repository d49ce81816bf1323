//! Adapters for elastic jobs that have no master: the controller drives the job's Kubernetes
//! object directly, with master protocol v1's semantics, through the same
//! [`JobEndpoint`](super::endpoint::JobEndpoint) interface as an HTTP master.
//!
//! # How a job opts in
//!
//! The job object (the one that holds the worker count) carries:
//!
//! - label `colocate.dev/elastic: "true"` (the watches filter on it server-side);
//! - annotation `colocate.dev/scale-via`: how to change the worker count,
//!   - `scale-subresource`: the object's `/scale` subresource (Deployment, StatefulSet, and custom
//!     resources exposing it, such as Kubeflow's PyTorchJob, whose CRD maps `/scale` to
//!     `spec.pytorchReplicaSpecs.Worker.replicas`);
//!   - `volcano-replicas`: a JSON patch of `spec.tasks[i].replicas` of a Volcano Job
//!     (`batch.volcano.sh/v1alpha1`), guarded by a `test` of the task's name at that index;
//! - annotations `colocate.dev/min-workers` and `colocate.dev/max-workers` (required: there is no
//!   master to report the bounds);
//! - optionally `colocate.dev/job` (the job's name; default the object's name), `colocate.dev/priority`,
//!   `colocate.dev/weight`, `colocate.dev/rescale-cost` (a duration such as `30s`) and, for Volcano,
//!   `colocate.dev/worker-task` (default `worker`).
//!
//! The worker pod template (Deployment/StatefulSet `spec.template`, PyTorchJob
//! `spec.pytorchReplicaSpecs.Worker.template`, Volcano `spec.tasks[worker].template`) must label
//! its pods `colocate.dev/job: <job>` and `colocate.dev/role: worker`: the controller classifies
//! pods by these labels, and the adapter counts the job's workers by them. The per-worker
//! resources are the template's effective requests.
//!
//! Objects that do not meet this are left alone and reported by [`AdapterJobs::jobs`] as
//! problems naming the object and what is wrong.
//!
//! # What the adapter reports
//!
//! Each job is the protocol's master-side ledger
//! ([`MasterState`](crate::master_protocol::MasterState): generation, idempotent command ids,
//! bounds) over a [`WorkerBackend`](crate::master_protocol::WorkerBackend) that reads and writes
//! the object:
//! - `workers.target` is the object's worker replicas (`/scale` `spec.replicas`, or the Volcano
//!   task's `replicas`); a change made by someone else is followed with a new generation;
//! - `workers.current` counts Ready pods labelled as the job's workers in the object's namespace,
//!   `workers.pending` the others not terminating and not finished (`/scale`'s status carries only
//!   a replica count, which counts unready pods too);
//! - `phase` is `Completed`/`Failed` from the object's status where the kind has one (PyTorchJob
//!   conditions, Volcano `status.state.phase`), else derived from the counts;
//! - the generation starts from the object's `metadata.generation`, which grows with every
//!   replicas change, so it never goes back when the controller restarts.
//!
//! # RBAC
//!
//! ```yaml
//! - {apiGroups: [apps], resources: [deployments, statefulsets], verbs: [get, list, watch]}
//! - {apiGroups: [apps], resources: [deployments/scale, statefulsets/scale], verbs: [get, patch]}
//! - {apiGroups: [kubeflow.org], resources: [pytorchjobs], verbs: [get, list, watch]}
//! - {apiGroups: [kubeflow.org], resources: [pytorchjobs/scale], verbs: [get, patch]}
//! - {apiGroups: [batch.volcano.sh], resources: [jobs], verbs: [get, list, watch, patch]}
//! - {apiGroups: [""], resources: [pods], verbs: [list, patch]}   # count workers; pod-deletion-cost
//! ```
//! (Discovery of the served kinds needs no rule: API discovery is readable by every user.)

mod adapted_kinds;
mod discovery;
mod in_process_master;
mod object;
mod scale;
mod settings;
mod volcano;
mod workers;

pub use adapted_kinds::task_index;
pub use adapted_kinds::{strip, AdapterKind, WorkerAt, KINDS};
pub use discovery::{AdapterError, AdapterJobs};
pub use in_process_master::{master_error, AdapterEndpoint, DEFAULT_ATTEMPT_TIMEOUT};
pub use scale::{PhaseSource, ScaleSubresourceBackend};
pub use settings::{settings, AdapterSettings, ScaleVia, SettingsError, DEFAULT_WORKER_TASK};
pub use volcano::{replicas_patch, VolcanoBackend, VolcanoPatch};
pub use workers::{check_worker_labels, count_workers, worker_resources, worker_selector, WorkerPods};
