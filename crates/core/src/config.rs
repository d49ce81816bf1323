//! The controller's tunables, shared by `run` and `replay` (a scenario's `controller:` block).

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Every field has a default; a config file or scenario overrides only what it names. Written
/// back (`Serialize`) in the file's own form, which is how `check-config` prints it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Cluster CPU allocation (system + online + training requests / allocatable) that counts
    /// as well used: replay reports the time spent at or above it, and the live controller
    /// exports it for dashboards and alerts to draw. No decision reads it: training fills the
    /// room the reservations, the margin and the latency guard leave.
    pub target_utilization: f64,
    /// Fraction of every node's allocatable kept free of training, on top of all reservations.
    pub safety_margin: f64,
    /// What training is given: `requests` (the room no pod requested: workers request `cpu` and
    /// `memory` as any pod does) or `usage` (the room online and system pods leave unused as
    /// well: workers request only the node's batch resources, run BestEffort, and the kernel
    /// serves online pods first).
    pub capacity: CapacityMode,
    /// `capacity: usage`: fraction of every node's allocatable CPU kept out of its batch
    /// capacity. Online pods take CPU from BestEffort workers at once (the kernel's shares), so
    /// this only covers what usage samples miss: a rise between two samples, and what a busy
    /// worker costs a service beyond CPU time (caches, memory bandwidth).
    pub usage_cpu_margin: f64,
    /// `capacity: usage`: how far the CPU the BestEffort workers already on a node ask for may
    /// exceed its batch CPU before they are released, as a fraction of that batch CPU: they are
    /// kept while the node leaves them at least `1 / (1 + overcommit)` of what they ask (1: half,
    /// as Koordinator evicts BestEffort pods that get less than 60%). Online pods take the CPU
    /// they need from them at once, so a squeeze costs their jobs pace (a synchronous job steps
    /// at its slowest worker's), where a shrink pauses every worker of the job for its
    /// `rescale_cost` and leaves the CPU idle when the squeeze passes, until the regrow. New
    /// workers go only into the batch capacity. Memory has no such slack: it cannot be taken back.
    pub usage_cpu_overcommit: f64,
    /// `capacity: usage`: fraction of every node's allocatable memory kept out of its batch
    /// capacity. Memory cannot be taken back: when online pods need more than workers left, the
    /// kubelet evicts workers, so training is kept this far below what the node has.
    pub usage_memory_margin: f64,
    /// `capacity: usage`: a node's published batch capacity is rewritten when what it should be
    /// has risen by more than this fraction of the node's allocatable; a fall (of more than a
    /// hundredth of it) is written at once. Fewer writes to the API server, at the cost of
    /// leaving a rise this small unused until the next one.
    pub batch_rise_threshold: f64,
    /// How far ahead online growth is reserved for, at least: the load trend is extrapolated
    /// this far (or over the longest release latency of the jobs, when that is longer), and the
    /// HPA may take a scale-up step at each of its syncs in that time.
    #[serde(deserialize_with = "duration", serialize_with = "serialize_duration")]
    pub forecast_horizon: Duration,
    /// The HPA controller's sync period (`--horizontal-pod-autoscaler-sync-period`): how often
    /// it can take a scale-up step.
    #[serde(deserialize_with = "duration", serialize_with = "serialize_duration")]
    pub hpa_sync_period: Duration,
    /// Window of load samples used for the trend.
    #[serde(deserialize_with = "duration", serialize_with = "serialize_duration")]
    pub trend_window: Duration,
    /// Reserve for HPA growth once the (forecast) metric exceeds its target by this fraction.
    /// Lower than the HPA's own tolerance (0.1) so room is made before the HPA acts.
    pub reserve_tolerance: f64,
    /// A grow is applied only if the capacity for it has been there this long.
    #[serde(deserialize_with = "duration", serialize_with = "serialize_duration")]
    pub grow_stabilization: Duration,
    /// Most workers a job gains in one decision.
    pub grow_max_step: u32,
    /// A grow adds at least this fraction of the job's workers (at least one), or waits.
    pub grow_min_gain: f64,
    /// Reservations for coming online pods are rounded up to multiples of this fraction of the
    /// service's replicas, so a rising load shrinks training in a few larger steps rather than
    /// a pod at a time (each step pauses the jobs it touches).
    pub reserve_quantum: f64,
    /// A grow must pay back the job's `rescale_cost` within this time (minimum gain).
    #[serde(deserialize_with = "duration", serialize_with = "serialize_duration")]
    pub grow_payback: Duration,
    /// Latency slack (1 - p99/SLO) under which training stops growing on a service's nodes.
    pub latency_slack_hold: f64,
    /// Latency slack under which training shrinks on a service's nodes.
    pub latency_slack_shrink: f64,
    /// Fraction of training CPU on a service's nodes released per latency-guard step; 0 turns
    /// the guard's shrinks off (it still holds growth while the slack is low).
    pub latency_shrink_fraction: f64,
    /// `capacity: usage`: the guard's shrink fraction there (`latency_shrink_fraction` is
    /// requests mode's). 0 by default: BestEffort workers get CPU only when online pods leave it
    /// idle, so a shrink frees no CPU a service can use and the guard only holds growth. Set it
    /// where a service suffers from what busy workers do beyond CPU time (caches, memory
    /// bandwidth).
    pub usage_latency_shrink_fraction: f64,
    /// Most latency-guard shrinks in one episode of low slack; if latency has not recovered by
    /// then, training is not what hurts it and the guard only holds growth.
    pub latency_guard_max_steps: u32,
    /// Minimum time between two latency-guard shrinks (let the last one take effect).
    #[serde(deserialize_with = "duration", serialize_with = "serialize_duration")]
    pub latency_guard_interval: Duration,
    /// The window of the services' latency queries (`rate(..._bucket[15s])` in a
    /// `histogram_quantile`): a p99 over a window keeps an excursion in view that long after
    /// it ended, so for this long after a service last scaled up the guard takes low slack as
    /// the scale-up's and only holds growth. Replay samples its p99 over this window.
    #[serde(deserialize_with = "duration", serialize_with = "serialize_duration")]
    pub latency_window: Duration,
    /// Deadline given to masters for releasing workers. The protocol carries it in whole
    /// seconds (`deadline_s`), so it is at least a second, and a fraction is dropped from what
    /// the master is told (the master is told less than it has, never more).
    #[serde(deserialize_with = "duration", serialize_with = "serialize_duration")]
    pub release_deadline: Duration,
    /// A job that has waited this long for a floor that does not fit gets a reservation: the
    /// room it needs is drained (no extras, no later job starts in it) until its floor fits, so
    /// a big job is not starved by small ones that keep fitting first.
    #[serde(deserialize_with = "duration", serialize_with = "serialize_duration")]
    pub waiting_reservation_after: Duration,
    /// Among jobs of one priority whose masters report progress and throughput, split extra
    /// workers to cut the mean job completion time (heSRPT: every job progresses, the shortest
    /// fastest) rather than by weight alone; their weights still count against other jobs.
    pub completion_time_split: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            target_utilization: 0.9,
            safety_margin: 0.0,
            capacity: CapacityMode::Requests,
            usage_cpu_margin: 0.02,
            usage_memory_margin: 0.05,
            usage_cpu_overcommit: 1.5,
            batch_rise_threshold: 0.02,
            forecast_horizon: Duration::from_secs(15),
            hpa_sync_period: Duration::from_secs(15),
            trend_window: Duration::from_secs(30),
            reserve_tolerance: 0.0,
            grow_stabilization: Duration::from_secs(60),
            grow_max_step: 32,
            grow_min_gain: 0.1,
            reserve_quantum: 0.1,
            grow_payback: Duration::from_secs(300),
            latency_slack_hold: 0.1,
            latency_slack_shrink: 0.0,
            latency_shrink_fraction: 0.25,
            usage_latency_shrink_fraction: 0.0,
            latency_guard_max_steps: 2,
            latency_guard_interval: Duration::from_secs(15),
            latency_window: Duration::from_secs(15),
            release_deadline: Duration::from_secs(30),
            waiting_reservation_after: Duration::from_secs(1800),
            completion_time_split: true,
        }
    }
}

/// What the room for training is computed from (`Config::capacity`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CapacityMode {
    /// Allocatable minus every pod's requests: training holds CPU and memory as any pod does.
    #[default]
    Requests,
    /// Allocatable minus what online and system pods use (their requests where no usage is
    /// known, and never less memory than they request), published on each node as batch
    /// resources that workers request instead of `cpu` and `memory`.
    Usage,
}

impl CapacityMode {
    pub fn as_str(&self) -> &'static str {
        match self {
            CapacityMode::Requests => "requests",
            CapacityMode::Usage => "usage",
        }
    }
}

/// A bad value in the controller configuration.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{key}: {problem}")]
pub struct ConfigError {
    pub key: &'static str,
    pub problem: String,
}

impl Config {
    /// Range checks that serde cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fraction = |key: &'static str, v: f64, lo: f64, hi: f64| {
            if v.is_finite() && v >= lo && v <= hi {
                Ok(())
            } else {
                Err(ConfigError { key, problem: format!("{v} is outside [{lo}, {hi}]") })
            }
        };
        fraction("target_utilization", self.target_utilization, 0.0, 1.0)?;
        fraction("safety_margin", self.safety_margin, 0.0, 0.9)?;
        fraction("usage_cpu_margin", self.usage_cpu_margin, 0.0, 0.9)?;
        fraction("usage_memory_margin", self.usage_memory_margin, 0.0, 0.9)?;
        fraction("usage_cpu_overcommit", self.usage_cpu_overcommit, 0.0, 4.0)?;
        fraction("batch_rise_threshold", self.batch_rise_threshold, 0.0, 1.0)?;
        fraction("reserve_tolerance", self.reserve_tolerance, 0.0, 1.0)?;
        fraction("grow_min_gain", self.grow_min_gain, 0.0, 10.0)?;
        fraction("reserve_quantum", self.reserve_quantum, 0.0, 1.0)?;
        fraction("latency_slack_hold", self.latency_slack_hold, -1.0, 1.0)?;
        fraction("latency_slack_shrink", self.latency_slack_shrink, -1.0, 1.0)?;
        fraction("latency_shrink_fraction", self.latency_shrink_fraction, 0.0, 1.0)?;
        fraction("usage_latency_shrink_fraction", self.usage_latency_shrink_fraction, 0.0, 1.0)?;
        if self.latency_slack_shrink > self.latency_slack_hold {
            return Err(ConfigError {
                key: "latency_slack_shrink",
                problem: format!(
                    "{} is above latency_slack_hold ({}); training would shrink before it stops growing",
                    self.latency_slack_shrink, self.latency_slack_hold
                ),
            });
        }
        if self.grow_max_step == 0 {
            return Err(ConfigError { key: "grow_max_step", problem: "must be at least 1".into() });
        }
        if self.hpa_sync_period.is_zero() {
            return Err(ConfigError { key: "hpa_sync_period", problem: "must be longer than 0s".into() });
        }
        if self.release_deadline < Duration::from_secs(1) {
            return Err(ConfigError {
                key: "release_deadline",
                problem: format!(
                    "{} is below 1s; masters are told it in whole seconds (deadline_s)",
                    humantime::format_duration(self.release_deadline)
                ),
            });
        }
        if self.trend_window.is_zero() {
            return Err(ConfigError { key: "trend_window", problem: "must be longer than 0s".into() });
        }
        Ok(())
    }
}

/// Deserializes a humantime duration such as `500ms`, `15s`, `1h 30m`. A bare number is refused
/// with a hint, since `15` could mean seconds or milliseconds.
pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    d.deserialize_any(DurationVisitor)
}

/// Writes a duration as [`duration`] reads it (humantime: `1m 30s`).
pub fn serialize_duration<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_duration(*d))
}

struct DurationVisitor;

const DURATION_HINT: &str = "a duration such as 500ms, 15s, 5m or 1h 30m";

impl serde::de::Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(DURATION_HINT)
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Duration, E> {
        humantime::parse_duration(s.trim()).map_err(|e| E::custom(format!("`{s}` is not {DURATION_HINT} ({e})")))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Duration, E> {
        Err(E::custom(format!("`{v}` has no unit; write {DURATION_HINT}")))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Duration, E> {
        Err(E::custom(format!("`{v}` has no unit; write {DURATION_HINT}")))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Duration, E> {
        Err(E::custom(format!("`{v}` has no unit; write {DURATION_HINT}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid() {
        assert_eq!(Config::default().validate(), Ok(()));
    }

    #[test]
    fn a_release_deadline_masters_cannot_be_told_is_refused() {
        let config = Config { release_deadline: Duration::from_millis(500), ..Config::default() };
        let err = config.validate().unwrap_err();
        assert_eq!(err.key, "release_deadline");
        assert!(err.problem.contains("500ms is below 1s"), "{}", err.problem);
        let config = Config { release_deadline: Duration::from_millis(1500), ..Config::default() };
        assert_eq!(config.validate(), Ok(()));
    }
}
