//! Unit tests of `capacity: usage`: training is given what online and system pods leave unused,
//! published as each node's batch capacity.

use super::test_support::*;
use super::*;

fn usage() -> Config {
    Config { capacity: CapacityMode::Usage, usage_cpu_margin: 0.0, usage_memory_margin: 0.0, ..eager() }
}

/// `pod` using `cpu` millicores and `gi` GiB.
fn using(pod: Pod, cpu: i64, gi: i64) -> Pod {
    Pod { usage: Some(res(cpu, gi)), ..pod }
}

/// n1 (16 CPU, 64 GiB): web-0 requests 8 CPU and 8 GiB and uses 3 CPU; a daemon requests and
/// uses 1 CPU. Job a has 2-CPU, 4-GiB workers (max 8) and none yet.
fn idle_request(web_usage: Option<Resources>) -> Snapshot {
    let web = Pod { usage: web_usage, ..online("web-0", "web", "n1", res(8000, 8)) };
    snap(
        100,
        vec![node("n1", 16_000, 64)],
        vec![web, using(system("ds", "n1", res(1000, 1)), 1000, 1)],
        vec![service("web", res(8000, 8))],
        vec![job("a", res(2000, 4), 1, 8, 0)],
    )
}

#[test]
fn usage_mode_gives_training_what_online_pods_request_and_leave_idle() {
    let requests = decide_once(eager(), &idle_request(Some(res(3000, 8))));
    // Requests: 16 - 8 - 1 = 7 CPU, three 2-CPU workers.
    assert_eq!(move_of(&requests, "a"), (0, 3));
    assert_eq!(node_cap(&requests, "n1").batch, None);
    let usage = decide_once(usage(), &idle_request(Some(res(3000, 8))));
    // Usage: 16 - 3 - 1 = 12 CPU, six workers; published as the node's batch capacity.
    assert_eq!(move_of(&usage, "a"), (0, 6));
    assert_eq!(node_cap(&usage, "n1").batch, Some(res(12_000, 64 - 8 - 1)));
}

#[test]
fn a_pod_whose_usage_is_unknown_holds_its_request() {
    let d = decide_once(usage(), &idle_request(None));
    assert_eq!(node_cap(&d, "n1").batch, Some(res(7000, 55)));
    assert_eq!(move_of(&d, "a"), (0, 3));
}

/// A replica of an autoscaled service that is not measured yet (new, or scraped once) counts at
/// the HPA's target, as one still to come does: the HPA added it to bring its service's pods
/// there. Its memory counts in full.
#[test]
fn a_replica_not_measured_yet_holds_its_hpas_target() {
    let mut s = idle_request(None);
    let metric = HpaMetric { current: 0.6, target: 0.6 };
    s.services[0].hpa = Some(Hpa { metric: Some(metric), ..hpa(1, 10, 1, 1) });
    let d = decide_once(usage(), &s);
    // 16 - 8 x 0.6 - 1 = 10.2 CPU; 64 - 8 - 1 GiB.
    assert_eq!(node_cap(&d, "n1").batch, Some(res(10_200, 55)));
    assert_eq!(move_of(&d, "a"), (0, 5));
}

#[test]
fn memory_counts_at_the_larger_of_request_and_usage() {
    // web-0 uses 20 GiB of its 8: batch memory is 64 - 20 - 1 = 43 GiB.
    let d = decide_once(usage(), &idle_request(Some(res(3000, 20))));
    assert_eq!(node_cap(&d, "n1").batch, Some(res(12_000, 43)));
    // And a worker needing 4 GiB fits ten times in 43 GiB: CPU (six) binds, not memory.
    assert_eq!(move_of(&d, "a"), (0, 6));
}

#[test]
fn the_usage_margins_come_off_cpu_and_memory_up_to_what_usage_measures() {
    let config = Config { usage_cpu_margin: 0.25, usage_memory_margin: 0.1, ..usage() };
    let d = decide_once(config.clone(), &idle_request(Some(res(3000, 8))));
    // CPU: 12 - 4; memory: 55 GiB - 6.4 GiB (a tenth of 64), floored to whole MiB.
    let batch = node_cap(&d, "n1").batch.unwrap();
    assert_eq!(batch.cpu_milli, 8000);
    assert_eq!(batch.memory_bytes, (55 * GI - (64 * GI) / 10) / MI * MI);
    assert_eq!(move_of(&d, "a"), (0, 4));
    // The CPU margin takes at most what usage reclaims (web-0 uses 7 of its 8 CPU: 1), so no
    // node has less CPU for training than requests mode gives it; memory's is whole.
    let big = Config { usage_cpu_margin: 0.5, usage_memory_margin: 0.5, ..config };
    let d = decide_once(big, &idle_request(Some(res(7000, 8))));
    assert_eq!(node_cap(&d, "n1").batch, Some(res(16_000 - 7000 - 1000 - 1000, 55 - 32)));
}

/// Workers in usage mode request batch resources only: they hold no room from the scheduler's
/// view, so a coming online pod does not need them to leave for the scheduler's sake, only for
/// the CPU it will use.
#[test]
fn workers_hold_no_scheduler_room_and_coming_pods_hold_what_they_will_use() {
    let w = res(2000, 4);
    let web = |name: &str| using(online(name, "web", "n1", res(4000, 4)), 2400, 4);
    let mut svc = service_with_hpa("web", res(4000, 4), 2, 3);
    svc.hpa.as_mut().unwrap().metric = Some(HpaMetric { current: 0.6, target: 0.6 });
    let s = snap(
        100,
        vec![node("n1", 16_000, 64)],
        [vec![web("web-0"), web("web-1")], workers("a", "n1", 0..5, w)].concat(),
        vec![svc],
        vec![job("a", w, 1, 8, 5)],
    );
    let d = decide_once(usage(), &s);
    let room = node_cap(&d, "n1");
    // The third replica is reserved at its request for the scheduler. Its service's load is
    // flat, so it takes a share of what the two use now and holds no training CPU of its own:
    // 16 - 2 x 2.4 = 11.2 CPU, enough for the five workers; its memory is held.
    assert_eq!(room.reserved_online, res(4000, 4));
    assert_eq!(room.training_room, res(11_200, 64 - 8 - 4));
    assert_no_intents(&d);
}

/// A rising load holds no CPU ahead in usage mode: BestEffort workers give CPU back the moment
/// the service's pods use it, so the batch capacity follows what they use now, and the
/// replicas the rising load implies hold their memory only.
#[test]
fn a_rising_load_holds_memory_ahead_but_no_cpu() {
    let w = res(1000, 1);
    let mut svc = service_with_hpa("web", res(4000, 4), 1, 1);
    let h = svc.hpa.as_mut().unwrap();
    h.metric = Some(HpaMetric { current: 0.5, target: 0.6 });
    // 100 -> 200 requests/s over 30 s: the trend implies more replicas within the lead.
    svc.load = (0..=6).map(|k| Sample { at: secs(70 + 5 * k), value: 100.0 + 100.0 * k as f64 / 6.0 }).collect();
    let pods = vec![using(online("web-0", "web", "n1", res(4000, 4)), 2000, 4)];
    let s = snap(100, vec![node("n1", 8000, 32), node("n2", 8000, 32)], pods, vec![svc], vec![job("a", w, 1, 16, 0)]);
    let d = decide_once(usage(), &s);
    let coming = need(&d, "web").missing();
    assert!(coming > 0, "the rising load implies replicas to come");
    let (n1, n2) = (node_cap(&d, "n1").batch.unwrap(), node_cap(&d, "n2").batch.unwrap());
    // All CPU but what web-0 uses; all memory but web-0's 4 GiB and 4 GiB per replica to come.
    assert_eq!(n1.cpu_milli + n2.cpu_milli, 16_000 - 2000);
    assert_eq!(n1.memory_bytes + n2.memory_bytes, 64 * GI - 4 * GI - i64::from(coming) * 4 * GI);
}

/// The node carries what it was last written; a rise within the threshold is not written, and
/// training is held to what the node carries, so the scheduler can place every worker planned.
#[test]
fn training_is_held_to_the_batch_capacity_the_node_carries() {
    let mut s = idle_request(Some(res(3000, 8)));
    s.nodes[0].batch = Some(res(11_000, 55));
    let d = decide_once(usage(), &s);
    // Should be 12 CPU: 1 CPU above 11, within 2% of the node's 16 CPU (and 0.32 CPU), so it
    // would be written...
    assert_eq!(node_cap(&d, "n1").batch, Some(res(12_000, 55)));
    // ...but with a 10% threshold (1.6 CPU) it stays at 11 (five workers).
    let d = decide_once(Config { batch_rise_threshold: 0.1, ..usage() }, &s);
    assert_eq!(node_cap(&d, "n1").batch, Some(res(11_000, 55)));
    assert_eq!(move_of(&d, "a"), (0, 5));
    // A fall is written at once.
    s.nodes[0].batch = Some(res(14_000, 55));
    let d = decide_once(usage(), &s);
    assert_eq!(node_cap(&d, "n1").batch, Some(res(12_000, 55)));
    assert_eq!(move_of(&d, "a"), (0, 6));
}

/// Memory cannot be taken back: when online memory grows into what workers hold, the job on
/// that node shrinks through its master before the kubelet would evict.
#[test]
fn online_memory_growth_shrinks_the_workers_on_that_node() {
    let w = res(1000, 8);
    let pods = [
        vec![using(online("web-0", "web", "n1", res(2000, 8)), 1000, 30)],
        workers("a", "n1", 0..4, w),
        workers("a", "n2", 4..8, w),
    ]
    .concat();
    let s = snap(
        100,
        vec![node("n1", 16_000, 64), node("n2", 16_000, 64)],
        pods,
        vec![service("web", res(2000, 8))],
        vec![job("a", w, 1, 8, 8)],
    );
    let d = decide_once(usage(), &s);
    // n1 leaves 64 - 30 = 34 GiB: four 8-GiB workers fit, and fit still; at 40 GiB used, only three.
    assert_no_intents(&d);
    let mut s = s;
    s.pods[0].usage = Some(res(1000, 40));
    let d = decide_once(usage(), &s);
    let i = the_intent(&d, "a");
    assert_eq!((i.from, i.target), (8, 7));
    assert_eq!(i.release_nodes, ["n1"]);
}

#[test]
fn requests_mode_ignores_usage() {
    let with = decide_once(eager(), &idle_request(Some(res(3000, 8))));
    let without = decide_once(eager(), &idle_request(None));
    assert_eq!(with.intents, without.intents);
    assert_eq!(with.nodes, without.nodes);
}

/// n1: web-0 using 1 CPU beside four BestEffort workers of job a; web's p99 is 120 ms (slack
/// -0.2), with no scale-up to explain it.
fn violated_beside_best_effort(now: u64) -> Snapshot {
    let w = res(1000, 1);
    let mut s = snap(
        now,
        vec![node("n1", 8000, 32)],
        [vec![using(online("web-0", "web", "n1", res(1000, 1)), 1000, 1)], workers("a", "n1", 0..4, w)].concat(),
        vec![service_with_p99("web", res(1000, 1), Some(120))],
        vec![job("a", w, 1, 4, 4)],
    );
    s.nodes[0].batch = Some(res(7000, 31));
    s
}

/// BestEffort workers get CPU only when online pods leave it idle: a guard shrink frees none
/// for the service, so in usage mode the guard holds growth and shrinks only where
/// `usage_latency_shrink_fraction` asks it to.
#[test]
fn the_latency_guard_shrinks_best_effort_workers_only_when_configured() {
    let mut core = Core::new(usage());
    assert_no_intents(&core.decide(&violated_beside_best_effort(100)));
    assert_no_intents(&core.decide(&violated_beside_best_effort(115)));
    let mut core = Core::new(Config { usage_latency_shrink_fraction: 0.25, ..usage() });
    let d = core.decide(&violated_beside_best_effort(100));
    let i = the_intent(&d, "a");
    assert_eq!((i.from, i.target, i.reason), (4, 3, Reason::LatencyGuard));
}

/// n1 (8 CPU): web-0 using `web_milli` beside four 1-CPU BestEffort workers of job a.
fn squeezed(web_milli: i64) -> Snapshot {
    let w = res(1000, 1);
    let mut s = snap(
        100,
        vec![node("n1", 8000, 32)],
        [vec![using(online("web-0", "web", "n1", res(1000, 1)), web_milli, 1)], workers("a", "n1", 0..4, w)].concat(),
        vec![service("web", res(1000, 1))],
        vec![job("a", w, 1, 4, 4)],
    );
    s.nodes[0].batch = Some(res(4000, 31));
    s
}

/// A CPU squeeze within `usage_cpu_overcommit` of the node's batch CPU costs the workers there
/// only pace (the kernel serves web first); a shrink would pause the whole job. Beyond it, they
/// shrink to what the node leaves them `1 / (1 + overcommit)` of.
#[test]
fn best_effort_workers_are_kept_through_a_squeeze_within_the_overcommit() {
    let config = Config { usage_cpu_overcommit: 1.0, ..usage() };
    // 8 - 6 = 2 CPU left for 4 CPU of workers: half of what they ask, kept.
    let d = decide_once(config.clone(), &squeezed(6000));
    assert_no_intents(&d);
    assert_eq!(node_cap(&d, "n1").batch.unwrap().cpu_milli, 2000, "the node carries what is left");
    // 8 - 6.5 = 1.5 CPU left: workers of 3 CPU get half of it, one goes.
    let d = decide_once(config.clone(), &squeezed(6500));
    assert_eq!(move_of(&d, "a"), (4, 3));
    // The shrink says what took the room: web's usage, not another job.
    let i = the_intent(&d, "a");
    assert_eq!(i.reason, Reason::OnlineHeadroom, "{}", i.why);
    assert!(i.why.contains("n1: online and system pods use 6.5 CPU"), "{}", i.why);
    // Nothing left: a worker kept there would stall the job, so none is.
    assert_eq!(move_of(&decide_once(config, &squeezed(8000)), "a"), (4, 0));
    // Without the overcommit the first squeeze shrinks too.
    let strict = Config { usage_cpu_overcommit: 0.0, ..usage() };
    assert_eq!(move_of(&decide_once(strict, &squeezed(4500)), "a"), (4, 3));
}
