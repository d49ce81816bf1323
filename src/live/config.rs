//! `colocate run`'s configuration: flags, environment variables and an optional YAML file,
//! resolved once (flag > environment > file > default) into an immutable `RunConfig`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use reqwest::Url;
use serde::{Deserialize, Deserializer};

use crate::core::config::duration;
use crate::core::Config;
use crate::live::master_client::ClientConfigError;
use crate::live::selector::LabelSelector;
use crate::live::tls::TlsFiles;
use crate::yaml::{self, InputError};

/// Where `run` serves /metrics unless told: loopback, as nothing outside the host needs it
/// there (in a pod the chart sets `0.0.0.0`); not the port `example-master` listens on.
pub const DEFAULT_METRICS_ADDR: ([u8; 4], u16) = ([127, 0, 0, 1], 8080);

/// Flags of `colocate run`; each has an environment variable, and every one may also be given
/// in the config file's `run:` block.
#[derive(Debug, Clone, Default, Args)]
pub struct RunFlags {
    /// YAML file with `controller:`, `run:` and `services:` blocks.
    #[arg(long, env = "COLOCATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Decide and export intents without acting on any job.
    #[arg(long, env = "COLOCATE_DRY_RUN")]
    pub dry_run: bool,
    /// Address of the /metrics, /healthz and /readyz server [default: 127.0.0.1:8080; the chart
    /// sets 0.0.0.0:<metrics.port> so that Prometheus and the kubelet's probes reach it].
    #[arg(long, env = "COLOCATE_METRICS_ADDR", value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// Log format: text or json.
    #[arg(long, env = "COLOCATE_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Decide at least this often, events or not.
    #[arg(long, env = "COLOCATE_TICK", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub tick: Option<Duration>,
    /// Wait this long after a watch event for more before deciding.
    #[arg(long, env = "COLOCATE_DEBOUNCE", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub debounce: Option<Duration>,
    /// Namespace of the leader Lease (defaults to the pod's namespace, POD_NAMESPACE).
    #[arg(long, env = "COLOCATE_LEASE_NAMESPACE", value_name = "NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Name of the leader Lease; replicas sharing it elect one leader (default `colocate`).
    #[arg(long, env = "COLOCATE_LEASE_NAME", value_name = "NAME")]
    pub lease_name: Option<String>,
    /// Prometheus server for service load and latency queries.
    #[arg(long, env = "COLOCATE_PROMETHEUS_URL", value_name = "URL")]
    pub prometheus_url: Option<String>,
    /// PEM bundle of the CA certificates to trust for an https Prometheus (and https scrape
    /// URLs) instead of the system roots.
    #[arg(long, env = "COLOCATE_PROMETHEUS_CA_FILE", value_name = "FILE")]
    pub prometheus_ca_file: Option<PathBuf>,
    /// File holding a bearer token sent to Prometheus (a managed endpoint's credentials).
    #[arg(long, env = "COLOCATE_PROMETHEUS_TOKEN_FILE", value_name = "FILE")]
    pub prometheus_token_file: Option<PathBuf>,
    /// File holding the bearer token sent to job masters.
    #[arg(long, env = "COLOCATE_MASTER_TOKEN_FILE", value_name = "FILE")]
    pub master_token_file: Option<PathBuf>,
    /// PEM bundle of the CA certificates to trust for masters served over https (a Service
    /// port with `appProtocol: https`) instead of the system roots.
    #[arg(long, env = "COLOCATE_MASTER_CA_FILE", value_name = "FILE")]
    pub master_ca_file: Option<PathBuf>,
    /// Leader Lease duration: a follower takes over at most this long after the leader died.
    #[arg(long, env = "COLOCATE_LEASE_DURATION", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub lease_duration: Option<Duration>,
    /// How often every job's master is asked for its status.
    #[arg(long, env = "COLOCATE_STATUS_INTERVAL", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub status_interval: Option<Duration>,
    /// Also drive jobs without a master through Kubernetes adapters (objects labelled
    /// `colocate.dev/elastic: "true"`).
    #[arg(long, env = "COLOCATE_ADAPTERS")]
    pub adapters: bool,
    /// How long one request to a job's master may take (it is retried twice).
    #[arg(long, env = "COLOCATE_MASTER_TIMEOUT", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub master_timeout: Option<Duration>,
    /// Steer only jobs in these namespaces (comma-separated; default: every namespace).
    #[arg(long, env = "COLOCATE_JOB_NAMESPACES", value_delimiter = ',', value_name = "NAMESPACE,...")]
    pub job_namespaces: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// The config file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default)]
    pub controller: Config,
    #[serde(default)]
    pub run: RunFile,
    #[serde(default)]
    pub services: Vec<ServiceSource>,
}

/// `run:` block: the same settings as the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunFile {
    pub dry_run: Option<bool>,
    pub metrics_addr: Option<SocketAddr>,
    pub log_format: Option<LogFormat>,
    #[serde(default, deserialize_with = "optional_duration")]
    pub tick: Option<Duration>,
    #[serde(default, deserialize_with = "optional_duration")]
    pub debounce: Option<Duration>,
    pub lease_namespace: Option<String>,
    pub lease_name: Option<String>,
    pub prometheus_url: Option<String>,
    /// TLS towards Prometheus and scrape URLs: `ca_file`, and `cert_file` with `key_file` for
    /// mTLS.
    pub prometheus_tls: Option<TlsFiles>,
    pub prometheus_token_file: Option<PathBuf>,
    pub master_token_file: Option<PathBuf>,
    /// TLS towards masters served over https, as `prometheus_tls`.
    pub master_tls: Option<TlsFiles>,
    /// Samples older than this count as missing (latency unknown: no growth on its nodes).
    #[serde(default, deserialize_with = "optional_duration")]
    pub sample_stale_after: Option<Duration>,
    /// How often services' load and p99 are sampled; 1 s by default, so a load step shows in a
    /// sample sooner than the HPA's next sync can act on it.
    #[serde(default, deserialize_with = "optional_duration")]
    pub sample_interval: Option<Duration>,
    #[serde(default, deserialize_with = "optional_duration")]
    pub lease_duration: Option<Duration>,
    #[serde(default, deserialize_with = "optional_duration")]
    pub status_interval: Option<Duration>,
    #[serde(default, deserialize_with = "optional_duration")]
    pub master_timeout: Option<Duration>,
    /// Also drive jobs without a master through Kubernetes adapters (`/scale`, Volcano); needs
    /// the RBAC for those kinds (the chart's `adapters` values).
    pub adapters: Option<bool>,
    /// Steer only jobs in these namespaces; unset or empty: every namespace. Services and nodes
    /// are still watched cluster-wide: online pods and workers share nodes across namespaces.
    pub job_namespaces: Option<Vec<String>>,
}

/// The leader Lease's name unless configured.
pub const DEFAULT_LEASE_NAME: &str = "colocate";

/// A Kubernetes object name (RFC 1123 subdomain): lowercase alphanumerics, '-' and '.',
/// starting and ending alphanumeric, at most 253 characters.
fn is_dns_subdomain(name: &str) -> bool {
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    name.len() <= 253
        && edge_ok(name.chars().next())
        && edge_ok(name.chars().last())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

/// A namespace name (RFC 1123 label): a subdomain without dots, at most 63 characters.
fn is_dns_label(name: &str) -> bool {
    name.len() <= 63 && !name.contains('.') && is_dns_subdomain(name)
}

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

/// Everything `run` needs, resolved and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    pub controller: Config,
    pub dry_run: bool,
    pub metrics_addr: SocketAddr,
    pub log_format: LogFormat,
    pub tick: Duration,
    pub debounce: Duration,
    pub lease_namespace: String,
    pub lease_name: String,
    pub prometheus_url: Option<String>,
    pub prometheus_tls: TlsFiles,
    pub prometheus_token_file: Option<PathBuf>,
    pub master_token_file: Option<PathBuf>,
    pub master_tls: TlsFiles,
    pub sample_stale_after: Duration,
    /// How often services' load and latency are sampled.
    pub sample_interval: Duration,
    pub lease_duration: Duration,
    pub status_interval: Duration,
    pub master_timeout: Duration,
    pub adapters: bool,
    /// Namespaces whose jobs are steered; empty: every namespace.
    pub job_namespaces: Vec<String>,
    pub services: Vec<ServiceSource>,
}

impl RunConfig {
    /// Resolves flags (with their environment variables, already applied by clap) over the
    /// config file over defaults, and checks the result.
    pub fn resolve(flags: &RunFlags, pod_namespace: Option<String>) -> Result<RunConfig, InputError> {
        let (file, path, text) = match &flags.config {
            Some(p) => {
                let text = yaml::read(p, "the configuration")?;
                (yaml::parse::<ConfigFile>(p, &text)?, p.clone(), text)
            }
            None => (ConfigFile::default(), PathBuf::from("<flags>"), String::new()),
        };
        let invalid = |key: &str, message: String| InputError::invalid(&path, &text, key.to_string(), message);
        file.controller.validate().map_err(|e| invalid(&format!("controller.{}", e.key), e.problem))?;
        let run = &file.run;
        let config = RunConfig {
            controller: file.controller.clone(),
            dry_run: flags.dry_run || run.dry_run.unwrap_or(false),
            metrics_addr: flags.metrics_addr.or(run.metrics_addr).unwrap_or(DEFAULT_METRICS_ADDR.into()),
            log_format: flags.log_format.or(run.log_format).unwrap_or(LogFormat::Text),
            tick: flags.tick.or(run.tick).unwrap_or(Duration::from_secs(10)),
            debounce: flags.debounce.or(run.debounce).unwrap_or(Duration::from_millis(50)),
            lease_namespace: flags
                .lease_namespace
                .clone()
                .or_else(|| run.lease_namespace.clone())
                .or(pod_namespace)
                .unwrap_or_else(|| "default".to_string()),
            lease_name: flags
                .lease_name
                .clone()
                .or_else(|| run.lease_name.clone())
                .unwrap_or_else(|| DEFAULT_LEASE_NAME.to_string()),
            prometheus_url: flags.prometheus_url.clone().or_else(|| run.prometheus_url.clone()),
            prometheus_tls: with_ca_file(&run.prometheus_tls, &flags.prometheus_ca_file),
            prometheus_token_file: flags.prometheus_token_file.clone().or_else(|| run.prometheus_token_file.clone()),
            master_token_file: flags.master_token_file.clone().or_else(|| run.master_token_file.clone()),
            master_tls: with_ca_file(&run.master_tls, &flags.master_ca_file),
            sample_stale_after: run.sample_stale_after.unwrap_or(Duration::from_secs(60)),
            sample_interval: run.sample_interval.unwrap_or(Duration::from_secs(1)),
            lease_duration: flags.lease_duration.or(run.lease_duration).unwrap_or(Duration::from_secs(15)),
            status_interval: flags.status_interval.or(run.status_interval).unwrap_or(Duration::from_secs(5)),
            master_timeout: flags.master_timeout.or(run.master_timeout).unwrap_or(Duration::from_secs(5)),
            adapters: flags.adapters || run.adapters.unwrap_or(false),
            job_namespaces: if flags.job_namespaces.is_empty() {
                run.job_namespaces.clone().unwrap_or_default()
            } else {
                flags.job_namespaces.clone()
            },
            services: file.services.clone(),
        };
        for (key, value) in [
            ("run.sample_interval", config.sample_interval),
            ("run.status_interval", config.status_interval),
            ("run.sample_stale_after", config.sample_stale_after),
            ("run.master_timeout", config.master_timeout),
        ] {
            if value.is_zero() {
                return Err(invalid(key, "must be longer than 0s".into()));
            }
        }
        if config.sample_stale_after <= config.sample_interval {
            return Err(invalid(
                "run.sample_stale_after",
                format!("must be longer than run.sample_interval ({:?})", config.sample_interval),
            ));
        }
        if !is_dns_subdomain(&config.lease_name) {
            let message = format!(
                "`{}` is not a valid object name (lowercase letters, digits, '-' and '.', at most 253)",
                config.lease_name
            );
            return Err(invalid("run.lease_name", message));
        }
        for (i, namespace) in config.job_namespaces.iter().enumerate() {
            if !is_dns_label(namespace) {
                let message =
                    format!("`{namespace}` is not a namespace name (lowercase letters, digits and '-', at most 63)");
                return Err(invalid(&format!("run.job_namespaces[{i}]"), message));
            }
        }
        if config.lease_duration < Duration::from_secs(3) {
            return Err(invalid("run.lease_duration", "must be at least 3s".into()));
        }
        if config.lease_duration.as_secs() >= i32::MAX as u64 {
            // The Lease object holds leaseDurationSeconds as an int32; the elector refuses more.
            let message = format!("must be shorter than {}s (a Lease holds whole seconds in 32 bits)", i32::MAX);
            return Err(invalid("run.lease_duration", message));
        }
        if config.tick.is_zero() {
            return Err(invalid("run.tick", "must be longer than 0s".into()));
        }
        if config.debounce >= config.tick {
            return Err(invalid("run.debounce", format!("must be shorter than the tick ({:?})", config.tick)));
        }
        if let Some(url) = &config.prometheus_url {
            http_url(url).map_err(|problem| invalid("run.prometheus_url", format!("`{url}`: {problem}")))?;
        }
        // Read now, as `run` reads them at start: a certificate that is missing, unreadable or
        // not PEM is refused here, naming the key (in a pod: the Secret is not mounted there).
        for (tls, prefix) in [(&config.prometheus_tls, "run.prometheus_tls"), (&config.master_tls, "run.master_tls")] {
            tls.load(prefix).map_err(|e| invalid(&e.key, e.problem))?;
        }
        let mut names = std::collections::HashSet::new();
        for (i, s) in config.services.iter().enumerate() {
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
                if matches!(metric, Some(MetricSource::Promql(_))) && config.prometheus_url.is_none() {
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
                return Err(invalid(
                    &at("latency_p99"),
                    "an slo_p99 needs a latency_p99 source to compare with".into(),
                ));
            }
        }
        Ok(config)
    }

    /// The effective settings as YAML-ish text, for `check-config` and the start-up log.
    pub fn describe(&self) -> String {
        let c = &self.controller;
        let d = |v: Duration| humantime::format_duration(v).to_string();
        let mut out = String::new();
        out.push_str("controller:\n");
        for (k, v) in [
            ("target_utilization", c.target_utilization.to_string()),
            ("safety_margin", c.safety_margin.to_string()),
            ("forecast_horizon", d(c.forecast_horizon)),
            ("hpa_sync_period", d(c.hpa_sync_period)),
            ("trend_window", d(c.trend_window)),
            ("reserve_tolerance", c.reserve_tolerance.to_string()),
            ("reserve_quantum", c.reserve_quantum.to_string()),
            ("grow_stabilization", d(c.grow_stabilization)),
            ("grow_max_step", c.grow_max_step.to_string()),
            ("grow_min_gain", c.grow_min_gain.to_string()),
            ("grow_payback", d(c.grow_payback)),
            ("latency_slack_hold", c.latency_slack_hold.to_string()),
            ("latency_slack_shrink", c.latency_slack_shrink.to_string()),
            ("latency_shrink_fraction", c.latency_shrink_fraction.to_string()),
            ("latency_guard_max_steps", c.latency_guard_max_steps.to_string()),
            ("latency_guard_interval", d(c.latency_guard_interval)),
            ("latency_window", d(c.latency_window)),
            ("release_deadline", d(c.release_deadline)),
            ("waiting_reservation_after", d(c.waiting_reservation_after)),
            ("completion_time_split", c.completion_time_split.to_string()),
        ] {
            out.push_str(&format!("  {k}: {v}\n"));
        }
        out.push_str("run:\n");
        for (k, v) in [
            ("dry_run", self.dry_run.to_string()),
            ("metrics_addr", self.metrics_addr.to_string()),
            ("log_format", format!("{:?}", self.log_format).to_lowercase()),
            ("tick", d(self.tick)),
            ("debounce", d(self.debounce)),
            ("lease_namespace", self.lease_namespace.clone()),
            ("lease_name", self.lease_name.clone()),
            ("prometheus_url", self.prometheus_url.clone().unwrap_or_else(|| "(none)".into())),
            ("prometheus_tls", describe_tls(&self.prometheus_tls)),
            ("prometheus_token_file", describe_path(&self.prometheus_token_file)),
            ("master_token_file", describe_path(&self.master_token_file)),
            ("master_tls", describe_tls(&self.master_tls)),
            ("sample_stale_after", d(self.sample_stale_after)),
            ("sample_interval", d(self.sample_interval)),
            ("lease_duration", d(self.lease_duration)),
            ("status_interval", d(self.status_interval)),
            ("master_timeout", d(self.master_timeout)),
            ("adapters", self.adapters.to_string()),
            (
                "job_namespaces",
                if self.job_namespaces.is_empty() { "(all)".into() } else { self.job_namespaces.join(", ") },
            ),
        ] {
            out.push_str(&format!("  {k}: {v}\n"));
        }
        out.push_str(&format!("services: {}\n", self.services.len()));
        for s in &self.services {
            let pods = s
                .hpa
                .as_ref()
                .map_or_else(|| format!("selector {}", s.selector.as_deref().unwrap_or("")), |h| format!("HPA {h}"));
            out.push_str(&format!("  - {}/{}: pods by {pods}", s.namespace, s.name));
            if let Some(slo) = s.slo_p99 {
                out.push_str(&format!(", p99 SLO {}", d(slo)));
            }
            if s.headroom_replicas > 0 {
                out.push_str(&format!(", room kept for {} more replicas", s.headroom_replicas));
            }
            out.push('\n');
        }
        out
    }
}

impl RunConfig {
    /// What is valid but will not work where `check-config` runs: files `run` reads at start
    /// that are missing or empty here (in a pod they are usually mounted Secrets).
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let token_files = [
            ("run.master_token_file", &self.master_token_file),
            ("run.prometheus_token_file", &self.prometheus_token_file),
        ];
        for (key, path) in token_files {
            let Some(path) = path else { continue };
            // The same read `run` does at start.
            let problem = match crate::live::master_client::read_token_file(path) {
                Ok(_) => None,
                Err(ClientConfigError::TokenFile { message, .. }) => Some(message),
                Err(ClientConfigError::EmptyToken { .. }) => Some("the file is empty".to_string()),
                Err(e) => Some(e.to_string()),
            };
            if let Some(problem) = problem {
                out.push(format!(
                    "{key}: {}: {problem}; `colocate run` refuses to start unless it can read a token there (in a \
                     pod: mount the Secret at that path)",
                    path.display()
                ));
            }
        }
        out
    }
}

/// The file's TLS block with the flag's CA file over its own.
fn with_ca_file(file: &Option<TlsFiles>, flag: &Option<PathBuf>) -> TlsFiles {
    let mut tls = file.clone().unwrap_or_default();
    if let Some(ca) = flag {
        tls.ca_file = Some(ca.clone());
    }
    tls
}

fn describe_path(path: &Option<PathBuf>) -> String {
    path.as_deref().map_or("(none)".into(), |p| p.display().to_string())
}

fn describe_tls(tls: &TlsFiles) -> String {
    let trust = tls.ca_file.as_deref().map_or("system roots".into(), |p| format!("CA {}", p.display()));
    match &tls.cert_file {
        Some(cert) => format!("{trust}, client certificate {}", cert.display()),
        None => trust,
    }
}

/// Loads only the file, for `check-config FILE`.
pub fn check_file(path: &Path) -> Result<RunConfig, InputError> {
    let flags = RunFlags { config: Some(path.to_path_buf()), ..RunFlags::default() };
    RunConfig::resolve(&flags, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, "run:\n  tick: 20s\n  debounce: 1s\n  log_format: json\n  dry_run: true\n").unwrap();
        let flags = RunFlags { config: Some(path.clone()), tick: Some(Duration::from_secs(5)), ..RunFlags::default() };
        let c = RunConfig::resolve(&flags, Some("colocate-system".into())).unwrap();
        assert_eq!(c.tick, Duration::from_secs(5), "flag wins over file");
        assert_eq!(c.debounce, Duration::from_secs(1), "file wins over default");
        assert_eq!(c.log_format, LogFormat::Json);
        assert!(c.dry_run, "dry run from the file");
        assert_eq!(c.lease_namespace, "colocate-system", "the pod's namespace when nothing else is set");
        assert_eq!(c.metrics_addr, SocketAddr::from(([127, 0, 0, 1], 8080)), "default");
        let no_file = RunConfig::resolve(&RunFlags::default(), None).unwrap();
        assert_eq!((no_file.tick, no_file.debounce), (Duration::from_secs(10), Duration::from_millis(50)));
        assert_eq!(no_file.controller, Config::default());
        assert_eq!(no_file.lease_name, "colocate");
    }

    #[test]
    fn lease_name_must_be_an_object_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, "run:\n  lease_name: team-a.colocate\n").unwrap();
        let flags = RunFlags { config: Some(path.clone()), ..RunFlags::default() };
        assert_eq!(RunConfig::resolve(&flags, None).unwrap().lease_name, "team-a.colocate");
        for bad in ["Colocate", "-colocate", "colocate_1", ""] {
            let flags = RunFlags { lease_name: Some(bad.into()), ..flags.clone() };
            let e = RunConfig::resolve(&flags, None).unwrap_err().to_string();
            assert!(e.contains("run.lease_name") && e.contains("not a valid object name"), "{bad}: {e}");
        }
    }

    #[test]
    fn job_namespaces_come_from_the_file_or_the_flag_and_must_be_namespace_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, "run:\n  job_namespaces: [ml, research]\n").unwrap();
        let flags = RunFlags { config: Some(path.clone()), ..RunFlags::default() };
        assert_eq!(RunConfig::resolve(&flags, None).unwrap().job_namespaces, ["ml", "research"]);
        let flagged = RunFlags { job_namespaces: vec!["batch".into()], ..flags.clone() };
        assert_eq!(RunConfig::resolve(&flagged, None).unwrap().job_namespaces, ["batch"]);
        assert!(RunConfig::resolve(&RunFlags::default(), None).unwrap().job_namespaces.is_empty(), "every namespace");
        for bad in ["ML", "a.b", ""] {
            let flags = RunFlags { job_namespaces: vec!["ml".into(), bad.into()], ..flags.clone() };
            let e = RunConfig::resolve(&flags, None).unwrap_err().to_string();
            assert!(e.contains("run.job_namespaces[1]") && e.contains("not a namespace name"), "{bad}: {e}");
        }
    }

    /// The error `check-config` gives for a file holding `yaml`.
    fn refusal(yaml: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, yaml).unwrap();
        check_file(&path).expect_err(yaml).to_string()
    }

    /// What the sampler would refuse at start is refused when the file is checked, naming the key.
    #[test]
    fn sources_the_sampler_cannot_use_are_refused_by_the_check() {
        let service =
            |source: &str| format!("services:\n  - name: a\n    namespace: web\n    hpa: a\n    load: {source}\n");
        for (source, expected) in [
            (
                "{scrape: {url: 'https://:9100/metrics', metric: x}}",
                "services[0].load.scrape.url: `https://:9100/metrics`: empty host",
            ),
            (
                "{scrape: {url: 'ftp://a/metrics', metric: x}}",
                "services[0].load.scrape.url: `ftp://a/metrics`: scheme `ftp` is not http or https",
            ),
            (
                "{scrape: {url: 'a:9100/metrics', metric: x}}",
                "services[0].load.scrape.url: `a:9100/metrics`: scheme `a` is not http",
            ),
            (
                "{scrape: {url: '/metrics', metric: x}}",
                "services[0].load.scrape.url: `/metrics`: relative URL without a base",
            ),
            (
                "{scrape: {url: 'http://a:99999/', metric: x}}",
                "services[0].load.scrape.url: `http://a:99999/`: invalid port number",
            ),
            (
                "{scrape: {url: 'http://a/metrics', metric: nginx-requests}}",
                "services[0].load.scrape.metric: `nginx-requests` is not a Prometheus metric name",
            ),
            (
                "{scrape: {url: 'http://a/metrics', metric: ''}}",
                "services[0].load.scrape.metric: `` is not a Prometheus metric name",
            ),
        ] {
            let e = refusal(&service(source));
            assert!(e.contains(expected), "{source}: expected `{expected}` in: {e}");
        }
        let good = refusal(&format!(
            "{}  - {{name: b}}\n",
            service("{scrape: {url: 'http://10.0.0.1:9113/metrics', metric: 'job:rate:5m'}}")
        ));
        assert!(good.contains("services[1]: missing field `namespace`"), "only the second service is wrong: {good}");
    }

    #[test]
    fn prometheus_url_must_be_http_or_https_with_a_host() {
        for (url, problem) in [
            ("ftp://prometheus:9090", "scheme `ftp` is not http or https"),
            ("prometheus:9090", "scheme `prometheus` is not http or https"),
            ("http://", "empty host"),
            ("", "relative URL without a base"),
        ] {
            let e = refusal(&format!("run:\n  prometheus_url: '{url}'\n"));
            assert!(e.contains(&format!(":2: run.prometheus_url: `{url}`: {problem}")), "{url}: {e}");
            let flags = RunFlags { prometheus_url: Some(url.into()), ..RunFlags::default() };
            let e = RunConfig::resolve(&flags, None).unwrap_err().to_string();
            assert!(e.contains(&format!("run.prometheus_url: `{url}`: {problem}")), "--prometheus-url {url}: {e}");
        }
        let flags = RunFlags { prometheus_url: Some("http://[::1]:9090/prom/".into()), ..RunFlags::default() };
        assert!(RunConfig::resolve(&flags, None).is_ok());
    }

    #[test]
    fn a_promql_source_without_prometheus_is_named_by_its_key() {
        let yaml = "services:\n  - {name: a, namespace: web, hpa: a, slo_p99: 1s, latency_p99: {promql: up}}\n";
        let e = refusal(yaml);
        assert!(e.contains("services[0].latency_p99: a promql source needs run.prometheus_url"), "{e}");
    }

    #[test]
    fn lease_duration_fits_the_lease_object() {
        let e = refusal("run:\n  lease_duration: 70years\n");
        assert!(e.contains("run.lease_duration: must be shorter than 2147483647s"), "{e}");
        let e = refusal("run:\n  lease_duration: 2s\n");
        assert!(e.contains("run.lease_duration: must be at least 3s"), "{e}");
    }
}
