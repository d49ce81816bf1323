//! A simulated elastic training job: its workers, throughput and progress.
//!
//! Throughput is `throughput_per_worker * n^scaling_efficiency` for n active workers (bound,
//! not leaving), zero below `min_workers`, and zero while a membership change pauses the job
//! for `rescale_cost`. A job resumed after losing all its workers also pays `rescale_cost`
//! (restoring its checkpoint). Checkpoints are taken every `checkpoint_interval` of running
//! time; a forced eviction rolls the job back to the last one.

use super::cluster::{Cluster, PodId, PodKind};
use super::policy::draw;
use super::scenario::JobSpec;
use crate::core::{Resources, WorkReport};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    NotArrived,
    /// Arrived, no workers granted (or gave way / preempted as a whole).
    Waiting,
    Running,
    Completed,
}

#[derive(Clone, Debug)]
pub struct SimJob {
    pub spec: JobSpec,
    pub phase: Phase,
    /// Workers the master steers to.
    pub target: u32,
    pub progress: f64,
    pub paused_until: f64,
    pub rescale_events: u32,
    pub completed_at: Option<f64>,
    /// First time it had at least `min_workers` active (report v1.1 `started_at_s`).
    pub started_at: Option<f64>,
    /// Active worker pods at the end of the last step (membership).
    members: Vec<PodId>,
    ever_ran: bool,
    pub worker_seconds: f64,
    /// `preemption` baseline: when lost workers are replaced.
    pub relaunch_at: Option<f64>,
    /// When the master answers the last scale command: the controller sends a job no other
    /// command before (one in flight per job, as the live controller's ledger has it).
    pub answers_at: f64,
    next_worker: u64,
    /// Set in a window replayed beside a live run: workers are named as a ReplicaSet names its
    /// pods, with a random suffix ([`SimJob::next_worker_name`]).
    pub random_names: bool,
    /// Progress saved by the last checkpoint, and when it was taken.
    checkpoint: f64,
    checkpoint_at: f64,
    /// Samples thrown away by rollbacks to a checkpoint.
    pub lost: f64,
    /// Its workers are BestEffort (`capacity: usage`): they request the nodes' batch capacity
    /// instead of `cpu` and `memory`, and train as fast as the CPU left to them allows.
    pub best_effort: bool,
}

impl SimJob {
    pub fn new(spec: JobSpec) -> SimJob {
        SimJob {
            spec,
            phase: Phase::NotArrived,
            target: 0,
            progress: 0.0,
            paused_until: 0.0,
            rescale_events: 0,
            completed_at: None,
            started_at: None,
            members: Vec::new(),
            ever_ran: false,
            worker_seconds: 0.0,
            relaunch_at: None,
            answers_at: 0.0,
            next_worker: 0,
            random_names: false,
            checkpoint: 0.0,
            checkpoint_at: 0.0,
            lost: 0.0,
            best_effort: false,
        }
    }

    pub fn is_live(&self) -> bool {
        matches!(self.phase, Phase::Waiting | Phase::Running)
    }

    /// Worker pods of job `j` that are not leaving: (id, bound).
    pub fn pods(cluster: &Cluster, j: usize) -> impl Iterator<Item = (PodId, bool)> + '_ {
        cluster
            .pods
            .iter()
            .filter(move |(_, p)| p.kind == PodKind::Worker { job: j } && p.leaving_at.is_none())
            .map(|(id, p)| (*id, p.node.is_some()))
    }

    /// Creates pending worker pods until `count` exist.
    pub fn create_workers(&mut self, cluster: &mut Cluster, j: usize, count: u32, now: f64) {
        let have = Self::pods(cluster, j).count() as u32;
        let worker = self.spec.worker.resources();
        // BestEffort: CPU and memory asked of the batch capacity; GPUs are requested as ever.
        let (requests, batch) = if self.best_effort {
            (Resources { gpu: worker.gpu, ..Resources::ZERO }, Resources { gpu: 0, ..worker })
        } else {
            (worker, Resources::ZERO)
        };
        for _ in have..count {
            let name = self.next_worker_name(cluster.tie_seed);
            cluster.create_with_batch(name, PodKind::Worker { job: j }, requests, batch, now);
        }
    }

    /// The name of the job's next worker: `<job>-worker-<n>`, or with [`SimJob::random_names`]
    /// `<job>-worker-` and eight random characters drawn from `seed` (the cluster's
    /// [`tie_seed`](super::cluster::Cluster::tie_seed)). A window needs the random ones:
    /// colocate keeps a node's workers in name order and kube-scheduler preempts the youngest,
    /// so names in creation order make colocate release the very workers preemption would pick
    /// next (live, a ReplicaSet's names say nothing of age). Numbered, the fill's workers would
    /// be released youngest first, and replacements (`-worker-0`, ...) kept before them: the
    /// WorldCup spike's `load-signal-grace30` would have 8 of 9 victims at its 55 s sync
    /// already leaving in replay, against 1 of 9 live.
    pub fn next_worker_name(&mut self, seed: u64) -> String {
        let n = self.next_worker;
        self.next_worker += 1;
        if !self.random_names {
            return format!("{}-worker-{n}", self.spec.name);
        }
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut x = (draw(seed, &format!("{}-{n}", self.spec.name)) * (1u64 << 53) as f64) as u64;
        let suffix: String = (0..8)
            .map(|_| {
                let c = ALPHABET[(x % ALPHABET.len() as u64) as usize] as char;
                x /= ALPHABET.len() as u64;
                c
            })
            .collect();
        format!("{}-worker-{suffix}", self.spec.name)
    }

    /// Updates membership after this step's scheduling and removals; a change pauses the job.
    pub fn observe_members(&mut self, cluster: &Cluster, j: usize, now: f64) {
        let active: Vec<PodId> = Self::pods(cluster, j).filter(|(_, bound)| *bound).map(|(id, _)| id).collect();
        self.observe(active, now);
    }

    /// As [`SimJob::observe_members`], given the job's bound workers that are not leaving, in
    /// id order (the engine finds every job's in one pass over the pods).
    pub fn observe(&mut self, active: Vec<PodId>, now: f64) {
        if active == self.members {
            return;
        }
        let cost = self.spec.rescale_cost.as_secs_f64();
        if !self.members.is_empty() && !active.is_empty() {
            self.rescale_events += 1;
            self.paused_until = self.paused_until.max(now + cost);
        } else if self.members.is_empty() && !active.is_empty() && self.ever_ran {
            self.paused_until = self.paused_until.max(now + cost);
        }
        if !active.is_empty() {
            self.ever_ran = true;
        }
        if self.started_at.is_none() && active.len() as u32 >= self.spec.min_workers {
            self.started_at = Some(now);
        }
        self.members = active;
    }

    /// A worker was killed without a graceful shrink: the job restarts from its checkpoint.
    pub fn roll_back(&mut self, now: f64) {
        self.lost += self.progress - self.checkpoint;
        self.progress = self.checkpoint;
        self.checkpoint_at = now;
    }

    pub fn active_workers(&self) -> u32 {
        self.members.len() as u32
    }

    /// What its master reports of its work: samples done out of the total (jobs with known
    /// work only), and the throughput of its active workers, which a master paused for a
    /// membership change does not measure.
    pub fn work_report(&self, rescaling: bool) -> Option<WorkReport> {
        let total = self.spec.work?;
        let n = self.active_workers();
        let running = self.phase == Phase::Running && !rescaling && n >= self.spec.min_workers && n > 0;
        Some(WorkReport { done: self.progress, total, throughput: running.then(|| self.rate(n)), workers: n })
    }

    fn rate(&self, n: u32) -> f64 {
        self.spec.throughput_per_worker * f64::from(n).powf(self.spec.scaling_efficiency)
    }

    /// The fraction of the step from `now` to `now + dt` the job trains in: 0 unless it runs with
    /// at least `min_workers`, and not while a membership change pauses it. Its workers use CPU
    /// only then: a paused job's workers wait in rendezvous or restore a checkpoint.
    pub fn training_fraction(&self, now: f64, dt: f64) -> f64 {
        let n = self.active_workers();
        if self.phase != Phase::Running || n < self.spec.min_workers || n == 0 || dt <= 0.0 {
            return 0.0;
        }
        ((now + dt - self.paused_until.max(now)) / dt).clamp(0.0, 1.0)
    }

    /// Trains for `dt` seconds from `now` at `speed` (the fraction of the CPU its workers
    /// request that the slowest of them gets: a synchronous step waits for the slowest);
    /// returns samples processed. Completes the job when its work is done (the completion
    /// time is interpolated inside the step).
    pub fn train(&mut self, now: f64, dt: f64, speed: f64) -> f64 {
        let n = self.active_workers();
        if self.phase != Phase::Running {
            return 0.0;
        }
        self.worker_seconds += n as f64 * dt;
        if n < self.spec.min_workers || n == 0 {
            return 0.0;
        }
        let start = self.paused_until.max(now);
        let usable = self.training_fraction(now, dt) * dt;
        let rate = self.rate(n) * speed;
        if now - self.checkpoint_at >= self.spec.checkpoint_interval.as_secs_f64() {
            self.checkpoint = self.progress;
            self.checkpoint_at = now;
        }
        let mut done = rate * usable;
        if let Some(work) = self.spec.work {
            if self.progress + done >= work {
                done = work - self.progress;
                let at = if rate > 0.0 { start + done / rate } else { now };
                self.completed_at = Some(at);
                self.phase = Phase::Completed;
            }
        }
        self.progress += done;
        done
    }
}
