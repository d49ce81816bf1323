//! One source of one service (its load or its latency): where it comes from, how to fetch it
//! (the only I/O), and what was learnt from it (samples, the previous scrape for rates, whether
//! it is failing), updated under a lock that is never held across an await.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use reqwest::Url;
use tracing::{info, warn};

use super::error::SampleError;
use super::exposition::read_metric;
use super::history::History;
use super::rate::{Scraped, Scrapes};
use super::{body_excerpt, check_value, promql, transport_error, Signal};
use crate::core::Sample;
use crate::live::clock;
use crate::telemetry::metrics::Metrics;

/// Where a source's numbers come from, checked at start.
#[derive(Debug)]
pub(crate) enum Origin {
    Promql { base: Url, query: String },
    Scrape { url: Url, metric: String },
}

/// What one fetch brought back, not yet interpreted.
#[derive(Debug)]
pub(crate) enum Fetched {
    /// An evaluated query, at Prometheus's evaluation time.
    Evaluated(Sample),
    /// A `/metrics` page and when it arrived.
    Page { at: Duration, text: String },
}

#[derive(Debug)]
pub(crate) struct Source {
    pub service: String,
    pub signal: Signal,
    pub origin: Origin,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    history: History,
    /// The scrapes that could be read, for counter rates and histogram deltas over at least
    /// `rate::MIN_SPAN`.
    scrapes: Scrapes,
    /// Kind of the current failure and how many attempts in a row failed.
    failing: Option<(&'static str, u64)>,
    /// Whether the source was stale when last published (logged on change).
    stale: bool,
    /// When the first round was published: a source that has yielded no sample yet is as old
    /// as that, so one that never works turns stale like one that stopped working.
    sampling_since: Option<Duration>,
}

impl Source {
    pub fn new(service: String, signal: Signal, origin: Origin) -> Source {
        Source { service, signal, origin, state: Mutex::new(State::default()) }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state stays consistent between statements; a panic elsewhere must not stop sampling.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fetches the source once (no timeout here: the caller bounds the whole attempt).
    /// `prometheus_auth` goes with PromQL queries only.
    pub async fn fetch(
        &self,
        http: &reqwest::Client,
        prometheus_auth: Option<&reqwest::header::HeaderValue>,
        timeout: Duration,
    ) -> Result<Fetched, SampleError> {
        match &self.origin {
            Origin::Promql { base, query } => {
                let sample = promql::query(http, prometheus_auth, base, query, self.signal, timeout).await?;
                // Stamped by Prometheus's wall clock.
                Ok(Fetched::Evaluated(Sample { at: clock::from_wall(sample.at), ..sample }))
            }
            Origin::Scrape { url, .. } => {
                let response = http
                    .get(url.clone())
                    // The text format prometheus-parse reads; OpenMetrics would be chosen otherwise.
                    .header(reqwest::header::ACCEPT, "text/plain;version=0.0.4;q=1.0, */*;q=0.1")
                    .send()
                    .await
                    .map_err(transport_error)?;
                let status = response.status();
                let body = response.bytes().await.map_err(transport_error)?;
                if !status.is_success() {
                    return Err(SampleError::Status { status: status.as_u16(), body: body_excerpt(&body) });
                }
                Ok(Fetched::Page { at: clock::now(), text: String::from_utf8_lossy(&body).into_owned() })
            }
        }
    }

    /// Interprets one attempt, keeps a sample it yields (forgetting those older than `keep`),
    /// and counts and logs a failure. Failures are logged when they start or change kind and
    /// when they end, not on every attempt, so a Prometheus that stays down logs once.
    pub fn record(&self, attempt: Result<Fetched, SampleError>, keep: Duration, metrics: &Metrics) {
        let mut state = self.state();
        let outcome = attempt.and_then(|fetched| self.interpret(&mut state, fetched));
        match outcome {
            Ok(sample) => {
                if let Some((kind, attempts)) = state.failing.take() {
                    info!(service = %self.service, source = self.signal.label(), after = attempts, failure = kind,
                        "sampling works again");
                }
                if let Some(sample) = sample {
                    state.history.push(sample, keep);
                }
            }
            Err(error) => {
                metrics.record_sample_error(&self.service, self.signal.label());
                match &mut state.failing {
                    Some((kind, attempts)) if *kind == error.kind() => *attempts += 1,
                    failing => {
                        warn!(service = %self.service, source = self.signal.label(), cause = %error,
                            "sampling failed; the source goes stale unless it recovers");
                        *failing = Some((error.kind(), 1));
                    }
                }
            }
        }
    }

    /// The checked sample in `fetched`, if it yields one (a counter's first scrape does not).
    fn interpret(&self, state: &mut State, fetched: Fetched) -> Result<Option<Sample>, SampleError> {
        let sample = match (fetched, &self.origin) {
            (Fetched::Evaluated(sample), _) => Some(sample),
            (Fetched::Page { at, text }, Origin::Scrape { metric, .. }) => {
                let current = Scraped { at, reading: read_metric(&text, metric, self.signal)? };
                state.scrapes.value_for(current).map(|value| Sample { at, value })
            }
            // `fetch` never pairs these; an error rather than a panic all the same.
            (Fetched::Page { .. }, Origin::Promql { .. }) => {
                return Err(SampleError::BadResponse("a metrics page for a PromQL source".into()))
            }
        };
        sample.map(|s| check_value(self.signal, s.value).map(|_| s)).transpose()
    }

    /// Samples within `window` of `now` while fresh.
    pub fn fresh(&self, now: Duration, window: Duration, stale_after: Duration) -> Vec<Sample> {
        self.state().history.fresh(now, window, stale_after)
    }

    pub fn latest_fresh(&self, now: Duration, stale_after: Duration) -> Option<Sample> {
        self.state().history.latest_fresh(now, stale_after)
    }

    /// Exports the newest sample's age (with no sample yet, the time since the first round) and
    /// counts the source stale if it is (once per round); logs when it turns stale or fresh
    /// again.
    pub fn publish_age(&self, now: Duration, stale_after: Duration, metrics: &Metrics) {
        let mut state = self.state();
        let since = *state.sampling_since.get_or_insert(now);
        let age = match state.history.newest() {
            Some(newest) => now.saturating_sub(newest.at),
            None => now.saturating_sub(since),
        };
        metrics.set_sample_age(&self.service, self.signal.label(), age);
        let stale = age > stale_after;
        if stale {
            metrics.record_stale_sample(&self.service, self.signal.label());
        }
        if stale != state.stale {
            if stale {
                warn!(service = %self.service, source = self.signal.label(), age = ?age,
                    "no fresh sample: readings dropped until one arrives");
            } else {
                info!(service = %self.service, source = self.signal.label(), "fresh samples again");
            }
            state.stale = stale;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape_source(signal: Signal, metric: &str) -> Source {
        let url = Url::parse("http://127.0.0.1:9113/metrics").unwrap();
        Source::new("web/nginx".into(), signal, Origin::Scrape { url, metric: metric.into() })
    }

    fn page(at: u64, text: &str) -> Result<Fetched, SampleError> {
        Ok(Fetched::Page { at: Duration::from_secs(at), text: text.into() })
    }

    fn count(metrics: &Metrics, name: &str, source: &str) -> f64 {
        let prefix = format!("{name}{{service=\"web/nginx\",source=\"{source}\"}} ");
        metrics.encode().lines().find_map(|l| l.strip_prefix(&prefix)?.parse().ok()).unwrap_or(0.0)
    }

    const KEEP: Duration = Duration::from_secs(300);

    #[test]
    fn scraped_counter_pages_become_rate_samples() {
        let metrics = Metrics::new();
        let src = scrape_source(Signal::Load, "reqs_total");
        src.record(page(100, "# TYPE reqs_total counter\nreqs_total 100\n"), KEEP, &metrics);
        src.record(page(102, "# TYPE reqs_total counter\nreqs_total 300\n"), KEEP, &metrics);
        src.record(page(103, "# TYPE reqs_total counter\nreqs_total 5\n"), KEEP, &metrics);
        src.record(page(104, "# TYPE reqs_total counter\nreqs_total 45\n"), KEEP, &metrics);
        let values: Vec<(u64, f64)> =
            src.fresh(Duration::from_secs(104), KEEP, KEEP).iter().map(|s| (s.at.as_secs(), s.value)).collect();
        assert_eq!(values, [(102, 100.0), (104, 40.0)], "first scrape and the reset yield nothing");
        assert_eq!(count(&metrics, "colocate_sample_errors_total", "load"), 0.0);
    }

    #[test]
    fn failures_are_counted_and_leave_earlier_samples_in_place() {
        let metrics = Metrics::new();
        let src = scrape_source(Signal::Latency, "p99_seconds");
        src.record(page(100, "p99_seconds 0.2\n"), KEEP, &metrics);
        src.record(page(101, "other 1\n"), KEEP, &metrics);
        src.record(Err(SampleError::Unreachable("connection refused".into())), KEEP, &metrics);
        src.record(page(103, "p99_seconds NaN\n"), KEEP, &metrics);
        assert_eq!(count(&metrics, "colocate_sample_errors_total", "latency"), 3.0);
        assert_eq!(src.latest_fresh(Duration::from_secs(103), KEEP).map(|s| s.value), Some(0.2));
    }

    #[test]
    fn odd_values_are_errors() {
        let metrics = Metrics::new();
        let src = scrape_source(Signal::Load, "inflight");
        for text in ["inflight -3\n", "inflight +Inf\n"] {
            src.record(page(1, text), KEEP, &metrics);
        }
        assert_eq!(count(&metrics, "colocate_sample_errors_total", "load"), 2.0);
        assert!(src.fresh(Duration::from_secs(1), KEEP, KEEP).is_empty());
    }

    #[test]
    fn a_stale_source_is_counted_once_per_round_and_its_age_exported() {
        let metrics = Metrics::new();
        let src = scrape_source(Signal::Load, "inflight");
        src.publish_age(Duration::from_secs(100), Duration::from_secs(10), &metrics);
        assert_eq!(count(&metrics, "colocate_sample_age_seconds", "load"), 0.0, "nothing sampled yet");
        src.record(page(100, "inflight 4\n"), KEEP, &metrics);
        src.publish_age(Duration::from_secs(105), Duration::from_secs(10), &metrics);
        assert_eq!(count(&metrics, "colocate_samples_stale_total", "load"), 0.0);
        assert_eq!(count(&metrics, "colocate_sample_age_seconds", "load"), 5.0);
        for now in [111, 112] {
            src.publish_age(Duration::from_secs(now), Duration::from_secs(10), &metrics);
        }
        assert_eq!(count(&metrics, "colocate_samples_stale_total", "load"), 2.0);
        assert_eq!(count(&metrics, "colocate_sample_age_seconds", "load"), 12.0);
    }

    #[test]
    fn a_source_that_never_yields_a_sample_ages_from_the_first_round_and_turns_stale() {
        let metrics = Metrics::new();
        let src = scrape_source(Signal::Latency, "p99_seconds");
        let stale_after = Duration::from_secs(10);
        for now in [100, 105, 110] {
            src.record(Err(SampleError::Unreachable("connection refused".into())), KEEP, &metrics);
            src.publish_age(Duration::from_secs(now), stale_after, &metrics);
        }
        assert_eq!(count(&metrics, "colocate_sample_age_seconds", "latency"), 10.0, "aged since the first round");
        assert_eq!(count(&metrics, "colocate_samples_stale_total", "latency"), 0.0, "10 s old is not stale yet");
        src.publish_age(Duration::from_secs(111), stale_after, &metrics);
        assert_eq!(count(&metrics, "colocate_sample_age_seconds", "latency"), 11.0);
        assert_eq!(count(&metrics, "colocate_samples_stale_total", "latency"), 1.0);
        // The first sample makes it fresh; its age is the sample's own from then on.
        src.record(page(112, "p99_seconds 0.2\n"), KEEP, &metrics);
        src.publish_age(Duration::from_secs(113), stale_after, &metrics);
        assert_eq!(count(&metrics, "colocate_sample_age_seconds", "latency"), 1.0);
        assert_eq!(count(&metrics, "colocate_samples_stale_total", "latency"), 1.0);
    }
}
