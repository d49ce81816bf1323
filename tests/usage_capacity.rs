//! `controller.capacity: usage` reading real usage: a real Prometheus scrapes pods' CPU and
//! memory under cAdvisor's names (served for the kwok pods by the test's exporter), `colocate
//! run` queries it, and each node's published batch capacity follows what its pods use, not
//! what they request. A usage query that answers nothing stops the start, naming it.
//!
//! Cluster: 2 nodes x 8 CPU, 64 GiB; NGINX at 2 replicas of 1 CPU and 256 MiB, one per node;
//! the usage margins are 0, so a node's batch CPU is 8000m less what its NGINX pod uses, to
//! within the write hysteresis: a rise is written past `batch_rise_threshold` of the node
//! (160m), a fall past a hundredth of it (80m). A sample Prometheus takes while the usage
//! moves can leave the node anywhere in that band of the new value, and it stays there.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use colocate::core::resources::parse_memory;
use colocate::live::sampler::usage::DEFAULT_CPU_QUERY;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;
use kube::{Api, Client};

use support::cadvisor;
use support::cluster::{self, eventually, Controller};

const MI: f64 = (1 << 20) as f64;

/// How far below what its pods leave a node may stay (`batch_rise_threshold` 0.02 of 8000m),
/// and how far above it (a hundredth of 8000m).
const UNDER_MILLI: i64 = 160;
const OVER_MILLI: i64 = 80;

fn config(prometheus: &str, cpu_query: &str) -> String {
    format!(
        "controller:\n  capacity: usage\n  usage_cpu_margin: 0\n  usage_memory_margin: 0\n  grow_stabilization: 3s\n  batch_rise_threshold: 0.02\n\
         run:\n  prometheus_url: {prometheus}\n  usage_cpu_query: '{cpu_query}'\n  sample_stale_after: 10s\n\
         services:\n  - name: nginx\n    namespace: web\n    hpa: nginx\n"
    )
}

/// Batch CPU millicores node `name` carries.
async fn batch_cpu(client: &Client, name: &str) -> Option<i64> {
    let node = Api::<Node>::all(client.clone()).get(name).await.ok()?;
    parse_memory(&node.status?.allocatable?.get("colocate.dev/batch-cpu")?.0).ok()
}

/// The NGINX pod bound to `node`.
async fn nginx_on(client: &Client, node: &str) -> String {
    let pods = Api::<Pod>::namespaced(client.clone(), "web");
    let on = pods.list(&ListParams::default().fields(&format!("spec.nodeName={node}"))).await.expect("pods");
    assert_eq!(on.items.len(), 1, "one NGINX pod per node");
    on.items[0].metadata.name.clone().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_carry_what_their_pods_leave_unused_and_follow_each_usage_step() {
    let bed = cluster::bed_playing_the_hpa().await;
    let client = cluster::two_nodes_with_nginx_bound(&bed).await;
    let pod = nginx_on(&client, "node-a").await;

    // Each NGINX pod uses 0.3 of its 1 CPU; the exporter follows the Deployment's pods.
    let dir = tempfile::tempdir().unwrap();
    let (cadvisor, prometheus) = cadvisor::with_prometheus(dir.path()).await;
    let cores_milli = Arc::new(AtomicU64::new(300));
    let usage = cores_milli.clone();
    let _following = cadvisor.keep_following(client.clone(), "web", "app=nginx", move || {
        (usage.load(Ordering::Relaxed) as f64 / 1000.0, 200.0 * MI)
    });
    let controller = Controller::start(&bed, &config(&prometheus.url(), DEFAULT_CPU_QUERY), cluster::QUICK_FLAGS).await;

    // Requests mode would leave 7000m; usage mode gives what NGINX leaves idle as well.
    for node in ["node-a", "node-b"] {
        let carried =
            eventually(Duration::from_secs(30), "batch CPU from usage", || {
                let client = client.clone();
                async move {
                    batch_cpu(&client, node).await.filter(|c| (7700 - UNDER_MILLI..=7700 + OVER_MILLI).contains(c))
                }
            })
            .await;
        eprintln!("{node} carries batch-cpu {carried}m with NGINX using 300m of its 1000m request");
    }

    // Steps of NGINX's usage, read through the default query (the last two scrapes, 1 s apart
    // here): from when Prometheus answers the new value to when node-a carries it.
    let api = prometheus.api();
    let query = format!("sum(irate(container_cpu_usage_seconds_total{{pod=\"{pod}\"}}[2m]))");
    let mut lags = Vec::new();
    for (step, milli) in [900u64, 300, 700, 200, 800, 400].into_iter().enumerate() {
        cores_milli.store(milli, Ordering::Relaxed);
        let want = 8000 - milli as i64;
        let near = |v: f64| (v * 1000.0 - milli as f64).abs() < 30.0;
        let deadline = Instant::now() + Duration::from_secs(90);
        let (mut in_prometheus, mut on_node, mut carried) = (None, None, None);
        while (in_prometheus.is_none() || on_node.is_none()) && Instant::now() < deadline {
            let now = Instant::now();
            if in_prometheus.is_none() {
                let answer = api.query(&query, None).await.unwrap_or_default();
                if answer.first().and_then(|s| s.points.last()).is_some_and(|&(_, v)| near(v)) {
                    in_prometheus = Some(now);
                }
            }
            if on_node.is_none() {
                carried = batch_cpu(&client, "node-a").await;
                if carried.is_some_and(|c| (want - UNDER_MILLI..=want + OVER_MILLI).contains(&c)) {
                    on_node = Some(now);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (Some(p), Some(n)) = (in_prometheus, on_node) else {
            let logs = controller.logs();
            let tail: Vec<&str> = logs.lines().rev().take(200).collect::<Vec<_>>().into_iter().rev().collect();
            panic!("step {step} to {milli}m: Prometheus at {in_prometheus:?}, node at {on_node:?} (carrying {carried:?}m) within 90 s; the controller said:\n{}", tail.join("\n"));
        };
        let lag = n.saturating_duration_since(p);
        eprintln!("step {step}: NGINX at {milli}m; node-a carried it {lag:.1?} after Prometheus answered it");
        lags.push(lag);
        // Settled before the next step.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    // How soon is reported, not asserted: on a loaded machine the polls themselves take longer
    // than the lag (docs/usage-mode.md gives the figure and this command).
    let worst = lags.iter().max().copied().unwrap_or_default();
    eprintln!("worst lag {worst:.1?} over {} steps", lags.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usage_query_answering_nothing_stops_the_start_and_names_the_query() {
    let bed = cluster::bed_playing_the_hpa().await;
    cluster::two_nodes_with_nginx(&bed).await;
    let dir = tempfile::tempdir().unwrap();
    let (_cadvisor, prometheus) = cadvisor::with_prometheus(dir.path()).await;
    let query = "sum by (namespace, pod) (rate(no_such_usage_total[1m]))";
    let mut controller = Controller::spawn(&bed.kubeconfig, &config(&prometheus.url(), query), cluster::QUICK_FLAGS);
    // Retried for `sample_stale_after` (10 s): a Prometheus just started has no rate yet.
    let deadline = Instant::now() + Duration::from_secs(40);
    let code = loop {
        if let Some(code) = controller.exited() {
            break code;
        }
        assert!(Instant::now() < deadline, "still running after 40 s:\n{}", controller.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let logs = controller.logs();
    assert!(code.is_some_and(|c| c != 0), "exit code {code:?}:\n{logs}");
    let said = logs.lines().last().unwrap_or_default();
    assert!(said.contains(&format!("run.usage_cpu_query `{query}` returned no series")), "{logs}");
    eprintln!("{said}");
    let nodes = Api::<Node>::all(cluster::client(&bed).await);
    let carried = nodes.get("node-a").await.unwrap().status.and_then(|s| s.allocatable).unwrap_or_default();
    assert!(!carried.contains_key("colocate.dev/batch-cpu"), "a controller that did not start wrote node status");
}
