//! Replay report v1 (scenario-v1.md) and what a person reads: the comparison table and the
//! per-step timeline.

use std::fmt::Write as _;

use serde::Serialize;

use crate::core::ScaleIntent;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub version: u32,
    pub scenario: String,
    pub duration_s: f64,
    /// Added: the step, seed and controller target the run used.
    pub step_s: f64,
    pub seed: u64,
    pub target_utilization: f64,
    pub results: Vec<PolicyResult>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PolicyResult {
    pub policy: String,
    pub avg_cpu_allocation: f64,
    pub time_above_target: f64,
    pub slo_violation_s: f64,
    pub pending_online_pod_s: f64,
    /// Workers (or gang jobs' workers) killed without a graceful shrink: the sum of the next two.
    pub forced_preemptions: u64,
    /// Added key: running workers the scheduler preempted for online pods.
    pub scheduler_preemptions: u64,
    /// Added key: workers `colocate` deleted past its release deadline. Always 0 in replay:
    /// its masters release at once what they are asked (live, only a master that does not
    /// release is forced).
    pub controller_forced_preemptions: u64,
    pub rescale_events: u64,
    pub training_samples: f64,
    pub makespan_s: Option<f64>,
    /// v1.1: completion time (completed_at - arrival) over the jobs that completed.
    pub avg_jct_s: Option<f64>,
    pub p50_jct_s: Option<f64>,
    pub p95_jct_s: Option<f64>,
    /// v1.1: jobs with `work` not completed when the scenario ended.
    pub unfinished_jobs: u64,
    /// v1.1: started_at - arrival over the jobs with `work` that arrived; one never started
    /// counts with duration - arrival.
    pub avg_queueing_s: Option<f64>,
    pub p95_queueing_s: Option<f64>,
    /// v1.1: as `avg_cpu_allocation`, for `nvidia.com/gpu`; null when the cluster has none.
    pub avg_gpu_allocation: Option<f64>,
    pub jobs: Vec<JobResult>,
}

#[derive(Debug, Clone, Serialize)]
pub struct JobResult {
    pub name: String,
    /// v1.1.
    pub arrival_s: f64,
    /// v1.1: first time it had at least `min_workers` running.
    pub started_at_s: Option<f64>,
    pub completed_at_s: Option<f64>,
    pub avg_workers: f64,
}

/// Completion-time and queueing figures of one policy's jobs (report v1.1).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobFigures {
    pub avg_jct_s: Option<f64>,
    pub p50_jct_s: Option<f64>,
    pub p95_jct_s: Option<f64>,
    pub unfinished_jobs: u64,
    pub avg_queueing_s: Option<f64>,
    pub p95_queueing_s: Option<f64>,
}

impl JobFigures {
    /// From each job's result and whether it has `work`, for a scenario `duration_s` long.
    pub fn of(jobs: &[(&JobResult, bool)], duration_s: f64) -> JobFigures {
        let jct: Vec<f64> = jobs.iter().filter_map(|(j, _)| j.completed_at_s.map(|c| c - j.arrival_s)).collect();
        let queueing: Vec<f64> = jobs
            .iter()
            .filter(|(j, has_work)| *has_work && j.arrival_s <= duration_s)
            .map(|(j, _)| j.started_at_s.unwrap_or(duration_s) - j.arrival_s)
            .collect();
        let unfinished = jobs.iter().filter(|(j, has_work)| *has_work && j.completed_at_s.is_none()).count();
        JobFigures {
            avg_jct_s: mean(&jct),
            p50_jct_s: nearest_rank(&jct, 50.0),
            p95_jct_s: nearest_rank(&jct, 95.0),
            unfinished_jobs: unfinished as u64,
            avg_queueing_s: mean(&queueing),
            p95_queueing_s: nearest_rank(&queueing, 95.0),
        }
    }
}

fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// The nearest-rank percentile: the smallest value with at least `p`% of the values at or below.
pub fn nearest_rank(xs: &[f64], p: f64) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    Some(sorted[rank.min(sorted.len()) - 1])
}

/// A victim bound less than this long before it was preempted counts as young: the spike
/// test compares how many of the scheduler's kills hit workers that had just taken freed room.
pub const YOUNG_VICTIM_S: f64 = 30.0;

/// One simulated step, for timeline.csv and the chart.
#[derive(Debug, Clone)]
pub struct TimelineRow {
    pub t: f64,
    pub allocation: f64,
    /// Requested GPUs over allocatable ones; 0 on a cluster without GPUs.
    pub gpu_allocation: f64,
    pub system_cpu: f64,
    pub online_cpu: f64,
    pub training_cpu: f64,
    pub pending_online_pods: u32,
    /// Worker pods waiting for a node (replacements of preempted workers, or growth).
    pub pending_workers: u32,
    /// Running workers the scheduler preempted so far (cumulative).
    pub killed_by_scheduler: u64,
    /// Victims the scheduler picked that were already leaving, so far (cumulative).
    pub victims_leaving: u64,
    /// Of `killed_by_scheduler`, workers bound less than [`YOUNG_VICTIM_S`] before (cumulative):
    /// mostly replacements of earlier victims, or growth, that took room as it freed.
    pub killed_young: u64,
    pub slo_violated: bool,
    /// Per service: (load rps, replicas, ready, p99 ms).
    pub services: Vec<(f64, u32, u32, f64)>,
    /// Per job: active workers.
    pub workers: Vec<u32>,
}

impl Report {
    /// The comparison table, one row per policy.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "scenario {} ({:.0} s simulated, step {} s, seed {}, target utilization {:.2})",
            self.scenario, self.duration_s, self.step_s, self.seed, self.target_utilization
        );
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.0}"));
        // Completion-time columns only where some policy ran jobs with work; GPU allocation
        // only on a cluster with GPUs.
        let jct = self.results.iter().any(|r| r.avg_jct_s.is_some() || r.unfinished_jobs > 0);
        let gpu = self.results.iter().any(|r| r.avg_gpu_allocation.is_some());
        let mut header = vec!["policy", "avg CPU alloc"];
        if gpu {
            header.push("avg GPU alloc");
        }
        header.extend([
            "time >= target",
            "SLO viol. s",
            "pending online pod s",
            "killed: sched.+forced",
            "rescales",
            "training samples",
            "makespan s",
        ]);
        if jct {
            header.extend(["avg JCT s", "p95 JCT s", "avg queue s", "p95 queue s", "unfinished"]);
        }
        let rows: Vec<Vec<String>> = self
            .results
            .iter()
            .map(|r| {
                let mut row = vec![r.policy.clone(), format!("{:.3}", r.avg_cpu_allocation)];
                if gpu {
                    row.push(r.avg_gpu_allocation.map_or("-".to_string(), |g| format!("{g:.3}")));
                }
                row.extend([
                    format!("{:.3}", r.time_above_target),
                    format!("{:.0}", r.slo_violation_s),
                    format!("{:.0}", r.pending_online_pod_s),
                    format!("{} + {}", r.scheduler_preemptions, r.controller_forced_preemptions),
                    r.rescale_events.to_string(),
                    format!("{:.4e}", r.training_samples),
                    opt(r.makespan_s),
                ]);
                if jct {
                    row.extend([
                        opt(r.avg_jct_s),
                        opt(r.p95_jct_s),
                        opt(r.avg_queueing_s),
                        opt(r.p95_queueing_s),
                        r.unfinished_jobs.to_string(),
                    ]);
                }
                row
            })
            .collect();
        let widths: Vec<usize> = (0..header.len())
            .map(|c| rows.iter().map(|r| r[c].len()).chain([header[c].len()]).max().unwrap_or(0))
            .collect();
        let line = |cells: Vec<&str>| {
            cells
                .iter()
                .enumerate()
                .map(
                    |(c, s)| if c == 0 { format!("{s:<w$}", w = widths[c]) } else { format!("{s:>w$}", w = widths[c]) },
                )
                .collect::<Vec<_>>()
                .join("  ")
        };
        let _ = writeln!(out, "{}", line(header.clone()));
        let _ = writeln!(out, "{}", widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
        for r in &rows {
            let _ = writeln!(out, "{}", line(r.iter().map(String::as_str).collect()));
        }
        out
    }
}

/// Up to this many jobs, timeline.csv has a workers column per job. Beyond it (a trace of 300
/// jobs over 26,000 steps would write 80 MB), it has the totals, and job_workers.csv has each
/// job's worker count where it changes.
pub const MAX_JOB_COLUMNS: usize = 32;

/// timeline.csv: one row per step and policy.
pub fn timeline_csv(policies: &[(&str, &[TimelineRow])], services: &[String], jobs: &[String]) -> String {
    let per_job = jobs.len() <= MAX_JOB_COLUMNS;
    let mut out =
        String::from("policy,t_s,cpu_allocation,system_cpu,online_cpu,training_cpu,pending_online_pods,slo_violated");
    for s in services {
        let _ = write!(out, ",{s}_rps,{s}_replicas,{s}_ready,{s}_p99_ms");
    }
    if per_job {
        for j in jobs {
            let _ = write!(out, ",{j}_workers");
        }
    } else {
        out.push_str(",jobs_with_workers,workers");
    }
    out.push('\n');
    for (policy, rows) in policies {
        for r in *rows {
            let _ = write!(
                out,
                "{policy},{},{:.4},{:.3},{:.3},{:.3},{},{}",
                r.t,
                r.allocation,
                r.system_cpu,
                r.online_cpu,
                r.training_cpu,
                r.pending_online_pods,
                u8::from(r.slo_violated)
            );
            for (rps, rep, ready, p99) in &r.services {
                let _ = write!(out, ",{rps:.1},{rep},{ready},{p99:.1}");
            }
            if per_job {
                for w in &r.workers {
                    let _ = write!(out, ",{w}");
                }
            } else {
                let running = r.workers.iter().filter(|&&w| w > 0).count();
                let _ = write!(out, ",{running},{}", r.workers.iter().map(|&w| u64::from(w)).sum::<u64>());
            }
            out.push('\n');
        }
    }
    out
}

/// job_workers.csv: each job's workers under each policy, a row where the count changes (and
/// the first step); for scenarios with more than [`MAX_JOB_COLUMNS`] jobs.
pub fn job_workers_csv(policies: &[(&str, &[TimelineRow])], jobs: &[String]) -> String {
    let mut out = String::from("policy,t_s,job,workers\n");
    for (policy, rows) in policies {
        let mut last: Vec<Option<u32>> = vec![None; jobs.len()];
        for r in *rows {
            for (j, &w) in r.workers.iter().enumerate() {
                if last[j] != Some(w) {
                    last[j] = Some(w);
                    let _ = writeln!(out, "{policy},{},{},{w}", r.t, csv_quote(&jobs[j]));
                }
            }
        }
    }
    out
}

/// A CSV field in double quotes, its own quotes doubled.
pub fn csv_quote(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// intents.csv: what the `colocate` policy decided, when, and why (one row per intent).
pub fn intents_csv(intents: &[(f64, ScaleIntent)]) -> String {
    let mut out = String::from("t_s,job,from,target,reason,release_pods,why\n");
    for (t, i) in intents {
        let _ = writeln!(
            out,
            "{t},{},{},{},{},{},{}",
            csv_quote(&i.job),
            i.from,
            i.target,
            i.reason,
            csv_quote(&i.release_pods.join(" ")),
            csv_quote(&i.why)
        );
    }
    out
}
