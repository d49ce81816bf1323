//! What replay refuses up front because the machine could not hold it: a scenario whose timeline,
//! cluster or pods would outgrow memory is refused with the key at fault and what it would need,
//! rather than aborting mid-way on a failed allocation (`duration: 100000d` at a 1 s step once
//! asked for 829 GB) or growing for minutes with no word.

use super::report::TimelineRow;
use super::spec::ScenarioFile;

/// Steps replay plays: one timeline row per step and policy is kept for the report and chart
/// (a 24 h day at 1 s is 86,400; this is 11.6 days at 1 s, a year at 32 s).
pub const MAX_STEPS: u64 = 1_000_000;
/// Nodes in the cluster: each step visits every node.
pub const MAX_NODES: u64 = 10_000;
/// Pods at once: every service at `max_replicas` and every job at `max_workers`.
pub const MAX_PODS: u64 = 1_000_000;

/// The policies a default `replay` plays side by side, each with its own timeline.
const POLICIES: u64 = super::policy::Policy::ALL.len() as u64;

/// The first limit `s` breaks, as (key, problem).
pub fn check(s: &ScenarioFile) -> Result<(), (String, String)> {
    let step_ns = s.step.as_nanos().max(1);
    let steps = u64::try_from(s.duration.as_nanos() / step_ns).unwrap_or(u64::MAX);
    if steps > MAX_STEPS {
        let row = std::mem::size_of::<TimelineRow>() as u64 + 32 * s.services.len() as u64 + 4 * s.jobs.len() as u64;
        let need = steps.saturating_mul(row).saturating_mul(POLICIES);
        return Err((
            "duration".into(),
            format!(
                "{:?} at a step of {:?} is {steps} steps; replay keeps a timeline row per step and policy \
                 (about {} for {POLICIES} policies) and plays at most {MAX_STEPS} steps: use a coarser `step` \
                 or a shorter `duration`",
                s.duration,
                s.step,
                human_bytes(need)
            ),
        ));
    }
    let nodes: u64 = s.cluster.nodes.iter().map(|p| u64::from(p.count)).sum();
    if nodes > MAX_NODES {
        let (i, _) = s.cluster.nodes.iter().enumerate().max_by_key(|(_, p)| p.count).expect("validated: a pool");
        return Err((
            format!("cluster.nodes[{i}].count"),
            format!("{nodes} nodes in all; replay plays at most {MAX_NODES} (each step visits every node)"),
        ));
    }
    // Each service at max_replicas and each job at max_workers; the key named is the largest.
    let counts =
        s.services.iter().enumerate().map(|(i, svc)| (format!("services[{i}].hpa.max_replicas"), svc.hpa.max_replicas));
    let counts =
        counts.chain(s.jobs.iter().enumerate().map(|(i, j)| (format!("jobs[{i}].max_workers"), j.max_workers)));
    let counts: Vec<(String, u32)> = counts.collect();
    let pods: u64 = counts.iter().map(|(_, n)| u64::from(*n)).sum();
    if pods > MAX_PODS {
        let (key, _) = counts.iter().max_by_key(|(_, n)| *n).expect("pods above 0");
        return Err((key.clone(), format!("up to {pods} pods at once in all; replay holds at most {MAX_PODS}")));
    }
    Ok(())
}

fn human_bytes(b: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    if b as f64 >= GIB {
        format!("{:.0} GiB", b as f64 / GIB)
    } else {
        format!("{:.0} MiB", b as f64 / (1u64 << 20) as f64)
    }
}
