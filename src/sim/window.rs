//! A window of a scenario's spike, replayed the way `tests/spike_replay.rs` plays it on a real
//! control plane, so that replay and live can be compared figure for figure:
//! - the services run alone from time 0, and their HPAs make the decisions of the scenario's
//!   `online-only` replay (the live test plays exactly those: [`hpa_script`]);
//! - `warmup` before the window the jobs are started as large as fits (in arrival order, each
//!   asking for `max_workers`, workers spread as kube-scheduler's default scoring spreads them)
//!   and, under `colocate`, the controller starts, with no load samples of its own yet;
//! - under `preemption`, a job's ReplicaSet replaces preempted workers at once, up to the
//!   workers it started with;
//! - the figures count from the window's start to its end.
//!
//! How fast released workers leave, and whether in place, is the scenario's (`jobs[]`
//! `release_time`, `release_in_place`), as in a full replay: a configuration that changes the
//! masters is a scenario that says so, so the controller in replay plans with the release
//! latency the masters would announce.

use super::cluster::{PodId, PodKind, Removal};
use super::engine::World;
use super::job_model::{Phase, SimJob};
use super::policy::draw;
use super::policy::Policy;
use super::scenario::Scenario;
pub use super::service::HpaSync;
use super::window_plan::ClientBucket;
use super::window_plan::Window;

/// The longest step a window is replayed at. The live run's events fall anywhere in a second:
/// the controller samples on its own clock, from its start (every second; 4.85 s, 9.85 s, ...
/// into the window in the spike test when it sampled every 5 s), the HPA syncs on the window's
/// whole seconds, and which comes first decides what the controller sees and whose pods take
/// the room its releases free 30 s later.
/// At whole seconds both fall in one step, in the engine's fixed order.
pub const WINDOW_STEP_S: f64 = 0.1;

/// How a window is played; the live test's configuration, in replay's terms.
#[derive(Clone, Debug)]
pub struct WindowSettings {
    /// Scenario seconds: the window is `[from_s, to_s)`.
    pub from_s: f64,
    pub to_s: f64,
    /// Seconds before the window when the jobs are filled and the controller starts.
    pub warmup_s: f64,
    /// The controller samples a load signal (Prometheus); without it, HPA status only.
    pub load_signal: bool,
    /// The controller samples the service's p99 (a latency query). Without it the service has
    /// no latency block, as the live controller has none without a latency query: the latency
    /// guard neither holds growth nor shrinks.
    pub latency_signal: bool,
    /// Which draw of the live run's chance to play: kube-scheduler's choices among nodes that
    /// rank alike ([`Cluster::tie_seed`](super::cluster::Cluster::tie_seed); 0 is a full
    /// replay's), where the window opens within a wall-clock second
    /// ([`Cluster::wall_phase_s`](super::cluster::Cluster::wall_phase_s)) and where within
    /// its interval Prometheus scrapes the pods' usage. Nothing else
    /// changes: the HPA script, the load and the startup jitter stay the scenario's.
    pub tie_draw: u64,
    /// Scenario seconds, modulo `observation.usage_scrape_interval`, at which Prometheus scrapes
    /// the pods' usage; drawn with the rest of the draw's chance where not given. A live run's
    /// is known (Prometheus reports when it scraped), and where the scrapes fall against the
    /// HPA's steps decides how much usage the controller sees: right after a step, the pods
    /// already there report the share they served alone, and the new ones count at their
    /// request until scraped twice.
    pub usage_scrape_phase_s: Option<f64>,
}

/// The HPA syncs of every service in the scenario's `online-only` replay.
pub fn hpa_script(scenario: &Scenario) -> Vec<Vec<HpaSync>> {
    World::new(scenario, Policy::OnlineOnly).run(&mut |_| {}).hpa_syncs
}

/// What a window's replay measured.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowFigures {
    /// Summed seconds online pods waited to bind, inside the window.
    pub online_unschedulable_pod_s: f64,
    /// Running workers the scheduler preempted inside the window.
    pub scheduler_preemptions: u64,
    /// Of those, workers bound under [`YOUNG_VICTIM_S`](super::report::YOUNG_VICTIM_S) before.
    pub scheduler_preemptions_young: u64,
    /// Workers colocate deleted past its deadline inside the window.
    pub colocate_forced_preemptions: u64,
    /// Scale intents colocate applied inside the window: seconds after the window opened, job,
    /// target, reason (as the live test lists its commands).
    pub scale_commands: Vec<(f64, String, u32, String)>,
    /// Most online pods pending at once.
    pub max_pending: u32,
    /// Every step inside the window, to set beside the live run's samples.
    pub series: Vec<WindowSample>,
}

/// One step of a window's replay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowSample {
    /// Seconds after the window opened.
    pub t_s: f64,
    pub pending_online_pods: u32,
    /// Running workers the scheduler preempted since the window opened.
    pub scheduler_preemptions: u64,
    /// Workers already leaving that the scheduler picked as victims since the window opened.
    pub scheduler_victims_leaving: u64,
    /// Active workers of every job.
    pub workers: u32,
    /// The CPU they ask for (requests, or of the batch capacity), in millicores.
    pub worker_cpu_milli: i64,
    /// Worker pods waiting for a node.
    pub pending_workers: u32,
}

/// The world a window is played in, before its first step.
pub(super) fn window_world<'a>(scenario: &'a Scenario, policy: Policy, settings: &WindowSettings) -> World<'a> {
    let mut world = World::new(scenario, policy);
    world.cluster.tie_seed = settings.tie_draw;
    world.cluster.removal = Removal::SecondAfterDeletionTimestamp;
    // Where the live run's window opens within a wall-clock second is chance.
    world.cluster.wall_phase_s = draw(settings.tie_draw, "wall-clock phase");
    world.cluster.pace = Some(super::scheduler_queue::SchedulerPace::new(WINDOW_STEP_S));
    for job in &mut world.jobs {
        job.random_names = true;
    }
    let dt = scenario.spec.step.as_secs_f64().min(WINDOW_STEP_S);
    world.window = Some(Window {
        from_s: settings.from_s,
        until: settings.to_s,
        step_s: dt,
        jobs_at: (settings.from_s - settings.warmup_s).max(0.0),
        load_signal: settings.load_signal,
        latency_signal: settings.latency_signal,
        usage_scrape_phase_s: settings.usage_scrape_phase_s.unwrap_or_else(|| {
            draw(settings.tie_draw, "usage scrape phase")
                * scenario.spec.observation.usage_scrape_interval.as_secs_f64()
        }),
        script: hpa_script(scenario).into_iter().map(|syncs| syncs.into_iter().rev().collect()).collect(),
        filled: false,
        kcm: ClientBucket::full(0.0),
    });
    world
}

/// Replays the window under `policy` (`colocate` or `preemption`).
pub fn replay_window(scenario: &Scenario, policy: Policy, settings: &WindowSettings) -> WindowFigures {
    let world = window_world(scenario, policy, settings);
    let dt = world.window.as_ref().expect("a window world has its window").step_s;
    // Each job's worker CPU, in the timeline's job order.
    let worker_cpu: Vec<i64> = world.jobs.iter().map(|j| j.spec.worker.resources().cpu_milli).collect();
    let run = world.run(&mut |_| {});
    let inside: Vec<_> = run.timeline.iter().filter(|r| r.t + 1e-9 >= settings.from_s && r.t < settings.to_s).collect();
    let before = run.timeline.iter().rev().find(|r| r.t + 1e-9 < settings.from_s);
    let killed0 = before.map_or(0, |r| r.killed_by_scheduler);
    let leaving0 = before.map_or(0, |r| r.victims_leaving);
    let young0 = before.map_or(0, |r| r.killed_young);
    let last = inside.last().copied();
    WindowFigures {
        online_unschedulable_pod_s: inside.iter().map(|r| f64::from(r.pending_online_pods) * dt).sum(),
        scheduler_preemptions: last.map_or(0, |r| r.killed_by_scheduler - killed0),
        scheduler_preemptions_young: last.map_or(0, |r| r.killed_young - young0),
        // Replay's masters release at once what they are asked (see the engine's `schedule`).
        colocate_forced_preemptions: 0,
        scale_commands: run
            .intents
            .iter()
            .filter(|(t, _)| *t + 1e-9 >= settings.from_s && *t < settings.to_s)
            .map(|(t, i)| (t - settings.from_s, i.job.clone(), i.target, i.reason.as_str().to_string()))
            .collect(),
        max_pending: inside.iter().map(|r| r.pending_online_pods).max().unwrap_or(0),
        series: inside
            .iter()
            .map(|r| WindowSample {
                t_s: r.t - settings.from_s,
                pending_online_pods: r.pending_online_pods,
                scheduler_preemptions: r.killed_by_scheduler - killed0,
                scheduler_victims_leaving: r.victims_leaving - leaving0,
                workers: r.workers.iter().sum(),
                worker_cpu_milli: r.workers.iter().zip(&worker_cpu).map(|(n, cpu)| i64::from(*n) * cpu).sum(),
                pending_workers: r.pending_workers,
            })
            .collect(),
    }
}

/// The same window replayed under several draws of the live run's chance (kube-scheduler's
/// choices, the wall clock's phase: [`WindowSettings::tie_draw`] 0, 1, ...): live runs differ
/// in those from run to run, so one draw is one sample of what the cluster might do, and the
/// figures to set against live runs are the draws' medians and range.
#[derive(Clone, Debug)]
pub struct WindowDraws {
    pub runs: Vec<WindowFigures>,
}

/// Lowest, median and highest of one figure over the draws.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread<T> {
    pub min: T,
    pub median: T,
    pub max: T,
}

impl WindowDraws {
    /// `draws` replays of the window (at least one), the first with the full replay's ties.
    pub fn replay(scenario: &Scenario, policy: Policy, settings: &WindowSettings, draws: u64) -> WindowDraws {
        let runs = (0..draws.max(1))
            .map(|d| replay_window(scenario, policy, &WindowSettings { tie_draw: d, ..settings.clone() }))
            .collect();
        WindowDraws { runs }
    }

    pub fn pod_s(&self) -> Spread<f64> {
        spread(self.runs.iter().map(|r| r.online_unschedulable_pod_s).collect())
    }

    pub fn killed(&self) -> Spread<u64> {
        spread(self.runs.iter().map(|r| r.scheduler_preemptions).collect())
    }

    pub fn killed_young(&self) -> Spread<u64> {
        spread(self.runs.iter().map(|r| r.scheduler_preemptions_young).collect())
    }

    pub fn forced(&self) -> Spread<u64> {
        spread(self.runs.iter().map(|r| r.colocate_forced_preemptions).collect())
    }

    /// The draw whose pending pod-seconds are the median (the lower of the two middle ones for
    /// an even count): the one whose series and commands are shown.
    pub fn typical(&self) -> &WindowFigures {
        let mut order: Vec<&WindowFigures> = self.runs.iter().collect();
        order.sort_by(|a, b| a.online_unschedulable_pod_s.total_cmp(&b.online_unschedulable_pod_s));
        order[(order.len() - 1) / 2]
    }
}

fn spread<T: Copy + PartialOrd>(mut values: Vec<T>) -> Spread<T> {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    Spread { min: values[0], median: values[(values.len() - 1) / 2], max: values[values.len() - 1] }
}

/// How fast the live test's fill binds workers, one after another (17 a second), and the pause
/// between one job's last worker and the next job's first (its master starting): measured in
/// three `--v=5` kube-scheduler logs of the flash-crowd spike. The workers' start times follow,
/// and with them the victims kube-scheduler ranks least important: the youngest, so the last
/// job filled. Filled all in one second, every worker would tie and preemption's victims would
/// be a draw over both jobs, so many of them workers colocate has just released (the flash
/// crowd's `hpa-only-grace30`: 7 running workers killed at the 30 s sync where live kills 10
/// running `recsys` workers, the job filled last).
const FILL_BINDS_PER_S: f64 = 17.0;
const FILL_JOB_GAP_S: f64 = 0.45;
/// The pause when the job before did not fit whole: the live test first waits for its extra
/// workers to be found Unschedulable, then scales it down to those placed and waits for the
/// rest to go, before starting the next job's master. 1.5 s in both `--v=5` logs of the
/// WorldCup98 spike (lm-pretrain fits 56 of 64, then ctr starts). It puts the next job's
/// workers in a later second than every worker of the job before, which decides whose workers
/// the first preemptions take (live: only ctr's; replay with the short pause: lm-pretrain's
/// too, in 7 of 15 draws).
const FILL_JOB_GAP_CUT_S: f64 = 1.5;

/// Starts every job as large as fits, as the live test does: in arrival order, each job's
/// workers are placed one by one where kube-scheduler's default scoring would put them (the
/// node with the most room) until one fits nowhere; the job then runs with the workers placed,
/// started at the live fill's pace.
impl World<'_> {
    pub(super) fn fill_window(&mut self) {
        fill(self)
    }
}

fn fill(world: &mut World) {
    // The live test starts the service at the size of the last sync before the window and fills
    // around its running pods; it plays no sync before the window. Playing those here, after the
    // fill, would leave online pods pending at the window's start that live never has (4 on the
    // WorldCup spike, and 4 workers fewer).
    if let Some(w) = &mut world.window {
        let from_s = w.from_s;
        let sizes: Vec<Option<u32>> =
            (0..world.services.len()).map(|s| w.play_until(s, |at| at < from_s, &mut world.services[s].hpa)).collect();
        for (s, size) in sizes.into_iter().enumerate() {
            if let Some(desired) = size {
                world.set_replicas(s, desired);
            }
        }
        world.schedule();
    }
    if world.policy == Policy::ColocateUsage {
        // BestEffort workers fit only into the batch capacity the controller publishes, and it
        // publishes none before it runs: the live test starts the jobs empty beside the running
        // controller, which starts and grows them in its warm-up, as it does here.
        for job in &mut world.jobs {
            job.phase = Phase::Waiting;
        }
        if let Some(w) = &mut world.window {
            w.filled = true;
        }
        return;
    }
    let mut order: Vec<usize> = (0..world.jobs.len()).collect();
    order.sort_by_key(|&j| (world.jobs[j].spec.arrival, j));
    let now = world.now;
    // Each worker's start, counted from the fill's first bind.
    let mut started: Vec<(PodId, f64)> = Vec::new();
    let mut clock = 0.0;
    let mut gap = FILL_JOB_GAP_S;
    for j in order {
        let worker = world.jobs[j].spec.worker.resources();
        let mut placed = 0;
        while placed < world.jobs[j].spec.max_workers {
            let Some(node) = world.cluster.pick_node(&worker, true) else { break };
            let name = world.jobs[j].next_worker_name(world.cluster.tie_seed);
            let id = world.cluster.create(name, PodKind::Worker { job: j }, worker, now);
            world.cluster.bind(id, node, now);
            if placed > 0 {
                clock += 1.0 / FILL_BINDS_PER_S;
            } else if !started.is_empty() {
                clock += gap;
            }
            started.push((id, clock));
            placed += 1;
        }
        gap = if placed < world.jobs[j].spec.max_workers { FILL_JOB_GAP_CUT_S } else { FILL_JOB_GAP_S };
        let job: &mut SimJob = &mut world.jobs[j];
        job.phase = if placed > 0 { Phase::Running } else { Phase::Waiting };
        job.target = placed;
    }
    // The fill ends as the controller starts. Live, it ends 13-14 s before that (the test
    // then waits for the service), a span replay does not model, so where the wall clock's
    // seconds fall in the fill is a draw of its own, not the window's phase.
    let first_bind = now - clock - draw(world.cluster.tie_seed, "fill");
    for (id, at) in started {
        world.cluster.pods.get_mut(&id).expect("a worker just placed").ready_at = Some(first_bind + at);
    }
    if let Some(w) = &mut world.window {
        w.filled = true;
    }
}
