//! Replay report v1 (docs/scenario-format.md) and what a person reads: the comparison table and the
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

#[cfg(test)]
impl Report {
    /// A one-minute report of `results`, for tests of what is printed from a report.
    pub(crate) fn of(results: Vec<PolicyResult>) -> Report {
        Report {
            version: 1,
            scenario: "s".into(),
            duration_s: 60.0,
            step_s: 1.0,
            seed: 1,
            target_utilization: 0.9,
            results,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct PolicyResult {
    pub policy: String,
    pub avg_cpu_allocation: f64,
    /// v1.2: CPU the cluster's pods use over its allocatable, averaged over time: the
    /// utilization `capacity: usage` raises (see `sim/usage.rs` for what each pod uses).
    pub avg_cpu_usage: f64,
    /// v1.2: of the CPU-seconds BestEffort workers asked for, the fraction they got; null
    /// where no worker was BestEffort.
    pub worker_cpu_received: Option<f64>,
    /// v1.2: BestEffort workers the kubelet evicted for memory (also in `forced_preemptions`).
    pub batch_evictions: u64,
    pub time_above_target: f64,
    pub slo_violation_s: f64,
    pub pending_online_pod_s: f64,
    /// Workers (or gang jobs' workers) killed without a graceful shrink: the sum of the next
    /// two and `batch_evictions`.
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
    /// v1.3: completion time over the jobs with `work` that arrived, one not completed counted
    /// until the scenario ended (censored): a policy that starves a job cannot look faster by
    /// leaving it out, as `avg_jct_s` does. The table's JCT columns show these.
    pub avg_jct_censored_s: Option<f64>,
    pub p95_jct_censored_s: Option<f64>,
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
    pub avg_jct_censored_s: Option<f64>,
    pub p95_jct_censored_s: Option<f64>,
    pub avg_queueing_s: Option<f64>,
    pub p95_queueing_s: Option<f64>,
}

impl JobFigures {
    /// From each job's result and whether it has `work`, for a scenario `duration_s` long.
    pub fn of(jobs: &[(&JobResult, bool)], duration_s: f64) -> JobFigures {
        let jct: Vec<f64> = jobs.iter().filter_map(|(j, _)| j.completed_at_s.map(|c| c - j.arrival_s)).collect();
        let arrived = || jobs.iter().filter(|(j, has_work)| *has_work && j.arrival_s <= duration_s).map(|(j, _)| j);
        let censored: Vec<f64> = arrived().map(|j| j.completed_at_s.unwrap_or(duration_s) - j.arrival_s).collect();
        let queueing: Vec<f64> = arrived().map(|j| j.started_at_s.unwrap_or(duration_s) - j.arrival_s).collect();
        let unfinished = jobs.iter().filter(|(j, has_work)| *has_work && j.completed_at_s.is_none()).count();
        JobFigures {
            avg_jct_s: mean(&jct),
            p50_jct_s: nearest_rank(&jct, 50.0),
            p95_jct_s: nearest_rank(&jct, 95.0),
            unfinished_jobs: unfinished as u64,
            avg_jct_censored_s: mean(&censored),
            p95_jct_censored_s: nearest_rank(&censored, 95.0),
            avg_queueing_s: mean(&queueing),
            p95_queueing_s: nearest_rank(&queueing, 95.0),
        }
    }
}

/// Workers killed: by the scheduler + by the controller's deadline, + evicted for memory where
/// any were.
fn killed(r: &PolicyResult) -> String {
    let mut s = format!("{} + {}", r.scheduler_preemptions, r.controller_forced_preemptions);
    if r.batch_evictions > 0 {
        s.push_str(&format!(" + {} evicted", r.batch_evictions));
    }
    s
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
#[derive(Debug, Clone, Default)]
pub struct TimelineRow {
    pub t: f64,
    pub allocation: f64,
    /// Requested GPUs over allocatable ones; 0 on a cluster without GPUs.
    pub gpu_allocation: f64,
    /// CPU used over allocatable.
    pub cpu_usage: f64,
    pub system_cpu: f64,
    pub online_cpu: f64,
    /// CPU workers hold: their requests, or a BestEffort worker's batch request.
    pub training_cpu: f64,
    /// GPUs requested by workers on a node (the chart's GPU panels and training GPU-hours).
    pub training_gpu: u64,
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

/// The table's "is it worth it" columns (see `worth`) and the line under it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorthColumns {
    /// "CPU" or "GPU": what training's hours are counted in.
    pub unit: &'static str,
    /// Per result, same order: hours of `unit` held by workers.
    pub hours: Vec<f64>,
    /// Per result: `hours` over the idle room online-only leaves; `None` without that run.
    pub shares: Vec<Option<f64>>,
    /// Printed under the table when no policy can differ on the services' columns.
    pub note: Option<String>,
}

/// Whether the table shows the completion-time columns and the GPU allocation column.
pub(super) struct Shown {
    pub jct: bool,
    pub gpu: bool,
}

impl Report {
    /// The comparison table, one row per policy.
    pub fn table(&self) -> String {
        self.table_with(None)
    }

    /// Completion-time columns only where some policy ran jobs with work; GPU allocation only on
    /// a cluster with GPUs.
    pub(super) fn shown(&self) -> Shown {
        Shown {
            jct: self.results.iter().any(|r| r.avg_jct_s.is_some() || r.unfinished_jobs > 0),
            gpu: self.results.iter().any(|r| r.avg_gpu_allocation.is_some()),
        }
    }

    /// The table with `worth`'s columns appended after the others, and its note under it.
    pub fn table_with(&self, worth: Option<&WorthColumns>) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "scenario {} ({:.0} s simulated, step {} s, seed {}, target utilization {:.2})",
            self.scenario, self.duration_s, self.step_s, self.seed, self.target_utilization
        );
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.0}"));
        let Shown { jct, gpu } = self.shown();
        let mut header: Vec<String> = vec!["policy".into(), "avg CPU alloc".into(), "avg CPU usage".into()];
        if gpu {
            header.push("avg GPU alloc".into());
        }
        header.extend(
            [
                "time >= target",
                "SLO viol. s",
                "pending online pod s",
                "killed: sched.+forced",
                "rescales",
                "training samples",
                "makespan s",
            ]
            .map(String::from),
        );
        if jct {
            header.extend(["avg JCT s", "p95 JCT s", "avg queue s", "p95 queue s", "unfinished"].map(String::from));
        }
        if let Some(w) = worth {
            header.extend([format!("training {}-h", w.unit), "of idle room %".to_string()]);
        }
        // Hours to a precision that keeps two or three significant digits in the column.
        let most = worth.map_or(0.0, |w| w.hours.iter().copied().fold(0.0, f64::max));
        let decimals = if most < 10.0 {
            2
        } else if most < 100.0 {
            1
        } else {
            0
        };
        let rows: Vec<Vec<String>> = self
            .results
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut row =
                    vec![r.policy.clone(), format!("{:.3}", r.avg_cpu_allocation), format!("{:.3}", r.avg_cpu_usage)];
                if gpu {
                    row.push(r.avg_gpu_allocation.map_or("-".to_string(), |g| format!("{g:.3}")));
                }
                row.extend([
                    format!("{:.3}", r.time_above_target),
                    format!("{:.0}", r.slo_violation_s),
                    format!("{:.0}", r.pending_online_pod_s),
                    killed(r),
                    r.rescale_events.to_string(),
                    format!("{:.4e}", r.training_samples),
                    opt(r.makespan_s),
                ]);
                if jct {
                    row.extend([
                        opt(r.avg_jct_censored_s),
                        opt(r.p95_jct_censored_s),
                        opt(r.avg_queueing_s),
                        opt(r.p95_queueing_s),
                        r.unfinished_jobs.to_string(),
                    ]);
                }
                if let Some(w) = worth {
                    row.push(w.hours.get(i).map_or("-".to_string(), |h| format!("{h:.decimals$}")));
                    row.push(
                        w.shares.get(i).copied().flatten().map_or("-".to_string(), |s| format!("{:.1}", s * 100.0)),
                    );
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
        let _ = writeln!(out, "{}", line(header.iter().map(String::as_str).collect()));
        let _ = writeln!(out, "{}", widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
        for r in &rows {
            let _ = writeln!(out, "{}", line(r.iter().map(String::as_str).collect()));
        }
        if let Some(note) = worth.and_then(|w| w.note.as_deref()) {
            let _ = writeln!(out, "{note}");
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
    // Added last, so that every column before it keeps its place.
    out.push_str(",cpu_usage\n");
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
            let _ = writeln!(out, ",{:.4}", r.cpu_usage);
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

/// An intent of one colocate policy at one time (a row of intents.csv).
pub struct PolicyIntent {
    pub policy: &'static str,
    pub t: f64,
    pub intent: ScaleIntent,
}

/// intents.csv: what the colocate policies decided, when, and why (one row per intent). The
/// `policy` column came last when `colocate-usage` joined `colocate`, so readers of the first
/// seven columns keep working.
pub fn intents_csv(intents: &[PolicyIntent]) -> String {
    let mut out = String::from("t_s,job,from,target,reason,release_pods,why,policy\n");
    for PolicyIntent { policy, t, intent: i } in intents {
        let _ = writeln!(
            out,
            "{t},{},{},{},{},{},{},{policy}",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intents_csv_says_which_policy_each_intent_came_from_in_its_last_column() {
        let intent = |job: &str| ScaleIntent {
            job: job.into(),
            from: 4,
            target: 2,
            release_pods: vec!["w-1".into(), "w-2".into()],
            release_nodes: vec![],
            reason: crate::core::Reason::OnlineHeadroom,
            why: "a \"spike\"".into(),
        };
        let rows = [
            PolicyIntent { policy: "colocate", t: 1.5, intent: intent("a") },
            PolicyIntent { policy: "colocate-usage", t: 0.0, intent: intent("b") },
        ];
        assert_eq!(
            intents_csv(&rows),
            "t_s,job,from,target,reason,release_pods,why,policy\n\
             1.5,\"a\",4,2,online-headroom,\"w-1 w-2\",\"a \"\"spike\"\"\",colocate\n\
             0,\"b\",4,2,online-headroom,\"w-1 w-2\",\"a \"\"spike\"\"\",colocate-usage\n"
        );
    }

    #[test]
    fn worth_columns_come_after_the_others_and_the_note_under_the_table() {
        let result = |policy: &str| PolicyResult { policy: policy.into(), ..PolicyResult::default() };
        let report = Report::of(vec![result("colocate"), result("online-only")]);
        let plain = report.table();
        let worth = WorthColumns {
            unit: "CPU",
            hours: vec![1234.4, 0.0],
            shares: vec![Some(0.8766), Some(0.0)],
            note: Some("The jobs never contended with the services.".into()),
        };
        let table = report.table_with(Some(&worth));
        let lines: Vec<&str> = table.lines().collect();
        // Every line of the plain table is kept as it was, with the new cells after it.
        for (old, new) in plain.lines().zip(&lines) {
            assert!(new.starts_with(old), "{old:?} -> {new:?}");
        }
        assert!(lines[1].ends_with("makespan s  training CPU-h  of idle room %"), "{table}");
        assert!(lines[3].ends_with("  1234            87.7"), "{table}");
        assert!(lines[4].ends_with("     0             0.0"), "{table}");
        assert_eq!(lines.last(), Some(&"The jobs never contended with the services."));
        assert_eq!(lines.len(), plain.lines().count() + 1);
    }
}
