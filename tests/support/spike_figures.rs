//! What one run of the side-by-side spike replay measured on the real control plane
//! (tests/spike_replay.rs), from the pod watch of [`PodRecorder`], and how it is printed and
//! reported.

use std::time::{Duration, Instant};

use colocate::sim::report::YOUNG_VICTIM_S;
use serde_json::{json, Value};

use super::pod_recorder::{PodRecord, PodRecorder, Role, Sample};

/// What one run measured over the window.
#[derive(Debug)]
pub struct Figures {
    /// The run's name: the policy, and for colocate the configuration.
    pub label: String,
    pub fill: Vec<(String, u32)>,
    pub online_pods_created: usize,
    pub online_pods_unschedulable: usize,
    /// Sum over NGINX pods of the time from being seen Unschedulable to being bound.
    pub pending_pod_s: f64,
    pub max_pending: usize,
    pub pending_at_end: usize,
    /// When the last NGINX pod created in the window was bound (None: one never was).
    pub last_online_bound_s: Option<f64>,
    /// When the scheduler preempted each worker that was running, seconds after the window
    /// opened, sorted.
    pub preempted_s: Vec<f64>,
    /// When it picked each worker already leaving (released by its master) as a victim, sorted.
    pub victims_leaving_s: Vec<f64>,
    /// Of the running workers preempted, those bound less than `YOUNG_VICTIM_S` before (as
    /// replay counts them): mostly replacements that had just taken room as it freed.
    pub preempted_young: usize,
    pub forced_preemptions: f64,
    /// (seconds into the window, job, target, reason) of every command the masters received;
    /// negative in the controller's warm-up (standing headroom's commands).
    pub scale_commands: Vec<(f64, String, u32, String)>,
    /// Running workers deleted other than by the scheduler: released through their masters
    /// (the ReplicaSet removing them) or forced by colocate.
    pub workers_released: usize,
    /// New worker pods: the ReplicaSets replacing preempted workers (they wait for room).
    pub worker_pods_created: usize,
    /// Running workers (bound, not leaving), sampled every second: start, min, mean, end.
    pub workers: (usize, usize, f64, usize),
    /// CPU held by workers (leaving ones included), mean of the samples.
    pub training_cpu_mean: f64,
    /// The recorder's samples, each with its seconds after the window opened.
    pub samples: Vec<(f64, Sample)>,
    /// Seconds from the controller's start to the window's (0 without a controller).
    pub warmup_s: f64,
    /// Usage mode: where in its interval Prometheus scraped the pods' usage, in scenario
    /// seconds modulo `observation.usage_scrape_interval`.
    pub usage_scrape_phase_s: Option<f64>,
}

impl Figures {
    /// Workers the scheduler preempted while they were running.
    pub fn scheduler_preemptions(&self) -> usize {
        self.preempted_s.len()
    }
}

pub fn figures(
    label: String,
    fill: Vec<(String, u32)>,
    recorder: &PodRecorder,
    (t0, end): (Instant, Instant),
    forced_preemptions: f64,
    scale_commands: Vec<(f64, String, u32, String)>,
    warmup_s: f64,
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
    // Seconds after t0 of the preemptions inside the window whose victim was running (`live`)
    // or already leaving, sorted.
    let preempted_when = |live: bool| {
        let mut at: Vec<f64> = workers
            .iter()
            .filter_map(|r| r.preempted)
            .filter(|(t, l)| *l == live && within(Some(*t)))
            .map(|(t, _)| t.duration_since(t0).as_secs_f64())
            .collect();
        at.sort_by(f64::total_cmp);
        at
    };
    let preempted_live = |r: &PodRecord| r.preempted.is_some_and(|(_, live)| live);
    let young = Duration::from_secs_f64(YOUNG_VICTIM_S);
    let preempted_young = workers
        .iter()
        .filter(|r| match (r.preempted, r.bound) {
            (Some((at, true)), Some(bound)) => within(Some(at)) && at.duration_since(bound) < young,
            _ => false,
        })
        .count();
    let released = workers
        .iter()
        .filter(|r| within(r.deleting) && r.bound.is_some_and(|b| Some(b) < r.deleting) && !preempted_live(r))
        .count();
    let samples = recorder.samples(t0, end);
    let counts: Vec<usize> = samples.iter().map(|s| s.workers).collect();
    Figures {
        label,
        fill,
        online_pods_created: created.len(),
        online_pods_unschedulable: waits.len(),
        pending_pod_s: waits.iter().map(|(a, b)| b.duration_since(*a).as_secs_f64()).sum::<f64>() + 0.0, // an empty sum is -0.0
        max_pending: most_at_once(&waits),
        pending_at_end: online.iter().filter(|r| r.unschedulable_at(end)).count(),
        last_online_bound_s: last_bound,
        preempted_s: preempted_when(true),
        victims_leaving_s: preempted_when(false),
        preempted_young,
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
        warmup_s,
        samples: samples.iter().map(|s| (s.at.duration_since(t0).as_secs_f64(), *s)).collect(),
        usage_scrape_phase_s: None,
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
pub fn sum_series(text: &str, prefix: &str) -> f64 {
    text.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

/// How a table row shows one run.
type Cell = fn(&Figures) -> String;

pub fn table(runs: &[&Figures]) -> String {
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
        ("workers preempted by the scheduler", |f| f.scheduler_preemptions().to_string()),
        ("  (victims already leaving)", |f| f.victims_leaving_s.len().to_string()),
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
        out += &format!("{:>28}", f.label);
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
        out += &format!("\n{} scale commands (s after the window opened, job, target, reason):\n", f.label);
        for (t, job, target, reason) in &f.scale_commands {
            out += &format!("  {t:>6.1}  {job:<16} -> {target:>3}  {reason}\n");
        }
    }
    out
}

pub fn to_json(f: &Figures, took: Duration) -> Value {
    json!({
        "run": f.label,
        "fill": f.fill.iter().map(|(j, n)| json!({"job": j, "workers": n})).collect::<Vec<_>>(),
        "online_pods_created": f.online_pods_created,
        "online_pods_unschedulable": f.online_pods_unschedulable,
        "online_unschedulable_pod_s": f.pending_pod_s,
        "online_max_unschedulable": f.max_pending,
        "online_unschedulable_at_end": f.pending_at_end,
        "last_online_pod_bound_s": f.last_online_bound_s,
        "scheduler_preemptions": f.scheduler_preemptions(),
        "scheduler_victims_already_leaving": f.victims_leaving_s.len(),
        "scheduler_preemptions_young": f.preempted_young,
        "colocate_forced_preemptions": f.forced_preemptions,
        "scale_commands": f.scale_commands.iter()
            .map(|(t, job, target, reason)| json!({"t_s": t, "job": job, "target": target, "reason": reason}))
            .collect::<Vec<_>>(),
        "workers_released": f.workers_released,
        "replacement_worker_pods_created": f.worker_pods_created,
        "workers": {"start": f.workers.0, "min": f.workers.1, "mean": f.workers.2, "end": f.workers.3},
        "training_cpu_mean": f.training_cpu_mean,
        "wall_time_s": took.as_secs_f64(),
        "samples": f.samples.iter().map(|(t, s)| json!({
            "t_s": (t * 10.0).round() / 10.0,
            "workers": s.workers, "worker_cpu": s.worker_cpu_milli as f64 / 1000.0,
            "online_running": s.online_running, "online_unschedulable": s.online_unschedulable,
        })).collect::<Vec<_>>(),
    })
}
