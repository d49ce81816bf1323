//! colocate counts a node's room as kube-scheduler does, on the real scheduler of the test bed
//! (v1.34): native sidecars run beside the containers and add to what an init container after
//! them needs, pod-level requests (PodLevelResources, on by default in 1.34) replace the
//! containers', and a container resized down holds what its status reports until the kubelet
//! reports the decrease. Were colocate to count less, it would hand online pods room that the
//! scheduler does not see: they would wait, or preempt workers, while colocate believed they
//! fit.
//!
//! The check asks the scheduler itself: a pod asking exactly the room colocate sees binds, and
//! one asking a millicore more stays Unschedulable.

mod support;

use std::time::Duration;

use colocate::core::Resources;
use colocate::live::view::{snapshot, Inputs};
use colocate::live::watch::{Caches, WatchStats};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use support::cluster::{client, eventually};
use support::testbed::{node_manifest, Testbed};
use tokio::sync::Notify;

const NODE: &str = "n-room";

fn pod(name: &str, spec: Value) -> Pod {
    let mut spec = spec;
    spec["tolerations"] = json!([{"operator": "Exists"}]);
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "default", "name": name},
        "spec": spec
    }))
    .expect("a pod")
}

fn container(name: &str, cpu: &str) -> Value {
    json!({"name": name, "image": "registry.invalid/fake", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}})
}

/// A pod of one container asking `cpu`, for the scheduler to place.
fn probe(name: &str, cpu_milli: i64) -> Pod {
    pod(name, json!({"containers": [container("c", &format!("{cpu_milli}m"))]}))
}

async fn node_of(pods: &Api<Pod>, name: &str) -> Option<String> {
    pods.get(name).await.ok()?.spec?.node_name
}

/// The scheduler's verdict that `name` fits no node (condition PodScheduled, reason
/// Unschedulable).
async fn unschedulable(pods: &Api<Pod>, name: &str) -> Option<()> {
    let conditions = pods.get(name).await.ok()?.status?.conditions?;
    conditions
        .iter()
        .any(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
        .then_some(())
}

/// The node's allocatable less the requests of the pods colocate's view has bound to it, once
/// the view has seen `marker` (created last: the watch delivers changes in order, so the view
/// has every earlier one too).
fn free_room(caches: &Caches, marker: &str) -> Option<Resources> {
    let hpas = caches.hpas.state();
    let inputs =
        Inputs { now: Duration::from_secs(1_000), hpas: &hpas, services: &[], jobs: &[], usage: &Default::default() };
    let mut state = caches.state();
    let (snap, problems) = snapshot(&mut state, &inputs);
    assert!(problems.is_empty(), "{problems:?}");
    snap.pods.iter().find(|p| p.name == format!("default/{marker}"))?;
    let node = snap.nodes.iter().find(|n| n.name == NODE)?;
    let held: Resources = snap.pods.iter().filter(|p| p.node.as_deref() == Some(NODE)).map(|p| p.requests).sum();
    Some(node.allocatable - held)
}

/// Writes the container status a kubelet reports for a running container of `cpu` requests
/// (the test bed's fast kwok stage reports none, and the API server refuses a resize without).
async fn report_resources(pods: &Api<Pod>, name: &str, cpu: &str) {
    let status = json!({"status": {"containerStatuses": [{
        "name": "main", "image": "registry.invalid/fake", "imageID": "", "ready": true, "restartCount": 0,
        "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}},
        "allocatedResources": {"cpu": cpu, "memory": "1Gi"}
    }]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("patch container status");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colocate_counts_a_nodes_room_as_kube_scheduler_does() {
    let bed = tokio::task::spawn_blocking(Testbed::start).await.unwrap();
    let client = client(&bed).await;
    bed.kubectl_apply(&node_manifest(NODE, "10", "32Gi"));
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let changed = std::sync::Arc::new(Notify::new());
    let (caches, drivers) =
        Caches::new(client.clone(), changed, std::sync::Arc::new(WatchStats::default()), Default::default());
    let tasks: Vec<_> = drivers.into_iter().map(tokio::spawn).collect();
    tokio::time::timeout(Duration::from_secs(30), caches.wait_until_ready()).await.expect("caches sync").unwrap();

    // Pod-level requests: 2 CPUs for the pod, 500m in its container. kube-scheduler counts 2.
    let pod_level =
        pod("pod-level", json!({"resources": {"requests": {"cpu": "2"}}, "containers": [container("main", "500m")]}));
    // A sidecar of 1 CPU beside a 500m container (1.5), and a 2-CPU init container started after
    // the sidecar (3 while it runs): kube-scheduler counts 3. As plain init containers, 2.
    let mut sidecar_container = container("proxy", "1");
    sidecar_container["restartPolicy"] = json!("Always");
    let sidecar = pod(
        "sidecar",
        json!({
            "initContainers": [sidecar_container, container("migrate", "2")],
            "containers": [container("main", "500m")]
        }),
    );
    // A 4-CPU container resized down to 1 that no kubelet actuates: kube-scheduler counts the
    // 4 its status reports.
    let resizing = pod("resizing", json!({"containers": [container("main", "4")]}));
    for p in [&pod_level, &sidecar, &resizing] {
        pods.create(&PostParams::default(), p).await.expect("create pod");
    }
    for name in ["pod-level", "sidecar", "resizing"] {
        let node =
            eventually(Duration::from_secs(60), &format!("the scheduler to bind {name}"), || node_of(&pods, name))
                .await;
        assert_eq!(node, NODE);
    }
    eventually(Duration::from_secs(60), "kwok to start resizing", || async {
        pods.get("resizing").await.ok()?.status?.start_time
    })
    .await;
    report_resources(&pods, "resizing", "4").await;
    let down =
        json!({"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}});
    pods.patch_subresource("resize", "resizing", &PatchParams::default(), &Patch::Strategic(&down))
        .await
        .expect("resize down");

    // What colocate's live view makes of the node, once it has seen the resize: 10 - 2 - 3 - 4
    // = 1 CPU, as kube-scheduler counts it. Counted naively (the container alone, the largest
    // init container alone, the resized spec, no container statuses kept), it would be 6.5.
    let marker = probe("probe-over", 1_001);
    pods.create(&PostParams::default(), &marker).await.expect("create probe");
    let free = eventually(Duration::from_secs(30), "probe-over in colocate's view", || {
        std::future::ready(free_room(&caches, "probe-over"))
    })
    .await;
    for t in tasks {
        t.abort();
    }
    assert_eq!(free.cpu_milli, 1_000, "colocate's free room on {NODE}: {free}");

    // The scheduler agrees: a millicore more does not fit, the room itself does.
    eventually(Duration::from_secs(60), "the scheduler to call probe-over unschedulable", || {
        unschedulable(&pods, "probe-over")
    })
    .await;
    pods.delete("probe-over", &DeleteParams::default()).await.expect("delete probe");
    pods.create(&PostParams::default(), &probe("probe-fit", free.cpu_milli)).await.expect("create probe");
    let node =
        eventually(Duration::from_secs(60), "the scheduler to bind probe-fit", || node_of(&pods, "probe-fit")).await;
    assert_eq!(node, NODE);
}
