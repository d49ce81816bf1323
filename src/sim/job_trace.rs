//! `job_trace` (scenario v1.1): jobs from a CSV, one per row, such as the Philly job list. Each
//! row becomes a [`JobSpec`] appended after the scenario's own `jobs:`, so everything downstream
//! (replay, the report, limits) sees one list of jobs and nothing knows where a job came from.
//!
//! A job arrives at its submit offset (the earliest kept row is 0 s; divided by `speedup`), asks
//! for `gang_workers` = the workers it requested, and has `work` = (duration / speedup) ×
//! requested^scaling_efficiency at `throughput_per_worker` 1, so that a rigid run at the
//! requested size takes exactly the traced duration.

use std::path::Path;
use std::time::Duration;

use super::load::parse_time;
use super::spec::{JobSpec, JobTraceSpec};

/// The jobs of a trace, and how many rows were dropped for their workers or duration.
#[derive(Debug)]
pub struct TraceJobs {
    pub jobs: Vec<JobSpec>,
    pub dropped: usize,
}

/// (key under `job_trace`, problem).
type TraceError = (String, String);

/// One row that names a job: submit seconds, traced duration seconds, requested workers.
struct Row {
    submit: f64,
    duration: f64,
    workers: u32,
}

/// Reads the trace (its file relative to `base`) into jobs.
pub fn expand(spec: &JobTraceSpec, base: &Path) -> Result<TraceJobs, TraceError> {
    check_knobs(spec)?;
    let path = base.join(&spec.file);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| ("job_trace.file".to_string(), format!("cannot read {}: {e}", path.display())))?;
    let (mut rows, dropped) = read_rows(spec, &path, &text)?;
    // Submit order; rows submitted at the same second keep their file order.
    rows.sort_by(|a, b| a.submit.total_cmp(&b.submit));
    let earliest = rows.first().map_or(0.0, |r| r.submit);
    let from = earliest + spec.skip.as_secs_f64();
    rows.retain(|r| r.submit >= from);
    if let Some(limit) = spec.limit {
        rows.truncate(limit);
    }
    if rows.is_empty() {
        return Err((
            "job_trace".into(),
            format!("{} has no job left after skip and limit ({dropped} rows dropped)", path.display()),
        ));
    }
    let first = rows[0].submit;
    let jobs = rows.iter().enumerate().map(|(i, r)| job(spec, i, r, first)).collect();
    Ok(TraceJobs { jobs, dropped })
}

fn check_knobs(spec: &JobTraceSpec) -> Result<(), TraceError> {
    let err = |k: &str, m: String| Err((format!("job_trace.{k}"), m));
    if !(spec.speedup > 0.0 && spec.speedup.is_finite()) {
        return err("speedup", format!("{} must be above 0", spec.speedup));
    }
    if spec.min_workers == 0 {
        return err("min_workers", "must be at least 1".into());
    }
    if !(spec.max_workers_factor >= 1.0 && spec.max_workers_factor.is_finite()) {
        return err("max_workers_factor", format!("{} must be 1 or more", spec.max_workers_factor));
    }
    if spec.max_workers_cap == Some(0) {
        return err("max_workers_cap", "must be at least 1".into());
    }
    if !(spec.scaling_efficiency > 0.0 && spec.scaling_efficiency <= 1.0) {
        return err("scaling_efficiency", format!("{} is outside (0, 1]", spec.scaling_efficiency));
    }
    if spec.worker.resources().is_zero() {
        return err("worker", "requests nothing; give it cpu, memory or nvidia.com/gpu".into());
    }
    if spec.limit == Some(0) {
        return err("limit", "must be at least 1".into());
    }
    Ok(())
}

/// The rows that name a job, and how many were dropped (workers 0, empty or unparsable; a
/// duration that is not a positive number: a job with no work). A submit time that cannot be
/// read is an error naming its line: the order of every job depends on it.
fn read_rows(spec: &JobTraceSpec, path: &Path, text: &str) -> Result<(Vec<Row>, usize), TraceError> {
    let at = |line: usize, m: String| ("job_trace.file".to_string(), format!("{}:{line}: {m}", path.display()));
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().ok_or_else(|| at(1, "is empty; expected a header row".into()))?;
    let columns: Vec<&str> = header.split(',').map(|c| c.trim().trim_matches('"')).collect();
    let find = |name: &str, key: &str| {
        columns.iter().position(|c| *c == name).ok_or_else(|| {
            (
                format!("job_trace.{key}"),
                format!("column `{name}` is not in {} (it has {})", path.display(), columns.join(", ")),
            )
        })
    };
    let submit_col = find(&spec.submit_column, "submit_column")?;
    let duration_col = find(&spec.duration_column, "duration_column")?;
    let workers_col = find(&spec.workers_column, "workers_column")?;
    let mut rows = Vec::new();
    let mut dropped = 0;
    for (idx, line) in lines {
        let cells: Vec<&str> = line.split(',').map(|c| c.trim().trim_matches('"')).collect();
        let cell = |c: usize| cells.get(c).copied().unwrap_or("");
        let raw = cell(submit_col);
        let submit =
            parse_time(raw).ok_or_else(|| at(idx + 1, format!("submit `{raw}` is neither seconds nor a timestamp")))?;
        let workers = cell(workers_col).parse::<f64>().ok().filter(|w| *w >= 1.0 && w.is_finite());
        let duration = cell(duration_col).parse::<f64>().ok().filter(|d| *d > 0.0 && d.is_finite());
        match (workers, duration) {
            (Some(w), Some(d)) => rows.push(Row { submit, duration: d, workers: w.min(f64::from(u32::MAX)) as u32 }),
            _ => dropped += 1,
        }
    }
    Ok((rows, dropped))
}

fn job(spec: &JobTraceSpec, i: usize, row: &Row, first: f64) -> JobSpec {
    let requested = spec.max_workers_cap.map_or(row.workers, |cap| row.workers.min(cap));
    let ceiling = (f64::from(requested) * spec.max_workers_factor).ceil() as u32;
    let max_workers = spec.max_workers_cap.map_or(ceiling, |cap| ceiling.min(cap)).max(requested);
    let duration = row.duration / spec.speedup;
    JobSpec {
        name: format!("{}-{i}", spec.name_prefix),
        arrival: Duration::from_secs_f64((row.submit - first) / spec.speedup),
        priority: spec.priority,
        weight: 1.0,
        worker: spec.worker,
        min_workers: spec.min_workers.min(requested),
        max_workers,
        gang_workers: Some(requested),
        rescale_cost: spec.rescale_cost,
        throughput_per_worker: 1.0,
        scaling_efficiency: spec.scaling_efficiency,
        work: Some(duration * f64::from(requested).powf(spec.scaling_efficiency)),
        release_time: None,
        release_in_place: false,
        checkpoint_interval: JobSpec::DEFAULT_CHECKPOINT_INTERVAL,
    }
}
