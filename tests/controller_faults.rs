//! `colocate run` when things around it break, on the real control plane: masters that fail,
//! hang or ignore their deadline; Prometheus down; the apiserver restarting under the watches;
//! the leader killed; the leader cut off from the API server mid-shrink. Each test checks the
//! defined behaviour, the metric that reports it, and that no job is left below its floor or
//! changed half-way.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use support::cluster::{self, deployment_replicas, eventually, pod_counts, set_hpa, Behaviour, Controller, ElasticJob};
use support::pod_recorder::{PodRecorder, Role};
use support::proxy::Proxy;
use support::testbed::Testbed;

const FLAGS: &[&str] =
    &["--tick", "1s", "--status-interval", "500ms", "--lease-duration", "3s", "--master-timeout", "1s"];

async fn bed() -> Testbed {
    cluster::bed_playing_the_hpa().await
}

/// Bound workers per job, sampled until `for_how_long`; returns the lowest seen per job.
async fn lowest_bound_workers(client: &kube::Client, jobs: &[&str], for_how_long: Duration) -> BTreeMap<String, usize> {
    let mut lowest = BTreeMap::new();
    let end = tokio::time::Instant::now() + for_how_long;
    while tokio::time::Instant::now() < end {
        for j in jobs {
            let (bound, _) = pod_counts(client, "ml", &format!("colocate.dev/job={j}")).await;
            let l = lowest.entry(j.to_string()).or_insert(bound);
            *l = (*l).min(bound);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    lowest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_masters_are_bounded_by_the_deadline_and_floors_hold() {
    let bed = bed().await;
    let client = cluster::two_nodes_with_nginx(&bed).await;
    // 14 workers + 2 NGINX on 16 CPU. None of the three masters does what it is asked.
    let fails = ElasticJob::start(&bed, &client, "ml", "ja", (2, 12, 5), Behaviour::Fails, None).await;
    let hangs = ElasticJob::start(&bed, &client, "ml", "jb", (2, 12, 5), Behaviour::Hangs, None).await;
    let ignores = ElasticJob::start(&bed, &client, "ml", "jc", (2, 12, 4), Behaviour::Ignores, None).await;
    eventually(Duration::from_secs(60), "14 workers bound", || {
        let client = client.clone();
        async move { (pod_counts(&client, "ml", "colocate.dev/role=worker").await.0 == 14).then_some(()) }
    })
    .await;
    let config = "controller:\n  release_deadline: 4s\nservices:\n  - {name: nginx, namespace: web, hpa: nginx}\n";
    let controller = Controller::start(&bed, config, FLAGS).await;
    // A spike big enough that every job must give up workers.
    set_hpa(&client, 2, 10).await;

    let lowest = lowest_bound_workers(&client, &["ja", "jb", "jc"], Duration::from_secs(14)).await;
    for (job, n) in &lowest {
        assert!(*n >= 2, "job {job} went down to {n} bound workers, below its floor of 2");
    }
    let m = controller.metrics().await;
    let value = |s: &str| cluster::metric_value(&m, s);
    assert!(value("colocate_actuations_total{outcome=\"error\",error=\"server_error\"}") >= 1.0, "{m}");
    assert!(value("colocate_actuations_total{outcome=\"error\",error=\"timeout\"}") >= 1.0, "{m}");
    for job in ["ml/ja", "ml/jb", "ml/jc"] {
        let forced = value(&format!("colocate_forced_preemptions_total{{job=\"{job}\"}}"));
        assert!(forced >= 1.0, "no forced preemption counted for {job}:\n{m}");
    }
    assert!(!fails.commands().is_empty() && !hangs.commands().is_empty() && !ignores.commands().is_empty());
    // Nothing half-applied: the controller never touched the jobs' own objects, only deleted
    // pods past deadlines; the masters that did not act left their Deployments as they were.
    for (name, replicas) in [("ja-workers", 5), ("jb-workers", 5), ("jc-workers", 4)] {
        assert_eq!(deployment_replicas(&client, "ml", name).await, replicas, "{name} changed");
    }
    let reasons = bed.kubectl_run(&["get", "events.events.k8s.io", "-n", "ml", "-o", "jsonpath={.items[*].reason}"]);
    assert!(reasons.contains("ForcedPreemption"), "no ForcedPreemption event: {reasons}");
    assert!(controller.logs().contains("shrink deadline passed"), "forced deletion not logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_down_holds_growth_and_is_reported() {
    let bed = bed().await;
    let client = cluster::two_nodes_with_nginx(&bed).await;
    let a = ElasticJob::start(&bed, &client, "ml", "ja", (1, 12, 2), Behaviour::Honest, None).await;
    // Nothing listens on port 9: every query fails, so the p99 is unknown.
    let config = "\
controller:
  grow_stabilization: 2s
run:
  prometheus_url: http://127.0.0.1:9
  sample_interval: 500ms
  sample_stale_after: 2s
services:
  - name: nginx
    namespace: web
    hpa: nginx
    slo_p99: 200ms
    latency_p99: {promql: 'histogram_quantile(0.99, sum(rate(nginx_request_seconds_bucket[1m])) by (le))'}
";
    let controller = Controller::start(&bed, config, FLAGS).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let m = controller.metrics().await;
    let errors = cluster::metric_value(&m, "colocate_sample_errors_total{service=\"web/nginx\",source=\"latency\"}");
    assert!(errors >= 3.0, "sampling errors not counted:\n{m}");
    assert!(
        a.commands().iter().all(|c| c.reason != "grow" && c.reason != "start"),
        "grew with unknown latency: {:?}",
        a.commands()
    );
    assert_eq!(deployment_replicas(&client, "ml", "ja-workers").await, 2, "the job changed");
    assert!(cluster::metric_value(&m, "colocate_decisions_total") >= 4.0, "the controller stopped deciding");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_recover_from_an_apiserver_restart() {
    let bed = bed().await;
    let client = cluster::two_nodes_with_nginx(&bed).await;
    let a = ElasticJob::start(&bed, &client, "ml", "ja", (1, 12, 7), Behaviour::Honest, None).await;
    let b = ElasticJob::start(&bed, &client, "ml", "jb", (1, 12, 5), Behaviour::Honest, None).await;
    let config = "controller:\n  grow_stabilization: 1h\nservices:\n  - {name: nginx, namespace: web, hpa: nginx}\n";
    // With the adapters on: their job watches (Deployments, StatefulSets) run the same loop.
    let flags: Vec<&str> = FLAGS.iter().copied().chain(["--adapters"]).collect();
    let controller = Controller::start(&bed, config, &flags).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = a.commands().len() + b.commands().len();

    // Blocking, while the masters keep serving on the runtime's other thread.
    tokio::task::block_in_place(|| bed.restart_apiserver());
    let restarts = eventually(Duration::from_secs(30), "watch restarts to be counted", || {
        let c = &controller;
        async move {
            let m = c.metrics().await;
            let total: f64 = ["nodes", "pods", "horizontalpodautoscalers", "services"]
                .iter()
                .map(|k| cluster::metric_value(&m, &format!("colocate_watch_restarts_total{{kind=\"{k}\"}}")))
                .sum();
            (total >= 1.0).then_some(total)
        }
    })
    .await;
    eprintln!("watch restarts counted: {restarts}");
    let adapters = eventually(Duration::from_secs(30), "adapter watch restarts to be exported", || {
        let c = &controller;
        async move {
            let n = cluster::metric_value(&c.metrics().await, "colocate_watch_restarts_total{kind=\"adapter_jobs\"}");
            (n >= 1.0).then_some(n)
        }
    })
    .await;
    eprintln!("adapter job watch restarts: {adapters}");
    // The controller still sees changes made after the restart and acts on them.
    let client = cluster::client(&bed).await;
    set_hpa(&client, 2, 6).await;
    eventually(Duration::from_secs(20), "a shrink after the restart", || {
        let n = a.commands().len() + b.commands().len();
        let shrank = a.commands().iter().chain(&b.commands()).any(|c| c.reason == "online-headroom");
        async move { (n > before && shrank).then_some(()) }
    })
    .await;
    assert!(controller.metric("colocate_reflectors_ready").await == 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_and_no_command_is_sent_twice() {
    let bed = bed().await;
    let client = cluster::two_nodes_with_nginx(&bed).await;
    let a = ElasticJob::start(&bed, &client, "ml", "ja", (1, 12, 6), Behaviour::Honest, None).await;
    let b = ElasticJob::start(&bed, &client, "ml", "jb", (1, 12, 6), Behaviour::Honest, None).await;
    let config = "controller:\n  grow_stabilization: 3s\nservices:\n  - {name: nginx, namespace: web, hpa: nginx}\n";
    let first = Controller::start(&bed, config, FLAGS).await;
    let second = Controller::start(&bed, config, FLAGS).await;
    let leader_of = |m: &str| cluster::metric_value(m, "colocate_leader");
    eventually(Duration::from_secs(10), "one leader", || {
        let (f, s) = (&first, &second);
        async move { (leader_of(&f.metrics().await) + leader_of(&s.metrics().await) == 1.0).then_some(()) }
    })
    .await;
    let (mut leader, follower) =
        if leader_of(&first.metrics().await) == 1.0 { (first, second) } else { (second, first) };
    set_hpa(&client, 2, 6).await;
    eventually(Duration::from_secs(10), "a shrink by the first leader", || {
        let shrank = a.commands().iter().chain(&b.commands()).any(|c| c.reason == "online-headroom");
        async move { shrank.then_some(()) }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    leader.kill();
    let took_over = eventually(Duration::from_secs(15), "the follower to lead", || {
        let f = &follower;
        async move { (f.metric("colocate_leader").await == 1.0).then_some(()) }
    });
    took_over.await;
    // The spike is called off before NGINX scaled: the new leader grows the jobs back.
    set_hpa(&client, 2, 2).await;
    eventually(Duration::from_secs(30), "a grow by the new leader", || {
        let grew = a.commands().iter().chain(&b.commands()).any(|c| c.reason == "grow");
        async move { grew.then_some(()) }
    })
    .await;
    for job in [&a, &b] {
        let targets: Vec<u32> = job.commands().iter().map(|c| c.target).collect();
        assert!(
            targets.windows(2).all(|w| w[0] != w[1]),
            "job {} got the same target twice in a row: {targets:?}",
            job.name
        );
    }
    drop(leader);
}

/// Every `colocate_actuations_total` sample added up: the scale commands this replica finished
/// sending (accepted or not).
fn actuations(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("colocate_actuations_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The leader loses the API server in the middle of a shrink whose master ignores it, so its
/// deadline would delete workers. It still reaches the master (masters are not behind the API
/// server), and its connection comes back once the other replica leads. After it reads that it
/// no longer leads, it must send no command and delete no pod; the other replica takes over and
/// steers the job. The second replica's deadline is long, so within the test any worker deleted
/// would be the first's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_mid_shrink_writes_nothing_once_it_knows_and_the_other_takes_over() {
    let bed = bed().await;
    let client = cluster::two_nodes_with_nginx(&bed).await;
    let job = ElasticJob::start(&bed, &client, "ml", "ja", (2, 14, 12), Behaviour::Ignores, None).await;
    eventually(Duration::from_secs(60), "12 workers bound", || {
        let client = client.clone();
        async move { (pod_counts(&client, "ml", "colocate.dev/role=worker").await.0 == 12).then_some(()) }
    })
    .await;
    let pods = PodRecorder::start(client.clone()).await;

    let proxy = Proxy::start(Proxy::upstream_of(&bed.kubeconfig));
    let dir = tempfile::tempdir().unwrap();
    let through_proxy = dir.path().join("kubeconfig");
    proxy.kubeconfig_through(&bed.kubeconfig, &through_proxy);
    let config = |deadline: &str| {
        format!(
            "controller:\n  release_deadline: {deadline}\nservices:\n  - {{name: nginx, namespace: web, hpa: nginx}}\n"
        )
    };
    let first = Controller::spawn(&through_proxy, &config("6s"), FLAGS);
    first.wait_ready(Duration::from_secs(30)).await;
    eventually(Duration::from_secs(10), "the first replica to lead", || {
        let f = &first;
        async move { (f.metric("colocate_leader").await == 1.0).then_some(()) }
    })
    .await;

    set_hpa(&client, 2, 8).await;
    eventually(Duration::from_secs(10), "a shrink by the first replica", || {
        let shrank = job.commands().iter().any(|c| c.reason == "online-headroom");
        async move { shrank.then_some(()) }
    })
    .await;
    proxy.cut();
    let cut_at = Instant::now();
    let second = Controller::spawn(&bed.kubeconfig, &config("10m"), FLAGS);

    // The first replica steps down by its own renew deadline (2 s after its last renew).
    eventually(Duration::from_secs(5), "the cut-off replica to step down", || {
        let f = &first;
        async move { (f.metric("colocate_leader").await == 0.0).then_some(()) }
    })
    .await;
    let stepped_down = Instant::now();
    let sent_then = actuations(&first.metrics().await);
    let commands_then = job.commands().len();
    eprintln!("the cut-off replica stepped down {:?} after the cut", stepped_down - cut_at);

    eventually(Duration::from_secs(15), "the second replica to lead", || {
        let s = &second;
        async move { (s.metric("colocate_leader").await == 1.0).then_some(()) }
    })
    .await;
    let took_over = Instant::now();
    eprintln!("the second replica took over {:?} after the cut", took_over - cut_at);
    // Between the two, only the first replica could have sent anything.
    let between: Vec<_> = job.commands().into_iter().skip(commands_then).filter(|c| c.at < took_over).collect();
    assert!(between.is_empty(), "the master got commands after the old leader stepped down: {between:?}");

    // The partition heals: the old leader can reach the API server again, past its deadline.
    proxy.heal();
    set_hpa(&client, 8, 10).await;
    eventually(Duration::from_secs(15), "a shrink by the new leader", || {
        let by_new = job.commands().iter().skip(commands_then).any(|c| c.reason == "online-headroom");
        async move { by_new.then_some(()) }
    })
    .await;
    // Past the old leader's 6 s deadline by a margin.
    let past_deadline = (cut_at + Duration::from_secs(10)).saturating_duration_since(Instant::now());
    tokio::time::sleep(past_deadline).await;

    let m = first.metrics().await;
    assert_eq!(cluster::metric_value(&m, "colocate_leader"), 0.0, "the old leader leads again:\n{m}");
    assert_eq!(actuations(&m), sent_then, "the old leader sent commands after it stepped down:\n{m}");
    assert_eq!(
        cluster::metric_value(&m, "colocate_forced_preemptions_total{job=\"ml/ja\"}"),
        0.0,
        "the old leader deleted workers:\n{m}"
    );
    let gone: Vec<String> = pods
        .records()
        .into_iter()
        .filter(|p| matches!(p.role, Role::Worker { .. }) && p.deleting.is_some())
        .map(|p| p.name)
        .collect();
    assert!(gone.is_empty(), "workers were deleted, and the new leader's deadline is 10 minutes away: {gone:?}");
    assert!(actuations(&second.metrics().await) >= 1.0, "the new leader sent no command");
    let dropped: Vec<&str> = m.lines().filter(|l| l.starts_with("colocate_writes_dropped_total{")).collect();
    eprintln!("old leader's dropped writes: {dropped:?}");
    drop(proxy);
}
