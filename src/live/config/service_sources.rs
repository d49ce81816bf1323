//! The `services:` block of `colocate run`'s configuration: the online services, and where
//! their load and latency come from.

use std::time::Duration;

use reqwest::Url;
use serde::{Deserialize, Deserializer};

use crate::core::config::duration;
use crate::live::selector::LabelSelector;
use crate::yaml::InputError;

fn optional_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

/// An online service: which pods are its replicas and where its load and latency come from.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServiceSource {
    pub name: String,
    pub namespace: String,
    /// HPA whose scale target's pods are this service's replicas.
    #[serde(default)]
    pub hpa: Option<String>,
    /// Or a label selector for its pods (`app=nginx`).
    #[serde(default)]
    pub selector: Option<String>,
    #[serde(default, deserialize_with = "optional_duration")]
    pub slo_p99: Option<Duration>,
    #[serde(default)]
    pub load: Option<MetricSource>,
    #[serde(default)]
    pub latency_p99: Option<MetricSource>,
    /// Replicas' worth of room kept free of training beyond what the service is expected to
    /// need, up to its HPA's `maxReplicas`: standing headroom for loads that step faster than
    /// workers leave (the first pods of a step find room without preempting anyone).
    #[serde(default)]
    pub headroom_replicas: u32,
}

/// Where a number comes from: a PromQL query on the Prometheus server, or a metric scraped
/// directly from a `/metrics` endpoint (summed over its series; a counter becomes a rate).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(try_from = "MetricSourceSpec")]
pub enum MetricSource {
    Promql(String),
    Scrape { url: String, metric: String },
}

/// The YAML form: `{promql: QUERY}` or `{scrape: {url: URL, metric: NAME}}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricSourceSpec {
    promql: Option<String>,
    scrape: Option<ScrapeSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScrapeSpec {
    #[serde(deserialize_with = "scrape_url")]
    url: String,
    #[serde(deserialize_with = "metric_name")]
    metric: String,
}

/// Checked where the file is parsed, so that `check-config` refuses what the sampler would
/// refuse at start, with the key path of the bad value.
fn scrape_url<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let url = String::deserialize(d)?;
    http_url(&url).map_err(|problem| serde::de::Error::custom(format!("`{url}`: {problem}")))?;
    Ok(url)
}

fn metric_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let name = String::deserialize(d)?;
    if !is_metric_name(&name) {
        return Err(serde::de::Error::custom(format!(
            "`{name}` is not a Prometheus metric name ({METRIC_NAME_SYNTAX})"
        )));
    }
    Ok(name)
}

/// An absolute `http://` or `https://` URL with a host: what the sampler can reach. Used by
/// the config checks and by the sampler, so that they cannot disagree.
pub fn http_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|e| e.to_string())?;
    match url.scheme() {
        "http" | "https" if url.host().is_some() => Ok(url),
        "http" | "https" => Err("no host".into()),
        other => Err(format!("scheme `{other}` is not http or https")),
    }
}

/// The Prometheus metric name syntax, as [`is_metric_name`] checks it.
pub const METRIC_NAME_SYNTAX: &str = "[a-zA-Z_:][a-zA-Z0-9_:]*";

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`, the Prometheus metric name syntax.
pub fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

impl TryFrom<MetricSourceSpec> for MetricSource {
    type Error = String;
    fn try_from(spec: MetricSourceSpec) -> Result<Self, String> {
        match (spec.promql, spec.scrape) {
            (Some(q), None) if !q.trim().is_empty() => Ok(MetricSource::Promql(q)),
            (Some(_), None) => Err("promql is empty".into()),
            (None, Some(s)) => Ok(MetricSource::Scrape { url: s.url, metric: s.metric }),
            _ => Err("give exactly one of promql, scrape".into()),
        }
    }
}

impl ServiceSource {
    /// One line for `check-config` and the start-up log.
    pub(super) fn describe(&self) -> String {
        let pods = self
            .hpa
            .as_ref()
            .map_or_else(|| format!("selector {}", self.selector.as_deref().unwrap_or("")), |h| format!("HPA {h}"));
        let mut out = format!("{}/{}: pods by {pods}", self.namespace, self.name);
        if let Some(slo) = self.slo_p99 {
            out.push_str(&format!(", p99 SLO {}", humantime::format_duration(slo)));
        }
        if self.headroom_replicas > 0 {
            out.push_str(&format!(", room kept for {} more replicas", self.headroom_replicas));
        }
        out
    }
}

/// The checks of the services serde cannot make, in the order of the list; `has_prometheus`:
/// whether `run.prometheus_url` is set.
pub(super) fn check(
    services: &[ServiceSource],
    has_prometheus: bool,
    invalid: &impl Fn(&str, String) -> InputError,
) -> Result<(), InputError> {
    let mut names = std::collections::HashSet::new();
    for (i, s) in services.iter().enumerate() {
        let at = |k: &str| format!("services[{i}].{k}");
        if !names.insert((s.namespace.as_str(), s.name.as_str())) {
            return Err(invalid(&at("name"), format!("`{}/{}` is listed twice", s.namespace, s.name)));
        }
        match (&s.hpa, &s.selector) {
            (None, None) => return Err(invalid(&at("hpa"), "give an HPA name or a selector".into())),
            (Some(_), Some(_)) => {
                return Err(invalid(&at("selector"), "give an HPA name or a selector, not both".into()))
            }
            (None, Some(sel)) => {
                let parsed = LabelSelector::parse(sel).map_err(|e| invalid(&at("selector"), e.problem))?;
                if parsed.is_empty() {
                    let problem = "an empty selector would count every pod in the namespace as the service";
                    return Err(invalid(&at("selector"), problem.into()));
                }
            }
            (Some(_), None) => {}
        }
        for (source, metric) in [("load", &s.load), ("latency_p99", &s.latency_p99)] {
            if matches!(metric, Some(MetricSource::Promql(_))) && !has_prometheus {
                return Err(invalid(
                    &at(source),
                    "a promql source needs run.prometheus_url (or --prometheus-url)".into(),
                ));
            }
        }
        if s.latency_p99.is_some() && s.slo_p99.is_none() {
            return Err(invalid(&at("slo_p99"), "a latency_p99 source needs the SLO to compare it with".into()));
        }
        if s.slo_p99.is_some() && s.latency_p99.is_none() {
            // Without a latency source the p99 is never known, and unknown latency holds
            // all growth on the service's nodes for good.
            return Err(invalid(&at("latency_p99"), "an slo_p99 needs a latency_p99 source to compare with".into()));
        }
    }
    Ok(())
}
