use super::*;

fn service(name: &str, load: Option<MetricSource>, latency: Option<MetricSource>) -> ServiceSource {
    ServiceSource {
        name: name.into(),
        namespace: "web".into(),
        hpa: Some(name.into()),
        selector: None,
        slo_p99: Some(Duration::from_millis(250)),
        load,
        latency_p99: latency,
        headroom_replicas: 0,
    }
}

fn promql(q: &str) -> Option<MetricSource> {
    Some(MetricSource::Promql(q.into()))
}

fn scrape(url: &str, metric: &str) -> Option<MetricSource> {
    Some(MetricSource::Scrape { url: url.into(), metric: metric.into() })
}

fn new_sampler(services: &[ServiceSource], prometheus: Option<&str>) -> Result<Sampler, SamplerError> {
    Sampler::new(services, prometheus, Duration::from_secs(60), Duration::from_secs(30), Arc::new(Metrics::new()))
}

fn error_text(services: &[ServiceSource], prometheus: Option<&str>) -> String {
    new_sampler(services, prometheus).err().expect("a configuration error").to_string()
}

#[test]
fn unusable_configurations_are_refused_naming_the_service_and_source() {
    let rate = promql("sum(rate(nginx_http_requests_total[1m]))");
    assert_eq!(
        error_text(&[service("nginx", rate.clone(), None)], None),
        "service web/nginx: load: a promql source needs a Prometheus server (run.prometheus_url or --prometheus-url)"
    );
    assert_eq!(
        error_text(&[service("nginx", rate, None)], Some("prometheus:9090")),
        "prometheus_url `prometheus:9090`: scheme `prometheus` is not http or https"
    );
    assert_eq!(
        error_text(&[service("nginx", None, scrape("ftp://10.0.0.1/metrics", "x"))], None),
        "service web/nginx: latency: scrape url `ftp://10.0.0.1/metrics`: scheme `ftp` is not http or https"
    );
    assert_eq!(
        error_text(&[service("nginx", scrape("http://10.0.0.1:9113/metrics", "nginx-requests"), None)], None),
        "service web/nginx: load: `nginx-requests` is not a Prometheus metric name"
    );
    assert_eq!(
        error_text(&[service("nginx", promql("  "), None)], Some("http://127.0.0.1:9090")),
        "service web/nginx: load: the promql query is empty"
    );
    let no_stale = Sampler::new(&[], None, Duration::ZERO, Duration::from_secs(30), Arc::new(Metrics::new()));
    assert_eq!(no_stale.err(), Some(SamplerError::StaleAfterZero));
}

#[test]
fn every_service_has_a_reading_even_before_any_sample() {
    let services = [
        service("nginx", promql("sum(rate(x[1m]))"), promql("histogram_quantile(0.99, y)")),
        service("api", scrape("http://127.0.0.1:9113/metrics", "nginx_http_requests_total"), None),
        service("quiet", None, None),
    ];
    let sampler = new_sampler(&services, Some("http://127.0.0.1:9090/")).expect("valid");
    let readings = sampler.readings(crate::live::clock::now());
    assert_eq!(readings.keys().collect::<Vec<_>>(), ["web/api", "web/nginx", "web/quiet"]);
    assert!(readings.values().all(|r| r.load.is_empty() && r.p99.is_none()));
}

#[test]
fn values_the_core_cannot_use_are_errors() {
    assert_eq!(check_value(Signal::Load, 12.5), Ok(12.5));
    assert_eq!(check_value(Signal::Load, 0.0), Ok(0.0));
    assert_eq!(check_value(Signal::Load, -1.0), Err(SampleError::NegativeLoad(-1.0)));
    assert_eq!(check_value(Signal::Latency, -0.1), Err(SampleError::OddValue(-0.1)));
    assert_eq!(check_value(Signal::Latency, f64::INFINITY), Err(SampleError::OddValue(f64::INFINITY)));
    assert!(matches!(check_value(Signal::Load, f64::NAN), Err(SampleError::OddValue(v)) if v.is_nan()));
    assert_eq!(SampleError::OddValue(f64::NAN).to_string(), "odd metric value NaN");
}

#[test]
fn metric_names_and_excerpts() {
    for good in ["nginx_http_requests_total", "_x", "job:rate:5m", "a1"] {
        assert!(is_metric_name(good), "{good}");
    }
    for bad in ["", "1x", "a-b", "a b", "x{}"] {
        assert!(!is_metric_name(bad), "{bad}");
    }
    assert_eq!(body_excerpt(b"  short\n"), "short");
    let long = "é".repeat(300);
    assert_eq!(body_excerpt(long.as_bytes()), format!("{}...", "é".repeat(200)));
}

/// A port nothing listens on: bound, then released.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test]
async fn an_unreachable_endpoint_is_counted_and_readings_stay_empty() {
    let port = closed_port();
    let services = [service("nginx", promql("up"), scrape(&format!("http://127.0.0.1:{port}/metrics"), "p99"))];
    let metrics = Arc::new(Metrics::new());
    let prometheus = format!("http://127.0.0.1:{port}");
    let sampler =
        Sampler::new(&services, Some(&prometheus), Duration::from_secs(5), Duration::from_secs(30), metrics.clone())
            .expect("valid")
            .with_timeout(Duration::from_secs(2));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = sampler.run(Duration::from_millis(50), async {
        let _ = stopped.await;
    });
    let stopper = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = stop.send(());
    };
    tokio::join!(run, stopper);
    let text = metrics.encode();
    let errors = |source: &str| {
        let prefix = format!("colocate_sample_errors_total{{service=\"web/nginx\",source=\"{source}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(&prefix)?.parse::<u64>().ok()).unwrap_or(0)
    };
    assert!(errors("load") >= 2 && errors("latency") >= 2, "several rounds ran and failed:\n{text}");
    assert!(!text.contains("colocate_service_load{"), "no load series without a sample:\n{text}");
    let reading = &sampler.readings(crate::live::clock::now())["web/nginx"];
    assert!(reading.load.is_empty() && reading.p99.is_none(), "{reading:?}");
}

#[tokio::test]
async fn every_round_wakes_the_decision_loop_even_when_it_fails() {
    let port = closed_port();
    let services = [service("nginx", promql("up"), scrape(&format!("http://127.0.0.1:{port}/metrics"), "p99"))];
    let wake = Arc::new(tokio::sync::Notify::new());
    let prometheus = format!("http://127.0.0.1:{port}");
    let sampler = Sampler::new(
        &services,
        Some(&prometheus),
        Duration::from_secs(5),
        Duration::from_secs(30),
        Arc::new(Metrics::new()),
    )
    .expect("valid")
    .with_timeout(Duration::from_secs(2))
    .with_wake(wake.clone());
    let woken = tokio::time::timeout(Duration::from_millis(50), wake.notified()).await;
    assert!(woken.is_err(), "nothing sampled yet, nothing to decide on");
    sampler.sample_once().await;
    let woken = tokio::time::timeout(Duration::from_secs(1), wake.notified()).await;
    assert!(woken.is_ok(), "a round (here, failed ones: staleness changes too) wakes the decider");
}
