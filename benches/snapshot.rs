//! Turning the watched Kubernetes objects into the core's snapshot (`live::view::snapshot`), the
//! part of a live decision that grows with the pod count: 1,000 nodes and 30,000 pods (per node
//! 1 DaemonSet pod, 9 online replicas of 10 services, 20 workers of 20 jobs), as the scale test
//! runs (`docs/scale.md`, where this step took 46-69 ms of a 100 ms decision).
//!
//! `cargo bench --bench snapshot`

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use colocate::live::selector::LabelSelector;
use colocate::live::translate::JobOverrides;
use colocate::live::view::{snapshot, Inputs, JobSource, OnlineService};
use criterion::{criterion_group, criterion_main, Criterion};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;

const NODES: usize = 1_000;
const SERVICES: usize = 10;
const JOBS: usize = 20;

fn pod(ns: &str, name: &str, node: &str, labels: serde_json::Value, cpu: &str) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": name, "uid": name, "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c",
                "resources": {"requests": {"cpu": cpu, "memory": "512Mi"}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("a Pod"),
    )
}

/// What the reflectors, the service directory and the poller hand to `snapshot`.
struct Cluster {
    nodes: Vec<Arc<Node>>,
    pods: Vec<Arc<Pod>>,
    services: Vec<OnlineService>,
    jobs: Vec<JobSource>,
}

fn cluster() -> Cluster {
    let nodes = (0..NODES)
        .map(|i| {
            let node = json!({"metadata": {"name": format!("node-{i}")},
                "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}}});
            Arc::new(serde_json::from_value(node).expect("a Node"))
        })
        .collect();
    let mut pods = Vec::with_capacity(NODES * 30);
    for i in 0..NODES {
        let node = format!("node-{i}");
        pods.push(pod("kube-system", &format!("ds-{i}"), &node, json!({"app": "ds"}), "500m"));
        for k in 0..9 {
            let s = (i * 9 + k) % SERVICES;
            pods.push(pod("web", &format!("svc{s}-{i}-{k}"), &node, json!({"app": format!("svc{s}")}), "1"));
        }
        for k in 0..20 {
            let j = (i * 20 + k) % JOBS;
            let labels = json!({"colocate.dev/job": format!("job{j}"), "colocate.dev/role": "worker"});
            pods.push(pod("ml", &format!("job{j}-{i}-{k}"), &node, labels, "1"));
        }
    }
    let services = (0..SERVICES)
        .map(|s| OnlineService {
            namespace: "web".into(),
            name: format!("svc{s}"),
            selector: Some(LabelSelector::parse(&format!("app=svc{s}")).expect("a selector")),
            hpa: None,
            slo_p99: None,
            load: Vec::new(),
            p99: None,
        })
        .collect();
    let jobs = (0..JOBS)
        .map(|j| {
            let status = json!({"job": format!("job{j}"), "generation": 1, "phase": "Running",
                "workers": {"current": 1000, "target": 1000, "min": 1, "max": 2000, "pending": 0},
                "worker_resources": {"cpu": "1", "memory": "512Mi"}});
            JobSource {
                namespace: "ml".into(),
                name: format!("job{j}"),
                status: Some(serde_json::from_value(status).expect("a Status")),
                overrides: JobOverrides::default(),
                priority: 0,
                weight: 1.0,
            }
        })
        .collect();
    Cluster { nodes, pods, services, jobs }
}

fn bench(c: &mut Criterion) {
    let Cluster { nodes, pods, services, jobs } = cluster();
    let inputs =
        Inputs { now: Duration::ZERO, nodes: &nodes, pods: &pods, hpas: &[], services: &services, jobs: &jobs };
    let (snap, problems) = snapshot(&inputs);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(snap.pods.len(), NODES * 30);
    let mut group = c.benchmark_group("snapshot");
    group.sample_size(20);
    group.bench_function("1000 nodes, 30000 pods", |b| b.iter(|| black_box(snapshot(black_box(&inputs)))));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
