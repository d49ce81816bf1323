//! The decision: snapshot in, intents out. Shrinks are decided here in full; growth passes
//! through the damping memory. Deterministic for a given sequence of snapshots.

use std::collections::BTreeSet;

use super::capacity::{node_rooms, online_needs, OnlineNeed};
use super::completion::{self, Scaling};
use super::config::{CapacityMode, Config};
use super::damping::Memory;
use super::forecast::Calibration;
use super::guard::apply_latency_guard;
use super::intent::{NodeCapacity, Reason, ScaleIntent};
use super::metric_trend::MetricSteps;
use super::plan::{plan_jobs, JobPlan};
use super::pod_index::PodIndex;
use super::publish::batch_to_carry;
use super::replicas::OnlineCounts;
use super::resources::Resources;
use super::snapshot::{Node, Snapshot};

/// Everything one decision produced.
#[derive(Clone, Debug, Default)]
pub struct Decision {
    pub intents: Vec<ScaleIntent>,
    pub nodes: Vec<NodeCapacity>,
    pub online_needs: Vec<OnlineNeed>,
    /// Things a person should know that are not intents (services that cannot fit at all).
    pub notes: Vec<String>,
    /// Each pod's node and owner as positions in the snapshot decided on: for callers that walk
    /// its pods again (the controller's metrics), so they need not look up 30,000 names.
    pub index: PodIndex,
}

impl Decision {
    /// Residual capacity for training summed over nodes.
    pub fn training_room(&self) -> Resources {
        self.nodes.iter().map(|n| n.training_room.clamp_non_negative()).sum()
    }
}

/// The decision core with its memory. One per controller (or per replayed policy run).
#[derive(Clone, Debug)]
pub struct Core {
    config: Config,
    memory: Memory,
    calibration: Calibration,
    metric_steps: MetricSteps,
    scaling: Scaling,
}

impl Core {
    pub fn new(config: Config) -> Self {
        Core {
            config,
            memory: Memory::default(),
            calibration: Calibration::default(),
            metric_steps: MetricSteps::default(),
            scaling: Scaling::default(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn decide(&mut self, snap: &Snapshot) -> Decision {
        let index = PodIndex::new(snap);
        let counts = OnlineCounts::of(snap, &index);
        self.calibration.observe(snap, &counts.known, &self.config);
        self.metric_steps.observe(snap, &counts.known);
        self.scaling.observe(snap);
        let split = completion::split(snap, &self.scaling, self.config.completion_time_split);
        let needs = online_needs(snap, &counts, &self.config, &self.calibration, &self.metric_steps);
        let (mut rooms, notes) = node_rooms(snap, &index, &needs, &self.config);
        apply_latency_guard(snap, &index, &needs, &mut rooms, &mut self.memory, &self.config);
        let batch = self.batch_to_carry(snap, &mut rooms);
        let initial: Vec<Resources> = rooms.iter().map(|r| r.training_room).collect();
        let plans = plan_jobs(snap, &index, &mut rooms, &split.weights, &mut self.memory, &self.config);

        for (job, plan) in snap.jobs.iter().zip(&plans) {
            if plan.target() < job.target_workers && !plan.released.is_empty() {
                self.memory.note_shrink(&job.name, plan.target(), plan.released.iter().map(|(n, _)| n.clone()));
            }
        }
        let jobs: Vec<&str> = snap.jobs.iter().map(|j| j.name.as_str()).collect();
        let services: Vec<&str> = snap.services.iter().map(|s| s.name.as_str()).collect();
        self.memory.retain(&jobs, &services);
        self.calibration.retain(&services);
        self.metric_steps.retain(&services);
        self.scaling.retain(&jobs);

        let intents = snap
            .jobs
            .iter()
            .zip(&plans)
            .zip(&split.because)
            .filter_map(|((job, plan), split)| {
                intent_for(&job.name, job.target_workers, plan, split, &snap.nodes, &rooms)
            })
            .collect();
        let nodes = rooms
            .iter()
            .zip(initial)
            .zip(&snap.nodes)
            .enumerate()
            .map(|(i, ((r, initial), node))| NodeCapacity {
                node: node.name.clone(),
                allocatable: r.allocatable,
                reserved_online: r.reserved,
                training_room: initial.clamp_non_negative(),
                training_planned: (initial - r.training_room).clamp_non_negative(),
                batch: batch.as_ref().map(|b| b[i]),
            })
            .collect();
        Decision { intents, nodes, online_needs: needs, notes, index }
    }
}

impl Core {
    /// `capacity: usage`: the batch capacity each node should carry, and training's room held to
    /// it, so that the plan never counts on room the scheduler does not see (a rise not yet
    /// written). `None` in `capacity: requests`.
    fn batch_to_carry(&self, snap: &Snapshot, rooms: &mut [super::capacity::NodeRoom]) -> Option<Vec<Resources>> {
        if self.config.capacity != CapacityMode::Usage {
            return None;
        }
        let carry = rooms
            .iter_mut()
            .zip(&snap.nodes)
            .map(|(room, node)| {
                let carry =
                    batch_to_carry(node.batch, room.training_room, room.allocatable, self.config.batch_rise_threshold);
                room.training_room.cpu_milli = room.training_room.cpu_milli.min(carry.cpu_milli);
                room.training_room.memory_bytes = room.training_room.memory_bytes.min(carry.memory_bytes);
                carry
            })
            .collect();
        Some(carry)
    }
}

/// Causes an explanation lists, strongest first; the rest are counted.
const LISTED_CAUSES: usize = 8;

fn intent_for(
    job: &str,
    from: u32,
    plan: &JobPlan,
    split: &Option<String>,
    snap_nodes: &[Node],
    rooms: &[super::capacity::NodeRoom],
) -> Option<ScaleIntent> {
    let target = plan.target();
    // Same count with pods to release: the floor is kept by moving workers to other nodes.
    if target == from && plan.released.is_empty() {
        return None;
    }
    let release_pods: Vec<String> =
        if target <= from { plan.released.iter().map(|(n, _)| n.clone()).collect() } else { Vec::new() };
    let nodes: BTreeSet<usize> = plan.released.iter().filter_map(|(_, n)| *n).collect();
    let release_nodes: Vec<String> = nodes.iter().map(|&i| snap_nodes[i].name.clone()).collect();

    if target > from {
        let reason = if from == 0 { Reason::Start } else { Reason::Grow };
        let mut why = format!("{job}: {from} -> {target} workers: spare room for training");
        if let Some(s) = split {
            why.push_str(&format!(", split by completion time ({s})"));
        }
        if let Some(h) = &plan.held_back {
            why.push_str(&format!(" (held back: {h})"));
        }
        return Some(ScaleIntent { job: job.to_string(), from, target, release_pods, release_nodes, reason, why });
    }

    // Shrink: the reason is the strongest pressure on the nodes its workers leave, listed by
    // reason and then in the cluster's node order. Strings are made only for the causes the
    // explanation lists: a shrink across thousands of nodes would otherwise format (and print)
    // one per node.
    let mut causes: BTreeSet<(Reason, usize, &str)> = BTreeSet::new();
    for &i in &nodes {
        if rooms[i].pressure.is_empty() {
            let cause = if plan.made_room_for_waiting {
                (Reason::FairShare, i, "room for the floors of waiting jobs")
            } else {
                (Reason::HigherPriority, i, "room taken by higher-priority jobs")
            };
            causes.insert(cause);
        }
        for (reason, text) in &rooms[i].pressure {
            causes.insert((*reason, i, text.as_str()));
        }
    }
    let reason = if plan.gave_way {
        Reason::GiveWay
    } else {
        causes.iter().map(|(r, _, _)| *r).min().unwrap_or(Reason::OnlineHeadroom)
    };
    let mut why = format!("{job}: {from} -> {target} workers");
    if target == from {
        why.push_str(&format!(", {} moved to other nodes", release_pods.len()));
    }
    if plan.gave_way {
        why.push_str(": its floor no longer fits, so it gives way entirely");
    }
    if causes.is_empty() {
        why.push_str(": workers it was starting no longer fit");
    } else {
        let list: Vec<String> =
            causes.iter().take(LISTED_CAUSES).map(|(_, i, text)| format!("{}: {text}", snap_nodes[*i].name)).collect();
        why.push_str(&format!(": {}", list.join("; ")));
        if causes.len() > LISTED_CAUSES {
            why.push_str(&format!("; and {} more", causes.len() - LISTED_CAUSES));
        }
    }
    Some(ScaleIntent { job: job.to_string(), from, target, release_pods, release_nodes, reason, why })
}
