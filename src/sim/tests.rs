//! Unit tests of the simulated cluster's models: the scheduler and its preemption modes, the
//! training-job model, and tiny end-to-end replays of the baseline policies.
//!
//! CPU in millicores; pods request no memory unless a test says otherwise.

use std::path::Path;

use super::cluster::{Cluster, PodId, PodKind, Preemption, Removal, SimPod};
use super::engine::{PolicyRun, World};
use super::job_model::{Phase, SimJob};
use super::policy::Policy;
use super::scenario::{JobSpec, Scenario};
use crate::core::Resources;

const GI: i64 = 1 << 30;
const GRACE: f64 = 30.0;

fn cpu(milli: i64) -> Resources {
    Resources::new(milli, 0, 0)
}

/// Nodes `n0`, `n1`, ... with the given CPU and 64 GiB each.
fn cluster(cpus: &[i64]) -> Cluster {
    let mut c = Cluster::default();
    for (i, &m) in cpus.iter().enumerate() {
        c.add_node(format!("n{i}"), Resources::new(m, 64 * GI, 0));
    }
    c
}

fn bound(c: &mut Cluster, kind: PodKind, requests: Resources, node: usize) -> PodId {
    let id = c.create(format!("p{}", c.pods.len()), kind, requests, 0.0);
    c.bind(id, node, 0.0);
    id
}

fn worker(job: usize) -> PodKind {
    PodKind::Worker { job }
}

fn online_kind() -> PodKind {
    PodKind::Online { service: 0 }
}

/// One scheduler pass with `mode` for every online pod, no startup delay, a 30 s grace period
/// and job `j` at priority `priorities[j]`.
fn schedule(c: &mut Cluster, now: f64, mode: Preemption, priorities: &[i32]) -> Vec<(PodId, usize)> {
    let preemption = |_: &SimPod| mode;
    let ready_delay = |_: &SimPod| 0.0;
    let priority = |j: usize| priorities[j];
    c.schedule(now, &preemption, &ready_delay, &priority, GRACE, false).pods
}

/// Schedules every second from `from` (reaping pods whose grace period ended) until `pod` is
/// bound; returns when, at most 30 s later.
fn settle(c: &mut Cluster, pod: PodId, from: f64, priorities: &[i32]) -> f64 {
    for k in 0..=30 {
        let t = from + f64::from(k);
        c.reap(t);
        schedule(c, t, Preemption::Workers, priorities);
        if c.pods[&pod].node.is_some() {
            return t;
        }
    }
    panic!("pod {pod} not bound within 30 s of {from}");
}

fn node_of(c: &Cluster, id: PodId) -> Option<usize> {
    c.pods[&id].node
}

fn sorted(mut v: Vec<(PodId, usize)>) -> Vec<(PodId, usize)> {
    v.sort();
    v
}

// ---------------------------------------------------------------------------------------------
// Scheduler: online pods spread, workers pack.
// ---------------------------------------------------------------------------------------------

/// Three 8-CPU nodes with 7, 5 and 6 CPUs free (system pods hold the rest).
fn free_7_5_6() -> Cluster {
    let mut c = cluster(&[8000, 8000, 8000]);
    bound(&mut c, PodKind::System, cpu(1000), 0);
    bound(&mut c, PodKind::System, cpu(3000), 1);
    bound(&mut c, PodKind::System, cpu(2000), 2);
    c
}

#[test]
fn online_pods_spread_to_the_freest_node() {
    let mut c = free_7_5_6();
    let a = c.create("web-a".into(), online_kind(), cpu(1000), 0.0);
    let b = c.create("web-b".into(), online_kind(), cpu(1000), 0.0);
    let d = c.create("web-d".into(), online_kind(), cpu(1000), 0.0);
    assert!(schedule(&mut c, 0.0, Preemption::Never, &[]).is_empty());
    // a: n0 (7 free). b: n0 and n2 tie at 6, the lower index wins. d: n2 (6 vs 5 and 5).
    assert_eq!([node_of(&c, a), node_of(&c, b), node_of(&c, d)], [Some(0), Some(0), Some(2)]);
    assert_eq!([0, 1, 2].map(|n| c.free(n).cpu_milli), [5000, 5000, 5000]);
}

#[test]
fn spread_considers_every_dimension() {
    // n0 has the most CPU free but not the memory: the pod goes to n1.
    let mut c = cluster(&[16_000, 8000]);
    bound(&mut c, PodKind::System, Resources::new(0, 63 * GI, 0), 0);
    let p = c.create("web-0".into(), online_kind(), Resources::new(1000, 2 * GI, 0), 0.0);
    schedule(&mut c, 0.0, Preemption::Never, &[]);
    assert_eq!(node_of(&c, p), Some(1));
    assert_eq!(c.pick_node(&Resources::new(1000, 2 * GI, 0), false), Some(1));
    assert_eq!(c.pick_node(&Resources::new(1000, 100 * GI, 0), true), None);
}

#[test]
fn workers_pack_best_fit() {
    let mut c = free_7_5_6();
    let ws: Vec<PodId> = (0..6).map(|i| c.create(format!("w-{i}"), worker(0), cpu(2000), 0.0)).collect();
    schedule(&mut c, 0.0, Preemption::Workers, &[0]);
    // n1 (5) takes two, then n2 (6) is the tightest with room for three, then n0.
    let nodes: Vec<Option<usize>> = ws.iter().map(|&w| node_of(&c, w)).collect();
    assert_eq!(nodes, [Some(1), Some(1), Some(2), Some(2), Some(2), Some(0)]);
    // A worker that fits nowhere waits; workers never preempt.
    let big = c.create("w-big".into(), worker(0), cpu(6000), 0.0);
    assert!(schedule(&mut c, 1.0, Preemption::Workers, &[0]).is_empty());
    assert_eq!(node_of(&c, big), None);
    assert!(c.pods.values().all(|p| p.leaving_at.is_none()));
}

#[test]
fn online_pods_then_higher_priority_workers_bind_first() {
    // Room for one 2-CPU pod. A low-priority worker, a high-priority worker and an online pod
    // are pending, created in that order.
    let mut c = cluster(&[2000]);
    let lo = c.create("lo".into(), worker(0), cpu(2000), 0.0);
    let hi = c.create("hi".into(), worker(1), cpu(2000), 0.0);
    let web = c.create("web".into(), online_kind(), cpu(2000), 0.0);
    schedule(&mut c, 0.0, Preemption::Never, &[0, 5]);
    assert_eq!([node_of(&c, lo), node_of(&c, hi), node_of(&c, web)], [None, None, Some(0)]);
    c.delete(web, 1.0, 0.0);
    schedule(&mut c, 1.0, Preemption::Never, &[0, 5]);
    assert_eq!([node_of(&c, lo), node_of(&c, hi)], [None, Some(0)]);
}

#[test]
fn workers_wait_while_arriving_online_pods_find_no_room() {
    // 3 CPUs: the first 2-CPU online pod fits, the second does not, and a 1-CPU worker would
    // fit what is left. While the scale-up's pods are still being created, the scheduler is
    // busy with the failing ones and never reaches the worker.
    let never = |_: &SimPod| Preemption::Never;
    let priority = |_: usize| 0;
    let mut c = cluster(&[3000]);
    let w = c.create("w".into(), worker(0), cpu(1000), 0.0);
    let web = c.create("web-1".into(), online_kind(), cpu(2000), 0.0);
    let late = c.create("web-2".into(), online_kind(), cpu(2000), 0.0);
    c.schedule(0.0, &never, &|_| 0.0, &priority, GRACE, true);
    assert_eq!([node_of(&c, web), node_of(&c, late), node_of(&c, w)], [Some(0), None, None]);
    // The failing one parked (it takes no scheduling cycles until room frees), more still
    // arriving: the worker takes the room that is left.
    c.schedule(0.1, &never, &|_| 0.0, &priority, GRACE, true);
    assert_eq!(node_of(&c, w), Some(0));
    // Every online pod there fits: the queue runs dry and a worker is tried, arriving or not.
    let mut c = cluster(&[2000]);
    let w = c.create("w".into(), worker(0), cpu(2000), 0.0);
    c.schedule(0.0, &never, &|_| 0.0, &priority, GRACE, true);
    assert_eq!(node_of(&c, w), Some(0));
}

// ---------------------------------------------------------------------------------------------
// Preemption.
// ---------------------------------------------------------------------------------------------

/// Three 4-CPU nodes. n0: four 1-CPU workers of job 1. n1: a 2-CPU worker of job 0, then two
/// 1-CPU workers of job 1. n2: a 2-CPU worker of job 1, then a 2-CPU worker of job 0. Job 0 has
/// priority 5, job 1 priority 0. A 2-CPU online pod needs two victims on n0 and n1, one on n2.
fn full_cluster() -> (Cluster, Vec<PodId>) {
    let mut c = cluster(&[4000, 4000, 4000]);
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(bound(&mut c, worker(1), cpu(1000), 0));
    }
    ids.push(bound(&mut c, worker(0), cpu(2000), 1));
    ids.push(bound(&mut c, worker(1), cpu(1000), 1));
    ids.push(bound(&mut c, worker(1), cpu(1000), 1));
    ids.push(bound(&mut c, worker(1), cpu(2000), 2));
    ids.push(bound(&mut c, worker(0), cpu(2000), 2));
    (c, ids)
}

const PRIORITIES: [i32; 2] = [5, 0];

#[test]
fn preemption_picks_the_node_needing_the_fewest_victims_and_waits_for_the_grace_period() {
    let (mut c, ids) = full_cluster();
    let web = c.create("web".into(), online_kind(), cpu(2000), 0.0);
    let evicted = schedule(&mut c, 0.0, Preemption::Workers, &PRIORITIES);
    assert_eq!(evicted, [(ids[7], 1)]);
    assert_eq!(c.pods[&ids[7]].leaving_at, Some(GRACE));
    assert_eq!(c.pods[&web].nominated, Some(2));
    assert_eq!(node_of(&c, web), None);
    // While the victim leaves, the preemptor waits and nobody else is evicted.
    for t in [1.0, 10.0, 29.0] {
        c.reap(t);
        assert!(schedule(&mut c, t, Preemption::Workers, &PRIORITIES).is_empty(), "second round at {t}");
        assert_eq!(node_of(&c, web), None);
        assert_eq!(c.pods[&web].nominated, Some(2));
    }
    // The grace period is over: the victim's going is the event that brings the preemptor back,
    // and it binds where it waited in the same pass.
    let gone = c.reap(GRACE);
    assert_eq!(gone.len(), 1);
    let bound_at = settle(&mut c, web, GRACE, &PRIORITIES);
    assert_eq!(bound_at, GRACE);
    assert_eq!(node_of(&c, web), Some(2));
    assert_eq!(c.pods[&web].nominated, None);
    assert_eq!(c.pods.values().filter(|p| p.leaving_at.is_some()).count(), 0);
}

#[test]
fn a_pod_that_found_no_room_is_tried_again_only_when_room_frees() {
    // kube-scheduler's queue: a pod that failed waits for an event that may free room (an
    // assigned pod gone, a node added), not for a timer; with none, for the 5 min flush.
    let mut c = cluster(&[2000, 2000]);
    let held = bound(&mut c, worker(0), cpu(2000), 0);
    bound(&mut c, worker(0), cpu(2000), 1);
    let web = c.create("web".into(), online_kind(), cpu(1000), 0.0);
    schedule(&mut c, 0.0, Preemption::Never, &[0]);
    assert_eq!(c.pods[&web].failed.map(|f| f.at), Some(0.0));
    // A pending pod deleted frees nothing; room freed without an event (taken off the books
    // here by hand) is not seen either.
    let pending = c.create("w".into(), worker(0), cpu(1000), 1.0);
    c.delete(pending, 1.0, GRACE);
    c.nodes[1].used = cpu(0);
    for t in [1.0, 5.0, 60.0, 299.0] {
        schedule(&mut c, t, Preemption::Never, &[0]);
        assert_eq!(node_of(&c, web), None, "tried again at {t} with no event");
    }
    // The flush tries it again after 5 min.
    schedule(&mut c, 300.0, Preemption::Never, &[0]);
    assert_eq!(node_of(&c, web), Some(1));
    // A worker gone is an event: a pod waiting since is tried again in the next pass.
    let late = c.create("web2".into(), online_kind(), cpu(2000), 301.0);
    schedule(&mut c, 301.0, Preemption::Never, &[0]);
    schedule(&mut c, 302.0, Preemption::Never, &[0]);
    assert_eq!(node_of(&c, late), None);
    c.delete(held, 303.0, 0.0);
    schedule(&mut c, 303.0, Preemption::Never, &[0]);
    assert_eq!(node_of(&c, late), Some(0));
}

#[test]
fn a_worker_released_in_place_frees_its_room_unless_the_scheduler_deletes_it_first() {
    // A 4-CPU node full of 2-CPU workers; a release in place frees its room 2 s later, when
    // the kubelet reports the resize, and that is an event for waiting pods.
    let two_workers = || {
        let mut c = cluster(&[4000]);
        let w: Vec<PodId> = (0..2).map(|_| bound(&mut c, worker(0), cpu(2000), 0)).collect();
        c.release_in_place(w[1], 0.0, 2.0);
        (c, w)
    };
    let (mut c, w) = two_workers();
    assert!(c.pods[&w[1]].resizing);
    let events = c.room_events;
    c.reap(2.0);
    assert!(!c.pods.contains_key(&w[1]));
    assert_eq!(c.room_events, events + 1);
    // A pod that preempts before the resize is actuated takes both workers: the kubelet resizes
    // no pod being deleted, so the released one now holds the node for the grace period.
    let (mut c, w) = two_workers();
    let web = c.create("web".into(), online_kind(), cpu(3000), 0.0);
    let preemption = |_: &SimPod| Preemption::Workers;
    let evictions = c.schedule(0.0, &preemption, &|_| 0.0, &|_| 0, GRACE, false);
    assert_eq!((evictions.pods, evictions.releases_cut), (vec![(w[0], 0)], vec![w[1]]));
    assert_eq!(c.pods[&web].nominated, Some(0));
    c.reap(2.0);
    assert_eq!(c.pods[&w[1]].leaving_at, Some(GRACE), "the cut release holds its node");
    assert_eq!(c.nodes[0].victims_leaving, 2);
    // In a window replay a deleted pod goes a second after its whole-second deletionTimestamp
    // (the test bed's removal); a resize is reported, not removed, so it frees its room on
    // time, and a cut release is a deletion like any other.
    let in_a_window = || {
        let mut c = cluster(&[4000]);
        c.removal = Removal::SecondAfterDeletionTimestamp;
        c.wall_phase_s = 0.25;
        let w: Vec<PodId> = (0..2).map(|_| bound(&mut c, worker(0), cpu(2000), 0)).collect();
        c.release_in_place(w[1], 0.0, 1.2);
        (c, w)
    };
    let (c, w) = in_a_window();
    assert_eq!(c.pods[&w[1]].leaving_at, Some(1.2), "a resize frees its room when reported");
    let (mut c, w) = in_a_window();
    c.create("web".into(), online_kind(), cpu(3000), 0.0);
    c.schedule(0.0, &preemption, &|_| 0.0, &|_| 0, GRACE, false);
    // Wall seconds begin at 0.75, 1.75, ...: the deletionTimestamp GRACE falls in the one
    // beginning at GRACE - 0.25, and the pod is gone a second after that.
    assert_eq!(c.pods[&w[1]].leaving_at, Some(GRACE + 0.75), "a cut release is a deletion");
}

#[test]
fn a_deleted_pod_goes_a_second_after_its_whole_second_deletion_timestamp() {
    // Wall-clock seconds begin 0.6 s into each scenario second (phase 0.4).
    let gone = |requested: f64| {
        let mut c = cluster(&[4000]);
        c.removal = Removal::SecondAfterDeletionTimestamp;
        c.wall_phase_s = 0.4;
        let w = bound(&mut c, worker(0), cpu(1000), 0);
        c.delete(w, requested, 30.0);
        c.pods[&w].leaving_at.expect("it holds its node")
    };
    // Deletions within one wall second are gone together, (0, 1] s after their grace period.
    assert!((gone(10.6) - 41.6).abs() < 1e-9, "{}", gone(10.6));
    assert!((gone(11.5) - 41.6).abs() < 1e-9, "{}", gone(11.5));
    assert!((gone(11.6) - 42.6).abs() < 1e-9, "{}", gone(11.6));
    // A full replay removes it when its grace period is over.
    let mut c = cluster(&[4000]);
    let w = bound(&mut c, worker(0), cpu(1000), 0);
    c.delete(w, 11.5, 30.0);
    assert_eq!(c.pods[&w].leaving_at, Some(41.5));
    // Start times share the wall clock's seconds.
    let mut c = cluster(&[4000]);
    c.wall_phase_s = 0.4;
    let a = bound(&mut c, worker(0), cpu(1000), 0);
    let b = bound(&mut c, worker(0), cpu(1000), 0);
    c.pods.get_mut(&a).expect("bound").ready_at = Some(5.5);
    c.pods.get_mut(&b).expect("bound").ready_at = Some(5.7);
    assert_eq!(c.started_s(&c.pods[&a]) + 1, c.started_s(&c.pods[&b]));
    c.wall_phase_s = 0.0;
    assert_eq!(c.started_s(&c.pods[&a]), c.started_s(&c.pods[&b]));
}

#[test]
fn preemption_evicts_lowest_priority_newest_workers_first() {
    // One 4-CPU node: job 0 (priority 5) then job 1 (priority 0), two 1-CPU workers each,
    // started a second apart (a pod's start time has a resolution of one second).
    let victims_for = |need: i64| {
        let mut c = cluster(&[4000]);
        let ids: Vec<PodId> = [0, 0, 1, 1]
            .iter()
            .enumerate()
            .map(|(k, &j)| {
                let id = c.create(format!("w{k}"), worker(j), cpu(1000), 0.0);
                c.bind(id, 0, k as f64);
                id
            })
            .collect();
        c.create("web".into(), online_kind(), cpu(need), 0.0);
        let evicted = schedule(&mut c, 0.0, Preemption::Workers, &PRIORITIES);
        let mut index: Vec<usize> = evicted.iter().map(|(id, _)| ids.iter().position(|x| x == id).unwrap()).collect();
        index.sort_unstable_by(|a, b| b.cmp(a));
        index
    };
    assert_eq!(victims_for(1000), [3]);
    assert_eq!(victims_for(2000), [3, 2]);
    assert_eq!(victims_for(3000), [3, 2, 1]);
    assert_eq!(victims_for(4000), [3, 2, 1, 0]);
}

#[test]
fn among_workers_that_started_in_the_same_second_the_last_in_the_schedulers_cache_goes() {
    // kube-scheduler ranks a node's candidates in its cache's order with Go's sort.Slice, which
    // keeps up to 12 ties where they are: the victim is the tied worker listed last.
    let setup = |n: i64| {
        let mut c = cluster(&[n * 1000]);
        let ids: Vec<PodId> = (0..n).map(|_| bound(&mut c, worker(0), cpu(1000), 0)).collect();
        (c, ids)
    };
    let (mut c, w) = setup(3);
    c.create("web".into(), online_kind(), cpu(1000), 0.0);
    assert_eq!(schedule(&mut c, 0.0, Preemption::Workers, &[0]), [(w[2], 0)], "the last bound");

    // A deletion is an update: the deleted worker moves last and is picked, already leaving, so
    // no running worker dies and the preemptor waits for it.
    let (mut c, w) = setup(3);
    c.delete(w[0], 0.0, GRACE);
    // Removed from its place (the last takes it), then appended.
    assert_eq!(c.node_pods(0), [w[2], w[1], w[0]]);
    c.create("web".into(), online_kind(), cpu(1000), 0.0);
    let evictions = c.schedule(1.0, &|_| Preemption::Workers, &|_| 0.0, &|_| 0, GRACE, false);
    assert!(evictions.pods.is_empty(), "{:?}", evictions.pods);
    assert_eq!(evictions.already_leaving, 1);

    // A removal puts the last pod in the removed one's place (NodeInfo.RemovePod).
    let (mut c, w) = setup(4);
    c.delete(w[1], 0.0, 0.0);
    assert_eq!(c.node_pods(0), [w[0], w[3], w[2]]);
    c.create("web".into(), online_kind(), cpu(2000), 0.0);
    assert_eq!(schedule(&mut c, 0.0, Preemption::Workers, &[0]), [(w[2], 0)], "not the newest, w3");
}

#[test]
fn among_nodes_needing_as_many_victims_preemption_picks_the_youngest() {
    // kube-scheduler's pickOneNodeForPreemption: one victim on either node, so the node whose
    // victim started last. Here that spares the old worker already leaving on n0 and kills the
    // young running one on n1, as the live WorldCup spike did.
    let mut c = cluster(&[4000, 4000]);
    let old = bound(&mut c, worker(0), cpu(4000), 0);
    let young = c.create("young".into(), worker(1), cpu(4000), 10.0);
    c.bind(young, 1, 10.0);
    c.delete(old, 20.0, GRACE);
    c.create("web".into(), online_kind(), cpu(1000), 20.0);
    assert_eq!(schedule(&mut c, 20.0, Preemption::Workers, &[0, 0]), [(young, 1)]);
    // Fewer victims still come first: two young 2-CPU workers on n1 against one old on n0.
    let mut c = cluster(&[4000, 4000]);
    let old = bound(&mut c, worker(0), cpu(4000), 0);
    for k in 0..2 {
        let id = c.create(format!("young-{k}"), worker(1), cpu(2000), 10.0);
        c.bind(id, 1, 10.0);
    }
    c.create("web".into(), online_kind(), cpu(3000), 20.0);
    assert_eq!(schedule(&mut c, 20.0, Preemption::Workers, &[0, 0]), [(old, 0)]);
}

#[test]
fn a_second_preemptor_finds_its_own_victims() {
    // Two 2-CPU workers fill the node; two 2-CPU online pods each need one of them.
    let mut c = cluster(&[4000]);
    let w0 = bound(&mut c, worker(1), cpu(2000), 0);
    let w1 = bound(&mut c, worker(1), cpu(2000), 0);
    let a = c.create("web-a".into(), online_kind(), cpu(2000), 0.0);
    let b = c.create("web-b".into(), online_kind(), cpu(2000), 0.0);
    assert_eq!(schedule(&mut c, 0.0, Preemption::Workers, &PRIORITIES), [(w1, 1), (w0, 1)]);
    assert!(schedule(&mut c, 15.0, Preemption::Workers, &PRIORITIES).is_empty());
    c.reap(GRACE);
    schedule(&mut c, GRACE, Preemption::Workers, &PRIORITIES);
    assert_eq!([node_of(&c, a), node_of(&c, b)], [Some(0), Some(0)]);
}

#[test]
fn a_preemptor_does_not_wait_for_workers_released_through_their_master() {
    // The controller released w0 gracefully (2 s). kube-scheduler v1.34 counts a leaving pod
    // against its node until it is gone, so the online pod preempts w1 as well (younger, so
    // less important than w0); it then binds when w0 is gone, and w1 was killed for nothing.
    let mut c = cluster(&[4000]);
    let w0 = c.create("w0".into(), worker(1), cpu(2000), -5.0);
    c.bind(w0, 0, -5.0);
    let w1 = bound(&mut c, worker(1), cpu(2000), 0);
    c.delete(w0, 0.0, 2.0);
    let web = c.create("web".into(), online_kind(), cpu(2000), 0.0);
    assert_eq!(schedule(&mut c, 0.0, Preemption::Workers, &PRIORITIES), [(w1, 1)]);
    assert_eq!(c.pods[&web].nominated, Some(0));
    // Its victim is leaving: it waits, and preempts nobody else.
    assert!(schedule(&mut c, 1.0, Preemption::Workers, &PRIORITIES).is_empty());
    c.reap(2.0);
    assert!(settle(&mut c, web, 2.0, &PRIORITIES) <= 12.0);
    assert_eq!(node_of(&c, web), Some(0));
    assert_eq!(c.pods[&w1].leaving_at, Some(GRACE));
}

#[test]
fn a_pod_that_does_not_preempt_waits_for_released_workers() {
    // The same, with `preemptionPolicy: Never`: nobody is killed; the pod binds when w0 is gone.
    let mut c = cluster(&[4000]);
    let w0 = bound(&mut c, worker(1), cpu(2000), 0);
    let w1 = bound(&mut c, worker(1), cpu(2000), 0);
    c.delete(w0, 0.0, 2.0);
    let web = c.create("web".into(), online_kind(), cpu(2000), 0.0);
    assert!(schedule(&mut c, 0.0, Preemption::Never, &PRIORITIES).is_empty());
    c.reap(2.0);
    assert!(schedule(&mut c, 2.0, Preemption::Never, &PRIORITIES).is_empty());
    assert_eq!(node_of(&c, web), Some(0));
    assert_eq!(c.pods[&w1].leaving_at, None);
}

#[test]
fn room_held_for_a_nominated_preemptor_is_not_given_to_another_pod() {
    // web-a preempted the only worker and waits for it on n0; a 2-CPU worker of another job
    // fits in the 2 CPU free there but must not take the room web-a waits for (4 CPU node:
    // the victim's 2 CPU + 2 free, web-a needs 4).
    let mut c = cluster(&[4000]);
    let w = bound(&mut c, worker(1), cpu(2000), 0);
    let web = c.create("web-a".into(), online_kind(), cpu(4000), 0.0);
    assert_eq!(schedule(&mut c, 0.0, Preemption::Workers, &PRIORITIES), [(w, 1)]);
    let other = c.create("w-other".into(), worker(0), cpu(2000), 1.0);
    schedule(&mut c, 1.0, Preemption::Workers, &PRIORITIES);
    assert_eq!(node_of(&c, other), None);
    c.reap(GRACE);
    schedule(&mut c, GRACE, Preemption::Workers, &PRIORITIES);
    assert_eq!(node_of(&c, web), Some(0));
}

#[test]
fn preemption_never_leaves_the_pod_pending() {
    let (mut c, _) = full_cluster();
    let web = c.create("web".into(), online_kind(), cpu(2000), 0.0);
    for t in [0.0, 30.0, 60.0] {
        c.reap(t);
        assert!(schedule(&mut c, t, Preemption::Never, &PRIORITIES).is_empty());
    }
    assert_eq!(node_of(&c, web), None);
    assert_eq!(c.pods[&web].nominated, None);
    assert!(c.pods.values().all(|p| p.leaving_at.is_none()));
    assert_eq!(c.pods.len(), 10);
}

#[test]
fn whole_jobs_preemption_evicts_every_worker_of_the_job_on_every_node() {
    // n0: two 2-CPU workers of job 1. n1: a 2-CPU worker of job 1 and one of job 0 (priority 5).
    let mut c = cluster(&[4000, 4000]);
    let j1a = bound(&mut c, worker(1), cpu(2000), 0);
    let j1b = bound(&mut c, worker(1), cpu(2000), 0);
    let j1c = bound(&mut c, worker(1), cpu(2000), 1);
    let j0 = bound(&mut c, worker(0), cpu(2000), 1);
    let web = c.create("web".into(), online_kind(), cpu(2000), 0.0);
    let evicted = schedule(&mut c, 0.0, Preemption::WholeJobs, &PRIORITIES);
    assert_eq!(sorted(evicted), [(j1a, 1), (j1b, 1), (j1c, 1)]);
    assert_eq!(c.pods[&j0].leaving_at, None);
    for id in [j1a, j1b, j1c] {
        assert_eq!(c.pods[&id].leaving_at, Some(GRACE));
    }
    let n = c.pods[&web].nominated.expect("nominated");
    assert!(schedule(&mut c, 10.0, Preemption::WholeJobs, &PRIORITIES).is_empty());
    c.reap(GRACE);
    schedule(&mut c, GRACE, Preemption::WholeJobs, &PRIORITIES);
    assert_eq!(node_of(&c, web), Some(n));
}

#[test]
fn whole_jobs_preemption_prefers_the_job_with_fewer_workers() {
    // n0: job 1 with three 1-CPU workers there and one on n1 (4 pods). n1 also holds a 3-CPU
    // worker of job 2 (1 pod). Both priority 0: evicting job 2 makes room on n1 with one victim.
    let mut c = cluster(&[4000, 4000]);
    for _ in 0..3 {
        bound(&mut c, worker(1), cpu(1000), 0);
    }
    bound(&mut c, worker(1), cpu(1000), 1);
    let j2 = bound(&mut c, worker(2), cpu(3000), 1);
    let web = c.create("web".into(), online_kind(), cpu(2000), 0.0);
    let evicted = schedule(&mut c, 0.0, Preemption::WholeJobs, &[0, 0, 0]);
    assert_eq!(evicted, [(j2, 2)]);
    assert_eq!(c.pods[&web].nominated, Some(1));
}

#[test]
fn whole_jobs_preemption_of_a_job_with_pending_workers_does_not_trip_the_scheduler() {
    // A 4-CPU node with two bound 2-CPU workers of job 1; pending: an online pod and a third
    // worker of job 1. Evicting job 1 deletes its pending worker during the same pass.
    let mut c = cluster(&[4000]);
    bound(&mut c, worker(1), cpu(2000), 0);
    bound(&mut c, worker(1), cpu(2000), 0);
    let web = c.create("web".into(), online_kind(), cpu(2000), 0.0);
    let pending_worker = c.create("j1-pending".into(), worker(1), cpu(2000), 0.0);
    let evicted = schedule(&mut c, 0.0, Preemption::WholeJobs, &[0, 0]);
    assert_eq!(evicted.len(), 3, "{evicted:?}");
    assert!(!c.pods.contains_key(&pending_worker), "a pending victim goes at once");
    assert_eq!(c.pods[&web].nominated, Some(0));
}

// ---------------------------------------------------------------------------------------------
// Training jobs.
// ---------------------------------------------------------------------------------------------

fn job_spec(min: u32, max: u32, efficiency: f64, rescale_cost: u64, work: Option<f64>) -> JobSpec {
    let work = work.map_or(String::new(), |w| format!("work: {w}"));
    let yaml = format!(
        r#"
version: 1
name: t
duration: 1m
cluster: {{nodes: [{{pool: a, count: 1, allocatable: {{cpu: "64", memory: 64Gi}}}}]}}
jobs:
  - name: j
    worker: {{cpu: "1", memory: 1Gi}}
    min_workers: {min}
    max_workers: {max}
    rescale_cost: {rescale_cost}s
    throughput_per_worker: 10
    scaling_efficiency: {efficiency}
    {work}
"#
    );
    Scenario::parse(Path::new("t.yaml"), &yaml).unwrap().spec.jobs.remove(0)
}

/// A running job 0 on a 64-CPU node.
fn running(spec: JobSpec) -> (Cluster, SimJob) {
    let c = cluster(&[64_000]);
    let mut job = SimJob::new(spec);
    job.phase = Phase::Running;
    (c, job)
}

/// Grows job 0 to `n` worker pods, binds them all, and lets the job observe its members.
fn set_workers(c: &mut Cluster, job: &mut SimJob, n: u32, now: f64) {
    let have: Vec<PodId> = SimJob::pods(c, 0).map(|(id, _)| id).collect();
    for &id in have.iter().skip(n as usize) {
        c.delete(id, now, 0.0);
    }
    job.create_workers(c, 0, n, now);
    let pending: Vec<PodId> = SimJob::pods(c, 0).filter(|(_, b)| !b).map(|(id, _)| id).collect();
    for id in pending {
        c.bind(id, 0, now);
    }
    job.observe_members(c, 0, now);
}

#[test]
fn throughput_is_n_to_the_scaling_efficiency() {
    for (n, efficiency, rate) in [(1, 0.5, 10.0), (4, 0.5, 20.0), (3, 1.0, 30.0), (8, 0.9, 10.0 * 8f64.powf(0.9))] {
        let (mut c, mut job) = running(job_spec(1, 16, efficiency, 0, None));
        set_workers(&mut c, &mut job, n, 0.0);
        assert_eq!(job.active_workers(), n);
        let done = job.train(0.0, 2.0, 1.0);
        assert!((done - 2.0 * rate).abs() < 1e-9, "{n} workers at {efficiency}: {done}");
        assert!((job.progress - done).abs() < 1e-12);
        assert_eq!(job.worker_seconds, 2.0 * n as f64);
    }
}

#[test]
fn below_min_workers_there_is_no_progress() {
    let (mut c, mut job) = running(job_spec(3, 8, 1.0, 0, None));
    set_workers(&mut c, &mut job, 2, 0.0);
    assert_eq!(job.train(0.0, 5.0, 1.0), 0.0);
    assert_eq!(job.progress, 0.0);
    // The workers are still paid for.
    assert_eq!(job.worker_seconds, 10.0);
    set_workers(&mut c, &mut job, 3, 5.0);
    // With a third worker it trains (a membership change, but rescale_cost is 0 here).
    assert_eq!(job.train(5.0, 1.0, 1.0), 30.0);
    // A job that is not running does not train.
    job.phase = Phase::Waiting;
    assert_eq!(job.train(6.0, 1.0, 1.0), 0.0);
}

#[test]
fn a_membership_change_pauses_for_rescale_cost_and_counts_once() {
    let (mut c, mut job) = running(job_spec(1, 8, 1.0, 5, None));
    // The first workers are not a rescale and do not pause.
    set_workers(&mut c, &mut job, 4, 0.0);
    assert_eq!(job.rescale_events, 0);
    assert_eq!(job.train(0.0, 1.0, 1.0), 40.0);
    // The same members again: nothing happens.
    job.observe_members(&c, 0, 1.0);
    assert_eq!(job.rescale_events, 0);
    // A fifth worker at 10 s: one event, paused until 15 s.
    set_workers(&mut c, &mut job, 5, 10.0);
    assert_eq!(job.rescale_events, 1);
    assert_eq!(job.paused_until, 15.0);
    assert_eq!(job.train(10.0, 1.0, 1.0), 0.0);
    assert_eq!(job.train(14.5, 1.0, 1.0), 25.0); // half a second of 50/s
    assert_eq!(job.train(15.0, 1.0, 1.0), 50.0);
    // Losing a worker is a change too; a worker leaving gracefully leaves the membership at once.
    let last = SimJob::pods(&c, 0).map(|(id, _)| id).last().unwrap();
    c.delete(last, 20.0, 2.0);
    job.observe_members(&c, 0, 20.0);
    assert_eq!((job.rescale_events, job.active_workers(), job.paused_until), (2, 4, 25.0));
    // It is gone for good at 22 s: no second event for the same change.
    c.reap(22.0);
    job.observe_members(&c, 0, 22.0);
    assert_eq!(job.rescale_events, 2);
}

#[test]
fn resuming_after_losing_every_worker_pauses_without_a_rescale_event() {
    let (mut c, mut job) = running(job_spec(1, 8, 1.0, 5, None));
    set_workers(&mut c, &mut job, 2, 0.0);
    set_workers(&mut c, &mut job, 0, 10.0);
    assert_eq!((job.rescale_events, job.active_workers()), (0, 0));
    set_workers(&mut c, &mut job, 2, 20.0);
    assert_eq!(job.rescale_events, 0);
    assert_eq!(job.paused_until, 25.0);
    assert_eq!(job.train(20.0, 10.0, 1.0), 100.0); // 5 s of 20/s
}

#[test]
fn completion_time_is_interpolated_inside_the_step() {
    let (mut c, mut job) = running(job_spec(1, 8, 1.0, 0, Some(100.0)));
    set_workers(&mut c, &mut job, 2, 0.0);
    assert_eq!(job.train(0.0, 4.0, 1.0), 80.0);
    assert_eq!(job.phase, Phase::Running);
    // 20 left at 20/s: done 1 s into the step from 4 s, and no more than the work is counted.
    assert_eq!(job.train(4.0, 4.0, 1.0), 20.0);
    assert_eq!(job.phase, Phase::Completed);
    assert_eq!(job.completed_at, Some(5.0));
    assert_eq!(job.progress, 100.0);
    assert_eq!(job.train(8.0, 4.0, 1.0), 0.0);

    // With a pause inside the step the work starts when the pause ends.
    let (mut c, mut job) = running(job_spec(1, 8, 1.0, 0, Some(100.0)));
    set_workers(&mut c, &mut job, 2, 0.0);
    job.train(0.0, 4.0, 1.0);
    job.paused_until = 4.5;
    assert_eq!(job.train(4.0, 4.0, 1.0), 20.0);
    assert_eq!(job.completed_at, Some(5.5));
}

// ---------------------------------------------------------------------------------------------
// Engine: tiny replays.
// ---------------------------------------------------------------------------------------------

/// Replays a scenario written inline under one policy.
pub(super) fn replay(yaml: &str, policy: Policy) -> PolicyRun {
    let scenario = Scenario::parse(Path::new("tiny.yaml"), yaml).unwrap();
    World::new(&scenario, policy).run(&mut |_| {})
}

/// One 8-CPU node. web (1 CPU, 100 rps per replica, 50% target) starts at 2 replicas; its load
/// triples at 61 s, which the HPA's metrics pipeline publishes at its 75 s sync: it asks for 6.
/// An elastic job of up to six 1-CPU workers fills the rest. `{job}` and `{service}` add keys.
pub(super) fn spike(job: &str, service: &str) -> String {
    format!(
        r#"
version: 1
name: spike
duration: 3m
cluster: {{nodes: [{{pool: n, count: 1, allocatable: {{cpu: "8", memory: 32Gi}}}}]}}
services:
  - name: web
    replica: {{cpu: "1", memory: 1Gi}}
    replica_capacity_rps: 100
    latency: {{base_p99: 20ms, slo_p99: 250ms}}
    hpa: {{min_replicas: 2, max_replicas: 6, target_utilization: 0.5}}
    load: {{points: [["0s", 100], ["60s", 100], ["61s", 300]]}}
    {service}
jobs:
  - name: train
    worker: {{cpu: "1", memory: 1Gi}}
    min_workers: 1
    max_workers: 6
    throughput_per_worker: 10
    {job}
"#
    )
}

#[test]
fn preemption_evicts_workers_and_online_pods_wait_for_the_grace_period() {
    let run = replay(&spike("release_time: 2s", ""), Policy::Preemption);
    let at = |t: usize| &run.timeline[t];
    assert_eq!(at(50).workers, [6]);
    assert_eq!(at(74).services[0].1, 2);
    // The HPA adds four pods at 75 s; they wait the 30 s grace period of their victims and bind
    // as the victims go.
    assert_eq!(at(75).pending_online_pods, 4);
    assert_eq!(at(104).pending_online_pods, 4);
    assert_eq!(at(106).pending_online_pods, 0);
    assert_eq!(at(115).workers, [2]);
    assert_eq!(run.result.forced_preemptions, 4);
    let waited = run.result.pending_online_pod_s;
    assert!((120.0..=160.0).contains(&waited), "{waited}");
}

#[test]
fn colocate_shrinks_first_and_forces_nothing() {
    let run = replay(&spike("release_time: 2s", ""), Policy::Colocate);
    let at = |t: usize| &run.timeline[t];
    assert_eq!(at(50).workers, [6]);
    // The load samples show the step within a second or two of 61 s (the HPA's metric only at
    // its 75 s sync): training leaves, in 2 s, before the HPA acts.
    let shrunk = (61..75).find(|&t| at(t).workers[0] <= 2).expect("shrunk before the HPA sync");
    assert!(shrunk < 75, "{shrunk}");
    assert_eq!(at(75).services[0].1, 6);
    assert_eq!(at(75).pending_online_pods, 0);
    assert_eq!(run.result.forced_preemptions, 0);
    assert_eq!(run.result.pending_online_pod_s, 0.0);
    assert_eq!(at(179).workers, [2]);
}

/// One 8-CPU node, no services. `first` (five 1-CPU workers) finishes its work in 10 s;
/// `second` needs four workers, so with 3 CPU free it must wait for `first`.
const QUEUE: &str = r#"
version: 1
name: queue
duration: 1m
cluster: {nodes: [{pool: n, count: 1, allocatable: {cpu: "8", memory: 32Gi}}]}
jobs:
  - name: first
    worker: {cpu: "1", memory: 1Gi}
    min_workers: 5
    max_workers: 5
    throughput_per_worker: 10
    work: 500
  - name: second
    worker: {cpu: "1", memory: 1Gi}
    min_workers: 1
    max_workers: 4
    throughput_per_worker: 10
    work: 400
"#;

#[test]
fn gang_starts_the_next_job_only_when_all_its_workers_fit() {
    let run = replay(QUEUE, Policy::Gang);
    for row in &run.timeline {
        // Rigid jobs: all workers or none.
        assert!(row.workers[0] == 0 || row.workers[0] == 5, "{:?} at {}", row.workers, row.t);
        assert!(row.workers[1] == 0 || row.workers[1] == 4, "{:?} at {}", row.workers, row.t);
    }
    assert_eq!(run.timeline[9].workers, [5, 0]);
    assert_eq!(run.timeline[10].workers, [0, 4]);
    let done: Vec<Option<f64>> = run.result.jobs.iter().map(|j| j.completed_at_s).collect();
    assert_eq!(done, [Some(10.0), Some(20.0)]);
    assert_eq!(run.result.makespan_s, Some(20.0));

    // The elastic policies start the second job at once in the room that is left.
    let run = replay(QUEUE, Policy::Colocate);
    assert_eq!(run.timeline[0].workers, [5, 3]);
}

#[test]
fn preemptions_take_the_schedulers_time_in_a_window_replay() {
    // Ten 1-CPU workers fill a node; ten online pods of 1 CPU arrive. At 14.5 ms an attempt, a
    // 0.1 s step holds six preemptions; the other pods are not tried (nor marked failed) until
    // the next pass, where a release made meanwhile is the victim.
    let mut c = cluster(&[10_000]);
    c.pace = Some(crate::sim::scheduler_queue::SchedulerPace::new(crate::sim::window::WINDOW_STEP_S));
    let workers: Vec<PodId> = (0..10).map(|_| bound(&mut c, worker(0), cpu(1000), 0)).collect();
    let pods: Vec<PodId> = (0..10).map(|k| c.create(format!("web-{k}"), online_kind(), cpu(1000), 0.0)).collect();
    let first = schedule(&mut c, 10.0, Preemption::Workers, &[0]);
    assert_eq!(first.len(), 6, "{first:?}");
    let waiting: Vec<&PodId> = pods.iter().filter(|p| c.pods[p].nominated.is_none()).collect();
    assert_eq!(waiting.len(), 4);
    assert!(waiting.iter().all(|p| c.pods[p].failed.is_none()), "not tried, so not failed");
    // A master releases the oldest worker: it is last in the cache, so the next pass takes it.
    c.delete(workers[0], 10.05, GRACE);
    let second = c.schedule(10.1, &|_| Preemption::Workers, &|_| 0.0, &|_| 0, GRACE, false);
    assert_eq!(second.already_leaving, 1);
    assert_eq!(second.pods.len(), 3, "{:?}", second.pods);
    // Without the limit, a full replay's, every pod preempts in one pass.
    let mut c = cluster(&[10_000]);
    for k in 0..10 {
        bound(&mut c, worker(0), cpu(1000), 0);
        c.create(format!("web-{k}"), online_kind(), cpu(1000), 0.0);
    }
    assert_eq!(schedule(&mut c, 10.0, Preemption::Workers, &[0]).len(), 10);
}

#[test]
fn a_newer_pod_takes_the_room_a_backing_off_nominee_waits_for() {
    // kube-scheduler's backoff queue (window replays): a preemptor that failed at 10.0 s backs
    // off until the flush of the wall-clock second after 11.0 s. When its victim goes at 10.5 s
    // a newer pod, in the active queue, is tried first: the freed room is held for the nominee,
    // so it preempts another worker on the node and is nominated there too. The nominee, popped
    // once the active queue is empty, now finds its room held for the newer pod, and may not
    // preempt while that victim leaves: one CPU stays free for 30 s with two pods waiting for
    // it (on the test bed's WorldCup98 spike: 22 pods for 12 s).
    let setup = |paced: bool| {
        let mut c = cluster(&[4000]);
        if paced {
            c.pace = Some(crate::sim::scheduler_queue::SchedulerPace::new(crate::sim::window::WINDOW_STEP_S));
        }
        let released = bound(&mut c, worker(1), cpu(1000), 0);
        bound(&mut c, worker(0), cpu(1000), 0);
        bound(&mut c, worker(0), cpu(2000), 0);
        c.delete(released, 10.0, 0.5);
        let first = c.create("web-0".into(), online_kind(), cpu(1000), 10.0);
        // The least important worker, already leaving, is its victim.
        assert!(schedule(&mut c, 10.0, Preemption::Workers, &[0, -1]).is_empty());
        assert_eq!(c.pods[&first].nominated, Some(0));
        c.reap(10.5);
        let newer = c.create("web-1".into(), online_kind(), cpu(1000), 10.5);
        let killed = schedule(&mut c, 10.5, Preemption::Workers, &[0, -1]);
        (c, first, newer, killed)
    };
    let (mut c, first, newer, killed) = setup(true);
    assert_eq!(killed.len(), 1, "the newer pod preempts a running worker");
    assert_eq!((c.pods[&first].nominated, c.pods[&newer].nominated), (Some(0), Some(0)));
    assert_eq!((node_of(&c, first), node_of(&c, newer)), (None, None));
    assert_eq!(c.free(0).cpu_milli, 1000, "a CPU free, held for two");
    for t in [12.5, 20.0, 40.0] {
        c.reap(t);
        schedule(&mut c, t, Preemption::Workers, &[0, -1]);
        assert_eq!((node_of(&c, first), node_of(&c, newer)), (None, None), "at {t}");
    }
    // The victim gone, both bind.
    c.reap(40.6);
    schedule(&mut c, 40.6, Preemption::Workers, &[0, -1]);
    assert!(node_of(&c, first).is_some() && node_of(&c, newer).is_some());
    // A full replay (no queue model) tries the nominee first: it binds where it waited.
    let (c, first, newer, killed) = setup(false);
    assert_eq!(node_of(&c, first), Some(0));
    assert_eq!((killed.len(), c.pods[&newer].nominated), (1, Some(0)));
}
