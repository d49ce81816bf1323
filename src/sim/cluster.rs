//! The simulated cluster: nodes, pods, and a scheduler that binds pending pods (online pods
//! spread to the freest node, workers packed best-fit) and, where the policy allows, preempts
//! lower-priority workers for an online pod that does not fit.
//!
//! Preemption follows kube-scheduler v1.34's DefaultPreemption (read in its source:
//! `pkg/scheduler/backend/cache/cache.go` `UpdatePod`, and in
//! `framework/plugins/defaultpreemption/default_preemption.go` `PodEligibleToPreemptOthers` and
//! `SelectVictimsOnNode`, `framework/runtime/framework.go` `addGENominatedPods`): a pod being deleted keeps counting against its node
//! until it is gone, so room that released workers will free is invisible to the scheduler and
//! a pod that does not fit preempts running workers anyway; victims are the least important
//! lower-priority pods (newest first) after reprieving all it can, on the node that
//! pickOneNodeForPreemption picks (fewest and least important victims, then the youngest);
//! the preemptor is nominated to that node, and pods nominated there hold its room
//! against other pods. It holds back from preempting again only while victims of a preemption
//! (pods the scheduler marked `DisruptionTarget`) are still leaving its nominated node.
//!
//! Which of several equally important workers (one priority, one start second) a preemption
//! takes follows from the order of the scheduler cache's per-node pod list, which
//! [`Cluster`] keeps as kube-scheduler does (see [`Cluster::node_pods`]).

use std::cmp::Reverse;
use std::collections::BTreeMap;

use super::go_sort::sort_slice;
use super::policy::draw;
use super::scheduler_queue::{backoff_s, Attempt, SchedulerPace};
use crate::core::Resources;

pub type PodId = u64;

/// Preemption victims: (pod, its job).
type Victims = Vec<(PodId, usize)>;

/// When a pod deleted with a grace period is gone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Removal {
    /// When its grace period is over: a full replay's steps of 1-10 s cannot resolve more, and
    /// the step's order already removes such a pod after the pods of its moment were tried.
    #[default]
    AtGracePeriodEnd,
    /// As the test bed's nodes remove it (`hack/testbed/kwok-graceful-delete.yaml`, a kubelet's
    /// stand-in): one second after its `deletionTimestamp`, which the API server sets to the
    /// request plus the grace period and stores in whole wall-clock seconds. So (0, 1] s after
    /// the grace period, and where in that second hangs on [`Cluster::wall_phase_s`]: every pod
    /// deleted in one wall-clock second is gone at the same instant. In two `--v=5` runs of the
    /// WorldCup98 spike on the test bed the 40 s sync's releases, deleted 0.20-0.26 s after it,
    /// are gone at 71.04-71.14 s in a run whose wall seconds begin 0.032 s after the window's,
    /// at 70.77-70.89 s in one where they begin 0.749 s after: as this rule has it (71.03,
    /// 70.75). A fixed half second would put them at 70.5 s in every draw.
    SecondAfterDeletionTimestamp,
}

/// How long kube-scheduler leaves a pod that failed for want of room before trying it again
/// with no event: `podMaxInUnschedulablePodsDuration`, 5 min by default.
const UNSCHEDULABLE_FLUSH_S: f64 = 300.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodKind {
    System,
    Online { service: usize },
    Worker { job: usize },
}

#[derive(Clone, Debug)]
pub struct SimPod {
    pub name: String,
    pub kind: PodKind,
    pub requests: Resources,
    /// A BestEffort worker's request of its node's batch capacity (`capacity: usage`): CPU and
    /// memory it asks the scheduler for instead of `requests`, which then holds its GPUs only.
    pub batch: Resources,
    pub node: Option<usize>,
    pub created_at: f64,
    pub ready_at: Option<f64>,
    /// Set once deletion is requested: the pod holds its node until then.
    pub leaving_at: Option<f64>,
    /// Released in place: its master asked for the resize that frees its room at `leaving_at`,
    /// and the kubelet has not actuated it yet.
    pub resizing: bool,
    /// Node a preemptor waits for while its victims leave.
    pub nominated: Option<usize>,
    /// Picked as a preemption victim (the scheduler's `DisruptionTarget` condition).
    pub preempted: bool,
    /// Its last failed scheduling attempt, if it has failed: the scheduler tries it again only
    /// once room has freed since (or after [`UNSCHEDULABLE_FLUSH_S`]).
    pub failed: Option<FailedAttempt>,
}

/// When a pending pod last failed to find room.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FailedAttempt {
    pub at: f64,
    /// [`Cluster::room_events`] then.
    pub room_events: u64,
    /// Failed attempts so far (`UnschedulableCount`): its backoff doubles with each.
    pub failures: u32,
}

impl SimPod {
    pub fn is_ready(&self, now: f64) -> bool {
        self.node.is_some() && self.leaving_at.is_none() && self.ready_at.is_some_and(|r| r <= now)
    }
}

#[derive(Clone, Debug)]
pub struct SimNode {
    pub name: String,
    pub allocatable: Resources,
    /// Requests of every pod bound here, leaving ones included.
    pub used: Resources,
    /// Of `used`, what pods in their grace period hold.
    pub leaving: Resources,
    /// Requests of pending pods waiting for this node's leaving pods.
    pub nominated: Resources,
    /// Leaving pods here that a preemption picked: while any remains, pods nominated here wait.
    pub victims_leaving: u32,
    /// The batch capacity the node carries (`capacity: usage`, as colocate last wrote it).
    pub batch_capacity: Resources,
    /// Batch requests of every pod bound here, leaving ones included.
    pub batch_used: Resources,
}

/// How an online pod that does not fit gets room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preemption {
    /// It waits (the controller makes room).
    Never,
    /// The lowest-priority workers on one node are evicted.
    Workers,
    /// Whole jobs are evicted (rigid gang jobs cannot lose a worker).
    WholeJobs,
}

/// Workers evicted to make room; the caller tells their jobs.
#[derive(Debug, Default)]
pub struct Evictions {
    /// Victims that were running (or pending, for whole jobs): (victim, its job).
    pub pods: Vec<(PodId, usize)>,
    /// Victims that were already leaving (released gracefully), picked for the first time:
    /// nothing changes for them but the mark.
    pub already_leaving: u32,
    /// Victims released in place whose resize was not actuated yet: the kubelet resizes no pod
    /// being deleted, so they now hold their node for the grace period. Their jobs had let them
    /// go; the scheduler still killed a running pod.
    pub releases_cut: Vec<PodId>,
}

/// What preempting one pod did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Preempted {
    /// It was running: deleted with the grace period.
    Running,
    /// It was leaving already; only the mark changes.
    AlreadyLeaving,
    /// An earlier preemption picked it already (kube-scheduler picks a victim still leaving
    /// again when its room is needed again); nothing changes.
    Again,
    /// It was being released in place; its room now frees only when the grace period ends.
    ReleaseCut,
}

#[derive(Clone, Debug, Default)]
pub struct Cluster {
    pub nodes: Vec<SimNode>,
    pub pods: BTreeMap<PodId, SimPod>,
    next_id: PodId,
    /// Events that may free room (a bound pod gone, a node added), counted: what moves
    /// kube-scheduler's waiting pods back into its active queue.
    pub room_events: u64,
    /// kube-scheduler's cache's pods of each node, in its order (`NodeInfo.Pods`): a pod bound
    /// there is appended; a pod updated (deleted, marked a victim, resized) is removed and
    /// appended again; a pod removed takes the last one into its place (`NodeInfo.RemovePod`
    /// swaps it with the last; the cache's `UpdatePod` is `RemovePod` then `AddPod`). A
    /// preemption ranks a node's candidates in this order with Go's unstable `sort.Slice`, so
    /// among workers of one priority that started in the same second it takes the last ones:
    /// usually the ones a master has just deleted, already leaving (this rule predicts 303 of
    /// the 307 single-victim choices in a live run's `--v=5` scheduler log). A pod's node is
    /// [`SimPod::node`]; this is only the order.
    node_pods: Vec<Vec<PodId>>,
    /// Where kube-scheduler's choice is left to chance (nodes that rank alike for a preemption:
    /// Go's map order) live runs differ from run to run. Replay draws those choices from the
    /// nodes' names and this number: 0 in a full replay; a window replay plays several to show
    /// the spread. It also names the workers
    /// (random suffixes, as a ReplicaSet's).
    pub tie_seed: u64,
    /// When a pod deleted with a grace period is gone: at its end in a full replay; as the
    /// test bed removes it in a window replayed beside a live run.
    pub removal: Removal,
    /// Where wall-clock seconds begin in scenario time: at `k - wall_phase_s` for whole `k`.
    /// Kubernetes keeps times in whole wall-clock seconds (a pod's `status.startTime`, which
    /// ranks preemption's victims; its `deletionTimestamp`), and a live run's window opens
    /// anywhere in a second, so which events share a second differs from run to run. 0 in a
    /// full replay; a window replay draws it.
    pub wall_phase_s: f64,
    /// kube-scheduler's pace and queue ([`SchedulerPace`]): in a window replay; `None`, no
    /// limit and no backoff, in a full replay, whose steps of a second or more cannot resolve
    /// them. Pods the loop has not reached by a pass wait for the next one.
    pub pace: Option<SchedulerPace>,
}

impl Cluster {
    pub fn add_node(&mut self, name: String, allocatable: Resources) -> usize {
        self.nodes.push(SimNode {
            name,
            allocatable,
            used: Resources::ZERO,
            leaving: Resources::ZERO,
            nominated: Resources::ZERO,
            victims_leaving: 0,
            batch_capacity: Resources::ZERO,
            batch_used: Resources::ZERO,
        });
        self.node_pods.push(Vec::new());
        self.room_events += 1;
        self.nodes.len() - 1
    }

    pub fn allocatable(&self) -> Resources {
        self.nodes.iter().map(|n| n.allocatable).sum()
    }

    pub fn create(&mut self, name: String, kind: PodKind, requests: Resources, now: f64) -> PodId {
        self.create_with_batch(name, kind, requests, Resources::ZERO, now)
    }

    /// A pod requesting `batch` of its node's batch capacity beside `requests`.
    pub fn create_with_batch(
        &mut self,
        name: String,
        kind: PodKind,
        requests: Resources,
        batch: Resources,
        now: f64,
    ) -> PodId {
        let id = self.next_id;
        self.next_id += 1;
        let pod = SimPod {
            name,
            kind,
            requests,
            batch,
            node: None,
            created_at: now,
            ready_at: None,
            leaving_at: None,
            resizing: false,
            nominated: None,
            preempted: false,
            failed: None,
        };
        self.pods.insert(id, pod);
        id
    }

    pub fn bind(&mut self, id: PodId, node: usize, ready_at: f64) {
        let pod = self.pods.get_mut(&id).expect("bind a live pod");
        debug_assert!(pod.node.is_none());
        pod.node = Some(node);
        if let Some(m) = pod.nominated.take() {
            self.nodes[m].nominated -= pod.requests;
        }
        pod.ready_at = Some(ready_at);
        self.nodes[node].used += pod.requests;
        self.nodes[node].batch_used += pod.batch;
        // kwok's status update follows the bind within milliseconds: the pod stays last.
        self.node_pods[node].push(id);
    }

    /// The pods bound to `node`, in kube-scheduler's cache order.
    pub fn node_pods(&self, node: usize) -> &[PodId] {
        &self.node_pods[node]
    }

    /// An update of a bound pod (a deletion, a victim's condition, a resize): kube-scheduler's
    /// cache removes it from its node's list (the last pod takes its place) and appends it.
    fn touch(&mut self, id: PodId) {
        if let Some(n) = self.pods.get(&id).and_then(|p| p.node) {
            self.unlist(n, id);
            self.node_pods[n].push(id);
        }
    }

    /// `NodeInfo.RemovePod`: the last pod of the node's list takes the removed one's place.
    fn unlist(&mut self, node: usize, id: PodId) {
        let list = &mut self.node_pods[node];
        if let Some(at) = list.iter().position(|p| *p == id) {
            list.swap_remove(at);
        }
    }

    /// Requests deletion, reaching the API server at `requested`; the pod keeps its node for
    /// `grace` seconds (unbound pods go at once).
    pub fn delete(&mut self, id: PodId, requested: f64, grace: f64) {
        self.start_leaving(id, (grace > 0.0).then(|| self.gone_after_grace(requested, grace)));
    }

    /// Releases a bound worker in place: its master resizes it down and its room frees when the
    /// kubelet reports the resize, `after` seconds from now, unless the scheduler preempts it
    /// first (see [`Cluster::preempt`]). Unbound pods go at once. No [`Removal`] rule: that is
    /// the kubelet removing a pod whose grace period is over, and a resize frees the room the
    /// moment it is reported.
    pub fn release_in_place(&mut self, id: PodId, now: f64, after: f64) {
        if self.start_leaving(id, (after > 0.0).then_some(now + after)) {
            if let Some(pod) = self.pods.get_mut(&id) {
                pod.resizing = true;
            }
        }
    }

    /// When a pod whose deletion with `grace` seconds reaches the API server at `requested`
    /// is gone (see [`Removal`]).
    fn gone_after_grace(&self, requested: f64, grace: f64) -> f64 {
        match self.removal {
            Removal::SecondAfterDeletionTimestamp if grace > 0.0 => self.wall_second_of(requested + grace) + 1.0,
            _ => requested + grace,
        }
    }

    /// The wall-clock second scenario time `t` falls in, numbered from the one time 0 falls in.
    fn wall_second(&self, t: f64) -> f64 {
        // A hair of slack: scenario times are sums of 0.1 s steps.
        (t + self.wall_phase_s + 1e-9).floor()
    }

    /// The start of the wall-clock second `t` falls in, in scenario time.
    fn wall_second_of(&self, t: f64) -> f64 {
        self.wall_second(t) - self.wall_phase_s
    }

    /// The wall-clock second a pod started (`status.startTime` has a resolution of one
    /// second), numbered as [`Cluster::wall_second`] numbers them.
    pub fn started_s(&self, pod: &SimPod) -> i64 {
        self.wall_second(pod.ready_at.unwrap_or(pod.created_at)) as i64
    }

    /// A pod not yet leaving holds its node until `at`, or goes at once (`None`, or unbound).
    /// Whether it now leaves at `at`.
    fn start_leaving(&mut self, id: PodId, at: Option<f64>) -> bool {
        let Some(pod) = self.pods.get_mut(&id) else { return false };
        if pod.leaving_at.is_some() {
            return false;
        }
        match (pod.node, at) {
            (Some(n), Some(at)) => {
                pod.leaving_at = Some(at);
                self.nodes[n].leaving += pod.requests;
                self.touch(id);
                true
            }
            _ => {
                self.remove(id);
                false
            }
        }
    }

    fn remove(&mut self, id: PodId) {
        let Some(pod) = self.pods.remove(&id) else { return };
        if let Some(n) = pod.node {
            self.unlist(n, id);
            self.nodes[n].used -= pod.requests;
            self.nodes[n].batch_used -= pod.batch;
            self.room_events += 1;
            if pod.leaving_at.is_some() {
                self.nodes[n].leaving -= pod.requests;
                if pod.preempted {
                    self.nodes[n].victims_leaving -= 1;
                }
            }
        }
        if let Some(m) = pod.nominated {
            self.nodes[m].nominated -= pod.requests;
        }
    }

    /// Removes pods whose grace period is over; returns them.
    pub fn reap(&mut self, now: f64) -> Vec<SimPod> {
        let gone: Vec<PodId> = self
            .pods
            .iter()
            .filter(|(_, p)| p.leaving_at.is_some_and(|t| t <= now + 1e-9))
            .map(|(id, _)| *id)
            .collect();
        gone.into_iter()
            .filter_map(|id| {
                let pod = self.pods.get(&id).cloned();
                self.remove(id);
                pod
            })
            .collect()
    }

    pub fn free(&self, node: usize) -> Resources {
        self.nodes[node].allocatable - self.nodes[node].used
    }

    /// Best node for a pod among those where it fits now: `spread` picks the freest
    /// (the default scheduler's LeastAllocated), otherwise the tightest fit (bin packing).
    /// Room held for nominated preemptors counts as taken.
    pub fn pick_node(&self, requests: &Resources, spread: bool) -> Option<usize> {
        let open = |n: usize| self.free(n) - self.nodes[n].nominated;
        let fitting = (0..self.nodes.len()).filter(|&n| requests.fits_in(&open(n)));
        let key = |n: &usize| {
            let f = open(*n);
            (f.cpu_milli, f.memory_bytes)
        };
        if spread {
            fitting.max_by_key(|n| (key(n), std::cmp::Reverse(*n)))
        } else {
            fitting.min_by_key(|n| (key(n), *n))
        }
    }

    /// Best node for a pod requesting `batch` of the nodes' batch capacity beside `requests`:
    /// the tightest fit of batch capacity among the nodes where both fit.
    pub fn pick_batch_node(&self, requests: &Resources, batch: &Resources) -> Option<usize> {
        let open = |n: usize| self.nodes[n].batch_capacity - self.nodes[n].batch_used;
        (0..self.nodes.len())
            .filter(|&n| requests.fits_in(&(self.free(n) - self.nodes[n].nominated)) && batch.fits_in(&open(n)))
            .min_by_key(|&n| (open(n).cpu_milli, open(n).memory_bytes, n))
    }

    /// Sets the batch capacity node `n` carries; a rise is an event that frees room.
    pub fn set_batch_capacity(&mut self, n: usize, batch: Resources) {
        let before = self.nodes[n].batch_capacity;
        self.nodes[n].batch_capacity = batch;
        if !batch.fits_in(&before) {
            self.room_events += 1;
        }
    }

    /// Nodes for `count` pods of `requests` placed at once, each where it fits tightest (as
    /// [`Cluster::pick_node`] without spreading), or `None` if not all of them fit: how a gang
    /// scheduler tests a rigid job.
    pub fn place_all(&self, requests: &Resources, count: u32) -> Option<Vec<usize>> {
        let mut open: Vec<Resources> = (0..self.nodes.len()).map(|n| self.free(n) - self.nodes[n].nominated).collect();
        let mut places = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let n = (0..open.len())
                .filter(|&n| requests.fits_in(&open[n]))
                .min_by_key(|&n| (open[n].cpu_milli, open[n].memory_bytes, n))?;
            open[n] -= *requests;
            places.push(n);
        }
        Some(places)
    }

    /// Binds pending pods, online first; returns workers evicted for online pods.
    /// `ready_delay(pod)` gives each pod's startup time; `priority(job)` orders jobs.
    /// `online_arriving`: online pods are still being created; pending workers are not tried
    /// after an online pod of the pass found no room.
    pub fn schedule(
        &mut self,
        now: f64,
        preemption: &dyn Fn(&SimPod) -> Preemption,
        ready_delay: &dyn Fn(&SimPod) -> f64,
        priority: &dyn Fn(usize) -> i32,
        grace: f64,
        online_arriving: bool,
    ) -> Evictions {
        let mut evictions = Evictions::default();
        let pending = self.queue_order(now, priority);
        // The scheduling loop's clock in a window replay: an idle loop banks up to one step.
        if let Some(pace) = self.pace.as_mut() {
            pace.begin_pass(now);
        }
        // While a scale-up's pods are still arriving and some find no room, kube-scheduler's
        // priority queue is never empty of them long enough to reach a worker: each failing
        // online pod's attempt takes its cycle (about 16 ms each at --v=5, dozens of them woken
        // by one freed node), and the ReplicaSet adds another every 50 ms. A pass that tried
        // workers then would give a freed node's room to replacements, which the next online
        // pods preempt (replayed so, WorldCup98 has 5 of its 15 kills on workers bound under
        // 30 s before; live, 0-1). Once every online pod fits, each takes about a millisecond
        // and the queue runs dry between two creations: live, the scheduler then tries the
        // waiting workers, and the scale-up's later pods preempt them (in a WorldCup98 run:
        // three replacements bound at 70.7 s, killed at 71.6 s).
        let mut online_failed = false;
        for id in pending {
            // An earlier preemption in this pass may have deleted it (a gang's pending workers).
            let Some(pod) = self.pods.get(&id) else { continue };
            if online_arriving && online_failed && matches!(pod.kind, PodKind::Worker { .. }) {
                continue;
            }
            let requests = pod.requests;
            let batch = pod.batch;
            let online = matches!(pod.kind, PodKind::Online { .. });
            let nominated = pod.nominated;
            // Its own nomination's room is its to use.
            let target = match nominated {
                Some(n) if requests.fits_in(&(self.free(n) - self.nodes[n].nominated + requests)) => Some(n),
                _ if !batch.is_zero() => self.pick_batch_node(&requests, &batch),
                _ => self.pick_node(&requests, online),
            };
            let mode = if online && target.is_none() { preemption(pod) } else { Preemption::Never };
            // kube-scheduler's PodEligibleToPreemptOthers: not while victims of a preemption are
            // still leaving the nominated node.
            let preempts = mode != Preemption::Never && nominated.is_none_or(|n| self.nodes[n].victims_leaving == 0);
            // The loop has not reached it by now: it and the pods behind it wait for the next
            // pass (not an attempt, so no failure either).
            if self.pace.as_ref().is_some_and(|pace| !pace.reaches(now, preempts)) {
                break;
            }
            if let Some(n) = target {
                let delay = ready_delay(&self.pods[&id]);
                self.bind(id, n, now + delay);
                self.paced(Attempt::Bound);
                continue;
            }
            let room_events = self.room_events;
            let pod = self.pods.get_mut(&id).expect("pending pod");
            let failures = pod.failed.map_or(0, |f| f.failures) + 1;
            pod.failed = Some(FailedAttempt { at: now, room_events, failures });
            online_failed |= online;
            if !preempts {
                self.paced(Attempt::Failed);
                continue;
            }
            if let Some(n) = nominated {
                // The room it waited for went elsewhere: look again.
                self.pods.get_mut(&id).expect("pending pod").nominated = None;
                self.nodes[n].nominated -= requests;
            }
            let mut calls = 0;
            if let Some((node, victims)) = self.find_victims(&requests, mode, priority, id) {
                for (v, job) in victims {
                    let picked = self.preempt(v, now, grace);
                    // Each victim is deleted (again, if already leaving); marked the first time.
                    calls += if picked == Preempted::Again { 1 } else { 2 };
                    match picked {
                        Preempted::Running => evictions.pods.push((v, job)),
                        Preempted::AlreadyLeaving => evictions.already_leaving += 1,
                        Preempted::ReleaseCut => evictions.releases_cut.push(v),
                        Preempted::Again => {}
                    }
                }
                self.pods.get_mut(&id).expect("pending pod").nominated = Some(node);
                self.nodes[node].nominated += requests;
            }
            self.paced(Attempt::Preempted { calls });
        }
        evictions
    }

    /// Counts `attempt` on the scheduling loop's clock, where there is one.
    fn paced(&mut self, attempt: Attempt) {
        if let Some(pace) = self.pace.as_mut() {
            pace.attempt(attempt);
        }
    }

    /// The pending pods a pass at `now` may try, in the order kube-scheduler's queue gives
    /// them. A pod that failed is parked until room frees (an event its rejecting plugin
    /// registered: NodeResourcesFit's assigned pod deleted or scaled down, node added or
    /// grown) or the 5 min flush; room held for a nominated pod that went elsewhere is no
    /// event. Unpaced (a full replay), every other pod is tried, system pods first, then
    /// online ones, then workers by priority, oldest first. Paced, the active queue goes
    /// first (the same ranks, then the time each was queued: created, or last failed), and
    /// pods still backing off only after it ([`super::scheduler_queue`]).
    fn queue_order(&self, now: f64, priority: &dyn Fn(usize) -> i32) -> Vec<PodId> {
        let rank = |p: &SimPod| match p.kind {
            PodKind::System => (0, 0),
            PodKind::Online { .. } => (1, 0),
            PodKind::Worker { job } => (2, -priority(job)),
        };
        let paced = self.pace.is_some();
        // (backing off until, rank, queued at, id): the first is 0 for the active queue, and
        // unpaced both times are 0 (every pod is active, in rank and creation order).
        let mut queued: Vec<(f64, (i32, i32), f64, PodId)> = Vec::new();
        for (id, p) in &self.pods {
            if p.node.is_some() || p.leaving_at.is_some() {
                continue;
            }
            let (until, since) = match p.failed {
                Some(f) if f.room_events == self.room_events && now - f.at < UNSCHEDULABLE_FLUSH_S => continue,
                _ if !paced => (0.0, 0.0),
                None => (0.0, p.created_at),
                Some(f) => {
                    // `getBackoffTime` aligns the expiry to its wall-clock second; the pod backs
                    // off until the flush at the start of the next.
                    let until = self.wall_second_of(f.at + backoff_s(f.failures)) + 1.0;
                    (if until > now + 1e-9 { until } else { 0.0 }, f.at)
                }
            };
            queued.push((until, rank(p), since, *id));
        }
        queued.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.total_cmp(&b.2)).then(a.3.cmp(&b.3)));
        queued.into_iter().map(|q| q.3).collect()
    }

    /// Marks `id` as a preemption victim and deletes it with `grace`. For a pod already
    /// leaving the deletion changes nothing, but the mark makes preemptors wait for it; unless
    /// its room was to free by a resize in place, which the kubelet no longer actuates.
    fn preempt(&mut self, id: PodId, now: f64, grace: f64) -> Preempted {
        let gone_after_grace = self.gone_after_grace(now, grace);
        let pod = self.pods.get_mut(&id).expect("a victim exists");
        let was_leaving = pod.leaving_at.is_some();
        let picked_before = pod.preempted;
        // A victim that leaves at once (pending, or no grace period) needs no waiting for.
        if let (false, Some(n), true) = (pod.preempted, pod.node, was_leaving || grace > 0.0) {
            pod.preempted = true;
            self.nodes[n].victims_leaving += 1;
        }
        if picked_before {
            // The condition is there already and a second deletion changes nothing: no update.
            return Preempted::Again;
        }
        // The `DisruptionTarget` condition is an update of the pod.
        self.touch(id);
        let pod = self.pods.get_mut(&id).expect("a victim exists");
        if pod.resizing {
            pod.resizing = false;
            // Now a deletion: the pod goes when its grace period is over, as `delete` has it.
            pod.leaving_at = pod.leaving_at.map(|t| t.max(gone_after_grace));
            return Preempted::ReleaseCut;
        }
        if was_leaving {
            return Preempted::AlreadyLeaving;
        }
        self.delete(id, now, grace);
        Preempted::Running
    }

    /// The node and victims kube-scheduler's SelectVictimsOnNode and pickOneNodeForPreemption
    /// choose (the node by [`Cluster::node_rank`]): every lower-priority pod on the
    /// node is a candidate (leaving ones too: they still count against it), then the most
    /// important (highest priority, oldest) are reprieved while the preemptor still fits. For
    /// whole jobs, a job's every pod goes with it.
    fn find_victims(
        &self,
        requests: &Resources,
        mode: Preemption,
        priority: &dyn Fn(usize) -> i32,
        preemptor: PodId,
    ) -> Option<(usize, Vec<(PodId, usize)>)> {
        // The workers of each job that could go with it (whole jobs).
        let mut of_job: BTreeMap<usize, Vec<(PodId, Option<usize>, Resources)>> = BTreeMap::new();
        if mode == Preemption::WholeJobs {
            for (id, p) in &self.pods {
                if let (PodKind::Worker { job }, None) = (p.kind, p.leaving_at) {
                    of_job.entry(job).or_default().push((*id, p.node, p.requests));
                }
            }
        }
        let mut best: Option<(NodeRank, usize, Victims)> = None;
        for n in 0..self.nodes.len() {
            // The node's candidates in the cache's order, then ranked as SelectVictimsOnNode
            // ranks them: Go's sort.Slice with MoreImportantPod (highest priority, then earliest
            // start), which leaves ties where its swaps put them.
            let mut candidates: Vec<Candidate> = self.node_pods[n]
                .iter()
                .filter_map(|id| {
                    let pod = &self.pods[id];
                    match pod.kind {
                        PodKind::Worker { job } => Some(Candidate::of(self.started_s(pod), priority(job), *id, job)),
                        _ => None,
                    }
                })
                .collect();
            let open = self.free(n) - self.nodes[n].nominated;
            sort_slice(&mut candidates, Candidate::more_important);
            let victims = match mode {
                Preemption::Never => return None,
                Preemption::Workers => {
                    let mut room = open;
                    for Candidate { id, .. } in &candidates {
                        room += self.pods[id].requests;
                    }
                    if !requests.fits_in(&room) {
                        continue;
                    }
                    // Reprieve the most important first; what cannot be reprieved is a victim.
                    let mut victims = Vec::new();
                    for Candidate { id, job, .. } in candidates {
                        let kept = room - self.pods[&id].requests;
                        if requests.fits_in(&kept) {
                            room = kept;
                        } else {
                            victims.push((id, job));
                        }
                    }
                    victims
                }
                Preemption::WholeJobs => {
                    // Least important jobs first (lowest priority, then newest pod).
                    let mut room = open;
                    let mut victims = Vec::new();
                    let mut jobs_taken: Vec<usize> = Vec::new();
                    for Candidate { id, job, .. } in candidates.into_iter().rev() {
                        if requests.fits_in(&room) {
                            break;
                        }
                        if jobs_taken.contains(&job) {
                            continue;
                        }
                        jobs_taken.push(job);
                        // A job that is only leaving frees its room anyway: it is not a victim.
                        let Some(pods) = of_job.get(&job) else {
                            room += self.pods[&id].requests;
                            continue;
                        };
                        for (vid, vnode, vreq) in pods {
                            if *vnode == Some(n) {
                                room += *vreq;
                            }
                            victims.push((*vid, job));
                        }
                    }
                    if !requests.fits_in(&room) {
                        continue;
                    }
                    victims
                }
            };
            let rank = self.node_rank(n, &victims, priority, preemptor);
            if best.as_ref().is_none_or(|(b, _, _)| rank < *b) {
                best = Some((rank, n, victims));
            }
        }
        best.map(|(_, n, victims)| (n, victims))
    }

    /// How kube-scheduler's pickOneNodeForPreemption ranks a node for a preemption, least
    /// disruptive first: the lowest highest-priority victim, the lowest sum of priorities, the
    /// fewest victims, then the latest start among the highest-priority victims (so a node
    /// whose victims already leave, old workers, loses to one with a young running worker:
    /// the WorldCup spike's live preemptions did just that); what still ties is decided by Go's
    /// map order, for which a draw from the preemptor and the node stands in.
    fn node_rank(
        &self,
        node: usize,
        victims: &[(PodId, usize)],
        priority: &dyn Fn(usize) -> i32,
        preemptor: PodId,
    ) -> NodeRank {
        let highest = victims.iter().map(|(_, job)| priority(*job)).max().unwrap_or(i32::MIN);
        let shifted_sum: i64 = victims.iter().map(|(_, job)| i64::from(priority(*job)) + i64::from(i32::MAX) + 1).sum();
        let earliest_start = victims
            .iter()
            .filter(|(_, job)| priority(*job) == highest)
            .map(|(id, _)| self.started_s(&self.pods[id]))
            .min()
            .unwrap_or(i64::MAX);
        NodeRank {
            highest_priority: highest,
            shifted_sum,
            victims: victims.len(),
            earliest_start: Reverse(earliest_start),
            tie: (draw(preemptor ^ self.tie_seed.rotate_left(32), &self.nodes[node].name) * (1u64 << 53) as f64) as u64,
        }
    }
}

/// [`Cluster::node_rank`]: compared field by field, the smallest is picked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct NodeRank {
    highest_priority: i32,
    shifted_sum: i64,
    victims: usize,
    earliest_start: Reverse<i64>,
    tie: u64,
}

/// A pod preemption could evict, with what ranks it among the others on its node.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    priority: i32,
    /// The second it started: a pod's `status.startTime` has a resolution of one second.
    started_s: i64,
    id: PodId,
    job: usize,
}

impl Candidate {
    fn of(started_s: i64, priority: i32, id: PodId, job: usize) -> Candidate {
        Candidate { priority, started_s, id, job }
    }

    /// kube-scheduler's `MoreImportantPod`: a higher priority, or the same and an earlier
    /// start. Ties are neither; their order is the sort's (see [`Cluster::node_pods`]).
    fn more_important(a: &Candidate, b: &Candidate) -> bool {
        a.priority > b.priority || (a.priority == b.priority && a.started_s < b.started_s)
    }
}
