//! Waiting jobs among running ones of the same priority: a waiting job's floor comes before
//! another job's extra workers (oldest waiting first), and a job whose floor does not fit even
//! so blocks no one behind it.

use super::test_support::*;
use super::*;

fn w() -> Resources {
    res(1000, 1)
}

#[test]
fn a_waiting_job_gets_its_floor_from_the_extras_of_a_running_one() {
    // `big` holds all 8 CPUs with 6 extras beyond its floor of 2; `new` needs 3 to start. The
    // extras go (the fair share reason), and `new` is started on the room they leave.
    let big = job("big", w(), 2, 8, 8);
    let new = job("new", w(), 3, 6, 0);
    let s = snap(0, vec![node("n1", 8000, 32)], workers("big", "n1", 0..8, w()), vec![], vec![big, new]);
    let d = decide_once(eager(), &s);
    let shrink = the_intent(&d, "big");
    assert_eq!((shrink.from, shrink.target), (8, 5));
    assert_eq!(shrink.reason, Reason::FairShare);
    assert!(shrink.why.contains("floors of waiting jobs"), "{}", shrink.why);
    assert_eq!(shrink.release_pods.len(), 3);
    assert_eq!(move_of(&d, "new"), (0, 3));
}

#[test]
fn a_waiting_floor_goes_on_free_room_before_room_a_running_extra_holds() {
    // n1 (4 CPUs) holds `run`'s floor of 3 and one extra; n2 has 2 CPUs free. Best fit alone
    // would put `new`'s floor where the extra is (nothing left over there): the extra would go,
    // `new` would start only when it is gone, and n2's free room would go to growth meanwhile
    // (day 20 of the Philly trace). Free room first: nobody shrinks, `new` starts on n2 now.
    let run = job("run", w(), 3, 4, 4);
    let new = job("new", w(), 1, 1, 0);
    let nodes = vec![node("n1", 4000, 16), node("n2", 2000, 8)];
    let s = snap(0, nodes, workers("run", "n1", 0..4, w()), vec![], vec![run, new]);
    let d = decide_once(eager(), &s);
    assert!(intent(&d, "run").is_none(), "{:#?}", d.intents);
    assert_eq!(move_of(&d, "new"), (0, 1));
}

#[test]
fn floors_are_never_taken_for_a_waiting_job() {
    // Two running jobs at their floors fill the node: the waiting job waits, nobody shrinks.
    let a = job("a", w(), 4, 8, 4);
    let b = job("b", w(), 4, 8, 4);
    let new = job("new", w(), 1, 4, 0);
    let mut pods = workers("a", "n1", 0..4, w());
    pods.extend(workers("b", "n1", 0..4, w()));
    let s = snap(0, vec![node("n1", 8000, 32)], pods, vec![], vec![a, b, new]);
    assert_no_intents(&decide_once(eager(), &s));
}

#[test]
fn the_oldest_waiting_job_is_served_first_and_a_big_one_blocks_no_one() {
    // 8 CPUs, all held by `run` (floor 1). `huge` waits from 0 s but its floor of 9 fits
    // nowhere; `old` (from 10 s) and `young` (from 20 s) need 4 each, and only one fits beside
    // `run`'s floor. (The snapshots do not apply the intents: everyone is still waiting.)
    let at = |t: u64| {
        let mut jobs = vec![job("run", w(), 1, 8, 8), job("huge", w(), 9, 9, 0)];
        if t >= 10 {
            jobs.push(job("old", w(), 4, 4, 0));
        }
        if t >= 20 {
            jobs.push(job("young", w(), 4, 4, 0));
        }
        snap(t, vec![node("n1", 8000, 32)], workers("run", "n1", 0..8, w()), vec![], jobs)
    };
    let mut core = Core::new(eager());
    assert_no_intents(&core.decide(&at(0)));
    core.decide(&at(10));
    let d = core.decide(&at(20));
    // `huge` is passed over, `old` is served, `young` waits; `run` keeps its floor and 3 extras.
    assert_eq!(move_of(&d, "run"), (8, 4));
    assert_eq!(move_of(&d, "old"), (0, 4));
    assert!(intent(&d, "young").is_none() && intent(&d, "huge").is_none(), "{:#?}", d.intents);
}

#[test]
fn weights_still_split_extras_three_to_one_with_no_one_waiting() {
    let a = job("a", w(), 1, 100, 0);
    let b = Job { weight: 3.0, ..job("b", w(), 1, 100, 0) };
    let s = snap(0, vec![node("n1", 16_000, 64)], vec![], vec![], vec![a, b]);
    let d = decide_once(eager(), &s);
    assert_eq!((move_of(&d, "a").1, move_of(&d, "b").1), (4, 12));
}

#[test]
fn a_big_job_that_has_waited_long_drains_room_for_its_floor() {
    // 8 CPUs: `a` runs at its floor of 4, `b` at 4 with a floor of 2. `big` (floor 6) waits
    // from 0 s and does not fit even if `b` shrinks; `small` (floor 1) waits from 10 s.
    let config = Config { waiting_reservation_after: secs(60), ..eager() };
    let at = |t: u64, big_floor: u32| {
        let jobs = vec![
            job("a", w(), 4, 4, 4),
            job("b", w(), 2, 8, 4),
            job("big", w(), big_floor, big_floor, 0),
            job("small", w(), 1, 1, 0),
        ];
        let mut pods = workers("a", "n1", 0..4, w());
        pods.extend(workers("b", "n1", 0..4, w()));
        snap(t, vec![node("n1", 8000, 32)], pods, vec![], jobs)
    };
    // Before the reservation is due, `big` is passed over and `small` starts on one of `b`'s
    // extras.
    let mut core = Core::new(config.clone());
    core.decide(&at(0, 6));
    let d = core.decide(&at(10, 6));
    assert_eq!((move_of(&d, "b"), move_of(&d, "small")), ((4, 3), (0, 1)));
    // After 60 s of waiting `big` holds a reservation: `b`'s extras go to it (fair share) and
    // `small` no longer starts in its room. `big` starts once `a` or `b` frees the rest.
    let d = core.decide(&at(70, 6));
    assert_eq!(move_of(&d, "b"), (4, 2));
    assert_eq!(the_intent(&d, "b").reason, Reason::FairShare);
    assert!(intent(&d, "small").is_none() && intent(&d, "big").is_none(), "{:#?}", d.intents);
    // A floor that could not fit even on an empty node reserves nothing: it would drain for ever.
    let mut core = Core::new(config);
    core.decide(&at(0, 9));
    core.decide(&at(10, 9));
    let d = core.decide(&at(70, 9));
    assert_eq!((move_of(&d, "b"), move_of(&d, "small")), ((4, 3), (0, 1)));
}
