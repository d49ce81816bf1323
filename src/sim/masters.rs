//! The simulated masters: what a job's master does with the target colocate sets, and how the
//! `preemption` baseline's masters replace the workers the scheduler took.

use super::cluster::{Cluster, PodId};
use super::engine::World;
use super::jobs::{Phase, SimJob};

impl World<'_> {
    /// The simulated master: grows by creating pending workers; shrinks gracefully, releasing
    /// the named pods first, then pending ones, then the newest.
    pub(super) fn apply_target(&mut self, j: usize, target: u32, release: &[String]) {
        let now = self.now;
        let grace = self.scenario.spec.release_time(j).as_secs_f64();
        let in_place = self.scenario.spec.jobs[j].release_in_place;
        let let_go = |cluster: &mut Cluster, id: PodId| {
            if in_place {
                cluster.release_in_place(id, now, grace);
            } else {
                cluster.delete(id, now, grace);
            }
        };
        let job = &mut self.jobs[j];
        if !job.is_live() {
            return;
        }
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
