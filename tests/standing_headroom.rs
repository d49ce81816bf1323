//! A service's `headroom_replicas` on a real control plane (etcd, kube-apiserver,
//! kube-scheduler, kube-controller-manager's Deployment controllers, kwok nodes): training
//! leaves room for that many more replicas than the service needs, so a scale-up the controller
//! had no warning of (the HPA's status and the Deployment's scale change at once, as the real
//! HPA controller changes them) lands without a pod waiting; then the headroom is restored.
//!
//! Cluster: 2 nodes x 8 CPU. NGINX: 2 replicas of 1 CPU, no PriorityClass (its pods wait for
//! room rather than preempt, so a missing headroom shows as Unschedulable pods). One elastic job
//! of 1-CPU workers, 1..16.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::cluster::{self, deployment_replicas, eventually, pod_counts, set_hpa, Behaviour, Controller, ElasticJob};

use support::cluster::QUICK_FLAGS as FLAGS;

/// `cluster::QUICK_CONFIG` (whose last lines are the NGINX service) with room for 4 more NGINX
/// replicas kept.
fn config() -> String {
    format!("{}    headroom_replicas: 4\n", cluster::QUICK_CONFIG)
}

async fn workers(client: &kube::Client) -> u32 {
    deployment_replicas(client, "ml", "ja-workers").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_up_within_the_headroom_lands_at_once_and_the_headroom_is_restored() {
    let bed = cluster::bed_playing_the_hpa().await;
    let client = cluster::two_nodes_with_nginx(&bed).await;
    let job = ElasticJob::start(&bed, &client, "ml", "ja", (1, 16, 2), Behaviour::Honest, None).await;
    let _controller = Controller::start(&bed, &config(), FLAGS).await;

    // The job grows into the idle room but not into the headroom: 16 CPU, 2 for NGINX, 4 kept.
    eventually(Duration::from_secs(60), "the job to grow", || {
        let client = client.clone();
        async move { (workers(&client).await >= 8).then_some(()) }
    })
    .await;
    // Past the growth stabilization window (3 s) and a few decisions: where growth stops.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let filled = workers(&client).await;
    let (running, _) = pod_counts(&client, "ml", "colocate.dev/role=worker").await;
    eprintln!("the job filled to {filled} workers ({running} running)");
    assert!(filled <= 10, "{filled} workers: the headroom of 4 NGINX replicas was not kept (16 - 2 - 4 = 10)");

    // A scale-up nothing announced: the HPA's status and the Deployment's scale at once.
    set_hpa(&client, 2, 6).await;
    cluster::scale_nginx(&client, 6).await;
    let unschedulable_samples = AtomicUsize::new(0);
    let bound = eventually(Duration::from_secs(30), "6 NGINX replicas bound", || {
        let client = client.clone();
        let seen = &unschedulable_samples;
        async move {
            let (bound, unschedulable) = pod_counts(&client, "web", "app=nginx").await;
            seen.fetch_add(unschedulable, Ordering::Relaxed);
            (bound == 6).then_some(bound)
        }
    })
    .await;
    assert_eq!(bound, 6);
    assert_eq!(unschedulable_samples.into_inner(), 0, "NGINX pods waited for room the headroom should have kept");
    set_hpa(&client, 6, 6).await;

    // The headroom is kept again, now above 6 replicas (up to maxReplicas 10): 16 - 10 = 6 CPU
    // at most for training, and it stays so once the pods serve, past the growth stabilization
    // window (3 s) and a few 1 s ticks (a headroom lost with the scale-up would let it regrow).
    let restored = eventually(Duration::from_secs(30), "training to shrink back to the headroom", || {
        let client = client.clone();
        async move {
            let w = workers(&client).await;
            (w <= 6).then_some(w)
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let kept = workers(&client).await;
    eprintln!("after the scale-up the job shrank to {restored} workers, {kept} 8 s later");
    assert!(kept <= 6, "{kept} workers: the headroom above 6 NGINX replicas was not kept");
    let why = cluster::last_decision(&bed, "ml", "ja-master");
    assert!(why.contains("standing headroom"), "the last decision does not name the headroom: {why}");
    assert!(
        job.commands().iter().any(|c| c.reason == "online-headroom" && c.target <= 6),
        "no shrink to restore the headroom: {:?}",
        job.commands()
    );
    assert!(deployment_replicas(&client, "ml", "ja-workers").await >= 1, "the job went below its floor");
}
