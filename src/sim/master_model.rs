//! The simulated masters: what a job's master does with the target colocate sets, and how the
//! `preemption` baseline's masters replace the workers the scheduler took.

use std::collections::BTreeMap;

use super::cluster::{Cluster, PodId};
use super::engine::World;
use super::job_model::{Phase, SimJob};

/// How long after colocate's intent a master's deletes of the workers it releases reach the API
/// server, in a window replayed beside a live run: 140-187 ms after the HPA's sync in `--v=5`
/// scheduler logs of the WorldCup98 spike on the test bed (colocate reads the HPA's status and
/// calls the master, which deletes its released workers at once). It decides the wall-clock
/// second of their `deletionTimestamp`, and so when they are gone ([`Removal`]). 0 in a full
/// replay.
///
/// [`Removal`]: super::cluster::Removal
const MASTER_DELETE_AFTER_S: f64 = 0.17;

impl World<'_> {
    /// The simulated master: grows by creating pending workers; shrinks gracefully, releasing
    /// the named pods first, then pending ones, then the newest.
    pub(super) fn apply_target(&mut self, j: usize, target: u32, release: &[String]) {
        let now = self.now;
        let grace = self.scenario.spec.release_time(j).as_secs_f64();
        let in_place = self.scenario.spec.jobs[j].release_in_place;
        let deleted_at = now + if self.window.is_some() { MASTER_DELETE_AFTER_S } else { 0.0 };
        let let_go = |cluster: &mut Cluster, id: PodId| {
            if in_place {
                cluster.release_in_place(id, now, grace);
            } else {
                cluster.delete(id, deleted_at, grace);
            }
        };
        let job = &mut self.jobs[j];
        if !job.is_live() {
            return;
        }
        let in_place_choice;
        let release = if in_place {
            in_place_choice = oldest_on_named_nodes(&self.cluster, j, release);
            &in_place_choice[..]
        } else {
            release
        };
        if target > job.target {
            job.target = target;
            job.phase = Phase::Running;
            job.create_workers(&mut self.cluster, j, target, now);
            return;
        }
        let moving = target == job.target;
        job.target = target;
        if target == 0 {
            job.phase = Phase::Waiting;
        }
        if moving {
            // Same count, named pods released: replace them (they are on nodes that need room).
            let named: Vec<u64> = SimJob::pods(&self.cluster, j)
                .filter(|(id, _)| release.contains(&self.cluster.pods[id].name))
                .map(|(id, _)| id)
                .collect();
            for id in named {
                let_go(&mut self.cluster, id);
            }
            job.create_workers(&mut self.cluster, j, target, now);
            return;
        }
        let mut pods: Vec<(u64, bool, bool)> = SimJob::pods(&self.cluster, j)
            .map(|(id, bound)| (id, bound, release.contains(&self.cluster.pods[&id].name)))
            .collect();
        let excess = pods.len().saturating_sub(target as usize);
        pods.sort_by_key(|(id, bound, named)| (!*named, *bound, std::cmp::Reverse(*id)));
        for (id, _, _) in pods.into_iter().take(excess) {
            let_go(&mut self.cluster, id);
        }
    }

    /// `preemption` baseline: the job's master replaces lost workers after the relaunch delay
    /// (up to `max_workers`; in a window, a ReplicaSet replaces them at once up to its count).
    pub(super) fn relaunch(&mut self) {
        let window = self.window.is_some();
        for (j, job) in self.jobs.iter_mut().enumerate() {
            if job.phase == Phase::Running && job.relaunch_at.is_some_and(|t| t <= self.now + 1e-9) {
                job.relaunch_at = None;
                let want = if window { job.target } else { job.spec.max_workers };
                job.create_workers(&mut self.cluster, j, want, self.now);
            }
        }
    }
}

/// Releasing in place, the workers that leave for the named ones: as many on each named worker's
/// node, the oldest there first, as the reference master picks them
/// (`reference_master::removal::in_place_choice`, where the why is). Named pods on no node stay.
fn oldest_on_named_nodes(cluster: &Cluster, j: usize, named: &[String]) -> Vec<String> {
    let mut chosen = Vec::new();
    let mut per_node: BTreeMap<usize, usize> = BTreeMap::new();
    for (id, _) in SimJob::pods(cluster, j) {
        let pod = &cluster.pods[&id];
        if named.contains(&pod.name) {
            match pod.node {
                Some(n) => *per_node.entry(n).or_default() += 1,
                None => chosen.push(pod.name.clone()),
            }
        }
    }
    for (n, count) in per_node {
        let mut there: Vec<&super::cluster::SimPod> =
            SimJob::pods(cluster, j).map(|(id, _)| &cluster.pods[&id]).filter(|p| p.node == Some(n)).collect();
        there.sort_by_key(|p| (cluster.started_s(p), p.created_at.floor() as i64, p.name.clone()));
        chosen.extend(there.iter().take(count).map(|p| p.name.clone()));
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Resources;
    use crate::sim::cluster::PodKind;

    #[test]
    fn released_in_place_the_oldest_workers_of_each_named_node_leave() {
        let mut c = Cluster::default();
        let (n0, n1) =
            (c.add_node("n0".into(), Resources::new(8000, 0, 0)), c.add_node("n1".into(), Resources::new(8000, 0, 0)));
        let worker = |c: &mut Cluster, name: &str, node: usize, at: f64| {
            let id = c.create(name.into(), PodKind::Worker { job: 0 }, Resources::new(1000, 0, 0), at);
            c.bind(id, node, at + 1.0);
        };
        worker(&mut c, "old", n0, 0.0);
        worker(&mut c, "older", n0, -5.0);
        worker(&mut c, "replacement", n0, 30.0);
        worker(&mut c, "only", n1, 0.0);
        let other = c.create("other-job".into(), PodKind::Worker { job: 1 }, Resources::new(1000, 0, 0), -9.0);
        c.bind(other, n0, -8.0);
        let waiting = c.create("waiting".into(), PodKind::Worker { job: 0 }, Resources::new(1000, 0, 0), 31.0);
        let named = ["replacement", "old", "only", "waiting"].map(String::from);
        let mut chosen = oldest_on_named_nodes(&c, 0, &named);
        chosen.sort();
        // Two named on n0: its two oldest of this job; n1's only one; the pending one stays named.
        assert_eq!(chosen, ["old", "older", "only", "waiting"]);
        assert!(c.pods.contains_key(&waiting));
    }
}
