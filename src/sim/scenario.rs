//! Scenario format v1 (`docs/scenario-format.md`): parsing with the path and line of every error,
//! the traces read, and the checks serde cannot express. The types are in `spec.rs` (re-exported
//! here).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::job_trace;
use super::load::LoadCurve;
pub use super::spec::*;
use crate::yaml::{self, InputError as ScenarioError};

/// A validated scenario with its load curves loaded.
#[derive(Debug)]
pub struct Scenario {
    pub path: PathBuf,
    pub spec: ScenarioFile,
    /// One per service, same order.
    pub loads: Vec<LoadCurve>,
    /// Things that are allowed but probably not meant (a job whose worker fits on no node).
    pub warnings: Vec<String>,
}

impl Scenario {
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = yaml::read(path, "the scenario")?;
        Scenario::parse(path, &text)
    }

    /// Parses `text` as if read from `path` (trace files resolve relative to its folder).
    pub fn parse(path: &Path, text: &str) -> Result<Scenario, ScenarioError> {
        let mut spec: ScenarioFile = yaml::parse(path, text)?;
        let invalid = |key: String, message: String| ScenarioError::invalid(path, text, key, message);
        let base = path.parent().unwrap_or(Path::new("."));
        let mut warnings = Vec::new();
        if let Some(trace) = &spec.job_trace {
            let traced = job_trace::expand(trace, base).map_err(|(k, m)| invalid(k, m))?;
            if let Some(j) = traced.jobs.iter().find(|t| spec.jobs.iter().any(|j| j.name == t.name)) {
                let problem = format!("trace job `{}` has the name of a job in jobs:; choose another prefix", j.name);
                return Err(invalid("job_trace.name_prefix".into(), problem));
            }
            if traced.dropped > 0 {
                warnings.push(format!(
                    "job_trace: {} rows dropped (workers 0, empty or not a number, or no positive duration)",
                    traced.dropped
                ));
            }
            spec.jobs.extend(traced.jobs);
        }
        validate(&spec).map_err(|(k, m)| invalid(k, m))?;
        let mut loads = Vec::new();
        for (i, svc) in spec.services.iter().enumerate() {
            loads.push(
                LoadCurve::from_spec(&svc.load, base).map_err(|(k, m)| invalid(format!("services[{i}].load{k}"), m))?,
            );
        }
        warnings.extend(self::warnings(&spec));
        Ok(Scenario { path: path.to_path_buf(), spec, loads, warnings })
    }
}

/// Legal but suspicious: reported, the replay still runs.
fn warnings(s: &ScenarioFile) -> Vec<String> {
    let sys = s.cluster.system_reserved.map(|r| r.resources()).unwrap_or_default();
    let mut out = Vec::new();
    for (i, j) in s.jobs.iter().enumerate() {
        let w = j.worker.resources();
        if !s.cluster.nodes.iter().any(|p| (w + sys).fits_in(&p.allocatable.resources())) {
            out.push(format!("jobs[{i}].worker: {w} fits on no node; `{}` will never run", j.name));
        }
    }
    out
}

/// Checks beyond types: ranges, cross-field rules, uniqueness. Returns (key path, problem).
fn validate(s: &ScenarioFile) -> Result<(), (String, String)> {
    let err = |k: &str, m: String| Err((k.to_string(), m));
    if s.version != 1 {
        return err("version", format!("{} is not supported; this build reads version 1", s.version));
    }
    if s.name.trim().is_empty() {
        return err("name", "must not be empty".into());
    }
    if s.duration.is_zero() {
        return err("duration", "must be longer than 0s".into());
    }
    if s.step.is_zero() || s.step > s.duration {
        return err("step", format!("must be longer than 0s and at most the duration ({:?})", s.duration));
    }
    if let Err(e) = s.controller.validate() {
        return err(&format!("controller.{}", e.key), e.problem);
    }
    if s.cluster.nodes.is_empty() {
        return err("cluster.nodes", "needs at least one node pool".into());
    }
    let mut pools = HashSet::new();
    for (i, p) in s.cluster.nodes.iter().enumerate() {
        if !pools.insert(p.pool.as_str()) {
            return err(&format!("cluster.nodes[{i}].pool"), format!("`{}` is used twice", p.pool));
        }
        if p.count == 0 {
            return err(&format!("cluster.nodes[{i}].count"), "must be at least 1".into());
        }
        let a = p.allocatable.resources();
        if a.cpu_milli <= 0 {
            return err(&format!("cluster.nodes[{i}].allocatable.cpu"), "must be set and above 0".into());
        }
    }
    let sys = s.cluster.system_reserved.map(|r| r.resources()).unwrap_or_default();
    if !s.cluster.nodes.iter().any(|p| sys.fits_in(&p.allocatable.resources())) {
        return err("cluster.system_reserved", format!("{sys} does not fit on any node"));
    }
    let mut names = HashSet::new();
    for (i, svc) in s.services.iter().enumerate() {
        let at = |k: &str| format!("services[{i}].{k}");
        if !names.insert(svc.name.as_str()) {
            return err(&at("name"), format!("`{}` is used twice", svc.name));
        }
        if svc.replica.resources().cpu_milli <= 0 {
            return err(&at("replica.cpu"), "must be set and above 0 (the HPA scales on CPU utilization)".into());
        }
        if !(svc.replica_capacity_rps > 0.0 && svc.replica_capacity_rps.is_finite()) {
            return err(&at("replica_capacity_rps"), format!("{} must be above 0", svc.replica_capacity_rps));
        }
        if svc.latency.slo_p99 <= svc.latency.base_p99 {
            return err(&at("latency.slo_p99"), "must be above base_p99".into());
        }
        let h = &svc.hpa;
        if h.min_replicas == 0 {
            return err(&at("hpa.min_replicas"), "must be at least 1".into());
        }
        if h.min_replicas > h.max_replicas {
            return err(
                &at("hpa.min_replicas"),
                format!("{} is above max_replicas ({})", h.min_replicas, h.max_replicas),
            );
        }
        if !(h.target_utilization > 0.0 && h.target_utilization <= 1.0) {
            return err(&at("hpa.target_utilization"), format!("{} is outside (0, 1]", h.target_utilization));
        }
        if !(0.0..1.0).contains(&h.tolerance) {
            return err(&at("hpa.tolerance"), format!("{} is outside [0, 1)", h.tolerance));
        }
        if h.sync_period.is_zero() {
            return err(&at("hpa.sync_period"), "must be longer than 0s".into());
        }
        if h.metrics_resolution.is_zero() {
            return err(&at("hpa.metrics_resolution"), "must be longer than 0s".into());
        }
    }
    names.clear();
    for (i, j) in s.jobs.iter().enumerate() {
        let at = |k: &str| format!("jobs[{i}].{k}");
        if !names.insert(j.name.as_str()) {
            return err(&at("name"), format!("`{}` is used twice", j.name));
        }
        let w = j.worker.resources();
        if w.is_zero() {
            return err(&at("worker"), "requests nothing; give it cpu, memory or nvidia.com/gpu".into());
        }
        if j.min_workers == 0 {
            return err(&at("min_workers"), "must be at least 1".into());
        }
        if j.min_workers > j.max_workers {
            return err(&at("min_workers"), format!("{} is above max_workers ({})", j.min_workers, j.max_workers));
        }
        if let Some(g) = j.gang_workers.filter(|g| !(j.min_workers..=j.max_workers).contains(g)) {
            return err(
                &at("gang_workers"),
                format!("{g} is outside [min_workers, max_workers] = [{}, {}]", j.min_workers, j.max_workers),
            );
        }
        if !(j.weight > 0.0 && j.weight.is_finite()) {
            return err(&at("weight"), format!("{} must be above 0", j.weight));
        }
        if !(j.throughput_per_worker >= 0.0 && j.throughput_per_worker.is_finite()) {
            return err(&at("throughput_per_worker"), format!("{} must be 0 or more", j.throughput_per_worker));
        }
        if !(j.scaling_efficiency > 0.0 && j.scaling_efficiency <= 1.0) {
            return err(&at("scaling_efficiency"), format!("{} is outside (0, 1]", j.scaling_efficiency));
        }
        if let Some(w) = j.work {
            if !(w > 0.0 && w.is_finite()) {
                return err(&at("work"), format!("{w} must be above 0"));
            }
        }
        let grace = s.baselines.termination_grace_period;
        if let Some(r) = j.release_time.filter(|r| *r > grace) {
            return err(
                &at("release_time"),
                format!(
                    "{r:?} is longer than baselines.termination_grace_period ({grace:?}): the kubelet kills a \
                     worker at the end of its grace period"
                ),
            );
        }
    }
    let o = &s.observation;
    if o.sample_interval.is_zero() {
        return err("observation.sample_interval", "must be longer than 0s".into());
    }
    if o.status_interval.is_zero() {
        return err("observation.status_interval", "must be longer than 0s".into());
    }
    if o.usage_scrape_interval.is_zero() {
        return err("observation.usage_scrape_interval", "must be longer than 0s".into());
    }
    if o.scrape_interval.is_zero() || o.scrape_interval * 2 > o.load_window {
        return err(
            "observation.scrape_interval",
            format!(
                "{:?} must be longer than 0s and at most half of observation.load_window ({:?}): a rate needs two \
                 scrapes inside its window",
                o.scrape_interval, o.load_window
            ),
        );
    }
    super::limits::check(s)
}
