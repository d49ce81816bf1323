//! Metric names, exactly as they appear in `/metrics`, and the label values and buckets they use.

/// Residual capacity for training per node (after online reservations and the margin), labels
/// `node`, `resource` (cpu|memory|gpu) and `unit` (core|byte|device).
pub const NODE_RESIDUAL_CAPACITY: &str = "colocate_node_residual_capacity";
/// The same summed over nodes, labels `resource` and `unit`.
pub const CLUSTER_RESIDUAL_CAPACITY: &str = "colocate_cluster_residual_capacity";
/// CPU requests bound to nodes by class (system|online|training|idle), in cores.
pub const CPU_ALLOCATION_CORES: &str = "colocate_cpu_allocation_cores";
/// The same as a fraction of the cluster's allocatable CPU.
pub const CPU_ALLOCATION_RATIO: &str = "colocate_cpu_allocation_ratio";
/// Configured target CPU allocation (fraction of allocatable).
pub const TARGET_UTILIZATION_RATIO: &str = "colocate_target_utilization_ratio";
/// Workers of a job bound to nodes and not terminating, label `job`.
pub const JOB_WORKERS: &str = "colocate_job_workers";
/// Worker count the controller steers a job to, label `job`.
pub const JOB_TARGET_WORKERS: &str = "colocate_job_target_workers";
/// Scale intents decided, label `reason` ([`Reason::as_str`]); an intent repeated decision
/// after decision (same job, target and reason) is counted once.
pub const INTENTS_TOTAL: &str = "colocate_intents_total";
/// Scale commands sent to masters, labels `outcome` (ok|error) and `error`
/// ([`MasterError::kind`], `none` for ok).
pub const ACTUATIONS_TOTAL: &str = "colocate_actuations_total";
/// Age of the newest sample per `service` and `source` (for example `load`, `latency`).
pub const SAMPLE_AGE_SECONDS: &str = "colocate_sample_age_seconds";
/// Samples found too old to use, labels `service` and `source`.
pub const SAMPLES_STALE_TOTAL: &str = "colocate_samples_stale_total";
/// Time one decision took (snapshot in, intents out); a histogram.
pub const DECISION_DURATION_SECONDS: &str = "colocate_decision_duration_seconds";
/// CPU time the deciding thread spent on one decision; a histogram on the same buckets. Below
/// [`DECISION_DURATION_SECONDS`] by the time the decision waited for a CPU or for the cluster
/// state's lock: where the two part, the machine is busy, not the controller.
pub const DECISION_CPU_SECONDS: &str = "colocate_decision_cpu_seconds";
/// Watch failures after which a reflector restarted, label `kind` ([`WATCH_KINDS`]).
pub const WATCH_RESTARTS_TOTAL: &str = "colocate_watch_restarts_total";
/// 1 while this replica holds the leader lease, else 0.
pub const LEADER: &str = "colocate_leader";
/// 1 once every reflector has listed its objects, else 0.
pub const REFLECTORS_READY: &str = "colocate_reflectors_ready";
/// Floor of an elastic job (`workers.min`, or its override), label `job`.
pub const JOB_MIN_WORKERS: &str = "colocate_job_min_workers";
/// 1 while a job's master (or adapter) answered its last status request, else 0, label `job`.
pub const JOB_MASTER_UP: &str = "colocate_job_master_up";
/// Worker pods the controller deleted itself because a master missed a shrink deadline,
/// label `job`.
pub const FORCED_PREEMPTIONS_TOTAL: &str = "colocate_forced_preemptions_total";
/// Writes the lease gate dropped, labels `write` (scale|delete|event|annotation|node_status) and `cause`
/// (not_leader: this replica did not lead when the write was due; lease_margin: abandoned as it
/// would have outlasted the margin in which no other replica can lead).
pub const WRITES_DROPPED_TOTAL: &str = "colocate_writes_dropped_total";
/// Values of [`WRITES_DROPPED_TOTAL`]'s `write` and `cause` labels; every pair starts at 0.
pub const WRITE_KINDS: [&str; 5] = ["scale", "delete", "event", "annotation", "node_status"];

/// Label `kind` of the watch metrics: the resources the controller watches, in the order
/// `live::watch` counts their restarts.
pub const WATCH_KINDS: [&str; 4] = ["nodes", "pods", "horizontalpodautoscalers", "services"];

/// Label `kind` of the watch metrics for the adapters' job watches (Deployments, StatefulSets,
/// PyTorchJobs, Volcano Jobs labelled elastic), all together.
pub const ADAPTER_JOBS_WATCH_KIND: &str = "adapter_jobs";
pub const WRITE_DROP_CAUSES: [&str; 2] = ["not_leader", "lease_margin"];
/// Decisions made (one per debounced watch event or tick, leader or not).
pub const DECISIONS_TOTAL: &str = "colocate_decisions_total";
/// A service's load as last sampled (requests per second, or whatever its query measures),
/// label `service`.
pub const SERVICE_LOAD: &str = "colocate_service_load";
/// A service's p99 latency as last sampled, label `service`.
pub const SERVICE_LATENCY_P99_SECONDS: &str = "colocate_service_latency_p99_seconds";
/// A service's configured p99 latency objective, label `service`.
pub const SERVICE_SLO_P99_SECONDS: &str = "colocate_service_slo_p99_seconds";
/// Sampling attempts that failed (query error, unreachable endpoint, unparsable or missing
/// metric), labels `service` and `source`.
pub const SAMPLE_ERRORS_TOTAL: &str = "colocate_sample_errors_total";

/// CPU requests of the training workers (bound, not terminating) on the nodes that host a
/// service's bound replicas, in cores, label `service`: what the latency guard can take back.
pub const SERVICE_TRAINING_CPU_CORES: &str = "colocate_service_training_cpu_cores";
/// Ceiling of an elastic job (`workers.max`, or its override), label `job`.
pub const JOB_MAX_WORKERS: &str = "colocate_job_max_workers";
/// Age past which a sample is stale (`run.sample_stale_after`).
pub const SAMPLE_STALE_AFTER_SECONDS: &str = "colocate_sample_stale_after_seconds";
/// Online pods waiting for a node (not bound, not being deleted) as of the last decision,
/// label `service`: the promise broken, or about to be.
pub const ONLINE_PODS_WAITING: &str = "colocate_online_pods_waiting";
/// Seconds online pods have waited for a node, summed over pods, label `service`: each
/// decision adds the pods waiting at the previous one times the time between them.
pub const ONLINE_WAITING_POD_SECONDS_TOTAL: &str = "colocate_online_waiting_pod_seconds_total";

/// `capacity: usage`: writes of a node's batch capacity to its status, label `outcome`
/// ([`NODE_STATUS_WRITE_OUTCOMES`]).
pub const NODE_STATUS_WRITES_TOTAL: &str = "colocate_node_status_writes_total";
/// Values of [`NODE_STATUS_WRITES_TOTAL`]'s `outcome` label; each starts at 0.
pub const NODE_STATUS_WRITE_OUTCOMES: [&str; 4] = ["written", "failed", "not_found", "not_leader"];
/// `capacity: usage`: CPU used by pods bound to nodes by class (system|online|training|idle), in
/// cores; a pod whose usage is not known counts at its request.
pub const CPU_USAGE_CORES: &str = "colocate_cpu_usage_cores";
/// The same as a fraction of the cluster's allocatable CPU: utilization, beside
/// [`CPU_ALLOCATION_RATIO`].
pub const CPU_USAGE_RATIO: &str = "colocate_cpu_usage_ratio";
/// `capacity: usage`: CPU used by a node's pods, in cores, label `node`.
pub const NODE_CPU_USAGE_CORES: &str = "colocate_node_cpu_usage_cores";
/// `capacity: usage`: CPU requested by a node's pods, in cores, label `node`.
pub const NODE_CPU_ALLOCATION_CORES: &str = "colocate_node_cpu_allocation_cores";
/// `capacity: usage`: batch capacity a node carries, labels `node`, `resource` (cpu|memory) and
/// `unit` (core|byte).
pub const NODE_BATCH_CAPACITY: &str = "colocate_node_batch_capacity";
/// `capacity: usage`: batch capacity the last decision wants a node to carry, same labels.
pub const NODE_BATCH_TARGET: &str = "colocate_node_batch_target";
/// `capacity: usage`: batch resources requested by a node's workers, same labels.
pub const NODE_BATCH_USED: &str = "colocate_node_batch_used";
/// `capacity: usage`: memory kept out of a node's batch capacity, label `node`.
pub const NODE_BATCH_MEMORY_MARGIN_BYTES: &str = "colocate_node_batch_memory_margin_bytes";

/// Every metric name, in the order of `/metrics`.
pub const ALL: [&str; 38] = [
    NODE_RESIDUAL_CAPACITY,
    CLUSTER_RESIDUAL_CAPACITY,
    CPU_ALLOCATION_CORES,
    CPU_ALLOCATION_RATIO,
    TARGET_UTILIZATION_RATIO,
    JOB_WORKERS,
    JOB_TARGET_WORKERS,
    INTENTS_TOTAL,
    ACTUATIONS_TOTAL,
    SAMPLE_AGE_SECONDS,
    SAMPLES_STALE_TOTAL,
    DECISION_DURATION_SECONDS,
    DECISION_CPU_SECONDS,
    WATCH_RESTARTS_TOTAL,
    LEADER,
    REFLECTORS_READY,
    JOB_MIN_WORKERS,
    JOB_MASTER_UP,
    FORCED_PREEMPTIONS_TOTAL,
    DECISIONS_TOTAL,
    SERVICE_LOAD,
    SERVICE_LATENCY_P99_SECONDS,
    SERVICE_SLO_P99_SECONDS,
    SAMPLE_ERRORS_TOTAL,
    SERVICE_TRAINING_CPU_CORES,
    JOB_MAX_WORKERS,
    SAMPLE_STALE_AFTER_SECONDS,
    ONLINE_PODS_WAITING,
    ONLINE_WAITING_POD_SECONDS_TOTAL,
    NODE_STATUS_WRITES_TOTAL,
    CPU_USAGE_CORES,
    CPU_USAGE_RATIO,
    NODE_CPU_USAGE_CORES,
    NODE_CPU_ALLOCATION_CORES,
    NODE_BATCH_CAPACITY,
    NODE_BATCH_TARGET,
    NODE_BATCH_USED,
    NODE_BATCH_MEMORY_MARGIN_BYTES,
];

/// Values of the `error` label of [`ACTUATIONS_TOTAL`]: `none` for ok, else
/// [`MasterError::kind`]. Every kind is exported at 0 from the start so alerts see the series.
pub const ACTUATION_ERROR_KINDS: [&str; 8] = [
    "unreachable",
    "timeout",
    "transport",
    "unauthorized",
    "out_of_bounds",
    "rejected",
    "server_error",
    "bad_response",
];

/// Values of the `class` label of the CPU allocation metrics.
pub const CPU_CLASSES: [&str; 4] = ["system", "online", "training", "idle"];

/// Upper bounds of the decision duration (and CPU time) buckets, in seconds: 100 µs to 5 s. A
/// decision takes milliseconds: under 8 ms of CPU at p99 on 1,000 nodes / 30,000 pods, and 25-36
/// ms of wall time on a 2-core machine that also runs the control plane (`tests/scale.rs`,
/// docs/results.md), so the buckets are finest from 5 to 50 ms, where a p99 estimated from them
/// is read against a 20 ms goal; the buckets above 1 s keep a p99 past the 1 s alert readable.
pub const DECISION_BUCKETS: [f64; 20] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0,
];
