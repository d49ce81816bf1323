//! What a replay measures: each step's allocation, latency and pods (a timeline row), summed
//! into the policy's result at the end.

use super::cluster::PodKind;
use super::engine::{Accumulator, World};
use super::policy::Policy;
use super::report::{JobFigures, JobResult, PolicyResult, TimelineRow};
use super::service::{p99_seconds, utilization};

impl World<'_> {
    /// Latency, training and metrics for the step [now, now + dt).
    pub(super) fn account(&mut self, dt: f64, acc: &mut Accumulator) -> TimelineRow {
        let spec = &self.scenario.spec;
        let mut row = TimelineRow {
            t: self.now,
            allocation: 0.0,
            gpu_allocation: 0.0,
            cpu_usage: 0.0,
            system_cpu: 0.0,
            online_cpu: 0.0,
            training_cpu: 0.0,
            training_gpu: 0,
            pending_online_pods: 0,
            pending_workers: 0,
            killed_by_scheduler: self.scheduler_preemptions,
            victims_leaving: self.scheduler_victims_leaving,
            killed_young: self.scheduler_kills_young,
            slo_violated: false,
            services: Vec::with_capacity(spec.services.len()),
            workers: Vec::with_capacity(self.jobs.len()),
        };
        let mut gpus = 0;
        // CPU requested of the scheduler; BestEffort workers' batch requests are not.
        let mut batch_cpu = 0.0;
        for p in self.cluster.pods.values() {
            if p.node.is_some() {
                gpus += p.requests.gpu;
            }
            let cpu = p.requests.cpu_cores();
            match (p.kind, p.node) {
                (PodKind::System, Some(_)) => row.system_cpu += cpu,
                (PodKind::Online { .. }, Some(_)) => row.online_cpu += cpu,
                (PodKind::Worker { .. }, Some(_)) => {
                    row.training_cpu += cpu + p.batch.cpu_cores();
                    batch_cpu += p.batch.cpu_cores();
                    row.training_gpu += p.requests.gpu.max(0) as u64;
                }
                (PodKind::Online { .. }, None) if p.leaving_at.is_none() => row.pending_online_pods += 1,
                (PodKind::Worker { .. }, None) if p.leaving_at.is_none() => row.pending_workers += 1,
                _ => {}
            }
        }
        let allocatable = self.cluster.allocatable();
        row.allocation = (row.system_cpu + row.online_cpu + row.training_cpu - batch_cpu) / allocatable.cpu_cores();
        let (nodes, pace) = self.cpu_use(dt);
        let used: f64 = nodes.iter().map(|n| n.online_system + n.workers).sum();
        row.cpu_usage = used / allocatable.cpu_cores();
        acc.best_effort_asked += nodes.iter().map(|n| n.best_effort_asked).sum::<f64>() * dt;
        acc.best_effort_got += nodes.iter().map(|n| n.best_effort_got).sum::<f64>() * dt;
        if allocatable.gpu > 0 {
            row.gpu_allocation = gpus as f64 / allocatable.gpu as f64;
        }
        for (s, svc) in spec.services.iter().enumerate() {
            let (replicas, ready) = self.replica_counts(s);
            let load = self.services[s].load;
            let p99 = p99_seconds(svc, utilization(svc, load, ready));
            if p99 > svc.latency.slo_p99.as_secs_f64() {
                row.slo_violated = true;
            }
            row.services.push((load, replicas, ready, p99 * 1000.0));
            let keep = spec.controller.latency_window.as_secs_f64() + spec.observation.scrape_interval.as_secs_f64();
            self.services[s].served.record(self.now, load * dt, p99, keep);
        }
        for (job, pace) in self.jobs.iter_mut().zip(pace) {
            job.train(self.now, dt, pace);
            row.workers.push(job.active_workers());
        }
        acc.time += dt;
        acc.allocation += row.allocation * dt;
        acc.cpu_usage += row.cpu_usage * dt;
        acc.gpu_allocation += row.gpu_allocation * dt;
        if row.allocation + 1e-9 >= spec.controller.target_utilization {
            acc.above_target += dt;
        }
        if row.slo_violated {
            acc.slo_violation += dt;
        }
        acc.pending_online += row.pending_online_pods as f64 * dt;
        row
    }

    pub(super) fn result(&self, acc: &Accumulator) -> PolicyResult {
        let spec = &self.scenario.spec;
        let end = spec.duration.as_secs_f64();
        let jobs: Vec<JobResult> = if self.policy == Policy::OnlineOnly {
            Vec::new()
        } else {
            self.jobs
                .iter()
                .map(|j| {
                    let from = j.spec.arrival.as_secs_f64().min(end);
                    let until = j.completed_at.unwrap_or(end);
                    let span = until - from;
                    JobResult {
                        name: j.spec.name.clone(),
                        arrival_s: j.spec.arrival.as_secs_f64(),
                        started_at_s: j.started_at,
                        completed_at_s: j.completed_at,
                        avg_workers: if span > 0.0 { j.worker_seconds / span } else { 0.0 },
                    }
                })
                .collect()
        };
        let makespan = if jobs.is_empty() || jobs.iter().any(|j| j.completed_at_s.is_none()) {
            None
        } else {
            jobs.iter().filter_map(|j| j.completed_at_s).reduce(f64::max)
        };
        let time = acc.time.max(1e-9);
        let with_work: Vec<(&JobResult, bool)> =
            jobs.iter().zip(&self.jobs).map(|(r, j)| (r, j.spec.work.is_some())).collect();
        let figures = JobFigures::of(&with_work, end);
        let has_gpus = self.cluster.allocatable().gpu > 0;
        PolicyResult {
            policy: self.policy.as_str().to_string(),
            avg_cpu_allocation: acc.allocation / time,
            avg_cpu_usage: acc.cpu_usage / time,
            worker_cpu_received: (acc.best_effort_asked > 0.0).then(|| acc.best_effort_got / acc.best_effort_asked),
            batch_evictions: self.batch_evictions,
            time_above_target: acc.above_target / time,
            slo_violation_s: acc.slo_violation,
            pending_online_pod_s: acc.pending_online,
            forced_preemptions: self.scheduler_preemptions + self.batch_evictions,
            scheduler_preemptions: self.scheduler_preemptions,
            // See `schedule`: replay's masters honour every shrink at once.
            controller_forced_preemptions: 0,
            rescale_events: self.jobs.iter().map(|j| u64::from(j.rescale_events)).sum(),
            // Samples kept: work lost to rollbacks does not count.
            training_samples: self.jobs.iter().map(|j| j.progress).sum(),
            makespan_s: makespan,
            avg_jct_s: figures.avg_jct_s,
            p50_jct_s: figures.p50_jct_s,
            p95_jct_s: figures.p95_jct_s,
            unfinished_jobs: figures.unfinished_jobs,
            avg_jct_censored_s: figures.avg_jct_censored_s,
            p95_jct_censored_s: figures.p95_jct_censored_s,
            avg_queueing_s: figures.avg_queueing_s,
            p95_queueing_s: figures.p95_queueing_s,
            avg_gpu_allocation: has_gpus.then(|| acc.gpu_allocation / time),
            jobs,
        }
    }
}
