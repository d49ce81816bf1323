//! Runs every policy on one scenario side by side (one thread each, same seed) and gathers
//! the report.

use std::sync::atomic::{AtomicU64, Ordering};

use super::engine::World;
use super::policy::Policy;
use super::report::{PolicyIntent, Report, TimelineRow};
use super::scenario::Scenario;

pub struct ReplayOutput {
    pub report: Report,
    /// Per policy, same order as `report.results`.
    pub timelines: Vec<Vec<TimelineRow>>,
    /// The intents of the colocate policies (`colocate`, `colocate-usage`), each with its
    /// policy and time, in the order of `policies`; empty when neither was replayed.
    pub intents: Vec<PolicyIntent>,
}

/// Total steps of one policy run.
pub fn steps(scenario: &Scenario) -> u64 {
    (scenario.spec.duration.as_secs_f64() / scenario.spec.step.as_secs_f64()).ceil() as u64
}

/// Replays `policies` on `scenario`; `progress(done_steps)` is called from the worker threads
/// with the sum over all policies.
pub fn replay(scenario: &Scenario, policies: &[Policy], progress: &(dyn Fn(u64) + Sync)) -> ReplayOutput {
    let done = AtomicU64::new(0);
    let runs = std::thread::scope(|scope| {
        let handles: Vec<_> = policies
            .iter()
            .map(|&policy| {
                let done = &done;
                scope.spawn(move || {
                    let mut last = 0;
                    World::new(scenario, policy).run(&mut |k| {
                        // Report in chunks to keep the counter off the hot path.
                        if k - last >= 500 {
                            let total = done.fetch_add(k - last, Ordering::Relaxed) + k - last;
                            last = k;
                            progress(total);
                        }
                    })
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a replay thread panicked")).collect::<Vec<_>>()
    });
    progress(steps(scenario) * policies.len() as u64);
    let spec = &scenario.spec;
    let mut results = Vec::new();
    let mut timelines = Vec::new();
    let mut intents = Vec::new();
    for (policy, run) in policies.iter().zip(runs) {
        results.push(run.result);
        timelines.push(run.timeline);
        intents.extend(run.intents.into_iter().map(|(t, intent)| PolicyIntent { policy: policy.as_str(), t, intent }));
    }
    let report = Report {
        version: 1,
        scenario: spec.name.clone(),
        duration_s: spec.duration.as_secs_f64(),
        step_s: spec.step.as_secs_f64(),
        seed: spec.seed,
        target_utilization: spec.controller.target_utilization,
        results,
    };
    ReplayOutput { report, timelines, intents }
}
