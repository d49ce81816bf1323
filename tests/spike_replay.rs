//! The side-by-side load-spike replay on real Kubernetes (docs/spike-replay.md).
//!
//! A window of a shipped scenario's spike is played in real time, twice, each time on a fresh
//! test bed (etcd, kube-apiserver, kube-scheduler, kube-controller-manager without its HPA
//! controller, kwok nodes): the scenario's nodes, NGINX at a high priority with the HPA
//! decisions the simulator's `online-only` run made (the test plays the HPA controller: scale,
//! then status, at every sync), and the scenario's jobs as low-priority workers behind
//! reference masters, filling the cluster. Deleted pods keep their node for their grace period
//! (kwok is told to honour it), as on a kubelet whose containers use all of it, so preemption
//! has its cost.
//!
//! - `preemption`: nothing else; when NGINX grows, the real kube-scheduler preempts workers.
//! - `colocate`: `colocate run` with its default settings shrinks the jobs through their masters.
//!
//! Reported side by side (printed and in target/test-reports/spike_replay.json): online pod
//! seconds Unschedulable, workers preempted by the scheduler, colocate's forced preemptions,
//! scale commands and workers over time. Asserted: the acceptance properties (colocate has fewer
//! pending seconds and fewer preemptions) and that the baseline did preempt; timings only reported.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use colocate::sim::Scenario;
use serde_json::{json, Value};
use support::cluster::{self, Controller};
use support::pod_recorder::{PodRecord, PodRecorder, Role};
use support::spike::{self, Schedule};
use support::testbed::Testbed;

const SCENARIO: &str = "scenarios/flash-crowd.yaml";
/// Scenario seconds played: the spike starts at 480 s (x5 load in 20 s) and the HPA reaches
/// its top at 525 s; 60 s more lets the last pods find room under either policy.
const WINDOW_S: (f64, f64) = (465.0, 585.0);

/// `colocate run`: the service, nothing else; every other setting is its default (the scenario
/// sets no `controller:` keys).
const CONFIG: &str = "services:\n  - {name: nginx, namespace: web, hpa: nginx}\n";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    Preemption,
    Colocate,
}

impl Policy {
    fn name(self) -> &'static str {
        match self {
            Policy::Preemption => "preemption",
            Policy::Colocate => "colocate",
        }
    }
}

/// What one run measured over the window.
#[derive(Debug)]
struct Figures {
    policy: Policy,
    fill: Vec<(String, u32)>,
    online_pods_created: usize,
    online_pods_unschedulable: usize,
    /// Sum over NGINX pods of the time from being seen Unschedulable to being bound.
    pending_pod_s: f64,
    max_pending: usize,
    pending_at_end: usize,
    /// When the last NGINX pod created in the window was bound (None: one never was).
    last_online_bound_s: Option<f64>,
    /// Workers the scheduler preempted while they were running.
    scheduler_preemptions: usize,
    /// Workers already leaving (released by their master) that the scheduler picked as victims.
    scheduler_victims_leaving: usize,
    forced_preemptions: f64,
    /// (seconds into the window, job, target, reason) of every command the masters received.
    scale_commands: Vec<(f64, String, u32, String)>,
    /// Running workers deleted other than by the scheduler: released through their masters
    /// (the ReplicaSet removing them) or forced by colocate.
    workers_released: usize,
    /// New worker pods: the ReplicaSets replacing preempted workers (they wait for room).
    worker_pods_created: usize,
    /// Running workers (bound, not leaving), sampled every second: start, min, mean, end.
    workers: (usize, usize, f64, usize),
    /// CPU held by workers (leaving ones included), mean of the samples.
    training_cpu_mean: f64,
    samples: Vec<Value>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colocate_beats_priority_preemption_on_a_replayed_spike() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(SCENARIO);
    let scenario = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        scenario.spec.controller,
        colocate::core::Config::default(),
        "{SCENARIO} sets controller keys; pass them to `colocate run` in CONFIG"
    );
    let schedule = spike::hpa_schedule(&scenario, WINDOW_S.0, WINDOW_S.1);
    print_schedule(&schedule);

    let started = Instant::now();
    let preemption = run(Policy::Preemption, &scenario, &schedule).await;
    let preemption_took = started.elapsed();
    let colocate = run(Policy::Colocate, &scenario, &schedule).await;
    let colocate_took = started.elapsed() - preemption_took;

    let table = table(&[&preemption, &colocate]);
    eprintln!("\n{table}");
    eprintln!(
        "wall time: preemption run {:.0} s, colocate run {:.0} s",
        preemption_took.as_secs_f64(),
        colocate_took.as_secs_f64()
    );
    let report = json!({
        "scenario": scenario.spec.name,
        "window_s": [schedule.from_s, schedule.to_s],
        "worker_grace_period_s": scenario.spec.baselines.termination_grace_period.as_secs(),
        "deleted_pods": "kept by kwok until their deletionTimestamp (hack/testbed/kwok-graceful-delete.yaml)",
        "colocate_config": CONFIG,
        "pending_measure": "sum over NGINX pods of the time from first seen PodScheduled=False/Unschedulable to bound",
        "hpa_before_window": schedule.before.to_json(),
        "hpa_syncs": schedule.syncs.iter().map(|s| s.to_json()).collect::<Vec<_>>(),
        "runs": [to_json(&preemption, preemption_took), to_json(&colocate, colocate_took)],
    });
    let file = cluster::report_dir().join("spike_replay.json");
    std::fs::write(&file, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    eprintln!("report: {}", file.display());

    assert!(
        preemption.scheduler_preemptions > 0,
        "the preemption baseline preempted no worker: the replay did not contend for room, so it cannot tell \
         colocate from plain priority preemption"
    );
    assert!(
        colocate.pending_pod_s < preemption.pending_pod_s,
        "online pods waited for room longer with colocate ({:.1} pod-s) than with priority preemption alone ({:.1} pod-s)",
        colocate.pending_pod_s,
        preemption.pending_pod_s
    );
    let killed = |f: &Figures| f.scheduler_preemptions as f64 + f.forced_preemptions;
    assert!(
        killed(&colocate) < killed(&preemption),
        "colocate killed as many workers as priority preemption alone: {} by the scheduler + {} forced, against {} + {}",
        colocate.scheduler_preemptions,
        colocate.forced_preemptions,
        preemption.scheduler_preemptions,
        preemption.forced_preemptions
    );
}

/// One run on a fresh test bed; see the module docs.
async fn run(policy: Policy, scenario: &Scenario, schedule: &Schedule) -> Figures {
    eprintln!("--- {} run", policy.name());
    let bed = tokio::task::spawn_blocking(|| {
        Testbed::start_with_controller_manager_and_grace_periods("*,-horizontalpodautoscaling")
    })
    .await
    .unwrap();
    let client = cluster::client(&bed).await;
    spike::priority_classes(&bed);
    spike::nodes(&bed, scenario);
    let recorder = PodRecorder::start(client.clone()).await;
    let svc = &scenario.spec.services[0];
    spike::nginx(&bed, &client, svc, &schedule.before).await;
    let online = schedule.before.desired as usize;
    cluster::eventually(Duration::from_secs(60), &format!("{online} NGINX pods running"), || {
        let r = &recorder;
        async move { (r.now().online_running == online).then_some(()) }
    })
    .await;
    let grace_s = scenario.spec.baselines.termination_grace_period.as_secs() as u32;
    let jobs = spike::fill_with_jobs(&bed, &client, scenario, grace_s).await;
    let fill: Vec<(String, u32)> = jobs.iter().map(|(j, n)| (j.name.clone(), *n)).collect();
    eprintln!("filled: NGINX {online} pods, jobs {fill:?}");

    let mut controller = None;
    if policy == Policy::Colocate {
        let c = Controller::start(&bed, CONFIG, &[]).await;
        warm_up(&c, &fill).await;
        controller = Some(c);
    }
    let before_window: usize = jobs.iter().map(|(j, _)| j.commands().len()).sum();
    assert_eq!(before_window, 0, "colocate changed the jobs before the spike: the runs would not start alike");

    let t0 = Instant::now();
    let at = |s: f64| tokio::time::Instant::from_std(t0 + Duration::from_secs_f64(s - schedule.from_s));
    for sync in &schedule.syncs {
        tokio::time::sleep_until(at(sync.at_s)).await;
        spike::play_hpa_sync(&client, sync).await;
    }
    tokio::time::sleep_until(at(schedule.to_s)).await;
    let end = Instant::now();

    let forced = match &controller {
        Some(c) => sum_series(&c.metrics().await, "colocate_forced_preemptions_total{"),
        None => 0.0,
    };
    let mut commands = Vec::new();
    for (job, _) in &jobs {
        for c in job.commands() {
            commands.push((c.at.duration_since(t0).as_secs_f64(), job.name.clone(), c.target, c.reason.clone()));
        }
    }
    commands.sort_by(|a, b| a.0.total_cmp(&b.0));
    if let Some(mut c) = controller {
        c.stop();
        // Its decisions and their `why`, for reading the run afterwards.
        let log = cluster::report_dir().join("spike_replay_colocate.log");
        std::fs::write(&log, c.logs()).unwrap();
        eprintln!("colocate run log: {}", log.display());
    }
    figures(policy, fill, &recorder, (t0, end), forced, commands)
}

/// Waits until `colocate run` leads and has read every job's master, then one status interval
/// (5 s) more, so that it starts the window warm.
async fn warm_up(c: &Controller, fill: &[(String, u32)]) {
    cluster::eventually(Duration::from_secs(60), "colocate run to lead and see every master", || async {
        let m = c.metrics().await;
        let masters_up = fill
            .iter()
            .all(|(job, _)| cluster::metric_value(&m, &format!("colocate_job_master_up{{job=\"ml/{job}\"}}")) == 1.0);
        (cluster::metric_value(&m, "colocate_leader") == 1.0 && masters_up).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
}

fn figures(
    policy: Policy,
    fill: Vec<(String, u32)>,
    recorder: &PodRecorder,
    (t0, end): (Instant, Instant),
    forced_preemptions: f64,
    scale_commands: Vec<(f64, String, u32, String)>,
) -> Figures {
    let records = recorder.records();
    let within = |t: Option<Instant>| t.is_some_and(|t| t >= t0 && t <= end);
    let online: Vec<&PodRecord> = records.iter().filter(|r| r.role == Role::Online).collect();
    let workers: Vec<&PodRecord> = records.iter().filter(|r| matches!(r.role, Role::Worker { .. })).collect();
    let waits: Vec<(Instant, Instant)> = online.iter().filter_map(|r| r.unschedulable_within(t0, end)).collect();
    let created: Vec<&&PodRecord> = online.iter().filter(|r| within(Some(r.seen))).collect();
    // None when one of them was never bound.
    let last_bound: Option<f64> = created
        .iter()
        .map(|r| r.bound.map(|b| b.duration_since(t0).as_secs_f64()))
        .collect::<Option<Vec<f64>>>()
        .map(|bound| bound.into_iter().fold(0.0, f64::max));
    let preempted: Vec<bool> =
        workers.iter().filter_map(|r| r.preempted).filter(|(t, _)| within(Some(*t))).map(|(_, live)| live).collect();
    let preempted_live = |r: &PodRecord| r.preempted.is_some_and(|(_, live)| live);
    let released = workers
        .iter()
        .filter(|r| within(r.deleting) && r.bound.is_some_and(|b| Some(b) < r.deleting) && !preempted_live(r))
        .count();
    let samples = recorder.samples(t0, end);
    let counts: Vec<usize> = samples.iter().map(|s| s.workers).collect();
    Figures {
        policy,
        fill,
        online_pods_created: created.len(),
        online_pods_unschedulable: waits.len(),
        pending_pod_s: waits.iter().map(|(a, b)| b.duration_since(*a).as_secs_f64()).sum(),
        max_pending: most_at_once(&waits),
        pending_at_end: online.iter().filter(|r| r.unschedulable_at(end)).count(),
        last_online_bound_s: last_bound,
        scheduler_preemptions: preempted.iter().filter(|live| **live).count(),
        scheduler_victims_leaving: preempted.iter().filter(|live| !**live).count(),
        forced_preemptions,
        scale_commands,
        workers_released: released,
        worker_pods_created: workers.iter().filter(|r| within(Some(r.seen))).count(),
        workers: (
            counts.first().copied().unwrap_or(0),
            counts.iter().copied().min().unwrap_or(0),
            mean(counts.iter().map(|&c| c as f64)),
            counts.last().copied().unwrap_or(0),
        ),
        training_cpu_mean: mean(samples.iter().map(|s| s.worker_cpu_milli as f64 / 1000.0)),
        samples: samples
            .iter()
            .map(|s| {
                json!({"t_s": (s.at.duration_since(t0).as_secs_f64() * 10.0).round() / 10.0,
                       "workers": s.workers, "worker_cpu": s.worker_cpu_milli as f64 / 1000.0,
                       "online_running": s.online_running, "online_unschedulable": s.online_unschedulable})
            })
            .collect(),
    }
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (n, sum) = values.fold((0usize, 0.0), |(n, sum), x| (n + 1, sum + x));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// The most intervals open at one instant.
fn most_at_once(intervals: &[(Instant, Instant)]) -> usize {
    let mut edges: Vec<(Instant, i32)> = intervals.iter().flat_map(|(a, b)| [(*a, 1), (*b, -1)]).collect();
    // Ends before starts at the same instant: a pod bound as another arrives is not two waiting.
    edges.sort_by_key(|(t, d)| (*t, *d));
    let (mut open, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        open += d;
        most = most.max(open);
    }
    most as usize
}

/// Sum of every sample of a labelled series family (`name{` prefix) in a /metrics text.
fn sum_series(text: &str, prefix: &str) -> f64 {
    text.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

fn print_schedule(s: &Schedule) {
    eprintln!("HPA syncs played (scenario time; from the simulator's online-only run):");
    eprintln!("  before the window: {} replicas at {}%", s.before.desired, s.before.utilization_pct);
    for sync in &s.syncs {
        eprintln!(
            "  t={:>4.0} s  load {:>6.0} rps  utilization {:>3}%  replicas {:>3} -> {:>3}",
            sync.at_s, sync.load_rps, sync.utilization_pct, sync.current, sync.desired
        );
    }
}

/// How a table row shows one run.
type Cell = fn(&Figures) -> String;

fn table(runs: &[&Figures]) -> String {
    let rows: [(&str, Cell); 15] = [
        ("jobs' workers at the start", |f| {
            f.fill.iter().map(|(j, n)| format!("{j} {n}")).collect::<Vec<_>>().join(", ")
        }),
        ("NGINX pods created", |f| f.online_pods_created.to_string()),
        ("NGINX pods Unschedulable", |f| f.online_pods_unschedulable.to_string()),
        ("Unschedulable pod-seconds", |f| format!("{:.1}", f.pending_pod_s)),
        ("most Unschedulable at once", |f| f.max_pending.to_string()),
        ("Unschedulable at the end", |f| f.pending_at_end.to_string()),
        ("last NGINX pod bound at", |f| f.last_online_bound_s.map_or("never".into(), |s| format!("{s:.1} s"))),
        ("workers preempted by the scheduler", |f| f.scheduler_preemptions.to_string()),
        ("  (victims already leaving)", |f| f.scheduler_victims_leaving.to_string()),
        ("colocate forced preemptions", |f| format!("{:.0}", f.forced_preemptions)),
        ("scale commands", |f| f.scale_commands.len().to_string()),
        ("workers released (masters, forced)", |f| f.workers_released.to_string()),
        ("replacement worker pods created", |f| f.worker_pods_created.to_string()),
        ("workers start / min / mean / end", |f| {
            let (s, min, mean, e) = f.workers;
            format!("{s} / {min} / {mean:.1} / {e}")
        }),
        ("training CPU held, mean", |f| format!("{:.1}", f.training_cpu_mean)),
    ];
    let mut out = format!("{:<36}", "");
    for f in runs {
        out += &format!("{:>28}", f.policy.name());
    }
    out.push('\n');
    for (label, value) in rows {
        out += &format!("{label:<36}");
        for f in runs {
            out += &format!("{:>28}", value(f));
        }
        out.push('\n');
    }
    for f in runs.iter().filter(|f| !f.scale_commands.is_empty()) {
        out += &format!("\n{} scale commands (s after the window opened, job, target, reason):\n", f.policy.name());
        for (t, job, target, reason) in &f.scale_commands {
            out += &format!("  {t:>6.1}  {job:<16} -> {target:>3}  {reason}\n");
        }
    }
    out
}

fn to_json(f: &Figures, took: Duration) -> Value {
    json!({
        "policy": f.policy.name(),
        "fill": f.fill.iter().map(|(j, n)| json!({"job": j, "workers": n})).collect::<Vec<_>>(),
        "online_pods_created": f.online_pods_created,
        "online_pods_unschedulable": f.online_pods_unschedulable,
        "online_unschedulable_pod_s": f.pending_pod_s,
        "online_max_unschedulable": f.max_pending,
        "online_unschedulable_at_end": f.pending_at_end,
        "last_online_pod_bound_s": f.last_online_bound_s,
        "scheduler_preemptions": f.scheduler_preemptions,
        "scheduler_victims_already_leaving": f.scheduler_victims_leaving,
        "colocate_forced_preemptions": f.forced_preemptions,
        "scale_commands": f.scale_commands.iter()
            .map(|(t, job, target, reason)| json!({"t_s": t, "job": job, "target": target, "reason": reason}))
            .collect::<Vec<_>>(),
        "workers_released": f.workers_released,
        "replacement_worker_pods_created": f.worker_pods_created,
        "workers": {"start": f.workers.0, "min": f.workers.1, "mean": f.workers.2, "end": f.workers.3},
        "training_cpu_mean": f.training_cpu_mean,
        "wall_time_s": took.as_secs_f64(),
        "samples": f.samples,
    })
}
