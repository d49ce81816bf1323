//! The simulated cluster as the decision core sees it: the same Snapshot the live controller
//! builds from its watches. A method of [`World`] defined here, so that the engine calls it
//! without depending on this file.

use std::time::Duration;

use super::cluster::PodKind;
use super::engine::{UsageSample, World};
use super::job_model::SimJob;
use super::policy::Policy;
use super::usage_scrapes::usage_scraped;
use crate::core::{Hpa, HpaMetric, Job, Latency, Node, Pod, PodClass, Resources, Service, SharedName, Snapshot};

impl World<'_> {
    /// What `colocate` sees now (see the module's doc).
    pub(super) fn snapshot(&self) -> Snapshot {
        build_snapshot(self)
    }
}

fn build_snapshot(world: &World) -> Snapshot {
    let spec = &world.scenario.spec;
    let now = world.now;
    let usage_mode = world.policy == Policy::ColocateUsage;
    let usage_scrape = spec.observation.usage_scrape_interval;
    let usage_phase = world.usage_scrape_phase();
    let nodes = world
        .cluster
        .nodes
        .iter()
        .map(|n| Node {
            name: n.name.clone(),
            allocatable: n.allocatable,
            schedulable: true,
            batch: usage_mode.then_some(n.batch_capacity),
        })
        .collect();
    // Usage as sampled: a ready replica's CPU at its share of its service's load (a load
    // balancer's, even) over the last complete usage scrape; memory as requested. A replica
    // starting, one not scraped twice yet, or a service not sampled yet, has no usage (the core
    // counts an autoscaled replica at its HPA's target, any other pod at its request).
    let sampled: Vec<Option<UsageSample>> =
        world.services.iter().map(|s| s.usage_sample.filter(|_| usage_mode)).collect();
    let live: Vec<bool> = world.jobs.iter().map(SimJob::is_live).collect();
    // One shared copy of each name for all the pods that refer to it (core::SharedName).
    let node_names: Vec<SharedName> = world.cluster.nodes.iter().map(|n| n.name.as_str().into()).collect();
    let service_names: Vec<SharedName> = spec.services.iter().map(|s| s.name.as_str().into()).collect();
    let job_names: Vec<SharedName> = world.jobs.iter().map(|j| j.spec.name.as_str().into()).collect();
    let pods = world
        .cluster
        .pods
        .values()
        .map(|p| {
            let class = match p.kind {
                PodKind::System => PodClass::System,
                PodKind::Online { service } => PodClass::Online { service: service_names[service].clone() },
                PodKind::Worker { job } => PodClass::Worker { job: job_names[job].clone() },
            };
            let usage = match p.kind {
                _ if !usage_mode || p.node.is_none() => None,
                PodKind::System => Some(p.requests),
                PodKind::Online { service } if p.is_ready(now) => sampled[service]
                    .filter(|u| p.ready_at.is_some_and(|r| usage_scraped(r, u.at, usage_phase, usage_scrape)))
                    .map(|u| Resources {
                        cpu_milli: (u.utilization * p.requests.cpu_milli as f64).ceil() as i64,
                        ..p.requests
                    }),
                _ => None,
            };
            Pod {
                name: p.name.clone(),
                class,
                node: p.node.map(|n| node_names[n].clone()),
                // A BestEffort worker holds its batch request (and its GPUs).
                requests: p.requests + p.batch,
                ready: p.is_ready(now),
                terminating_until: p.leaving_at.map(Duration::from_secs_f64),
                preempted: p.preempted,
                // As kube-scheduler's preemption ranks it, whole wall-clock seconds.
                started: p.node.map(|_| Duration::from_secs(world.cluster.started_s(p).max(0).unsigned_abs())),
                usage,
            }
        })
        .collect();
    let services = spec
        .services
        .iter()
        .enumerate()
        .map(|(s, svc)| {
            let state = &world.services[s];
            let (replicas, _) = world.replica_counts(s);
            Service {
                name: svc.name.clone(),
                replica: svc.replica.resources(),
                hpa: Some(Hpa {
                    min_replicas: svc.hpa.min_replicas,
                    max_replicas: svc.hpa.max_replicas,
                    // What the HPA's status says as of its last sync.
                    current_replicas: if state.hpa.observed_replicas > 0 {
                        state.hpa.observed_replicas
                    } else {
                        replicas
                    },
                    desired_replicas: state.hpa.desired,
                    metric: state.hpa.observed.map(|current| HpaMetric { current, target: svc.hpa.target_utilization }),
                }),
                headroom_replicas: svc.headroom_replicas,
                load: state.samples.iter().copied().collect(),
                // A window played without a latency query gives the service no latency block,
                // as the live controller builds none without one: its guard neither holds growth
                // nor shrinks.
                latency: world.window.as_ref().is_none_or(|w| w.latency_signal).then(|| Latency {
                    p99: state.p99_sample.map(Duration::from_secs_f64),
                    slo_p99: svc.latency.slo_p99,
                }),
            }
        })
        .collect();
    let jobs = world
        .jobs
        .iter()
        .enumerate()
        .filter(|(j, _)| live[*j])
        .map(|(j, job)| {
            // The phase as of the master's last status poll.
            let report = world.reported[j];
            Job {
                name: job.spec.name.clone(),
                priority: job.spec.priority,
                weight: job.spec.weight,
                worker: job.spec.worker.resources(),
                min_workers: job.spec.min_workers,
                max_workers: job.spec.max_workers,
                target_workers: job.target,
                rescaling: report.rescaling,
                rescale_cost: job.spec.rescale_cost,
                release_latency: spec.release_time(j),
                work: report.work,
            }
        })
        .collect();
    Snapshot { now: Duration::from_secs_f64(now), nodes, pods, services, jobs }
}
