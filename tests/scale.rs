//! The scale test: `colocate run` on a real control plane with many kwok nodes and pods (1,000
//! and 30,000 in the full run). It reports, and does not assert, how long the reflectors take to
//! sync, the controller's resident memory, how long its decisions take, how fast it reacts to an
//! HPA scale-up, and how many requests it sends to the apiserver (counted in the apiserver's audit
//! log, which records only the controller's ServiceAccount). It asserts what the controller must
//! do at any size: sync, see every node, job and pod, grow the jobs into idle room, and shrink
//! them when HPAs scale up.
//!
//! Cluster (see `scale/population.rs`): nodes of 16 CPU; per node two system pods, online pods of
//! 10 NGINX-like services (Deployments with HPAs; the bulk of their pods is created directly,
//! already bound) sized to leave 1.3 CPU, and about one 1-CPU worker of the elastic jobs (15 at
//! 1,000 nodes) behind reference masters. Workers and the spike's NGINX pods are real Deployment
//! pods (kube-controller-manager's Deployment and ReplicaSet controllers, the scheduler).
//!
//! ```sh
//! cargo test --release --test scale -- --nocapture                  # 100 nodes, 3,000 pods (CI)
//! cargo test --release --test scale -- --ignored --nocapture        # 1,000 nodes, 30,000 pods
//! COLOCATE_SCALE_NODES=500 COLOCATE_SCALE_PODS=15000 COLOCATE_SCALE_SOAK_SECS=60 \
//!   cargo test --release --test scale -- --ignored --nocapture
//! ```
//! The report is printed and written to `target/test-reports/scale.json` (`scale-small.json` for
//! the CI size); docs/results.md has the figures of a full run.

#[path = "scale/measure.rs"]
mod measure;
#[path = "scale/population.rs"]
mod population;
mod support;
#[path = "scale/usage.rs"]
mod usage;

use std::time::{Duration, Instant};

use measure::{AuditLog, Histogram, Memory};
use population::{Layout, CONTROLLER_USER, JOBS_NAMESPACE, SERVICES, SPIKED_SERVICES};
use serde_json::{json, Value};
use support::cluster::{self, pod_counts, Announce, Behaviour, Controller, ElasticJob, WorkerPod};
use support::testbed::Testbed;

/// Grow windows shortened from the defaults (60 s) so the jobs fill the room in minutes; every
/// other setting is the default (tick 10 s, debounce 50 ms, status polls every 5 s).
const CONFIG: &str = "controller:\n  grow_stabilization: 10s\n";
/// kube-controller-manager runs only what the test needs: Deployments get ReplicaSets and pods,
/// namespaces get their `default` ServiceAccount. The HPAs' status is written by the test.
const KCM_CONTROLLERS: &str = "deployment-controller,replicaset-controller,serviceaccount-controller";
const DECISION_HISTOGRAM: &str = "colocate_decision_duration_seconds";
/// The deciding thread's CPU time per decision: where it parts from the duration, the decision
/// waited for a CPU (the test bed shares the machine) or for the cluster state's lock.
const DECISION_CPU_HISTOGRAM: &str = "colocate_decision_cpu_seconds";

/// What training is given (`controller.capacity`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Requests,
    /// Pods' usage from a real Prometheus (a cAdvisor stand-in), BestEffort workers, nodes'
    /// batch capacity written on their status.
    Usage,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_cluster_same_path_as_the_full_run() {
    run(Layout::new(100, 3_000), Duration::from_secs(20), "scale-small.json", Mode::Requests).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_cluster_in_usage_mode() {
    run(Layout::new(100, 3_000), Duration::from_secs(30), "scale-small-usage.json", Mode::Usage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "takes about 10 minutes: run with --ignored (COLOCATE_SCALE_NODES/_PODS/_SOAK_SECS to resize)"]
async fn full_1000_nodes_30000_pods_in_usage_mode() {
    let (layout, soak) = full_size();
    run(layout, soak, "scale-usage.json", Mode::Usage).await;
}

/// 1,000 nodes and 30,000 pods, a 180 s soak, unless the environment says otherwise.
fn full_size() -> (Layout, Duration) {
    let env = |name: &str, default: u64| {
        std::env::var(name).ok().map_or(default, |v| v.parse().unwrap_or_else(|_| panic!("{name}={v}: not a number")))
    };
    let layout = Layout::new(env("COLOCATE_SCALE_NODES", 1_000) as usize, env("COLOCATE_SCALE_PODS", 30_000) as usize);
    (layout, Duration::from_secs(env("COLOCATE_SCALE_SOAK_SECS", 180)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "takes about 10 minutes: run with --ignored (COLOCATE_SCALE_NODES/_PODS/_SOAK_SECS to resize)"]
async fn full_1000_nodes_30000_pods() {
    let (layout, soak) = full_size();
    run(layout, soak, "scale.json", Mode::Requests).await;
}

async fn run(layout: Layout, soak: Duration, report_name: &str, mode: Mode) {
    let started = Instant::now();
    let machine_before = measure::machine();
    let policy = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(policy.path(), AuditLog::policy(CONTROLLER_USER)).unwrap();
    let policy_path = policy.path().to_string_lossy().into_owned();
    let bed = tokio::task::spawn_blocking(move || {
        Testbed::start_with(&[
            ("TESTBED_WITH_KCM", "1"),
            ("TESTBED_KCM_CONTROLLERS", KCM_CONTROLLERS),
            ("TESTBED_APISERVER_AUDIT_POLICY", &policy_path),
        ])
    })
    .await
    .unwrap();
    let dir = bed.dir().expect("the scale test needs a test bed it starts (not COLOCATE_TEST_KUBECONFIG)").to_owned();
    let client = cluster::client(&bed).await;

    // ---- the cluster -------------------------------------------------------------------------
    let t0 = Instant::now();
    let pod_create = population::populate(&bed, &client, &layout).await;
    let jobs: Vec<ElasticJob> = {
        let mut jobs = Vec::new();
        for j in 0..layout.jobs {
            let bounds = (1, layout.job_max_workers, 2);
            let name = population::job_name(j);
            let worker = WorkerPod { best_effort: mode == Mode::Usage, ..WorkerPod::one_cpu(None) };
            let job = ElasticJob::start_with(
                &bed,
                &client,
                JOBS_NAMESPACE,
                &name,
                bounds,
                Behaviour::Honest,
                worker,
                Announce::Service,
            )
            .await;
            jobs.push(job);
        }
        jobs
    };
    // In usage mode workers wait for the batch capacity the controller will publish.
    let skip = (mode == Mode::Usage).then_some(JOBS_NAMESPACE);
    let running = population::wait_all_running(&client, Duration::from_secs(1200), skip).await;
    let populated = t0.elapsed();
    eprintln!("scale: cluster populated in {:.0} s", populated.as_secs_f64());

    // ---- sync ---------------------------------------------------------------------------------
    let audit = AuditLog::new(&dir, CONTROLLER_USER);
    let kubeconfig = population::controller_kubeconfig(&bed, &dir);
    let usage_dir = tempfile::tempdir().unwrap();
    let usage_source = match mode {
        Mode::Requests => None,
        Mode::Usage => Some(usage::start(usage_dir.path(), &client).await),
    };
    let config = match &usage_source {
        Some(u) => usage::config(CONFIG, &u.prometheus.url()),
        None => CONFIG.to_string(),
    };
    let spawned = Instant::now();
    let controller = Controller::spawn(&kubeconfig, &config, &[]);
    controller.wait_ready(Duration::from_secs(900)).await;
    let sync = spawned.elapsed();
    let pid = controller.pid().expect("colocate run is running");
    let mem_synced = Memory::of(pid);
    let cpu_synced = measure::cpu_seconds(pid);
    let ready_at = Instant::now();
    let m = controller.metrics().await;
    let (h_ready, c_ready) = (Histogram::parse(&m, DECISION_HISTOGRAM), Histogram::parse(&m, DECISION_CPU_HISTOGRAM));
    let (requests_synced, _) = audit.read();
    eprintln!("scale: reflectors synced in {:.2} s", sync.as_secs_f64());

    // ---- fill: the jobs grow into the idle room ------------------------------------------------
    let (workers_filled, filled) = wait_for_jobs_to_settle(&controller, Duration::from_secs(900)).await;
    let fill = ready_at.elapsed();
    let m = controller.metrics().await;
    let online_seen = cluster::metric_value(&m, "colocate_cpu_allocation_cores{class=\"online\"}");
    let system_seen = cluster::metric_value(&m, "colocate_cpu_allocation_cores{class=\"system\"}");
    let mem_filled = Memory::of(pid);
    let cpu_filled = measure::cpu_seconds(pid);
    let (h_filled, c_filled) = (Histogram::parse(&m, DECISION_HISTOGRAM), Histogram::parse(&m, DECISION_CPU_HISTOGRAM));
    let (requests_filled, _) = audit.read();
    eprintln!("scale: jobs settled at {workers_filled} workers {:.0} s after sync", fill.as_secs_f64());

    // ---- soak: nothing changes but kwok's heartbeats --------------------------------------------
    let apiserver_before = tokio::task::block_in_place(|| measure::apiserver_requests_by_verb(&bed));
    let soak_start = Instant::now();
    tokio::time::sleep(soak).await;
    let apiserver_after = tokio::task::block_in_place(|| measure::apiserver_requests_by_verb(&bed));
    let soak_secs = soak_start.elapsed().as_secs_f64();
    let mem_soaked = Memory::of(pid);
    let cpu_soaked = measure::cpu_seconds(pid);
    let m = controller.metrics().await;
    let (h_soaked, c_soaked) = (Histogram::parse(&m, DECISION_HISTOGRAM), Histogram::parse(&m, DECISION_CPU_HISTOGRAM));
    let (requests_soaked, _) = audit.read();

    // ---- spike: three HPAs decide 10% more replicas ---------------------------------------------
    let spike = spike(&client, &layout, &jobs, mode == Mode::Requests).await;
    let (workers_after_spike, _) = wait_for_jobs_to_settle(&controller, Duration::from_secs(300)).await;
    let m = controller.metrics().await;
    let mem_end = Memory::of(pid);
    let cpu_end = measure::cpu_seconds(pid);
    let (h_end, c_end) = (Histogram::parse(&m, DECISION_HISTOGRAM), Histogram::parse(&m, DECISION_CPU_HISTOGRAM));
    let (requests_end, errors) = audit.read();
    let spike_secs = soak_start.elapsed().as_secs_f64() - soak_secs;

    // ---- what the controller must have done, at any size ----------------------------------------
    let nodes_seen = m
        .lines()
        .filter(|l| l.starts_with("colocate_node_residual_capacity{") && l.contains("resource=\"cpu\""))
        .count();
    let jobs_up = m.lines().filter(|l| l.starts_with("colocate_job_master_up{") && l.ends_with(" 1")).count();
    let decisions = cluster::metric_value(&m, "colocate_decisions_total");
    let grows = cluster::metric_value(&m, "colocate_intents_total{reason=\"grow\"}");
    let shrinks = cluster::metric_value(&m, "colocate_intents_total{reason=\"online-headroom\"}");
    let nodes_carrying_batch = usage::nodes_carrying_batch(&client).await;
    let rates = [
        ("sync", measure::request_rates(&requests_synced, sync.as_secs_f64())),
        ("fill", measure::request_rates(&requests_filled[requests_synced.len()..], fill.as_secs_f64())),
        ("soak", measure::request_rates(&requests_soaked[requests_filled.len()..], soak_secs)),
        ("spike", measure::request_rates(&requests_end[requests_soaked.len()..], spike_secs)),
    ];
    let node_status_writes: serde_json::Map<String, Value> =
        rates.iter().map(|(phase, r)| (phase.to_string(), json!(usage::node_status_writes(r)))).collect();
    let report = json!({
        "capacity": if mode == Mode::Usage { "usage" } else { "requests" },
        "layout": {
            "nodes": layout.nodes, "pods_asked": layout.pods, "system_pods": layout.system_pods(),
            "online_pods": layout.online_pods(), "online_pod_cpu": layout.online_cpu(), "services": SERVICES,
            "jobs": layout.jobs, "job_max_workers": layout.job_max_workers,
            "worker_pods_after_fill": workers_filled, "worker_pods_after_spike": workers_after_spike,
            "pods_total_after_spike": layout.system_pods() + layout.online_pods() + spike.pods + workers_after_spike as usize,
        },
        "machine": {"before": machine_before, "after": measure::machine()},
        "populate_seconds": {"all": r1(populated), "pods_created": r1(pod_create),
            "pods_per_second": measure::round((layout.system_pods() + layout.online_pods()) as f64 / pod_create.as_secs_f64(), 0),
            "until_kwok_ran_every_pod": r1(running)},
        "sync_seconds": measure::round(sync.as_secs_f64(), 2),
        "fill": {"seconds": r1(fill), "settled": filled},
        "controller_memory": {"after_sync": mem_synced.json(), "after_fill": mem_filled.json(),
            "after_soak": mem_soaked.json(), "at_end": mem_end.json(),
            "minutes_since_start_at_end": measure::round(spawned.elapsed().as_secs_f64() / 60.0, 1)},
        "controller_cpu": {"sync": measure::cpu_use(cpu_synced, sync.as_secs_f64()),
            "fill": measure::cpu_use(cpu_filled - cpu_synced, fill.as_secs_f64()),
            "soak": measure::cpu_use(cpu_soaked - cpu_filled, soak_secs),
            "spike": measure::cpu_use(cpu_end - cpu_soaked, spike_secs)},
        "decision_latency": {"fill": h_filled.since(&h_ready).summary(), "soak": h_soaked.since(&h_filled).summary(),
            "spike": h_end.since(&h_soaked).summary(), "all": h_end.summary()},
        "decision_cpu": {"fill": c_filled.since(&c_ready).summary(), "soak": c_soaked.since(&c_filled).summary(),
            "spike": c_end.since(&c_soaked).summary(), "all": c_end.summary()},
        "spike": spike.json,
        "controller_requests": {
            "sync": rates[0].1, "fill": rates[1].1, "soak": rates[2].1, "spike": rates[3].1,
            "error_answers": errors,
        },
        "node_status_writes_per_second": node_status_writes,
        "nodes_carrying_batch_capacity": nodes_carrying_batch,
        "apiserver_requests_during_soak_all_clients": measure::rates_between(&apiserver_before, &apiserver_after, soak_secs),
        "component_memory_at_end": measure::component_memory(&bed),
        "controller_metrics": {"decisions": decisions, "grow_intents": grows, "online_headroom_intents": shrinks,
            "nodes_seen": nodes_seen, "jobs_up": jobs_up, "system_cpu_cores": system_seen, "online_cpu_cores": online_seen,
            "forced_preemptions": sum_series(&m, "colocate_forced_preemptions_total{")},
        "wall_seconds": r1(started.elapsed()),
    });
    let report = with_headline(report);
    let text = serde_json::to_string_pretty(&report).unwrap();
    let path = cluster::report_dir().join(report_name);
    std::fs::write(&path, &text).unwrap();
    eprintln!("scale report ({}):\n{text}\n{}", path.display(), summary(&report));
    let log = cluster::report_dir().join(report_name.replace(".json", "-colocate-run.log"));
    std::fs::write(&log, controller.logs()).unwrap();
    eprintln!("colocate run's log: {}", log.display());

    assert!(decisions >= 1.0, "the controller made no decision");
    assert_eq!(nodes_seen, layout.nodes, "the controller's last decision did not cover every node");
    assert_eq!(jobs_up, layout.jobs, "not every job's master is up in the controller's metrics");
    let close = |a: f64, b: f64| (a - b).abs() < 0.01;
    assert!(
        close(system_seen, layout.system_cpu_cores()),
        "system CPU seen {system_seen}, created {}",
        layout.system_cpu_cores()
    );
    assert!(
        close(online_seen, layout.online_cpu_cores()),
        "online CPU seen {online_seen}, created {}",
        layout.online_cpu_cores()
    );
    assert!(grows >= 1.0 && workers_filled > 2 * layout.jobs as u64, "the jobs did not grow: {workers_filled} workers");
    match mode {
        Mode::Requests => {
            assert!(shrinks >= 1.0, "no online-headroom intent after three HPAs decided 10% more replicas");
            assert_eq!(nodes_carrying_batch, 0, "requests mode published batch capacity");
        }
        // Workers hold no `cpu` requests: the spike's pods fit without a shrink; what must hold
        // is that every node carries its batch capacity, and that it is not rewritten at every
        // decision while usage only wobbles.
        Mode::Usage => {
            assert_eq!(nodes_carrying_batch, layout.nodes, "not every node carries its batch capacity");
            let soak_writes = usage::node_status_writes(&rates[2].1);
            assert!(
                soak_writes * soak_secs < layout.nodes as f64 * soak_secs / 10.0,
                "node status rewritten {soak_writes}/s while only usage wobbled ({} nodes)",
                layout.nodes
            );
        }
    }
}

/// The report with its headline figures (those docs/results.md publishes) at its top level,
/// each read from where the report has it: nodes and pods after the spike, the controller's RSS
/// after sync and at the end, decision latency while watch events drive decisions (the spike
/// phase), and the time from the HPA write to the first command (one spike, so one sample: its
/// median is itself).
fn with_headline(mut report: Value) -> Value {
    let f = |pointer: &str| report.pointer(pointer).cloned().unwrap_or(Value::Null);
    let headline = json!({
        "nodes": f("/layout/nodes"),
        "pods": f("/layout/pods_total_after_spike"),
        "rss_mib_after_sync": f("/controller_memory/after_sync/rss_mib"),
        "rss_mib_end": f("/controller_memory/at_end/rss_mib"),
        "decision_ms_p50": f("/decision_latency/spike/p50_ms"),
        "decision_ms_p99": f("/decision_latency/spike/p99_ms"),
        "decision_cpu_ms_p99": f("/decision_cpu/spike/p99_ms"),
        "event_to_command_ms_p50": f("/spike/first_shrink_command_ms_after_hpa_write"),
        "event_to_command_samples": 1,
    });
    if let (Some(r), Value::Object(h)) = (report.as_object_mut(), headline) {
        r.extend(h);
    }
    report
}

/// The headline figures of a report, one per line.
fn summary(r: &Value) -> String {
    let f = |pointer: &str| r.pointer(pointer).cloned().unwrap_or(Value::Null);
    let latency = |histogram: &str, phase: &str| {
        format!(
            "{phase} p50 {} ms, p99 {} ms (n={})",
            f(&format!("/{histogram}/{phase}/p50_ms")),
            f(&format!("/{histogram}/{phase}/p99_ms")),
            f(&format!("/{histogram}/{phase}/count"))
        )
    };
    [
        format!(
            "cluster:        {} nodes, {} pods after the spike",
            f("/layout/nodes"),
            f("/layout/pods_total_after_spike")
        ),
        format!("sync:           {} s from process start to /readyz 200", f("/sync_seconds")),
        format!(
            "memory, CPU:    RSS {} MiB after sync, {} MiB at end ({} min), peak {} MiB; {} cores busy idle, {} in the spike",
            f("/controller_memory/after_sync/rss_mib"),
            f("/controller_memory/at_end/rss_mib"),
            f("/controller_memory/minutes_since_start_at_end"),
            f("/controller_memory/at_end/hwm_mib"),
            f("/controller_cpu/soak/cores"),
            f("/controller_cpu/spike/cores")
        ),
        format!("decisions:      {}; {}", latency("decision_latency", "soak"), latency("decision_latency", "spike")),
        format!("decision CPU:   {}; {}", latency("decision_cpu", "soak"), latency("decision_cpu", "spike")),
        format!(
            "reaction:       first shrink command {} ms after the HPA write",
            f("/spike/first_shrink_command_ms_after_hpa_write")
        ),
        format!(
            "requests:       {} req/s idle, {} req/s during the spike (all clients idle: {} req/s)",
            f("/controller_requests/soak/per_second"),
            f("/controller_requests/spike/per_second"),
            f("/apiserver_requests_during_soak_all_clients/per_second")
        ),
    ]
    .join("\n")
}

/// Polls the controller's metrics every 2 s until every job has as many bound workers as the
/// controller steers it to and that number has not moved for 30 s (longer than the grow window);
/// returns the workers and whether that happened before `timeout` (a report, not a failure).
async fn wait_for_jobs_to_settle(controller: &Controller, timeout: Duration) -> (u64, bool) {
    let start = Instant::now();
    let mut last = (u64::MAX, Instant::now());
    loop {
        let m = controller.metrics().await;
        let workers = sum_series(&m, "colocate_job_workers{") as u64;
        let targets = sum_series(&m, "colocate_job_target_workers{") as u64;
        if workers != last.0 || workers != targets {
            last = (workers, Instant::now());
        } else if last.1.elapsed() >= Duration::from_secs(30) {
            return (workers, true);
        }
        if start.elapsed() > timeout {
            eprintln!("scale: jobs not settled after {timeout:?}: {workers} workers, {targets} targeted");
            return (workers, false);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Sum of every sample whose line starts with `prefix` (a metric name and `{`).
fn sum_series(text: &str, prefix: &str) -> f64 {
    text.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

fn r1(d: Duration) -> f64 {
    measure::round(d.as_secs_f64(), 1)
}

struct Spike {
    pods: usize,
    json: Value,
}

/// The HPAs of the first `SPIKED_SERVICES` services decide 10% more replicas; 2 s later (an HPA
/// sync) their Deployments get them, as new pods the scheduler must find room for. Measures how
/// soon a master is asked to shrink, how long until every new pod is bound, and how many of them
/// the scheduler found no room for meanwhile.
async fn spike(client: &kube::Client, layout: &Layout, jobs: &[ElasticJob], expect_shrink: bool) -> Spike {
    let services: Vec<(String, u32, u32)> = (0..SPIKED_SERVICES)
        .map(|s| {
            let current = layout.service_pods(s) as u32;
            (population::service_namespace(s), current, current.div_ceil(10))
        })
        .collect();
    let at = Instant::now();
    for (ns, current, extra) in &services {
        population::set_hpa(client, ns, *current, current + extra).await;
    }
    let shrink_command = move || {
        jobs.iter()
            .flat_map(|j| j.commands())
            .filter(|c| c.at > at && c.reason == "online-headroom")
            .map(|c| c.at)
            .min()
    };
    let first_shrink = if expect_shrink {
        Some(
            cluster::eventually(Duration::from_secs(120), "a shrink command at a master", move || async move {
                shrink_command()
            })
            .await,
        )
    } else {
        None
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let api_scale = |ns: &str| kube::Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), ns);
    for (ns, _, extra) in &services {
        let patch = json!({"spec": {"replicas": extra}});
        api_scale(ns)
            .patch_scale("nginx", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("scaling {ns}/nginx: {e}"));
    }
    let wanted: usize = services.iter().map(|(_, _, e)| *e as usize).sum();
    let mut most_unschedulable = 0;
    let bound_after = loop {
        let mut bound = 0;
        let mut unschedulable = 0;
        for (ns, _, _) in &services {
            // Only the Deployment's own pods carry the ReplicaSet's pod-template-hash.
            let (b, u) = pod_counts(client, ns, "app=nginx,pod-template-hash").await;
            bound += b;
            unschedulable += u;
        }
        most_unschedulable = most_unschedulable.max(unschedulable);
        if bound >= wanted {
            break Some(at.elapsed());
        }
        if at.elapsed() > Duration::from_secs(600) {
            eprintln!("scale: only {bound} of {wanted} spike pods bound after 600 s");
            break None;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    for (ns, current, extra) in &services {
        population::set_hpa(client, ns, current + extra, current + extra).await;
    }
    let first_shrink = first_shrink.or_else(shrink_command);
    let first_shrink_ms = first_shrink.map(|t| measure::round((t - at).as_secs_f64() * 1e3, 1));
    let json = json!({
        "services": SPIKED_SERVICES, "new_pods": wanted,
        "first_shrink_command_ms_after_hpa_write": first_shrink_ms,
        "all_new_pods_bound_seconds": bound_after.map(|d| measure::round(d.as_secs_f64(), 1)),
        "most_new_pods_unschedulable_at_once": most_unschedulable,
    });
    Spike { pods: wanted, json }
}
