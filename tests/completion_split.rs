//! The completion-time split on a real control plane: two elastic jobs whose reference masters
//! report the progress and throughput of a modelled job (`ModelledTraining`, what
//! `example-master --model-samples` serves), one with 100 times the work of the other, and
//! `colocate run`. The idle room goes to the job closest to done (heSRPT, `crates/core/src/completion.rs`),
//! where weights alone would split it evenly, and the decision says why.
//!
//! Cluster: 2 nodes x 8 CPU, NGINX at 2 replicas of 1 CPU. Jobs: 1-CPU workers, 1..12, 2 each.

mod support;

use std::time::Duration;

use colocate::reference_master::modelled::TrainingModel;
use support::cluster::{
    self, deployment_replicas, eventually, Announce, Behaviour, Controller, ElasticJob, WorkerPod, QUICK_CONFIG,
    QUICK_FLAGS,
};

fn modelled(samples: u64) -> WorkerPod<'static> {
    let model = TrainingModel { total: samples, samples_per_worker_s: 10.0, exponent: 0.8 };
    WorkerPod { model: Some(model), ..WorkerPod::one_cpu(None) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_room_goes_to_the_job_closest_to_done() {
    let bed = cluster::bed_playing_the_hpa().await;
    let client = cluster::two_nodes_with_nginx(&bed).await;
    let (sizes, how, via) = ((1, 12, 2), Behaviour::Honest, Announce::Service);
    let short = ElasticJob::start_with(&bed, &client, "ml", "short", sizes, how, modelled(1_000_000), via).await;
    let long = ElasticJob::start_with(&bed, &client, "ml", "long", sizes, how, modelled(100_000_000), via).await;
    let controller = Controller::start(&bed, QUICK_CONFIG, QUICK_FLAGS).await;

    // 16 CPU at a 90% target, 2 for NGINX and one HPA quantum kept: about 11 CPU for training.
    // By weight alone the jobs would have about 5 or 6 each; heSRPT gives the short one 97% of
    // their weight, so it takes all the room it can while the long one keeps its 2.
    let grown = eventually(Duration::from_secs(60), "the short job to take the idle room", || {
        let client = client.clone();
        async move {
            let n = deployment_replicas(&client, "ml", "short-workers").await;
            (n >= 8).then_some(n)
        }
    })
    .await;
    // Give the long job every chance to grow too (several decisions past the stabilization window).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let long_workers = deployment_replicas(&client, "ml", "long-workers").await;
    eprintln!("short job grown to {grown} workers, long job at {long_workers}");
    assert_eq!(long_workers, 2, "the long job grew: {:?}", long.commands());
    assert!(long.commands().is_empty(), "the long job was sent commands: {:?}", long.commands());
    let grows = short.commands();
    assert!(grows.iter().all(|c| c.reason == "grow"), "{grows:?}");
    let logs = controller.logs();
    assert!(
        logs.contains("split by completion time (shortest of 2 jobs"),
        "no decision said why the short job got the room:\n{logs}"
    );
}
