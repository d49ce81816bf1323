//! The sampler against the real things (Debian packages, all on 127.0.0.1): NGINX with
//! `stub_status`, prometheus-nginx-exporter, a Prometheus server scraping the exporter and itself
//! every second, and a bounded `wrk` load. Shows that the sampled request rate rises with the
//! load and falls after it, through PromQL and through a direct scrape of the exporter; that the
//! controller's snapshot follows the readings; and that with Prometheus killed the readings go
//! stale and the error and staleness metrics count it.
//!
//! Every process is killed when its guard drops, also when a test panics. A missing tool fails
//! the test with the `apt-get install` line that provides it.
//! `cargo test --release --test sampler_real -- --nocapture` prints the sampled numbers.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use colocate::core::Snapshot;
use colocate::live::clock;
use colocate::live::config::{MetricSource, ServiceSource};
use colocate::live::sampler::{Sampler, ServiceReading};
use colocate::live::state::ClusterState;
use colocate::live::view::{snapshot, Inputs, OnlineService};
use colocate::telemetry::metrics::{
    Metrics, SAMPLES_STALE_TOTAL, SAMPLE_AGE_SECONDS, SAMPLE_ERRORS_TOTAL, SERVICE_LOAD,
};
use support::process::{free_port, path, require, wait_http, write, Proc};
use support::prometheus::Prometheus;
use tempfile::TempDir;

/// How often the sampler samples in these tests, and Prometheus scrapes (1 s).
const ROUND: Duration = Duration::from_millis(500);
/// Rate window of the PromQL queries: five 1 s scrapes.
const RATE: &str = "sum(rate(nginx_http_requests_total[5s]))";
/// Generous bound for anything to happen (start-up, a rate window filling or emptying).
const PATIENCE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampled_request_rate_follows_wrk_load_and_the_controller_view_follows_it() {
    show_logs();
    let stack = Stack::start().await;
    let services = [
        service("web", "nginx", promql(RATE), None),
        service("web", "nginx-direct", scrape(&stack.exporter_metrics(), "nginx_http_requests_total"), None),
        // Prometheus's own /metrics: a counter with many series and a real latency histogram
        // (NGINX's stub_status has no latency).
        service(
            "monitoring",
            "prometheus",
            scrape(&stack.prometheus_metrics(), "prometheus_http_requests_total"),
            scrape(&stack.prometheus_metrics(), "prometheus_http_request_duration_seconds"),
        ),
        service("web", "broken-query", promql("sum(rate(nginx_http_requests_total[5s])"), None),
        service("web", "missing-metric", scrape(&stack.exporter_metrics(), "nginx_no_such_metric"), None),
    ];
    let metrics = Arc::new(Metrics::new());
    let sampler = Arc::new(
        Sampler::new(
            &services,
            Some(&stack.prometheus_url()),
            Duration::from_secs(10),
            Duration::from_secs(30),
            metrics.clone(),
        )
        .expect("a valid configuration")
        .with_timeout(Duration::from_secs(2)),
    );
    let running = Running::start(&sampler);
    let loads = ["web/nginx", "web/nginx-direct"];

    // Idle: only the exporter's and the sampler's own requests (a few per second).
    wait_for("both rates sampled for a full rate window", || {
        let r = sampler.readings(clock::now());
        loads.iter().all(|k| r[*k].load.len() >= 10)
    })
    .await;
    let idle_readings = sampler.readings(clock::now());
    let idle = latest_loads(&idle_readings, &loads);
    let warm_errors = count(&metrics, SAMPLE_ERRORS_TOTAL, "web/nginx", Some("load"));

    // Load: wrk for 6 s; the highest reading of each source, and the readings at the highest.
    let mut wrk = stack.wrk(Duration::from_secs(6));
    let mut peak = BTreeMap::<String, f64>::new();
    let mut peak_readings = idle_readings.clone();
    let started = Instant::now();
    while !wrk.exited() {
        assert!(started.elapsed() < PATIENCE, "wrk ran past its -d bound");
        let readings = sampler.readings(clock::now());
        for (key, value) in latest_loads(&readings, &loads) {
            if value > peak.get(&key).copied().unwrap_or(0.0) {
                peak.insert(key.clone(), value);
                if key == "web/nginx" {
                    peak_readings = readings.clone();
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let wrk_summary = wrk.output_line("Requests/sec");

    // After: back to idle within the rate window (and a margin).
    let mut after = BTreeMap::new();
    wait_for("both rates to fall below a hundredth of their peak", || {
        after = latest_loads(&sampler.readings(clock::now()), &loads);
        loads.iter().all(|k| after[*k] < peak[*k] / 100.0)
    })
    .await;
    let after_readings = sampler.readings(clock::now());

    eprintln!("wrk -t1 -c4 -d6s: {wrk_summary}");
    for key in loads {
        eprintln!("{key}: idle {:.1} req/s, peak {:.1} req/s, after {:.1} req/s", idle[key], peak[key], after[key]);
    }
    for key in loads {
        assert!(peak[key] > 100.0 && peak[key] > 10.0 * idle[key], "{key}: idle {idle:?}, peak {peak:?}");
    }

    // The controller's view: the snapshot's service load is the sampler's reading at each phase.
    let view_at = |readings: &BTreeMap<String, ServiceReading>| view(&services, readings);
    let (idle_view, peak_view, after_view) =
        (view_at(&idle_readings), view_at(&peak_readings), view_at(&after_readings));
    for (snap, readings) in [(&idle_view, &idle_readings), (&peak_view, &peak_readings), (&after_view, &after_readings)]
    {
        let service = snap.services.iter().find(|s| s.name == "web/nginx").expect("web/nginx in the snapshot");
        let sampled: Vec<(Duration, f64)> = readings["web/nginx"].load.iter().map(|s| (s.at, s.value)).collect();
        assert_eq!(service.load.iter().map(|s| (s.at, s.value)).collect::<Vec<_>>(), sampled);
    }
    let last = |snap: &Snapshot| snapshot_load(snap, "web/nginx");
    eprintln!(
        "snapshot web/nginx load: idle {:.1}, peak {:.1}, after {:.1}",
        last(&idle_view),
        last(&peak_view),
        last(&after_view)
    );
    assert!(last(&peak_view) > 10.0 * last(&idle_view) && last(&after_view) < last(&peak_view) / 10.0);

    // A real histogram (p99 from bucket deltas) and a multi-series counter from Prometheus itself.
    let prometheus = &after_readings["monitoring/prometheus"];
    let p99 = prometheus.p99.expect("a p99 from Prometheus's request duration histogram");
    eprintln!("monitoring/prometheus: {:.1} req/s, p99 {p99:?}", prometheus.load.last().map_or(0.0, |s| s.value));
    assert!(p99 > Duration::ZERO && p99 < Duration::from_secs(10), "{p99:?}");
    assert!(!prometheus.load.is_empty());

    // Failures are data: Prometheus's parse error and the missing metric are counted, and the
    // working sources did not fail once warm, under load or after.
    assert!(count(&metrics, SAMPLE_ERRORS_TOTAL, "web/broken-query", Some("load")) >= 1.0);
    assert!(count(&metrics, SAMPLE_ERRORS_TOTAL, "web/missing-metric", Some("load")) >= 1.0);
    assert!(after_readings["web/broken-query"].load.is_empty() && after_readings["web/missing-metric"].load.is_empty());
    assert_eq!(count(&metrics, SAMPLE_ERRORS_TOTAL, "web/nginx", Some("load")), warm_errors);
    assert!(metrics.encode().contains(&format!("{SERVICE_LOAD}{{service=\"web/nginx\"}} ")));
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_down_makes_readings_stale_and_is_counted() {
    show_logs();
    let mut stack = Stack::start().await;
    let p99 = "histogram_quantile(0.99, sum by (le) (rate(prometheus_http_request_duration_seconds_bucket[5s])))";
    let services = [
        service("web", "nginx", promql(RATE), promql(p99)),
        service("web", "nginx-direct", scrape(&stack.exporter_metrics(), "nginx_http_requests_total"), None),
    ];
    let stale_after = Duration::from_secs(3);
    let metrics = Arc::new(Metrics::new());
    let sampler = Arc::new(
        Sampler::new(&services, Some(&stack.prometheus_url()), stale_after, Duration::from_secs(30), metrics.clone())
            .expect("a valid configuration")
            .with_timeout(Duration::from_secs(1)),
    );
    let running = Running::start(&sampler);
    wait_for("load and p99 through Prometheus", || {
        let r = &sampler.readings(clock::now())["web/nginx"];
        !r.load.is_empty() && r.p99.is_some()
    })
    .await;
    let before = view(&services, &sampler.readings(clock::now()));
    let latency = service_latency(&before, "web/nginx");
    assert!(latency.p99.is_some() && latency.slack().is_some(), "{latency:?}");

    let errors = |source| count(&metrics, SAMPLE_ERRORS_TOTAL, "web/nginx", Some(source));
    let stale = |source| count(&metrics, SAMPLES_STALE_TOTAL, "web/nginx", Some(source));
    let errors_before = [errors("load"), errors("latency")];
    // A source counts stale from its first round until a sample arrives (the p99 query needs a
    // few seconds of history), so the counters need not be 0 here; fresh sources add nothing.
    let stale_before = [stale("load"), stale("latency")];
    tokio::time::sleep(2 * ROUND).await;
    assert_eq!([stale("load"), stale("latency")], stale_before, "fresh sources counted stale");
    let killed = Instant::now();
    stack.kill_prometheus();
    wait_for("web/nginx readings to go stale", || {
        let r = &sampler.readings(clock::now())["web/nginx"];
        r.load.is_empty() && r.p99.is_none()
    })
    .await;
    let gone_after = killed.elapsed();
    tokio::time::sleep(2 * ROUND).await; // a round or two past staleness, for the counters

    let readings = sampler.readings(clock::now());
    let after = view(&services, &readings);
    let latency = service_latency(&after, "web/nginx");
    assert_eq!((latency.p99, latency.slack()), (None, None), "latency unknown: the core grows nothing on its nodes");
    assert!(after.services.iter().find(|s| s.name == "web/nginx").is_some_and(|s| s.load.is_empty()));
    assert!(!readings["web/nginx-direct"].load.is_empty(), "the direct scrape does not need Prometheus");

    let age = count(&metrics, SAMPLE_AGE_SECONDS, "web/nginx", Some("load"));
    eprintln!(
        "Prometheus killed: readings gone after {gone_after:.1?} (stale_after {stale_after:?}); errors load {} -> {} \
         latency {} -> {}, stale load {} -> {} latency {} -> {}, sample age {age:.1} s",
        errors_before[0],
        errors("load"),
        errors_before[1],
        errors("latency"),
        stale_before[0],
        stale("load"),
        stale_before[1],
        stale("latency")
    );
    assert!(errors("load") >= errors_before[0] + 2.0 && errors("latency") >= errors_before[1] + 2.0);
    assert!(stale("load") >= stale_before[0] + 1.0 && stale("latency") >= stale_before[1] + 1.0);
    assert!(age > stale_after.as_secs_f64(), "age {age}");
    let text = metrics.encode();
    assert!(!text.contains(&format!("{SERVICE_LOAD}{{service=\"web/nginx\"}}")), "a stale load is not exported");
    assert!(text.contains(&format!("{SERVICE_LOAD}{{service=\"web/nginx-direct\"}}")));
    running.stop().await;
}

// ---- the sampler running in the background

/// The sampler's warnings on the test's output (`--nocapture`): one per failure that starts or
/// changes, not one per round.
fn show_logs() {
    let filter = tracing_subscriber::EnvFilter::new("colocate=info");
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false).with_test_writer().try_init();
}

struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn start(sampler: &Arc<Sampler>) -> Running {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let sampler = sampler.clone();
        let task = tokio::spawn(async move {
            sampler
                .run(ROUND, async {
                    let _ = stopped.await;
                })
                .await
        });
        Running { stop, task }
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("the sampler stops when told")
            .expect("the sampler task did not panic");
    }
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "waited {PATIENCE:?} for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ---- configuration, readings and the controller's view

fn service(namespace: &str, name: &str, load: Option<MetricSource>, latency: Option<MetricSource>) -> ServiceSource {
    ServiceSource {
        name: name.into(),
        namespace: namespace.into(),
        hpa: None,
        selector: Some(format!("app={name}")),
        slo_p99: latency.as_ref().map(|_| Duration::from_millis(250)),
        load,
        latency_p99: latency,
        headroom_replicas: 0,
    }
}

fn promql(query: &str) -> Option<MetricSource> {
    Some(MetricSource::Promql(query.into()))
}

fn scrape(url: &str, metric: &str) -> Option<MetricSource> {
    Some(MetricSource::Scrape { url: url.into(), metric: metric.into() })
}

fn latest_loads(readings: &BTreeMap<String, ServiceReading>, keys: &[&str]) -> BTreeMap<String, f64> {
    keys.iter().map(|k| (k.to_string(), readings[*k].load.last().map_or(0.0, |s| s.value))).collect()
}

/// The snapshot the controller would decide on, with these readings and no cluster objects.
fn view(services: &[ServiceSource], readings: &BTreeMap<String, ServiceReading>) -> Snapshot {
    let online: Vec<OnlineService> = services
        .iter()
        .map(|s| {
            let reading = &readings[&format!("{}/{}", s.namespace, s.name)];
            OnlineService {
                namespace: s.namespace.clone(),
                name: s.name.clone(),
                selector: None,
                hpa: None,
                slo_p99: s.slo_p99,
                headroom_replicas: s.headroom_replicas,
                load: reading.load.clone(),
                p99: reading.p99,
            }
        })
        .collect();
    let inputs = Inputs { now: clock::now(), hpas: &[], services: &online, jobs: &[], usage: &Default::default() };
    let mut state = ClusterState::default();
    let (snap, problems) = snapshot(&mut state, &inputs);
    assert!(problems.is_empty(), "{problems:?}");
    snap.clone()
}

fn snapshot_load(snap: &Snapshot, service: &str) -> f64 {
    let s = snap.services.iter().find(|s| s.name == service).expect("service in the snapshot");
    s.load.last().map_or(0.0, |s| s.value)
}

fn service_latency(snap: &Snapshot, service: &str) -> colocate::core::Latency {
    snap.services.iter().find(|s| s.name == service).and_then(|s| s.latency).expect("a service with an SLO")
}

/// A sample's value in `/metrics` (0 when the series does not exist).
fn count(metrics: &Metrics, name: &str, service: &str, source: Option<&str>) -> f64 {
    let labels = match source {
        Some(source) => format!("service=\"{service}\",source=\"{source}\""),
        None => format!("service=\"{service}\""),
    };
    let prefix = format!("{name}{{{labels}}} ");
    metrics.encode().lines().find_map(|l| l.strip_prefix(&prefix)?.parse().ok()).unwrap_or(0.0)
}

// ---- the processes

/// NGINX, its exporter and Prometheus on ports picked here, files in a temporary directory.
struct Stack {
    nginx_port: u16,
    exporter_port: u16,
    // Processes before the directory: fields drop in order, and the processes use it.
    _nginx: Proc,
    _exporter: Proc,
    prometheus: Prometheus,
    wrk_bin: PathBuf,
    dir: TempDir,
}

impl Stack {
    async fn start() -> Stack {
        let nginx_bin = require("nginx", "nginx");
        let exporter_bin = require("prometheus-nginx-exporter", "prometheus-nginx-exporter");
        let wrk_bin = require("wrk", "wrk");
        let dir = tempfile::Builder::new().prefix("colocate-sampler-").tempdir().expect("a temporary directory");
        let (nginx_port, exporter_port, prometheus_port) = (free_port(), free_port(), free_port());

        let conf = write(dir.path(), "nginx.conf", &nginx_conf(dir.path(), nginx_port));
        let nginx_args = ["-p", &path(dir.path()), "-c", &path(&conf), "-e", &path(&dir.path().join("error.log"))];
        let nginx = Proc::spawn(dir.path(), "nginx", &nginx_bin, nginx_args.map(String::from));
        wait_http(&nginx, &format!("http://127.0.0.1:{nginx_port}/stub_status"), "Active connections", PATIENCE).await;

        let exporter_args = [
            format!("-nginx.scrape-uri=http://127.0.0.1:{nginx_port}/stub_status"),
            format!("-web.listen-address=127.0.0.1:{exporter_port}"),
        ];
        let exporter = Proc::spawn(dir.path(), "exporter", &exporter_bin, exporter_args);
        wait_http(&exporter, &format!("http://127.0.0.1:{exporter_port}/metrics"), "nginx_up 1", PATIENCE).await;

        let config = prometheus_conf(exporter_port, prometheus_port);
        let prometheus = Prometheus::start(dir.path(), prometheus_port, &config).await;
        Stack { nginx_port, exporter_port, _nginx: nginx, _exporter: exporter, prometheus, wrk_bin, dir }
    }

    fn prometheus_url(&self) -> String {
        self.prometheus.url()
    }

    fn prometheus_metrics(&self) -> String {
        self.prometheus.metrics_url()
    }

    fn exporter_metrics(&self) -> String {
        format!("http://127.0.0.1:{}/metrics", self.exporter_port)
    }

    /// A bounded load on NGINX: one thread, four connections, `duration`.
    fn wrk(&self, duration: Duration) -> Proc {
        let args = ["-t1", "-c4", "--timeout", "2s", &format!("-d{}s", duration.as_secs())].map(String::from);
        let url = format!("http://127.0.0.1:{}/", self.nginx_port);
        Proc::spawn(self.dir.path(), "wrk", &self.wrk_bin, args.into_iter().chain([url]))
    }

    /// Prometheus dies (SIGKILL): the fault under test.
    fn kill_prometheus(&mut self) {
        self.prometheus.kill();
    }
}

fn nginx_conf(dir: &Path, port: u16) -> String {
    let d = path(dir);
    // One process in the foreground (no master, no daemon): killing it leaves nothing behind.
    format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 256; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/client_body;\n  proxy_temp_path {d}/proxy;\n  \
         fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  \
         server {{\n    listen 127.0.0.1:{port};\n    location = /stub_status {{ stub_status; }}\n    \
         location / {{ return 200 \"ok\\n\"; }}\n  }}\n}}\n"
    )
}

fn prometheus_conf(exporter_port: u16, prometheus_port: u16) -> String {
    format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: nginx\n    \
         static_configs: [{{targets: ['127.0.0.1:{exporter_port}']}}]\n  - job_name: prometheus\n    \
         static_configs: [{{targets: ['127.0.0.1:{prometheus_port}']}}]\n"
    )
}
