//! Completion-time-aware weights: among jobs of one priority whose masters say how much work is
//! left, extra workers go where they cut the mean job completion time most.
//!
//! heSRPT (Berg, Vesilo and Harchol-Balter, "heSRPT: Parallel Scheduling to Minimize Mean
//! Slowdown", arXiv 1903.09346) is the optimal split of servers among jobs of known size whose
//! speedup on k servers is k^p (0 < p < 1): with the m jobs present ranked by remaining size,
//! largest first (i = 1..m), job i gets the fraction (i/m)^(1/(1-p)) - ((i-1)/m)^(1/(1-p)).
//! Every job progresses (efficiency: the speedup is concave), the shortest fastest, and jobs
//! finish in size order. A naive "largest completion-time cut per worker" goes the other way: it
//! favours the longest jobs, which gain the most seconds from one more worker.
//!
//! Weights keep their meaning. The jobs of a level whose remaining work is known share, between
//! them, the sum of their weights against the level's other jobs, and heSRPT only decides how
//! that sum is split among them; two jobs with no known end weighted 3:1 still share 3:1. The
//! split sets the weights of the weighted dominant-share fill (plan.rs), so floors still come
//! first, waiting jobs are still served oldest first, and a job at its ceiling leaves the rest to
//! the others.
//!
//! A job's remaining size is its remaining samples over what one worker would process
//! (throughput / n^p). Its exponent p is learned from the throughputs its master reported at
//! different worker counts (a least-squares fit of ln throughput on ln n); until it has run at
//! two sizes, `DEFAULT_EXPONENT` stands in.

use std::collections::{HashMap, VecDeque};

use super::forecast::slope;
use super::snapshot::{Job, Snapshot};

/// The speedup exponent assumed until a job has reported throughput at two worker counts.
pub const DEFAULT_EXPONENT: f64 = 0.8;
/// Learned exponents are kept in this range: near 1 the split becomes strict shortest-first
/// (one noisy reading would hand a job everything), near 0 it becomes an equal split.
const EXPONENT_RANGE: (f64, f64) = (0.3, 0.95);
/// Worker counts remembered per job (the most recent ones).
const MAX_SIZES: usize = 8;

/// Throughputs each job's master reported, per worker count. Owned by the core; one entry per
/// job, forgotten with the job.
#[derive(Clone, Debug, Default)]
pub struct Scaling {
    /// Per job: (workers, samples/s) seen last at that count, most recent last.
    seen: HashMap<String, VecDeque<(u32, f64)>>,
}

impl Scaling {
    /// Records the throughput of every job that reports one while it is not changing size (a
    /// master applying a change pauses training; its figure then says nothing about scaling).
    pub fn observe(&mut self, snap: &Snapshot) {
        for job in &snap.jobs {
            let Some(work) = &job.work else { continue };
            let Some(rate) = work.throughput.filter(|t| t.is_finite() && *t > 0.0) else { continue };
            if job.rescaling || work.workers == 0 {
                continue;
            }
            let seen = self.seen.entry(job.name.clone()).or_default();
            seen.retain(|(n, _)| *n != work.workers);
            seen.push_back((work.workers, rate));
            if seen.len() > MAX_SIZES {
                seen.pop_front();
            }
        }
    }

    pub fn retain(&mut self, jobs: &[&str]) {
        self.seen.retain(|j, _| jobs.contains(&j.as_str()));
    }

    /// The job's speedup exponent, if it has run at two worker counts.
    pub fn exponent(&self, job: &str) -> Option<f64> {
        let pts: Vec<(f64, f64)> = self.seen.get(job)?.iter().map(|&(n, t)| (f64::from(n).ln(), t.ln())).collect();
        slope(&pts).filter(|s| s.is_finite()).map(|s| s.clamp(EXPONENT_RANGE.0, EXPONENT_RANGE.1))
    }

    /// Samples/s one worker would process, from the latest reading.
    fn one_worker_rate(&self, job: &str, p: f64) -> Option<f64> {
        let &(n, t) = self.seen.get(job)?.back()?;
        Some(t / f64::from(n).powf(p))
    }
}

/// The weights the fill uses, per job of the snapshot, and the words for the jobs they moved.
#[derive(Clone, Debug, Default)]
pub struct Split {
    pub weights: Vec<f64>,
    /// Per job: why its weight is what it is, when heSRPT set it.
    pub because: Vec<Option<String>>,
}

/// A job's configured weight (a weight of 0 or less counts as 1).
pub fn base_weight(job: &Job) -> f64 {
    if job.weight > 0.0 {
        job.weight
    } else {
        1.0
    }
}

/// The fill's weights: each job's own, except that at every priority level with at least two
/// jobs of known remaining size, those jobs split the sum of their weights by heSRPT.
pub fn split(snap: &Snapshot, scaling: &Scaling, enabled: bool) -> Split {
    let mut out = Split { weights: snap.jobs.iter().map(base_weight).collect(), because: vec![None; snap.jobs.len()] };
    if !enabled {
        return out;
    }
    let mut levels: Vec<i32> = snap.jobs.iter().map(|j| j.priority).collect();
    levels.sort_unstable();
    levels.dedup();
    for level in levels {
        // (job, remaining size in one-worker seconds, exponent)
        let mut known: Vec<(usize, f64, f64)> = Vec::new();
        for (j, job) in snap.jobs.iter().enumerate().filter(|(_, job)| job.priority == level) {
            let Some(work) = &job.work else { continue };
            let left = work.total - work.done;
            let p = scaling.exponent(&job.name).unwrap_or(DEFAULT_EXPONENT);
            let Some(rate) = scaling.one_worker_rate(&job.name, p) else { continue };
            if left.is_finite() && left > 0.0 && rate > 0.0 {
                known.push((j, left / rate, p));
            }
        }
        if known.len() < 2 {
            continue;
        }
        let mut ps: Vec<f64> = known.iter().map(|k| k.2).collect();
        ps.sort_by(f64::total_cmp);
        let p = ps[ps.len() / 2];
        let sum: f64 = known.iter().map(|k| out.weights[k.0]).sum();
        // Largest remaining first; ties by name so the split does not depend on snapshot order.
        known.sort_by(|a, b| b.1.total_cmp(&a.1).then(snap.jobs[a.0].name.cmp(&snap.jobs[b.0].name)));
        let m = known.len();
        for (i, &(j, left, _)) in known.iter().enumerate() {
            let theta = hesrpt_fraction(i + 1, m, p);
            // Never exactly 0: the fill divides by it, and the job still keeps its floor.
            out.weights[j] = (sum * theta).max(sum * 1e-9);
            out.because[j] = Some(format!(
                "{} of {m} jobs by remaining work (about {}s on one worker), {:.0}% of their weight",
                ordinal(m - i),
                left.round(),
                theta * 100.0
            ));
        }
    }
    out
}

/// heSRPT's share for the job ranked `i` of `m` by remaining size, largest first.
pub fn hesrpt_fraction(i: usize, m: usize, p: f64) -> f64 {
    let e = 1.0 / (1.0 - p);
    (i as f64 / m as f64).powf(e) - ((i - 1) as f64 / m as f64).powf(e)
}

fn ordinal(n: usize) -> String {
    if n == 1 {
        return "shortest".into();
    }
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix} shortest")
}
