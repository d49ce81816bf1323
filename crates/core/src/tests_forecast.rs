//! The forecast of online growth (`forecast.rs`): demand read from the load once calibrated,
//! reservations over the jobs' release latency and the HPA syncs in it, the metric applied to the
//! replicas it was measured on, and replaced workers that keep their place while online pods
//! wait.

use std::time::Duration;

use super::test_support::*;
use super::*;

/// Load samples every 5 s from `from` to `to` seconds, `value(t)` each.
fn samples(from: u64, to: u64, value: impl Fn(u64) -> f64) -> Vec<Sample> {
    (from..=to).step_by(5).map(|t| Sample { at: secs(t), value: value(t) }).collect()
}

/// `replicas` ready web pods (1 CPU) on n1 (64 CPU, the rest idle); HPA at rest at `replicas`
/// with `metric` (target 0.5); `load` samples; no job unless `jobs` has some.
fn web(now: u64, replicas: u32, metric: f64, load: Vec<Sample>, jobs: Vec<Job>, pods: Vec<Pod>) -> Snapshot {
    let replica = res(1000, 1);
    let mut all: Vec<Pod> = (0..replicas).map(|i| online(&format!("web-{i}"), "web", "n1", replica)).collect();
    all.extend(pods);
    let hpa = Hpa { metric: Some(HpaMetric { current: metric, target: 0.5 }), ..hpa(1, 500, replicas, replicas) };
    let svc = Service { hpa: Some(hpa), load, ..service("web", replica) };
    snap(now, vec![node("n1", 64_000, 256), node("n2", 64_000, 256)], all, vec![svc], jobs)
}

fn exact() -> Config {
    Config { reserve_quantum: 0.0, ..Config::default() }
}

#[test]
fn once_calibrated_the_load_leads_the_hpa_metric() {
    let mut core = Core::new(exact());
    // Calm: 10 replicas at 50% serving 500/s, so one replica carries 100/s at 100%.
    let calm = samples(0, 100, |_| 500.0);
    let d = core.decide(&web(100, 10, 0.5, calm.clone(), vec![], vec![]));
    assert_eq!(need(&d, "web").expected, 10);
    // The load jumps to 1500/s; the HPA's metric has not moved yet (it lags by a sync or two).
    let mut jumped = calm;
    jumped.extend(samples(105, 110, |_| 1500.0));
    let d = core.decide(&web(110, 10, 0.5, jumped.clone(), vec![], vec![]));
    // 1500/s is 15 replicas at 100%, 30 at the 50% target; one HPA sync can add at most 100%.
    let n = need(&d, "web");
    assert_eq!(n.expected, 20, "{n:?}");
    assert!(n.because.contains("load 1500/s = 15.0 replicas at 100%"), "{n:?}");
    // A core that never saw the calm period has only the metric (at target) and the trend.
    let d = Core::new(exact()).decide(&web(110, 10, 0.5, jumped, vec![], vec![]));
    let n = need(&d, "web");
    assert!(n.expected < 20 && !n.because.contains("at 100%"), "{n:?}");
}

#[test]
fn calibration_skips_moments_that_are_not_calm() {
    let mut core = Core::new(exact());
    // Rising load, then the jump: nothing learned, so the metric alone decides.
    let rising = samples(0, 100, |t| 100.0 + 10.0 * t as f64);
    core.decide(&web(100, 10, 0.5, rising.clone(), vec![], vec![]));
    let mut jumped = rising;
    jumped.extend(samples(105, 110, |_| 3000.0));
    let d = core.decide(&web(110, 10, 0.5, jumped, vec![], vec![]));
    assert!(!need(&d, "web").because.contains("at 100%"), "{:?}", need(&d, "web"));
    // Scaling in progress (desired above current) is not calm either.
    let mut core = Core::new(exact());
    let mut s = web(100, 10, 0.5, samples(0, 100, |_| 500.0), vec![], vec![]);
    s.services[0].hpa.as_mut().unwrap().desired_replicas = 12;
    core.decide(&s);
    let d = core.decide(&web(110, 10, 0.5, samples(0, 110, |t| if t > 100 { 1500.0 } else { 500.0 }), vec![], vec![]));
    assert!(!need(&d, "web").because.contains("at 100%"), "{:?}", need(&d, "web"));
}

#[test]
fn the_metric_counts_only_the_replicas_it_was_measured_on() {
    // The HPA measured 180% on 3 pods (target 60%) and decided 9; the 9 pods now exist and are
    // ready. The metric implies 9 (3 x 1.8 / 0.6), not 27 (9 x 1.8 / 0.6).
    let replica = res(1000, 1);
    let pods = (0..9).map(|i| online(&format!("web-{i}"), "web", "n1", replica)).collect();
    let hpa = Hpa { metric: Some(HpaMetric { current: 1.8, target: 0.6 }), ..hpa(1, 50, 3, 9) };
    let svc = Service { hpa: Some(hpa), ..service("web", replica) };
    let d = decide_once(exact(), &snap(100, vec![node("n1", 64_000, 256)], pods, vec![svc], vec![]));
    assert_eq!(need(&d, "web").expected, 9, "{:?}", need(&d, "web"));
}

#[test]
fn a_slow_release_reserves_for_every_hpa_sync_within_it() {
    // 4 replicas at 6x the target (3.0 vs 0.5): 24 wanted. Within 15 s the HPA can take one step (4 -> 8);
    // a job whose workers take 30 s to leave must make room for two (4 -> 8 -> 16), 45 s three.
    let w = res(1000, 1);
    let need_with = |release: u64| {
        let job = Job { release_latency: secs(release), ..job("a", w, 1, 40, 10) };
        let pods = workers("a", "n2", 0..10, w);
        let d = decide_once(exact(), &web(100, 4, 3.0, vec![], vec![job], pods));
        let n = need(&d, "web");
        (n.expected, n.because.clone())
    };
    assert_eq!(need_with(2).0, 8);
    let (expected, because) = need_with(30);
    assert_eq!(expected, 16);
    assert!(because.contains("within 30s (2 HPA syncs)"), "{because}");
    assert_eq!(need_with(45).0, 24);
}

#[test]
fn replaced_workers_keep_their_place_while_online_pods_wait() {
    // n1 is full: 56 web pods and 8 workers of `a` (target 10: two replacements pending after
    // the scheduler preempted two for web pods, one of which still waits).
    let w = res(1000, 1);
    let mut pods: Vec<Pod> = workers("a", "n1", 0..8, w);
    pods.push(pod("a-8", PodClass::Worker { job: "a".into() }, None, w));
    pods.push(pod("a-9", PodClass::Worker { job: "a".into() }, None, w));
    let waiting = pending_online("web-x", "web", res(1000, 1));
    let with = |extra: Vec<Pod>| {
        let mut all = pods.clone();
        all.extend(extra);
        let mut s = web(100, 56, 0.5, vec![], vec![job("a", w, 1, 10, 10)], all);
        s.nodes.truncate(1);
        decide_once(exact(), &s)
    };
    // With the web pod waiting, the target stays (the scheduler's preemption is not a shrink).
    let d = with(vec![waiting]);
    assert!(intent(&d, "a").is_none_or(|i| i.target >= 9), "{:?}", d.intents);
    // Once no online pod waits, the replacements that fit nowhere are given up.
    let d = with(vec![]);
    assert_eq!(move_of(&d, "a"), (10, 8));
}

#[test]
fn release_latency_comes_from_the_slowest_job() {
    let w = res(1000, 1);
    let jobs = vec![
        Job { release_latency: secs(5), ..job("fast", w, 1, 4, 0) },
        Job { release_latency: secs(40), ..job("slow", w, 1, 4, 0) },
    ];
    let s = snap(0, vec![node("n1", 8000, 32)], vec![], vec![], jobs);
    assert_eq!(forecast::release_lead(&s, &Config::default()), Duration::from_secs(40));
    let s = snap(0, vec![node("n1", 8000, 32)], vec![], vec![], vec![]);
    assert_eq!(forecast::release_lead(&s, &Config::default()), Duration::from_secs(15));
}

#[test]
fn noise_in_a_calm_load_reserves_nothing() {
    let mut core = Core::new(exact());
    // Calibrated on 500/s over 10 replicas at 50%; then the rate reads 500.3/s and rises by
    // hundredths: 10.006 replicas' worth is noise, not an eleventh replica.
    core.decide(&web(100, 10, 0.5, samples(0, 100, |_| 500.0), vec![], vec![]));
    let noisy = samples(0, 110, |t| if t > 100 { 500.3 + 0.01 * (t - 100) as f64 } else { 500.0 });
    let d = core.decide(&web(110, 10, 0.5, noisy, vec![], vec![]));
    assert_eq!(need(&d, "web").expected, 10, "{:?}", need(&d, "web"));
    // 3% more is not noise.
    let more = samples(0, 110, |t| if t > 100 { 515.0 } else { 500.0 });
    let d = core.decide(&web(110, 10, 0.5, more, vec![], vec![]));
    assert_eq!(need(&d, "web").expected, 11, "{:?}", need(&d, "web"));
}

#[test]
fn an_hpa_scaling_down_reserves_nothing_for_the_pods_it_removes() {
    // The HPA went from 6 to 2 (desired 2, current 6 until its next sync); 2 pods remain. The
    // job on the other node keeps its room. With desired 6 over current 2, the 4 missing pods
    // are reserved.
    let replica = res(1000, 1);
    let w = res(1000, 1);
    let decide = |current: u32, desired: u32| {
        let pods: Vec<Pod> = (0..2).map(|i| online(&format!("web-{i}"), "web", "n1", replica)).collect();
        let mut all = pods;
        all.extend(workers("a", "n2", 0..8, w));
        let hpa = Hpa { metric: Some(HpaMetric { current: 0.3, target: 0.6 }), ..hpa(2, 6, current, desired) };
        let svc = Service { hpa: Some(hpa), ..service("web", replica) };
        let s =
            snap(100, vec![node("n1", 8000, 32), node("n2", 8000, 32)], all, vec![svc], vec![job("a", w, 1, 12, 8)]);
        decide_once(exact(), &s)
    };
    let d = decide(6, 2);
    assert_eq!(need(&d, "web").expected, 2, "{:?}", need(&d, "web"));
    assert!(intent(&d, "a").is_none_or(|i| i.target >= 8), "{:?}", d.intents);
    let d = decide(2, 6);
    assert_eq!(need(&d, "web").expected, 6, "{:?}", need(&d, "web"));
}

#[test]
fn the_reason_names_the_counts_it_compares() {
    // The Deployment was scaled below the HPA's current (6 pods, HPA current 9 desired 9): the
    // why compares the HPA's 9 with the 6 replicas there are, and says what the status says.
    let replica = res(1000, 1);
    let pods: Vec<Pod> = (0..6).map(|i| online(&format!("web-{i}"), "web", "n1", replica)).collect();
    let svc = Service { hpa: Some(hpa(1, 20, 9, 9)), ..service("web", replica) };
    let d = decide_once(exact(), &snap(100, vec![node("n1", 64_000, 256)], pods, vec![svc], vec![]));
    let n = need(&d, "web");
    assert_eq!(n.expected, 9, "{n:?}");
    assert_eq!(n.because, "HPA desired 9 > 6 replicas (status current 9)");
}
