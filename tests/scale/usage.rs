//! The scale test in `controller.capacity: usage`: pods' usage under cAdvisor's names for a
//! real Prometheus, the controller's configuration, and what nodes carry at the end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use colocate::core::resources::parse_cpu;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;
use kube::{Api, Client};

use crate::support::cadvisor::{self, Cadvisor, Following};
use crate::support::prometheus::Prometheus;

/// How often Prometheus scrapes the stand-in (a cluster's cAdvisor is scraped every 15-30 s;
/// 5 s keeps usage moving within the test's phases).
const SCRAPE: Duration = Duration::from_secs(5);
/// How often the stand-in re-lists the cluster's pods (new spike pods get usage within this).
const RELIST: Duration = Duration::from_secs(10);

/// A running usage source: the stand-in, its Prometheus, and the task that follows the pods.
pub struct UsageSource {
    pub prometheus: Prometheus,
    _cadvisor: Arc<Cadvisor>,
    _following: Following,
}

/// Online and system pods use 60% of the CPU they request (an HPA's target), each moving by up
/// to 5% of its request over a few minutes, out of phase with the others, and 80% of their
/// memory; workers (BestEffort) are not served: their use never counts against batch capacity.
pub async fn start(dir: &std::path::Path, client: &Client) -> UsageSource {
    let (cadvisor, prometheus) = cadvisor::with_prometheus_every(dir, SCRAPE).await;
    let t0 = Instant::now();
    let following = cadvisor.keep_following_all(client.clone(), RELIST, move |p: &Pod| {
        let labels = p.metadata.labels.as_ref();
        if labels.is_some_and(|l| l.get("colocate.dev/role").is_some_and(|r| r == "worker")) {
            return None;
        }
        let (cpu, memory) = requests(p);
        let phase = p.metadata.name.as_deref().unwrap_or_default().bytes().map(f64::from).sum::<f64>();
        let wobble = 0.05 * (t0.elapsed().as_secs_f64() / 60.0 + phase).sin();
        Some((cpu * (0.6 + wobble), memory * 0.8))
    });
    UsageSource { prometheus, _cadvisor: cadvisor, _following: following }
}

/// CPU cores and memory bytes a pod's containers request.
fn requests(p: &Pod) -> (f64, f64) {
    let mut cpu = 0.0;
    let mut memory = 0.0;
    for c in p.spec.iter().flat_map(|s| &s.containers) {
        let Some(r) = c.resources.as_ref().and_then(|r| r.requests.as_ref()) else { continue };
        cpu += r.get("cpu").and_then(|q| parse_cpu(&q.0).ok()).unwrap_or(0) as f64 / 1000.0;
        memory += r.get("memory").and_then(|q| colocate::core::resources::parse_memory(&q.0).ok()).unwrap_or(0) as f64;
    }
    (cpu, memory)
}

/// `controller:` and `run:` additions for usage mode, reading `prometheus`.
pub fn config(base: &str, prometheus: &str) -> String {
    format!("{base}  capacity: usage\nrun:\n  prometheus_url: {prometheus}\n")
}

/// Nodes that carry `colocate.dev/batch-cpu`.
pub async fn nodes_carrying_batch(client: &Client) -> usize {
    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await.expect("list nodes");
    nodes
        .items
        .iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .is_some_and(|a| a.contains_key("colocate.dev/batch-cpu"))
        })
        .count()
}

/// Node status patches per second in a phase's request rates (`measure::request_rates`).
pub fn node_status_writes(rates: &serde_json::Value) -> f64 {
    let n = rates["by_verb_and_resource"]["patch nodes/status"].as_f64().unwrap_or(0.0);
    crate::measure::round(n / rates["seconds"].as_f64().unwrap_or(1.0).max(1e-3), 3)
}
