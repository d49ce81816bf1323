//! The live controller's eyes against a real kube-apiserver (the test bed, or the cluster in
//! COLOCATE_TEST_KUBECONFIG): reflectors fill, the snapshot built from them classifies pods,
//! reads the HPA's status, and the decision core answers an HPA scale-up by releasing the
//! workers on the node where the new replicas will land.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use colocate::core::{Config, Core, PodClass, Reason};
use colocate::live::selector::LabelSelector;
use colocate::live::translate::JobOverrides;
use colocate::live::view::{snapshot, Inputs, JobSource, OnlineService};
use colocate::live::watch::{Caches, WatchStats};
use colocate::master_protocol::Status;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;
use support::cluster::{client, eventually};
use support::testbed::{node_manifest, Testbed};
use tokio::sync::Notify;

fn pod(ns: &str, name: &str, labels: serde_json::Value, node: &str, cpu: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": ns, "name": name, "labels": labels},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "registry.invalid/fake", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
            "tolerations": [{"operator": "Exists"}]
        }
    })
}

fn master_status() -> Status {
    serde_json::from_value(json!({
        "job": "wd", "generation": 1, "phase": "Running",
        "workers": {"current": 4, "target": 4, "min": 1, "max": 8, "pending": 0},
        "worker_resources": {"cpu": "2", "memory": "1Gi"}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflectors_feed_a_snapshot_the_core_acts_on() {
    let bed = tokio::task::spawn_blocking(Testbed::start).await.unwrap();
    let client = client(&bed).await;

    // Two kwok nodes of 4 CPUs. n-a: two 1-CPU nginx replicas and two 1-CPU workers (full).
    // n-b: workers of 1.5 and 1 CPU, 1.5 free. The HPA wants 2 more replicas: one fits in n-b's
    // free room, the other needs the room of one of n-b's workers. The 1.5-CPU one started
    // a second later: the newest, the one kube-scheduler's preemption would take, is released
    // (by name it would be the other).
    for n in ["n-a", "n-b"] {
        bed.kubectl_apply(&node_manifest(n, "4", "16Gi"));
    }
    for ns in ["web", "ml"] {
        bed.kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    let nginx = json!({"app": "nginx"});
    let worker = json!({"colocate.dev/job": "wd", "colocate.dev/role": "worker"});
    bed.kubectl_apply(&pod("web", "nginx-0", nginx.clone(), "n-a", "1"));
    bed.kubectl_apply(&pod("web", "nginx-1", nginx, "n-a", "1"));
    for (name, node, cpu) in [
        ("wd-worker-0", "n-a", "1"),
        ("wd-worker-1", "n-a", "1"),
        ("wd-worker-3", "n-b", "1"),
        ("wd-worker-2", "n-b", "1500m"),
    ] {
        if name == "wd-worker-2" {
            // `status.startTime` has whole seconds: start it in a later one than worker-3's.
            let pods: Api<Pod> = Api::namespaced(client.clone(), "ml");
            eventually(Duration::from_secs(30), "kwok to start wd-worker-3", || {
                let pods = pods.clone();
                async move { pods.get("wd-worker-3").await.ok()?.status?.start_time }
            })
            .await;
            tokio::time::sleep(Duration::from_millis(1_100)).await;
        }
        bed.kubectl_apply(&pod("ml", name, worker.clone(), node, cpu));
    }
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), "web");
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "nginx", "namespace": "web"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"},
            "minReplicas": 1, "maxReplicas": 10,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}}]
        }
    }))
    .unwrap();
    hpas.create(&PostParams::default(), &hpa).await.expect("create HPA");
    // No HPA controller runs here: write the status it would write.
    let status = json!({"status": {"currentReplicas": 2, "desiredReplicas": 4,
        "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 120}}}]}});
    hpas.patch_status("nginx", &PatchParams::default(), &Patch::Merge(&status)).await.expect("patch HPA status");

    let changed = Arc::new(Notify::new());
    let stats = Arc::new(WatchStats::default());
    let (caches, drivers) = Caches::new(client.clone(), changed.clone(), stats.clone(), Default::default());
    let tasks: Vec<_> = drivers.into_iter().map(tokio::spawn).collect();
    tokio::time::timeout(Duration::from_secs(30), caches.wait_until_ready()).await.expect("caches sync").unwrap();

    let services = [OnlineService {
        namespace: "web".into(),
        name: "nginx".into(),
        selector: Some(LabelSelector::parse("app=nginx").unwrap()),
        hpa: Some("nginx".into()),
        slo_p99: None,
        headroom_replicas: 0,
        load: Vec::new(),
        p99: None,
    }];
    let jobs = [JobSource {
        namespace: "ml".into(),
        name: "wd".into(),
        status: Some(master_status()),
        overrides: JobOverrides::default(),
    }];

    // kwok marks the pods Ready shortly; wait until the view shows all of them ready.
    let deadline = Instant::now() + Duration::from_secs(60);
    let snap = loop {
        let hpas = caches.hpas.state();
        let inputs = Inputs {
            now: Duration::from_secs(1_000),
            hpas: &hpas,
            services: &services,
            jobs: &jobs,
            usage: &Default::default(),
        };
        // The state is held for the snapshot only, never across the wait below.
        let (snap, problems) = {
            let mut state = caches.state();
            let (snap, problems) = snapshot(&mut state, &inputs);
            (snap.clone(), problems)
        };
        assert!(problems.is_empty(), "{problems:?}");
        let ready = snap.pods.iter().filter(|p| p.ready).count();
        let hpa_seen = snap.services[0].hpa.as_ref().is_some_and(|h| h.desired_replicas == 4);
        if snap.nodes.len() == 2 && snap.nodes.iter().all(|n| n.schedulable) && ready == 6 && hpa_seen {
            break snap;
        }
        assert!(
            Instant::now() < deadline,
            "view never complete: {} nodes, {ready} ready pods, hpa {:?}",
            snap.nodes.len(),
            snap.services[0].hpa
        );
        let _ = tokio::time::timeout(Duration::from_millis(500), changed.notified()).await;
    };

    let class = |name: &str| snap.pods.iter().find(|p| p.name == name).map(|p| p.class.clone());
    assert_eq!(class("web/nginx-0"), Some(PodClass::Online { service: "web/nginx".into() }));
    assert_eq!(class("ml/wd-worker-3"), Some(PodClass::Worker { job: "ml/wd".into() }));
    assert_eq!(snap.nodes.iter().map(|n| n.allocatable.cpu_milli).sum::<i64>(), 8_000);
    let hpa = snap.services[0].hpa.as_ref().unwrap();
    assert_eq!((hpa.current_replicas, hpa.desired_replicas), (2, 4));

    let decision = Core::new(Config::default()).decide(&snap);
    let intent = decision.intents.iter().find(|i| i.job == "ml/wd").expect("the job shrinks");
    assert_eq!(intent.reason, Reason::OnlineHeadroom, "{}", intent.why);
    assert_eq!((intent.from, intent.target), (4, 3), "{}", intent.why);
    let started = |name: &str| snap.pods.iter().find(|p| p.name == name).and_then(|p| p.started);
    assert!(started("ml/wd-worker-3") < started("ml/wd-worker-2"), "{:?}", snap.pods);
    assert_eq!(intent.release_pods, ["ml/wd-worker-2"], "{}", intent.why);
    assert_eq!(intent.release_nodes, ["n-b"]);
    assert_eq!(stats.restarts.iter().map(|r| r.load(std::sync::atomic::Ordering::Relaxed)).sum::<u64>(), 0);

    for t in tasks {
        t.abort();
    }
}
