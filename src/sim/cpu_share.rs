//! How a node's CPU divides between its pods over a step, and what BestEffort workers make of
//! their part. Online and system pods come first (a BestEffort pod's cpu.shares of 2 against
//! 1024 per requested CPU is, in effect, strict priority); requested worker CPU is guaranteed;
//! BestEffort workers share what is left in proportion to what they ask for.
//!
//! A synchronous job steps at the pace of its slowest worker: a worker given more than that pace
//! waits at each step's all-reduce and uses only `asked × pace`. The CPU it leaves is counted
//! idle, not given to other jobs' workers on the node, so usage is never overstated. A job uses
//! CPU only for the part of the step it trains in: while a membership change pauses it (or it
//! has fewer than its floor), its workers wait in rendezvous or restore a checkpoint.

/// One node's CPU before BestEffort workers, in cores.
#[derive(Clone, Copy, Debug)]
pub struct NodeCapacity {
    pub cores: f64,
    /// What online and system pods would use (beyond their requests only where idle).
    pub online: f64,
    /// What workers request as `cpu` (guaranteed to them)...
    pub guaranteed: f64,
    /// ...and what they use of it, for the part of the step their jobs train in.
    pub guaranteed_used: f64,
}

impl NodeCapacity {
    /// What online and system pods get: all they would use but the CPU workers request.
    fn online_served(&self) -> f64 {
        self.online.min((self.cores - self.guaranteed).max(0.0))
    }
}

/// A scheduled worker that requests only batch resources.
#[derive(Clone, Copy, Debug)]
pub struct BestEffortWorker {
    pub node: usize,
    pub job: usize,
    /// The batch CPU it requests, in cores.
    pub asked: f64,
    /// Terminating: it still runs (checkpointing) but no longer sets its job's pace.
    pub leaving: bool,
}

/// CPU on one node over a step, in cores.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NodeCpu {
    /// Online and system pods' use (what the node can serve of it).
    pub online_system: f64,
    /// Workers' use: of their requests and of what BestEffort workers get, the part of the step
    /// their jobs train in.
    pub workers: f64,
    /// What BestEffort workers ask for, and what they get of it at their jobs' pace (whether
    /// their jobs train or pause: `worker_cpu_received` is about contention).
    pub best_effort_asked: f64,
    pub best_effort_got: f64,
}

/// Per node, the CPU its pods use; per job, the pace its workers train at (1 for a job with no
/// BestEffort worker). `training[j]` is the fraction of the step job `j` trains in.
pub fn share_cpu(nodes: &[NodeCapacity], workers: &[BestEffortWorker], training: &[f64]) -> (Vec<NodeCpu>, Vec<f64>) {
    let mut asked = vec![0.0; nodes.len()];
    for w in workers {
        asked[w.node] += w.asked;
    }
    // What each node's BestEffort workers are given, as a fraction of what they ask for.
    let share: Vec<f64> = nodes
        .iter()
        .zip(&asked)
        .map(|(n, &asked)| {
            let left = (n.cores - n.online_served() - n.guaranteed).max(0.0);
            if asked > 0.0 {
                (left / asked).min(1.0)
            } else {
                1.0
            }
        })
        .collect();
    let mut pace = vec![1.0_f64; training.len()];
    for w in workers.iter().filter(|w| !w.leaving) {
        pace[w.job] = pace[w.job].min(share[w.node]);
    }
    let (mut got, mut used) = (vec![0.0; nodes.len()], vec![0.0; nodes.len()]);
    for w in workers {
        let share = share[w.node];
        if w.leaving {
            got[w.node] += w.asked * share;
            used[w.node] += w.asked * share;
        } else {
            got[w.node] += w.asked * share.min(pace[w.job]);
            used[w.node] += w.asked * share.min(pace[w.job]) * training[w.job];
        }
    }
    let cpu = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| NodeCpu {
            online_system: n.online_served(),
            workers: n.guaranteed_used + used[i],
            best_effort_asked: asked[i],
            best_effort_got: got[i],
        })
        .collect();
    (cpu, pace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(cores: f64, online: f64) -> NodeCapacity {
        NodeCapacity { cores, online, guaranteed: 0.0, guaranteed_used: 0.0 }
    }

    fn worker(node: usize, job: usize, asked: f64) -> BestEffortWorker {
        BestEffortWorker { node, job, asked, leaving: false }
    }

    #[test]
    fn a_worker_on_a_free_node_uses_only_its_jobs_pace() {
        // Node 0 leaves its worker half of what it asks; node 1 leaves all of it.
        let nodes = [node(8.0, 6.0), node(8.0, 2.0)];
        let (cpu, pace) = share_cpu(&nodes, &[worker(0, 0, 4.0), worker(1, 0, 4.0)], &[1.0]);
        assert_eq!(pace, vec![0.5]);
        assert_eq!((cpu[0].best_effort_got, cpu[1].best_effort_got), (2.0, 2.0));
        assert_eq!(cpu[1].workers + cpu[1].online_system, 4.0, "the free node's idle CPU stays idle");
    }

    #[test]
    fn online_pods_come_first_and_requested_worker_cpu_is_kept() {
        // Online pods would use 7 of 8 cores, but 2 are requested by a worker.
        let nodes = [NodeCapacity { cores: 8.0, online: 7.0, guaranteed: 2.0, guaranteed_used: 2.0 }];
        let (cpu, pace) = share_cpu(&nodes, &[worker(0, 0, 4.0)], &[1.0, 1.0]);
        assert_eq!(cpu[0], NodeCpu { online_system: 6.0, workers: 2.0, best_effort_asked: 4.0, best_effort_got: 0.0 });
        assert_eq!(pace, vec![0.0, 1.0]);
    }

    #[test]
    fn a_leaving_worker_takes_its_nodes_share_and_sets_no_pace() {
        let nodes = [node(4.0, 3.0), node(4.0, 0.0)];
        let leaving = BestEffortWorker { leaving: true, ..worker(0, 0, 2.0) };
        let (cpu, pace) = share_cpu(&nodes, &[leaving, worker(1, 0, 2.0)], &[1.0]);
        assert_eq!(pace, vec![1.0]);
        assert_eq!((cpu[0].best_effort_got, cpu[1].best_effort_got), (1.0, 2.0));
    }

    #[test]
    fn workers_share_a_squeezed_node_in_proportion_to_what_they_ask() {
        let nodes = [node(6.0, 3.0)];
        let (cpu, pace) = share_cpu(&nodes, &[worker(0, 0, 4.0), worker(0, 1, 2.0)], &[1.0, 1.0]);
        assert_eq!(pace, vec![0.5, 0.5]);
        assert_eq!(cpu[0].best_effort_got, 3.0);
    }

    #[test]
    fn a_paused_job_uses_no_cpu_but_is_still_given_its_share() {
        // Job 0 trains a quarter of the step (a rescale pause ends); a worker of job 1, paused
        // all step, requests 2 CPU and uses none of it.
        let nodes = [NodeCapacity { cores: 8.0, online: 2.0, guaranteed: 2.0, guaranteed_used: 0.0 }];
        let (cpu, pace) = share_cpu(&nodes, &[worker(0, 0, 4.0)], &[0.25, 0.0]);
        assert_eq!(pace, vec![1.0, 1.0]);
        assert_eq!((cpu[0].best_effort_got, cpu[0].workers), (4.0, 1.0));
    }
}
