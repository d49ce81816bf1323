//! Instant queries on a Prometheus server's HTTP API (`GET /api/v1/query`).
//!
//! A result is one number with the time Prometheus evaluated it at:
//! - `scalar`: its value;
//! - `vector` of one series: its value; of several series: their **sum** for a load (a query
//!   left per pod or per instance adds up to the service's load) and their **maximum** for a
//!   latency (p99s do not add; the worst one is the conservative reading); the oldest timestamp;
//! - an empty `vector` is [`SampleError::NoSeries`] (nothing to go on: missing);
//! - `status: error` is [`SampleError::Prometheus`] with Prometheus's own message;
//! - `matrix` and `string` results are not numbers the controller can use.
//!
//! Values are checked by [`super::check_value`] (NaN, infinities, negative loads are errors).

use std::time::Duration;

use reqwest::Url;
use serde::de::IgnoredAny;
use serde::Deserialize;

use super::error::SampleError;
use super::{body_excerpt, transport_error, Signal};
use crate::core::Sample;

/// `L`: what of each series' labels is read (nothing, for one number).
#[derive(Deserialize)]
#[serde(bound(deserialize = "L: Deserialize<'de> + Default"))]
struct ApiResponse<L> {
    status: String,
    data: Option<QueryData<L>>,
    #[serde(rename = "errorType")]
    error_type: Option<String>,
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
#[serde(bound(deserialize = "L: Deserialize<'de> + Default"))]
enum QueryData<L> {
    Vector(Vec<VectorSeries<L>>),
    Scalar(PromValue),
    // What these hold is never used: the controller needs one number.
    Matrix(#[allow(dead_code)] IgnoredAny),
    String(#[allow(dead_code)] IgnoredAny),
}

/// One series of a vector with what is read of its labels.
#[derive(Deserialize)]
#[serde(bound(deserialize = "L: Deserialize<'de> + Default"))]
struct VectorSeries<L> {
    #[serde(default)]
    metric: L,
    value: PromValue,
}

/// `[<unix seconds>, "<value>"]`: Prometheus sends values as strings ("NaN", "+Inf" included).
#[derive(Deserialize)]
struct PromValue(f64, String);

impl PromValue {
    fn sample(&self) -> Result<Sample, SampleError> {
        let value = self
            .1
            .parse::<f64>()
            .map_err(|_| SampleError::BadResponse(format!("value `{}` is not a number", self.1)))?;
        let at = Duration::try_from_secs_f64(self.0)
            .map_err(|_| SampleError::BadResponse(format!("timestamp {} is not a Unix time", self.0)))?;
        Ok(Sample { at, value })
    }
}

/// `<base>/api/v1/query?query=<query>&timeout=<timeout>`; a base with a path (a Prometheus
/// behind a prefix, `http://host/prometheus`) keeps it.
pub(crate) fn query_url(base: &Url, query: &str, timeout: Duration) -> Url {
    let mut url = base.clone();
    let path = format!("{}/api/v1/query", base.path().trim_end_matches('/'));
    url.set_path(&path);
    url.query_pairs_mut()
        .clear()
        .append_pair("query", query)
        // Prometheus gives up on its side too rather than computing an answer nobody waits for.
        .append_pair("timeout", &format!("{}ms", timeout.as_millis()));
    url
}

/// Turns an API answer (HTTP status and body) into one sample, unchecked.
pub(crate) fn parse_response(status: u16, body: &[u8], signal: Signal) -> Result<Sample, SampleError> {
    match parse_data::<IgnoredAny>(status, body)? {
        Number::Scalar(v) => v.sample(),
        Number::Vector(series) => combine(&series, signal),
    }
}

/// One series of an instant vector: what was read of its labels (`L`), and its sample,
/// unchecked.
#[derive(Debug, Clone)]
pub(crate) struct LabelledSample<L> {
    pub labels: L,
    pub sample: Sample,
}

/// Turns an API answer into its series, each with the labels `L` reads: a struct of the label
/// names it needs, borrowing from `body` where it can (an answer of 30,000 series is parsed
/// every second in usage mode, so each label copied would be 30,000 allocations), or a map of
/// all. A scalar has no labels to tell one thing from another, so it is an error; an empty
/// vector is [`SampleError::NoSeries`].
pub(crate) fn parse_series<'a, L: Deserialize<'a> + Default>(
    status: u16,
    body: &'a [u8],
) -> Result<Vec<LabelledSample<L>>, SampleError> {
    match parse_data(status, body)? {
        Number::Vector(series) if series.is_empty() => Err(SampleError::NoSeries),
        Number::Vector(series) => {
            series.into_iter().map(|s| Ok(LabelledSample { sample: s.value.sample()?, labels: s.metric })).collect()
        }
        Number::Scalar(_) => {
            Err(SampleError::BadResponse("the query returns a scalar; one labelled series per object is needed".into()))
        }
    }
}

/// What a successful answer can hold that the controller uses.
enum Number<L> {
    Vector(Vec<VectorSeries<L>>),
    Scalar(PromValue),
}

/// The data of a successful answer: a vector or a scalar.
fn parse_data<'a, L: Deserialize<'a> + Default>(status: u16, body: &'a [u8]) -> Result<Number<L>, SampleError> {
    let response: ApiResponse<L> = match serde_json::from_slice(body) {
        Ok(r) => r,
        // Prometheus answers errors (400, 422, 503) with a JSON body too; anything else is
        // something in front of it (a proxy, the wrong port).
        Err(_) if !(200..300).contains(&status) => {
            return Err(SampleError::Status { status, body: body_excerpt(body) })
        }
        Err(e) => return Err(SampleError::BadResponse(format!("not a Prometheus API answer: {e}"))),
    };
    if response.status != "success" {
        return Err(SampleError::Prometheus {
            error_type: response.error_type.unwrap_or_else(|| "an error".into()),
            message: response.error.unwrap_or_else(|| format!("status `{}`", response.status)),
        });
    }
    match response.data {
        None => Err(SampleError::BadResponse("no `data` in a successful answer".into())),
        Some(QueryData::Matrix(_)) => Err(SampleError::BadResponse(
            "the query returns a range vector (matrix); give an instant query, e.g. wrap it in rate()".into(),
        )),
        Some(QueryData::String(_)) => Err(SampleError::BadResponse("the query returns a string".into())),
        Some(QueryData::Vector(series)) => Ok(Number::Vector(series)),
        Some(QueryData::Scalar(value)) => Ok(Number::Scalar(value)),
    }
}

fn combine<L>(series: &[VectorSeries<L>], signal: Signal) -> Result<Sample, SampleError> {
    let samples = series.iter().map(|s| s.value.sample()).collect::<Result<Vec<_>, _>>()?;
    let at = samples.iter().map(|s| s.at).min().ok_or(SampleError::NoSeries)?;
    let values = samples.iter().map(|s| s.value);
    let value = match signal {
        Signal::Load => values.sum(),
        Signal::Latency => values.fold(f64::NEG_INFINITY, f64::max),
    };
    Ok(Sample { at, value })
}

/// Runs one instant query for one number.
pub(crate) async fn query(
    http: &reqwest::Client,
    auth: Option<&reqwest::header::HeaderValue>,
    base: &Url,
    query: &str,
    signal: Signal,
    timeout: Duration,
) -> Result<Sample, SampleError> {
    let (status, body) = get(http, auth, base, query, timeout).await?;
    parse_response(status, &body, signal)
}

/// Runs one instant query; its HTTP status and body, for [`parse_series`].
pub(crate) async fn get(
    http: &reqwest::Client,
    auth: Option<&reqwest::header::HeaderValue>,
    base: &Url,
    query: &str,
    timeout: Duration,
) -> Result<(u16, bytes::Bytes), SampleError> {
    let mut request = http.get(query_url(base, query, timeout));
    if let Some(auth) = auth {
        request = request.header(reqwest::header::AUTHORIZATION, auth.clone());
    }
    let response = request.send().await.map_err(transport_error)?;
    let status = response.status().as_u16();
    // Parsed where it was received: an answer for 30,000 pods is megabytes, and a copy of it
    // each second is memory the allocator may keep.
    let body = response.bytes().await.map_err(transport_error)?;
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// (timestamp, value): `Sample` has no `PartialEq`.
    fn parse(body: &str, signal: Signal) -> Result<(Duration, f64), SampleError> {
        parse_at(200, body, signal)
    }

    fn parse_at(status: u16, body: &str, signal: Signal) -> Result<(Duration, f64), SampleError> {
        parse_response(status, body.as_bytes(), signal).map(|s| (s.at, s.value))
    }

    #[test]
    fn a_vector_of_one_series_is_its_value_at_its_own_timestamp() {
        let body = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{},"value":[1700000000.25,"1234.5"]}]}}"#;
        assert_eq!(parse(body, Signal::Load), Ok((Duration::from_millis(1_700_000_000_250), 1234.5)));
    }

    #[test]
    fn several_series_add_up_for_load_and_take_the_worst_for_latency() {
        let body = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"pod":"a"},"value":[101,"10"]},
            {"metric":{"pod":"b"},"value":[100,"0.25"]},
            {"metric":{"pod":"c"},"value":[101,"5"]}]}}"#;
        assert_eq!(parse(body, Signal::Load), Ok((Duration::from_secs(100), 15.25)));
        assert_eq!(parse(body, Signal::Latency), Ok((Duration::from_secs(100), 10.0)));
    }

    #[test]
    fn a_scalar_is_its_value() {
        let body = r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"0.042"]}}"#;
        assert_eq!(parse(body, Signal::Latency), Ok((Duration::from_secs(1_700_000_000), 0.042)));
    }

    #[test]
    fn an_empty_vector_is_missing() {
        let body = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert_eq!(parse(body, Signal::Load), Err(SampleError::NoSeries));
    }

    #[test]
    fn nan_and_infinities_parse_so_that_the_value_check_can_reject_them() {
        for (text, check) in [("NaN", f64::is_nan as fn(f64) -> bool), ("+Inf", f64::is_infinite)] {
            let body = format!(r#"{{"status":"success","data":{{"resultType":"scalar","result":[1,"{text}"]}}}}"#);
            assert!(check(parse(&body, Signal::Load).unwrap().1), "{text}");
        }
        let body = r#"{"status":"success","data":{"resultType":"scalar","result":[1,"-Inf"]}}"#;
        assert_eq!(parse(body, Signal::Load), Ok((Duration::from_secs(1), f64::NEG_INFINITY)));
    }

    #[test]
    fn a_prometheus_error_carries_its_message_whatever_the_http_status() {
        let body = r#"{"status":"error","errorType":"bad_data","error":"1:6: parse error: unclosed left parenthesis"}"#;
        let expected = Err(SampleError::Prometheus {
            error_type: "bad_data".into(),
            message: "1:6: parse error: unclosed left parenthesis".into(),
        });
        assert_eq!(parse_at(400, body, Signal::Load), expected);
        assert_eq!(parse(body, Signal::Load), expected);
    }

    #[test]
    fn something_that_is_not_prometheus_is_named_by_its_status_or_the_parse_error() {
        assert_eq!(
            parse_at(502, "<html>Bad Gateway</html>", Signal::Load),
            Err(SampleError::Status { status: 502, body: "<html>Bad Gateway</html>".into() })
        );
        let err = parse("<html>hello</html>", Signal::Load).unwrap_err();
        assert!(matches!(&err, SampleError::BadResponse(m) if m.starts_with("not a Prometheus API answer")), "{err}");
        let matrix = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(matches!(parse(matrix, Signal::Load), Err(SampleError::BadResponse(m)) if m.contains("range vector")));
        let bad_value = r#"{"status":"success","data":{"resultType":"scalar","result":[1,"many"]}}"#;
        assert_eq!(
            parse(bad_value, Signal::Load),
            Err(SampleError::BadResponse("value `many` is not a number".into()))
        );
    }

    #[test]
    fn series_keep_their_labels_and_a_scalar_or_nothing_is_refused() {
        let body = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"namespace":"web","pod":"nginx-1"},"value":[1700000000.5,"0.25"]},
            {"metric":{},"value":[1700000000.5,"NaN"]}]}}"#;
        let series: Vec<LabelledSample<BTreeMap<String, String>>> = parse_series(200, body.as_bytes()).unwrap();
        assert_eq!(series.len(), 2);
        assert_eq!(series[0].labels.get("pod").map(String::as_str), Some("nginx-1"));
        assert_eq!((series[0].sample.at, series[0].sample.value), (Duration::from_secs_f64(1700000000.5), 0.25));
        assert!(series[1].labels.is_empty() && series[1].sample.value.is_nan(), "values are checked by the caller");
        let empty = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert_eq!(parse_series::<IgnoredAny>(200, empty.as_bytes()).unwrap_err(), SampleError::NoSeries);
        let scalar = r#"{"status":"success","data":{"resultType":"scalar","result":[1,"3"]}}"#;
        let err = parse_series::<IgnoredAny>(200, scalar.as_bytes()).unwrap_err();
        assert!(matches!(&err, SampleError::BadResponse(m) if m.contains("scalar")), "{err}");
    }

    #[test]
    fn the_query_url_keeps_a_path_prefix_and_encodes_the_query() {
        let base = Url::parse("http://prom.monitoring:9090/prometheus/").unwrap();
        let url = query_url(&base, "sum(rate(x{a=\"b\"}[1m]))", Duration::from_secs(5));
        assert_eq!(url.path(), "/prometheus/api/v1/query");
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert_eq!(pairs, [("query".into(), "sum(rate(x{a=\"b\"}[1m]))".into()), ("timeout".into(), "5000ms".into())]);
        let plain = query_url(&Url::parse("http://127.0.0.1:9090").unwrap(), "up", Duration::from_millis(1500));
        assert_eq!(plain.as_str(), "http://127.0.0.1:9090/api/v1/query?query=up&timeout=1500ms");
    }
}
