//! `colocate example-master --release-in-place` on a real control plane (kube-apiserver,
//! kube-scheduler, kube-controller-manager) with kubelet-like kwok nodes: deleted pods keep
//! their node for their grace period, and resizes are reported a second after they are asked
//! for (`hack/testbed/kwok-resize.yaml`).
//!
//! A node is full of two 30 s-grace workers, started seconds apart, and an online pod waits.
//! Releasing the newer one by name in place must resize the older one of its node instead (the
//! newer is the one kube-scheduler would preempt, and a worker it preempts is never resized)
//! and let the online pod bind within seconds, while that worker is still exiting; the
//! ReplicaSet must remove exactly the worker that was resized; the other keeps its CPU. Without
//! the resize the online pod would wait the whole 30 s.
//!
//! The scheduler may preempt a worker while its resize waits for the kubelet, which never
//! resizes a pod it is terminating. The master must then resize another in its place, or the
//! room comes back only when the preempted worker has exited.

mod support;

use std::time::{Duration, Instant};

use colocate::live::master_client::{MasterClient, RetryPolicy};
use colocate::master_protocol::ScaleCommand;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};
use serde_json::json;
use support::cluster::{self, eventually};
use support::process::free_port;
use support::testbed::{node_manifest, Testbed};

const NS: &str = "ml-in-place";

fn workers(replicas: u32) -> serde_json::Value {
    let labels = json!({"colocate.dev/job": "wd", "colocate.dev/role": "worker"});
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"namespace": NS, "name": "wd"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "terminationGracePeriodSeconds": 30,
                // Burstable (requests, no limits): a resize may not change the QoS class.
                "containers": [{"name": "worker", "image": "registry.invalid/fake",
                    "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]}}
        }
    })
}

async fn worker_pods(pods: &Api<Pod>) -> Vec<Pod> {
    pods.list(&ListParams::default().labels("colocate.dev/role=worker")).await.expect("list workers").items
}

fn cpu_request(p: &Pod) -> String {
    let c = &p.spec.as_ref().unwrap().containers[0];
    c.resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("cpu"))
        .map(|q| q.0.clone())
        .unwrap_or_default()
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_released_in_place_gives_its_room_back_before_it_exits() {
    // Two workers of 2 CPUs fill it: 500m is left, too little for the online pod below.
    let (bed, pods, started) = node_of_workers("4500m", 2).await;
    let reported = started[0].status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].resources.clone();
    assert!(reported.is_some(), "kwok's kubelet stage reports container resources (else /resize is refused)");

    // The node is full: an online pod of 2 CPUs waits.
    online_pod_waits(&bed, &pods, "2").await;

    let (_master, mc) = start_master(&bed).await;

    // Name the newer worker; the master releases the older one of that node in its place.
    let leave = started[0].metadata.name.clone().unwrap();
    let newer = started[1].metadata.name.clone().unwrap();
    let keep = newer.clone();
    let released = Instant::now();
    mc.scale(&ScaleCommand::new(1, "online-headroom", 30).with_release_pods([newer])).await.expect("shrink to 1");
    let bound = online_pod_bound(&pods).await;
    let waited = released.elapsed();
    assert_eq!(bound, "n1");
    // The ReplicaSet removes the resized worker, which exits within its 30 s grace period.
    let after = eventually(Duration::from_secs(10), "the released worker being removed", || {
        let pods = pods.clone();
        let leave = leave.clone();
        async move {
            let w = worker_pods(&pods).await;
            let leaving = w.iter().find(|p| p.metadata.name.as_deref() == Some(leave.as_str()))?;
            leaving.metadata.deletion_timestamp.is_some().then_some(w)
        }
    })
    .await;
    let leaving = after.iter().find(|p| p.metadata.name.as_deref() == Some(leave.as_str())).unwrap();
    assert_eq!(cpu_request(leaving), colocate::reference_master::in_place::RELEASED_CPU, "resized down first");
    let kept = after.iter().find(|p| p.metadata.name.as_deref() == Some(keep.as_str())).expect("the kept worker");
    assert!(kept.metadata.deletion_timestamp.is_none(), "the ReplicaSet removed the resized worker, not this one");
    assert_eq!(cpu_request(kept), "2", "the worker that stays keeps its CPU");
    assert!(waited < Duration::from_secs(15), "the online pod bound {waited:?} after the release, not within seconds");
    eprintln!("online pod bound {waited:?} after the release; the released worker is still exiting");
}

/// A test bed with kubelet-like kwok nodes and one node, `n1`, of `cpu`, on which `n` workers
/// are started ([`start_workers`], oldest first).
async fn node_of_workers(cpu: &str, n: usize) -> (Testbed, Api<Pod>, Vec<Pod>) {
    let bed = tokio::task::spawn_blocking(|| Testbed::start_kubelet_like("*")).await.unwrap();
    let client: Client = cluster::client(&bed).await;
    cluster::namespace(&bed, NS);
    bed.kubectl_apply(&node_manifest("n1", cpu, "8Gi"));
    let pods: Api<Pod> = Api::namespaced(client, NS);
    let started = start_workers(&bed, &pods, n).await;
    (bed, pods, started)
}

/// Starts `n` workers one after another, each more than a second after the last (`startTime`
/// has whole seconds, and the master's choice goes by it), and returns them oldest first.
async fn start_workers(bed: &Testbed, pods: &Api<Pod>, n: usize) -> Vec<Pod> {
    let mut started = Vec::new();
    for count in 1..=n {
        if count > 1 {
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        bed.kubectl_apply(&workers(count as u32));
        let running = eventually(Duration::from_secs(60), &format!("{count} workers running on n1"), || {
            let pods = pods.clone();
            async move {
                let w = worker_pods(&pods).await;
                let up = w.iter().filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
                (up.count() == count).then_some(w)
            }
        })
        .await;
        let new = running.into_iter().find(|p| !started.iter().any(|s: &Pod| s.metadata.name == p.metadata.name));
        started.push(new.expect("the new worker"));
    }
    started
}

/// Creates the online pod (`cpu`, at the workers' priority: it waits rather than preempts) and
/// waits until the scheduler has found no room for it.
async fn online_pod_waits(bed: &Testbed, pods: &Api<Pod>, cpu: &str) {
    bed.kubectl_apply(&json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": NS, "name": "online"},
        "spec": {"containers": [{"name": "nginx", "image": "registry.invalid/fake",
            "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]}}));
    eventually(Duration::from_secs(30), "the online pod found unschedulable", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("online").await.ok()?;
            let conditions = p.status?.conditions?;
            conditions.iter().any(|c| c.type_ == "PodScheduled" && c.status == "False").then_some(())
        }
    })
    .await;
}

async fn online_pod_bound(pods: &Api<Pod>) -> String {
    eventually(Duration::from_secs(45), "the online pod bound on the released room", || {
        let pods = pods.clone();
        async move { node_of(&pods.get("online").await.ok()?) }
    })
    .await
}

/// The master, as the test bed's admin (its Role is checked by tests/example_master.rs),
/// releasing in place, and a client that has seen it serve.
async fn start_master(bed: &Testbed) -> (KillOnDrop, MasterClient) {
    let port = free_port();
    let master = KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_colocate"))
            .args(["example-master", "--job", "wd", "--deployment", "wd", "--namespace", NS])
            .args(["--min-workers", "1", "--max-workers", "4", "--worker-cpu", "2", "--worker-memory", "1Gi"])
            .args(["--release-in-place", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--kubeconfig")
            .arg(&bed.kubeconfig)
            .env_remove("KUBECONFIG")
            .spawn()
            .expect("spawning colocate example-master"),
    );
    let retry = RetryPolicy { max_attempts: 1, initial_backoff: Duration::ZERO, max_backoff: Duration::ZERO };
    let mc = MasterClient::new(&format!("http://127.0.0.1:{port}"))
        .unwrap()
        .with_timeout(Duration::from_secs(10))
        .with_retry(retry);
    let status = eventually(Duration::from_secs(30), "the master serving", || {
        let mc = &mc;
        async move { mc.status().await.ok() }
    })
    .await;
    assert_eq!(status.worker_release_s, Some(3.0), "announces the longest wait for the kubelet");
    (master, mc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_preempted_while_its_resize_waits_is_replaced_by_another_resize() {
    // Three workers of 2 CPUs fill it.
    let (bed, pods, started) = node_of_workers("6", 3).await;
    let names: Vec<String> = started.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
    let (oldest, middle, newest) = (names[0].clone(), names[1].clone(), names[2].clone());
    // The online pod needs 1.5 CPUs: one resized worker's room (2 CPUs less 1m) takes it, and
    // not the replacement of the preempted worker below (2 CPUs), which waits.
    online_pod_waits(&bed, &pods, "1500m").await;
    let (_master, mc) = start_master(&bed).await;

    // Naming the newest, the master resizes the oldest; it is deleted (30 s grace, as the
    // scheduler deletes its victims) before the kubelet's second is over.
    let preempt = {
        let pods = pods.clone();
        let oldest = oldest.clone();
        tokio::spawn(async move {
            // Polled closely: kwok's kubelet stage reports a resize a second after it is asked.
            let asked = Instant::now();
            while pods.get(&oldest).await.map(|p| cpu_request(&p)).ok().as_deref() != Some("1m") {
                assert!(asked.elapsed() < Duration::from_secs(20), "the oldest worker's resize never asked for");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            pods.delete(&oldest, &Default::default()).await.expect("deleting the oldest worker");
        })
    };
    let released = Instant::now();
    mc.scale(&ScaleCommand::new(2, "online-headroom", 30).with_release_pods([newest.clone()]))
        .await
        .expect("shrink to 2");
    preempt.await.unwrap();
    let preempted = pods.get(&oldest).await.expect("the preempted worker, exiting");
    assert!(preempted.metadata.deletion_timestamp.is_some());
    assert!(
        !colocate::reference_master::in_place::actuated(&preempted),
        "deleted before the kubelet's second was over: its resize is never actuated"
    );

    // The master resizes the middle worker in its place: the online pod binds within seconds,
    // while the preempted worker still holds 2 CPUs for its grace period.
    let bound = online_pod_bound(&pods).await;
    let waited = released.elapsed();
    assert_eq!(bound, "n1");
    assert!(waited < Duration::from_secs(15), "the online pod bound {waited:?} after the release, not within seconds");
    // The substitute leaves too (resized, then removed), and once the ReplicaSet has settled
    // (it may create a pod for the deleted substitute before it reads the lower count, then
    // remove it) the named worker and the preempted one's replacement stay: two, as asked.
    let staying_of = |w: &[Pod]| -> Vec<String> {
        w.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).filter_map(|p| p.metadata.name.clone()).collect()
    };
    let after = eventually(Duration::from_secs(15), "the substitute removed and two workers staying", || {
        let pods = pods.clone();
        let middle = middle.clone();
        async move {
            let w = worker_pods(&pods).await;
            let substitute = w.iter().find(|p| p.metadata.name.as_deref() == Some(middle.as_str()))?;
            (substitute.metadata.deletion_timestamp.is_some() && staying_of(&w).len() == 2).then_some(w)
        }
    })
    .await;
    let find = |name: &str| after.iter().find(|p| p.metadata.name.as_deref() == Some(name));
    let substitute = find(&middle).expect("the middle worker");
    assert_eq!(
        cpu_request(substitute),
        colocate::reference_master::in_place::RELEASED_CPU,
        "resized in the oldest's place before it was removed"
    );
    let kept = find(&newest).expect("the newest worker");
    assert!(kept.metadata.deletion_timestamp.is_none(), "the named worker's node gave its room by the others");
    assert_eq!(cpu_request(kept), "2");
    let staying = staying_of(&after);
    assert!(!staying.contains(&oldest) && !staying.contains(&middle), "{staying:?}");
    eprintln!("online pod bound {waited:?} after the release; the preempted worker is still exiting");
}

/// The master process, killed with the test even when an assertion fails (else it outlives it).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
