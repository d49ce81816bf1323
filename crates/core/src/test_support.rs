//! Builders and assertion helpers shared by the core's unit tests (`tests.rs`,
//! `tests_rules.rs`). Conventions: CPU in millicores, memory in GiB.

use std::time::Duration;

use super::capacity::OnlineNeed;
use super::*;

pub(super) const MI: i64 = 1 << 20;

// ---------------------------------------------------------------------------------------------
// Builders
// ---------------------------------------------------------------------------------------------

pub(super) const GI: i64 = 1 << 30;

pub(super) fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// `cpu` millicores and `gi` GiB of memory.
pub(super) fn res(cpu: i64, gi: i64) -> Resources {
    Resources::new(cpu, gi * GI, 0)
}

pub(super) fn node(name: &str, cpu: i64, gi: i64) -> Node {
    Node { name: name.into(), allocatable: res(cpu, gi), schedulable: true, batch: None }
}

pub(super) fn cordoned(name: &str, cpu: i64, gi: i64) -> Node {
    Node { schedulable: false, ..node(name, cpu, gi) }
}

pub(super) fn pod(name: &str, class: PodClass, node: Option<&str>, requests: Resources) -> Pod {
    Pod {
        name: name.into(),
        class,
        node: node.map(Into::into),
        requests,
        ready: true,
        terminating_until: None,
        preempted: false,
        started: None,
        usage: None,
    }
}

/// A ready replica of `service` bound to `node`.
pub(super) fn online(name: &str, service: &str, node: &str, requests: Resources) -> Pod {
    pod(name, PodClass::Online { service: service.into() }, Some(node), requests)
}

/// A replica of `service` waiting for the scheduler.
pub(super) fn pending_online(name: &str, service: &str, requests: Resources) -> Pod {
    Pod { ready: false, ..pod(name, PodClass::Online { service: service.into() }, None, requests) }
}

/// A DaemonSet or other unmanaged pod.
pub(super) fn system(name: &str, node: &str, requests: Resources) -> Pod {
    pod(name, PodClass::System, Some(node), requests)
}

/// Workers `{job}-{i}` for `i` in `ids`, bound to `node`.
pub(super) fn workers(job: &str, node: &str, ids: std::ops::Range<u32>, requests: Resources) -> Vec<Pod> {
    ids.map(|i| pod(&format!("{job}-{i}"), PodClass::Worker { job: job.into() }, Some(node), requests)).collect()
}

/// A service without HPA, load samples or latency.
pub(super) fn service(name: &str, replica: Resources) -> Service {
    Service { name: name.into(), replica, hpa: None, load: Vec::new(), latency: None, headroom_replicas: 0 }
}

pub(super) fn hpa(min: u32, max: u32, current: u32, desired: u32) -> Hpa {
    Hpa { min_replicas: min, max_replicas: max, current_replicas: current, desired_replicas: desired, metric: None }
}

/// A service whose HPA is at `current` and has decided on `desired`.
pub(super) fn service_with_hpa(name: &str, replica: Resources, current: u32, desired: u32) -> Service {
    Service { hpa: Some(hpa(1, 20, current, desired)), ..service(name, replica) }
}

/// A service reporting `p99_ms` (None: unknown) against a 100 ms SLO.
pub(super) fn service_with_p99(name: &str, replica: Resources, p99_ms: Option<u64>) -> Service {
    let latency = Latency { p99: p99_ms.map(Duration::from_millis), slo_p99: Duration::from_millis(100) };
    Service { latency: Some(latency), ..service(name, replica) }
}

/// Priority 0, weight 1, not rescaling, free to rescale (no pause).
pub(super) fn job(name: &str, worker: Resources, min: u32, max: u32, target: u32) -> Job {
    Job {
        name: name.into(),
        priority: 0,
        weight: 1.0,
        worker,
        min_workers: min,
        max_workers: max,
        target_workers: target,
        rescaling: false,
        rescale_cost: Duration::ZERO,
        release_latency: Duration::from_secs(2),
        work: None,
    }
}

pub(super) fn snap(now: u64, nodes: Vec<Node>, pods: Vec<Pod>, services: Vec<Service>, jobs: Vec<Job>) -> Snapshot {
    Snapshot { now: secs(now), nodes, pods, services, jobs }
}

/// Growth is not damped: one decision shows what the planner wants.
pub(super) fn eager() -> Config {
    Config { grow_stabilization: Duration::ZERO, ..Config::default() }
}

pub(super) fn decide_once(config: Config, s: &Snapshot) -> Decision {
    Core::new(config).decide(s)
}

// ---------------------------------------------------------------------------------------------
// Assertion helpers
// ---------------------------------------------------------------------------------------------

pub(super) fn intent<'a>(d: &'a Decision, job: &str) -> Option<&'a ScaleIntent> {
    d.intents.iter().find(|i| i.job == job)
}

#[track_caller]
pub(super) fn the_intent<'a>(d: &'a Decision, job: &str) -> &'a ScaleIntent {
    intent(d, job).unwrap_or_else(|| panic!("no intent for {job}: {:#?}", d.intents))
}

/// (from, target) of the job's intent.
#[track_caller]
pub(super) fn move_of(d: &Decision, job: &str) -> (u32, u32) {
    let i = the_intent(d, job);
    (i.from, i.target)
}

#[track_caller]
pub(super) fn assert_no_intents(d: &Decision) {
    assert!(d.intents.is_empty(), "expected no intents, got {:#?}", d.intents);
}

#[track_caller]
pub(super) fn node_cap<'a>(d: &'a Decision, node: &str) -> &'a NodeCapacity {
    d.nodes.iter().find(|n| n.node == node).unwrap_or_else(|| panic!("no node {node}"))
}

#[track_caller]
pub(super) fn need<'a>(d: &'a Decision, service: &str) -> &'a OnlineNeed {
    d.online_needs.iter().find(|n| n.service == service).unwrap_or_else(|| panic!("no need for {service}"))
}

/// n1 (8 CPU) with `bound` workers of job a (1 CPU each, max 8), `target` as the master says,
/// plus an optional daemon of `daemon` millicores.
pub(super) fn grow_cluster(now: u64, target: u32, bound: u32, daemon: i64) -> Snapshot {
    let w = res(1000, 1);
    let mut pods = workers("a", "n1", 0..bound, w);
    if daemon > 0 {
        pods.push(system("ds", "n1", res(daemon, 1)));
    }
    snap(now, vec![node("n1", 8000, 32)], pods, vec![], vec![job("a", w, 1, 8, target)])
}
