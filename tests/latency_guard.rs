//! The latency guard on a real control plane against a real windowed p99: a real Prometheus
//! scrapes a histogram of the service's request latency, and `colocate run` reads the p99 of a
//! 15 s window of it (`histogram_quantile` over `rate(...[15s])`), as the README's example query
//! does. Such a p99 still shows an excursion for up to a window after its cause is gone.
//!
//! - An excursion that comes with a scale-up (the spike's own latency, still in the window after
//!   the new pods serve) only holds growth: training gives the room the pods need and no more.
//! - An excursion with no scale-up (interference) shrinks training on the service's nodes, and
//!   training grows back once the p99 recovers.
//!
//! Cluster: 2 nodes x 8 CPU, NGINX at 2 replicas of 1 CPU (no PriorityClass: its pods wait for
//! room), one elastic job of 1-CPU workers, 1..16.

mod support;

use std::time::{Duration, Instant};

use support::cluster::{self, deployment_replicas, eventually, pod_counts, set_hpa, Behaviour, Controller, ElasticJob};
use support::latency_exporter::{self, LatencyExporter};
use support::process::free_port;
use support::prometheus::{Prometheus, PrometheusApi};

use support::cluster::QUICK_FLAGS as FLAGS;

const SLO_S: f64 = 0.3;
/// Of the requests, this many take `latency_exporter::SLOW_S` in an excursion: the window's p99
/// is above the SLO while more than 1.25% of its requests are slow, so while the window holds
/// more than about 1.9 s of the excursion. (With every request slow the p99 stays above the SLO
/// 14.0 s after the scale-up instead of 12.8 s, and the guard still only holds: measured once.)
const SLOW: f64 = 0.1;
/// The latency query's window, and the guard's `latency_window` (the README's advice: the same).
const WINDOW_S: u64 = 15;

fn p99_query() -> String {
    format!("histogram_quantile(0.99, sum(rate({}_bucket[{WINDOW_S}s])) by (le))", latency_exporter::METRIC)
}

fn config(prometheus: &str) -> String {
    format!(
        "controller:
  grow_stabilization: 3s
  release_deadline: 20s
  latency_window: {WINDOW_S}s
run:
  prometheus_url: {prometheus}
  sample_interval: 500ms
services:
  - name: nginx
    namespace: web
    hpa: nginx
    slo_p99: {}ms
    latency_p99: {{promql: '{}'}}
",
        (SLO_S * 1000.0) as u64,
        p99_query()
    )
}

async fn p99(api: &PrometheusApi) -> Option<f64> {
    let series = api.query(&p99_query(), None).await.ok()?;
    series.first()?.points.first().map(|p| p.1).filter(|v| v.is_finite())
}

async fn workers(client: &kube::Client) -> u32 {
    deployment_replicas(client, "ml", "ja-workers").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_windowed_p99_excursion_holds_after_a_scale_up_and_shrinks_without_one() {
    let bed = cluster::bed_playing_the_hpa().await;
    let client = cluster::two_nodes_with_nginx(&bed).await;
    let exporter = LatencyExporter::start();
    let dir = tempfile::tempdir().unwrap();
    let prometheus_config = format!(
        "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n  - job_name: latency\n    static_configs: [{{targets: ['127.0.0.1:{}']}}]\n",
        exporter.port()
    );
    let prometheus = Prometheus::start(dir.path(), free_port(), &prometheus_config).await;
    let api = prometheus.api();
    let calm = eventually(Duration::from_secs(60), "Prometheus to read the p99", || {
        let api = &api;
        async move { p99(api).await }
    })
    .await;
    assert!(calm < SLO_S / 2.0, "calm p99 {calm} s");
    let job = ElasticJob::start(&bed, &client, "ml", "ja", (1, 16, 2), Behaviour::Honest, None).await;
    let controller = Controller::start(&bed, &config(&prometheus.url()), FLAGS).await;

    // The job fills the idle room: 16 CPU less NGINX's 2. Its workers are bound, and the
    // controller sees them so (`colocate_job_workers` counts bound workers), before the spike
    // starts: a spike that meets workers still being placed is a race between the scheduler and
    // the controller's shrink for the pods it cannot place (it can shrink to 11 there), not the
    // guard this test is about.
    eventually(Duration::from_secs(60), "the controller to see the job's 14 workers bound", || {
        let controller = &controller;
        async move { (controller.metric("colocate_job_workers{job=\"ml/ja\"}").await >= 14.0).then_some(()) }
    })
    .await;

    // A spike: the HPA scales NGINX 2 -> 4 and its latency rises with it until the new pods
    // serve. The Deployment creates the fourth pod 3 s after the third (one that starts late),
    // so the service is short of its desired replicas, and slow, for at least that long.
    set_hpa(&client, 2, 4).await;
    cluster::scale_nginx(&client, 3).await;
    exporter.set_slow(SLOW);
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster::scale_nginx(&client, 4).await;
    eventually(Duration::from_secs(30), "4 NGINX replicas bound", || {
        let client = client.clone();
        async move { (pod_counts(&client, "web", "app=nginx").await.0 == 4).then_some(()) }
    })
    .await;
    set_hpa(&client, 4, 4).await;
    // The spike's requests have been served; the window still holds their latency.
    let scaled = Instant::now();
    exporter.set_slow(0.0);
    let mut fewest = workers(&client).await;
    let mut high_after_scaled = Duration::ZERO;
    while scaled.elapsed() < Duration::from_secs(22) {
        if p99(&api).await.is_some_and(|p| p > SLO_S) {
            high_after_scaled = scaled.elapsed();
        }
        fewest = fewest.min(workers(&client).await);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let seen: Vec<_> = job
        .commands()
        .iter()
        .map(|c| (format!("{:+.1}s", cluster::seconds_after(c.at, scaled)), c.target, c.reason.clone()))
        .collect();
    eprintln!("commands (seconds after the scale-up): {seen:?}");
    eprintln!(
        "after the scale-up: the windowed p99 above the SLO until {high_after_scaled:?} after it; \
         the job at {fewest} workers at fewest"
    );
    // Else the test shows nothing: the p99 was back under the SLO before the window mattered.
    assert!(
        high_after_scaled >= Duration::from_secs(5),
        "the windowed p99 recovered {high_after_scaled:?} after the scale-up"
    );
    assert!(
        fewest >= 12,
        "{fewest} workers: the guard shrank training for latency the scale-up explains (room for 2 pods: 12)"
    );
    let guard_shrinks = |job: &ElasticJob| job.commands().into_iter().filter(|c| c.reason == "latency-guard").count();
    assert_eq!(guard_shrinks(&job), 0, "latency-guard shrinks: {:?}", job.commands());

    // Interference: the latency rises with no scale-up, and stays past the window.
    let before = workers(&client).await;
    exporter.set_slow(SLOW);
    let shrunk = eventually(Duration::from_secs(30), "the latency guard to shrink the job", || {
        let client = client.clone();
        let job = &job;
        async move {
            let w = workers(&client).await;
            (guard_shrinks(job) > 0 && w < before).then_some(w)
        }
    })
    .await;
    let first = job.commands().into_iter().find(|c| c.reason == "latency-guard").unwrap();
    // A quarter of the training CPU on the service's nodes (`latency_shrink_fraction`).
    let quarter = before - (f64::from(before) * 0.25).ceil() as u32;
    assert_eq!(first.target, quarter, "the guard's first shrink from {before} workers");
    // The annotation is written after the master answered.
    let why = eventually(Duration::from_secs(10), "the last decision to name the guard", || {
        let why = cluster::last_decision(&bed, "ml", "ja-master");
        async move { why.contains("latency guard").then_some(why) }
    })
    .await;
    eprintln!("with no scale-up the guard shrank the job {before} -> {shrunk}: {why}");

    // The latency recovers, and training grows back into the room.
    exporter.set_slow(0.0);
    let regrown = eventually(Duration::from_secs(60), "the job to grow back", || {
        let client = client.clone();
        async move {
            let w = workers(&client).await;
            (w >= before).then_some(w)
        }
    })
    .await;
    eprintln!("recovered: the job back at {regrown} workers");
}
