//! What pods use of their nodes, for `avg_cpu_usage` and for BestEffort workers
//! (`colocate-usage`): an online replica uses its CPU request times its service's utilization
//! (the HPA's metric), a system pod what it requests, a worker all the CPU it asks for.
//! Workers with `cpu` requests get them (the kernel's shares guarantee a request); BestEffort
//! workers get only what the node's other pods leave (cpu.shares 2 against 1024 per requested
//! CPU: in effect, strict priority), and a synchronous job trains at the pace of its slowest
//! worker. Memory is used as requested; where online pods and BestEffort workers together need
//! more than a node has, the kubelet evicts BestEffort workers, newest first.

use super::cluster::PodKind;
use super::engine::World;
use super::service::utilization;

/// CPU on one node over a step, in cores.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeCpu {
    /// Online and system pods' use (what the node can serve of it).
    pub online_system: f64,
    /// Workers' use: their requests, and what BestEffort workers get.
    pub workers: f64,
    /// What BestEffort workers ask for and what they get.
    pub best_effort_asked: f64,
    pub best_effort_got: f64,
}

impl NodeCpu {
    /// The fraction of what they ask for that BestEffort workers here get.
    fn best_effort_share(&self) -> f64 {
        if self.best_effort_asked > 0.0 {
            self.best_effort_got / self.best_effort_asked
        } else {
            1.0
        }
    }
}

impl World<'_> {
    /// Per node, the CPU its pods use now; per job, the pace its workers train at.
    pub(super) fn cpu_use(&self) -> (Vec<NodeCpu>, Vec<f64>) {
        let spec = &self.scenario.spec;
        let per_replica: Vec<f64> = (0..spec.services.len())
            .map(|s| {
                let (_, ready) = self.replica_counts(s);
                utilization(&spec.services[s], self.services[s].load, ready)
            })
            .collect();
        let mut online = vec![0.0; self.cluster.nodes.len()];
        let mut guaranteed = vec![0.0; self.cluster.nodes.len()];
        let mut asked = vec![0.0; self.cluster.nodes.len()];
        for p in self.cluster.pods.values() {
            let Some(n) = p.node else { continue };
            match p.kind {
                PodKind::System => online[n] += p.requests.cpu_cores(),
                PodKind::Online { service } if p.is_ready(self.now) => {
                    online[n] += per_replica[service] * p.requests.cpu_cores();
                }
                PodKind::Online { .. } => {}
                PodKind::Worker { .. } => {
                    guaranteed[n] += p.requests.cpu_cores();
                    asked[n] += p.batch.cpu_cores();
                }
            }
        }
        let nodes: Vec<NodeCpu> = self
            .cluster
            .nodes
            .iter()
            .enumerate()
            .map(|(n, node)| {
                let cores = node.allocatable.cpu_cores();
                // Requests are guaranteed: online pods beyond theirs take only what is idle.
                let online_system = online[n].min((cores - guaranteed[n]).max(0.0));
                let left = (cores - online_system - guaranteed[n]).max(0.0);
                let got = asked[n].min(left);
                NodeCpu {
                    online_system,
                    workers: guaranteed[n] + got,
                    best_effort_asked: asked[n],
                    best_effort_got: got,
                }
            })
            .collect();
        let mut pace = vec![1.0_f64; self.jobs.len()];
        for p in self.cluster.pods.values() {
            if let (PodKind::Worker { job }, Some(n), None) = (p.kind, p.node, p.leaving_at) {
                if !p.batch.is_zero() {
                    pace[job] = pace[job].min(nodes[n].best_effort_share());
                }
            }
        }
        (nodes, pace)
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
