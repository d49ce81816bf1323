//! Service load and p99 latency, sampled from a Prometheus server's query API or scraped from a
//! `/metrics` endpoint, with timestamps, for the decision core.
//!
//! - [`Sampler::sample_once`] samples every source of every service concurrently, each attempt
//!   bounded by a timeout; a failure is data: counted (`colocate_sample_errors_total`), logged
//!   when it starts, changes or ends, and the source's earlier samples stay until they are stale.
//! - [`Sampler::readings`] is what is known at a time: per service its fresh load samples and
//!   its p99 if fresh. A source whose newest sample is older than `stale_after` yields nothing
//!   (no load trend, latency unknown: the core grows no training on the service's nodes).
//! - Each round exports `colocate_sample_age_seconds` (for a source with no sample yet, the time
//!   since the first round), counts each stale source once in `colocate_samples_stale_total`
//!   and sets `colocate_service_load` / `..._latency_p99_seconds`; `stale_after` is exported as
//!   `colocate_sample_stale_after_seconds` for the stale alert.
//!
//! How numbers are read: [`promql`] (instant queries; several series are summed for a load and
//! the worst is taken for a latency) and [`exposition`] with [`rate`] (scrapes: counters become
//! rates between two scrapes, histograms a p99 between two scrapes, summaries their 0.99
//! quantile). Latencies are in seconds, Prometheus's base unit. Plain HTTP only: this build of
//! reqwest has no TLS.

mod error;
mod exposition;
mod history;
mod promql;
mod rate;
mod source;
pub mod usage;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use reqwest::header::HeaderValue;
use reqwest::Url;
use tokio::time::MissedTickBehavior;

pub use error::{SampleError, SamplerError};
use source::{Origin, Source};

use crate::core::Sample;
use crate::live::clock;
use crate::live::config::{http_url, is_metric_name, MetricSource, ServiceSource};
use crate::live::error_chain;
use crate::live::names::object_key;
use crate::live::tls::LoadedTls;
use crate::telemetry::metrics::Metrics;

/// Longest wait for one source in one round, unless [`Sampler::with_timeout`] says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// What a source measures; its label is the `source` label of the sample metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Load,
    Latency,
}

impl Signal {
    pub fn label(self) -> &'static str {
        match self {
            Signal::Load => "load",
            Signal::Latency => "latency",
        }
    }
}

/// What is known about a service now.
#[derive(Debug, Clone, Default)]
pub struct ServiceReading {
    /// Fresh load samples within the history window, oldest first; empty when missing or stale.
    pub load: Vec<Sample>,
    /// The latest p99 if fresh; `None` when missing, failing or stale.
    pub p99: Option<Duration>,
}

struct Service {
    key: String,
    slo: Option<Duration>,
    load: Option<Source>,
    latency: Option<Source>,
}

impl Service {
    fn sources(&self) -> impl Iterator<Item = &Source> {
        self.load.iter().chain(self.latency.iter())
    }
}

/// Samples the configured services. `Send + Sync`: share it with `Arc`.
pub struct Sampler {
    http: reqwest::Client,
    /// `Authorization` sent with PromQL queries (never to scrape URLs).
    prometheus_auth: Option<HeaderValue>,
    services: Vec<Service>,
    stale_after: Duration,
    history: Duration,
    timeout: Duration,
    metrics: Arc<Metrics>,
    /// Told after every round, so that a decision follows each fresh sample.
    wake: Option<Arc<tokio::sync::Notify>>,
}

impl Sampler {
    /// Checks every source (URLs, metric names, a Prometheus server for PromQL sources).
    /// `history` is how much load history [`Sampler::readings`] returns (the core's
    /// `trend_window` and the stale limit: the trend's window ends at the newest sample);
    /// `stale_after` how old a newest sample may be and still count.
    pub fn new(
        services: &[ServiceSource],
        prometheus_url: Option<&str>,
        stale_after: Duration,
        history: Duration,
        metrics: Arc<Metrics>,
    ) -> Result<Sampler, SamplerError> {
        if stale_after.is_zero() {
            return Err(SamplerError::StaleAfterZero);
        }
        let prometheus = prometheus_url
            .map(|url| http_url(url).map_err(|problem| SamplerError::PrometheusUrl { url: url.into(), problem }))
            .transpose()?;
        let services = services
            .iter()
            .map(|s| {
                let key = object_key(&s.namespace, &s.name);
                let source = |signal: Signal, metric: &Option<MetricSource>| -> Result<Option<Source>, SamplerError> {
                    let Some(metric) = metric else { return Ok(None) };
                    Ok(Some(Source::new(key.clone(), signal, origin(&key, signal, metric, prometheus.as_ref())?)))
                };
                Ok(Service {
                    load: source(Signal::Load, &s.load)?,
                    latency: source(Signal::Latency, &s.latency_p99)?,
                    slo: s.slo_p99,
                    key,
                })
            })
            .collect::<Result<Vec<_>, SamplerError>>()?;
        let http = http_client(&LoadedTls::default())?;
        metrics.set_sample_stale_after(stale_after);
        for s in &services {
            for (signal, present) in [(Signal::Load, s.load.is_some()), (Signal::Latency, s.latency.is_some())] {
                if present {
                    metrics.source_configured(&s.key, signal.label());
                }
            }
        }
        Ok(Sampler {
            http,
            prometheus_auth: None,
            services,
            stale_after,
            history,
            timeout: DEFAULT_TIMEOUT,
            metrics,
            wake: None,
        })
    }

    /// Speaks TLS to https sources as `tls` says (by default: the system's roots, no client
    /// certificate).
    pub fn with_tls(mut self, tls: &LoadedTls) -> Result<Sampler, SamplerError> {
        self.http = http_client(tls)?;
        Ok(self)
    }

    /// Sends `Authorization: Bearer <token>` with every PromQL query (a managed Prometheus's
    /// credentials); scrape URLs never get it. `None` sends none.
    pub fn with_prometheus_token(mut self, token: Option<&str>) -> Result<Sampler, SamplerError> {
        self.prometheus_auth = token.map(bearer).transpose()?;
        Ok(self)
    }

    /// Bounds each source's attempt in a round by `timeout` instead of [`DEFAULT_TIMEOUT`].
    pub fn with_timeout(mut self, timeout: Duration) -> Sampler {
        self.timeout = timeout;
        self
    }

    /// Notifies `wake` after every round. The controller passes the decision loop's: without it
    /// a rising load waits for the next watch event or tick (10 s) to be acted on, and on the
    /// real scheduler the first shrink of a spike comes with the HPA's step instead of 4 s
    /// before it, as replay (which decides at every sample) has it.
    pub fn with_wake(mut self, wake: Arc<tokio::sync::Notify>) -> Sampler {
        self.wake = Some(wake);
        self
    }

    /// One round: every source sampled concurrently, each within the timeout; results and
    /// failures recorded, then ages, staleness and readings exported. Never fails.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn sample_once(&self) {
        let keep = self.history.max(self.stale_after);
        let attempts = self.services.iter().flat_map(Service::sources).map(|source| async move {
            let attempt = match tokio::time::timeout(
                self.timeout,
                source.fetch(&self.http, self.prometheus_auth.as_ref(), self.timeout),
            )
            .await
            {
                Ok(result) => result,
                Err(_) => Err(SampleError::Timeout(self.timeout)),
            };
            source.record(attempt, keep, &self.metrics);
        });
        join_all(attempts).await;
        self.publish(clock::now());
        if let Some(wake) = &self.wake {
            wake.notify_one();
        }
    }

    /// Samples every `interval` (the first round at once) until `shutdown` resolves; a round
    /// in flight then is abandoned (its attempts hold no lock across an await).
    pub async fn run(&self, interval: Duration, shutdown: impl Future<Output = ()>) {
        let mut ticker = tokio::time::interval(interval);
        // A slow round (timeouts) is followed by a full interval, not a burst of catch-up rounds.
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                () = async { ticker.tick().await; self.sample_once().await } => {}
            }
        }
    }

    /// Per service key (`namespace/name`), what is known at `now` (on [`clock`]).
    pub fn readings(&self, now: Duration) -> BTreeMap<String, ServiceReading> {
        self.services.iter().map(|s| (s.key.clone(), self.reading(s, now))).collect()
    }

    fn reading(&self, service: &Service, now: Duration) -> ServiceReading {
        ServiceReading {
            load: service.load.as_ref().map(|l| l.fresh(now, self.history, self.stale_after)).unwrap_or_default(),
            p99: service
                .latency
                .as_ref()
                .and_then(|l| l.latest_fresh(now, self.stale_after))
                .and_then(|s| Duration::try_from_secs_f64(s.value).ok()),
        }
    }

    /// Exports sample ages, staleness and each service's current reading.
    fn publish(&self, now: Duration) {
        for service in &self.services {
            for source in service.sources() {
                source.publish_age(now, self.stale_after, &self.metrics);
            }
            let reading = self.reading(service, now);
            self.metrics.set_service_reading(
                &service.key,
                reading.load.last().map(|s| s.value),
                reading.p99,
                service.slo,
            );
        }
    }
}

/// The checked origin of one source.
fn origin(
    service: &str,
    signal: Signal,
    metric: &MetricSource,
    prometheus: Option<&Url>,
) -> Result<Origin, SamplerError> {
    let source_name = signal.label();
    match metric {
        MetricSource::Promql(query) => {
            if query.trim().is_empty() {
                return Err(SamplerError::EmptyQuery { service: service.into(), source_name });
            }
            let base = prometheus.ok_or_else(|| SamplerError::NoPrometheus { service: service.into(), source_name })?;
            Ok(Origin::Promql { base: base.clone(), query: query.clone() })
        }
        MetricSource::Scrape { url, metric } => {
            let parsed = http_url(url).map_err(|problem| SamplerError::ScrapeUrl {
                service: service.into(),
                source_name,
                url: url.clone(),
                problem,
            })?;
            if !is_metric_name(metric) {
                return Err(SamplerError::MetricName { service: service.into(), source_name, metric: metric.clone() });
            }
            Ok(Origin::Scrape { url: parsed, metric: metric.clone() })
        }
    }
}

/// Rejects numbers the core cannot use: NaN and infinities (an idle histogram_quantile, a
/// division by zero) and negative loads or latencies.
pub(crate) fn check_value(signal: Signal, value: f64) -> Result<f64, SampleError> {
    if !value.is_finite() {
        return Err(SampleError::OddValue(value));
    }
    match signal {
        Signal::Load if value < 0.0 => Err(SampleError::NegativeLoad(value)),
        Signal::Latency if value < 0.0 => Err(SampleError::OddValue(value)),
        _ => Ok(value),
    }
}

pub(crate) fn transport_error(e: reqwest::Error) -> SampleError {
    SampleError::Unreachable(error_chain(&e))
}

/// The start of a body, for error messages.
pub(crate) fn body_excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests;

/// `Authorization: Bearer <token>`, marked sensitive (never logged).
pub fn bearer(token: &str) -> Result<HeaderValue, SamplerError> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", token.trim()))
        .map_err(|_| SamplerError::Http("the Prometheus token is not a valid HTTP header value".into()))?;
    value.set_sensitive(true);
    Ok(value)
}

/// The sampler's one HTTP client: TLS as configured; never through a proxy (Prometheus and
/// exporters are reached inside the cluster); a few redirects followed.
pub fn http_client(tls: &LoadedTls) -> Result<reqwest::Client, SamplerError> {
    tls.client_builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::limited(3))
        .build()
        .map_err(|e| SamplerError::Http(error_chain(&e)))
}
