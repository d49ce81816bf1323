//! The completion-time split (completion.rs): heSRPT among jobs whose masters report their
//! work, weights kept against jobs with no known end, the speedup learned from throughput.

use super::completion::{hesrpt_fraction, split, Scaling, DEFAULT_EXPONENT};
use super::test_support::*;
use super::*;

fn w() -> Resources {
    res(1000, 1)
}

/// A running job with `n` workers that reports `left` samples to go at `per_worker * n^p` samples/s.
fn reporting(name: &str, n: u32, max: u32, left: f64, per_worker: f64, p: f64) -> Job {
    let work = WorkReport {
        done: 1000.0,
        total: 1000.0 + left,
        throughput: Some(per_worker * f64::from(n).powf(p)),
        workers: n,
    };
    Job { work: Some(work), ..job(name, w(), 1, max, n) }
}

#[test]
fn hesrpt_shares_add_up_and_favour_the_shortest_without_starving_the_longest() {
    for &(m, p) in &[(2, 0.5), (5, 0.8), (12, 0.3), (7, 0.95)] {
        let shares: Vec<f64> = (1..=m).map(|i| hesrpt_fraction(i, m, p)).collect();
        assert!((shares.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{m} jobs, p {p}: {shares:?}");
        assert!(shares.windows(2).all(|s| s[0] < s[1]), "largest first, so rising: {shares:?}");
        assert!(shares[0] > 0.0, "the longest job still progresses: {shares:?}");
    }
    // p = 0.5: job i of m gets (2i - 1) / m^2.
    assert!((hesrpt_fraction(1, 2, 0.5) - 0.25).abs() < 1e-12);
    assert!((hesrpt_fraction(2, 2, 0.5) - 0.75).abs() < 1e-12);
}

#[test]
fn the_speedup_is_learned_from_throughput_at_two_sizes() {
    let mut scaling = Scaling::default();
    let at = |n: u32, rescaling: bool| {
        let job = Job { rescaling, ..reporting("a", n, 16, 1e6, 10.0, 0.6) };
        snap(0, vec![], vec![], vec![], vec![job])
    };
    scaling.observe(&at(4, false));
    assert_eq!(scaling.exponent("a"), None, "one size says nothing about scaling");
    // A master applying a change is paused: its figure is not a reading at 8 workers.
    scaling.observe(&Snapshot {
        jobs: vec![Job {
            work: Some(WorkReport { throughput: Some(1.0), ..at(8, true).jobs[0].work.unwrap() }),
            ..at(8, true).jobs[0].clone()
        }],
        ..at(8, true)
    });
    assert_eq!(scaling.exponent("a"), None);
    scaling.observe(&at(8, false));
    let p = scaling.exponent("a").expect("two sizes seen");
    assert!((p - 0.6).abs() < 1e-9, "learned {p}");
    scaling.retain(&[]);
    assert_eq!(scaling.exponent("a"), None, "forgotten with the job");
}

#[test]
fn extras_go_mostly_to_the_job_closest_to_done() {
    // Two running jobs with 2 workers each and 4 CPUs to fill. `long` has 100x the work left of
    // `short`. By weight alone they would get 2 each; heSRPT (p = 0.8 until learned) gives the
    // shorter 97% of their weight, so it takes all four.
    let jobs = vec![
        reporting("long", 2, 8, 1e8, 10.0, DEFAULT_EXPONENT),
        reporting("short", 2, 8, 1e6, 10.0, DEFAULT_EXPONENT),
    ];
    let mut pods = workers("long", "n1", 0..2, w());
    pods.extend(workers("short", "n1", 0..2, w()));
    let s = snap(0, vec![node("n1", 8000, 32)], pods, vec![], jobs);
    let d = decide_once(eager(), &s);
    assert_eq!(move_of(&d, "short"), (2, 6));
    assert!(intent(&d, "long").is_none(), "{:#?}", d.intents);
    let why = &the_intent(&d, "short").why;
    assert!(why.contains("split by completion time (shortest of 2 jobs"), "{why}");

    // Switched off, weights alone: 2 each.
    let d = decide_once(Config { completion_time_split: false, ..eager() }, &s);
    assert_eq!((move_of(&d, "short"), move_of(&d, "long")), ((2, 4), (2, 4)));
}

#[test]
fn size_is_measured_in_time_not_samples() {
    // `fast` has 10x the samples left of `slow` but processes them 100x faster per worker: it is
    // the shorter job and gets the extras.
    let jobs = vec![
        reporting("fast", 2, 8, 1e7, 1000.0, DEFAULT_EXPONENT),
        reporting("slow", 2, 8, 1e6, 10.0, DEFAULT_EXPONENT),
    ];
    let mut pods = workers("fast", "n1", 0..2, w());
    pods.extend(workers("slow", "n1", 0..2, w()));
    let d = decide_once(eager(), &snap(0, vec![node("n1", 8000, 32)], pods, vec![], jobs));
    assert_eq!(move_of(&d, "fast"), (2, 6));
}

#[test]
fn jobs_with_known_work_keep_their_weight_against_the_others() {
    // `open` reports no progress (weight 1); `near` and `far` report theirs (weight 1 each). On
    // 12 CPUs with a worker each, the two known jobs together get twice `open`'s share, split
    // by heSRPT: open 4, near 7, far 1.
    let jobs = vec![
        job("open", w(), 1, 12, 1),
        reporting("near", 1, 12, 1e5, 10.0, DEFAULT_EXPONENT),
        reporting("far", 1, 12, 1e8, 10.0, DEFAULT_EXPONENT),
    ];
    let mut pods = workers("open", "n1", 0..1, w());
    pods.extend(workers("near", "n1", 0..1, w()));
    pods.extend(workers("far", "n1", 0..1, w()));
    let s = snap(0, vec![node("n1", 12000, 48)], pods, vec![], jobs);
    let d = decide_once(eager(), &s);
    assert_eq!(move_of(&d, "open"), (1, 4));
    assert_eq!(move_of(&d, "near"), (1, 7));
    assert!(intent(&d, "far").is_none(), "{:#?}", d.intents);
}

#[test]
fn two_jobs_with_no_known_end_still_share_by_weight() {
    // Neither reports progress: the 3:1 weights hold, whatever the split would do.
    let heavy = Job { weight: 3.0, ..job("heavy", w(), 1, 12, 0) };
    let light = job("light", w(), 1, 12, 0);
    let s = snap(0, vec![node("n1", 8000, 32)], vec![], vec![], vec![heavy, light]);
    let weights = split(&s, &Scaling::default(), true).weights;
    assert_eq!(weights, vec![3.0, 1.0]);
    let d = decide_once(eager(), &s);
    assert_eq!((move_of(&d, "heavy"), move_of(&d, "light")), ((0, 6), (0, 2)));
}

#[test]
fn priority_levels_are_split_apart() {
    // One known job per level: nothing to split at either level, weights are the jobs' own.
    let hi = Job { priority: 10, weight: 2.0, ..reporting("hi", 1, 8, 1e9, 10.0, 0.8) };
    let lo = reporting("lo", 1, 8, 1e3, 10.0, 0.8);
    let s = snap(0, vec![], vec![], vec![], vec![hi, lo]);
    let mut scaling = Scaling::default();
    scaling.observe(&s);
    let out = split(&s, &scaling, true);
    assert_eq!(out.weights, vec![2.0, 1.0]);
    assert!(out.because.iter().all(Option::is_none));
}

#[test]
fn room_for_online_pods_comes_from_the_job_furthest_from_done() {
    // Two jobs of 4 workers fill n1; two online pods wait for 2 CPUs. One job gives back two
    // workers, not both one: the one with the most work left, where the loss costs the mean
    // completion time least (its heSRPT weight is the smallest, so its extras are kept last).
    for (near, far) in [("a", "b"), ("b", "a")] {
        let jobs = vec![
            Job { min_workers: 2, ..reporting(near, 4, 8, 1e5, 10.0, DEFAULT_EXPONENT) },
            Job { min_workers: 2, ..reporting(far, 4, 8, 1e8, 10.0, DEFAULT_EXPONENT) },
        ];
        let mut pods = workers("a", "n1", 0..4, w());
        pods.extend(workers("b", "n1", 0..4, w()));
        pods.extend([pending_online("web-0", "web", w()), pending_online("web-1", "web", w())]);
        let s = snap(0, vec![node("n1", 8000, 32)], pods, vec![service("web", w())], jobs);
        let d = decide_once(eager(), &s);
        assert_eq!(d.intents.len(), 1, "{:#?}", d.intents);
        assert_eq!(move_of(&d, far), (4, 2));
        assert_eq!(the_intent(&d, far).reason, Reason::OnlineHeadroom);
    }
}
