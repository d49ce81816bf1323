//! Pods' CPU and memory usage from Prometheus, for `controller.capacity: usage`: what online and
//! system pods use is what the batch capacity of their nodes is computed from.
//!
//! Two instant queries (`run.usage_cpu_query`, in cores, and `run.usage_memory_query`, in
//! bytes), each answering one series per pod labelled `namespace` and `pod` (several series of
//! one pod, e.g. one per container, are added up). The defaults read cAdvisor's
//! `container_cpu_usage_seconds_total` over its last two scrapes, which is the smoothing: a
//! pod's usage is its mean over the last scrape interval (15-30 s in most clusters), and the
//! core grows it by its service's load trend sampled every second, so a rise is acted on
//! before the next scrape shows it.
//!
//! - [`UsageSampler::check`] at start: both queries must answer series with those labels; one
//!   that keeps answering nothing is a named error naming the key and the query, not a zero.
//! - [`UsageSampler::sample_once`] each round; a failure is data (counted under
//!   `colocate_sample_errors_total{service="pods"}`, logged when it starts and ends) and the
//!   last answer stays until it is stale.
//! - [`UsageSampler::usage`]: per pod what is known now. A stale or failing query yields nothing
//!   for its resource, and a pod with no usage counts at its requests in the core.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use reqwest::header::HeaderValue;
use reqwest::Url;
use serde::Deserialize;
use thiserror::Error;
use tracing::{info, warn};

use super::error::SampleError;
use super::promql::{self, LabelledSample};
use crate::core::name_map::NameMap;
use crate::live::clock;
use crate::telemetry::metrics::Metrics;

/// The `service` label of the usage queries' sample metrics: not a `namespace/name` key, so it
/// never collides with a service's.
pub const METRICS_SERVICE: &str = "pods";

/// Default `run.usage_cpu_query`: cAdvisor's per-container CPU time over its last two scrapes,
/// per pod (the pod's own cgroup, `container=""`, and the pause container left out). `irate`,
/// not `rate`: a rate over a window the pod's series does not yet fill reads low (a pod one
/// scrape old would read a sixtieth of its use over a minute), and pods the HPA has just added
/// are the ones that matter in a spike. A pod with a single scrape answers nothing and counts
/// at its request.
pub const DEFAULT_CPU_QUERY: &str = "sum by (namespace, pod) \
    (irate(container_cpu_usage_seconds_total{container!=\"\", container!=\"POD\"}[2m]))";
/// Default `run.usage_memory_query`: cAdvisor's working set (what the kubelet's eviction
/// counts), per pod.
pub const DEFAULT_MEMORY_QUERY: &str = "sum by (namespace, pod) \
    (container_memory_working_set_bytes{container!=\"\", container!=\"POD\"})";

/// What one pod uses, where its query knows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodUsage {
    pub cpu_millicores: Option<i64>,
    pub memory_bytes: Option<i64>,
}

/// A pod's key, `namespace/name`, shared by every answer and join that names the pod: an answer
/// takes the previous answer's copy, so a second's two answers for 30,000 pods allocate no
/// keys (and leave no small allocations behind to fragment the heap).
pub type PodKey = Arc<str>;

/// Usage per pod key (`namespace/name`). Hashed with the core's name hasher: the cluster state
/// looks up every pod in it, 30,000 at 1,000 nodes.
pub type PodUsages = NameMap<PodKey, PodUsage>;

/// A usage query that cannot be used; names the configuration key and the query.
#[derive(Debug, Error, PartialEq)]
pub enum UsageError {
    #[error(
        "{key} `{query}` returned no series: does this Prometheus scrape cAdvisor (the kubelet's \
         /metrics/cadvisor)? Usage is not taken as zero"
    )]
    NoSeries { key: &'static str, query: String },
    #[error("{key} `{query}`: {cause}")]
    Failed { key: &'static str, query: String, cause: SampleError },
}

/// Which resource a query measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resource {
    Cpu,
    Memory,
}

impl Resource {
    fn key(self) -> &'static str {
        match self {
            Resource::Cpu => "run.usage_cpu_query",
            Resource::Memory => "run.usage_memory_query",
        }
    }

    /// The `source` label of its sample metrics.
    fn label(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu_usage",
            Resource::Memory => "memory_usage",
        }
    }

    /// Cores become millicores (rounded up: usage is never under-counted), bytes stay bytes.
    fn amount(self, value: f64) -> i64 {
        match self {
            Resource::Cpu => (value * 1000.0).ceil() as i64,
            Resource::Memory => value.ceil() as i64,
        }
    }
}

/// One query's latest answer: per pod its amount, and when Prometheus evaluated it (controller
/// clock).
#[derive(Debug, Default)]
struct Answer {
    at: Duration,
    pods: NameMap<PodKey, i64>,
}

#[derive(Debug)]
struct Query {
    resource: Resource,
    text: String,
    state: Mutex<QueryState>,
}

#[derive(Debug, Default)]
struct QueryState {
    answer: Option<Answer>,
    /// Counts answers, so that a joined copy knows whether it is still the latest.
    generation: u64,
    /// Kind of the current failure and how many attempts in a row failed.
    failing: Option<(&'static str, u64)>,
    sampling_since: Option<Duration>,
}

/// Samples the usage queries. `Send + Sync`: share it with `Arc`.
pub struct UsageSampler {
    http: reqwest::Client,
    auth: Option<HeaderValue>,
    base: Url,
    queries: [Query; 2],
    stale_after: Duration,
    timeout: Duration,
    metrics: Arc<Metrics>,
    /// Told after every round, so that a node's batch capacity follows a usage change at once
    /// rather than at the next tick.
    wake: Option<Arc<tokio::sync::Notify>>,
    /// Given every round's joined answers before `wake` is told (the controller applies them
    /// to its cluster state there, off the decision's path).
    apply: Option<ApplyFn>,
    /// Both answers joined per pod, built once per new answer rather than at every decision.
    merged: Mutex<Merged>,
}

/// What takes each round's joined answers.
pub type ApplyFn = Box<dyn Fn(&Arc<PodUsages>) + Send + Sync>;

/// The joined answers and what they were joined from.
#[derive(Default)]
struct Merged {
    usages: Arc<PodUsages>,
    /// Per query: the answer's generation and evaluation time, if it was fresh and joined.
    from: [Option<(u64, Duration)>; 2],
}

impl UsageSampler {
    /// `http` and `auth` as the service sampler has them (TLS, token); `base` the Prometheus
    /// server.
    pub fn new(
        http: reqwest::Client,
        auth: Option<HeaderValue>,
        base: Url,
        cpu_query: &str,
        memory_query: &str,
        stale_after: Duration,
        metrics: Arc<Metrics>,
    ) -> UsageSampler {
        let query = |resource, text: &str| Query { resource, text: text.to_string(), state: Mutex::default() };
        for resource in [Resource::Cpu, Resource::Memory] {
            metrics.source_configured(METRICS_SERVICE, resource.label());
        }
        UsageSampler {
            http,
            auth,
            base,
            queries: [query(Resource::Cpu, cpu_query), query(Resource::Memory, memory_query)],
            stale_after,
            timeout: super::DEFAULT_TIMEOUT,
            metrics,
            wake: None,
            apply: None,
            merged: Mutex::default(),
        }
    }

    /// Hands every round's joined answers to `apply`, before `wake` is told.
    pub fn with_apply(mut self, apply: ApplyFn) -> UsageSampler {
        self.apply = Some(apply);
        self
    }

    /// Notifies `wake` (the decision loop's) after every round.
    pub fn with_wake(mut self, wake: Arc<tokio::sync::Notify>) -> UsageSampler {
        self.wake = Some(wake);
        self
    }

    /// Both queries until each has answered series labelled `namespace` and `pod`, every
    /// `retry` for at most `within` (a Prometheus that has just started has no rate yet); then
    /// the first query still failing, named.
    pub async fn check(&self, within: Duration, retry: Duration) -> Result<(), UsageError> {
        let deadline = tokio::time::Instant::now() + within;
        for query in &self.queries {
            loop {
                let error = match self.fetch(query).await {
                    Ok(answer) => {
                        info!(query = query.resource.key(), pods = answer.pods.len(), "usage query answers");
                        let mut state = query.lock();
                        state.answer = Some(answer);
                        state.generation += 1;
                        break;
                    }
                    Err(SampleError::NoSeries) => {
                        UsageError::NoSeries { key: query.resource.key(), query: query.text.clone() }
                    }
                    Err(cause) => UsageError::Failed { key: query.resource.key(), query: query.text.clone(), cause },
                };
                if tokio::time::Instant::now() + retry > deadline {
                    return Err(error);
                }
                warn!(cause = %error, "usage query not answering yet; retrying");
                tokio::time::sleep(retry).await;
            }
        }
        self.publish(clock::now());
        Ok(())
    }

    /// One round: both queries, concurrently; answers kept, failures counted and logged.
    pub async fn sample_once(&self) {
        let [cpu, memory] = &self.queries;
        let (a, b) = tokio::join!(self.fetch(cpu), self.fetch(memory));
        let now = clock::now();
        for (query, attempt) in [(cpu, a), (memory, b)] {
            self.record(query, attempt, now);
        }
        self.publish(now);
    }

    /// Joins the latest answers and hands them on: here, in the sampler's task, rather than in
    /// a decision, which then only takes the shared copy (joining 30,000 pods' answers and
    /// applying them to the cluster state took a 1,000-node decision from 10 ms to 100 ms).
    fn publish(&self, now: Duration) {
        let usages = self.refresh(now);
        if let Some(apply) = &self.apply {
            apply(&usages);
        }
        if let Some(wake) = &self.wake {
            wake.notify_one();
        }
    }

    /// Samples every `interval` until `shutdown` resolves.
    pub async fn run(&self, interval: Duration, shutdown: impl std::future::Future<Output = ()>) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                () = async { ticker.tick().await; self.sample_once().await } => {}
            }
        }
    }

    /// Per pod what is known at `now` (controller clock): each resource from its query's answer
    /// as the last round joined it, while that answer is fresh. Joined again here only when an
    /// answer has gone stale since (its resource is then dropped); a new answer is joined by
    /// the round that brought it.
    pub fn usage(&self, now: Duration) -> Arc<PodUsages> {
        {
            let merged = self.merged.lock().unwrap_or_else(PoisonError::into_inner);
            if merged.from.iter().flatten().all(|(_, at)| self.fresh(*at, now)) {
                return merged.usages.clone();
            }
        }
        self.refresh(now)
    }

    /// The answers fresh at `now` joined per pod: the last join if it was made of these same
    /// answers, else a new one (made without holding the joined copy's lock, which a decision
    /// may be waiting on).
    fn refresh(&self, now: Duration) -> Arc<PodUsages> {
        let wanted: Vec<Option<(u64, Duration)>> = self
            .queries
            .iter()
            .map(|q| {
                let state = q.lock();
                state.answer.as_ref().map(|a| (state.generation, a.at)).filter(|(_, at)| self.fresh(*at, now))
            })
            .collect();
        {
            let merged = self.merged.lock().unwrap_or_else(PoisonError::into_inner);
            if merged.from[..] == wanted[..] {
                return merged.usages.clone();
            }
        }
        let usages = Arc::new(self.join(now));
        let mut merged = self.merged.lock().unwrap_or_else(PoisonError::into_inner);
        *merged = Merged { usages: usages.clone(), from: [wanted[0], wanted[1]] };
        usages
    }

    /// Whether an answer Prometheus evaluated at `at` may still be used at `now`.
    fn fresh(&self, at: Duration, now: Duration) -> bool {
        now.saturating_sub(at) <= self.stale_after
    }

    fn join(&self, now: Duration) -> PodUsages {
        let mut pods = PodUsages::default();
        for query in &self.queries {
            let state = query.lock();
            let Some(answer) = state.answer.as_ref().filter(|a| self.fresh(a.at, now)) else {
                continue;
            };
            pods.reserve(answer.pods.len());
            for (pod, &amount) in &answer.pods {
                let usage = pods.entry(pod.clone()).or_default();
                match query.resource {
                    Resource::Cpu => usage.cpu_millicores = Some(amount),
                    Resource::Memory => usage.memory_bytes = Some(amount),
                }
            }
        }
        pods
    }

    async fn fetch(&self, query: &Query) -> Result<Answer, SampleError> {
        let (status, body) = tokio::time::timeout(
            self.timeout,
            promql::get(&self.http, self.auth.as_ref(), &self.base, &query.text, self.timeout),
        )
        .await
        .map_err(|_| SampleError::Timeout(self.timeout))??;
        let series = promql::parse_series(status, &body)?;
        let state = query.lock();
        let previous = state.answer.as_ref().map(|a| &a.pods);
        per_pod(&series, query.resource, previous.unwrap_or(&NameMap::default()))
    }

    fn record(&self, query: &Query, attempt: Result<Answer, SampleError>, now: Duration) {
        let label = query.resource.label();
        let mut state = query.lock();
        match attempt {
            Ok(answer) => {
                if let Some((kind, attempts)) = state.failing.take() {
                    info!(query = query.resource.key(), after = attempts, failure = kind, "usage sampling works again");
                }
                state.answer = Some(answer);
                state.generation += 1;
            }
            Err(error) => {
                self.metrics.record_sample_error(METRICS_SERVICE, label);
                match &mut state.failing {
                    Some((kind, attempts)) if *kind == error.kind() => *attempts += 1,
                    failing => {
                        warn!(query = query.resource.key(), cause = %error,
                            "usage sampling failed; pods count at their requests once the last answer is stale");
                        *failing = Some((error.kind(), 1));
                    }
                }
            }
        }
        let since = *state.sampling_since.get_or_insert(now);
        let age = now.saturating_sub(state.answer.as_ref().map_or(since, |a| a.at));
        self.metrics.set_sample_age(METRICS_SERVICE, label, age);
        if age > self.stale_after {
            self.metrics.record_stale_sample(METRICS_SERVICE, label);
        }
    }
}

impl Query {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueryState> {
        // The state stays consistent between statements; a panic elsewhere must not stop sampling.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The labels a usage series is read by, borrowed from the answer (Kubernetes names need no
/// JSON escapes). An empty label is an absent one, as in Prometheus.
#[derive(Debug, Default, Deserialize)]
struct PodLabels<'a> {
    #[serde(borrow, default)]
    namespace: Cow<'a, str>,
    #[serde(borrow, default)]
    pod: Cow<'a, str>,
}

/// The answer's series as amounts per pod key, stamped with the oldest evaluation time. A
/// series without `namespace` or `pod` makes the whole answer unusable (the query aggregates
/// them away); one with a value that is not a finite non-negative number is left out (that
/// pod counts at its requests). Keys the `previous` answer has are shared, not copied.
fn per_pod(
    series: &[LabelledSample<PodLabels>],
    resource: Resource,
    previous: &NameMap<PodKey, i64>,
) -> Result<Answer, SampleError> {
    let mut pods = NameMap::default();
    pods.reserve(series.len());
    let mut answer = Answer { at: Duration::MAX, pods };
    let mut key = String::new();
    for s in series {
        let PodLabels { namespace, pod } = &s.labels;
        if namespace.is_empty() || pod.is_empty() {
            return Err(SampleError::BadResponse(format!(
                "a series without `namespace` and `pod` labels (namespace `{namespace}`, pod `{pod}`): \
                 keep them, e.g. `sum by (namespace, pod) (...)`"
            )));
        }
        answer.at = answer.at.min(s.sample.at);
        if !s.sample.value.is_finite() || s.sample.value < 0.0 {
            continue;
        }
        key.clear();
        key.push_str(namespace);
        key.push('/');
        key.push_str(pod);
        let amount = resource.amount(s.sample.value);
        if let Some(sum) = answer.pods.get_mut(key.as_str()) {
            *sum += amount;
        } else {
            let shared =
                previous.get_key_value(key.as_str()).map_or_else(|| PodKey::from(key.as_str()), |(k, _)| k.clone());
            answer.pods.insert(shared, amount);
        }
    }
    // Stamped by Prometheus's wall clock.
    answer.at = clock::from_wall(answer.at);
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Sample;

    fn series(labels: &[(&str, &str)], value: f64) -> LabelledSample<PodLabels<'static>> {
        let label = |name: &str| labels.iter().find(|(k, _)| *k == name).map_or("", |(_, v)| *v).to_string();
        LabelledSample {
            labels: PodLabels { namespace: label("namespace").into(), pod: label("pod").into() },
            sample: Sample { at: clock::now(), value },
        }
    }

    #[test]
    fn an_answer_shares_the_keys_of_the_previous_one() {
        let first =
            per_pod(&[series(&[("namespace", "web"), ("pod", "a")], 0.5)], Resource::Cpu, &NameMap::default()).unwrap();
        let second = per_pod(
            &[series(&[("namespace", "web"), ("pod", "a")], 0.7), series(&[("namespace", "web"), ("pod", "b")], 0.1)],
            Resource::Cpu,
            &first.pods,
        )
        .unwrap();
        let (old, _) = first.pods.get_key_value("web/a").unwrap();
        let (new, &amount) = second.pods.get_key_value("web/a").unwrap();
        assert!(Arc::ptr_eq(old, new), "web/a was copied, not shared");
        assert_eq!(amount, 700);
        assert_eq!(second.pods.get("web/b"), Some(&100));
    }

    #[test]
    fn series_become_amounts_per_pod_with_containers_added_up() {
        let answer = per_pod(
            &[
                series(&[("namespace", "web"), ("pod", "nginx-1"), ("container", "nginx")], 0.25),
                series(&[("namespace", "web"), ("pod", "nginx-1"), ("container", "sidecar")], 0.0501),
                series(&[("namespace", "web"), ("pod", "nginx-2")], 1.5),
                series(&[("namespace", "web"), ("pod", "odd")], f64::NAN),
            ],
            Resource::Cpu,
            &NameMap::default(),
        )
        .unwrap();
        let mut got: Vec<(&str, i64)> = answer.pods.iter().map(|(k, v)| (&**k, *v)).collect();
        got.sort();
        assert_eq!(got, [("web/nginx-1", 301), ("web/nginx-2", 1500)], "cores as millicores, rounded up");
    }

    #[test]
    fn an_answer_is_read_by_its_pod_labels_whatever_else_it_carries() {
        // An escaped label value is read as well as a plain one (it is copied, not borrowed).
        let body = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"namespace":"web","pod":"nginx-1","container":"nginx","node":"n1"},"value":[1700000000,"0.25"]},
            {"metric":{"namespace":"web","pod":"nginx\u002d2"},"value":[1700000000,"0.5"]}]}}"#;
        let answer =
            per_pod(&promql::parse_series(200, body.as_bytes()).unwrap(), Resource::Cpu, &NameMap::default()).unwrap();
        let mut got: Vec<(&str, i64)> = answer.pods.iter().map(|(k, v)| (&**k, *v)).collect();
        got.sort();
        assert_eq!(got, [("web/nginx-1", 250), ("web/nginx-2", 500)]);
        let unlabelled = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"instance":"10.0.0.1:10250"},"value":[1700000000,"3"]}]}}"#;
        let err =
            per_pod(&promql::parse_series(200, unlabelled.as_bytes()).unwrap(), Resource::Cpu, &NameMap::default())
                .unwrap_err();
        assert!(matches!(&err, SampleError::BadResponse(m) if m.contains("sum by (namespace, pod)")), "{err}");
    }

    #[test]
    fn a_series_without_pod_labels_is_an_error_that_says_how_to_keep_them() {
        let err = per_pod(&[series(&[("instance", "10.0.0.1:10250")], 3.0)], Resource::Memory, &NameMap::default())
            .unwrap_err();
        assert!(matches!(&err, SampleError::BadResponse(m) if m.contains("sum by (namespace, pod)")), "{err}");
    }

    fn sampler(stale_after: Duration) -> UsageSampler {
        UsageSampler::new(
            super::super::http_client(&crate::live::tls::LoadedTls::default()).unwrap(),
            None,
            Url::parse("http://127.0.0.1:1").unwrap(),
            DEFAULT_CPU_QUERY,
            DEFAULT_MEMORY_QUERY,
            stale_after,
            Arc::new(Metrics::new()),
        )
    }

    #[test]
    fn usage_joins_both_queries_and_drops_a_stale_one() {
        let s = sampler(Duration::from_secs(30));
        let now = clock::now();
        let answer = |at: Duration, pods: &[(&str, i64)]| {
            Ok(Answer { at, pods: pods.iter().map(|(k, v)| (PodKey::from(*k), *v)).collect() })
        };
        s.record(&s.queries[0], answer(now, &[("web/a", 300), ("web/b", 700)]), now);
        s.record(&s.queries[1], answer(now - Duration::from_secs(31), &[("web/a", 1 << 28)]), now);
        s.publish(now);
        let usage = s.usage(now);
        assert_eq!(usage["web/a"], PodUsage { cpu_millicores: Some(300), memory_bytes: None }, "memory is stale");
        assert_eq!(usage["web/b"].cpu_millicores, Some(700));
        // A failure keeps the last answer until it is stale.
        s.record(&s.queries[0], Err(SampleError::NoSeries), now + Duration::from_secs(5));
        s.publish(now + Duration::from_secs(5));
        assert_eq!(s.usage(now + Duration::from_secs(30))["web/a"].cpu_millicores, Some(300));
        assert!(s.usage(now + Duration::from_secs(31)).is_empty(), "both answers stale");
    }

    #[test]
    fn answers_are_joined_once_per_round_and_handed_on_not_joined_at_every_decision() {
        let applied = Arc::new(Mutex::new(Vec::new()));
        let seen = applied.clone();
        let apply: ApplyFn = Box::new(move |u| seen.lock().unwrap().push(u.clone()));
        let s = sampler(Duration::from_secs(30)).with_apply(apply);
        let now = clock::now();
        let answer = |milli: i64| Ok(Answer { at: now, pods: [(PodKey::from("web/a"), milli)].into_iter().collect() });
        s.record(&s.queries[0], answer(300), now);
        s.publish(now);
        let first = s.usage(now);
        assert_eq!(first["web/a"].cpu_millicores, Some(300));
        assert!(Arc::ptr_eq(&first, &s.usage(now + Duration::from_secs(1))), "nothing new: the same join");
        s.record(&s.queries[0], answer(700), now);
        assert!(Arc::ptr_eq(&first, &s.usage(now + Duration::from_secs(1))), "a decision does not join a new answer");
        s.publish(now + Duration::from_secs(1));
        let second = s.usage(now + Duration::from_secs(1));
        assert_eq!(second["web/a"].cpu_millicores, Some(700));
        let applied = applied.lock().unwrap();
        assert_eq!(applied.len(), 2, "each round hands its join on");
        assert!(Arc::ptr_eq(&applied[0], &first) && Arc::ptr_eq(&applied[1], &second));
    }

    #[tokio::test]
    async fn a_query_that_never_answers_is_an_error_naming_its_key_and_query() {
        let s = sampler(Duration::from_secs(30));
        let err = s.check(Duration::from_millis(50), Duration::from_millis(20)).await.unwrap_err();
        assert!(
            matches!(&err, UsageError::Failed { key: "run.usage_cpu_query", query, cause: SampleError::Unreachable(_) }
                if query == DEFAULT_CPU_QUERY),
            "{err}"
        );
        assert!(err.to_string().starts_with("run.usage_cpu_query `sum by (namespace, pod)"), "{err}");
    }
}
