//! A real Prometheus server (Debian's `prometheus`) on loopback, killed when dropped, and the
//! parts of its HTTP API the tests read: instant and range queries, label values and rules.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use reqwest::Url;
use serde_json::Value;

use super::process::{path, require, wait_http, wait_http_with, write, Proc};

/// How long Prometheus may take to answer /-/ready.
const START_PATIENCE: Duration = Duration::from_secs(30);

pub struct Prometheus {
    pub port: u16,
    proc: Option<Proc>,
}

impl Prometheus {
    /// Starts Prometheus on 127.0.0.1:`port` with `config` (the text of prometheus.yml); its
    /// configuration, TSDB and log (`prometheus.log`) go in `dir`. Returns once it is ready.
    pub async fn start(dir: &Path, port: u16, config: &str) -> Prometheus {
        let proc = Self::spawn(dir, port, config, None);
        wait_http(&proc, &format!("http://127.0.0.1:{port}/-/ready"), "Ready", START_PATIENCE).await;
        Prometheus { port, proc: Some(proc) }
    }

    /// As [`Prometheus::start`], serving https as `web_config` (Prometheus's web configuration
    /// file: `tls_server_config`) says; `ready` is a client that can reach it over TLS.
    pub async fn start_tls(
        dir: &Path,
        port: u16,
        config: &str,
        web_config: &str,
        ready: &reqwest::Client,
    ) -> Prometheus {
        let proc = Self::spawn(dir, port, config, Some(web_config));
        wait_http_with(ready, &proc, &format!("https://localhost:{port}/-/ready"), "Ready", START_PATIENCE).await;
        Prometheus { port, proc: Some(proc) }
    }

    fn spawn(dir: &Path, port: u16, config: &str, web_config: Option<&str>) -> Proc {
        let bin = require("prometheus", "prometheus");
        let config = write(dir, "prometheus.yml", config);
        let mut args = vec![
            format!("--config.file={}", path(&config)),
            format!("--storage.tsdb.path={}", path(&dir.join("tsdb"))),
            format!("--web.listen-address=127.0.0.1:{port}"),
            "--log.level=warn".to_string(),
        ];
        if let Some(web) = web_config {
            args.push(format!("--web.config.file={}", path(&write(dir, "web.yml", web))));
        }
        Proc::spawn(dir, "prometheus", &bin, args)
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Prometheus's own /metrics.
    pub fn metrics_url(&self) -> String {
        format!("{}/metrics", self.url())
    }

    pub fn api(&self) -> PrometheusApi {
        colocate::live::tls::install_crypto_provider();
        let http = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(10)).build().expect("a client");
        PrometheusApi { base: self.url(), http }
    }

    /// Its output so far (warnings and errors: it runs with --log.level=warn).
    pub fn log_text(&self) -> String {
        self.proc.as_ref().map(Proc::log_text).unwrap_or_default()
    }

    /// SIGKILL: Prometheus dies, as a fault under test.
    pub fn kill(&mut self) {
        drop(self.proc.take());
    }
}

/// One series of a query result: its labels (with `__name__` when the result keeps it) and its
/// (Unix seconds, value) points; one point for an instant query. Values may be NaN or ±Inf.
#[derive(Clone, Debug)]
pub struct Series {
    pub labels: BTreeMap<String, String>,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn has_finite_value(&self) -> bool {
        self.points.iter().any(|(_, v)| v.is_finite())
    }

    /// Points whose value is NaN (what 0/0 gives, e.g. a ratio of rates while nothing happens).
    pub fn nan_points(&self) -> usize {
        self.points.iter().filter(|(_, v)| v.is_nan()).count()
    }
}

/// Prometheus's HTTP API (`/api/v1/...`). Every method returns Prometheus's own error message
/// (`errorType: error`) when the answer's status is not `success`.
pub struct PrometheusApi {
    base: String,
    http: reqwest::Client,
}

impl PrometheusApi {
    /// An instant query at `at` (Unix seconds), or now.
    pub async fn query(&self, expr: &str, at: Option<f64>) -> Result<Vec<Series>, String> {
        let mut params = vec![("query", expr.to_string())];
        if let Some(t) = at {
            params.push(("time", format!("{t:.3}")));
        }
        series(&self.get("query", &params).await?)
    }

    /// A range query from `start` to `end` (Unix seconds) every `step`.
    pub async fn query_range(&self, expr: &str, start: f64, end: f64, step: Duration) -> Result<Vec<Series>, String> {
        let params = [
            ("query", expr.to_string()),
            ("start", format!("{start:.3}")),
            ("end", format!("{end:.3}")),
            ("step", format!("{}s", step.as_secs_f64())),
        ];
        series(&self.get("query_range", &params).await?)
    }

    /// Values of `label` on the series matching `selector` between `start` and `end`: what
    /// Grafana's `label_values(selector, label)` asks.
    pub async fn label_values(&self, label: &str, selector: &str, start: f64, end: f64) -> Result<Vec<String>, String> {
        let params =
            [("match[]", selector.to_string()), ("start", format!("{start:.3}")), ("end", format!("{end:.3}"))];
        let data = self.get(&format!("label/{label}/values"), &params).await?;
        let values = data.as_array().ok_or_else(|| format!("label values of {label}: not a list: {data}"))?;
        Ok(values.iter().filter_map(|v| v.as_str().map(String::from)).collect())
    }

    /// The loaded rule groups with each rule's health, last error and (alerts) state.
    pub async fn rule_groups(&self) -> Result<Vec<Value>, String> {
        let data = self.get("rules", &[]).await?;
        Ok(data["groups"].as_array().cloned().unwrap_or_default())
    }

    /// `data` of a successful answer.
    async fn get(&self, endpoint: &str, params: &[(&str, String)]) -> Result<Value, String> {
        let mut url = Url::parse(&format!("{}/api/v1/{endpoint}", self.base)).expect("a valid URL");
        url.query_pairs_mut().extend_pairs(params.iter().map(|(k, v)| (*k, v.as_str())));
        let response = self.http.get(url.clone()).send().await.map_err(|e| format!("GET {url}: {e}"))?;
        let code = response.status();
        let body: Value = response.json().await.map_err(|e| format!("GET {url}: HTTP {code}, not JSON: {e}"))?;
        if body["status"] != "success" {
            return Err(format!(
                "{}: {}",
                body["errorType"].as_str().unwrap_or("?"),
                body["error"].as_str().unwrap_or("?")
            ));
        }
        Ok(body["data"].clone())
    }
}

/// The series of a query's `data` (`vector`, `matrix` or `scalar`).
fn series(data: &Value) -> Result<Vec<Series>, String> {
    let point = |p: &Value| -> (f64, f64) {
        let value = p[1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
        (p[0].as_f64().unwrap_or(0.0), value)
    };
    let labels = |s: &Value| -> BTreeMap<String, String> {
        let metric = s["metric"].as_object().cloned().unwrap_or_default();
        metric.into_iter().map(|(k, v)| (k, v.as_str().unwrap_or_default().to_string())).collect()
    };
    let result = &data["result"];
    match data["resultType"].as_str() {
        Some("vector") => {
            Ok(rows(result).iter().map(|s| Series { labels: labels(s), points: vec![point(&s["value"])] }).collect())
        }
        Some("matrix") => Ok(rows(result)
            .iter()
            .map(|s| Series { labels: labels(s), points: rows(&s["values"]).iter().map(point).collect() })
            .collect()),
        Some("scalar") => Ok(vec![Series { labels: BTreeMap::new(), points: vec![point(result)] }]),
        other => Err(format!("unexpected result type {other:?}: {data}")),
    }
}

fn rows(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}
