//! Packing workers into the per-node training room: keep what still fits (higher priority
//! first), give way when a floor cannot be kept, then fill the rest by priority and weighted
//! dominant resource share, one worker at a time, each on a node where it fits. The weights are
//! the jobs' own, or the completion-time split of completion.rs.

use std::time::Duration;

use super::capacity::NodeRoom;
use super::config::Config;
use super::damping::Memory;
use super::fewest_jobs::{concentrate, Losing, Worker};
use super::fill::{fill_counts, water_fill, FillEntry};
use super::placer::{place_one, Holds};
use super::pod_index::PodIndex;
use super::resources::Resources;
use super::snapshot::{Job, PodClass, Snapshot};

/// The plan for one job.
#[derive(Clone, Debug, Default)]
pub struct JobPlan {
    /// Bound workers that stay.
    pub kept: u32,
    /// Workers the master is starting (pending or not yet created) that still fit.
    pub kept_starting: u32,
    /// Workers added by this plan.
    pub granted: u32,
    /// Worker pods to release, with the node they are on (None for pending pods).
    pub released: Vec<(String, Option<usize>)>,
    /// Workers to drop that have no pod yet.
    pub released_unnamed: u32,
    /// Of `kept_starting`, workers being started (pending pods, or pods not created yet) that fit
    /// nowhere but keep their place while online pods wait (replacements of preempted workers:
    /// a shrink would only lose them).
    pub waiting: u32,
    pub gave_way: bool,
    pub held_back: Option<String>,
    /// Room was set aside at its priority for the floors of waiting jobs before its extras
    /// were kept: extras it releases went to them.
    pub made_room_for_waiting: bool,
    /// A waiting job whose floor does not fit yet holds a reservation: room is drained for it.
    pub reserved: bool,
    /// It would have released workers, but another job of its level gave them instead
    /// (fewest_jobs.rs). Its growth waits as if it had: room that had to go back this moment
    /// is not refilled by the job spared.
    pub spared: bool,
}

impl JobPlan {
    pub fn target(&self) -> u32 {
        if self.gave_way {
            0
        } else {
            self.kept + self.kept_starting + self.granted
        }
    }
}

/// Worker pods of one job as found in the snapshot.
#[derive(Default)]
struct JobPods<'a> {
    /// By node, then start (oldest first; not started yet last), then name: kept in that
    /// order, so a node's newest workers are the ones released.
    bound: Vec<Worker<'a>>,
    pending: Vec<&'a str>,
}

impl<'a> JobPods<'a> {
    /// A worker pod of the job: bound to `node`, or pending.
    fn add(&mut self, name: &'a str, node: Option<usize>, requests: Resources, started: Option<Duration>) {
        match node {
            Some(node) => self.bound.push(Worker { name, node, requests, started }),
            None => self.pending.push(name),
        }
    }
}

/// `weights` has one entry per job of the snapshot, each > 0.
pub fn plan_jobs(
    snap: &Snapshot,
    index: &PodIndex,
    rooms: &mut [NodeRoom],
    weights: &[f64],
    memory: &mut Memory,
    config: &Config,
) -> Vec<JobPlan> {
    let total: Resources = rooms.iter().filter(|r| r.schedulable).map(|r| r.allocatable).sum();
    // Sized by the masters' targets, about what they hold (growing them one push at a time
    // copied 100,000 workers over and over), and never beyond the pods there are: a target is
    // what a master says.
    let mut pods: Vec<JobPods> = snap
        .jobs
        .iter()
        .map(|j| {
            let expected = (j.target_workers as usize).min(snap.pods.len());
            JobPods { bound: Vec::with_capacity(expected), pending: Vec::new() }
        })
        .collect();
    // While online pods wait for room, the scheduler preempts workers for them and the jobs'
    // controllers replace those workers with pods that wait too. Releasing such a pod would turn
    // the scheduler's preemption into a shrink of the job, which the room freed does not need:
    // it keeps its place in the target and waits (workers do not preempt). Found in the same
    // pass over the pods (a pass over 150,000 is a millisecond).
    // Workers a shrink named that their master is removing are neither kept nor named again
    // (see `Memory::leaving`), while the job still has more than its target.
    let leaving: Vec<Vec<String>> = snap.jobs.iter().map(|j| memory.leaving(j).to_vec()).collect();
    let mut still_leaving: Vec<Vec<(usize, &str, Option<usize>)>> = vec![Vec::new(); snap.jobs.len()];
    let mut online_waiting = false;
    for (p, pod) in snap.pods.iter().enumerate() {
        if pod.terminating() {
            continue;
        }
        match &pod.class {
            PodClass::Online { .. } => online_waiting |= pod.node.is_none(),
            PodClass::Worker { .. } => {
                let Some(j) = index.owner_of(p) else { continue };
                if leaving[j].contains(&pod.name) {
                    still_leaving[j].push((p, &pod.name, index.node_of(p)));
                    continue;
                }
                pods[j].add(&pod.name, index.node_of(p), pod.requests, pod.started);
            }
            _ => {}
        }
    }
    for (j, job) in snap.jobs.iter().enumerate() {
        let left = std::mem::take(&mut still_leaving[j]);
        let total = pods[j].bound.len() + pods[j].pending.len() + left.len();
        if !left.is_empty() && total <= job.target_workers as usize {
            // The master removed others than those named, or is done: nothing of it is leaving.
            for (p, name, node) in left {
                pods[j].add(name, node, snap.pods[p].requests, snap.pods[p].started);
            }
            memory.keep_leaving(&job.name, Vec::new());
        } else if !leaving[j].is_empty() {
            memory.keep_leaving(&job.name, left.iter().map(|(_, name, _)| name.to_string()).collect());
        }
    }
    for p in &mut pods {
        // Kept oldest first, so a node's newest workers are released: the ones kube-scheduler's
        // preemption takes first. An online pod that preempts on the node then picks a worker
        // already leaving; releasing any other would leave a newer one running for it to kill
        // (as kube-scheduler did on the test bed's WorldCup98 spike).
        p.bound.sort_by(|a, b| {
            let newest_last = |w: &Worker| (w.started.is_none(), w.started);
            a.node.cmp(&b.node).then_with(|| newest_last(a).cmp(&newest_last(b))).then_with(|| a.name.cmp(b.name))
        });
        p.pending.sort_unstable();
    }

    let waiting_since: Vec<Option<Duration>> = snap.jobs.iter().map(|j| memory.waiting_since(j, snap.now)).collect();
    let mut plans: Vec<JobPlan> = snap.jobs.iter().map(|_| JobPlan::default()).collect();
    let mut levels: Vec<i32> = snap.jobs.iter().map(|j| j.priority).collect();
    levels.sort_unstable_by(|a, b| b.cmp(a));
    levels.dedup();

    // Room still held by lower-priority workers, per node: growth avoids it when it can. From
    // the highest level down, each level's own workers leave it as the planning reaches them
    // (one pass over the workers, not one per level).
    let mut held_below = vec![Resources::ZERO; rooms.len()];
    for (j, job) in snap.jobs.iter().enumerate() {
        if levels.first().is_some_and(|&top| job.priority < top) {
            for w in &pods[j].bound {
                held_below[w.node] += w.requests;
            }
        }
    }
    for (l, &level) in levels.iter().enumerate() {
        let mut members: Vec<usize> = (0..snap.jobs.len()).filter(|&j| snap.jobs[j].priority == level).collect();
        members.sort_by(|&a, &b| snap.jobs[a].name.cmp(&snap.jobs[b].name));
        if l > 0 {
            // Counted as held below the level above; not below this one.
            for &j in &members {
                for w in &pods[j].bound {
                    held_below[w.node] -= w.requests;
                }
            }
        }

        // Jobs waiting for their floor, oldest first (then by name).
        let mut queue: Vec<usize> = members.iter().copied().filter(|&j| waiting_since[j].is_some()).collect();
        queue.sort_by_key(|&j| waiting_since[j]);
        let keeping = members.iter().map(|&j| Keeping::new(&snap.jobs[j], &pods[j], online_waiting)).collect();
        // The oldest waiting job, once it has waited long enough, may drain room for its floor.
        let due = queue.first().copied().filter(|&j| {
            waiting_since[j].is_some_and(|t| snap.now.saturating_sub(t) >= config.waiting_reservation_after)
        });
        let level = Level {
            members: &members,
            queue: &queue,
            reservation_due: due,
            jobs: &snap.jobs,
            weights,
            held_below: &held_below,
            total: &total,
        };
        keep_level(&level, keeping, rooms, &mut plans);
        for &j in &members {
            if plans[j].gave_way {
                // The dip is what the window sees: a job that gave way restarts only after it.
                memory.damp_growth(&snap.jobs[j], 0, snap.now, config);
            }
        }

        // What each job could have: a dry run of the fill (counted, or on a copy of the rooms).
        let mut entries: Vec<FillEntry> = members
            .iter()
            .filter(|&&j| !plans[j].gave_way)
            .map(|&j| {
                // Ties (every waiting job has share 0) go to the oldest waiting job first.
                let rank = queue.iter().position(|&q| q == j).unwrap_or(queue.len());
                let start = plans[j].kept + plans[j].kept_starting;
                FillEntry::new(j, &snap.jobs[j], weights[j], start, snap.jobs[j].max_workers, rank)
            })
            .collect();
        if !fill_counts(rooms, &mut entries, &total) {
            let mut trial_rooms: Vec<NodeRoom> = rooms.iter().map(NodeRoom::trial).collect();
            water_fill(&mut trial_rooms, &held_below, &mut entries, &total);
        }
        for e in &mut entries {
            let job = &snap.jobs[e.job];
            let plan = &mut plans[e.job];
            let had_to_release = !plan.released.is_empty() || plan.released_unnamed > 0 || plan.spared;
            // After a shrink, growth waits for the window: the dip is what the window sees.
            let possible = if had_to_release { e.start } else { e.count };
            let verdict = memory.damp_growth(job, possible, snap.now, config);
            plan.held_back = verdict.held_back;
            e.cap = verdict.allowed.max(e.start);
            e.count = e.start;
            e.active = true;
        }
        water_fill(rooms, &held_below, &mut entries, &total);
        for e in &entries {
            plans[e.job].granted = e.count - e.start;
        }
    }
    plans
}

/// How far one job has got in keeping its workers: the next bound worker to look at, the
/// starting workers still to place, and the room taken so far (given back if it gives way).
struct Keeping<'a> {
    job: &'a Job,
    pods: &'a JobPods<'a>,
    next_bound: usize,
    next_pending: usize,
    starting_left: u32,
    taken: Vec<(usize, Resources)>,
    /// Online pods are waiting for room (see `plan_jobs`).
    online_waiting: bool,
}

impl<'a> Keeping<'a> {
    fn new(job: &'a Job, pods: &'a JobPods<'a>, online_waiting: bool) -> Self {
        Keeping {
            job,
            pods,
            next_bound: 0,
            next_pending: 0,
            starting_left: job.target_workers.saturating_sub(pods.bound.len() as u32),
            taken: Vec::new(),
            online_waiting,
        }
    }

    /// The workers it keeps before any job's extras: its floor, or its target if lower.
    fn floor(&self) -> u32 {
        self.job.min_workers.min(self.job.target_workers)
    }

    /// Where it stands after keeping, if it loses running workers: for `fewest_jobs`.
    fn losing(&self, member: usize, share: f64, plan: &JobPlan) -> Option<Losing<'a>> {
        if plan.gave_way || !plan.released.iter().any(|(_, node)| node.is_some()) {
            return None;
        }
        let released = |w: &&Worker| plan.released.iter().any(|(name, _)| name == w.name);
        let (released, kept_bound): (Vec<&Worker>, Vec<&Worker>) =
            self.pods.bound[..self.next_bound].iter().partition(released);
        Some(Losing {
            member,
            kept: plan.kept + plan.kept_starting,
            floor: self.floor(),
            target: self.job.target_workers,
            share,
            kept_bound,
            released,
        })
    }

    /// Keeps the job's bound workers up to its floor, none it is starting (see `keep_level`).
    fn keep_running_floor(&mut self, rooms: &mut [NodeRoom], held_below: &[Resources], plan: &mut JobPlan) {
        let floor = self.floor();
        while plan.kept < floor && self.keep_one(rooms, held_below, plan, false) {}
    }

    /// Keeps the job's workers up to its floor. Below the floor it tries to restore it elsewhere
    /// before giving way entirely (target 0, every worker released, its room given back).
    fn keep_floor(&mut self, rooms: &mut [NodeRoom], held_below: &[Resources], plan: &mut JobPlan) {
        let floor = self.floor();
        while plan.kept + plan.kept_starting < floor && self.keep_one(rooms, held_below, plan, true) {}
        let kept = plan.kept + plan.kept_starting;
        if kept == 0 || kept >= self.job.min_workers {
            plan.gave_way = kept == 0 && self.job.target_workers > 0;
            return;
        }
        for _ in kept..self.job.min_workers {
            match place_one(rooms, held_below, &self.job.worker, Holds::Respect) {
                Some(node) => {
                    self.taken.push((node, self.job.worker));
                    plan.kept_starting += 1;
                }
                None => {
                    give_back(rooms, &self.taken);
                    plan.gave_way = true;
                    plan.released = self.pods.bound.iter().map(|w| (w.name.to_string(), Some(w.node))).collect();
                    plan.released.extend(self.pods.pending.iter().map(|n| (n.to_string(), None)));
                    plan.released_unnamed = 0;
                    plan.kept = 0;
                    plan.kept_starting = 0;
                    return;
                }
            }
        }
    }

    /// Keeps one more worker if the job has one to keep: the next bound worker that still fits
    /// where it is (those that no longer fit are released on the way), else one of the workers it
    /// is starting, placed where it fits (released if it fits nowhere). False when nothing is
    /// left to keep. Bound workers beyond the master's target are ones it is already removing, and
    /// pending pods beyond it are leftovers it will remove anyway: neither is kept nor released.
    /// With `starting` false only bound workers are kept.
    fn keep_one(
        &mut self,
        rooms: &mut [NodeRoom],
        held_below: &[Resources],
        plan: &mut JobPlan,
        starting: bool,
    ) -> bool {
        if plan.kept + plan.kept_starting >= self.job.target_workers {
            return false;
        }
        while let Some(w) = self.pods.bound.get(self.next_bound) {
            self.next_bound += 1;
            let room = &mut rooms[w.node];
            let keep_room =
                Resources { cpu_milli: room.training_room.cpu_milli + room.keep_cpu_slack, ..room.training_room };
            if w.requests.fits_in(&keep_room) {
                room.training_room -= w.requests;
                self.taken.push((w.node, w.requests));
                plan.kept += 1;
                return true;
            }
            plan.released.push((w.name.to_string(), Some(w.node)));
        }
        while starting && self.starting_left > 0 {
            self.starting_left -= 1;
            let name = self.pods.pending.get(self.next_pending);
            self.next_pending += 1;
            // Starting workers keep their claim even on nodes held for growth: they were granted.
            match place_one(rooms, held_below, &self.job.worker, Holds::Ignore) {
                Some(node) => {
                    self.taken.push((node, self.job.worker));
                    plan.kept_starting += 1;
                    return true;
                }
                // Named or not: between the scheduler deleting a worker and its controller creating
                // the replacement, the job shows a worker it is starting with no pod yet.
                None if self.online_waiting => {
                    plan.kept_starting += 1;
                    plan.waiting += 1;
                    return true;
                }
                None => match name {
                    Some(n) => plan.released.push((n.to_string(), None)),
                    None => plan.released_unnamed += 1,
                },
            }
        }
        false
    }
}

/// One priority level being planned.
struct Level<'a> {
    /// Its jobs, by name.
    members: &'a [usize],
    /// Of them, the jobs waiting for their floor, oldest first.
    queue: &'a [usize],
    /// The oldest waiting job, if it has waited `waiting_reservation_after`: when its floor
    /// does not fit, the room it needs is drained for it.
    reservation_due: Option<usize>,
    jobs: &'a [Job],
    /// Per job of the snapshot: its weight in the dominant-share order.
    weights: &'a [f64],
    held_below: &'a [Resources],
    total: &'a Resources,
}

/// Keeps workers at one priority level so that one job's extras never cost another job its
/// floor, every job's running workers before any job's starting ones (then in name order; a
/// job that cannot keep its floor gives way entirely); then the room for waiting jobs' floors
/// is set aside, oldest first, each one whose whole floor fits (one that does not fit even so
/// is passed over and blocks no one); then the extras go one at a time to the job with the
/// lowest weighted dominant share, as growth does, again running workers before starting ones.
/// Extras that no longer fit are released: a waiting job is not held up behind the extras of
/// running ones. The room set aside is given back for the fill, which serves
/// waiting jobs first, oldest first.
/// `keeping` has one entry per member, in order.
fn keep_level(level: &Level, mut keeping: Vec<Keeping>, rooms: &mut [NodeRoom], plans: &mut [JobPlan]) {
    let (members, jobs, held_below) = (level.members, level.jobs, level.held_below);
    // The rooms before any worker of this level: whether a floor could fit at all.
    let emptied: Option<Vec<NodeRoom>> = level.reservation_due.map(|_| rooms.iter().map(NodeRoom::trial).collect());
    // Every job's running floor workers before any job's starting ones, for the reason given
    // below for the extras: a job admitted a moment ago placed its floor's pending pods by best
    // fit on the node where a later-named job's only worker runs, and that job gave way.
    for (k, &j) in members.iter().enumerate() {
        keeping[k].keep_running_floor(rooms, held_below, &mut plans[j]);
    }
    for (k, &j) in members.iter().enumerate() {
        keeping[k].keep_floor(rooms, held_below, &mut plans[j]);
    }
    // Waiting floors go on room that is free now before room this level's running extras hold:
    // an extra released for a floor holds its node for its release latency, so a floor placed
    // there starts a step later, while the free room it passed over went to someone's growth
    // (day 20 of the Philly trace: 23 jobs waited one 10 s step longer than under backfill).
    // (Only when someone waits: it is a pass over the level's workers.)
    let held_by_extras =
        if level.queue.is_empty() { Vec::new() } else { held_by_unkept(members, &keeping, plans, held_below) };
    let mut set_aside: Vec<(usize, Resources)> = Vec::new();
    for &j in level.queue {
        let job = &jobs[j];
        let floor = job.min_workers.max(1) as usize;
        let took = take_floor(rooms, &held_by_extras, &job.worker, floor);
        if took.len() == floor {
            set_aside.extend(took);
        } else if level.reservation_due == Some(j)
            && emptied
                .as_ref()
                .is_some_and(|e| take_floor(&mut e.clone(), held_below, &job.worker, floor).len() == floor)
        {
            // A reservation: what fits of its floor stays taken (nobody's extras, nobody's
            // start), and more frees as running jobs finish or shrink to their floors. A floor
            // that could not fit even on an empty level reserves nothing: it would drain for ever.
            plans[j].reserved = true;
        } else {
            give_back(rooms, &took);
        }
    }
    if !set_aside.is_empty() || members.iter().any(|&j| plans[j].reserved) {
        for &j in members {
            plans[j].made_room_for_waiting = true;
        }
    }
    let active: Vec<bool> = members.iter().map(|&j| !plans[j].gave_way).collect();
    let share = |j: usize, plan: &JobPlan| {
        jobs[j].worker.times((plan.kept + plan.kept_starting) as i64).dominant_share(level.total) / level.weights[j]
    };
    // A job's share changes only when it keeps a worker: kept per member, not recomputed for
    // every comparison (a level keeps one worker per turn, 100,000 turns at 5,000 nodes).
    let mut shares: Vec<f64> = members.iter().map(|&j| share(j, &plans[j])).collect();
    // Running workers first, then the ones starting: a starting worker is a pod not yet bound,
    // placed here by guess, and it costs no progress to drop. Kept in one pass, a job granted
    // workers a moment ago (its share weighted low, say by completion time) placed its pending
    // pods on a node another job's running worker holds, and that worker was released for
    // room the grant had counted as the other job's (the live completion-split test, 1 run in 5).
    for starting in [false, true] {
        let mut active = active.clone();
        loop {
            let next = (0..members.len())
                .filter(|&k| active[k])
                .min_by(|&a, &b| shares[a].total_cmp(&shares[b]).then(a.cmp(&b)));
            let Some(k) = next else { break };
            let j = members[k];
            active[k] = keeping[k].keep_one(rooms, held_below, &mut plans[j], starting);
            shares[k] = share(j, &plans[j]);
        }
    }
    give_back_from_fewest_jobs(members, &keeping, &shares, plans);
    give_back(rooms, &set_aside);
}

/// Per node, room held by lower levels and by this level's bound workers not kept yet (after the
/// floors: its running extras, and the workers of jobs that gave way, until they are gone).
fn held_by_unkept(
    members: &[usize],
    keeping: &[Keeping],
    plans: &[JobPlan],
    held_below: &[Resources],
) -> Vec<Resources> {
    let mut held = held_below.to_vec();
    for (k, &j) in keeping.iter().zip(members) {
        let unkept = if plans[j].gave_way { &k.pods.bound[..] } else { &k.pods.bound[k.next_bound..] };
        for w in unkept {
            held[w.node] += w.requests;
        }
    }
    held
}

/// Moves the level's losses of running workers onto as few jobs as can take them (see
/// fewest_jobs.rs).
fn give_back_from_fewest_jobs(members: &[usize], keeping: &[Keeping], shares: &[f64], plans: &mut [JobPlan]) {
    let losing: Vec<Losing> =
        (0..members.len()).filter_map(|k| keeping[k].losing(k, shares[k], &plans[members[k]])).collect();
    if losing.len() < 2 {
        return;
    }
    for swap in concentrate(&losing) {
        let stays = losing[swap.spared].released[swap.stays].name;
        let spared = &mut plans[members[losing[swap.spared].member]];
        spared.released.retain(|(name, _)| name != stays);
        spared.kept += 1;
        spared.spared = true;
        let leaves = losing[swap.sink].kept_bound[swap.leaves];
        let sink = &mut plans[members[losing[swap.sink].member]];
        sink.released.push((leaves.name.to_string(), Some(leaves.node)));
        sink.kept -= 1;
    }
}

/// Places up to `floor` workers like `worker`, taking their room; returns the places taken
/// (fewer than `floor` when the rest fits nowhere).
fn take_floor(
    rooms: &mut [NodeRoom],
    held_below: &[Resources],
    worker: &Resources,
    floor: usize,
) -> Vec<(usize, Resources)> {
    let mut took = Vec::with_capacity(floor);
    while took.len() < floor {
        match place_one(rooms, held_below, worker, Holds::Respect) {
            Some(node) => took.push((node, *worker)),
            None => break,
        }
    }
    took
}

fn give_back(rooms: &mut [NodeRoom], taken: &[(usize, Resources)]) {
    for &(node, r) in taken {
        rooms[node].training_room += r;
    }
}
