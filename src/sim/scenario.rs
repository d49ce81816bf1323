//! Scenario format v1 (`docs/scenario-v1.md`): the YAML types, parsing with the path and
//! line of every error, and the checks serde cannot express.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::job_trace::{self, JobTraceSpec};
use super::load::LoadCurve;
use super::units::{duration, Cpu, Memory};
use crate::core::{Config, Resources};
use crate::yaml::{self, InputError as ScenarioError};

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
    /// `run.status_interval`: how fresh the masters' reported phase is.
    #[serde(deserialize_with = "duration")]
    pub status_interval: Duration,
}

impl Default for ObservationSpec {
    fn default() -> Self {
        ObservationSpec {
            sample_interval: Duration::from_secs(5),
            load_window: Duration::from_secs(15),
            status_interval: Duration::from_secs(5),
        }
    }
}

/// How long a worker released in place keeps its room unless told: the kubelet reports a
/// resize within a second or two (kwok's stage on the test bed: 1 s, then the scheduler's update).
pub const IN_PLACE_RELEASE: Duration = Duration::from_secs(2);

impl ScenarioFile {
    /// How long a released worker of job `j` holds its node (its room, for a release in place).
    pub fn release_time(&self, j: usize) -> Duration {
        let job = &self.jobs[j];
        let default = if job.release_in_place { IN_PLACE_RELEASE } else { self.baselines.termination_grace_period };
        job.release_time.unwrap_or(default)
    }
}

/// A validated scenario with its load curves loaded.
#[derive(Debug)]
pub struct Scenario {
    pub path: PathBuf,
    pub spec: ScenarioFile,
    /// One per service, same order.
    pub loads: Vec<LoadCurve>,
    /// Things that are allowed but probably not meant (a job whose worker fits on no node).
    pub warnings: Vec<String>,
}

impl Scenario {
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = yaml::read(path, "the scenario")?;
        Scenario::parse(path, &text)
    }

    /// Parses `text` as if read from `path` (trace files resolve relative to its folder).
    pub fn parse(path: &Path, text: &str) -> Result<Scenario, ScenarioError> {
        let mut spec: ScenarioFile = yaml::parse(path, text)?;
        let invalid = |key: String, message: String| ScenarioError::invalid(path, text, key, message);
        let base = path.parent().unwrap_or(Path::new("."));
        let mut warnings = Vec::new();
        if let Some(trace) = &spec.job_trace {
            let traced = job_trace::expand(trace, base).map_err(|(k, m)| invalid(k, m))?;
            if let Some(j) = traced.jobs.iter().find(|t| spec.jobs.iter().any(|j| j.name == t.name)) {
                let problem = format!("trace job `{}` has the name of a job in jobs:; choose another prefix", j.name);
                return Err(invalid("job_trace.name_prefix".into(), problem));
            }
            if traced.dropped > 0 {
                warnings.push(format!(
                    "job_trace: {} rows dropped (workers 0, empty or not a number, or no positive duration)",
                    traced.dropped
                ));
            }
            spec.jobs.extend(traced.jobs);
        }
        validate(&spec).map_err(|(k, m)| invalid(k, m))?;
        let mut loads = Vec::new();
        for (i, svc) in spec.services.iter().enumerate() {
            loads.push(
                LoadCurve::from_spec(&svc.load, base).map_err(|(k, m)| invalid(format!("services[{i}].load{k}"), m))?,
            );
        }
        warnings.extend(self::warnings(&spec));
        Ok(Scenario { path: path.to_path_buf(), spec, loads, warnings })
    }
}

/// Legal but suspicious: reported, the replay still runs.
fn warnings(s: &ScenarioFile) -> Vec<String> {
    let sys = s.cluster.system_reserved.map(|r| r.resources()).unwrap_or_default();
    let mut out = Vec::new();
    for (i, j) in s.jobs.iter().enumerate() {
        let w = j.worker.resources();
        if !s.cluster.nodes.iter().any(|p| (w + sys).fits_in(&p.allocatable.resources())) {
            out.push(format!("jobs[{i}].worker: {w} fits on no node; `{}` will never run", j.name));
        }
    }
    out
}

/// Checks beyond types: ranges, cross-field rules, uniqueness. Returns (key path, problem).
fn validate(s: &ScenarioFile) -> Result<(), (String, String)> {
    let err = |k: &str, m: String| Err((k.to_string(), m));
    if s.version != 1 {
        return err("version", format!("{} is not supported; this build reads version 1", s.version));
    }
    if s.name.trim().is_empty() {
        return err("name", "must not be empty".into());
    }
    if s.duration.is_zero() {
        return err("duration", "must be longer than 0s".into());
    }
    if s.step.is_zero() || s.step > s.duration {
        return err("step", format!("must be longer than 0s and at most the duration ({:?})", s.duration));
    }
    if let Err(e) = s.controller.validate() {
        return err(&format!("controller.{}", e.key), e.problem);
    }
    if s.cluster.nodes.is_empty() {
        return err("cluster.nodes", "needs at least one node pool".into());
    }
    let mut pools = HashSet::new();
    for (i, p) in s.cluster.nodes.iter().enumerate() {
        if !pools.insert(p.pool.as_str()) {
            return err(&format!("cluster.nodes[{i}].pool"), format!("`{}` is used twice", p.pool));
        }
        if p.count == 0 {
            return err(&format!("cluster.nodes[{i}].count"), "must be at least 1".into());
        }
        let a = p.allocatable.resources();
        if a.cpu_milli <= 0 {
            return err(&format!("cluster.nodes[{i}].allocatable.cpu"), "must be set and above 0".into());
        }
    }
    let sys = s.cluster.system_reserved.map(|r| r.resources()).unwrap_or_default();
    if !s.cluster.nodes.iter().any(|p| sys.fits_in(&p.allocatable.resources())) {
        return err("cluster.system_reserved", format!("{sys} does not fit on any node"));
    }
    let mut names = HashSet::new();
    for (i, svc) in s.services.iter().enumerate() {
        let at = |k: &str| format!("services[{i}].{k}");
        if !names.insert(svc.name.as_str()) {
            return err(&at("name"), format!("`{}` is used twice", svc.name));
        }
        if svc.replica.resources().cpu_milli <= 0 {
            return err(&at("replica.cpu"), "must be set and above 0 (the HPA scales on CPU utilization)".into());
        }
        if !(svc.replica_capacity_rps > 0.0 && svc.replica_capacity_rps.is_finite()) {
            return err(&at("replica_capacity_rps"), format!("{} must be above 0", svc.replica_capacity_rps));
        }
        if svc.latency.slo_p99 <= svc.latency.base_p99 {
            return err(&at("latency.slo_p99"), "must be above base_p99".into());
        }
        let h = &svc.hpa;
        if h.min_replicas == 0 {
            return err(&at("hpa.min_replicas"), "must be at least 1".into());
        }
        if h.min_replicas > h.max_replicas {
            return err(
                &at("hpa.min_replicas"),
                format!("{} is above max_replicas ({})", h.min_replicas, h.max_replicas),
            );
        }
        if !(h.target_utilization > 0.0 && h.target_utilization <= 1.0) {
            return err(&at("hpa.target_utilization"), format!("{} is outside (0, 1]", h.target_utilization));
        }
        if !(0.0..1.0).contains(&h.tolerance) {
            return err(&at("hpa.tolerance"), format!("{} is outside [0, 1)", h.tolerance));
        }
        if h.sync_period.is_zero() {
            return err(&at("hpa.sync_period"), "must be longer than 0s".into());
        }
        if h.metrics_resolution.is_zero() {
            return err(&at("hpa.metrics_resolution"), "must be longer than 0s".into());
        }
    }
    names.clear();
    for (i, j) in s.jobs.iter().enumerate() {
        let at = |k: &str| format!("jobs[{i}].{k}");
        if !names.insert(j.name.as_str()) {
            return err(&at("name"), format!("`{}` is used twice", j.name));
        }
        let w = j.worker.resources();
        if w.is_zero() {
            return err(&at("worker"), "requests nothing; give it cpu, memory or nvidia.com/gpu".into());
        }
        if j.min_workers == 0 {
            return err(&at("min_workers"), "must be at least 1".into());
        }
        if j.min_workers > j.max_workers {
            return err(&at("min_workers"), format!("{} is above max_workers ({})", j.min_workers, j.max_workers));
        }
        if let Some(g) = j.gang_workers.filter(|g| !(j.min_workers..=j.max_workers).contains(g)) {
            return err(
                &at("gang_workers"),
                format!("{g} is outside [min_workers, max_workers] = [{}, {}]", j.min_workers, j.max_workers),
            );
        }
        if !(j.weight > 0.0 && j.weight.is_finite()) {
            return err(&at("weight"), format!("{} must be above 0", j.weight));
        }
        if !(j.throughput_per_worker >= 0.0 && j.throughput_per_worker.is_finite()) {
            return err(&at("throughput_per_worker"), format!("{} must be 0 or more", j.throughput_per_worker));
        }
        if !(j.scaling_efficiency > 0.0 && j.scaling_efficiency <= 1.0) {
            return err(&at("scaling_efficiency"), format!("{} is outside (0, 1]", j.scaling_efficiency));
        }
        if let Some(w) = j.work {
            if !(w > 0.0 && w.is_finite()) {
                return err(&at("work"), format!("{w} must be above 0"));
            }
        }
        let grace = s.baselines.termination_grace_period;
        if let Some(r) = j.release_time.filter(|r| *r > grace) {
            return err(
                &at("release_time"),
                format!(
                    "{r:?} is longer than baselines.termination_grace_period ({grace:?}): the kubelet kills a \
                     worker at the end of its grace period"
                ),
            );
        }
    }
    let o = &s.observation;
    if o.sample_interval.is_zero() {
        return err("observation.sample_interval", "must be longer than 0s".into());
    }
    if o.status_interval.is_zero() {
        return err("observation.status_interval", "must be longer than 0s".into());
    }
    super::limits::check(s)
}
