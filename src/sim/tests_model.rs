//! What replay assumes about the live world, each pinned by a tiny replay: released workers hold
//! their node for the job's release latency, online pods preempt under `colocate` unless their
//! service says `preemption_policy: Never`, the HPA sees load through its metrics pipeline, and
//! the controller sees load only at its samples.

use std::path::Path;

use super::policy::Policy;
use super::scenario::Scenario;
use super::tests::{replay, spike};

#[test]
fn the_hpa_acts_on_what_its_metrics_pipeline_published() {
    // Published every 15 s over the last 15 s: the 60 s sync sees the calm load, the 75 s sync
    // the new one. A 30 s window at 30 s resolution publishes at 60 s (calm) and 90 s.
    let run = replay(&spike("", ""), Policy::OnlineOnly);
    assert_eq!(run.timeline[74].services[0].1, 2);
    assert_eq!(run.timeline[75].services[0].1, 6);
    let slow = spike("", "")
        .replace("target_utilization: 0.5}", "target_utilization: 0.5, metrics_resolution: 30s, metrics_window: 30s}");
    let run = replay(&slow, Policy::OnlineOnly);
    assert_eq!(run.timeline[89].services[0].1, 2);
    assert!(run.timeline[90].services[0].1 > 2);
}

#[test]
fn a_release_slower_than_the_hpa_step_leaves_pods_waiting() {
    // The controller sees the step within a sample or two and releases workers at once, but they
    // hold the node for 30 s (to about 92 s): the pods the HPA creates at 75 s find no room.
    // Here the released workers are the newest, so the scheduler's victims are the leaving ones
    // and nobody else is killed (`cluster` tests show the case where it kills running workers).
    let run = replay(&spike("", ""), Policy::Colocate);
    assert!(run.result.pending_online_pod_s >= 4.0 * 15.0, "{:?}", run.result);
    assert_eq!(run.result.controller_forced_preemptions, 0);
    // Sampled every 5 s, released in 4 s, the room is there before the HPA acts. In 5 s, the
    // workers released at the 70 s sample leave at the very moment of the 75 s sync, a moment
    // after its pods were tried: one of them preempts, and its victim is a released worker (the
    // last its cache updated), already leaving: nobody is killed.
    let every_5s = |job: &str| format!("{}observation: {{sample_interval: 5s}}\n", spike(job, ""));
    let run = replay(&every_5s("release_time: 4s"), Policy::Colocate);
    assert_eq!((run.result.forced_preemptions, run.result.pending_online_pod_s), (0, 0.0), "{:?}", run.result);
    let run = replay(&every_5s("release_time: 5s"), Policy::Colocate);
    assert_eq!(run.result.scheduler_preemptions, 0, "{:?}", run.result);
    assert!(run.timeline.last().is_some_and(|r| r.victims_leaving >= 1), "no preemption happened");
    // Sampled every second (the default), the 5 s release is decided a sample sooner: in time.
    let run = replay(&spike("release_time: 5s", ""), Policy::Colocate);
    assert_eq!((run.result.forced_preemptions, run.result.pending_online_pod_s), (0, 0.0), "{:?}", run.result);
}

#[test]
fn a_job_that_releases_in_place_frees_its_room_in_seconds() {
    // The same 30 s grace period, but the master resizes released workers down first: their
    // room frees when the kubelet reports the resize (1.2 s by default), before the HPA's 75 s
    // step, so no pod waits and none is killed. The grace period still bounds a release that
    // the scheduler cuts, which this spike does not provoke.
    let run = replay(&spike("release_in_place: true", ""), Policy::Colocate);
    assert_eq!((run.result.forced_preemptions, run.result.pending_online_pod_s), (0, 0.0), "{:?}", run.result);
    let scenario = Scenario::parse(Path::new("tiny.yaml"), &spike("release_in_place: true", "")).unwrap();
    assert_eq!(scenario.spec.release_time(0), super::scenario::IN_PLACE_RELEASE);
    // A slow kubelet (`release_time` with the key) is honoured: 20 s is still too late.
    let run = replay(&spike("release_in_place: true\n    release_time: 20s", ""), Policy::Colocate);
    assert!(run.result.pending_online_pod_s > 0.0, "{:?}", run.result);
    // Such a master answers a shrink once its resizes are reported: no other command for the
    // job goes out before (one in flight per job, as live). The load steps twice, 5 s apart;
    // a master that answers at once is sent the second shrink 5 s after the first.
    let two_steps = |job: &str| spike(job, "").replace(r#"["61s", 300]"#, r#"["61s", 200], ["66s", 300]"#);
    let commands =
        |job: &str| -> Vec<f64> { replay(&two_steps(job), Policy::Colocate).intents.iter().map(|(t, _)| *t).collect() };
    let gaps = |at: Vec<f64>| -> Vec<f64> { at.windows(2).skip(1).map(|w| w[1] - w[0]).collect() };
    assert!(gaps(commands("")).iter().any(|g| *g < 20.0), "{:?}", commands(""));
    let in_place = commands("release_in_place: true\n    release_time: 20s");
    assert!(in_place.len() >= 3, "{in_place:?}");
    assert!(gaps(in_place.clone()).iter().all(|g| *g >= 20.0 - 1e-9), "{in_place:?}");
}

#[test]
fn pods_that_do_not_preempt_wait_for_the_release() {
    // Same 30 s release, `preemptionPolicy: Never`: nobody is killed, the pods wait for the
    // released workers, and fewer than the deadline's 30 s, so colocate forces nothing either.
    let run = replay(&spike("", "preemption_policy: Never"), Policy::Colocate);
    assert_eq!(run.result.forced_preemptions, 0, "{:?}", run.result);
    assert!(run.result.pending_online_pod_s > 0.0);
    let waited_at_most = run.timeline.iter().filter(|r| r.pending_online_pods > 0).count();
    assert!(waited_at_most < 30, "pods waited {waited_at_most} s");
    // The baseline preempts whatever the key says: it stands for what clusters do today.
    let run = replay(&spike("", "preemption_policy: Never"), Policy::Preemption);
    assert!(run.result.scheduler_preemptions > 0);
}

#[test]
fn a_release_time_longer_than_the_grace_period_is_refused() {
    let yaml = spike("release_time: 45s", "");
    let err = Scenario::parse(Path::new("tiny.yaml"), &yaml).unwrap_err().to_string();
    assert!(err.contains("jobs[0].release_time") && err.contains("termination_grace_period"), "{err}");
}

#[test]
fn a_scrape_interval_a_rate_cannot_use_is_refused() {
    // A rate needs two scrapes inside its window (15 s by default).
    for bad in ["8s", "0s"] {
        let yaml = format!("{}observation: {{scrape_interval: {bad}}}\n", spike("", ""));
        let err = Scenario::parse(Path::new("tiny.yaml"), &yaml).unwrap_err().to_string();
        assert!(err.contains("observation.scrape_interval") && err.contains("load_window"), "{bad}: {err}");
    }
    let ok = format!("{}observation: {{scrape_interval: 7s}}\n", spike("", ""));
    assert!(Scenario::parse(Path::new("tiny.yaml"), &ok).is_ok());
}

#[test]
fn a_window_replays_as_the_live_spike_test_plays_it() {
    use super::window::{hpa_script, replay_window};
    let (scenario, _) = flash_window(20.0, false);
    // The HPA script is the online-only run's: 25 -> 50 -> 100 -> 125 at 495, 510 and 525 s.
    let steps: Vec<(f64, u32, u32)> = hpa_script(&scenario)[0]
        .iter()
        .filter(|s| s.desired != s.current && (465.0..585.0).contains(&s.at_s))
        .map(|s| (s.at_s, s.current, s.desired))
        .collect();
    assert_eq!(steps, [(495.0, 25, 50), (510.0, 50, 100), (525.0, 100, 125)]);
    let at_phase = |load_signal: bool, warmup_s: f64| flash_window(warmup_s, load_signal).1;
    // The controller samples from its start, 20 s before the window: every second (the
    // default) or, below, every 5 s: at 25.0 s, 5 s before the HPA's sync at 30 s.
    let settings = |load_signal: bool| at_phase(load_signal, 20.0);
    // Plain preemption: the new pods preempt workers and wait out their 30 s grace period.
    let baseline = replay_window(&scenario, Policy::Preemption, &settings(false));
    assert!(baseline.scheduler_preemptions > 20 && baseline.online_unschedulable_pod_s > 2000.0, "{baseline:?}");
    let (mut fast_masters, _) = flash_window(20.0, false);
    for job in &mut fast_masters.spec.jobs {
        job.release_time = Some(std::time::Duration::from_secs(5));
    }
    // colocate with the load signal and masters that release in 5 s, sampling every second
    // (the default): the release that serves the sync lands in time; no pod waits, none killed.
    let every_second = replay_window(&fast_masters, Policy::Colocate, &settings(true));
    assert_eq!(
        (every_second.online_unschedulable_pod_s, every_second.scheduler_preemptions),
        (0.0, 0),
        "{every_second:?}"
    );
    // Sampling every 5 s, it depends on the phase of the samples against the HPA's syncs.
    fast_masters.spec.observation.sample_interval = std::time::Duration::from_secs(5);
    // Sampled 7 s before the sync, the release that serves it lands in time.
    let early = replay_window(&fast_masters, Policy::Colocate, &at_phase(true, 22.0));
    assert_eq!(
        (early.online_unschedulable_pod_s, early.scheduler_preemptions, early.colocate_forced_preemptions),
        (0.0, 0, 0)
    );
    assert!(!early.scale_commands.is_empty());
    // Sampled 5 s before it, that release lands a moment after the sync, whose last pods
    // preempt a few workers (live: 2-3); the pods barely wait.
    let fast = replay_window(&fast_masters, Policy::Colocate, &settings(true));
    assert!((1..=4).contains(&fast.scheduler_preemptions), "{fast:?}");
    assert!(fast.online_unschedulable_pod_s < 10.0 && fast.colocate_forced_preemptions == 0, "{fast:?}");
    // With the HPA's status only and 30 s releases, pods wait for the first step's release, but
    // the metric's rise reserves for the second step in time: under the 45% of the baseline
    // that `hpa-only-grace30` is held to (tests/support/spike_acceptance.rs). Reserving for the
    // metric's level alone leaves 66%; with its trend, 33%.
    let slow = replay_window(&scenario, Policy::Colocate, &settings(false));
    assert!(slow.online_unschedulable_pod_s > 0.0, "{slow:?}");
    assert!(slow.online_unschedulable_pod_s < 0.45 * baseline.online_unschedulable_pod_s, "{slow:?}");
}

#[test]
fn a_window_replayed_under_several_draws_of_the_schedulers_ties_shows_their_spread() {
    use super::window::{replay_window, WindowDraws};
    let (scenario, settings) = flash_window(20.0, false);
    let draws = WindowDraws::replay(&scenario, Policy::Colocate, &settings, 7);
    assert_eq!(draws.runs.len(), 7);
    // The first draw is a full replay's.
    assert_eq!(draws.runs[0], replay_window(&scenario, Policy::Colocate, &settings));
    // Victims and nodes that rank alike go another way under other draws: the figures move.
    let (pod_s, killed) = (draws.pod_s(), draws.killed());
    assert!(pod_s.min < pod_s.max || killed.min < killed.max, "every draw the same: {pod_s:?} {killed:?}");
    assert!(pod_s.min <= pod_s.median && pod_s.median <= pod_s.max);
    assert!(killed.min <= killed.median && killed.median <= killed.max);
    let mut sorted: Vec<f64> = draws.runs.iter().map(|r| r.online_unschedulable_pod_s).collect();
    sorted.sort_by(f64::total_cmp);
    assert_eq!(pod_s.median, sorted[3]);
    assert_eq!(draws.typical().online_unschedulable_pod_s, pod_s.median);
}

#[test]
fn a_window_controller_samples_on_its_own_clock_from_its_start() {
    use super::window::replay_window;
    let first = |warmup_s: f64| {
        let (scenario, settings) = flash_window(warmup_s, true);
        replay_window(&scenario, Policy::Colocate, &settings).scale_commands[0].0
    };
    // Started 20.2 s before the window, the controller samples at 0.8 s, 1.8 s, ... of it (as the
    // live one, which ticks from its start): the load's rise is acted on at a sample, not at
    // the step's whole second; started 20.0 s before, at whole seconds.
    let early = first(20.2);
    assert!((early - early.floor() - 0.8).abs() < 1e-6, "first command at {early} s");
    let on_time = first(20.0);
    assert!((on_time - on_time.round()).abs() < 1e-6, "first command at {on_time} s");
    assert!(early < on_time, "{early} {on_time}");
}

#[test]
fn a_windows_scale_up_pods_appear_as_the_replicaset_creates_them() {
    use super::window::replay_window;
    let (scenario, settings) = flash_window(20.0, false);
    let run = replay_window(&scenario, Policy::Preemption, &settings);
    let pending = |from: f64, to: f64| {
        run.series.iter().filter(|s| s.t_s > from - 1e-6 && s.t_s < to - 1e-6).map(|s| s.pending_online_pods).max()
    };
    // The HPA doubles the service at 30 s: its 25 new pods fit in kube-controller-manager's
    // burst and come at once; the first five fit, the 20 others wait.
    assert_eq!(pending(29.0, 30.0), Some(0));
    assert_eq!(pending(30.0, 30.1), Some(20));
    // At 45 s it asks for 50 more: 30 at once, then 20 a second, all there by 46 s.
    assert_eq!(pending(45.0, 45.1), Some(50));
    assert!(pending(45.5, 45.6).is_some_and(|n| n > 50 && n < 70), "{:?}", pending(45.5, 45.6));
    assert_eq!(pending(46.0, 46.1), Some(70));
}

#[test]
fn the_controller_managers_client_sends_a_burst_then_its_rate() {
    use super::window_plan::ClientBucket;
    let mut kcm = ClientBucket::full(0.0);
    let sent: Vec<f64> = (0..32).map(|_| kcm.take(10.0)).collect();
    assert!(sent[..30].iter().all(|&t| t == 10.0), "{sent:?}");
    assert!((sent[30] - 10.05).abs() < 1e-9 && (sent[31] - 10.1).abs() < 1e-9, "{sent:?}");
    // Idle for a second after its queue drained: 20 tokens back, not more than the burst.
    let refilled: Vec<f64> = (0..21).map(|_| kcm.take(11.1)).collect();
    assert!(refilled[..20].iter().all(|&t| (t - 11.1).abs() < 1e-6) && refilled[20] > 11.14, "{refilled:?}");
    let mut rested = ClientBucket::full(0.0);
    let after_rest: Vec<f64> = (0..31).map(|_| rested.take(100.0)).collect();
    assert!(after_rest[29] == 100.0 && after_rest[30] > 100.0, "{after_rest:?}");
}

#[test]
fn a_windows_fill_starts_jobs_one_after_another_and_names_workers_at_random() {
    use super::cluster::PodKind;
    let (scenario, settings) = flash_window(20.0, false);
    let mut names: Vec<Vec<String>> = Vec::new();
    for draw in [0, 1] {
        let mut world = super::window::window_world(
            &scenario,
            Policy::Colocate,
            &super::window::WindowSettings { tie_draw: draw, ..settings.clone() },
        );
        world.now = settings.from_s - settings.warmup_s;
        world.fill_window();
        // (start, name) of each job's workers, bert-finetune (arrived first) then recsys.
        let workers = |job: usize| {
            let mut w: Vec<(f64, String)> = world
                .cluster
                .pods
                .values()
                .filter(|p| p.kind == (PodKind::Worker { job }))
                .map(|p| (p.ready_at.expect("bound"), p.name.clone()))
                .collect();
            w.sort_by(|a, b| a.0.total_cmp(&b.0));
            w
        };
        let (bert, recsys) = (workers(0), workers(1));
        assert!(bert.len() > 10 && recsys.len() > 10, "{} {}", bert.len(), recsys.len());
        // The live fill's pace: 17 binds a second, the second job 0.45 s after the first's last,
        // all before the controller starts.
        let span = recsys.last().unwrap().0 - bert[0].0;
        let expected = (bert.len() + recsys.len() - 2) as f64 / 17.0 + 0.45;
        assert!((span - expected).abs() < 1e-6, "span {span}, expected {expected}");
        assert!(recsys[0].0 > bert.last().unwrap().0 + 0.4);
        assert!(recsys.last().unwrap().0 <= world.now);
        names.push(recsys.iter().map(|w| w.1.clone()).collect::<Vec<_>>());
    }
    // Named as a ReplicaSet names pods: the job's name and eight random characters, drawn
    // afresh under each draw (numbered in start order, colocate, which keeps a node's workers
    // in name order, released the youngest: preemption's own next victims).
    for name in names.iter().flatten() {
        let suffix = name.strip_prefix("recsys-worker-").expect("the job's name first");
        assert!(suffix.len() == 8 && suffix.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()), "{name}");
    }
    assert_ne!(names[0], names[1], "the names do not change with the draw");
}

/// The flash crowd's spike window as `tests/spike_replay.rs` plays it.
fn flash_window(warmup_s: f64, load_signal: bool) -> (Scenario, super::window::WindowSettings) {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/flash-crowd.yaml"));
    let settings = super::window::WindowSettings {
        from_s: 465.0,
        to_s: 585.0,
        warmup_s,
        load_signal,
        latency_signal: false,
        tie_draw: 0,
        usage_scrape_phase_s: None,
    };
    (Scenario::load(path).unwrap(), settings)
}

#[test]
fn the_controller_decides_on_a_step_before_its_new_pods_preempt() {
    // Live, colocate reads the HPA's new status and decides within milliseconds, before the
    // scale-up's pods have preempted anyone (a `--v=5` scheduler log of the flash crowd has its
    // intent 14 ms before the first new pod exists). So what it releases at the HPA's step is
    // the same whether those pods preempt or wait: deciding after them, replay would release 6
    // workers where live releases 12.
    let (scenario, settings) = flash_window(20.2, false);
    let (mut waiting, _) = flash_window(20.2, false);
    for s in &mut waiting.spec.services {
        s.preemption_policy = super::scenario::PreemptionPolicy::Never;
    }
    let first_step = |sc: &Scenario| {
        let commands = super::window::replay_window(sc, Policy::Colocate, &settings).scale_commands;
        let at = commands.first().expect("colocate shrinks in the spike").0;
        commands.into_iter().filter(|c| c.0 == at).map(|(_, job, target, _)| (job, target)).collect::<Vec<_>>()
    };
    let (preempting, not) = (first_step(&scenario), first_step(&waiting));
    assert_eq!(preempting, not, "the first shrink depends on whether the pods preempt");
}
