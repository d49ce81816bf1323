//! Reaction time of `colocate run`, measured on the real control plane: from the HPA status
//! write that raises its desired replicas to the shrink command arriving at a job's master.
//!
//! Method. The test plays the HPA controller and serves the two jobs' reference masters, so
//! both ends are timed on one clock (`Instant`) in one process:
//! - T0 is taken just before the status patch is sent to the apiserver;
//! - T1 is when the master's backend receives the first `online-headroom` scale command after T0.
//!
//! T1 - T0 therefore includes the apiserver write, the watch event reaching the controller,
//! the debounce, the decision and the HTTP command: everything between the HPA deciding and the
//! job being told. The patch's own round trip is reported too, to show how much of it is the
//! write. Between spikes the HPA returns to its calm state and the test waits until the jobs
//! have grown back, so every spike starts from a full cluster.
//!
//! Nothing here asserts a duration: the figures are printed and written to
//! `target/test-reports/reaction_time.json`. What is asserted is that every spike got a shrink
//! command. `COLOCATE_REACTION_SPIKES` sets the number of spikes (default 20).

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::cluster::{self, eventually, pod_counts, set_hpa, Behaviour, Controller, ElasticJob};
use support::cluster::{QUICK_CONFIG, QUICK_FLAGS};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaction_from_hpa_decision_to_shrink_command() {
    let spikes: usize = std::env::var("COLOCATE_REACTION_SPIKES").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let bed = cluster::bed_playing_the_hpa().await;
    let client = cluster::two_nodes_with_nginx(&bed).await;
    let a = ElasticJob::start(&bed, &client, "ml", "ja", (1, 12, 2), Behaviour::Honest, None).await;
    let b = ElasticJob::start(&bed, &client, "ml", "jb", (1, 12, 2), Behaviour::Honest, None).await;
    let controller = Controller::start(&bed, QUICK_CONFIG, QUICK_FLAGS).await;
    let filled = settled_fill(&client).await;

    let mut samples = Vec::with_capacity(spikes);
    for spike in 0..spikes {
        let t0 = Instant::now();
        set_hpa(&client, 2, 6).await;
        let write = t0.elapsed();
        let what = format!("a shrink command for spike {spike}");
        let t1 = eventually(Duration::from_secs(10), &what, || {
            let (a, b) = (a.commands(), b.commands());
            async move { a.iter().chain(&b).filter(|c| c.reason == "online-headroom" && c.at > t0).map(|c| c.at).min() }
        })
        .await;
        samples.push((t1 - t0, write));
        // The master takes the command a moment after it arrives: until its Deployment asks for
        // fewer workers, the jobs still look back where they were. (Without this wait, when the
        // room comes from one job's master alone, the next spike can begin before the shrink,
        // need none, and time out.)
        eventually(Duration::from_secs(10), "the shrink to reach the workers' Deployments", || {
            let client = client.clone();
            async move { (wanted_workers(&client).await < filled).then_some(()) }
        })
        .await;
        // Calm again; the next spike starts once the jobs are back to where they were.
        set_hpa(&client, 2, 2).await;
        wait_for_workers(&client, filled, "the jobs to grow back").await;
    }

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut reaction: Vec<f64> = samples.iter().map(|(r, _)| ms(*r)).collect();
    let writes: Vec<f64> = samples.iter().map(|(_, w)| ms(*w)).collect();
    reaction.sort_by(f64::total_cmp);
    let median = percentile(&reaction, 0.5);
    let p90 = percentile(&reaction, 0.9);
    let worst = *reaction.last().unwrap();
    let decisions = controller.metric("colocate_decisions_total").await;
    let report = json!({
        "method": "T0 before the HPA status patch, T1 when the master backend receives the first online-headroom scale command; one process clock",
        "spikes": spikes,
        "reaction_ms": {"median": median, "p90": p90, "worst": worst, "best": reaction[0], "sorted": reaction},
        "status_write_ms": {"median": percentile(&sorted(writes.clone()), 0.5), "all": writes},
        "controller_decisions_total": decisions,
        "machine_load_1m": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().next().unwrap_or("?"),
    });
    let path = cluster::report_dir().join("reaction_time.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    eprintln!(
        "reaction over {spikes} spikes: median {median:.1} ms, p90 {p90:.1} ms, worst {worst:.1} ms (status write median {:.1} ms); {}",
        percentile(&sorted(writes), 0.5),
        path.display()
    );
    assert_eq!(reaction.len(), spikes, "a spike without a shrink command");
}

/// The workers once the jobs have filled the idle room and held still for 2 s. The masters
/// scale their Deployments while the pods start, so running and wanted can agree for a moment
/// mid-growth; taken as the fill, such a moment (10 of 14 workers) leaves the second spike
/// played against a cluster still at the first spike's shrink, and it asks for no new shrink.
async fn settled_fill(client: &kube::Client) -> usize {
    let mut seen = wait_for_workers(client, 10, "the jobs to fill the idle room").await;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = wait_for_workers(client, seen, "the jobs to fill the idle room").await;
        if now == seen {
            return now;
        }
        seen = now;
    }
}

/// Waits until at least `at_least` workers run and the Deployments ask for no more than that.
async fn wait_for_workers(client: &kube::Client, at_least: usize, what: &str) -> usize {
    eventually(Duration::from_secs(60), what, || {
        let client = client.clone();
        async move {
            let (running, _) = pod_counts(&client, "ml", "colocate.dev/role=worker").await;
            (running >= at_least && wanted_workers(&client).await == running).then_some(running)
        }
    })
    .await
}

/// The workers both jobs' Deployments ask for.
async fn wanted_workers(client: &kube::Client) -> usize {
    (cluster::deployment_replicas(client, "ml", "ja-workers").await
        + cluster::deployment_replicas(client, "ml", "jb-workers").await) as usize
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}
