//! Scenarios written the way outside users write them: other real load traces (from
//! ../shared/traces, read in place), other cluster shapes (several pools, GPUs), other job
//! mixes. Every one must replay, and `colocate` must keep its promises on each (see the test).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

fn traces() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/traces");
    assert!(
        dir.join("README.md").is_file(),
        "the real load traces are missing at {}: the project expects ../shared beside the repository",
        dir.display()
    );
    dir.canonicalize().unwrap()
}

/// A cluster, services and jobs block to put around a service's `load:`.
struct Case {
    name: &'static str,
    /// Lowest acceptable `colocate` allocation for this case.
    min_allocation: f64,
    /// Lowest acceptable `colocate-usage` utilization (`avg_cpu_usage`): the mission's 0.90
    /// unless the case says why not.
    min_usage: f64,
    /// SLO seconds `colocate` may add to `online-only`'s when online pods wait (5 s, or more
    /// where the case says why).
    slo_tolerance_s: f64,
    duration: &'static str,
    step: &'static str,
    cluster: &'static str,
    services: String,
    jobs: &'static str,
}

const ELASTIC_MIX: &str = r#"
  - name: lm-pretrain
    worker: {cpu: "4", memory: 16Gi}
    min_workers: 2
    max_workers: 64
    rescale_cost: 20s
    throughput_per_worker: 30
    scaling_efficiency: 0.9
  - name: ctr
    arrival: 2m
    weight: 2
    worker: {cpu: "2", memory: 4Gi}
    min_workers: 1
    max_workers: 128
    rescale_cost: 8s
    throughput_per_worker: 50
  - name: urgent-eval
    arrival: 5m
    priority: 5
    worker: {cpu: "1", memory: 2Gi}
    min_workers: 4
    max_workers: 32
    rescale_cost: 3s
    throughput_per_worker: 20
    work: 400000
"#;

fn nginx(trace: &str, extra: &str, capacity: u32, max: u32) -> String {
    format!(
        r#"
  - name: web
    replica: {{cpu: "1", memory: 512Mi}}
    replica_capacity_rps: {capacity}
    startup: 15s
    latency: {{base_p99: 20ms, slo_p99: 250ms}}
    hpa: {{min_replicas: 2, max_replicas: {max}, target_utilization: 0.6}}
    load:
      trace: {{file: "{}", {extra}}}
"#,
        traces().join(trace).display()
    )
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            min_allocation: 0.88,
            min_usage: 0.90,
            slo_tolerance_s: 5.0,
            name: "worldcup-flash",
            duration: "30m",
            step: "1s",
            cluster: "nodes: [{pool: cpu, count: 8, allocatable: {cpu: \"32\", memory: 128Gi}}]\n  system_reserved: {cpu: 500m, memory: 1Gi}",
            services: nginx("web/worldcup_flash.csv", "time_column: t_s, value_column: rps, scale: 10, speedup: 6", 100, 200),
            jobs: ELASTIC_MIX,
        },
        Case {
            min_allocation: 0.88,
            min_usage: 0.90,
            slo_tolerance_s: 5.0,
            name: "worldcup-match",
            duration: "30m",
            step: "1s",
            cluster: "nodes: [{pool: small, count: 10, allocatable: {cpu: \"16\", memory: 64Gi}}, {pool: big, count: 2, allocatable: {cpu: \"64\", memory: 256Gi}}]",
            services: nginx("web/worldcup_match.csv", "scale: 2.5, speedup: 12", 100, 200),
            jobs: ELASTIC_MIX,
        },
        Case {
            min_allocation: 0.88,
            min_usage: 0.90,
            slo_tolerance_s: 5.0,
            name: "nasa-day",
            duration: "1h",
            step: "2s",
            cluster: "nodes: [{pool: cpu, count: 6, allocatable: {cpu: \"48\", memory: 192Gi}}]\n  system_reserved: {cpu: \"1\", memory: 2Gi}",
            services: nginx("web/nasa_day.csv", "scale: 1200, speedup: 24", 100, 200),
            jobs: ELASTIC_MIX,
        },
        Case {
            min_allocation: 0.88,
            min_usage: 0.90,
            slo_tolerance_s: 5.0,
            name: "azure-code-bursts",
            duration: "55m",
            step: "1s",
            cluster: "nodes: [{pool: cpu, count: 5, allocatable: {cpu: \"32\", memory: 128Gi}}]",
            services: nginx("web/azure_code_5s.csv", "scale: 60", 100, 150),
            jobs: ELASTIC_MIX,
        },
        Case {
            // Held to 0.83, below the other traces: reserving two HPA syncs ahead for 30 s
            // releases on this noisy trace costs about 3 points, integrating its 5-minute steps
            // exactly (as a Prometheus rate does) 1.4 more, and the controller's p99 of a 15 s
            // window, as a histogram query's is, 3.2 more: the service misses its SLO on its
            // own (215 s), and each excursion holds the latency guard (and so growth) for the
            // window after it. The guard's shrinks on those excursions are what hold it below
            // 0.90 (0.929 with `latency_shrink_fraction: 0`). The onset rule of the load trend
            // needs three samples in the window's last third, which this trace's 5 s steps
            // never give.
            min_allocation: 0.83,
            min_usage: 0.90,
            slo_tolerance_s: 5.0,
            name: "nab-elb-fortnight",
            duration: "70m",
            step: "5s",
            cluster: "nodes: [{pool: cpu, count: 4, allocatable: {cpu: \"64\", memory: 256Gi}}]\n  system_reserved: {cpu: \"2\", memory: 4Gi}",
            services: nginx("nab/elb_request_count_8c0756.csv", "scale: 0.5, speedup: 288, skip: 1d", 2, 200),
            jobs: ELASTIC_MIX,
        },
        Case {
            min_allocation: 0.88,
            min_usage: 0.90,
            slo_tolerance_s: 5.0,
            name: "alibaba-cpu-gpu-pools",
            duration: "2h",
            step: "5s",
            cluster: "nodes: [{pool: cpu, count: 6, allocatable: {cpu: \"32\", memory: 128Gi}}, {pool: gpu, count: 2, allocatable: {cpu: \"64\", memory: 512Gi, nvidia.com/gpu: 8}}]",
            services: nginx("alibaba2018/alibaba2018_machine_usage_30s.csv", "value_column: cpu_util_percent, row_interval: 30s, scale: 25, speedup: 60, skip: 2d", 100, 150),
            jobs: r#"
  - name: vision-gpu
    worker: {cpu: "8", memory: 64Gi, nvidia.com/gpu: 1}
    min_workers: 2
    max_workers: 16
    rescale_cost: 30s
    throughput_per_worker: 400
  - name: features-cpu
    weight: 3
    worker: {cpu: "2", memory: 4Gi}
    min_workers: 1
    max_workers: 200
    rescale_cost: 5s
    throughput_per_worker: 25
"#,
        },
        // Every request of an hour of Azure LLM traffic as its own row, its prompt length taken
        // as the load: a service that jumps tenfold from second to second and sits at
        // max_replicas, violating its SLO a seventh of the time whatever anyone does. The latency
        // guard (Heracles) holds training growth on its nodes while the slack is low, by design,
        // so allocation stays below the other cases'; it must still clear 0.85.
        Case {
            min_allocation: 0.85,
            // The service is saturated (its requests are 75% of the cluster, its load jumps tenfold
            // from second to second): the batch CPU swings with it, and the workers kept through
            // each squeeze (`usage_cpu_overcommit`) are what holds utilization up.
            min_usage: 0.90,
            // Load that jumps tenfold from one second to the next gives no lead at all: new pods
            // wait up to a release latency (30 s) for room, a few seconds more over the SLO.
            slo_tolerance_s: 10.0,
            name: "azure-llm-saturated",
            duration: "30m",
            step: "1s",
            cluster: "nodes: [{pool: a, count: 4, allocatable: {cpu: \"32\", memory: 128Gi}}]",
            services: format!(
                r#"
  - name: llm-frontend
    replica: {{cpu: "1", memory: 1Gi}}
    replica_capacity_rps: 0.5
    latency: {{base_p99: 50ms, slo_p99: 1s}}
    hpa: {{min_replicas: 2, max_replicas: 100, target_utilization: 0.6}}
    load:
      trace: {{file: "{}", value_column: ContextTokens, scale: 0.02}}
"#,
                traces().join("azure_llm/AzureLLMInferenceTrace_conv.csv").display()
            ),
            jobs: r#"
  - name: t
    worker: {cpu: "2", memory: 4Gi}
    min_workers: 1
    max_workers: 100
    throughput_per_worker: 1
"#,
        },
    ]
}

/// How the online services' pods are set up where colocate runs: Kubernetes' default (they
/// preempt workers when they find no room) or `preemptionPolicy: Never` (they wait, and
/// colocate's release deadline is the backstop). The baselines always preempt.
#[derive(Clone, Copy, PartialEq)]
enum OnlinePods {
    Preempt,
    Wait,
}

fn replay(case: &Case, pods: OnlinePods) -> Value {
    let services = match pods {
        OnlinePods::Preempt => case.services.clone(),
        OnlinePods::Wait => case.services.replace("\n    hpa:", "\n    preemption_policy: Never\n    hpa:"),
    };
    let yaml = format!(
        "version: 1\nname: {}\nduration: {}\nstep: {}\nseed: 11\ncluster:\n  {}\nservices:{}\njobs:{}",
        case.name, case.duration, case.step, case.cluster, services, case.jobs
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{}.yaml", case.name));
    std::fs::write(&path, &yaml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_colocate")).args(["replay", "--json"]).arg(&path).output().unwrap();
    assert!(out.status.success(), "{}:\n{yaml}\n{}", case.name, String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn row<'a>(report: &'a Value, policy: &str) -> &'a Value {
    report["results"].as_array().unwrap().iter().find(|r| r["policy"] == policy).unwrap()
}

/// Under the honest model (workers hold their node for the 30 s grace period after a release,
/// the HPA's metric lags, the controller samples every second or every step where steps are
/// longer) a spike that outruns a release
/// costs something, and what it costs depends on the online pods' preemption policy:
/// - pods that preempt: kube-scheduler kills workers for pods that find no room; colocate must
///   kill at most 60% as many as plain priority preemption, and never force any itself. Replay
///   plays kube-scheduler as it is: it retries waiting pods on every event that frees room,
///   schedules before the controller's releases in a step, ranks victims that started in the
///   same second in no particular order, and a pod whose grace period ends at a step's moment
///   leaves after that moment's pods were tried, as on a kubelet. And the controller's p99 is a
///   15 s window's, as a histogram query's is: on the Azure code trace's burst (0 to 3,200 rps
///   in 15 s) the latency guard shrinks training 5 s later and less than a p99 of the newest
///   scrape would, and 13 of 22 workers are killed, more than half;
/// - pods that wait (`preemptionPolicy: Never`, what the README recommends): no worker is
///   killed at all, and latency stays at the `online-only` floor (+5 s unless the case says why).
///
/// Both keep allocation at the case's minimum.
#[test]
fn colocate_keeps_its_promises_on_other_traces_and_shapes() {
    let mut failures = Vec::new();
    let mut rows = Vec::new();
    for case in cases() {
        let mut case_row = json!({
            "name": case.name,
            "min_allocation": case.min_allocation,
            "min_usage": case.min_usage,
            "cluster": case.cluster,
            "services": case.services,
        });
        for pods in [OnlinePods::Preempt, OnlinePods::Wait] {
            let report = replay(&case, pods);
            let c = row(&report, "colocate");
            let online = row(&report, "online-only");
            let preemption = row(&report, "preemption");
            let f = |v: &Value, k: &str| v[k].as_f64().unwrap();
            let mode = if pods == OnlinePods::Preempt { "preempt" } else { "wait" };
            case_row[mode] = report.clone();
            eprintln!(
                "{:<22} {mode:<7} colocate alloc {:.3} slo {:>4.0}s (online-only {:>4.0}s) pending {:>5.0} pod-s killed {}+{} rescales {} | preemption alloc {:.3} slo {:.0}s pending {:.0} killed {} | gang alloc {:.3}",
                case.name,
                f(c, "avg_cpu_allocation"),
                f(c, "slo_violation_s"),
                f(online, "slo_violation_s"),
                f(c, "pending_online_pod_s"),
                c["scheduler_preemptions"],
                c["controller_forced_preemptions"],
                c["rescale_events"],
                f(preemption, "avg_cpu_allocation"),
                f(preemption, "slo_violation_s"),
                f(preemption, "pending_online_pod_s"),
                preemption["forced_preemptions"],
                f(row(&report, "gang"), "avg_cpu_allocation"),
            );
            let name = format!("{} ({mode})", case.name);
            if f(c, "avg_cpu_allocation") < case.min_allocation {
                failures.push(format!(
                    "{name}: allocation {:.3} < {}",
                    f(c, "avg_cpu_allocation"),
                    case.min_allocation
                ));
            }
            if f(c, "controller_forced_preemptions") != 0.0 {
                failures.push(format!("{name}: colocate forced {}", c["controller_forced_preemptions"]));
            }
            match pods {
                OnlinePods::Preempt => {
                    if f(c, "forced_preemptions") > 0.6 * f(preemption, "forced_preemptions") {
                        failures.push(format!(
                            "{name}: {} workers killed, more than 60% of plain preemption's {}",
                            c["forced_preemptions"], preemption["forced_preemptions"]
                        ));
                    }
                }
                OnlinePods::Wait => {
                    // Usage mode: its workers request no CPU and stand between no online pod and
                    // the scheduler, so how the pods are set up does not matter; checked once.
                    failures.extend(usage_mode_shortfalls(&name, &report, &case));
                    if f(c, "forced_preemptions") != 0.0 {
                        failures.push(format!("{name}: {} workers killed", c["forced_preemptions"]));
                    }
                    if f(c, "slo_violation_s") > f(online, "slo_violation_s") + case.slo_tolerance_s {
                        failures.push(format!(
                            "{name}: SLO seconds {} vs online-only {}",
                            c["slo_violation_s"], online["slo_violation_s"]
                        ));
                    }
                }
            }
        }
        rows.push(case_row);
    }
    write_rows(&json!({"cases": rows}));
    assert!(failures.is_empty(), "{failures:#?}");
}

/// What `colocate-usage` falls short of on one replay: utilization at least the case's
/// `min_usage` (where requests mode's is far lower: online pods use a fraction of what they
/// request), at the `online-only` latency floor, with no online pod waiting longer than alone,
/// no worker killed and none evicted.
fn usage_mode_shortfalls(name: &str, report: &Value, case: &Case) -> Vec<String> {
    let u = row(report, "colocate-usage");
    let online = row(report, "online-only");
    let requests = row(report, "colocate");
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap();
    eprintln!(
        "{name:<32} colocate-usage usage {:.3} (colocate {:.3}, online-only {:.3}) slo {:.0}s pending {:.0} pod-s killed {} evicted {} workers got {:.3} of the CPU they asked",
        f(u, "avg_cpu_usage"),
        f(requests, "avg_cpu_usage"),
        f(online, "avg_cpu_usage"),
        f(u, "slo_violation_s"),
        f(u, "pending_online_pod_s"),
        u["forced_preemptions"],
        u["batch_evictions"],
        u["worker_cpu_received"].as_f64().unwrap_or(f64::NAN),
    );
    let mut short = Vec::new();
    if f(u, "avg_cpu_usage") < case.min_usage {
        short.push(format!("{name}: colocate-usage utilization {:.3} < {}", f(u, "avg_cpu_usage"), case.min_usage));
    }
    if f(u, "slo_violation_s") > f(online, "slo_violation_s") + case.slo_tolerance_s {
        short.push(format!(
            "{name}: colocate-usage SLO seconds {} vs online-only {}",
            u["slo_violation_s"], online["slo_violation_s"]
        ));
    }
    if f(u, "pending_online_pod_s") > f(online, "pending_online_pod_s") {
        short.push(format!(
            "{name}: colocate-usage pending {} pod-s vs online-only {}",
            u["pending_online_pod_s"], online["pending_online_pod_s"]
        ));
    }
    if f(u, "forced_preemptions") != 0.0 || f(u, "batch_evictions") != 0.0 {
        short.push(format!(
            "{name}: colocate-usage killed {} (evicted {})",
            u["forced_preemptions"], u["batch_evictions"]
        ));
    }
    short
}

/// docs/results.md's table of these cases is made from this file (`hack/results.sh`).
fn write_rows(rows: &Value) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target").join("test-reports");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("trace_scenarios.json"), serde_json::to_string_pretty(rows).unwrap() + "\n").unwrap();
}
