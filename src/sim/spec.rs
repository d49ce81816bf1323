//! The scenario file's types (scenario format v1 and v1.1, `docs/scenario-format.md`), as serde
//! reads them: plain data, no checks and no files read. `scenario.rs` parses and validates
//! them; `load.rs` and `job_trace.rs` read the traces they point at.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::units::{duration, Cpu, Memory};
use crate::core::{Config, Resources};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub version: u32,
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(deserialize_with = "duration")]
    pub duration: Duration,
    #[serde(default = "one_second", deserialize_with = "duration")]
    pub step: Duration,
    #[serde(default)]
    pub seed: u64,
    pub cluster: ClusterSpec,
    #[serde(default)]
    pub services: Vec<ServiceSpec>,
    #[serde(default)]
    pub jobs: Vec<JobSpec>,
    /// v1.1: more jobs, one per CSV row; [`Scenario::parse`] appends them to `jobs`.
    #[serde(default)]
    pub job_trace: Option<JobTraceSpec>,
    #[serde(default)]
    pub controller: Config,
    /// Added key: knobs of the baseline policies.
    #[serde(default)]
    pub baselines: BaselineSpec,
    /// Added key: how the controller sees the cluster (as `colocate run` samples it).
    #[serde(default)]
    pub observation: ObservationSpec,
}

fn one_second() -> Duration {
    Duration::from_secs(1)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    pub nodes: Vec<NodePool>,
    #[serde(default)]
    pub system_reserved: Option<ResourceSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodePool {
    pub pool: String,
    pub count: u32,
    pub allocatable: ResourceSpec,
}

#[derive(Debug, Default, Deserialize, Clone, Copy)]
#[serde(deny_unknown_fields)]
pub struct ResourceSpec {
    #[serde(default)]
    pub cpu: Option<Cpu>,
    #[serde(default)]
    pub memory: Option<Memory>,
    #[serde(default, rename = "nvidia.com/gpu")]
    pub gpu: Option<u32>,
}

impl ResourceSpec {
    pub fn resources(&self) -> Resources {
        Resources::new(self.cpu.map_or(0, |c| c.0), self.memory.map_or(0, |m| m.0), self.gpu.map_or(0, i64::from))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec {
    pub name: String,
    pub replica: ResourceSpec,
    pub replica_capacity_rps: f64,
    #[serde(default, deserialize_with = "duration")]
    pub startup: Duration,
    pub latency: LatencySpec,
    pub hpa: HpaSpec,
    pub load: LoadSpec,
    /// Added key: the `preemptionPolicy` of the service's PriorityClass where colocate runs.
    /// `PreemptLowerPriority` (Kubernetes' default): a pod that finds no room preempts workers.
    /// `Never`: it waits for room, and the controller's release deadline is the backstop. The
    /// baselines always preempt: that is what they stand for.
    #[serde(default)]
    pub preemption_policy: PreemptionPolicy,
    /// Added key: replicas' worth of room `colocate` keeps free of training beyond what the
    /// service is expected to need, up to its `max_replicas` (its live `headroom_replicas`).
    #[serde(default)]
    pub headroom_replicas: u32,
}

/// A PriorityClass's `preemptionPolicy`, spelt as Kubernetes spells it.
#[derive(Debug, Default, Deserialize, Clone, Copy, PartialEq, Eq)]
pub enum PreemptionPolicy {
    #[default]
    PreemptLowerPriority,
    Never,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencySpec {
    #[serde(deserialize_with = "duration")]
    pub base_p99: Duration,
    #[serde(deserialize_with = "duration")]
    pub slo_p99: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HpaSpec {
    pub min_replicas: u32,
    pub max_replicas: u32,
    pub target_utilization: f64,
    #[serde(default = "fifteen_seconds", deserialize_with = "duration")]
    pub sync_period: Duration,
    #[serde(default = "default_tolerance")]
    pub tolerance: f64,
    #[serde(default = "five_minutes", deserialize_with = "duration")]
    pub scale_down_stabilization: Duration,
    /// Added key: how often the metrics pipeline publishes a new value (metrics-server's
    /// `--metric-resolution`; its manifests set 15s).
    #[serde(default = "fifteen_seconds", deserialize_with = "duration")]
    pub metrics_resolution: Duration,
    /// Added key: the window each published value averages the load over (metrics-server: the
    /// CPU rate between two kubelet samples, about 15s; a Prometheus adapter: its rate window).
    #[serde(default = "fifteen_seconds", deserialize_with = "duration")]
    pub metrics_window: Duration,
}

fn fifteen_seconds() -> Duration {
    Duration::from_secs(15)
}
fn five_minutes() -> Duration {
    JobSpec::DEFAULT_CHECKPOINT_INTERVAL
}
fn default_tolerance() -> f64 {
    0.1
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadSpec {
    #[serde(default)]
    pub constant: Option<f64>,
    #[serde(default)]
    pub points: Option<Vec<(String, f64)>>,
    #[serde(default)]
    pub trace: Option<TraceSpec>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct TraceSpec {
    pub file: PathBuf,
    /// Defaults to a column named `t_s`, `timestamp` or `time`.
    #[serde(default)]
    pub time_column: Option<String>,
    /// Defaults to the first column that is not the time column.
    #[serde(default)]
    pub value_column: Option<String>,
    #[serde(default = "one")]
    pub scale: f64,
    #[serde(default = "one")]
    pub speedup: f64,
    /// Trace time dropped from the start (before speedup).
    #[serde(default, deserialize_with = "duration")]
    pub skip: Duration,
    /// Added key: for traces without a time column, the time between rows.
    #[serde(default, deserialize_with = "super::units::optional_duration")]
    pub row_interval: Option<Duration>,
}

fn one() -> f64 {
    1.0
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    pub name: String,
    #[serde(default, deserialize_with = "duration")]
    pub arrival: Duration,
    #[serde(default)]
    pub priority: i32,
    #[serde(default = "one")]
    pub weight: f64,
    pub worker: ResourceSpec,
    pub min_workers: u32,
    pub max_workers: u32,
    /// v1.1: the size a rigid scheduler (`gang`, `gang-backfill`) gives the job; in
    /// [min_workers, max_workers]; default max_workers.
    #[serde(default)]
    pub gang_workers: Option<u32>,
    #[serde(default, deserialize_with = "duration")]
    pub rescale_cost: Duration,
    pub throughput_per_worker: f64,
    #[serde(default = "one")]
    pub scaling_efficiency: f64,
    #[serde(default)]
    pub work: Option<f64>,
    /// Added key: how long a worker holds its node after a graceful release (drain, checkpoint,
    /// exit), at most the termination grace period; the master announces it as
    /// `worker_release_s`. Default: the whole grace period (`baselines.termination_grace_period`),
    /// which is what a worker whose container uses all of it costs (the test bed's case).
    #[serde(default, deserialize_with = "super::units::optional_duration")]
    pub release_time: Option<Duration>,
    /// Added key: the master releases workers in place (`example-master --release-in-place`):
    /// it resizes them down before they exit, so their room frees when the kubelet reports the
    /// resize (`release_time`, default [`IN_PLACE_RELEASE`]), unless the scheduler picks one as
    /// a preemption victim first: a pod being deleted is never resized, so it then holds its
    /// node for the grace period.
    #[serde(default)]
    pub release_in_place: bool,
    /// Added key: how often the job checkpoints. A worker evicted without a graceful shrink
    /// rolls the job back to its last checkpoint (as torchrun and most frameworks do); a
    /// graceful shrink through the master loses nothing.
    #[serde(default = "five_minutes", deserialize_with = "duration")]
    pub checkpoint_interval: Duration,
}

impl JobSpec {
    pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(300);

    /// Workers a rigid scheduler starts the job with.
    pub fn gang_size(&self) -> u32 {
        self.gang_workers.unwrap_or(self.max_workers)
    }
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct BaselineSpec {
    /// Time a preempted pod keeps its node (Kubernetes' default grace period).
    #[serde(deserialize_with = "duration")]
    pub termination_grace_period: Duration,
    /// Time before a preempted elastic job's master replaces lost workers (`preemption`).
    #[serde(deserialize_with = "duration")]
    pub relaunch_delay: Duration,
}

impl Default for BaselineSpec {
    fn default() -> Self {
        BaselineSpec { termination_grace_period: Duration::from_secs(30), relaunch_delay: Duration::from_secs(30) }
    }
}

/// What `colocate` sees and when: the live controller samples service load and latency from
/// Prometheus every `sample_interval` (a rate over `load_window`) and polls each job's master
/// every `status_interval`; pods, nodes and HPA status come from watches, at once.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct ObservationSpec {
    /// `run.sample_interval`.
    #[serde(deserialize_with = "duration")]
    pub sample_interval: Duration,
    /// The load query's rate window (`rate(requests_total[15s])`): each sample is the mean
    /// load over this window.
    #[serde(deserialize_with = "duration")]
    pub load_window: Duration,
    /// How often Prometheus scrapes the service's request counter. A rate ends at the newest
    /// scrape, so the load signal lags the load by half a scrape interval on average: measured
    /// on the test bed (1 s scrapes), the flash crowd's samples sit 0.15 s or 0.74 s behind the
    /// load, run by run.
    #[serde(deserialize_with = "duration")]
    pub scrape_interval: Duration,
    /// How often Prometheus scrapes the online pods' CPU usage (the kubelet's cAdvisor
    /// endpoint; 15 s is a common setting). The default usage query,
    /// `irate(container_cpu_usage_seconds_total[2m])`, reads the mean over the two newest
    /// scrapes, so in `usage` mode the controller sees each pod's usage as the mean over the
    /// last complete scrape interval, unchanged until the next scrape.
    #[serde(deserialize_with = "duration")]
    pub usage_scrape_interval: Duration,
    /// `run.status_interval`: how fresh the masters' reported phase is.
    #[serde(deserialize_with = "duration")]
    pub status_interval: Duration,
}

impl Default for ObservationSpec {
    fn default() -> Self {
        ObservationSpec {
            sample_interval: Duration::from_secs(1),
            load_window: Duration::from_secs(15),
            scrape_interval: Duration::from_secs(1),
            usage_scrape_interval: Duration::from_secs(15),
            status_interval: Duration::from_secs(5),
        }
    }
}

/// How long a worker released in place keeps its room unless told: its master's resize reaches
/// the API server a moment after colocate's intent (0.03-0.25 s) and the kubelet reports it
/// (kwok's stage on the test bed: 1 s). The live flash crowd's resizes free their room
/// 1.04-1.33 s after the intent (from the `--v=5` scheduler log); no figure for a real kubelet
/// is published.
pub const IN_PLACE_RELEASE: Duration = Duration::from_millis(1200);

impl ScenarioFile {
    /// How long a released worker of job `j` holds its node (its room, for a release in place).
    pub fn release_time(&self, j: usize) -> Duration {
        let job = &self.jobs[j];
        let default = if job.release_in_place { IN_PLACE_RELEASE } else { self.baselines.termination_grace_period };
        job.release_time.unwrap_or(default)
    }
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct JobTraceSpec {
    /// Relative to the scenario file.
    pub file: PathBuf,
    /// Seconds (a number) or `YYYY-MM-DD HH:MM[:SS]`.
    pub submit_column: String,
    /// Seconds the job ran, as traced, on its requested workers.
    pub duration_column: String,
    /// Workers it requested; rows with 0, empty or unparsable are dropped.
    pub workers_column: String,
    /// Rows submitted before the earliest + skip are dropped.
    #[serde(default, deserialize_with = "duration")]
    pub skip: Duration,
    /// At most this many rows after skip, by submit time.
    #[serde(default)]
    pub limit: Option<usize>,
    /// Divides submit offsets and durations.
    #[serde(default = "one")]
    pub speedup: f64,
    /// Requests of one worker of every trace job.
    pub worker: ResourceSpec,
    /// Floor = min(this, requested).
    #[serde(default = "one_worker")]
    pub min_workers: u32,
    /// Ceiling = ceil(requested × factor).
    #[serde(default = "one")]
    pub max_workers_factor: f64,
    /// Ceiling at most this; requested is clipped to it too.
    #[serde(default)]
    pub max_workers_cap: Option<u32>,
    #[serde(default = "one")]
    pub scaling_efficiency: f64,
    #[serde(default, deserialize_with = "duration")]
    pub rescale_cost: Duration,
    #[serde(default)]
    pub priority: i32,
    /// Jobs are `<prefix>-<row index after filtering>`.
    #[serde(default = "default_prefix")]
    pub name_prefix: String,
}

fn one_worker() -> u32 {
    1
}
fn default_prefix() -> String {
    "trace".into()
}
