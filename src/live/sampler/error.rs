//! What can be wrong with the sampler's configuration (an error at start), and why one attempt to
//! sample a source produced nothing usable (data: counted, logged, and the source goes stale).

use std::time::Duration;

use thiserror::Error;

/// A configuration the sampler cannot work with; names the service and the source.
#[derive(Debug, Error, PartialEq)]
pub enum SamplerError {
    #[error(
        "service {service}: {source_name}: a promql source needs a Prometheus server (run.prometheus_url or \
         --prometheus-url)"
    )]
    NoPrometheus { service: String, source_name: &'static str },
    #[error("service {service}: {source_name}: the promql query is empty")]
    EmptyQuery { service: String, source_name: &'static str },
    #[error("prometheus_url `{url}`: {problem}")]
    PrometheusUrl { url: String, problem: String },
    #[error("service {service}: {source_name}: scrape url `{url}`: {problem}")]
    ScrapeUrl { service: String, source_name: &'static str, url: String, problem: String },
    #[error("service {service}: {source_name}: `{metric}` is not a Prometheus metric name")]
    MetricName { service: String, source_name: &'static str, metric: String },
    #[error("sample_stale_after must be longer than 0s")]
    StaleAfterZero,
    #[error("HTTP client: {0}")]
    Http(String),
}

/// Why one sampling attempt gave no usable sample.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum SampleError {
    #[error("unreachable: {0}")]
    Unreachable(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("Prometheus answered {error_type}: {message}")]
    Prometheus { error_type: String, message: String },
    #[error("bad response: {0}")]
    BadResponse(String),
    #[error("the query returned no series")]
    NoSeries,
    #[error("metric `{0}` not found in the scrape")]
    MissingMetric(String),
    #[error("metric `{metric}` is a {found}: {hint}")]
    WrongType { metric: String, found: &'static str, hint: &'static str },
    #[error("summary `{0}` has no 0.99 quantile")]
    NoP99Quantile(String),
    #[error("histogram `{0}` has no +Inf bucket")]
    NoInfBucket(String),
    #[error("odd metric value {0}")]
    OddValue(f64),
    #[error("negative load {0}")]
    NegativeLoad(f64),
}

impl SampleError {
    /// A stable name of the variant: failures are logged when this changes, not on every round,
    /// so a Prometheus that stays down logs once.
    pub fn kind(&self) -> &'static str {
        match self {
            SampleError::Unreachable(_) => "unreachable",
            SampleError::Timeout(_) => "timeout",
            SampleError::Status { .. } => "http_status",
            SampleError::Prometheus { .. } => "prometheus",
            SampleError::BadResponse(_) => "bad_response",
            SampleError::NoSeries => "no_series",
            SampleError::MissingMetric(_) => "missing_metric",
            SampleError::WrongType { .. } => "wrong_type",
            SampleError::NoP99Quantile(_) => "no_p99_quantile",
            SampleError::NoInfBucket(_) => "no_inf_bucket",
            SampleError::OddValue(_) => "odd_value",
            SampleError::NegativeLoad(_) => "negative_load",
        }
    }
}
