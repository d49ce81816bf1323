//! Unit tests of decision-core rules that `tests.rs` does not cover: reservation quanta, the
//! minimum growth step, starting jobs, the coalesced damping history, when the latency guard's
//! interval starts, and the equivalence of the indexed placement structures (`Placer`,
//! `SpreadIndex`) with the plain linear rules they speed up.
//!
//! Conventions as in `tests.rs`: CPU in millicores, memory in GiB unless a test says otherwise.

use std::cmp::Reverse;
use std::time::Duration;

use super::capacity::{node_rooms, online_needs, NodeRoom, OnlineNeed};
use super::damping::{GrowVerdict, Memory};
use super::fill::{fill_counts, water_fill, FillEntry};
use super::placer::{place_one, Holds, Placer};
use super::pod_index::PodIndex;
use super::replicas::OnlineCounts;
use super::test_support::*;
use super::*;

// ---------------------------------------------------------------------------------------------
// reserve_quantum: missing replicas are reserved in multiples of ceil(quantum * replicas).
// ---------------------------------------------------------------------------------------------

/// `bound` ready web replicas (0.5 CPU each) on one big node; the HPA is at `bound` and wants
/// `desired` (at most `max`). `rising` adds a metric below target (no forecast of its own) and
/// load samples rising by 10 rps every 10 s up to `now` = 1000 s.
fn quantum_cluster(bound: u32, desired: u32, max: u32, rising: bool) -> Snapshot {
    let replica = res(500, 1);
    let pods = (0..bound).map(|i| online(&format!("web-{i}"), "web", "n1", replica)).collect();
    let mut hpa = hpa(1, max, bound, desired);
    let mut load = Vec::new();
    if rising {
        hpa.metric = Some(HpaMetric { current: 0.3, target: 0.6 });
        load = (0..4).map(|k| Sample { at: secs(970 + 10 * k), value: 100.0 + 10.0 * k as f64 }).collect();
    }
    let web = Service { hpa: Some(hpa), load, ..service("web", replica) };
    snap(1000, vec![node("n1", 256_000, 1024)], pods, vec![web], vec![])
}

/// (expected replicas, rising) of `web` under `quantum`.
fn quantum_need(quantum: f64, s: &Snapshot) -> (u32, bool) {
    let config = Config { reserve_quantum: quantum, ..Config::default() };
    let index = PodIndex::new(s);
    let needs = online_needs(s, &OnlineCounts::of(s, &index), &config, &Default::default(), &Default::default());
    assert_eq!(needs.len(), 1, "{needs:#?}");
    (needs[0].expected, needs[0].rising)
}

#[test]
fn missing_replicas_round_up_to_whole_quanta() {
    // 20 replicas: a quantum of 10% is 2 pods. 3 missing are reserved as 4.
    assert_eq!(quantum_need(0.1, &quantum_cluster(20, 23, 100, false)), (24, false));
    // 1 missing is reserved as one quantum of 2.
    assert_eq!(quantum_need(0.1, &quantum_cluster(20, 21, 100, false)), (22, false));
    // A whole quantum stays as it is.
    assert_eq!(quantum_need(0.1, &quantum_cluster(20, 24, 100, false)), (24, false));
    // 25% of 20 is 5: 3 missing become 5, 6 missing become 10.
    assert_eq!(quantum_need(0.25, &quantum_cluster(20, 23, 100, false)), (25, false));
    assert_eq!(quantum_need(0.25, &quantum_cluster(20, 26, 100, false)), (30, false));
    // The quantum is rounded up: 10% of 7 replicas is one pod, so the reservation is exact.
    assert_eq!(quantum_need(0.1, &quantum_cluster(7, 10, 100, false)), (10, false));
    // 10% of 21 rounds up to 3: 2 missing become 3.
    assert_eq!(quantum_need(0.1, &quantum_cluster(21, 23, 100, false)), (24, false));
}

#[test]
fn zero_quantum_reserves_exactly_what_is_missing() {
    assert_eq!(quantum_need(0.0, &quantum_cluster(20, 23, 100, false)), (23, false));
    assert_eq!(quantum_need(0.0, &quantum_cluster(20, 21, 100, false)), (21, false));
    // A rising load adds no extra quantum when there are no quanta.
    assert_eq!(quantum_need(0.0, &quantum_cluster(20, 23, 100, true)), (23, true));
}

#[test]
fn rising_load_adds_one_more_quantum() {
    // 3 missing: two quanta of 2 as before, plus one for the rising load.
    assert_eq!(quantum_need(0.1, &quantum_cluster(20, 23, 100, true)), (26, true));
    // A whole quantum missing: still one more.
    assert_eq!(quantum_need(0.1, &quantum_cluster(20, 22, 100, true)), (24, true));
    // Nothing missing: nothing reserved, rising or not.
    assert_eq!(quantum_need(0.1, &quantum_cluster(20, 20, 100, true)), (20, true));
}

#[test]
fn quantum_rounding_never_exceeds_max_replicas() {
    // Rounding 3 missing to 4 would pass max_replicas 23.
    assert_eq!(quantum_need(0.1, &quantum_cluster(20, 23, 23, false)), (23, false));
    // With the rising-load quantum: 26 wanted, 25 allowed.
    assert_eq!(quantum_need(0.1, &quantum_cluster(20, 23, 25, true)), (25, true));
    // Below the ceiling nothing is cut.
    assert_eq!(quantum_need(0.1, &quantum_cluster(20, 23, 26, true)), (26, true));
}

#[test]
fn quantum_reservation_is_what_the_nodes_hold_for_online_pods() {
    let d = Core::new(Config::default()).decide(&quantum_cluster(20, 23, 100, true));
    let n1 = d.nodes.iter().find(|n| n.node == "n1").expect("n1");
    assert_eq!(n1.reserved_online, res(500, 1).times(6));
}

// ---------------------------------------------------------------------------------------------
// grow_min_gain: a grow must add ceil(current * grow_min_gain) workers (at least one).
// ---------------------------------------------------------------------------------------------

/// Damps one decision for a job at `current` workers (max `max`) with room for `possible`.
fn verdict(config: &Config, current: u32, max: u32, possible: u32) -> GrowVerdict {
    let a = job("a", res(1000, 1), 1, max, current);
    Memory::default().damp_growth(&a, possible, secs(100), config)
}

#[test]
fn grow_below_the_minimum_step_is_held_with_a_reason() {
    let config = eager();
    assert_eq!(
        verdict(&config, 20, 40, 21),
        GrowVerdict {
            allowed: 20,
            held_back: Some("+1 workers is less than the minimum step of 2 (10% of 20)".into()),
        }
    );
    assert_eq!(verdict(&config, 20, 40, 22), GrowVerdict { allowed: 22, held_back: None });
    // 10% of 11 rounds up to 2.
    assert_eq!(verdict(&config, 11, 40, 12).allowed, 11);
    assert_eq!(verdict(&config, 11, 40, 13).allowed, 13);
    // Below 10 workers the step is one worker.
    assert_eq!(verdict(&config, 9, 40, 10), GrowVerdict { allowed: 10, held_back: None });
    // A larger fraction: half of 6 is 3.
    let half = Config { grow_min_gain: 0.5, ..eager() };
    let v = verdict(&half, 6, 40, 8);
    assert_eq!(v.allowed, 6);
    assert!(v.held_back.as_deref().is_some_and(|h| h.contains("minimum step of 3 (50% of 6)")), "{v:?}");
    assert_eq!(verdict(&half, 6, 40, 9).allowed, 9);
}

#[test]
fn min_gain_of_zero_still_needs_one_worker() {
    let none = Config { grow_min_gain: 0.0, ..eager() };
    assert_eq!(verdict(&none, 50, 100, 51), GrowVerdict { allowed: 51, held_back: None });
    assert_eq!(verdict(&none, 50, 100, 50), GrowVerdict { allowed: 50, held_back: None });
}

#[test]
fn small_grow_that_reaches_max_workers_is_not_held() {
    let config = eager();
    assert_eq!(verdict(&config, 20, 21, 21), GrowVerdict { allowed: 21, held_back: None });
    let half = Config { grow_min_gain: 0.5, ..eager() };
    assert_eq!(verdict(&half, 6, 7, 7), GrowVerdict { allowed: 7, held_back: None });
    // Room beyond max_workers does not count: the planner never offers more than the max.
    assert_eq!(verdict(&half, 6, 8, 7).allowed, 6);
}

#[test]
fn job_at_zero_is_exempt_from_the_minimum_step() {
    let greedy = Config { grow_min_gain: 10.0, ..eager() };
    assert_eq!(verdict(&greedy, 0, 100, 1), GrowVerdict { allowed: 1, held_back: None });
    // The same gain holds a running job: 10 x 1 worker is the step.
    assert_eq!(verdict(&greedy, 1, 100, 5).allowed, 1);
    assert_eq!(verdict(&greedy, 1, 100, 11).allowed, 11);
}

#[test]
fn minimum_step_applies_to_whole_decisions() {
    // 20 one-CPU workers on a node with room for 21: no change. With room for 22: grow.
    let cluster = |cpu: i64| {
        let w = res(1000, 1);
        snap(0, vec![node("n1", cpu, 64)], workers("a", "n1", 0..20, w), vec![], vec![job("a", w, 1, 40, 20)])
    };
    assert_no_intents(&Core::new(eager()).decide(&cluster(21_000)));
    let d = Core::new(eager()).decide(&cluster(22_000));
    assert_eq!(move_of(&d, "a"), (20, 22));
    assert_eq!(intent(&d, "a").map(|i| i.reason), Some(Reason::Grow));
}

// ---------------------------------------------------------------------------------------------
// A job that is not running yet starts with all that fits, whatever grow_max_step says.
// ---------------------------------------------------------------------------------------------

#[test]
fn waiting_job_is_not_limited_by_grow_max_step() {
    let config = Config { grow_max_step: 1, ..Config::default() };
    let a = job("a", res(1000, 1), 2, 64, 0);
    assert_eq!(Memory::default().damp_growth(&a, 40, secs(0), &config), GrowVerdict { allowed: 40, held_back: None });
    // Once running, the same job grows one worker at a time.
    let running = job("a", res(1000, 1), 2, 64, 5);
    let mut memory = Memory::default();
    memory.damp_growth(&running, 40, secs(0), &config);
    assert_eq!(memory.damp_growth(&running, 40, secs(60), &config).allowed, 6);

    // Through the whole core, across three nodes with daemons taking 1 CPU each: 3 x 7 workers.
    let w = res(1000, 1);
    let nodes = vec![node("n1", 8000, 32), node("n2", 8000, 32), node("n3", 8000, 32)];
    let pods = ["n1", "n2", "n3"].iter().map(|n| system(&format!("ds-{n}"), n, res(1000, 1))).collect();
    let s = snap(0, nodes, pods, vec![], vec![job("a", w, 2, 64, 0)]);
    let d = Core::new(config).decide(&s);
    assert_eq!(move_of(&d, "a"), (0, 21));
    let i = intent(&d, "a").expect("intent");
    assert_eq!(i.reason, Reason::Start);
    assert!(!i.why.contains("held back"), "{}", i.why);
}

// ---------------------------------------------------------------------------------------------
// The damping history coalesces runs of equal values.
// ---------------------------------------------------------------------------------------------

#[test]
fn memory_stays_small_over_thousands_of_equal_decisions() {
    // A job held by its master's rescaling sees room for 8 every second for over an hour.
    let mut core = Core::new(Config::default());
    let held = |t: u64| {
        let mut s = grow_cluster(t, 2, 2, 0);
        s.jobs[0].rescaling = true;
        s
    };
    let mut after_100 = String::new();
    for t in 0..5000 {
        assert_no_intents(&core.decide(&held(t)));
        if t == 100 {
            after_100 = format!("{core:?}");
        }
    }
    // One entry for the whole run: the state after 5000 decisions is the state after 100.
    assert_eq!(format!("{core:?}"), after_100);
    // The run began long ago, so the room has been there for the whole window: the job grows
    // as soon as the master is done.
    let d = core.decide(&grow_cluster(5000, 2, 2, 0));
    assert_eq!(move_of(&d, "a"), (2, 8));
}

#[test]
fn growth_timing_is_right_after_a_long_run_of_equal_decisions() {
    // For over an hour a daemon leaves room for exactly the job's 5 workers (nothing to grow).
    let mut core = Core::new(Config::default());
    for t in 0..5000 {
        assert_no_intents(&core.decide(&grow_cluster(t, 5, 5, 3000)));
    }
    // The daemon leaves at 5000 s: room for 8. The 5 of the long run still hold until the
    // new room has been seen for the whole 60 s window.
    for t in 5000..5060 {
        assert_no_intents(&core.decide(&grow_cluster(t, 5, 5, 0)));
    }
    assert_eq!(move_of(&core.decide(&grow_cluster(5060, 5, 5, 0)), "a"), (5, 8));
}

#[test]
fn a_short_dip_after_a_long_run_is_remembered_for_the_window() {
    // Room for 8 for 50 minutes while the master is busy, so the job stays at 2.
    let mut core = Core::new(Config::default());
    let busy = |t: u64, daemon: i64| {
        let mut s = grow_cluster(t, 2, 2, daemon);
        s.jobs[0].rescaling = true;
        s
    };
    for t in 0..3000 {
        assert_no_intents(&core.decide(&busy(t, 0)));
    }
    // At 3000 s a daemon takes 4 CPU for one decision (room for 4), then leaves.
    assert_no_intents(&core.decide(&busy(3000, 4000)));
    for t in 3001..3030 {
        assert_no_intents(&core.decide(&busy(t, 0)));
    }
    // The master is free at 3030 s: only 4 have fitted throughout the window.
    let d = core.decide(&grow_cluster(3030, 2, 2, 0));
    assert_eq!(move_of(&d, "a"), (2, 4));
    assert!(intent(&d, "a").is_some_and(|i| i.why.contains("only 4 have fitted")), "{:#?}", d.intents);
    // Full growth once the dip has left the window (room for 8 again since 3001 s).
    assert_no_intents(&core.decide(&grow_cluster(3060, 4, 4, 0)));
    assert_eq!(move_of(&core.decide(&grow_cluster(3061, 4, 4, 0)), "a"), (4, 8));
}

// ---------------------------------------------------------------------------------------------
// The latency guard's interval starts only with a shrink that happens.
// ---------------------------------------------------------------------------------------------

/// web-0 on n1 with p99 120 ms (slack -0.2); job a's four 1-CPU workers on `workers_on`.
fn violated(now: u64, workers_on: &str, n: u32) -> Snapshot {
    let w = res(1000, 1);
    let latency = Latency { p99: Some(Duration::from_millis(120)), slo_p99: Duration::from_millis(100) };
    snap(
        now,
        vec![node("n1", 8000, 32), node("n2", 8000, 32)],
        [vec![online("web-0", "web", "n1", res(1000, 1))], workers("a", workers_on, 0..n, w)].concat(),
        vec![Service { latency: Some(latency), ..service("web", res(1000, 1)) }],
        vec![job("a", w, 1, n, n)],
    )
}

#[test]
fn guard_interval_starts_only_when_training_is_shrunk() {
    let mut core = Core::new(Config::default());
    // No training on web's node: nothing to shrink, and the interval does not start.
    assert_no_intents(&core.decide(&violated(100, "n2", 4)));
    assert_no_intents(&core.decide(&violated(101, "n2", 4)));
    // Training shows up on n1 five seconds later: it is shrunk at once, not at 115 s.
    let d = core.decide(&violated(105, "n1", 4));
    let i = intent(&d, "a").unwrap_or_else(|| panic!("no shrink at 105 s: {:#?}", d.intents));
    assert_eq!((i.from, i.target), (4, 3));
    assert_eq!(i.reason, Reason::LatencyGuard);
    assert_eq!(i.release_pods, ["a-3"]);
    // This shrink started the interval: the next one waits until 120 s.
    assert_no_intents(&core.decide(&violated(110, "n1", 3)));
    assert_no_intents(&core.decide(&violated(119, "n1", 3)));
    assert_eq!(move_of(&core.decide(&violated(120, "n1", 3)), "a"), (3, 2));
}

/// n1 (8 CPU): a-0 and b-0; n2 (3 CPU): b-1; 1-CPU workers. Job `a` was just granted the eight
/// free CPUs (target 9, its new pods not bound yet). Placed where they fit tightest, its starting
/// workers would fill n2 before b's running b-1 is kept there, and b-1 would be released for room
/// the grant had counted as b's (a live completion-split run did that). Running workers are kept
/// first: b keeps both, and a's eight still fit (2 on n2, 6 on n1).
#[test]
fn a_jobs_starting_workers_never_displace_another_jobs_running_ones() {
    let w = res(1000, 1);
    let granted = Job { weight: 10.0, ..job("a", w, 1, 10, 9) };
    let s = snap(
        100,
        vec![node("n1", 8000, 32), node("n2", 3000, 32)],
        [workers("a", "n1", 0..1, w), workers("b", "n1", 0..1, w), workers("b", "n2", 1..2, w)].concat(),
        vec![],
        vec![granted, job("b", w, 1, 10, 2)],
    );
    let d = decide_once(eager(), &s);
    assert!(d.intents.iter().all(|i| i.job != "b"), "b was shrunk: {:?}", d.intents);
    assert!(d.intents.iter().all(|i| i.job != "a" || i.target >= 9), "a lost its grant: {:?}", d.intents);
}

#[test]
fn a_new_jobs_floor_never_displaces_another_jobs_running_worker() {
    // `a` was admitted at a floor of 2 and has no pod bound yet; `b`, named after it, runs its
    // one worker on the tight node. Best fit would put a starting worker of `a` there.
    let w = res(1000, 1);
    let s = snap(
        100,
        vec![node("n1", 8000, 32), node("n2", 1000, 32)],
        workers("b", "n2", 0..1, w),
        vec![],
        vec![job("a", w, 2, 10, 2), job("b", w, 1, 10, 1)],
    );
    let d = decide_once(eager(), &s);
    assert!(d.intents.iter().all(|i| i.job != "b" || i.target >= 1), "b was shrunk: {:?}", d.intents);
    assert!(d.intents.iter().all(|i| i.job != "a" || i.target >= 2), "a lost its floor: {:?}", d.intents);
    assert!(
        d.intents.iter().all(|i| i.release_pods.iter().all(|r| !r.starts_with("b-"))),
        "b's worker was released: {:?}",
        d.intents
    );
}

// ---------------------------------------------------------------------------------------------
// Placement equivalence: the indexed structures pick what the linear rules pick.
// ---------------------------------------------------------------------------------------------

/// xorshift64: deterministic, good enough to shuffle test inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in 0..n.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len() as u64) as usize]
    }
}

fn room(allocatable: Resources, training_room: Resources) -> NodeRoom {
    NodeRoom {
        schedulable: true,
        allocatable,
        free: training_room,
        reserved: Resources::ZERO,
        training_room,
        keep_cpu_slack: 0,
        hold_growth: false,
        pressure: Vec::new(),
    }
}

/// 20-50 random rooms: CPU nodes and GPU nodes of a few sizes, partly used (some over-committed),
/// some cordoned or under a growth hold, and random room held by lower-priority workers.
/// Ties on CPU and memory between nodes with different GPU room are common (sizes repeat), so
/// the GPU tie-break is exercised too.
fn random_rooms(rng: &mut Rng) -> (Vec<NodeRoom>, Vec<Resources>) {
    let n = 20 + rng.below(31) as usize;
    let mut rooms = Vec::with_capacity(n);
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let gpu = if rng.chance(35) { rng.pick(&[2, 4, 8]) } else { 0 };
        let cpu = rng.pick(&[4000, 8000, 16_000]);
        let mem = rng.pick(&[16, 32, 64]) * GI;
        let allocatable = Resources::new(cpu, mem, gpu);
        let used = Resources::new(
            500 * rng.below(cpu as u64 / 500 + 3) as i64,
            512 * MI * rng.below((mem / (512 * MI)) as u64 + 3) as i64,
            rng.below(gpu as u64 + 1) as i64,
        );
        let mut r = room(allocatable, allocatable - used);
        r.schedulable = !rng.chance(10);
        r.hold_growth = rng.chance(15);
        rooms.push(r);
        held.push(if rng.chance(50) {
            Resources::ZERO
        } else {
            Resources::new(
                500 * rng.below(12) as i64,
                512 * MI * rng.below(24) as i64,
                rng.below(gpu as u64 + 1) as i64,
            )
        });
    }
    (rooms, held)
}

const SHAPES: [Resources; 6] = [
    Resources { cpu_milli: 500, memory_bytes: 512 * MI, gpu: 0 },
    Resources { cpu_milli: 1000, memory_bytes: 2 * GI, gpu: 0 },
    Resources { cpu_milli: 2000, memory_bytes: 4 * GI, gpu: 0 },
    Resources { cpu_milli: 1000, memory_bytes: 8 * GI, gpu: 0 },
    Resources { cpu_milli: 2000, memory_bytes: 8 * GI, gpu: 1 },
    Resources { cpu_milli: 4000, memory_bytes: 16 * GI, gpu: 2 },
];

#[test]
fn placer_picks_the_same_node_as_the_linear_best_fit() {
    let mut placed_total = 0;
    let mut refused_total = 0;
    for seed in [0x9e37_79b9_7f4a_7c15u64, 0x2545_f491_4f6c_dd1d, 42, 7, 0xdead_beef] {
        let mut rng = Rng(seed);
        for round in 0..80 {
            let (mut indexed, held) = random_rooms(&mut rng);
            let mut linear = indexed.clone();
            // 1-4 shapes, duplicates allowed (the placer files each distinct shape once).
            let shapes: Vec<Resources> = (0..1 + rng.below(4)).map(|_| rng.pick(&SHAPES)).collect();
            let mut placer = Placer::new(&indexed, &held, &shapes);
            let mut taken: Vec<(usize, Resources)> = Vec::new();
            for op in 0..40 + rng.below(80) {
                if !taken.is_empty() && rng.chance(10) {
                    let (node, w) = taken.swap_remove(rng.below(taken.len() as u64) as usize);
                    placer.give_back(&mut indexed, node, &w);
                    linear[node].training_room += w;
                    continue;
                }
                let w = rng.pick(&shapes);
                let got = placer.place(&mut indexed, &w);
                let want = place_one(&mut linear, &held, &w, Holds::Respect);
                assert_eq!(got, want, "seed {seed:#x} round {round} op {op}: worker {w}");
                match got {
                    Some(node) => {
                        taken.push((node, w));
                        placed_total += 1;
                    }
                    None => refused_total += 1,
                }
                for (a, b) in indexed.iter().zip(&linear) {
                    assert_eq!(a.training_room, b.training_room, "seed {seed:#x} round {round} op {op}");
                }
            }
            // A shape the placer was not built for is never placed.
            if !shapes.contains(&SHAPES[0]) {
                assert_eq!(placer.place(&mut indexed, &SHAPES[0]), None);
            }
        }
    }
    // The rounds exercised both outcomes plenty.
    assert!(placed_total > 5000 && refused_total > 1000, "placed {placed_total}, refused {refused_total}");
}

#[test]
fn placer_prefers_not_displacing_then_tightest_then_lowest_index() {
    let w = res(1000, 1);
    let alloc = res(8000, 32);
    let mut rooms = vec![
        room(alloc, res(3000, 8)),
        room(alloc, res(2000, 8)), // tightest, but 1.5 CPU is held by a lower priority
        room(alloc, res(3000, 8)),
        room(alloc, res(1000, 4)), // tighter still, but cordoned
        room(alloc, res(1000, 4)), // and under a growth hold
        room(alloc, res(3000, 4)), // same CPU as n0 and n2, less memory
    ];
    rooms[3].schedulable = false;
    rooms[4].hold_growth = true;
    let held = vec![Resources::ZERO, res(1500, 0), Resources::ZERO, Resources::ZERO, Resources::ZERO, Resources::ZERO];
    // The scan follows the same rule; a worker being started may also go where growth is held.
    assert_eq!(place_one(&mut rooms.clone(), &held, &w, Holds::Respect), Some(5));
    assert_eq!(place_one(&mut rooms.clone(), &held, &w, Holds::Ignore), Some(4));
    let mut placer = Placer::new(&rooms, &held, &[w]);
    let order: Vec<Option<usize>> = (0..10).map(|_| placer.place(&mut rooms, &w)).collect();
    // n5 (3 CPU, 4 GiB) first, then its leftovers, then n0 before n2 (same room, lower index),
    // and n1 last, where a lower-priority worker would have to leave.
    assert_eq!(order, [Some(5), Some(5), Some(5), Some(0), Some(0), Some(0), Some(2), Some(2), Some(2), Some(1)]);
    assert_eq!(placer.place(&mut rooms, &w), Some(1));
    assert_eq!(placer.place(&mut rooms, &w), None);
    placer.give_back(&mut rooms, 2, &w);
    assert_eq!(placer.place(&mut rooms, &w), Some(2));
}

/// capacity.rs' rule for a new online pod: the schedulable node with the most free room
/// (CPU, then memory, then the lowest index) where it fits; failing that, the one with the most
/// training room where it fits.
fn linear_spread(rooms: &[NodeRoom], pod: &Resources) -> Option<usize> {
    let best_by = |room_of: fn(&NodeRoom) -> Resources| {
        rooms
            .iter()
            .enumerate()
            .filter(|(_, r)| r.schedulable && pod.fits_in(&room_of(r)))
            .max_by_key(|(i, r)| (room_of(r).cpu_milli, room_of(r).memory_bytes, Reverse(*i)))
            .map(|(i, _)| i)
    };
    best_by(|r| r.free).or_else(|| best_by(|r| r.training_room))
}

#[test]
fn online_reservations_land_where_the_linear_spread_rule_puts_them() {
    let replicas =
        [res(250, 1), res(500, 1), res(1000, 2), res(2000, 4), res(4000, 8), Resources::new(2000, 8 * GI, 1)];
    let mut reserved_somewhere = 0;
    let mut unplaced_total = 0;
    let mut fell_back = 0;
    for seed in [1u64, 0x1234_5678_9abc_def0, 0xfeed_f00d, 99] {
        let mut rng = Rng(seed);
        for round in 0..60 {
            let n = 20 + rng.below(31) as usize;
            let mut nodes = Vec::new();
            let mut pods = Vec::new();
            for i in 0..n {
                let name = format!("n{i}");
                let gpu = if rng.chance(25) { 4 } else { 0 };
                let alloc = Resources::new(rng.pick(&[4000, 8000, 16_000]), rng.pick(&[16, 32, 64]) * GI, gpu);
                nodes.push(Node { name: name.clone(), allocatable: alloc, schedulable: !rng.chance(10), batch: None });
                if rng.chance(60) {
                    pods.push(system(&format!("ds-{i}"), &name, res(250 * rng.below(4) as i64, rng.below(3) as i64)));
                }
                for k in 0..rng.below(4) {
                    let class = if rng.chance(50) {
                        PodClass::Online { service: "other".into() }
                    } else {
                        PodClass::Master { job: "m".into() }
                    };
                    let mut p = pod(&format!("p-{i}-{k}"), class, Some(&name), res(500 * rng.below(5) as i64, 1));
                    p.terminating_until = rng.chance(20).then_some(Duration::from_secs(30));
                    pods.push(p);
                }
                for k in 0..rng.below(6) {
                    let gpu = i64::from(gpu > 0 && rng.chance(50));
                    let r = Resources::new(1000 * (1 + rng.below(3) as i64), 2 * GI, gpu);
                    pods.push(pod(&format!("w-{i}-{k}"), PodClass::Worker { job: "a".into() }, Some(&name), r));
                }
            }
            // Pending pods hold nothing.
            pods.push(pod("pending", PodClass::System, None, res(64_000, 256)));
            let snapshot = snap(0, nodes, pods, vec![], vec![]);

            let needs: Vec<OnlineNeed> = (0..1 + rng.below(4))
                .map(|k| {
                    let bound = rng.below(3) as u32;
                    let replica = rng.pick(&replicas);
                    OnlineNeed {
                        service: format!("svc-{k}"),
                        replica,
                        bound,
                        ready: bound,
                        expected: bound + rng.below(40) as u32,
                        headroom: rng.below(3) as u32,
                        because: "test".into(),
                        rising: false,
                        replica_usage: replica,
                    }
                })
                .collect();
            let config = Config { safety_margin: rng.pick(&[0.0, 0.05]), ..Config::default() };
            let (rooms, unplaced) = node_rooms(&snapshot, &PodIndex::new(&snapshot), &needs, &config);

            // The reference: rooms from the pods, then one linear scan per replica.
            let mut expected: Vec<NodeRoom> = snapshot
                .nodes
                .iter()
                .map(|n| NodeRoom { schedulable: n.schedulable, ..room(n.allocatable, n.allocatable) })
                .collect();
            for p in &snapshot.pods {
                let Some(i) = snapshot.nodes.iter().position(|n| Some(n.name.as_str()) == p.node.as_deref()) else {
                    continue;
                };
                expected[i].free -= p.requests;
                if !matches!(p.class, PodClass::Worker { .. }) {
                    expected[i].training_room -= p.requests;
                }
            }
            let mut expected_unplaced = Vec::new();
            // Every service's pods coming first, then the standing headroom in what is left
            // (a headroom that does not fit is not reported).
            let passes =
                needs.iter().map(|n| (n, n.missing(), true)).chain(needs.iter().map(|n| (n, n.headroom, false)));
            for (need, count, report) in passes {
                for k in 0..count {
                    let Some(i) = linear_spread(&expected, &need.replica) else {
                        if report {
                            expected_unplaced.push(format!(
                                "{}: {} replicas will not fit even without training",
                                need.service,
                                count - k
                            ));
                        }
                        break;
                    };
                    if !need.replica.fits_in(&expected[i].free) {
                        fell_back += 1;
                    }
                    let r = &mut expected[i];
                    r.free -= need.replica;
                    r.training_room -= need.replica;
                    r.reserved += need.replica;
                    reserved_somewhere += 1;
                }
            }
            for r in &mut expected {
                r.training_room -= r.allocatable.scaled_up(config.safety_margin);
            }
            unplaced_total += expected_unplaced.len();

            assert_eq!(unplaced, expected_unplaced, "seed {seed} round {round}");
            for (node, (got, want)) in rooms.iter().zip(&expected).enumerate() {
                let at = format!("seed {seed} round {round} node {node}");
                assert_eq!(got.reserved, want.reserved, "{at}");
                assert_eq!(got.free, want.free, "{at}");
                assert_eq!(got.training_room, want.training_room, "{at}");
            }
        }
    }
    // Both the free-room and the training-room choice, and unplaceable replicas, were seen.
    assert!(reserved_somewhere > 3000, "{reserved_somewhere}");
    assert!(fell_back > 100, "{fell_back}");
    assert!(unplaced_total > 10, "{unplaced_total}");
}

// ---------------------------------------------------------------------------------------------
// Regressions found by review
// ---------------------------------------------------------------------------------------------

#[test]
fn cpu_worker_prefers_the_node_without_spare_gpus_on_a_tie() {
    // Same CPU and memory room; one node has 4 GPUs free. Both placement paths pick the
    // CPU-only node, keeping the GPU node for GPU jobs.
    let rooms = vec![
        room(Resources::new(4000, 16 * GI, 4), Resources::new(4000, 16 * GI, 4)),
        room(Resources::new(4000, 16 * GI, 0), Resources::new(4000, 16 * GI, 0)),
    ];
    let held = vec![Resources::ZERO; 2];
    let worker = Resources::new(1000, GI, 0);
    let mut linear = rooms.clone();
    assert_eq!(place_one(&mut linear, &held, &worker, Holds::Respect), Some(1));
    let mut placed = rooms.clone();
    let mut placer = Placer::new(&placed, &held, &[worker]);
    assert_eq!(placer.place(&mut placed, &worker), Some(1));
}

#[test]
fn a_job_larger_than_ten_step_limits_can_still_grow() {
    // 330 workers: 10% would be 33, above grow_max_step (32); the minimum step is capped at
    // the step limit, so +32 is allowed rather than held forever.
    let config = eager();
    let v = verdict(&config, 330, 1000, 400);
    assert_eq!(v.allowed, 362, "{v:?}");
}

#[test]
fn minimum_step_and_quantum_tolerate_float_noise() {
    // 100 * 0.07 = 7.000000000000001 in floating point: the minimum step is 7, not 8.
    let config = Config { grow_min_gain: 0.07, ..eager() };
    assert_eq!(verdict(&config, 100, 1000, 107).allowed, 107);
    // 100 replicas with a 7% quantum: 1 missing is reserved as 7, not 8.
    assert_eq!(quantum_need(0.07, &quantum_cluster(100, 101, 200, false)), (107, false));
}

#[test]
fn pending_pods_of_a_service_without_hpa_are_reserved_exactly() {
    let replica = res(500, 1);
    let mut pods: Vec<Pod> = (0..10).map(|i| online(&format!("web-{i}"), "web", "n1", replica)).collect();
    pods.extend((10..13).map(|i| pod(&format!("web-{i}"), PodClass::Online { service: "web".into() }, None, replica)));
    let s = snap(1000, vec![node("n1", 64_000, 256)], pods, vec![service("web", replica)], vec![]);
    assert_eq!(quantum_need(0.5, &s), (13, false));
}

/// The dry run of plan_jobs counts slots when every job has the same worker shape
/// (`fill_counts`): each job gets as many as the fill that places them on nodes gives it,
/// gang floors included, on rooms over-committed, cordoned and held.
#[test]
fn counting_slots_gives_each_job_what_placing_gives_it() {
    let mut grew = 0;
    for seed in 1..=300u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let (rooms, held) = random_rooms(&mut rng);
        let total: Resources = rooms.iter().map(|r| r.allocatable).sum();
        let worker = Resources::new(rng.pick(&[500, 1000, 2000]), rng.pick(&[1, 2, 4]) * GI, rng.pick(&[0, 0, 1]));
        let entries: Vec<(f64, u32, u32, u32)> = (0..1 + rng.below(4))
            .map(|_| {
                let start = rng.pick(&[0, 0, 1, 3]);
                (rng.pick(&[1.0, 2.0, 3.0]), rng.pick(&[1, 2, 4]), start, start + rng.pick(&[1, 5, 40]))
            })
            .collect();
        let fill = || -> Vec<FillEntry> {
            entries
                .iter()
                .enumerate()
                .map(|(j, &(weight, min, start, cap))| entry(j, worker, weight, min, start, cap))
                .collect()
        };
        let mut placed = fill();
        water_fill(&mut rooms.clone(), &held, &mut placed, &total);
        let mut counted = fill();
        assert!(fill_counts(&rooms, &mut counted, &total), "one shape");
        let counts = |es: &[FillEntry]| es.iter().map(|e| e.count).collect::<Vec<_>>();
        assert_eq!(counts(&counted), counts(&placed), "seed {seed}: {entries:?}");
        grew += usize::from(placed.iter().any(|e| e.count > e.start));
    }
    assert!(grew > 100, "only {grew} of 300 cases placed any worker: the rooms are too full to test anything");
    // Two shapes: counting would not be exact, so it is not done.
    let mut two =
        vec![entry(0, Resources::new(1000, GI, 0), 1.0, 1, 0, 9), entry(1, Resources::new(2000, GI, 0), 1.0, 1, 0, 9)];
    let one_room = [room(Resources::new(8000, 8 * GI, 0), Resources::new(8000, 8 * GI, 0))];
    assert!(!fill_counts(&one_room, &mut two, &Resources::new(8000, 8 * GI, 0)));
    assert!(two.iter().all(|e| e.count == 0), "nothing counted");
}

/// Job `j` of a fill (ranked `j`) with `start` workers, up to `cap`.
fn entry(j: usize, worker: Resources, weight: f64, min: u32, start: u32, cap: u32) -> FillEntry {
    FillEntry { job: j, rank: j, worker, weight, min, start, count: start, cap, active: true }
}
