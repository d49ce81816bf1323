//! The controller's Prometheus metrics: one [`Metrics`] owning a `prometheus-client` registry,
//! with a plain method per thing the controller records.
//!
//! Metric names are the `pub const`s of `metric_names.rs`, written exactly as they appear in `/metrics`
//! (counters with their `_total`, histograms by their family name, whose samples are
//! `_bucket`, `_sum` and `_count`). Dashboards, alerts and tests refer to these constants;
//! renaming one is a breaking change. [`ALL`] lists every one of them.

mod metric_names;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_usage;
mod usage;

pub use metric_names::*;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Metric, Registry, Unit};
use std::sync::atomic::AtomicU64;

use crate::core::name_map::NameMap;
use crate::core::pod_index::PodIndex;
use crate::core::{Decision, PodClass, Reason, Resources, Snapshot};

type Labels<const N: usize> = [(&'static str, String); N];
type FloatGauge = Gauge<f64, AtomicU64>;

/// The controller's metrics. Cheap to share (`Arc<Metrics>`); every method takes `&self`.
pub struct Metrics {
    registry: Registry,
    node_capacity: Family<Labels<3>, FloatGauge>,
    cluster_capacity: Family<Labels<2>, FloatGauge>,
    cpu_cores: Family<Labels<1>, FloatGauge>,
    cpu_ratio: Family<Labels<1>, FloatGauge>,
    target_utilization: FloatGauge,
    job_workers: Family<Labels<1>, Gauge>,
    job_target: Family<Labels<1>, Gauge>,
    intents: Family<Labels<1>, Counter>,
    actuations: Family<Labels<2>, Counter>,
    sample_age: Family<Labels<2>, FloatGauge>,
    samples_stale: Family<Labels<2>, Counter>,
    decision_duration: Histogram,
    decision_cpu: Histogram,
    watch_restarts: Family<Labels<1>, Counter>,
    leader: Gauge,
    reflectors_ready: Gauge,
    job_min: Family<Labels<1>, Gauge>,
    master_up: Family<Labels<1>, Gauge>,
    forced: Family<Labels<1>, Counter>,
    decisions: Counter,
    service_load: Family<Labels<1>, FloatGauge>,
    service_p99: Family<Labels<1>, FloatGauge>,
    service_slo: Family<Labels<1>, FloatGauge>,
    sample_errors: Family<Labels<2>, Counter>,
    service_training_cpu: Family<Labels<1>, FloatGauge>,
    job_max: Family<Labels<1>, Gauge>,
    sample_stale_after: FloatGauge,
    online_waiting: Family<Labels<1>, Gauge>,
    online_waiting_seconds: Family<Labels<1>, Counter<f64, AtomicU64>>,
    writes_dropped: Family<Labels<2>, Counter>,
    usage: usage::UsageMetrics,
    /// Label values set by the last decision, so series of nodes and jobs that are gone are
    /// removed rather than frozen at their last value.
    seen: Mutex<Seen>,
    /// Run before each encoding: they bring counts kept elsewhere up to date (see
    /// [`Metrics::sync_before_encode`]).
    before_encode: Mutex<Vec<SyncFn>>,
}

/// Brings counts kept outside the metrics into them.
type SyncFn = Box<dyn Fn(&Metrics) + Send + Sync>;

#[derive(Default)]
struct Seen {
    /// Each node's residual capacity gauges, per resource of [`resource_values`] (a gauge clone
    /// shares its value with the family's): found by name once per decision, not by three
    /// owned labels per resource.
    nodes: NameMap<String, [FloatGauge; 3]>,
    /// Nodes with `capacity: usage` series.
    usage_nodes: BTreeSet<String>,
    jobs: BTreeSet<String>,
    services: BTreeSet<String>,
    /// Target and reason of each job's intent in the last decision: an intent is repeated
    /// decision after decision until the master reports the new target (for ever in a dry run
    /// or while the master is down), and is counted once.
    intents: BTreeMap<String, (u32, Reason)>,
    /// Online pods waiting per service at the last decision, and its time.
    waiting: BTreeMap<String, u32>,
    waiting_at: Option<Duration>,
}

/// (label value, unit label value, amount) per resource of `r`.
fn resource_values(r: &Resources) -> [(&'static str, &'static str, f64); 3] {
    [("cpu", "core", r.cpu_cores()), ("memory", "byte", r.memory_bytes as f64), ("gpu", "device", r.gpu as f64)]
}

/// Registers `metric` under its exposed `name`: the `_total` a counter's samples get and the
/// unit suffix are taken off, because the encoder appends them again.
fn add(registry: &mut Registry, name: &str, help: &str, unit: Option<&str>, metric: impl Metric) {
    let base = if matches!(metric.metric_type(), MetricType::Counter) {
        name.strip_suffix("_total").expect("counter names end in _total")
    } else {
        name
    };
    match unit {
        Some(u) => {
            let stem = base.strip_suffix(&format!("_{u}")).expect("the unit is the name's suffix");
            registry.register_with_unit(stem, help, Unit::Other(u.to_string()), metric)
        }
        None => registry.register(base, help, metric),
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            node_capacity: Family::default(),
            cluster_capacity: Family::default(),
            cpu_cores: Family::default(),
            cpu_ratio: Family::default(),
            target_utilization: FloatGauge::default(),
            job_workers: Family::default(),
            job_target: Family::default(),
            intents: Family::default(),
            actuations: Family::default(),
            sample_age: Family::default(),
            samples_stale: Family::default(),
            decision_duration: Histogram::new(DECISION_BUCKETS),
            decision_cpu: Histogram::new(DECISION_BUCKETS),
            watch_restarts: Family::default(),
            leader: Gauge::default(),
            reflectors_ready: Gauge::default(),
            job_min: Family::default(),
            master_up: Family::default(),
            forced: Family::default(),
            decisions: Counter::default(),
            service_load: Family::default(),
            service_p99: Family::default(),
            service_slo: Family::default(),
            sample_errors: Family::default(),
            writes_dropped: Family::default(),
            service_training_cpu: Family::default(),
            job_max: Family::default(),
            sample_stale_after: FloatGauge::default(),
            online_waiting: Family::default(),
            online_waiting_seconds: Family::default(),
            usage: usage::UsageMetrics::new(),
            seen: Mutex::new(Seen::default()),
            before_encode: Mutex::default(),
        };
        // Series alerts rely on exist at 0 before anything happens.
        for reason in Reason::ALL {
            let _ = m.intents.get_or_create(&[("reason", reason.as_str().to_string())]);
        }
        let _ = m.actuations.get_or_create(&[("outcome", "ok".to_string()), ("error", "none".to_string())]);
        for kind in ACTUATION_ERROR_KINDS {
            let _ = m.actuations.get_or_create(&[("outcome", "error".to_string()), ("error", kind.to_string())]);
        }
        for kind in WATCH_KINDS.into_iter().chain([ADAPTER_JOBS_WATCH_KIND]) {
            let _ = m.watch_restarts.get_or_create(&[("kind", kind.to_string())]);
        }
        for write in WRITE_KINDS {
            for cause in WRITE_DROP_CAUSES {
                let _ = m.writes_dropped.get_or_create(&[("write", write.to_string()), ("cause", cause.to_string())]);
            }
        }
        m.register_all()
    }

    fn register_all(mut self) -> Metrics {
        let r = &mut self.registry;
        add(
            r,
            NODE_RESIDUAL_CAPACITY,
            "Room left for training on a node after system and online pods, online reservations and the \
             safety margin, as of the last decision; cpu in cores, memory in bytes, gpu in devices",
            None,
            self.node_capacity.clone(),
        );
        add(
            r,
            CLUSTER_RESIDUAL_CAPACITY,
            "Room left for training summed over all nodes, as of the last decision; cpu in cores, memory \
             in bytes, gpu in devices",
            None,
            self.cluster_capacity.clone(),
        );
        add(
            r,
            CPU_ALLOCATION_CORES,
            "CPU requested by pods bound to nodes, by class (system, online, training); idle is allocatable \
             CPU nobody requests",
            Some("cores"),
            self.cpu_cores.clone(),
        );
        add(
            r,
            CPU_ALLOCATION_RATIO,
            "CPU requested by pods bound to nodes, by class, as a fraction of the cluster's allocatable CPU",
            Some("ratio"),
            self.cpu_ratio.clone(),
        );
        add(
            r,
            TARGET_UTILIZATION_RATIO,
            "Cluster CPU allocation (system + online + training over allocatable) configured as the target, for dashboards and alerts; decisions do not read it",
            Some("ratio"),
            self.target_utilization.clone(),
        );
        add(
            r,
            JOB_WORKERS,
            "Workers of an elastic job bound to a node and not terminating",
            None,
            self.job_workers.clone(),
        );
        add(
            r,
            JOB_TARGET_WORKERS,
            "Worker count the controller steers an elastic job to (its last intent, or the master's target)",
            None,
            self.job_target.clone(),
        );
        add(
            r,
            INTENTS_TOTAL,
            "Scale intents decided, by reason; an intent repeated by later decisions (same job, target and \
             reason) counts once",
            None,
            self.intents.clone(),
        );
        add(
            r,
            ACTUATIONS_TOTAL,
            "Scale commands sent to job masters, by outcome and, for failures, the kind of error",
            None,
            self.actuations.clone(),
        );
        add(
            r,
            SAMPLE_AGE_SECONDS,
            "Age of the newest sample of a service's load or latency when last read",
            Some("seconds"),
            self.sample_age.clone(),
        );
        add(
            r,
            SAMPLES_STALE_TOTAL,
            "Samples too old to use (the controller then assumes the worst for that service)",
            None,
            self.samples_stale.clone(),
        );
        add(
            r,
            DECISION_DURATION_SECONDS,
            "Time one decision took, from snapshot to intents",
            Some("seconds"),
            self.decision_duration.clone(),
        );
        add(
            r,
            DECISION_CPU_SECONDS,
            "CPU time the deciding thread spent on one decision; below the decision's duration by \
             what it waited for a CPU or the cluster state's lock",
            Some("seconds"),
            self.decision_cpu.clone(),
        );
        add(
            r,
            WATCH_RESTARTS_TOTAL,
            "Watch failures after which a reflector restarted, by object kind",
            None,
            self.watch_restarts.clone(),
        );
        add(r, LEADER, "1 while this replica holds the leader lease, else 0", None, self.leader.clone());
        add(
            r,
            REFLECTORS_READY,
            "1 once every reflector has listed its objects (decisions are made only then), else 0",
            None,
            self.reflectors_ready.clone(),
        );
        add(r, JOB_MIN_WORKERS, "Floor of an elastic job: it is never shrunk below this", None, self.job_min.clone());
        add(
            r,
            JOB_MASTER_UP,
            "1 while a job's master (or Kubernetes adapter) answered its last status request, else 0",
            None,
            self.master_up.clone(),
        );
        add(
            r,
            FORCED_PREEMPTIONS_TOTAL,
            "Worker pods the controller deleted itself because the job's master missed a shrink deadline",
            None,
            self.forced.clone(),
        );
        add(r, DECISIONS_TOTAL, "Decisions made, on watch events (debounced) and ticks", None, self.decisions.clone());
        add(
            r,
            SERVICE_LOAD,
            "A service's load as last sampled (the unit of its configured query, usually requests per second)",
            None,
            self.service_load.clone(),
        );
        add(
            r,
            SERVICE_LATENCY_P99_SECONDS,
            "A service's p99 latency as last sampled",
            Some("seconds"),
            self.service_p99.clone(),
        );
        add(
            r,
            SERVICE_SLO_P99_SECONDS,
            "A service's p99 latency objective, from the configuration",
            Some("seconds"),
            self.service_slo.clone(),
        );
        add(
            r,
            SAMPLE_ERRORS_TOTAL,
            "Sampling attempts that failed: query error, endpoint unreachable, metric missing or unparsable",
            None,
            self.sample_errors.clone(),
        );
        add(
            r,
            SERVICE_TRAINING_CPU_CORES,
            "CPU requested by training workers (bound, not terminating) on the nodes that host the service's \
             bound replicas, as of the last decision",
            Some("cores"),
            self.service_training_cpu.clone(),
        );
        add(r, JOB_MAX_WORKERS, "Ceiling of an elastic job: it is never grown above this", None, self.job_max.clone());
        add(
            r,
            SAMPLE_STALE_AFTER_SECONDS,
            "Age past which a load or latency sample is stale and not used (run.sample_stale_after)",
            Some("seconds"),
            self.sample_stale_after.clone(),
        );
        add(
            r,
            ONLINE_PODS_WAITING,
            "Online pods waiting for a node (not bound, not being deleted) as of the last decision",
            None,
            self.online_waiting.clone(),
        );
        add(
            r,
            ONLINE_WAITING_POD_SECONDS_TOTAL,
            "Seconds online pods have waited for a node, summed over pods (pods waiting at a decision times the \
             time to the next)",
            None,
            self.online_waiting_seconds.clone(),
        );
        add(
            r,
            WRITES_DROPPED_TOTAL,
            "Writes not made because this replica did not lead when they were due, or abandoned past the lease \
             margin, by write (scale|delete|event|annotation|node_status) and cause (not_leader|lease_margin)",
            None,
            self.writes_dropped.clone(),
        );
        self.usage.register(r);
        self
    }

    /// The metrics in the OpenMetrics text format, ending with `# EOF`.
    pub fn encode(&self) -> String {
        for sync in self.before_encode.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            sync(self);
        }
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String does not fail");
        out
    }

    /// The CPU time one decision's thread spent on it ([`DECISION_CPU_SECONDS`]).
    pub fn observe_decision_cpu(&self, cpu: Duration) {
        self.decision_cpu.observe(cpu.as_secs_f64());
    }

    /// Records one decision made on `snap` in `took`: residual capacity per node and cluster,
    /// CPU allocation by class, training CPU on each service's nodes, per-job workers, targets
    /// and bounds, new intents by reason, and the decision duration. Nodes, services and jobs no
    /// longer in the snapshot lose their series. Returns the jobs whose intent is new (not the
    /// same target and reason as in the last decision): the one record of the last intents, which
    /// the decision loop also logs by.
    pub fn observe_decision(&self, decision: &Decision, snap: &Snapshot, took: Duration) -> BTreeSet<String> {
        self.decision_duration.observe(took.as_secs_f64());
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());

        let intents: BTreeMap<String, (u32, Reason)> =
            decision.intents.iter().map(|i| (i.job.clone(), (i.target, i.reason))).collect();
        let mut fresh = BTreeSet::new();
        for (job, (target, reason)) in &intents {
            if seen.intents.get(job) != Some(&(*target, *reason)) {
                self.intents.get_or_create(&[("reason", reason.as_str().to_string())]).inc();
                fresh.insert(job.clone());
            }
        }
        seen.intents = intents;

        let labels = |node: &str, resource: &str, unit: &str| {
            [("node", node.to_string()), ("resource", resource.to_string()), ("unit", unit.to_string())]
        };
        let current: NameMap<&str, ()> = decision.nodes.iter().map(|n| (n.node.as_str(), ())).collect();
        let gone: Vec<String> = seen.nodes.keys().filter(|k| !current.contains_key(k.as_str())).cloned().collect();
        for gone in gone {
            seen.nodes.remove(&gone);
            for (resource, unit, _) in resource_values(&Resources::ZERO) {
                self.node_capacity.remove(&labels(&gone, resource, unit));
            }
        }
        for n in &decision.nodes {
            if !seen.nodes.contains_key(n.node.as_str()) {
                let gauges = resource_values(&Resources::ZERO).map(|(resource, unit, _)| {
                    self.node_capacity.get_or_create(&labels(&n.node, resource, unit)).clone()
                });
                seen.nodes.insert(n.node.clone(), gauges);
            }
            let gauges = &seen.nodes[n.node.as_str()];
            for (gauge, (_, _, v)) in gauges.iter().zip(resource_values(&n.training_room.clamp_non_negative())) {
                gauge.set(v);
            }
        }
        for (resource, unit, v) in resource_values(&decision.training_room()) {
            self.cluster_capacity
                .get_or_create(&[("resource", resource.to_string()), ("unit", unit.to_string())])
                .set(v);
        }

        let alloc = cpu_allocation(snap);
        let allocatable: i64 = snap.nodes.iter().map(|n| n.allocatable.cpu_milli).sum();
        for (class, milli) in CPU_CLASSES.iter().zip(alloc) {
            let label = [("class", class.to_string())];
            self.cpu_cores.get_or_create(&label).set(milli as f64 / 1000.0);
            let ratio = if allocatable > 0 { milli as f64 / allocatable as f64 } else { 0.0 };
            self.cpu_ratio.get_or_create(&label).set(ratio);
        }

        let training_cpu = training_cpu_by_service(snap, &decision.index);
        let services: BTreeSet<String> = training_cpu.keys().cloned().collect();
        for gone in seen.services.difference(&services) {
            self.service_training_cpu.remove(&[("service", gone.clone())]);
        }
        for (service, milli) in training_cpu {
            self.service_training_cpu.get_or_create(&[("service", service)]).set(milli as f64 / 1000.0);
        }
        seen.services = services;

        self.observe_waiting(&mut seen, snap, &decision.index);
        self.usage.observe(decision, snap, &mut seen.usage_nodes);

        let jobs: BTreeSet<String> = snap.jobs.iter().map(|j| j.name.clone()).collect();
        for gone in seen.jobs.difference(&jobs) {
            self.job_workers.remove(&[("job", gone.clone())]);
            self.job_target.remove(&[("job", gone.clone())]);
            self.job_min.remove(&[("job", gone.clone())]);
            self.job_max.remove(&[("job", gone.clone())]);
        }
        // Bound, non-terminating workers per job, in one pass over the pods.
        let mut running = vec![0_i64; snap.jobs.len()];
        for (p, pod) in snap.pods.iter().enumerate() {
            if let (PodClass::Worker { .. }, Some(_), false) = (&pod.class, &pod.node, pod.terminating()) {
                if let Some(j) = decision.index.owner_of(p) {
                    running[j] += 1;
                }
            }
        }
        for (job, &running) in snap.jobs.iter().zip(&running) {
            let target = decision.intents.iter().find(|i| i.job == job.name).map_or(job.target_workers, |i| i.target);
            let label = [("job", job.name.clone())];
            self.job_workers.get_or_create(&label).set(running);
            self.job_target.get_or_create(&label).set(i64::from(target));
            self.job_min.get_or_create(&label).set(i64::from(job.min_workers));
            self.job_max.get_or_create(&label).set(i64::from(job.max_workers));
        }
        seen.jobs = jobs;
        fresh
    }

    /// Online pods waiting for a node, per service, and the pod-seconds they waited since the
    /// last decision (counted at the previous decision's count: a pod that appears and binds
    /// between two decisions is not seen). Every service, configured or with online pods, has a
    /// series from the start.
    fn observe_waiting(&self, seen: &mut Seen, snap: &Snapshot, index: &PodIndex) {
        let mut counts = vec![0_u32; snap.services.len()];
        // Services online pods name that the snapshot has not, by name.
        let mut others: BTreeMap<String, u32> = BTreeMap::new();
        for (p, pod) in snap.pods.iter().enumerate() {
            if let PodClass::Online { service } = &pod.class {
                let waits = u32::from(pod.node.is_none() && !pod.terminating());
                match index.owner_of(p) {
                    Some(s) => counts[s] += waits,
                    None => *others.entry(service.to_string()).or_default() += waits,
                }
            }
        }
        let mut waiting = others;
        for (s, n) in snap.services.iter().zip(counts) {
            *waiting.entry(s.name.clone()).or_default() += n;
        }
        let elapsed = seen.waiting_at.map_or(0.0, |t| snap.now.saturating_sub(t).as_secs_f64());
        for (service, before) in &seen.waiting {
            if !waiting.contains_key(service) {
                self.online_waiting.remove(&[("service", service.clone())]);
                self.online_waiting_seconds.remove(&[("service", service.clone())]);
            } else if *before > 0 {
                self.online_waiting_seconds
                    .get_or_create(&[("service", service.clone())])
                    .inc_by(f64::from(*before) * elapsed);
            }
        }
        for (service, n) in &waiting {
            self.online_waiting.get_or_create(&[("service", service.clone())]).set(i64::from(*n));
            let _ = self.online_waiting_seconds.get_or_create(&[("service", service.clone())]);
        }
        seen.waiting = waiting;
        seen.waiting_at = Some(snap.now);
    }

    /// Counts one scale command sent to a master by its outcome: `None` when it was accepted,
    /// else the kind of error (one of [`ACTUATION_ERROR_KINDS`]).
    pub fn record_actuation(&self, error: Option<&str>) {
        let labels = match error {
            None => [("outcome", "ok".to_string()), ("error", "none".to_string())],
            Some(kind) => [("outcome", "error".to_string()), ("error", kind.to_string())],
        };
        self.actuations.get_or_create(&labels).inc();
    }

    pub fn set_target_utilization(&self, fraction: f64) {
        self.target_utilization.set(fraction);
    }

    /// `controller.usage_memory_margin`, from which each node's memory margin is exported.
    pub fn set_usage_memory_margin(&self, fraction: f64) {
        self.usage.set_memory_margin(fraction);
    }

    /// Counts one write of a node's batch capacity by its outcome (one of
    /// [`NODE_STATUS_WRITE_OUTCOMES`]).
    pub fn record_node_status_write(&self, outcome: &str) {
        self.usage.record_write(outcome);
    }

    /// Age of the newest `source` sample (`load`, `latency`, ...) of `service` when last read.
    pub fn set_sample_age(&self, service: &str, source: &str, age: Duration) {
        self.sample_age
            .get_or_create(&[("service", service.to_string()), ("source", source.to_string())])
            .set(age.as_secs_f64());
    }

    /// The age past which a sample is stale (`run.sample_stale_after`), for the stale alert.
    pub fn set_sample_stale_after(&self, stale_after: Duration) {
        self.sample_stale_after.set(stale_after.as_secs_f64());
    }

    /// Counts a sample of `service` from `source` found too old to use.
    pub fn record_stale_sample(&self, service: &str, source: &str) {
        self.samples_stale.get_or_create(&[("service", service.to_string()), ("source", source.to_string())]).inc();
    }

    /// Drops the sample series of a service that no longer exists.
    pub fn forget_service(&self, service: &str, source: &str) {
        let labels = [("service", service.to_string()), ("source", source.to_string())];
        self.sample_age.remove(&labels);
        self.samples_stale.remove(&labels);
    }

    /// Counts one restart of the watch of `kind` (one of [`WATCH_KINDS`]).
    pub fn record_watch_restart(&self, kind: &str) {
        self.watch_restarts.get_or_create(&[("kind", kind.to_string())]).inc();
    }

    /// Runs `sync` before every encoding, so that counts kept by parts that do not hold the
    /// metrics (the reflectors' restart counts) are current whenever they are scraped, with
    /// nothing copying them in between.
    pub fn sync_before_encode(&self, sync: impl Fn(&Metrics) + Send + Sync + 'static) {
        self.before_encode.lock().unwrap_or_else(|e| e.into_inner()).push(Box::new(sync));
    }

    /// Brings the restart counter of `kind` up to the reflector's own count, `total` (from a
    /// [`Metrics::sync_before_encode`] function).
    pub fn sync_watch_restarts(&self, kind: &str, total: u64) {
        let counter = self.watch_restarts.get_or_create(&[("kind", kind.to_string())]);
        let have = counter.get();
        if total > have {
            counter.inc_by(total - have);
        }
    }

    /// Creates a job's counters at 0 when it is first discovered, so that `increase()` in
    /// alerts sees its first forced preemption.
    pub fn job_discovered(&self, job: &str) {
        let _ = self.forced.get_or_create(&[("job", job.to_string())]);
    }

    /// Creates a service source's counters at 0 (same reason).
    pub fn source_configured(&self, service: &str, source: &str) {
        let labels = [("service", service.to_string()), ("source", source.to_string())];
        let _ = self.samples_stale.get_or_create(&labels);
        let _ = self.sample_errors.get_or_create(&labels);
    }

    /// Whether `job`'s master answered its last status request.
    pub fn set_master_up(&self, job: &str, up: bool) {
        self.master_up.get_or_create(&[("job", job.to_string())]).set(i64::from(up));
    }

    /// Drops the series of a job that is no longer discovered.
    pub fn forget_job(&self, job: &str) {
        self.master_up.remove(&[("job", job.to_string())]);
        self.forced.remove(&[("job", job.to_string())]);
    }

    /// Counts `pods` worker pods of `job` deleted by the controller past a deadline.
    pub fn record_forced_preemptions(&self, job: &str, pods: u64) {
        self.forced.get_or_create(&[("job", job.to_string())]).inc_by(pods);
    }

    /// Counts a `write` the lease gate dropped, for `cause`.
    pub fn record_write_dropped(&self, write: &str, cause: &str) {
        self.writes_dropped.get_or_create(&[("write", write.to_string()), ("cause", cause.to_string())]).inc();
    }

    pub fn record_decision(&self) {
        self.decisions.inc();
    }

    /// The last sampled load and p99 of `service`, and its SLO; `None` removes the series (no
    /// such source, or the sample is stale).
    pub fn set_service_reading(&self, service: &str, load: Option<f64>, p99: Option<Duration>, slo: Option<Duration>) {
        let label = [("service", service.to_string())];
        match load {
            Some(v) => {
                self.service_load.get_or_create(&label).set(v);
            }
            None => {
                self.service_load.remove(&label);
            }
        }
        match p99 {
            Some(v) => {
                self.service_p99.get_or_create(&label).set(v.as_secs_f64());
            }
            None => {
                self.service_p99.remove(&label);
            }
        }
        match slo {
            Some(v) => {
                self.service_slo.get_or_create(&label).set(v.as_secs_f64());
            }
            None => {
                self.service_slo.remove(&label);
            }
        }
    }

    /// Counts one failed sampling attempt of `service` from `source` (`load`, `latency`).
    pub fn record_sample_error(&self, service: &str, source: &str) {
        self.sample_errors.get_or_create(&[("service", service.to_string()), ("source", source.to_string())]).inc();
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    pub fn set_reflectors_ready(&self, ready: bool) {
        self.reflectors_ready.set(i64::from(ready));
    }
}

/// CPU millicores by [`CPU_CLASSES`]: requests of pods bound to a node (terminating pods still
/// hold theirs), masters counted as training; idle is what is left of allocatable.
fn cpu_allocation(snap: &Snapshot) -> [i64; 4] {
    let (mut system, mut online, mut training) = (0, 0, 0);
    for pod in snap.pods.iter().filter(|p| p.node.is_some()) {
        let slot = match pod.class {
            PodClass::System => &mut system,
            PodClass::Online { .. } => &mut online,
            PodClass::Worker { .. } | PodClass::Master { .. } => &mut training,
        };
        *slot += pod.requests.cpu_milli;
    }
    let allocatable: i64 = snap.nodes.iter().map(|n| n.allocatable.cpu_milli).sum();
    [system, online, training, (allocatable - system - online - training).max(0)]
}

/// Per service (every service of the snapshot, and any a bound online pod belongs to): CPU
/// millicores requested by bound, non-terminating workers on the nodes that host the service's
/// bound pods, each node counted once. Masters are left out: the latency guard shrinks workers.
/// Nodes are the snapshot's (those colocate manages), found by the decision's pod index: at
/// 1,000 nodes a lookup by name per pod took longer than the decision itself.
fn training_cpu_by_service(snap: &Snapshot, index: &PodIndex) -> BTreeMap<String, i64> {
    let mut workers_on = vec![0_i64; snap.nodes.len()];
    let mut nodes_of: Vec<Vec<usize>> = vec![Vec::new(); snap.services.len()];
    // Services bound online pods name that the snapshot has not, by name.
    let mut others: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (p, pod) in snap.pods.iter().enumerate() {
        let Some(n) = index.node_of(p) else { continue };
        match &pod.class {
            PodClass::Online { service } => match index.owner_of(p) {
                Some(s) => nodes_of[s].push(n),
                None => others.entry(service.to_string()).or_default().push(n),
            },
            PodClass::Worker { .. } if !pod.terminating() => workers_on[n] += pod.requests.cpu_milli,
            _ => {}
        }
    }
    let named = snap.services.iter().map(|s| s.name.clone()).zip(nodes_of);
    named
        .chain(others)
        .map(|(service, mut nodes)| {
            nodes.sort_unstable();
            nodes.dedup();
            (service, nodes.iter().map(|&n| workers_on[n]).sum())
        })
        .collect()
}
