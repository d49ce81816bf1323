//! What pods use of their nodes, for `avg_cpu_usage` and for BestEffort workers
//! (`colocate-usage`): an online replica uses its CPU request times its service's utilization
//! (the HPA's metric), a system pod what it requests, a worker what `cpu_share` gives it:
//! workers with `cpu` requests get them (the kernel's shares guarantee a request), BestEffort
//! workers only what the node's other pods leave (cpu.shares 2 against 1024 per requested CPU:
//! in effect, strict priority), a synchronous job trains at the pace of its slowest worker, and
//! a paused job's workers use none of it. Memory is used as requested; where online pods and
//! BestEffort workers together need more than a node has, the kubelet evicts BestEffort
//! workers, newest first.

use super::cluster::PodKind;
use super::cpu_share::{share_cpu, BestEffortWorker, NodeCapacity, NodeCpu};
use super::engine::World;
use super::service::utilization;

impl World<'_> {
    /// Per node, the CPU its pods use over the step of `dt` seconds from now; per job, the pace
    /// its workers train at.
    pub(super) fn cpu_use(&self, dt: f64) -> (Vec<NodeCpu>, Vec<f64>) {
        let training: Vec<f64> = self.jobs.iter().map(|j| j.training_fraction(self.now, dt)).collect();
        let spec = &self.scenario.spec;
        let per_replica: Vec<f64> = (0..spec.services.len())
            .map(|s| {
                let (_, ready) = self.replica_counts(s);
                utilization(&spec.services[s], self.services[s].load, ready)
            })
            .collect();
        let mut online = vec![0.0; self.cluster.nodes.len()];
        let mut guaranteed = vec![0.0; self.cluster.nodes.len()];
        let mut guaranteed_used = vec![0.0; self.cluster.nodes.len()];
        for p in self.cluster.pods.values() {
            let Some(n) = p.node else { continue };
            match p.kind {
                PodKind::System => online[n] += p.requests.cpu_cores(),
                PodKind::Online { service } if p.is_ready(self.now) => {
                    online[n] += per_replica[service] * p.requests.cpu_cores();
                }
                PodKind::Online { .. } => {}
                PodKind::Worker { job } => {
                    guaranteed[n] += p.requests.cpu_cores();
                    guaranteed_used[n] += p.requests.cpu_cores() * training[job];
                }
            }
        }
        let capacity: Vec<NodeCapacity> = self
            .cluster
            .nodes
            .iter()
            .enumerate()
            .map(|(n, node)| NodeCapacity {
                cores: node.allocatable.cpu_cores(),
                online: online[n],
                guaranteed: guaranteed[n],
                guaranteed_used: guaranteed_used[n],
            })
            .collect();
        let workers: Vec<BestEffortWorker> = self
            .cluster
            .pods
            .values()
            .filter_map(|p| match (p.kind, p.node) {
                (PodKind::Worker { job }, Some(node)) if !p.batch.is_zero() => {
                    Some(BestEffortWorker { node, job, asked: p.batch.cpu_cores(), leaving: p.leaving_at.is_some() })
                }
                _ => None,
            })
            .collect();
        share_cpu(&capacity, &workers, &training)
    }

    /// The kubelet's memory eviction: on a node whose pods need more memory than it has,
    /// BestEffort workers go, newest first, until the rest fit. Their jobs roll back to their
    /// last checkpoint and want the workers back (their controller recreates them).
    pub(super) fn evict_for_memory(&mut self) {
        let mut need = vec![0_i64; self.cluster.nodes.len()];
        for p in self.cluster.pods.values() {
            if let Some(n) = p.node {
                need[n] += p.requests.memory_bytes + p.batch.memory_bytes;
            }
        }
        for (n, used) in need.into_iter().enumerate() {
            let mut over = used - self.cluster.nodes[n].allocatable.memory_bytes;
            if over <= 0 {
                continue;
            }
            let mut best_effort: Vec<(f64, u64, usize, i64)> = self
                .cluster
                .pods
                .iter()
                .filter_map(|(id, p)| match (p.kind, p.node) {
                    (PodKind::Worker { job }, Some(m)) if m == n && p.batch.memory_bytes > 0 => {
                        Some((p.ready_at.unwrap_or(p.created_at), *id, job, p.batch.memory_bytes))
                    }
                    _ => None,
                })
                .collect();
            best_effort.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
            let mut hit = Vec::new();
            for (_, id, job, memory) in best_effort {
                if over <= 0 {
                    break;
                }
                self.cluster.delete(id, self.now, 0.0);
                self.batch_evictions += 1;
                over -= memory;
                if !hit.contains(&job) {
                    hit.push(job);
                }
            }
            for j in hit {
                let job = &mut self.jobs[j];
                job.roll_back(self.now);
                let target = job.target;
                job.create_workers(&mut self.cluster, j, target, self.now);
            }
        }
    }
}
