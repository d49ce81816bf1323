//! The live controller's decision after one watch event: apply a pod event to the cluster state
//! (`live::state`), complete the snapshot with services, HPAs and jobs (`live::view::snapshot`)
//! and run the core. At 1,000 nodes / 30,000 pods (the scale test's size, `tests/scale.rs`) and
//! 5,000 nodes / 150,000 pods: per node 1 DaemonSet pod, 9 online replicas of 10 services whose
//! HPAs want 10% more, 20 workers of 20 jobs. Also the first list: translating every object once,
//! and at 1,000 nodes in `capacity: usage`: the snapshot with every online and system pod
//! measured, and applying a new usage answer to the state (what the usage sampler does per round).
//!
//! `cargo bench --bench live_state`

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use colocate::core::{Config, Core};
use colocate::live::sampler::usage::{PodUsage, PodUsages};
use colocate::live::selector::LabelSelector;
use colocate::live::state::ClusterState;
use colocate::live::translate::JobOverrides;
use colocate::live::view::{snapshot, Inputs, JobSource, OnlineService};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::watcher::Event;
use serde_json::json;

const SERVICES: usize = 10;
const JOBS: usize = 20;

fn pod(ns: &str, name: &str, node: &str, labels: serde_json::Value, cpu: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"namespace": ns, "name": name, "uid": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c",
            "resources": {"requests": {"cpu": cpu, "memory": "512Mi"}}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("a Pod")
}

fn worker(node: usize, k: usize) -> Pod {
    let j = (node * 20 + k) % JOBS;
    let labels = json!({"colocate.dev/job": format!("job{j}"), "colocate.dev/role": "worker"});
    pod("ml", &format!("job{j}-{node}-{k}"), &format!("node-{node}"), labels, "1")
}

/// What the watches, the service directory and the poller hand to a decision.
struct Cluster {
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    hpas: Vec<Arc<HorizontalPodAutoscaler>>,
    services: Vec<OnlineService>,
    jobs: Vec<JobSource>,
}

fn cluster(nodes: usize) -> Cluster {
    let node_objects = (0..nodes)
        .map(|i| {
            serde_json::from_value(json!({"metadata": {"name": format!("node-{i}")},
                "status": {"allocatable": {"cpu": "30", "memory": "128Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}]}}))
            .expect("a Node")
        })
        .collect();
    let mut pods = Vec::with_capacity(nodes * 30);
    for i in 0..nodes {
        let node = format!("node-{i}");
        pods.push(pod("kube-system", &format!("ds-{i}"), &node, json!({"app": "ds"}), "500m"));
        for k in 0..9 {
            let s = (i * 9 + k) % SERVICES;
            pods.push(pod("web", &format!("svc{s}-{i}-{k}"), &node, json!({"app": format!("svc{s}")}), "1"));
        }
        pods.extend((0..20).map(|k| worker(i, k)));
    }
    let replicas = (nodes * 9 / SERVICES) as i32;
    let hpas = (0..SERVICES)
        .map(|s| {
            Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"namespace": "web", "name": format!("svc{s}")},
                    "spec": {"scaleTargetRef": {"kind": "Deployment", "name": format!("svc{s}")},
                        "minReplicas": 1, "maxReplicas": replicas * 2,
                        "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 60}}}]},
                    "status": {"currentReplicas": replicas, "desiredReplicas": replicas + replicas / 10,
                        "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu",
                            "current": {"averageUtilization": 66}}}]}
                }))
                .expect("an HPA"),
            )
        })
        .collect();
    let services = (0..SERVICES)
        .map(|s| OnlineService {
            namespace: "web".into(),
            name: format!("svc{s}"),
            selector: Some(LabelSelector::parse(&format!("app=svc{s}")).expect("a selector")),
            hpa: Some(format!("svc{s}")),
            slo_p99: Some(Duration::from_millis(250)),
            headroom_replicas: 0,
            load: Vec::new(),
            p99: Some(Duration::from_millis(80)),
        })
        .collect();
    let per_job = nodes * 20 / JOBS;
    let jobs = (0..JOBS)
        .map(|j| {
            let status = json!({"job": format!("job{j}"), "generation": 1, "phase": "Running",
                "workers": {"current": per_job, "target": per_job, "min": 1, "max": per_job * 2, "pending": 0},
                "worker_resources": {"cpu": "1", "memory": "512Mi"}});
            JobSource {
                namespace: "ml".into(),
                name: format!("job{j}"),
                status: Some(serde_json::from_value(status).expect("a Status")),
                // Priority and weight as the jobs' annotations would give them.
                overrides: JobOverrides {
                    priority: Some((j % 3) as i32),
                    weight: Some(1.0 + (j % 4) as f64),
                    ..JobOverrides::default()
                },
            }
        })
        .collect();
    Cluster { nodes: node_objects, pods, hpas, services, jobs }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("live_state");
    group.sample_size(10);
    for nodes in [1_000, 5_000] {
        let Cluster { nodes: node_objects, pods, hpas, services, jobs } = cluster(nodes);
        let inputs = Inputs {
            now: Duration::from_secs(1_000),
            hpas: &hpas,
            services: &services,
            jobs: &jobs,
            usage: &Default::default(),
        };
        let mut state = ClusterState::from_objects(&node_objects, &pods);
        let mut core = Core::new(Config::default());
        {
            let (snap, problems) = snapshot(&mut state, &inputs);
            assert!(problems.is_empty(), "{problems:?}");
            assert_eq!(snap.pods.len(), nodes * 30);
            assert!(!core.decide(snap).intents.is_empty(), "the HPAs' growth makes jobs shrink");
        }
        // One worker moving between two nodes and back: an event that changes the picture.
        let moved = [worker(0, 0), {
            let mut p = worker(0, 0);
            p.spec.as_mut().expect("a spec").node_name = Some("node-1".into());
            p
        }];
        let mut turn = 0;
        group.bench_function(format!("{nodes}_nodes_one_pod_event_and_decide"), |b| {
            b.iter(|| {
                turn += 1;
                state.apply_pod(&Event::Apply(moved[turn % 2].clone()));
                let (snap, _) = snapshot(&mut state, black_box(&inputs));
                black_box(core.decide(snap).intents.len())
            })
        });
        group.bench_function(format!("{nodes}_nodes_one_pod_event_and_snapshot"), |b| {
            b.iter(|| {
                turn += 1;
                state.apply_pod(&Event::Apply(moved[turn % 2].clone()));
                black_box(snapshot(&mut state, black_box(&inputs)).0.pods.len())
            })
        });
        if nodes == 1_000 {
            // `capacity: usage`: every online and system pod measured. A decision finds each
            // round's answers already applied (by the usage sampler's task); applying them is
            // timed on its own, alternating two rounds' answers.
            let answers = |milli: i64| -> Arc<PodUsages> {
                Arc::new(
                    pods.iter()
                        .filter(|p| p.metadata.namespace.as_deref() != Some("ml"))
                        .map(|p| {
                            let (ns, name) = (p.metadata.namespace.as_deref(), p.metadata.name.as_deref());
                            let key = format!("{}/{}", ns.unwrap_or(""), name.unwrap_or(""));
                            (key.into(), PodUsage { cpu_millicores: Some(milli), memory_bytes: Some(300 << 20) })
                        })
                        .collect(),
                )
            };
            let rounds = [answers(600), answers(610)];
            state.set_usage(&rounds[0]);
            let measured = Inputs { usage: &rounds[0], ..inputs };
            group.bench_function(format!("{nodes}_nodes_usage_one_pod_event_and_snapshot"), |b| {
                b.iter(|| {
                    turn += 1;
                    state.apply_pod(&Event::Apply(moved[turn % 2].clone()));
                    black_box(snapshot(&mut state, black_box(&measured)).0.pods.len())
                })
            });
            group.bench_function(format!("{nodes}_nodes_usage_new_answers_applied"), |b| {
                b.iter(|| {
                    turn += 1;
                    state.set_usage(black_box(&rounds[turn % 2]));
                })
            });
            group.bench_function(format!("{nodes}_nodes_first_list"), |b| {
                b.iter_batched(
                    || (),
                    |()| black_box(ClusterState::from_objects(&node_objects, &pods).pod_count()),
                    BatchSize::PerIteration,
                )
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
