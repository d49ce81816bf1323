//! What the decision core sees: one consistent picture of the cluster at `now`.
//!
//! The live controller builds it from reflector stores and samplers; replay builds it from the
//! simulated cluster. Nothing here knows where it came from.

use std::sync::Arc;
use std::time::Duration;

use super::resources::Resources;

#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Time of the snapshot, on a clock the caller owns (simulated seconds or Unix time).
    pub now: Duration,
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    pub services: Vec<Service>,
    pub jobs: Vec<Job>,
}

#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub allocatable: Resources,
    /// False for cordoned or not-ready nodes: nothing new lands there.
    pub schedulable: bool,
    /// `capacity: usage`: the batch capacity the node carries now (its status, as the
    /// scheduler sees it); `None` where it carries none yet.
    pub batch: Option<Resources>,
}

/// The name of a node, service or job as pods refer to it. Shared: the pods of one node
/// (service, job) can hold one copy of its name, so that a decision reading 150,000 pods' names
/// reads a few thousand strings, not 150,000 scattered ones (`benches/live_state.rs` times a
/// decision at that size). Equality is by content.
pub type SharedName = Arc<str>;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodClass {
    /// A replica of a latency-critical service.
    Online { service: SharedName },
    /// A worker of an elastic training job.
    Worker { job: SharedName },
    /// A training job's master; never released by the controller.
    Master { job: SharedName },
    /// DaemonSets and everything else the controller does not manage.
    System,
}

#[derive(Clone, Debug)]
pub struct Pod {
    pub name: String,
    pub class: PodClass,
    /// `None` while the pod waits for the scheduler.
    pub node: Option<SharedName>,
    pub requests: Resources,
    /// Ready to serve (online pods) or to train (workers).
    pub ready: bool,
    /// Deletion requested: when its grace period ends (its `deletionTimestamp`, on the
    /// snapshot's clock). It still holds its node until it is gone.
    pub terminating_until: Option<Duration>,
    /// kube-scheduler preempted it (its condition `DisruptionTarget`, reason
    /// `PreemptionByScheduler`, which the scheduler sets before it deletes the pod): it keeps its
    /// node for its whole grace period, whatever its master announces for releases.
    pub preempted: bool,
    /// When it started (`status.startTime`, whole seconds, on the snapshot's clock); `None`
    /// until the kubelet starts it. kube-scheduler's preemption takes a node's lower-priority
    /// pods that started last first (`MoreImportantPod`), and a released worker started last
    /// is a victim already leaving, not a worker killed.
    pub started: Option<Duration>,
    /// What it uses (CPU and memory, smoothed as sampled); `None` where no usage is known, and
    /// always in `capacity: requests`. A worker in `capacity: usage` holds its batch request in
    /// `requests`.
    pub usage: Option<Resources>,
}

impl Pod {
    pub fn terminating(&self) -> bool {
        self.terminating_until.is_some()
    }
}

#[derive(Clone, Debug)]
pub struct Service {
    pub name: String,
    /// Requests of one replica.
    pub replica: Resources,
    pub hpa: Option<Hpa>,
    /// Recent load samples (requests/s), oldest first; used for the trend only.
    pub load: Vec<Sample>,
    pub latency: Option<Latency>,
    /// Replicas' worth of room kept free of training beyond what the service is expected to
    /// need (at most up to its HPA's `max_replicas`): standing headroom for a load that steps
    /// faster than a release, as overprovisioning pods keep it.
    pub headroom_replicas: u32,
}

#[derive(Clone, Debug)]
pub struct Hpa {
    pub min_replicas: u32,
    pub max_replicas: u32,
    /// `status.currentReplicas`.
    pub current_replicas: u32,
    /// `status.desiredReplicas`: pods the HPA has decided on, possibly not created yet.
    pub desired_replicas: u32,
    /// Latest observation of the scaling metric: utilization of ready pods vs the target.
    pub metric: Option<HpaMetric>,
}

#[derive(Clone, Copy, Debug)]
pub struct HpaMetric {
    pub current: f64,
    pub target: f64,
}

#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub at: Duration,
    pub value: f64,
}

#[derive(Clone, Copy, Debug)]
pub struct Latency {
    /// Observed p99; `None` when the sample is missing or stale (treated conservatively).
    pub p99: Option<Duration>,
    pub slo_p99: Duration,
}

impl Latency {
    /// Heracles' slack: 1 - p99/SLO. Unknown latency has no slack.
    pub fn slack(&self) -> Option<f64> {
        self.p99.map(|p| 1.0 - p.as_secs_f64() / self.slo_p99.as_secs_f64().max(1e-9))
    }
}

#[derive(Clone, Debug)]
pub struct Job {
    pub name: String,
    pub priority: i32,
    pub weight: f64,
    pub worker: Resources,
    pub min_workers: u32,
    pub max_workers: u32,
    /// The worker count the job's master is currently steering to (`workers.target`).
    pub target_workers: u32,
    /// The master is still applying a change (`phase: Rescaling`).
    pub rescaling: bool,
    /// Every membership change pauses the job this long.
    pub rescale_cost: Duration,
    /// How long a released worker keeps its node (drain, checkpoint, exit): the master's
    /// `worker_release_s`, else its pods' termination grace period. Room for online pods must
    /// be released at least this far ahead.
    pub release_latency: Duration,
    /// What the master reports of its work (protocol v1 `progress` and `throughput`); `None`
    /// when it reports no progress. Sets how extras are split (completion.rs).
    pub work: Option<WorkReport>,
}

/// A master's account of its job's work.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorkReport {
    /// Samples (or steps) done and in all.
    pub done: f64,
    pub total: f64,
    /// Samples/s it processes now, if it says.
    pub throughput: Option<f64>,
    /// Workers the throughput was measured on (`workers.current`).
    pub workers: u32,
}
