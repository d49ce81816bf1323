//! One metric out of a `/metrics` page (Prometheus text format, parsed by `prometheus-parse`),
//! summed or kept per series as its type needs:
//!
//! | type | load | latency |
//! |---|---|---|
//! | counter (also `_count`/`_sum` of a histogram or summary) | per series, for a rate | error |
//! | gauge, untyped | sum over series | maximum over series (seconds) |
//! | summary | error | maximum of the `quantile="0.99"` series |
//! | histogram | error | buckets per series, for a p99 between scrapes |
//!
//! `prometheus-parse` only types a sample whose name is exactly a `# TYPE` line's, so counters
//! in the OpenMetrics format (`# TYPE x counter`, samples `x_total`) and the `_count` and `_sum`
//! of histograms and summaries come out untyped; the `# TYPE` lines are read here too so that
//! they still count as counters.

use std::collections::{BTreeMap, HashMap};

use prometheus_parse::{SampleType, Scrape, Value};

use super::error::SampleError;
use super::Signal;

/// What one scrape says about a metric.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reading {
    /// A number used as is.
    Value(f64),
    /// Cumulative counter value per series (labels as text).
    Counter(BTreeMap<String, f64>),
    /// Cumulative bucket counts per series: (upper bound, count), by bound.
    Histogram(BTreeMap<String, Vec<(f64, f64)>>),
}

/// Reads `metric` from the exposition `text` as `signal` needs it. A histogram may be named by
/// its family (`x_seconds`) or its buckets (`x_seconds_bucket`).
pub(crate) fn read_metric(text: &str, metric: &str, signal: Signal) -> Result<Reading, SampleError> {
    let families = family_types(text);
    let name = match metric.strip_suffix("_bucket") {
        Some(stem) if families.get(stem) == Some(&SampleType::Histogram) => stem,
        _ => metric,
    };
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .map_err(|e| SampleError::BadResponse(format!("unreadable metrics page: {e}")))?;
    let series: Vec<_> = scrape.samples.iter().filter(|s| s.metric == name).collect();
    let Some(first) = series.first() else {
        return Err(SampleError::MissingMetric(metric.to_string()));
    };
    let kind = match &first.value {
        Value::Counter(_) => Kind::Counter,
        Value::Untyped(_) if is_counter(name, &families) => Kind::Counter,
        Value::Gauge(_) | Value::Untyped(_) => Kind::Plain,
        Value::Summary(_) => Kind::Summary,
        Value::Histogram(_) => Kind::Histogram,
    };
    let wrong = |found: &'static str, hint: &'static str| SampleError::WrongType { metric: metric.into(), found, hint };
    let plain_values = || series.iter().filter_map(|s| plain(&s.value));
    match (kind, signal) {
        (Kind::Counter, Signal::Load) => {
            Ok(Reading::Counter(series.iter().filter_map(|s| Some((s.labels.to_string(), plain(&s.value)?))).collect()))
        }
        (Kind::Plain, Signal::Load) => Ok(Reading::Value(plain_values().sum())),
        (Kind::Plain, Signal::Latency) => Ok(Reading::Value(plain_values().fold(f64::NEG_INFINITY, f64::max))),
        (Kind::Summary, Signal::Latency) => summary_p99(&series, metric),
        (Kind::Histogram, Signal::Latency) => histogram(&series, metric),
        (Kind::Counter, Signal::Latency) => Err(wrong("counter", LATENCY_HINT)),
        (Kind::Summary, Signal::Load) => Err(wrong("summary", LOAD_HINT)),
        (Kind::Histogram, Signal::Load) => Err(wrong("histogram", LOAD_HINT)),
    }
}

const LATENCY_HINT: &str = "a latency needs a histogram, a summary or a gauge in seconds";
const LOAD_HINT: &str = "name its _count for a request rate";

/// How a metric's samples are to be read.
#[derive(Clone, Copy)]
enum Kind {
    /// Cumulative counts.
    Counter,
    /// A gauge or untyped number.
    Plain,
    Summary,
    Histogram,
}

/// Sorted buckets per series; every series needs its `+Inf` bucket (the total count).
fn histogram(series: &[&prometheus_parse::Sample], metric: &str) -> Result<Reading, SampleError> {
    let mut per_series = BTreeMap::new();
    for s in series {
        if let Value::Histogram(buckets) = &s.value {
            let mut buckets: Vec<(f64, f64)> = buckets.iter().map(|b| (b.less_than, b.count)).collect();
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            if buckets.last().is_none_or(|b| b.0 != f64::INFINITY) {
                return Err(SampleError::NoInfBucket(metric.to_string()));
            }
            per_series.insert(s.labels.to_string(), buckets);
        }
    }
    Ok(Reading::Histogram(per_series))
}

/// The number of a counter, gauge or untyped sample.
fn plain(v: &Value) -> Option<f64> {
    match v {
        Value::Counter(x) | Value::Gauge(x) | Value::Untyped(x) => Some(*x),
        Value::Histogram(_) | Value::Summary(_) => None,
    }
}

/// The worst `quantile="0.99"` over the summary's series (p99s do not add).
fn summary_p99(series: &[&prometheus_parse::Sample], metric: &str) -> Result<Reading, SampleError> {
    let p99s: Vec<f64> = series
        .iter()
        .filter_map(|s| match &s.value {
            Value::Summary(qs) => qs.iter().find(|q| (q.quantile - 0.99).abs() < 1e-9).map(|q| q.count),
            _ => None,
        })
        .collect();
    if p99s.is_empty() {
        return Err(SampleError::NoP99Quantile(metric.to_string()));
    }
    Ok(Reading::Value(p99s.into_iter().fold(f64::NEG_INFINITY, f64::max)))
}

/// Family name -> type, from the `# TYPE` lines.
fn family_types(text: &str) -> HashMap<&str, SampleType> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.strip_prefix('#')?.split_whitespace();
            (words.next()? == "TYPE").then_some(())?;
            Some((words.next()?, SampleType::parse(words.next()?)))
        })
        .collect()
}

/// Whether samples named `name` are cumulative counts: a counter, an OpenMetrics counter's
/// `_total`, or the `_count` or `_sum` of a histogram or summary.
fn is_counter(name: &str, families: &HashMap<&str, SampleType>) -> bool {
    let family = |suffix: &str| name.strip_suffix(suffix).and_then(|stem| families.get(stem).copied());
    families.get(name) == Some(&SampleType::Counter)
        || family("_total") == Some(SampleType::Counter)
        || [family("_count"), family("_sum")]
            .iter()
            .any(|t| matches!(t, Some(SampleType::Histogram | SampleType::Summary)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exporter's page (prometheus-nginx-exporter 0.11, trimmed).
    const NGINX: &str = "\
# HELP nginx_connections_active Active client connections
# TYPE nginx_connections_active gauge
nginx_connections_active 3
# HELP nginx_http_requests_total Total http requests
# TYPE nginx_http_requests_total counter
nginx_http_requests_total 18234
# HELP nginx_up Status of the last metric scrape
# TYPE nginx_up gauge
nginx_up 1
";

    const HISTOGRAM: &str = "\
# TYPE http_request_duration_seconds histogram
http_request_duration_seconds_bucket{handler=\"/a\",le=\"0.1\"} 8
http_request_duration_seconds_bucket{handler=\"/a\",le=\"0.5\"} 9
http_request_duration_seconds_bucket{handler=\"/a\",le=\"+Inf\"} 10
http_request_duration_seconds_sum{handler=\"/a\"} 1.5
http_request_duration_seconds_count{handler=\"/a\"} 10
http_request_duration_seconds_bucket{handler=\"/b\",le=\"0.1\"} 1
http_request_duration_seconds_bucket{handler=\"/b\",le=\"0.5\"} 2
http_request_duration_seconds_bucket{handler=\"/b\",le=\"+Inf\"} 2
http_request_duration_seconds_sum{handler=\"/b\"} 0.3
http_request_duration_seconds_count{handler=\"/b\"} 2
";

    const SUMMARY: &str = "\
# TYPE rpc_duration_seconds summary
rpc_duration_seconds{service=\"a\",quantile=\"0.5\"} 0.01
rpc_duration_seconds{service=\"a\",quantile=\"0.99\"} 0.2
rpc_duration_seconds{service=\"b\",quantile=\"0.99\"} 0.3
rpc_duration_seconds_sum{service=\"a\"} 12
rpc_duration_seconds_count{service=\"a\"} 100
# TYPE gc_duration_seconds summary
gc_duration_seconds{quantile=\"0.5\"} 0.001
gc_duration_seconds{quantile=\"1\"} 0.004
";

    fn counter(pairs: &[(&str, f64)]) -> Reading {
        Reading::Counter(pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect())
    }

    #[test]
    fn a_counter_is_kept_per_series_for_a_rate() {
        assert_eq!(read_metric(NGINX, "nginx_http_requests_total", Signal::Load), Ok(counter(&[("", 18234.0)])));
    }

    #[test]
    fn a_gauge_is_summed_for_load_and_the_worst_series_for_latency() {
        let text = "# TYPE q gauge\nq{pod=\"a\"} 2\nq{pod=\"b\"} 3.5\n";
        assert_eq!(read_metric(text, "q", Signal::Load), Ok(Reading::Value(5.5)));
        assert_eq!(read_metric(text, "q", Signal::Latency), Ok(Reading::Value(3.5)));
        assert_eq!(read_metric(NGINX, "nginx_connections_active", Signal::Load), Ok(Reading::Value(3.0)));
    }

    #[test]
    fn a_missing_metric_is_named() {
        assert_eq!(
            read_metric(NGINX, "nginx_http_requests", Signal::Load),
            Err(SampleError::MissingMetric("nginx_http_requests".into()))
        );
    }

    #[test]
    fn openmetrics_counters_and_histogram_counts_are_counters() {
        let open = "# TYPE requests counter\nrequests_total{code=\"200\"} 7\nrequests_total{code=\"500\"} 1\n# EOF\n";
        assert_eq!(
            read_metric(open, "requests_total", Signal::Load),
            Ok(counter(&[("code=\"200\"", 7.0), ("code=\"500\"", 1.0)]))
        );
        assert_eq!(
            read_metric(HISTOGRAM, "http_request_duration_seconds_count", Signal::Load),
            Ok(counter(&[("handler=\"/a\"", 10.0), ("handler=\"/b\"", 2.0)]))
        );
        let err = read_metric(open, "requests_total", Signal::Latency).unwrap_err();
        assert_eq!(err.kind(), "wrong_type", "{err}");
    }

    #[test]
    fn a_histogram_keeps_sorted_buckets_per_series() {
        let expected = Reading::Histogram(
            [
                ("handler=\"/a\"".to_string(), vec![(0.1, 8.0), (0.5, 9.0), (f64::INFINITY, 10.0)]),
                ("handler=\"/b\"".to_string(), vec![(0.1, 1.0), (0.5, 2.0), (f64::INFINITY, 2.0)]),
            ]
            .into_iter()
            .collect(),
        );
        assert_eq!(read_metric(HISTOGRAM, "http_request_duration_seconds", Signal::Latency), Ok(expected.clone()));
        assert_eq!(read_metric(HISTOGRAM, "http_request_duration_seconds_bucket", Signal::Latency), Ok(expected));
        let err = read_metric(HISTOGRAM, "http_request_duration_seconds", Signal::Load).unwrap_err();
        assert_eq!(
            err.to_string(),
            "metric `http_request_duration_seconds` is a histogram: name its _count for a request rate"
        );
        let no_inf = "# TYPE h histogram\nh_bucket{le=\"1\"} 3\n";
        assert_eq!(read_metric(no_inf, "h", Signal::Latency), Err(SampleError::NoInfBucket("h".into())));
    }

    #[test]
    fn a_summary_gives_its_worst_p99() {
        assert_eq!(read_metric(SUMMARY, "rpc_duration_seconds", Signal::Latency), Ok(Reading::Value(0.3)));
        assert_eq!(
            read_metric(SUMMARY, "gc_duration_seconds", Signal::Latency),
            Err(SampleError::NoP99Quantile("gc_duration_seconds".into()))
        );
    }
}
