//! `colocate run`'s configuration: an optional YAML file with `controller:`, `run:` and
//! `services:` blocks, under flags and their environment variables, resolved once (flag >
//! environment > file > default) into an immutable, checked [`RunConfig`].
//!
//! Each block is one serde struct whose `Default` is the only place its defaults are written:
//! [`Config`] (the decision core's), [`RunSettings`] and the services. A flag is a field of
//! [`RunFlags`] named like its `run:` key; the flags given are laid over the `run:` block as a
//! YAML value and the result read back, so a flag needs no code of its own. [`RunConfig::describe`]
//! prints the blocks as they serialize, so a new key is printed (and so documented and checked,
//! tests/configuration_doc.rs) without a line of its own.

mod service_sources;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize, Serializer};
use serde_norway::Value;

use crate::core::config::CapacityMode;
use crate::core::Config;
use crate::live::batch::BatchNames;
use crate::live::master_client::ClientConfigError;
use crate::live::sampler::usage;
use crate::live::tls::TlsFiles;
use crate::yaml::{self, InputError};

pub use service_sources::{http_url, is_metric_name, MetricSource, ServiceSource, METRIC_NAME_SYNTAX};

/// Flags of `colocate run`. Each has an environment variable, and each but `--config` is a
/// key of the file's `run:` block: the field serializes under that key, which `over` lays on
/// the file's, and a flag not given serializes as nothing.
#[derive(Debug, Clone, Default, Args, Serialize)]
pub struct RunFlags {
    /// YAML file with `controller:`, `run:` and `services:` blocks.
    #[arg(long, env = "COLOCATE_CONFIG", value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Decide and export intents without acting on any job.
    #[arg(long, env = "COLOCATE_DRY_RUN")]
    #[serde(skip_serializing_if = "is_false")]
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
    #[serde(serialize_with = "optional_duration")]
    pub tick: Option<Duration>,
    /// Wait this long after a watch event for more before deciding.
    #[arg(long, env = "COLOCATE_DEBOUNCE", value_parser = humantime::parse_duration, value_name = "DURATION")]
    #[serde(serialize_with = "optional_duration")]
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
    #[serde(rename = "prometheus_tls", serialize_with = "tls_ca_file")]
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
    #[serde(rename = "master_tls", serialize_with = "tls_ca_file")]
    pub master_ca_file: Option<PathBuf>,
    /// Leader Lease duration: a follower takes over at most this long after the leader died.
    #[arg(long, env = "COLOCATE_LEASE_DURATION", value_parser = humantime::parse_duration, value_name = "DURATION")]
    #[serde(serialize_with = "optional_duration")]
    pub lease_duration: Option<Duration>,
    /// How often every job's master is asked for its status.
    #[arg(long, env = "COLOCATE_STATUS_INTERVAL", value_parser = humantime::parse_duration, value_name = "DURATION")]
    #[serde(serialize_with = "optional_duration")]
    pub status_interval: Option<Duration>,
    /// Also drive jobs without a master through Kubernetes adapters (objects labelled
    /// `colocate.dev/elastic: "true"`).
    #[arg(long, env = "COLOCATE_ADAPTERS")]
    #[serde(skip_serializing_if = "is_false")]
    pub adapters: bool,
    /// How long one request to a job's master may take (it is retried twice).
    #[arg(long, env = "COLOCATE_MASTER_TIMEOUT", value_parser = humantime::parse_duration, value_name = "DURATION")]
    #[serde(serialize_with = "optional_duration")]
    pub master_timeout: Option<Duration>,
    /// Steer only jobs in these namespaces (comma-separated; default: every namespace).
    #[arg(long, env = "COLOCATE_JOB_NAMESPACES", value_delimiter = ',', value_name = "NAMESPACE,...")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub job_namespaces: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// The `run:` block: how the controller process runs. Every key is optional in the file; its
/// default is in `Default` below.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunSettings {
    /// Decide and export intents without acting on any job.
    #[serde(deserialize_with = "null_as_default::dry_run")]
    pub dry_run: bool,
    /// Address of the /metrics, /healthz and /readyz server.
    #[serde(deserialize_with = "null_as_default::metrics_addr")]
    pub metrics_addr: SocketAddr,
    #[serde(deserialize_with = "null_as_default::log_format")]
    pub log_format: LogFormat,
    /// Decide at least this often, watch events or not.
    #[serde(with = "text_duration")]
    pub tick: Duration,
    /// Wait this long after a watch event for more before deciding.
    #[serde(with = "text_duration")]
    pub debounce: Duration,
    /// Namespace of the leader Lease. Unset in the file and the flags: the pod's namespace
    /// where `POD_NAMESPACE` says it, else this default.
    #[serde(deserialize_with = "null_as_default::lease_namespace")]
    pub lease_namespace: String,
    /// Name of the leader Lease; replicas sharing it elect one leader.
    #[serde(deserialize_with = "null_as_default::lease_name")]
    pub lease_name: String,
    /// Prometheus server for the services' promql sources.
    pub prometheus_url: Option<String>,
    /// TLS towards Prometheus and scrape URLs: `ca_file`, and `cert_file` with `key_file` for
    /// mTLS.
    #[serde(deserialize_with = "null_as_default::prometheus_tls")]
    pub prometheus_tls: TlsFiles,
    pub prometheus_token_file: Option<PathBuf>,
    pub master_token_file: Option<PathBuf>,
    /// TLS towards masters served over https, as `prometheus_tls`.
    #[serde(deserialize_with = "null_as_default::master_tls")]
    pub master_tls: TlsFiles,
    /// Samples older than this count as missing (latency unknown: no growth on its nodes).
    #[serde(with = "text_duration")]
    pub sample_stale_after: Duration,
    /// How often services' load and p99 are sampled.
    #[serde(with = "text_duration")]
    pub sample_interval: Duration,
    /// Leader Lease duration: a follower takes over at most this long after the leader died.
    #[serde(with = "text_duration")]
    pub lease_duration: Duration,
    /// How often every job's master is asked for its status.
    #[serde(with = "text_duration")]
    pub status_interval: Duration,
    /// How long one request to a job's master may take.
    #[serde(with = "text_duration")]
    pub master_timeout: Duration,
    /// Also drive jobs without a master through Kubernetes adapters (`/scale`, Volcano); needs
    /// the RBAC for those kinds (the chart's `adapters` values).
    #[serde(deserialize_with = "null_as_default::adapters")]
    pub adapters: bool,
    /// Steer only jobs in these namespaces; empty: every namespace. Services and nodes are
    /// still watched cluster-wide: online pods and workers share nodes across namespaces.
    #[serde(deserialize_with = "null_as_default::job_namespaces")]
    pub job_namespaces: Vec<String>,
    /// `controller.capacity: usage`: the names of the batch resources published on nodes and
    /// requested by workers: `colocate` (`colocate.dev/batch-cpu`, `colocate.dev/batch-memory`)
    /// or `koordinator` (`kubernetes.io/batch-cpu`, `kubernetes.io/batch-memory`).
    #[serde(deserialize_with = "null_as_default::batch_resources")]
    pub batch_resources: BatchNames,
    /// `controller.capacity: usage`: PromQL giving each pod's CPU usage in cores, one series
    /// per pod labelled `namespace` and `pod` (default: cAdvisor's, a one-minute rate).
    #[serde(deserialize_with = "null_as_default::usage_cpu_query")]
    pub usage_cpu_query: String,
    /// `controller.capacity: usage`: PromQL giving each pod's memory usage in bytes, labelled
    /// as `usage_cpu_query` (default: cAdvisor's working set).
    #[serde(deserialize_with = "null_as_default::usage_memory_query")]
    pub usage_memory_query: String,
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            dry_run: false,
            // Loopback, as nothing outside the host needs it there (in a pod the chart sets
            // 0.0.0.0); not the port `example-master` listens on.
            metrics_addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            log_format: LogFormat::Text,
            tick: Duration::from_secs(10),
            debounce: Duration::from_millis(50),
            lease_namespace: "default".into(),
            lease_name: "colocate".into(),
            prometheus_url: None,
            prometheus_tls: TlsFiles::default(),
            prometheus_token_file: None,
            master_token_file: None,
            master_tls: TlsFiles::default(),
            sample_stale_after: Duration::from_secs(60),
            // So that a load step shows in a sample sooner than the HPA's next sync can act on it.
            sample_interval: Duration::from_secs(1),
            lease_duration: Duration::from_secs(15),
            status_interval: Duration::from_secs(5),
            master_timeout: Duration::from_secs(5),
            adapters: false,
            job_namespaces: Vec::new(),
            batch_resources: BatchNames::Colocate,
            usage_cpu_query: usage::DEFAULT_CPU_QUERY.into(),
            usage_memory_query: usage::DEFAULT_MEMORY_QUERY.into(),
        }
    }
}

/// `deserialize_with` for the keys whose null (`key:` with no value) means unset, as a key left
/// out does: each reads null as the key's value in `RunSettings::default()`. Durations are not
/// among them: their reader takes only a duration with its unit.
macro_rules! null_as_default {
    ($($key:ident: $type:ty),* $(,)?) => {
        mod null_as_default {
            use super::*;
            $(
                pub fn $key<'de, D: serde::Deserializer<'de>>(d: D) -> Result<$type, D::Error> {
                    Ok(Option::<$type>::deserialize(d)?.unwrap_or_else(|| RunSettings::default().$key))
                }
            )*
        }
    };
}

null_as_default!(
    dry_run: bool,
    metrics_addr: SocketAddr,
    log_format: LogFormat,
    lease_namespace: String,
    lease_name: String,
    prometheus_tls: TlsFiles,
    master_tls: TlsFiles,
    adapters: bool,
    job_namespaces: Vec<String>,
    batch_resources: BatchNames,
    usage_cpu_query: String,
    usage_memory_query: String,
);

/// A duration written as the file writes it (`1m 30s`), both ways.
mod text_duration {
    pub use crate::core::config::{duration as deserialize, serialize_duration as serialize};
}

fn is_false(b: &bool) -> bool {
    !b
}

fn optional_duration<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => crate::core::config::serialize_duration(d, s),
        None => s.serialize_none(),
    }
}

/// A CA flag as the part of its TLS block it sets: `{ca_file: FILE}`.
fn tls_ca_file<S: Serializer>(ca_file: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
    match ca_file {
        Some(path) => TlsFiles { ca_file: Some(path.clone()), ..TlsFiles::default() }.serialize(s),
        None => s.serialize_none(),
    }
}

impl RunFlags {
    /// `run` with the flags that are given in place of its values: only the `ca_file` of a TLS
    /// block, the whole list of `job_namespaces`. `--dry-run` and `--adapters` can only switch
    /// their setting on. Errs with the key and the problem.
    fn over(&self, run: &RunSettings) -> Result<RunSettings, (String, String)> {
        let to_value = |v: Result<Value, serde_norway::Error>| v.map_err(|e| ("run".to_string(), e.to_string()));
        let mut merged = to_value(serde_norway::to_value(run))?;
        lay_over(&mut merged, to_value(serde_norway::to_value(self))?);
        serde_path_to_error::deserialize(merged).map_err(|e| (format!("run.{}", e.path()), e.into_inner().to_string()))
    }
}

/// Puts `top`'s values into `base`, key by key into nested maps; a null in `top` (a flag not
/// given) leaves `base`'s value.
fn lay_over(base: &mut Value, top: Value) {
    match (base, top) {
        (_, Value::Null) => {}
        (Value::Mapping(base), Value::Mapping(top)) => {
            for (key, value) in top {
                match base.get_mut(&key) {
                    Some(slot) => lay_over(slot, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, top) => *base = top,
    }
}

/// Everything `run` needs, resolved and checked: the config file's three blocks, with the flags
/// laid over `run:`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunConfig {
    pub controller: Config,
    pub run: RunSettings,
    pub services: Vec<ServiceSource>,
}

impl RunConfig {
    /// Resolves flags (with their environment variables, already applied by clap) over the
    /// config file over defaults, and checks the result. `pod_namespace` stands in for the
    /// default Lease namespace.
    pub fn resolve(flags: &RunFlags, pod_namespace: Option<String>) -> Result<RunConfig, InputError> {
        let (mut config, path, text) = match &flags.config {
            Some(p) => {
                let text = yaml::read(p, "the configuration")?;
                (yaml::parse::<RunConfig>(p, &text)?, p.clone(), text)
            }
            None => (RunConfig::default(), PathBuf::from("<flags>"), String::new()),
        };
        let invalid = |key: &str, message: String| InputError::invalid(&path, &text, key.to_string(), message);
        config.controller.validate().map_err(|e| invalid(&format!("controller.{}", e.key), e.problem))?;
        if let Some(namespace) = pod_namespace.filter(|_| !names_run_key(&text, "lease_namespace")) {
            config.run.lease_namespace = namespace;
        }
        config.run = flags.over(&config.run).map_err(|(key, message)| invalid(&key, message))?;
        config.check(&invalid)?;
        Ok(config)
    }

    /// The checks serde cannot make: ranges, settings that must agree, names, the TLS files.
    fn check(&self, invalid: &impl Fn(&str, String) -> InputError) -> Result<(), InputError> {
        let run = &self.run;
        for (key, value) in [
            ("run.sample_interval", run.sample_interval),
            ("run.status_interval", run.status_interval),
            ("run.sample_stale_after", run.sample_stale_after),
            ("run.master_timeout", run.master_timeout),
        ] {
            if value.is_zero() {
                return Err(invalid(key, "must be longer than 0s".into()));
            }
        }
        if run.sample_stale_after <= run.sample_interval {
            return Err(invalid(
                "run.sample_stale_after",
                format!("must be longer than run.sample_interval ({:?})", run.sample_interval),
            ));
        }
        if !is_dns_subdomain(&run.lease_name) {
            let message = format!(
                "`{}` is not a valid object name (lowercase letters, digits, '-' and '.', at most 253)",
                run.lease_name
            );
            return Err(invalid("run.lease_name", message));
        }
        for (i, namespace) in run.job_namespaces.iter().enumerate() {
            if !is_dns_label(namespace) {
                let message =
                    format!("`{namespace}` is not a namespace name (lowercase letters, digits and '-', at most 63)");
                return Err(invalid(&format!("run.job_namespaces[{i}]"), message));
            }
        }
        if run.lease_duration < Duration::from_secs(3) {
            return Err(invalid("run.lease_duration", "must be at least 3s".into()));
        }
        if run.lease_duration.as_secs() >= i32::MAX as u64 {
            // The Lease object holds leaseDurationSeconds as an int32; the elector refuses more.
            let message = format!("must be shorter than {}s (a Lease holds whole seconds in 32 bits)", i32::MAX);
            return Err(invalid("run.lease_duration", message));
        }
        if run.tick.is_zero() {
            return Err(invalid("run.tick", "must be longer than 0s".into()));
        }
        if run.debounce >= run.tick {
            return Err(invalid("run.debounce", format!("must be shorter than the tick ({:?})", run.tick)));
        }
        if let Some(url) = &run.prometheus_url {
            http_url(url).map_err(|problem| invalid("run.prometheus_url", format!("`{url}`: {problem}")))?;
        }
        if self.controller.capacity == CapacityMode::Usage {
            if run.prometheus_url.is_none() {
                let message = "usage reads pods' CPU and memory usage from Prometheus \
                               (run.usage_cpu_query, run.usage_memory_query): set run.prometheus_url or --prometheus-url";
                return Err(invalid("controller.capacity", message.into()));
            }
            for (key, query) in
                [("run.usage_cpu_query", &run.usage_cpu_query), ("run.usage_memory_query", &run.usage_memory_query)]
            {
                if query.trim().is_empty() {
                    return Err(invalid(key, "the query is empty".into()));
                }
            }
        }
        // Read now, as `run` reads them at start: a certificate that is missing, unreadable or
        // not PEM is refused here, naming the key (in a pod: the Secret is not mounted there).
        for (tls, prefix) in [(&run.prometheus_tls, "run.prometheus_tls"), (&run.master_tls, "run.master_tls")] {
            tls.load(prefix).map_err(|e| invalid(&e.key, e.problem))?;
        }
        service_sources::check(&self.services, run.prometheus_url.is_some(), invalid)
    }

    /// The effective settings as YAML-ish text, for `check-config` and the start-up log: each
    /// block as it serializes, one `key: value` line per setting.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (block, settings) in
            [("controller", serde_norway::to_value(&self.controller)), ("run", serde_norway::to_value(&self.run))]
        {
            out.push_str(&format!("{block}:\n"));
            let Ok(Value::Mapping(settings)) = settings else { unreachable!("{block} serializes as a map") };
            for (key, value) in &settings {
                let key = key.as_str().unwrap_or_default();
                out.push_str(&format!("  {key}: {}\n", describe_setting(key, value)));
            }
        }
        out.push_str(&format!("services: {}\n", self.services.len()));
        for s in &self.services {
            out.push_str(&format!("  - {}\n", s.describe()));
        }
        out
    }

    /// What is valid but will not work where `check-config` runs: files `run` reads at start
    /// that are missing or empty here (in a pod they are usually mounted Secrets).
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let token_files = [
            ("run.master_token_file", &self.run.master_token_file),
            ("run.prometheus_token_file", &self.run.prometheus_token_file),
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

/// One setting's value as `describe` prints it: as written in the file, except where the
/// unset value means more than `null` or `[]` would say.
fn describe_setting(key: &str, value: &Value) -> String {
    match value {
        Value::Null => "(none)".into(),
        Value::Bool(b) => b.to_string(),
        // 0.0 prints as `0`, as the file may write it.
        Value::Number(n) => n.as_f64().filter(|_| n.is_f64()).map_or_else(|| n.to_string(), |f| f.to_string()),
        Value::String(s) => s.clone(),
        Value::Sequence(items) if items.is_empty() && key == "job_namespaces" => "(all)".into(),
        Value::Sequence(items) => items.iter().map(|item| describe_setting(key, item)).collect::<Vec<_>>().join(", "),
        Value::Mapping(_) => match TlsFiles::deserialize(value.clone()) {
            Ok(tls) if key.ends_with("_tls") => describe_tls(&tls),
            _ => serde_norway::to_string(value).unwrap_or_default().trim_end().replace('\n', ", "),
        },
        Value::Tagged(tagged) => describe_setting(key, &tagged.value),
    }
}

fn describe_tls(tls: &TlsFiles) -> String {
    let trust = tls.ca_file.as_deref().map_or("system roots".into(), |p| format!("CA {}", p.display()));
    match &tls.cert_file {
        Some(cert) => format!("{trust}, client certificate {}", cert.display()),
        None => trust,
    }
}

/// Whether the file gives `run.<key>` a value, rather than leaving it to its default.
fn names_run_key(text: &str, key: &str) -> bool {
    let file = serde_norway::from_str::<Value>(text).unwrap_or_default();
    file.get("run").and_then(|run| run.get(key)).is_some_and(|value| !value.is_null())
}

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

/// Loads only the file, for `check-config FILE`.
pub fn check_file(path: &Path) -> Result<RunConfig, InputError> {
    let flags = RunFlags { config: Some(path.to_path_buf()), ..RunFlags::default() };
    RunConfig::resolve(&flags, None)
}

#[cfg(test)]
mod tests;
