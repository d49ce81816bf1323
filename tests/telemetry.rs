//! The telemetry server on a real socket (127.0.0.1, free port): health probes, readiness
//! through sync and shutdown, and `/metrics` carrying every metric the dashboards and alerts
//! use (`colocate::telemetry::metrics::ALL`).

use std::sync::Arc;
use std::time::Duration;

use colocate::core::{CapacityMode, Config, Core, Job, Node, Pod, PodClass, Resources, Snapshot};
use colocate::live::master_client::MasterError;
use colocate::telemetry::metrics::{self, ALL};
use colocate::telemetry::{serve, Health, Metrics, OPENMETRICS_CONTENT_TYPE};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

const GI: i64 = 1 << 30;

struct Server {
    base: String,
    health: Health,
    metrics: Arc<Metrics>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start() -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let health = Health::new();
    let metrics = Arc::new(Metrics::new());
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, metrics.clone(), health.clone(), async {
        let _ = stopped.await;
    }));
    Server { base, health, metrics, stop: Some(stop), task }
}

async fn get(url: &str) -> (u16, String, String) {
    colocate::live::tls::install_crypto_provider();
    let resp = reqwest::get(url).await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status().as_u16();
    let ctype = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    (status, ctype, resp.text().await.unwrap())
}

fn pod(name: &str, class: PodClass, cpu: i64) -> Pod {
    Pod {
        name: name.into(),
        class,
        node: Some("n1".into()),
        requests: Resources::new(cpu, GI, 0),
        ready: true,
        terminating_until: None,
        preempted: false,
        started: None,
        usage: None,
    }
}

/// One node, a daemon, an nginx replica and job `a` with two workers that may grow to 6.
fn snapshot() -> Snapshot {
    Snapshot {
        now: Duration::from_secs(60),
        nodes: vec![Node {
            name: "n1".into(),
            allocatable: Resources::new(8000, 32 * GI, 0),
            schedulable: true,
            batch: None,
        }],
        pods: vec![
            pod("ds", PodClass::System, 500),
            pod("nginx-0", PodClass::Online { service: "nginx".into() }, 2000),
            pod("a-0", PodClass::Worker { job: "a".into() }, 1000),
            pod("a-1", PodClass::Worker { job: "a".into() }, 1000),
        ],
        services: vec![],
        jobs: vec![Job {
            name: "a".into(),
            priority: 0,
            weight: 1.0,
            worker: Resources::new(1000, GI, 0),
            min_workers: 1,
            max_workers: 6,
            target_workers: 2,
            rescaling: false,
            rescale_cost: Duration::ZERO,
            release_latency: Duration::from_secs(2),
            work: None,
        }],
    }
}

/// Name of the metric a sample line belongs to (histogram sample suffixes removed).
fn family_of(sample: &str) -> &str {
    let name = sample.split(['{', ' ']).next().unwrap();
    ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name)
}

#[tokio::test]
async fn healthz_is_ok_and_readyz_follows_sync_and_shutdown() {
    let mut s = start().await;

    let (status, _, _) = get(&format!("{}/healthz", s.base)).await;
    assert_eq!(status, 200);
    let (status, _, body) = get(&format!("{}/readyz", s.base)).await;
    assert_eq!(status, 503, "ready before the reflectors synced: {body}");
    assert!(body.contains("not synced"), "{body}");

    s.health.set_synced();
    let (status, _, body) = get(&format!("{}/readyz", s.base)).await;
    assert_eq!(status, 200, "{body}");

    s.health.begin_shutdown();
    let (status, _, body) = get(&format!("{}/readyz", s.base)).await;
    assert_eq!(status, 503, "ready while shutting down: {body}");
    assert!(body.contains("shutting down"), "{body}");
    let (status, _, _) = get(&format!("{}/healthz", s.base)).await;
    assert_eq!(status, 200, "alive while shutting down");

    let (status, _, _) = get(&format!("{}/nothing-here", s.base)).await;
    assert_eq!(status, 404);

    s.stop.take().unwrap().send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), s.task).await.expect("serve returns after shutdown").unwrap().unwrap();
}

#[tokio::test]
async fn shutdown_future_marks_the_controller_not_ready() {
    let mut s = start().await;
    s.health.set_synced();
    assert_eq!(get(&format!("{}/readyz", s.base)).await.0, 200);
    s.stop.take().unwrap().send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), s.task).await.expect("serve returns after shutdown").unwrap().unwrap();
    assert!(s.health.is_shutting_down());
    assert!(s.health.readiness().is_err());
}

#[tokio::test]
async fn metrics_carry_every_named_metric_after_one_decision() {
    let s = start().await;

    let (status, ctype, before) = get(&format!("{}/metrics", s.base)).await;
    assert_eq!(status, 200);
    assert_eq!(ctype, OPENMETRICS_CONTENT_TYPE);
    assert!(before.lines().any(|l| l == format!("{} 0", metrics::REFLECTORS_READY)), "{before}");

    // What one pass of the controller records.
    let snap = snapshot();
    let mut core = Core::new(Config { grow_stabilization: Duration::ZERO, ..Config::default() });
    let decision = core.decide(&snap);
    assert!(!decision.intents.is_empty(), "the job should grow into the spare room");
    s.metrics.observe_decision(&decision, &snap, Duration::from_micros(400));
    // capacity: usage has series of its own: the same cluster, the node carrying batch
    // capacity. A first decision grows nothing (grow_stabilization), so the intents above stand.
    let mut usage = snapshot();
    usage.nodes[0].batch = Some(Resources::new(4000, 16 * GI, 0));
    let usage_decision = Core::new(Config { capacity: CapacityMode::Usage, ..Config::default() }).decide(&usage);
    assert!(usage_decision.intents.is_empty(), "{:?}", usage_decision.intents);
    s.metrics.observe_decision(&usage_decision, &usage, Duration::from_micros(400));
    s.metrics.record_node_status_write("written");
    s.metrics.set_target_utilization(core.config().target_utilization);
    s.metrics.set_sample_stale_after(Duration::from_secs(60));
    s.metrics.record_actuation(None);
    s.metrics.record_actuation(Some(MasterError::BadResponse { message: "html".into() }.kind()));
    s.metrics.set_sample_age("nginx", "latency", Duration::from_secs(3));
    s.metrics.record_stale_sample("nginx", "latency");
    s.metrics.record_watch_restart("pods");
    s.metrics.set_leader(true);
    s.metrics.set_master_up("ml/a", true);
    s.metrics.record_forced_preemptions("ml/a", 2);
    s.metrics.record_decision();
    s.metrics.set_service_reading(
        "web/nginx",
        Some(120.5),
        Some(Duration::from_millis(80)),
        Some(Duration::from_millis(250)),
    );
    s.metrics.record_sample_error("web/nginx", "load");
    s.health.set_synced();

    let (status, ctype, text) = get(&format!("{}/metrics", s.base)).await;
    assert_eq!(status, 200);
    assert_eq!(ctype, OPENMETRICS_CONTENT_TYPE);
    assert!(text.ends_with("# EOF\n"), "no EOF marker:\n{text}");

    // Every line is a descriptor or a sample `name{labels} value` with a numeric value.
    let mut samples: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.starts_with("# HELP ") || line.starts_with("# TYPE ") || line.starts_with("# UNIT ") || line == "# EOF"
        {
            continue;
        }
        let (name, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {line:?}"));
        assert!(name.starts_with("colocate_"), "unprefixed metric: {line:?}");
        let v = value.replace("+Inf", "inf");
        assert!(v.parse::<f64>().is_ok(), "value of {line:?} is not a number");
        samples.push(line);
    }

    for name in ALL {
        assert!(samples.iter().any(|l| family_of(l) == name), "{name} missing from /metrics:\n{text}");
    }

    let has = |line: String| assert!(samples.contains(&line.as_str()), "no `{line}` in:\n{text}");
    has(format!("{} 1", metrics::REFLECTORS_READY));
    has(format!("{} 1", metrics::LEADER));
    has(format!("{} 0.9", metrics::TARGET_UTILIZATION_RATIO));
    has(format!("{}{{reason=\"grow\"}} 1", metrics::INTENTS_TOTAL));
    has(format!("{}{{outcome=\"error\",error=\"bad_response\"}} 1", metrics::ACTUATIONS_TOTAL));
    has(format!("{}{{job=\"a\"}} 2", metrics::JOB_WORKERS));
    has(format!("{}{{class=\"training\"}} 2.0", metrics::CPU_ALLOCATION_CORES));
    has(format!("{}_count 2", metrics::DECISION_DURATION_SECONDS));
    has(format!("{}{{node=\"n1\",resource=\"cpu\",unit=\"core\"}} 4.0", metrics::NODE_BATCH_CAPACITY));
    has(format!("{}{{outcome=\"written\"}} 1", metrics::NODE_STATUS_WRITES_TOTAL));
    has(format!("{}_total{{job=\"ml/a\"}} 2", metrics::FORCED_PREEMPTIONS_TOTAL.trim_end_matches("_total")));
    has(format!("{}{{service=\"web/nginx\"}} 0.25", metrics::SERVICE_SLO_P99_SECONDS));
    has(format!("{}{{service=\"web/nginx\"}} 120.5", metrics::SERVICE_LOAD));
    has(format!("{}{{job=\"a\"}} 6", metrics::JOB_MAX_WORKERS));
    has(format!("{}{{service=\"nginx\"}} 2.0", metrics::SERVICE_TRAINING_CPU_CORES));
    has(format!("{} 60.0", metrics::SAMPLE_STALE_AFTER_SECONDS));
}
