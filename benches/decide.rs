//! One decision of the core over a synthetic cluster: 100, 1,000 and 5,000 nodes with 30 pods
//! per node (1 system, 9 online, 20 training workers) and 20 jobs, while 10 services' HPAs want
//! 10% more replicas (so reservations, shrinks and per-node packing all run).
//!
//! The same in `capacity: usage`: online and system pods measured at 60% of their CPU request
//! and 80% of their memory, workers BestEffort (their requests are batch resources the
//! scheduler does not count as CPU), nodes carrying a batch capacity.
//!
//! `cargo bench --bench decide`

use std::hint::black_box;
use std::time::Duration;

use colocate::core::config::CapacityMode;
use colocate::core::{
    Config, Core, Hpa, HpaMetric, Job, Latency, Node, Pod, PodClass, Resources, Service, SharedName, Snapshot,
};
use colocate::telemetry::metrics::Metrics;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

const SERVICES: usize = 10;
const JOBS: usize = 20;

fn synthetic(nodes: usize) -> Snapshot {
    let gib = 1i64 << 30;
    let node_list: Vec<Node> = (0..nodes)
        .map(|i| Node {
            name: format!("node-{i}"),
            allocatable: Resources::new(32_000, 128 * gib, 0),
            schedulable: true,
            batch: None,
        })
        .collect();
    let mut pods = Vec::with_capacity(nodes * 30);
    let mut online_per_service = [0u32; SERVICES];
    let mut workers_per_job = [0u32; JOBS];
    for (i, node) in node_list.iter().enumerate() {
        let on: Option<SharedName> = Some(node.name.as_str().into());
        pods.push(Pod {
            name: format!("ds-{i}"),
            class: PodClass::System,
            node: on.clone(),
            requests: Resources::new(500, gib, 0),
            ready: true,
            terminating_until: None,
            preempted: false,
            started: None,
            usage: None,
        });
        for k in 0..9 {
            let s = (i * 9 + k) % SERVICES;
            online_per_service[s] += 1;
            pods.push(Pod {
                name: format!("svc-{s}-{i}-{k}"),
                class: PodClass::Online { service: format!("svc-{s}").into() },
                node: on.clone(),
                requests: Resources::new(1_000, gib / 2, 0),
                ready: true,
                terminating_until: None,
                preempted: false,
                started: None,
                usage: None,
            });
        }
        for k in 0..20 {
            let j = (i * 20 + k) % JOBS;
            workers_per_job[j] += 1;
            pods.push(Pod {
                name: format!("job-{j}-worker-{i}-{k}"),
                class: PodClass::Worker { job: format!("job-{j}").into() },
                node: on.clone(),
                requests: Resources::new(1_000, 2 * gib, 0),
                ready: true,
                terminating_until: None,
                preempted: false,
                started: None,
                usage: None,
            });
        }
    }
    let services = (0..SERVICES)
        .map(|s| {
            let current = online_per_service[s];
            Service {
                name: format!("svc-{s}"),
                replica: Resources::new(1_000, gib / 2, 0),
                hpa: Some(Hpa {
                    min_replicas: 1,
                    max_replicas: current * 2,
                    current_replicas: current,
                    desired_replicas: current + current / 10,
                    metric: Some(HpaMetric { current: 0.66, target: 0.6 }),
                }),
                load: Vec::new(),
                latency: Some(Latency { p99: Some(Duration::from_millis(80)), slo_p99: Duration::from_millis(250) }),
                headroom_replicas: 0,
            }
        })
        .collect();
    let jobs = (0..JOBS)
        .map(|j| Job {
            name: format!("job-{j}"),
            priority: (j % 3) as i32,
            weight: 1.0 + (j % 4) as f64,
            worker: Resources::new(1_000, 2 * gib, 0),
            min_workers: 1,
            max_workers: workers_per_job[j] * 2,
            target_workers: workers_per_job[j],
            rescaling: false,
            rescale_cost: Duration::from_secs(10),
            release_latency: Duration::from_secs(30),
            work: None,
        })
        .collect();
    Snapshot { now: Duration::from_secs(1_000), nodes: node_list, pods, services, jobs }
}

/// `synthetic` as usage mode sees it.
fn measured(mut snap: Snapshot) -> Snapshot {
    for p in &mut snap.pods {
        if !matches!(p.class, PodClass::Worker { .. }) {
            let r = p.requests;
            p.usage = Some(Resources::new(r.cpu_milli * 6 / 10, r.memory_bytes * 8 / 10, 0));
        }
    }
    for n in &mut snap.nodes {
        n.batch = Some(Resources::new(n.allocatable.cpu_milli / 2, n.allocatable.memory_bytes / 2, 0));
    }
    snap
}

fn decide(c: &mut Criterion) {
    let mut group = c.benchmark_group("decide");
    group.sample_size(10);
    for nodes in [100, 1_000, 5_000] {
        let snap = synthetic(nodes);
        group.bench_function(format!("{nodes}_nodes_30_pods_per_node_20_jobs"), |b| {
            b.iter_batched(
                || Core::new(Config::default()),
                |mut core| black_box(core.decide(black_box(&snap))),
                BatchSize::SmallInput,
            )
        });
    }
    let usage = Config { capacity: CapacityMode::Usage, ..Config::default() };
    for nodes in [100, 1_000] {
        let snap = measured(synthetic(nodes));
        group.bench_function(format!("usage_mode_{nodes}_nodes_30_pods_per_node_20_jobs"), |b| {
            b.iter_batched(
                || Core::new(usage.clone()),
                |mut core| black_box(core.decide(black_box(&snap))),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

/// What the controller's metrics take to record one decision (`Metrics::observe_decision`),
/// which the decision loop does before it acts on the decision.
fn record(c: &mut Criterion) {
    let mut group = c.benchmark_group("metrics");
    group.sample_size(10);
    let usage = Config { capacity: CapacityMode::Usage, ..Config::default() };
    for (mode, config, snap) in
        [("requests", Config::default(), synthetic(1_000)), ("usage", usage, measured(synthetic(1_000)))]
    {
        let decision = Core::new(config).decide(&snap);
        let metrics = Metrics::new();
        metrics.observe_decision(&decision, &snap, Duration::from_millis(1));
        group.bench_function(format!("observe_decision_{mode}_mode_1000_nodes"), |b| {
            b.iter(|| black_box(metrics.observe_decision(black_box(&decision), &snap, Duration::from_millis(1))))
        });
    }
    group.finish();
}

criterion_group!(benches, decide, record);
criterion_main!(benches);
