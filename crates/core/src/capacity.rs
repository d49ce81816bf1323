//! Room per node for training: allocatable minus system daemons, online pods, the online pods
//! the HPA will add (decided or implied by its metric), and the safety margin.
//!
//! In `capacity: requests` a pod holds what it requests. In `capacity: usage` an online or
//! system pod holds the CPU it uses, never less memory than it requests (the kernel cannot take
//! memory back, and the scheduler places online pods by their memory requests, blind to what
//! workers use), and its request where no usage is known, except that a replica of an
//! autoscaled service not measured yet holds CPU at its HPA's target; pods still to come hold
//! their memory, and CPU only where their service's usage is not known.
//!
//! No CPU is held ahead for load growth in usage mode: BestEffort workers give CPU back the
//! moment an online pod wants it (the kernel's shares), so growth that comes costs training
//! only the pace it loses until the next sample shrinks it, while CPU held for growth that does
//! not come (a load trend extrapolated from a noisy second) is idle for as long as it is held.
//! A replica the HPA adds takes a share of load the pods there are already use.

use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::time::Duration;

use super::name_map::NameMap;

use super::config::{CapacityMode, Config};
use super::forecast::{hpa_growth, release_lead, Calibration, Learned};
use super::intent::Reason;
use super::metric_trend::MetricSteps;
use super::pod_index::PodIndex;
use super::replicas::OnlineCounts;
use super::resources::Resources;
use super::snapshot::{PodClass, Snapshot};

/// One node as the planner sees it, at the node's position in the snapshot.
#[derive(Clone, Debug)]
pub struct NodeRoom {
    pub schedulable: bool,
    pub allocatable: Resources,
    /// Not held by any bound pod (what the scheduler sees as free right now).
    pub free: Resources,
    /// Online pods expected to land here that do not exist or are not bound yet.
    pub reserved: Resources,
    /// What training may hold here after every reservation and the margin.
    pub training_room: Resources,
    /// `capacity: usage`: CPU (millicores) by which the workers kept here may exceed
    /// `training_room` before they are released (`Config::usage_cpu_overcommit` of the node's
    /// batch CPU); new workers go only into `training_room`.
    pub keep_cpu_slack: i64,
    /// Latency guard: no new workers here.
    pub hold_growth: bool,
    /// Why room is short here, for the explanation of any worker released on this node.
    pub pressure: Vec<(Reason, String)>,
}

/// How many replicas a service is expected to need soon, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct OnlineNeed {
    pub service: String,
    pub replica: Resources,
    /// Replicas bound to a node now.
    pub bound: u32,
    /// Replicas ready now (bound pods still starting are not).
    pub ready: u32,
    /// Replicas to make room for.
    pub expected: u32,
    /// Replicas' worth of room kept free beyond `expected` (`Service::headroom_replicas`).
    pub headroom: u32,
    pub because: String,
    /// Its load is rising: more pods are likely to follow the ones reserved for.
    pub rising: bool,
    /// `capacity: usage`: what one replica still to come holds where its service's usage is not
    /// known: its CPU request at the HPA's target utilization (where the HPA brings its pods),
    /// all of its memory request.
    pub replica_usage: Resources,
}

impl NodeRoom {
    /// A copy to try placements on: the same room, without the explanations (strings, which
    /// only intents read and a trial does not need to copy thousands of).
    pub fn trial(&self) -> NodeRoom {
        NodeRoom { pressure: Vec::new(), ..*self }
    }

    /// New workers may go here: it takes pods and no latency guard holds growth on it.
    pub fn open_to_growth(&self) -> bool {
        self.schedulable && !self.hold_growth
    }
}

impl OnlineNeed {
    /// Replicas expected that are not bound yet: room is reserved for them.
    pub fn missing(&self) -> u32 {
        self.expected.saturating_sub(self.bound)
    }

    /// Replicas expected that do not serve yet (not bound, or bound and starting): the service
    /// is scaling up, and its latency is its own lag, until they all serve.
    pub fn scaling_up(&self) -> bool {
        self.ready < self.expected
    }
}

/// Replicas each service will need before released workers could be gone.
///
/// The HPA already decided on `desired - current` pods; beyond that, the growth its metric or
/// the load implies within the release lead (`forecast::hpa_growth`). Reserving for it now is
/// what lets training leave before the new pods exist.
pub fn online_needs(
    snap: &Snapshot,
    counts: &OnlineCounts,
    config: &Config,
    calibration: &Calibration,
    metric_steps: &MetricSteps,
) -> Vec<OnlineNeed> {
    let lead = release_lead(snap, config);
    let mut needs = Vec::new();
    for (svc, c) in snap.services.iter().zip(counts.known.iter().copied()) {
        let mut expected = c.bound + c.pending;
        let mut rising = false;
        let mut because = if c.pending > 0 { format!("{} pending pods", c.pending) } else { String::new() };
        if let Some(h) = &svc.hpa {
            let desired = h.desired_replicas.clamp(h.min_replicas, h.max_replicas.max(h.min_replicas));
            if desired > expected {
                because =
                    format!("HPA desired {desired} > {} replicas (status current {})", expected, h.current_replicas);
                expected = desired;
            }
            // Replicas the HPA counted that are gone (evicted, not yet replaced) come back; but
            // when it scales down, `current` is what it is removing: reserving for it would
            // shrink training for pods about to go.
            expected = expected.max(h.current_replicas.min(desired));
            let learned = Learned {
                per_replica: calibration.per_replica(&svc.name),
                metric_trend: metric_steps.factor(&svc.name, snap.now, lead, config),
            };
            if let Some(g) = hpa_growth(svc, h, c.ready, snap.now, learned, lead, config) {
                rising = g.rising;
                if let Some(r) = g.replicas.filter(|r| *r > expected) {
                    expected = r;
                    because = g.because;
                }
            }
        }
        let missing = expected.saturating_sub(c.bound);
        // Only HPA-driven growth is uncertain; a fixed set of pending pods is reserved exactly.
        if let (true, Some(h)) = (missing > 0 && config.reserve_quantum > 0.0, &svc.hpa) {
            let base = h.current_replicas.max(c.bound + c.pending);
            let quantum = ((base as f64 * config.reserve_quantum - 1e-9).ceil() as u32).max(1);
            // While the load still rises the forecast runs behind it: one more quantum absorbs the
            // error, so training does not grow into room the next HPA step takes.
            let rounded = (missing.div_ceil(quantum) + u32::from(rising)) * quantum;
            let ceiling = h.max_replicas.max(expected);
            expected = (c.bound + rounded).min(ceiling);
        }
        // Standing room on top of every reservation, so the first replicas of a step the
        // signals have not shown yet find it free whatever the release latency; never beyond
        // the HPA's ceiling.
        let ceiling = svc.hpa.as_ref().map_or(u32::MAX, |h| h.max_replicas.max(expected));
        let headroom = expected.saturating_add(svc.headroom_replicas).min(ceiling) - expected;
        let target = svc.hpa.as_ref().and_then(|h| h.metric).map_or(1.0, |m| m.target.clamp(0.0, 1.0));
        let replica_usage =
            Resources { cpu_milli: (svc.replica.cpu_milli as f64 * target).ceil() as i64, ..svc.replica };
        needs.push(OnlineNeed {
            service: svc.name.clone(),
            replica: svc.replica,
            bound: c.bound,
            ready: c.ready,
            expected,
            headroom,
            because,
            rising,
            replica_usage,
        });
    }
    // Pending online pods of services the controller was not told about still need a node.
    let mut rest: Vec<_> = counts.unknown.iter().filter_map(|(name, (c, req))| Some((*name, *c, (*req)?))).collect();
    rest.sort_by(|a, b| a.0.cmp(b.0));
    for (name, c, req) in rest {
        needs.push(OnlineNeed {
            service: name.to_string(),
            replica: req,
            bound: c.bound,
            ready: c.ready,
            expected: c.bound + c.pending,
            headroom: 0,
            because: format!("{} pending pods", c.pending),
            rising: false,
            replica_usage: req,
        });
    }
    needs
}

/// Builds the per-node rooms: what is held now, then the reservations for `needs` placed where
/// the scheduler would put them (the freest node first; a node where releasing training makes
/// room only when no node has free room), then the margin.
pub fn node_rooms(
    snap: &Snapshot,
    index: &PodIndex,
    needs: &[OnlineNeed],
    config: &Config,
) -> (Vec<NodeRoom>, Vec<String>) {
    let usage_mode = config.capacity == CapacityMode::Usage;
    let mut rooms: Vec<NodeRoom> = snap
        .nodes
        .iter()
        .map(|n| NodeRoom {
            schedulable: n.schedulable,
            allocatable: n.allocatable,
            free: n.allocatable,
            reserved: Resources::ZERO,
            training_room: n.allocatable,
            keep_cpu_slack: 0,
            hold_growth: false,
            pressure: Vec::new(),
        })
        .collect();
    // Per service position in the snapshot, its need's position: pods find their service by
    // the pod index, not by hashing its name (30,000 online pods at 1,000 nodes).
    let need_at: NameMap<&str, usize> = needs.iter().enumerate().map(|(k, n)| (n.service.as_str(), k)).collect();
    let need_of: Vec<Option<usize>> = snap.services.iter().map(|s| need_at.get(s.name.as_str()).copied()).collect();
    // Per need, in usage mode: whether its service's usage is known.
    let mut measured = vec![false; needs.len()];
    // Per node, in usage mode: CPU its online and system pods request and do not use (what usage
    // reclaims), the most the CPU margin takes there.
    let mut reclaimed = vec![0_i64; rooms.len()];
    // Per node, in usage mode: the CPU that says why its workers shrink.
    let mut cpu_seen = vec![CpuSeen::default(); if usage_mode { rooms.len() } else { 0 }];
    // Per node: the scheduler's victims that outlast a release, and what they hold.
    let mut held: NameMap<usize, (u32, Resources)> = NameMap::default();
    for (p, pod) in snap.pods.iter().enumerate() {
        let Some(i) = index.node_of(p) else { continue };
        let room = &mut rooms[i];
        let worker = matches!(pod.class, PodClass::Worker { .. });
        if worker && usage_mode && !pod.terminating() {
            cpu_seen[i].workers_ask += pod.requests.cpu_milli;
        }
        // A worker in usage mode requests batch resources only: the scheduler sees it hold no
        // CPU or memory.
        if !(worker && usage_mode) {
            room.free -= pod.requests;
        }
        // Workers are what is being planned; a terminating one is leaving anyway, unless the
        // scheduler preempted it and it holds its node for longer than a release takes.
        if !worker && usage_mode {
            let need = match pod.class {
                PodClass::Online { .. } => index.owner_of(p).and_then(|s| need_of[s]),
                _ => None,
            };
            let held = match (pod.usage, need) {
                // A replica of an autoscaled service not measured yet (new, or scraped once)
                // runs at about the HPA's target, as one still to come is counted: the HPA
                // added it to bring its service's pods there.
                (None, Some(k)) => Resources {
                    cpu_milli: pod.requests.cpu_milli.min(needs[k].replica_usage.cpu_milli),
                    ..pod.requests
                },
                _ => held_in_use(pod),
            };
            if let (Some(k), Some(_)) = (need, pod.usage) {
                measured[k] = true;
            }
            room.training_room -= held;
            reclaimed[i] += (pod.requests.cpu_milli - held.cpu_milli).max(0);
            match pod.usage {
                Some(_) => cpu_seen[i].used += held.cpu_milli,
                None => cpu_seen[i].unmeasured += held.cpu_milli,
            }
        } else if !worker {
            room.training_room -= pod.requests;
        } else if victim_outlasts_a_release(snap, index, p) {
            room.training_room -= pod.requests;
            let (count, requests) = held.entry(i).or_default();
            *count += 1;
            *requests += pod.requests;
        }
    }
    for (&i, (count, requests)) in &held {
        let text = format!("{count} preempted worker(s) hold {requests} until their grace period ends");
        rooms[i].pressure.push((Reason::OnlineHeadroom, text));
    }

    let mut unplaced = Vec::new();
    let mut spread = SpreadIndex::new(&rooms);
    // Pods coming first, for every service; standing headroom only in the room left after
    // them, so one service's optional room never displaces another's pods.
    // What a replica still to come holds: its requests in requests mode; in usage mode its
    // memory, and its CPU at the HPA's target only where its service's usage is not known (where
    // it is, the new pod shares the load its service's pods already use).
    let to_come = |need: &OnlineNeed| {
        if !usage_mode {
            return need.replica;
        }
        if measured[need_at[need.service.as_str()]] {
            Resources { cpu_milli: 0, ..need.replica_usage }
        } else {
            need.replica_usage
        }
    };
    for need in needs {
        let (per_node, short) = reserve(&mut rooms, &mut spread, need.replica, to_come(need), need.missing());
        if short > 0 {
            unplaced.push(format!("{}: {short} replicas will not fit even without training", need.service));
        }
        for (i, n) in per_node {
            let text = format!("{n} {} pod(s) coming ({})", need.service, need.because);
            rooms[i].pressure.push((Reason::OnlineHeadroom, text));
        }
    }
    for need in needs.iter().filter(|n| n.headroom > 0) {
        // Headroom that does not fit is not a problem to report: it is room kept where there
        // is some.
        let standing = if usage_mode { need.replica_usage } else { need.replica };
        let (per_node, _) = reserve(&mut rooms, &mut spread, need.replica, standing, need.headroom);
        for (i, n) in per_node {
            let text = format!("room for {n} {} replica(s) kept as standing headroom", need.service);
            rooms[i].pressure.push((Reason::OnlineHeadroom, text));
        }
    }

    if config.safety_margin > 0.0 {
        for room in &mut rooms {
            room.training_room -= room.allocatable.scaled_up(config.safety_margin);
        }
    }
    if usage_mode {
        // The CPU margin covers what usage samples miss of the pods they measure, so it takes
        // no more than the CPU those pods request and leave unused: a node whose CPU is all
        // requested as it is (a GPU pool's) has no less room than `capacity: requests` gives
        // it. The memory margin is whole: the scheduler places online pods blind to what
        // BestEffort workers hold, so a burst that outruns the releases lands in it, where
        // otherwise the kubelet would evict. GPUs are held by requests in either mode.
        for (room, reclaimed) in rooms.iter_mut().zip(&reclaimed) {
            let a = room.allocatable;
            room.training_room -= Resources {
                cpu_milli: a.scaled_up(config.usage_cpu_margin).cpu_milli.min(*reclaimed),
                memory_bytes: a.scaled_up(config.usage_memory_margin).memory_bytes,
                gpu: 0,
            };
            // A squeeze is measured against the batch CPU, not the node: where online pods leave
            // workers nothing, any worker kept stalls its whole job.
            room.keep_cpu_slack = (room.training_room.cpu_milli.max(0) as f64 * config.usage_cpu_overcommit) as i64;
        }
        // Where what online pods use squeezes the workers out, say so: with no pods coming, the
        // explanation would otherwise fall back to other jobs taking the room.
        for (room, seen) in rooms.iter_mut().zip(&cpu_seen) {
            let keep = room.training_room.cpu_milli + room.keep_cpu_slack;
            if seen.workers_ask > keep && room.pressure.is_empty() {
                let text = format!(
                    "online and system pods use {:.1} CPU, and pods not measured yet hold {:.1} more",
                    seen.used as f64 / 1000.0,
                    seen.unmeasured as f64 / 1000.0
                );
                room.pressure.push((Reason::OnlineHeadroom, text));
            }
        }
    }
    (rooms, unplaced)
}

/// One node's CPU in `capacity: usage`, in millicores, for the explanation of a shrink.
#[derive(Clone, Copy, Default)]
struct CpuSeen {
    /// Used by its online and system pods whose usage is known.
    used: i64,
    /// Held by those whose usage is not known yet (at their request, or their HPA's target).
    unmeasured: i64,
    /// Asked for by its running workers.
    workers_ask: i64,
}

/// What an online or system pod holds of its node in `capacity: usage`: the CPU it uses and
/// never less memory than it requests; its requests where no usage is known.
fn held_in_use(pod: &super::snapshot::Pod) -> Resources {
    let Some(usage) = pod.usage else { return pod.requests };
    Resources {
        cpu_milli: usage.cpu_milli.max(0),
        memory_bytes: usage.memory_bytes.max(pod.requests.memory_bytes),
        gpu: pod.requests.gpu,
    }
}

/// Whether worker `p` is a scheduler's victim that holds its node past the time a release of
/// its job takes: victims leave with their whole grace period (30 s by default), where masters
/// that release in place or fast free room in seconds. Counted as room, such a victim takes the
/// place of the releases that would make room for the pods due before it is gone: live, after
/// the flash crowd's 30 s step, 14 victims hold 28 CPU, and counting it as room lets the next
/// step's pods preempt ten more workers. Only victims: a worker its master released is deleted
/// with the pod's grace period too and may be re-deleted with a shorter one a moment later (the
/// reference master's 5 s releases), and holding it would release more for room already
/// released. A second's slack: a `deletionTimestamp` has whole seconds.
fn victim_outlasts_a_release(snap: &Snapshot, index: &PodIndex, p: usize) -> bool {
    let pod = &snap.pods[p];
    let Some(until) = pod.terminating_until.filter(|_| pod.preempted) else { return false };
    let Some(j) = index.owner_of(p) else { return false };
    until > snap.now + snap.jobs[j].release_latency + Duration::from_secs(1)
}

/// Reserves room for `count` replicas of `replica`, each where the scheduler would put it, and
/// `training` of training room for each (its request, or in usage mode what it will use).
/// Returns how many went on each node (by node index) and how many found no node.
fn reserve(
    rooms: &mut [NodeRoom],
    spread: &mut SpreadIndex,
    replica: Resources,
    training: Resources,
    count: u32,
) -> (Vec<(usize, u32)>, u32) {
    let mut per_node: NameMap<usize, u32> = NameMap::default();
    let mut placed = 0;
    while placed < count {
        let Some(i) = spread.pick(rooms, &replica) else { break };
        let before = SpreadIndex::keys(i, &rooms[i]);
        let room = &mut rooms[i];
        room.free -= replica;
        room.training_room -= training;
        room.reserved += replica;
        spread.refile(before, i, room);
        *per_node.entry(i).or_default() += 1;
        placed += 1;
    }
    let mut per_node: Vec<_> = per_node.into_iter().collect();
    per_node.sort();
    (per_node, count - placed)
}

/// The scheduler's choice for a new online pod: the node with the most free room where it fits;
/// failing that, the node with the most room once training leaves. Nodes are kept ordered by
/// both so a reservation costs O(log n), not a scan of the cluster.
struct SpreadIndex {
    by_free: BTreeSet<(i64, i64, Reverse<usize>)>,
    by_room: BTreeSet<(i64, i64, Reverse<usize>)>,
}

impl SpreadIndex {
    fn keys(i: usize, room: &NodeRoom) -> [(i64, i64, Reverse<usize>); 2] {
        [
            (room.free.cpu_milli, room.free.memory_bytes, Reverse(i)),
            (room.training_room.cpu_milli, room.training_room.memory_bytes, Reverse(i)),
        ]
    }

    fn new(rooms: &[NodeRoom]) -> SpreadIndex {
        // Built from all keys at once (sorted, then filled in linear time), as the Placer is.
        let keys: Vec<_> =
            rooms.iter().enumerate().filter(|(_, r)| r.schedulable).map(|(i, r)| Self::keys(i, r)).collect();
        SpreadIndex { by_free: keys.iter().map(|[f, _]| *f).collect(), by_room: keys.iter().map(|[_, r]| *r).collect() }
    }

    fn pick(&self, rooms: &[NodeRoom], pod: &Resources) -> Option<usize> {
        // Largest first; the first that fits in every dimension (CPU fits for all before the
        // first whose CPU is too small, so the scan stops there).
        let first_fit = |set: &BTreeSet<(i64, i64, Reverse<usize>)>, room_of: fn(&NodeRoom) -> Resources| {
            set.iter()
                .rev()
                .take_while(|(cpu, _, _)| *cpu >= pod.cpu_milli)
                .map(|(_, _, Reverse(i))| *i)
                .find(|&i| pod.fits_in(&room_of(&rooms[i])))
        };
        first_fit(&self.by_free, |r| r.free).or_else(|| first_fit(&self.by_room, |r| r.training_room))
    }

    /// Moves node `i` from its keys `before` a change to its keys now.
    fn refile(&mut self, before: [(i64, i64, Reverse<usize>); 2], i: usize, room: &NodeRoom) {
        self.by_free.remove(&before[0]);
        self.by_room.remove(&before[1]);
        let [f, r] = Self::keys(i, room);
        self.by_free.insert(f);
        self.by_room.insert(r);
    }
}
