//! Wire types of master protocol v1 (`docs/master-protocol.md`).
//!
//! The field names are the contract: tools written against the document read and write exactly
//! these JSON names. None of the types denies unknown fields, because the contract says fields
//! may be added: an older controller must keep working against a newer master and the reverse.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `GET /v1/status` (200).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub job: String,
    /// Only grows; changes whenever `workers.target` changes, so a controller can tell whether
    /// the target it reads is the one it set or a newer one.
    pub generation: u64,
    pub phase: Phase,
    pub workers: Workers,
    pub worker_resources: WorkerResources,
    /// Seconds the whole job pauses on a membership change; the controller weighs a grow
    /// against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rescale_cost_s: Option<f64>,
    /// v1.1: seconds a released worker takes to be gone (drain, checkpoint, exit). The
    /// controller releases at least this far ahead of need; absent, it assumes the worker
    /// pods' termination grace period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_release_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<Throughput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// v1.2: the job's last checkpoint, and whether the master checkpoints on request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Checkpoint>,
}

/// The job's phase. `Rescaling` means the master is still applying a change
/// (`workers.current != workers.target`); the controller does not grow a job in that phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Phase {
    Pending,
    Running,
    Rescaling,
    Completed,
    Failed,
}

impl Phase {
    /// The contract's spelling, for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Rescaling => "Rescaling",
            Phase::Completed => "Completed",
            Phase::Failed => "Failed",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `status.workers`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workers {
    /// Workers taking part in training now.
    pub current: u32,
    /// The count the master is steering to (the last accepted `target`, or a change made by
    /// someone else).
    pub target: u32,
    pub min: u32,
    pub max: u32,
    /// Workers created but not yet taking part (unscheduled or starting).
    pub pending: u32,
}

/// `status.worker_resources`: what one worker requests, as Kubernetes quantities. `cpu` and
/// `memory` are required; other resources (`nvidia.com/gpu`, `ephemeral-storage`, ...) land in
/// `other`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerResources {
    pub cpu: Quantity,
    pub memory: Quantity,
    #[serde(flatten)]
    pub other: BTreeMap<String, Quantity>,
}

impl WorkerResources {
    pub fn new(cpu: impl Into<String>, memory: impl Into<String>) -> WorkerResources {
        WorkerResources { cpu: Quantity(cpu.into()), memory: Quantity(memory.into()), other: BTreeMap::new() }
    }
}

/// A Kubernetes quantity (`"2"`, `"500m"`, `"4Gi"`), kept as text: parsing belongs to whoever
/// converts it into the core's resources. Written as a string; read from a string or, because
/// hand-written masters often send `"cpu": 2`, from a JSON number.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Quantity(pub String);

impl Quantity {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for Quantity {
    fn from(s: &str) -> Quantity {
        Quantity(s.to_string())
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Quantity, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged, expecting = "a Kubernetes quantity (string or number)")]
        enum Raw {
            Str(String),
            Int(u64),
            Float(f64),
        }
        Ok(Quantity(match Raw::deserialize(d)? {
            Raw::Str(s) => s,
            Raw::Int(n) => n.to_string(),
            Raw::Float(x) => x.to_string(),
        }))
    }
}

/// `status.throughput` (optional).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    pub samples_per_s: f64,
}

/// `status.progress` (optional): samples (or steps) done out of the total.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub done: u64,
    pub total: u64,
}

/// v1.2 `status.checkpoint` (optional): what a worker removed now without warning would lose,
/// and whether the master can avoid it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Seconds since the last checkpoint was written (or since training started from its
    /// initial state): the work every worker loses if the job is killed now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_s: Option<f64>,
    /// The training step the last checkpoint holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// The master accepts `POST /v1/checkpoint`, and its own shrinks checkpoint first, so a
    /// shrink through the master loses at most the step in progress.
    #[serde(default)]
    pub on_demand: bool,
}

/// v1.2 `POST /v1/checkpoint` request body: checkpoint after the step in progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointCommand {
    /// Makes the call idempotent, as for a scale command.
    pub command_id: String,
    /// Why the controller asks (`expected-shrink`), for the master's logs.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

impl CheckpointCommand {
    pub fn new(reason: impl Into<String>) -> CheckpointCommand {
        CheckpointCommand { command_id: super::command_id::new_command_id(), reason: reason.into() }
    }
}

/// v1.2 `POST /v1/checkpoint` 202 response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointAccepted {
    /// The master's number for the request (a repeated `command_id` gets the same number).
    pub requested: u64,
}

/// `POST /v1/scale` request body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScaleCommand {
    /// Makes the call idempotent: a retry carries the same id and is accepted once.
    pub command_id: String,
    pub target: u32,
    /// Why the controller asks (`online-headroom`, `grow`, ...), for the master's logs.
    pub reason: String,
    /// By then the released workers must be gone; past it the controller may delete worker pods
    /// itself and counts a forced preemption.
    pub deadline_s: u64,
    /// Workers the controller prefers to lose, best first; the master honours it where it can.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub release_pods: Vec<String>,
}

impl ScaleCommand {
    /// A command with a fresh id (see [`new_command_id`](super::command_id::new_command_id)).
    pub fn new(target: u32, reason: impl Into<String>, deadline_s: u64) -> ScaleCommand {
        ScaleCommand {
            command_id: super::command_id::new_command_id(),
            target,
            reason: reason.into(),
            deadline_s,
            release_pods: Vec::new(),
        }
    }

    pub fn with_release_pods(mut self, pods: impl IntoIterator<Item = impl Into<String>>) -> ScaleCommand {
        self.release_pods = pods.into_iter().map(Into::into).collect();
        self
    }
}

/// `POST /v1/scale` 202 response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScaleAccepted {
    pub accepted_target: u32,
    /// The generation whose `workers.target` is `accepted_target`.
    pub generation: u64,
}

/// 409 body: the target was outside `[min, max]`; the bounds let the controller correct itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutOfBoundsBody {
    pub error: String,
    pub min: u32,
    pub max: u32,
}

/// Body of the other error answers (400, 401, 404, 503). `field` names the offending request
/// field of a 400 when there is one (the contract asks for a message naming it; the message
/// names it too, `field` lets a program read it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_contract_example_and_tolerates_added_fields() {
        let text = r#"{
          "job": "wide-deep", "generation": 12, "phase": "Running",
          "workers": {"current": 6, "target": 6, "min": 1, "max": 32, "pending": 0, "spare": 3},
          "worker_resources": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1},
          "rescale_cost_s": 10.0,
          "throughput": {"samples_per_s": 290.5, "tokens_per_s": 7},
          "progress": {"done": 120000, "total": 5000000},
          "added_later": {"anything": [1, 2]}
        }"#;
        let s: Status = serde_json::from_str(text).unwrap();
        assert_eq!(s.generation, 12);
        assert_eq!(s.phase, Phase::Running);
        assert_eq!(s.workers, Workers { current: 6, target: 6, min: 1, max: 32, pending: 0 });
        assert_eq!(s.worker_resources.memory.as_str(), "4Gi");
        assert_eq!(s.worker_resources.other.get("nvidia.com/gpu"), Some(&Quantity::from("1")));
        assert_eq!(s.rescale_cost_s, Some(10.0));
        assert_eq!(s.progress, Some(Progress { done: 120000, total: 5000000 }));
    }

    #[test]
    fn optional_status_fields_may_be_absent_and_are_not_written_when_absent() {
        let text = r#"{"job": "j", "generation": 1, "phase": "Rescaling",
          "workers": {"current": 2, "target": 4, "min": 1, "max": 8, "pending": 2},
          "worker_resources": {"cpu": "500m", "memory": "1Gi"}}"#;
        let s: Status = serde_json::from_str(text).unwrap();
        assert_eq!((s.rescale_cost_s, s.throughput, s.progress), (None, None, None));
        let back = serde_json::to_value(&s).unwrap();
        assert!(back.get("throughput").is_none());
        assert_eq!(back["worker_resources"]["cpu"], "500m");
    }

    #[test]
    fn scale_command_uses_the_contract_names() {
        let c = ScaleCommand::new(4, "online-headroom", 30).with_release_pods(["w-5", "w-3"]);
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["target"], 4);
        assert_eq!(v["deadline_s"], 30);
        assert_eq!(v["reason"], "online-headroom");
        assert_eq!(v["release_pods"], serde_json::json!(["w-5", "w-3"]));
        assert_eq!(v["command_id"].as_str().unwrap(), c.command_id);
        let bare: ScaleCommand =
            serde_json::from_str(r#"{"command_id": "a", "target": 1, "reason": "r", "deadline_s": 5}"#).unwrap();
        assert!(bare.release_pods.is_empty());
    }

    #[test]
    fn reads_the_v1_2_checkpoint_and_an_older_master_without_it() {
        let text = r#"{"job": "j", "generation": 3, "phase": "Running",
          "workers": {"current": 2, "target": 2, "min": 1, "max": 8, "pending": 0},
          "worker_resources": {"cpu": "1", "memory": "1Gi"},
          "checkpoint": {"step": 1200, "age_s": 42.5, "on_demand": true, "later": 1}}"#;
        let s: Status = serde_json::from_str(text).unwrap();
        assert_eq!(s.checkpoint, Some(Checkpoint { age_s: Some(42.5), step: Some(1200), on_demand: true }));
        let bare: Checkpoint = serde_json::from_str("{}").unwrap();
        assert_eq!(bare, Checkpoint { age_s: None, step: None, on_demand: false });
        let c = CheckpointCommand::new("expected-shrink");
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(
            (v["reason"].as_str(), v["command_id"].as_str()),
            (Some("expected-shrink"), Some(c.command_id.as_str()))
        );
    }

    #[test]
    fn unknown_phase_is_an_error() {
        assert!(serde_json::from_str::<Phase>(r#""Sleeping""#).is_err());
    }
}
