//! Room given back to online services comes from as few jobs as it can (fewest_jobs.rs), and
//! workers a shrink named are not planned again while their master removes them.

use super::test_support::*;
use super::*;

/// n1 (12 CPU): web-0 (2 CPU) and five 1-CPU workers each of a and b (floors `floor`); the HPA
/// wants `desired` 1-CPU web pods in all.
fn two_jobs_on_one_node(desired: u32, floor: u32) -> Snapshot {
    let w = res(1000, 1);
    snap(
        0,
        vec![node("n1", 12_000, 64)],
        [vec![online("web-0", "web", "n1", res(2000, 1))], workers("a", "n1", 0..5, w), workers("b", "n1", 0..5, w)]
            .concat(),
        vec![service_with_hpa("web", res(1000, 1), 1, desired)],
        vec![job("a", w, floor, 5, 5), job("b", w, floor, 5, 5)],
    )
}

#[test]
fn room_given_back_comes_from_one_job_when_one_can_give_it_all() {
    // Two more web pods: 2 CPU back. Share by share, a and b would lose one worker each and
    // both pause to rescale; a alone gives both (the tie goes to the first name).
    let d = decide_once(Config::default(), &two_jobs_on_one_node(3, 1));
    let a = the_intent(&d, "a");
    assert_eq!((a.from, a.target), (5, 3), "{}", a.why);
    assert_eq!(a.reason, Reason::OnlineHeadroom);
    assert_eq!(a.release_pods.len(), 2);
    assert!(intent(&d, "b").is_none(), "b is spared: {:#?}", d.intents);
}

#[test]
fn the_job_giving_room_keeps_its_floor_and_the_rest_comes_from_the_next() {
    // Four more web pods: 4 CPU back. a can give 3 above its floor of 2, not 4: moving b's loss
    // onto a would take a below its floor, so both give, share by share.
    let d = decide_once(Config::default(), &two_jobs_on_one_node(5, 2));
    assert_eq!(move_of(&d, "a"), (5, 3));
    assert_eq!(move_of(&d, "b"), (5, 3));
    // With floors of 1, a gives all four.
    let d = decide_once(Config::default(), &two_jobs_on_one_node(5, 1));
    assert_eq!(move_of(&d, "a"), (5, 1));
    assert!(intent(&d, "b").is_none(), "b is spared: {:#?}", d.intents);
}

/// n0 (8 CPU): a daemon (3 CPU) and a-0..a-4; n1 (8 CPU): web-0 (2 CPU), b-0..b-2 and a-5..a-7;
/// n2 (8 CPU): web-1 (2 CPU), b-3..b-8; `b_target` as b's master says. The HPA wants two more
/// 1-CPU web pods: one lands on n1 and one on n2.
fn losses_on_two_nodes(b_target: u32) -> Snapshot {
    let w = res(1000, 1);
    snap(
        0,
        vec![node("n0", 8000, 32), node("n1", 8000, 32), node("n2", 8000, 32)],
        [
            vec![online("web-0", "web", "n1", res(2000, 1)), online("web-1", "web", "n2", res(2000, 1))],
            vec![system("ds", "n0", res(3000, 1))],
            workers("a", "n0", 0..5, w),
            workers("a", "n1", 5..8, w),
            workers("b", "n1", 0..3, w),
            workers("b", "n2", 3..9, w),
        ]
        .concat(),
        vec![service_with_hpa("web", res(1000, 1), 2, 4)],
        vec![job("a", w, 1, 12, 8), job("b", w, 1, 12, b_target)],
    )
}

#[test]
fn the_job_losing_workers_elsewhere_gives_the_rest() {
    // Share by share, a loses one on n1 (it reaches n1 last) and b one on n2. b loses on n2
    // anyway (only b is there), so b gives the one on n1 too, and a is spared.
    let s = losses_on_two_nodes(9);
    let d = decide_once(Config::default(), &s);
    let b = the_intent(&d, "b");
    assert_eq!((b.from, b.target), (9, 7), "{}", b.why);
    let on_n1 = b.release_pods.iter().filter(|p| ["b-0", "b-1", "b-2"].contains(&p.as_str())).count();
    assert_eq!(on_n1, 1, "{:?}", b.release_pods);
    assert!(intent(&d, "a").is_none(), "a is spared: {:#?}", d.intents);
}

#[test]
fn workers_named_in_a_shrink_are_not_planned_again_while_their_master_removes_them() {
    // The shrink above, then the snapshot after b's master took it (target 7) and before it
    // deleted the two named pods. Planned again as if staying, b-2 on n1 took room on n1 before
    // a's last worker there, and a gave a worker the web pods do not need.
    let mut core = Core::new(Config::default());
    let d = core.decide(&losses_on_two_nodes(9));
    assert_eq!(move_of(&d, "b"), (9, 7));
    let d = core.decide(&losses_on_two_nodes(7));
    assert_no_intents(&d);
    // Once gone (or if its master removed others), nothing is left out: the same snapshot with
    // b at 9 workers and target 9 again is planned from scratch.
    let d = core.decide(&losses_on_two_nodes(9));
    assert_eq!(move_of(&d, "b"), (9, 7));
}
