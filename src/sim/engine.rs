//! One replay of one policy: the step loop that moves the simulated cluster through time.
//!
//! Each step: pods whose grace period ended leave; jobs arrive; load is sampled; HPAs sync;
//! the policy acts (the decision core for `colocate`); the scheduler binds pending pods
//! (preempting where the policy allows); then latency, training and the metrics are
//! accounted for the step.
//!
//! What `colocate` sees is what the live controller would: load as a rate over
//! `observation.load_window` ending at Prometheus' newest scrape (`observation.scrape_interval`),
//! sampled every `observation.sample_interval`; p99 at the same
//! samples; in `usage` mode, each online pod's CPU usage as the mean over the last complete
//! `observation.usage_scrape_interval`; the HPA's status as of its last sync (its metric through the metrics pipeline);
//! each job's phase as of its master's last status poll; pods at once (watches).

use std::collections::VecDeque;
use std::time::Duration;

use super::cluster::{Cluster, PodId, PodKind, Preemption, SimPod};
use super::job_model::{Phase, SimJob};
use super::load::mean_load;
use super::policy::{draw, Policy};
use super::report::{PolicyResult, TimelineRow, YOUNG_VICTIM_S};
use super::scenario::{PreemptionPolicy, Scenario};
use super::service::HpaSync;
use super::service::{p99_seconds, utilization, HpaState, LatencyHistory};
use super::usage_scrapes::ReadyHistory;
use super::window_plan::Window;
use crate::core::{CapacityMode, Config, Core, Sample, ScaleIntent, WorkReport};

/// One sample of a service's pods' CPU usage.
#[derive(Clone, Copy, Debug)]
pub struct UsageSample {
    /// The fraction of its CPU request each pod the query answers reports using: the load per
    /// ready replica it served over the last complete usage scrape, over a replica's capacity.
    pub utilization: f64,
    /// When the controller queried it: which pods the query answers (those scraped twice by
    /// then) is as of this moment, as what they report is, not as of the decision that reads it.
    pub at: f64,
}

pub struct SimService {
    pub hpa: HpaState,
    pub(super) next_pod: u64,
    pub load: f64,
    /// The controller's load samples (rates over the load window), oldest first.
    pub samples: VecDeque<Sample>,
    /// The controller's last p99 sample, seconds.
    pub p99_sample: Option<f64>,
    /// Its pods' CPU usage as last sampled: cAdvisor's counters through the same Prometheus as
    /// the load.
    pub usage_sample: Option<UsageSample>,
    /// Its ready replicas over the last usage scrapes (`colocate-usage` only).
    pub(super) ready_history: ReadyHistory,
    /// Each step's requests and their p99, for the p99 samples.
    pub served: LatencyHistory,
    /// Every sync of its HPA so far.
    pub syncs: Vec<HpaSync>,
    /// When the pods its ReplicaSet has yet to create will appear, soonest first.
    pub(super) creating: VecDeque<f64>,
}

pub struct World<'a> {
    pub scenario: &'a Scenario,
    pub policy: Policy,
    pub cluster: Cluster,
    pub services: Vec<SimService>,
    pub jobs: Vec<SimJob>,
    pub now: f64,
    core: Option<Core>,
    gang_queue: VecDeque<usize>,
    /// [`Cluster::room_events`] when the gang queue was last tried and nothing more fitted;
    /// `None` once a job joins the queue. Until room may have freed, trying again is wasted.
    gang_tried: Option<u64>,
    /// Running workers the scheduler preempted for online pods.
    pub(super) scheduler_preemptions: u64,
    /// Victims the scheduler picked that were already leaving (released gracefully).
    pub(super) scheduler_victims_leaving: u64,
    /// Running workers the scheduler preempted that had been bound under `YOUNG_VICTIM_S`.
    pub(super) scheduler_kills_young: u64,
    /// BestEffort workers the kubelet evicted for memory.
    pub(super) batch_evictions: u64,
    intents: Vec<(f64, ScaleIntent)>,
    next_sample: f64,
    next_status: f64,
    /// Per job: what its master said at the last status poll.
    pub reported: Vec<MasterReport>,
    /// Playing a window of the scenario as the live spike test does (`window.rs`).
    pub(crate) window: Option<Window>,
}

/// A master's status as the controller last read it.
#[derive(Clone, Copy, Debug, Default)]
pub struct MasterReport {
    /// Phase Rescaling: workers starting or leaving, or training paused for a change.
    pub rescaling: bool,
    /// `progress` and `throughput`, for jobs whose work is known.
    pub work: Option<WorkReport>,
}

/// What one policy run produced.
pub struct PolicyRun {
    pub result: PolicyResult,
    pub timeline: Vec<TimelineRow>,
    /// `colocate`: every intent the core produced, with the time it was applied.
    pub intents: Vec<(f64, ScaleIntent)>,
    /// Per service, every sync of its HPA.
    pub hpa_syncs: Vec<Vec<HpaSync>>,
}

/// Load samples kept per service: enough for the core's trend window.
const SAMPLE_HISTORY: f64 = 120.0;

impl<'a> World<'a> {
    pub fn new(scenario: &'a Scenario, policy: Policy) -> World<'a> {
        let spec = &scenario.spec;
        let mut cluster = Cluster::default();
        let system = spec.cluster.system_reserved.map(|r| r.resources()).unwrap_or_default();
        for pool in &spec.cluster.nodes {
            for i in 0..pool.count {
                let node = cluster.add_node(format!("{}-{i}", pool.pool), pool.allocatable.resources());
                if !system.is_zero() {
                    let id = cluster.create(format!("system-{}-{i}", pool.pool), PodKind::System, system, 0.0);
                    cluster.bind(id, node, 0.0);
                }
            }
        }
        let mut services = Vec::new();
        for (s, svc) in spec.services.iter().enumerate() {
            let load = scenario.loads[s].at(0.0);
            let hpa = HpaState::new(svc, load);
            // The services start in steady state: their pods are up before the replay begins.
            for k in 0..hpa.desired {
                let id = cluster.create(
                    format!("{}-{k}", svc.name),
                    PodKind::Online { service: s },
                    svc.replica.resources(),
                    0.0,
                );
                if let Some(n) = cluster.pick_node(&svc.replica.resources(), true) {
                    cluster.bind(id, n, 0.0);
                }
            }
            let next_pod = u64::from(hpa.desired);
            services.push(SimService {
                hpa,
                next_pod,
                load,
                samples: VecDeque::new(),
                p99_sample: None,
                usage_sample: None,
                ready_history: ReadyHistory::default(),
                served: LatencyHistory::default(),
                syncs: Vec::new(),
                creating: VecDeque::new(),
            });
        }
        let best_effort = policy == Policy::ColocateUsage;
        let jobs: Vec<SimJob> = spec
            .jobs
            .iter()
            .cloned()
            .map(|j| {
                let mut job = SimJob::new(j);
                job.best_effort = best_effort;
                job
            })
            .collect();
        let reported = vec![MasterReport::default(); jobs.len()];
        let core = match policy {
            Policy::Colocate => Some(Core::new(spec.controller.clone())),
            Policy::ColocateUsage => {
                Some(Core::new(Config { capacity: CapacityMode::Usage, ..spec.controller.clone() }))
            }
            _ => None,
        };
        World {
            scenario,
            policy,
            cluster,
            services,
            jobs,
            now: 0.0,
            core,
            gang_queue: VecDeque::new(),
            gang_tried: None,
            scheduler_preemptions: 0,
            scheduler_victims_leaving: 0,
            scheduler_kills_young: 0,
            batch_evictions: 0,
            intents: Vec::new(),
            next_sample: 0.0,
            next_status: 0.0,
            reported,
            window: None,
        }
    }

    pub fn run(mut self, on_progress: &mut dyn FnMut(u64)) -> PolicyRun {
        let spec = &self.scenario.spec;
        let dt = self.window.as_ref().map_or(spec.step.as_secs_f64(), |w| w.step_s);
        let end =
            self.window.as_ref().map_or(spec.duration.as_secs_f64(), |w| w.until.min(spec.duration.as_secs_f64()));
        let steps = (end / dt).ceil() as u64;
        let mut acc = Accumulator::default();
        let mut timeline = Vec::with_capacity(steps as usize);
        for k in 0..steps {
            self.now = k as f64 * dt;
            let step_dt = dt.min(end - self.now);
            self.step();
            let row = self.account(step_dt, &mut acc);
            timeline.push(row);
            on_progress(k + 1);
        }
        let result = self.result(&acc);
        let hpa_syncs = self.services.iter_mut().map(|s| std::mem::take(&mut s.syncs)).collect();
        PolicyRun { result, timeline, intents: std::mem::take(&mut self.intents), hpa_syncs }
    }

    fn step(&mut self) {
        let now = self.now;
        let spec = &self.scenario.spec;
        self.finish_completed();
        self.arrivals();
        let sampling = now + 1e-9 >= self.next_sample;
        if sampling {
            self.next_sample = now + spec.observation.sample_interval.as_secs_f64();
        }
        for (s, svc) in spec.services.iter().enumerate() {
            self.create_due_pods(s);
            if self.policy == Policy::ColocateUsage {
                let (_, ready) = self.replica_counts(s);
                let keep_since = now - 2.0 * spec.observation.usage_scrape_interval.as_secs_f64();
                self.services[s].ready_history.record(now, ready, keep_since);
            }
            self.services[s].load = self.scenario.loads[s].at(now);
            if sampling {
                self.sample_service(s);
            }
            if let Some(desired) = self.window.as_mut().and_then(|w| w.scripted_sync(s, now, &mut self.services[s].hpa))
            {
                self.set_replicas(s, desired);
            } else if self.window.as_ref().is_some_and(|w| w.scripted()) {
                // Between the scripted syncs the HPA does nothing.
            } else if now + 1e-9 >= self.services[s].hpa.next_sync {
                let (replicas, ready) = self.replica_counts(s);
                // The HPA sees the load the metrics pipeline last published.
                let h = &svc.hpa;
                let resolution = h.metrics_resolution.as_secs_f64();
                let published = (now / resolution + 1e-9).floor() * resolution;
                let seen = mean_load(&self.scenario.loads[s], published - h.metrics_window.as_secs_f64(), published);
                let state = &mut self.services[s];
                let desired = state.hpa.sync(svc, now, seen, replicas, ready);
                let observed = state.hpa.observed;
                state.syncs.push(HpaSync { at_s: now, current: replicas, desired, observed });
                self.set_replicas(s, desired);
            }
        }
        // kube-scheduler tries new pods within milliseconds of the HPA's scale; the
        // controller's releases reach the masters later (it reads the HPA's status, then calls
        // them). A --v=5 scheduler log of the flash crowd: 50 pods created at 38.50 s preempt
        // from 38.55 s to 38.70 s; colocate's intent comes at 38.54 s and the first release is
        // actuated at 39.6 s. So pods that do not fit preempt running workers before colocate's
        // releases of this step take effect. But colocate decides on what it saw before those
        // preemptions (in such a log its intent can come 14 ms before the first new pod even
        // exists): it releases for the whole step, not for what the victims leave over.
        // Deciding after them, replay would release 6 workers where live releases 12 (flash
        // crowd, in place).
        let intents = self.policy.is_colocate().then(|| self.colocate_decide());
        self.schedule();
        // A pod whose grace period ends now is gone a moment later (a kubelet removes a pod
        // only once its grace period is over, then reports it and deletes it): the pods this
        // moment created meet the scheduler first. Its room frees after they preempted and were
        // nominated onto it, and kube-scheduler binds a nominated pod only beside every other
        // pod nominated to its node: live, the flash crowd's 30 s releases, made at an HPA
        // sync, free room that waits 15 s. Removed first, it would go to the pods already
        // waiting, and replay would sit at the lucky end of the live runs.
        self.cluster.reap(now);
        match intents {
            Some(intents) => self.colocate_apply(intents),
            None if self.policy == Policy::Preemption => self.relaunch(),
            None => {}
        }
        self.schedule();
        if self.policy.is_gang() {
            self.admit_gang_jobs();
        }
        if self.policy == Policy::ColocateUsage {
            self.evict_for_memory();
        }
        let mut members = vec![Vec::new(); self.jobs.len()];
        for (id, p) in &self.cluster.pods {
            if let (PodKind::Worker { job }, Some(_), None) = (p.kind, p.node, p.leaving_at) {
                members[job].push(*id);
            }
        }
        for (job, active) in self.jobs.iter_mut().zip(members) {
            job.observe(active, now);
        }
    }

    /// The masters' status polls: whether each job is still applying a change.
    fn poll_status(&mut self) {
        if self.now + 1e-9 < self.next_status {
            return;
        }
        self.next_status = self.now + self.scenario.spec.observation.status_interval.as_secs_f64();
        // The master reports Rescaling while workers start, leave, or the job is paused for a
        // membership change.
        let mut changing = vec![false; self.jobs.len()];
        for p in self.cluster.pods.values() {
            if let PodKind::Worker { job } = p.kind {
                changing[job] |= p.node.is_none() || p.leaving_at.is_some();
            }
        }
        for (j, job) in self.jobs.iter().enumerate() {
            let rescaling = self.now < job.paused_until || changing[j];
            self.reported[j] = MasterReport { rescaling, work: job.work_report(rescaling) };
        }
    }

    /// The controller's samples of service `s`: the load as a rate over the load window, and
    /// the p99 of the requests served over the latency window (the model's p99 of the moment
    /// before any step was served), both ending at Prometheus' newest scrape.
    fn sample_service(&mut self, s: usize) {
        let now = self.now;
        let spec = &self.scenario.spec;
        let svc = &spec.services[s];
        let window = spec.observation.load_window.as_secs_f64();
        // The rate ends at Prometheus' newest scrape: half a scrape interval ago, on average.
        let seen_at = now - spec.observation.scrape_interval.as_secs_f64() / 2.0;
        let rate = mean_load(&self.scenario.loads[s], seen_at - window, seen_at);
        let latency_window = spec.controller.latency_window.as_secs_f64();
        let (_, ready) = self.replica_counts(s);
        let load = self.services[s].load;
        let newest =
            (load * spec.observation.scrape_interval.as_secs_f64(), p99_seconds(svc, utilization(svc, load, ready)));
        let p99 = self.services[s].served.p99_with(seen_at - latency_window, seen_at, newest);
        let load_signal = self.window.as_ref().is_none_or(|w| w.load_signal);
        let latency_signal = self.window.as_ref().is_none_or(|w| w.latency_signal);
        let usage = self.services[s].ready_history.scraped_load_per_replica(
            &self.scenario.loads[s],
            now,
            self.usage_scrape_phase(),
            spec.observation.usage_scrape_interval,
        );
        let state = &mut self.services[s];
        if load_signal {
            state.samples.push_back(Sample { at: Duration::from_secs_f64(now), value: rate });
        }
        while state.samples.front().is_some_and(|x| x.at.as_secs_f64() < now - SAMPLE_HISTORY) {
            state.samples.pop_front();
        }
        state.p99_sample = latency_signal.then_some(p99);
        state.usage_sample =
            usage.map(|per_replica| UsageSample { utilization: utilization(svc, per_replica, 1), at: now });
    }

    /// Where Prometheus' usage scrapes fall: every `observation.usage_scrape_interval` from this
    /// offset (0 outside a window).
    pub(super) fn usage_scrape_phase(&self) -> f64 {
        self.window.as_ref().map_or(0.0, |w| w.usage_scrape_phase_s)
    }

    /// A finished job's workers exit at once.
    fn finish_completed(&mut self) {
        let done: Vec<PodId> = self
            .cluster
            .pods
            .iter()
            .filter(|(_, p)| {
                matches!(p.kind, PodKind::Worker { job } if self.jobs[job].phase == Phase::Completed)
                    && p.leaving_at.is_none()
            })
            .map(|(id, _)| *id)
            .collect();
        for id in done {
            self.cluster.delete(id, self.now, 0.0);
        }
    }

    fn arrivals(&mut self) {
        if self.policy == Policy::OnlineOnly {
            return;
        }
        if let Some(w) = &self.window {
            if !w.filled && self.now + 1e-9 >= w.jobs_at {
                // The controller starts now, with no samples of its own yet. Its sampler and its
                // status polls tick from its start, as the live controller's do, not on the
                // scenario's clock: where they fall against the HPA's syncs decides whose pods
                // take the room its releases free.
                let started = w.jobs_at;
                for s in &mut self.services {
                    s.samples.clear();
                    s.usage_sample = None;
                }
                self.next_sample = started;
                self.next_status = started;
                self.fill_window();
            }
            return;
        }
        for j in 0..self.jobs.len() {
            let job = &mut self.jobs[j];
            if job.phase != Phase::NotArrived || job.spec.arrival.as_secs_f64() > self.now + 1e-9 {
                continue;
            }
            job.phase = Phase::Waiting;
            match self.policy {
                Policy::Preemption => {
                    job.phase = Phase::Running;
                    job.target = job.spec.max_workers;
                    job.create_workers(&mut self.cluster, j, job.spec.max_workers, self.now);
                }
                Policy::Gang | Policy::GangBackfill => {
                    self.gang_queue.push_back(j);
                    self.gang_tried = None;
                }
                Policy::Colocate | Policy::ColocateUsage | Policy::OnlineOnly => {}
            }
        }
    }

    /// (replicas, ready) of service `s`.
    pub fn replica_counts(&self, s: usize) -> (u32, u32) {
        let mut replicas = 0;
        let mut ready = 0;
        for p in self.cluster.pods.values() {
            if p.kind == (PodKind::Online { service: s }) && p.leaving_at.is_none() {
                replicas += 1;
                ready += u32::from(p.is_ready(self.now));
            }
        }
        (replicas, ready)
    }

    /// The controller's decision on the cluster as it is now (none before a window's jobs).
    fn colocate_decide(&mut self) -> Vec<ScaleIntent> {
        if self.window.as_ref().is_some_and(|w| self.now + 1e-9 < w.jobs_at) {
            return Vec::new();
        }
        self.poll_status();
        let snap = self.snapshot();
        let core = self.core.as_mut().expect("colocate has a core");
        let decision = core.decide(&snap);
        // The batch capacity it publishes reaches the nodes as it decides (a status patch).
        for (n, node) in decision.nodes.iter().enumerate() {
            if let Some(batch) = node.batch {
                self.cluster.set_batch_capacity(n, batch);
            }
        }
        decision.intents
    }

    /// The masters act on the controller's intents.
    fn colocate_apply(&mut self, intents: Vec<ScaleIntent>) {
        for intent in intents {
            let Some(j) = self.jobs.iter().position(|job| job.spec.name == intent.job) else { continue };
            if self.jobs[j].answers_at > self.now + 1e-9 {
                continue;
            }
            // A master that releases in place answers a shrink once the kubelet has reported
            // its resizes (`example-master --release-in-place`; live, 1.5 s after the intent at
            // the flash crowd's 30 s step); the others answer at once.
            if self.scenario.spec.jobs[j].release_in_place && intent.target < self.jobs[j].target {
                self.jobs[j].answers_at = self.now + self.scenario.spec.release_time(j).as_secs_f64();
            }
            self.apply_target(j, intent.target, &intent.release_pods);
            self.intents.push((self.now, intent));
        }
    }

    pub(super) fn schedule(&mut self) {
        let spec = &self.scenario.spec;
        let now = self.now;
        let policy = self.policy;
        let preempts = |p: &SimPod| match p.kind {
            PodKind::Online { service } => {
                spec.services[service].preemption_policy == PreemptionPolicy::PreemptLowerPriority
            }
            _ => false,
        };
        // The baselines are what clusters do today: online pods preempt (the contract's
        // definition). `preemption_policy` is how the services are set up where colocate runs.
        let preemption = move |p: &SimPod| match policy {
            Policy::OnlineOnly => Preemption::Never,
            Policy::Preemption => Preemption::Workers,
            Policy::Gang | Policy::GangBackfill => Preemption::WholeJobs,
            // kube-scheduler preempts for these pods whatever the controller plans.
            Policy::Colocate | Policy::ColocateUsage if preempts(p) => Preemption::Workers,
            // Pods that do not preempt wait for the room colocate's shrinks free. Its deadline
            // deletes only workers a master neither released nor is removing (live); replay's
            // masters release what they are asked at once, so it never fires here.
            Policy::Colocate | Policy::ColocateUsage => Preemption::Never,
        };
        let seed = spec.seed;
        let ready_delay = |p: &SimPod| match p.kind {
            PodKind::Online { service } => {
                // +-10% startup jitter, fixed per pod name by the seed.
                spec.services[service].startup.as_secs_f64() * (0.9 + 0.2 * draw(seed, &p.name))
            }
            _ => 0.0,
        };
        let jobs = &self.jobs;
        let priority = |j: usize| jobs[j].spec.priority;
        let grace = spec.baselines.termination_grace_period.as_secs_f64();
        let online_arriving = self.services.iter().any(|s| !s.creating.is_empty());
        let evictions = self.cluster.schedule(now, &preemption, &ready_delay, &priority, grace, online_arriving);
        self.scheduler_victims_leaving += u64::from(evictions.already_leaving);
        // Cut releases are killed by the scheduler all the same, but their jobs had let them go
        // already; young or not, as live counts them.
        let killed = evictions.releases_cut.iter().copied().chain(evictions.pods.iter().map(|(id, _)| *id));
        for id in killed {
            self.scheduler_preemptions += 1;
            let bound_at = self.cluster.pods.get(&id).and_then(|p| p.ready_at);
            if bound_at.is_some_and(|at| now - at < YOUNG_VICTIM_S) {
                self.scheduler_kills_young += 1;
            }
        }
        let mut hit: Vec<usize> = Vec::new();
        for (_, j) in evictions.pods {
            if !hit.contains(&j) {
                hit.push(j);
            }
        }
        let relaunch = if self.window.is_some() { 0.0 } else { spec.baselines.relaunch_delay.as_secs_f64() };
        for j in hit {
            let job = &mut self.jobs[j];
            // Gang jobs are the generous baseline of the contract: their progress is kept.
            if !self.policy.is_gang() {
                job.roll_back(now);
            }
            match self.policy {
                Policy::Preemption => {
                    job.relaunch_at.get_or_insert(now + relaunch);
                }
                Policy::Gang | Policy::GangBackfill => {
                    job.phase = Phase::Waiting;
                    self.gang_queue.push_front(j);
                    self.gang_tried = None;
                }
                // The master still wants its target: the job's controller (a ReplicaSet, the
                // framework) replaces the lost workers with pods that wait for room.
                Policy::Colocate | Policy::ColocateUsage => job.create_workers(&mut self.cluster, j, job.target, now),
                Policy::OnlineOnly => {}
            }
        }
    }

    /// `gang` and `gang-backfill`: a queued job starts when all its `gang_workers` fit at once,
    /// bound where they fit tightest. `gang` is FIFO: while the head job does not fit, every job
    /// behind it waits (kube-batch #561). `gang-backfill` tries every queued job in queue order
    /// and starts each one that fits.
    fn admit_gang_jobs(&mut self) {
        if self.gang_tried == Some(self.cluster.room_events) {
            return;
        }
        let mut k = 0;
        while k < self.gang_queue.len() {
            let j = self.gang_queue[k];
            let job = &self.jobs[j];
            let size = job.spec.gang_size();
            let Some(places) = self.cluster.place_all(&job.spec.worker.resources(), size) else {
                if self.policy == Policy::Gang {
                    break;
                }
                k += 1;
                continue;
            };
            self.gang_queue.remove(k);
            let job = &mut self.jobs[j];
            job.phase = Phase::Running;
            job.target = size;
            job.create_workers(&mut self.cluster, j, size, self.now);
            let pending: Vec<u64> = SimJob::pods(&self.cluster, j).filter(|(_, b)| !b).map(|(id, _)| id).collect();
            for (id, n) in pending.into_iter().zip(places) {
                self.cluster.bind(id, n, self.now);
            }
        }
        self.gang_tried = Some(self.cluster.room_events);
    }
}

/// Sums over the run's steps.
#[derive(Default)]
pub(super) struct Accumulator {
    pub(super) time: f64,
    pub(super) allocation: f64,
    pub(super) cpu_usage: f64,
    /// CPU-seconds BestEffort workers asked for and got.
    pub(super) best_effort_asked: f64,
    pub(super) best_effort_got: f64,
    pub(super) gpu_allocation: f64,
    pub(super) above_target: f64,
    pub(super) slo_violation: f64,
    pub(super) pending_online: f64,
}
