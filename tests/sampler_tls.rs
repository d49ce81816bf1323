//! The sampler over https: against a real Prometheus (Debian's) that serves TLS and asks for a
//! client certificate, with certificates the test makes; and the bearer token a managed
//! Prometheus wants, sent with queries and never to scrape targets.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::Router;
use colocate::live::clock;
use colocate::live::config::{MetricSource, ServiceSource};
use colocate::live::sampler::Sampler;
use colocate::live::tls::TlsFiles;
use colocate::telemetry::metrics::Metrics;
use support::certs::Ca;
use support::process::{free_port, write};
use support::prometheus::Prometheus;

fn service(name: &str, load: MetricSource) -> ServiceSource {
    ServiceSource {
        name: name.into(),
        namespace: "web".into(),
        hpa: None,
        selector: Some(format!("app={name}")),
        slo_p99: None,
        load: Some(load),
        latency_p99: None,
        headroom_replicas: 0,
    }
}

fn sampler(services: &[ServiceSource], prometheus: &str, tls: &TlsFiles) -> Sampler {
    let loaded = tls.load("run.prometheus_tls").expect("usable TLS files");
    Sampler::new(services, Some(prometheus), Duration::from_secs(60), Duration::from_secs(30), Arc::new(Metrics::new()))
        .expect("a valid configuration")
        .with_timeout(Duration::from_secs(5))
        .with_tls(&loaded)
        .expect("a client")
}

/// The newest load sample of each service after one round.
async fn one_round(sampler: &Sampler) -> BTreeMap<String, Option<f64>> {
    sampler.sample_once().await;
    sampler.readings(clock::now()).into_iter().map(|(k, r)| (k, r.load.last().map(|s| s.value))).collect()
}

#[tokio::test]
async fn the_sampler_queries_a_real_prometheus_over_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, clients) = (Ca::new("prometheus CA"), Ca::new("controller clients CA"));
    let server = ca.issue(&["localhost", "127.0.0.1"]);
    let client = clients.issue(&["colocate"]);
    let d = dir.path();
    let web = format!(
        "tls_server_config:\n  cert_file: {}\n  key_file: {}\n  client_auth_type: RequireAndVerifyClientCert\n  \
         client_ca_file: {}\n",
        write(d, "prometheus.crt", &server.cert_pem).display(),
        write(d, "prometheus.key", &server.key_pem).display(),
        write(d, "clients-ca.crt", &clients.pem).display(),
    );
    let mutual = TlsFiles {
        ca_file: Some(write(d, "ca.crt", &ca.pem)),
        cert_file: Some(write(d, "colocate.crt", &client.cert_pem)),
        key_file: Some(write(d, "colocate.key", &client.key_pem)),
    };
    let ready = mutual.load("test").unwrap().client_builder().no_proxy().build().unwrap();
    let port = free_port();
    let _prometheus = Prometheus::start_tls(d, port, "global:\n  scrape_interval: 15s\n", &web, &ready).await;
    let url = format!("https://localhost:{port}");
    let services = [service("nginx", MetricSource::Promql("vector(42)".into()))];

    let loads = one_round(&sampler(&services, &url, &mutual)).await;
    assert_eq!(loads["web/nginx"], Some(42.0), "the query's value over mutual TLS");

    // Without the client certificate, or trusting another CA, the query fails: no sample.
    let ca_only = TlsFiles { ca_file: mutual.ca_file.clone(), ..TlsFiles::default() };
    let other = TlsFiles { ca_file: Some(write(d, "other.crt", &Ca::new("other").pem)), ..mutual.clone() };
    for (what, tls) in [("no client certificate", ca_only), ("another CA", other)] {
        let loads = one_round(&sampler(&services, &url, &tls)).await;
        assert_eq!(loads["web/nginx"], None, "{what}");
    }
}

/// Every request's path and Authorization header.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

#[tokio::test]
async fn the_prometheus_token_goes_with_queries_and_never_to_scrape_targets() {
    // A server standing in for a managed Prometheus (which checks a token; Debian's does not)
    // and an exporter: it records the Authorization header of every request.
    let seen: Seen = Arc::default();
    let record = |seen: Seen, path: &'static str| {
        move |headers: HeaderMap| {
            let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_string);
            seen.lock().unwrap().push((path.to_string(), auth.clone()));
            async move {
                if path == "/metrics" {
                    return (StatusCode::OK, "requests_total 10\n".to_string());
                }
                if auth.as_deref() != Some("Bearer t0ken") {
                    return (StatusCode::UNAUTHORIZED, "{\"status\":\"error\",\"error\":\"no token\"}".to_string());
                }
                let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs_f64();
                let body = format!(
                    "{{\"status\":\"success\",\"data\":{{\"resultType\":\"vector\",\"result\":[{{\"metric\":{{}},\"value\":[{now},\"7\"]}}]}}}}"
                );
                (StatusCode::OK, body)
            }
        }
    };
    let app = Router::new()
        .route("/api/v1/query", get(record(seen.clone(), "/api/v1/query")))
        .route("/metrics", get(record(seen.clone(), "/metrics")));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let services = [
        service("queried", MetricSource::Promql("sum(rate(requests_total[1m]))".into())),
        service("scraped", MetricSource::Scrape { url: format!("{base}/metrics"), metric: "requests_total".into() }),
    ];
    let without = sampler(&services, &base, &TlsFiles::default());
    assert_eq!(one_round(&without).await["web/queried"], None, "refused without the token");
    let with = sampler(&services, &base, &TlsFiles::default()).with_prometheus_token(Some("t0ken\n")).unwrap();
    assert_eq!(one_round(&with).await["web/queried"], Some(7.0));

    let seen = seen.lock().unwrap().clone();
    let auth_of = |path: &str| seen.iter().filter(|(p, _)| p == path).map(|(_, a)| a.clone()).collect::<Vec<_>>();
    assert_eq!(auth_of("/api/v1/query"), [None, Some("Bearer t0ken".to_string())]);
    assert_eq!(auth_of("/metrics"), [None, None], "scrape targets never get the token");
}
