//! Replays of `colocate-usage`: BestEffort workers on the batch capacity colocate publishes, what
//! they get of the CPU, and the kubelet's memory evictions.

use super::policy::Policy;
use super::tests::{replay, spike};

/// The spike of `tests::spike` with 8 GiB nodes and workers of `worker_gi` GiB.
fn spike_with_memory(worker_gi: u32) -> String {
    spike("", "")
        .replace("allocatable: {cpu: \"8\", memory: 32Gi}", "allocatable: {cpu: \"8\", memory: 8Gi}")
        .replace("worker: {cpu: \"1\", memory: 1Gi}", &format!("worker: {{cpu: \"1\", memory: {worker_gi}Gi}}"))
}

#[test]
fn best_effort_workers_use_what_online_pods_leave_and_never_hold_them_up() {
    let usage = replay(&spike("", ""), Policy::ColocateUsage).result;
    let requests = replay(&spike("", ""), Policy::Colocate).result;
    let alone = replay(&spike("", ""), Policy::OnlineOnly).result;
    // Workers request no CPU: allocation is the services' alone, and no online pod waits.
    assert!((usage.avg_cpu_allocation - alone.avg_cpu_allocation).abs() < 1e-9, "{usage:?}");
    assert_eq!(usage.pending_online_pod_s, alone.pending_online_pod_s);
    assert_eq!(usage.slo_violation_s, alone.slo_violation_s);
    assert_eq!((usage.forced_preemptions, usage.batch_evictions), (0, 0));
    // They use the CPU the services requested and left idle.
    assert!(usage.avg_cpu_usage > requests.avg_cpu_usage, "{} vs {}", usage.avg_cpu_usage, requests.avg_cpu_usage);
    assert!(usage.avg_cpu_usage <= 1.0);
    // When the load triples, the online pods take CPU from them before they are released.
    let got = usage.worker_cpu_received.expect("BestEffort workers ran");
    assert!(got > 0.5 && got < 1.0, "{got}");
    assert_eq!(requests.worker_cpu_received, None);
}

#[test]
fn the_kubelet_evicts_best_effort_workers_where_online_memory_grows_into_theirs() {
    // 2-GiB workers: the node's batch memory holds three beside two 1-GiB replicas. The HPA's
    // four more replicas bind at once (the scheduler does not see workers' memory), before
    // any release takes effect.
    let run = replay(&spike_with_memory(2), Policy::ColocateUsage).result;
    assert!(run.batch_evictions > 0, "{run:?}");
    assert_eq!(run.forced_preemptions, run.scheduler_preemptions + run.batch_evictions);
    assert_eq!(run.pending_online_pod_s, replay(&spike_with_memory(2), Policy::OnlineOnly).result.pending_online_pod_s);
}

#[test]
fn workers_that_request_cpu_get_all_of_it() {
    let run = replay(&spike("", ""), Policy::Preemption).result;
    assert_eq!(run.worker_cpu_received, None);
    assert!(run.avg_cpu_usage < run.avg_cpu_allocation, "{run:?}");
}

/// A window under `colocate-usage` starts with no worker (BestEffort workers fit only into the
/// batch capacity the controller publishes once it runs): the controller starts the job in its
/// warm-up, and the spike inside the window shrinks it. With no CPU overcommit: the six
/// workers would otherwise be kept through the squeeze, within `usage_cpu_overcommit`.
#[test]
fn a_window_under_usage_mode_is_filled_by_the_controller_and_shrinks_on_the_spike() {
    use super::window::{replay_window, WindowSettings};
    use super::Scenario;
    let yaml = format!("{}controller: {{usage_cpu_overcommit: 0}}\n", spike("", ""));
    let scenario = Scenario::parse(std::path::Path::new("tiny.yaml"), &yaml).unwrap();
    let settings = WindowSettings {
        from_s: 55.0,
        to_s: 120.0,
        warmup_s: 40.0,
        load_signal: true,
        latency_signal: false,
        tie_draw: 0,
        usage_scrape_phase_s: None,
    };
    let figures = replay_window(&scenario, Policy::ColocateUsage, &settings);
    let first = figures.series.first().expect("a step in the window").workers;
    let last = figures.series.last().expect("a step in the window").workers;
    assert!(first > 0, "no worker running as the window opens: {:?}", &figures.series[..3]);
    assert!(last < first, "the spike shrank nothing: {first} -> {last}");
    assert_eq!((figures.online_unschedulable_pod_s, figures.scheduler_preemptions), (0.0, 0));
}

/// The pods a usage query answers and what they report come from the same query. Sampled once
/// a second, the controller reads a usage scrape up to a second after Prometheus took it; had it
/// counted the pods scraped twice by the *decision's* time with the *previous* sample's usage,
/// the replicas the HPA had just added would report the share the older pods served alone (the
/// flash crowd's step to 50 read as twice its CPU), and whether the jobs shrank would hang on
/// where the sampler's ticks fell against the scrapes.
#[test]
fn where_the_samplers_ticks_fall_against_the_usage_scrapes_does_not_shrink_the_jobs() {
    use super::window::{replay_window, WindowSettings};
    use super::Scenario;
    let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/flash-crowd.yaml"));
    let scenario = Scenario::load(path).unwrap();
    let fewest_workers = |warmup_s: f64| {
        let settings = WindowSettings {
            from_s: 465.0,
            to_s: 585.0,
            warmup_s,
            load_signal: false,
            latency_signal: false,
            tie_draw: 0,
            usage_scrape_phase_s: Some(13.94),
        };
        let figures = replay_window(&scenario, Policy::ColocateUsage, &settings);
        figures.series.iter().map(|s| s.workers).min().expect("a step in the window")
    };
    let fewest: Vec<u32> = [120.25, 120.5, 120.75, 121.0].into_iter().map(fewest_workers).collect();
    assert!(fewest.iter().all(|&n| n == fewest[0]), "fewest workers by the sampler's offset: {fewest:?}");
    assert!(fewest[0] > 40, "the spike emptied the jobs: {fewest:?}");
}
