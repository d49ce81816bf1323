//! The dashboards and rules of the chart (`charts/colocate/files/`) queried for real: two
//! `colocate run` replicas on the real control plane (etcd, kube-apiserver, kube-scheduler,
//! kube-controller-manager, kwok), scraped every second by a real Prometheus (Debian's
//! `prometheus`, `honor_labels: true` as the dashboards' README requires) that evaluates the
//! chart's rule file every second. The test shrinks two elastic jobs with an HPA spike and grows
//! them back, then asks Prometheus's HTTP API what Grafana and the rule evaluator ask:
//!
//! - every recording and alerting rule is loaded and evaluates without error, every recorded
//!   series has data;
//! - every panel target, annotation and variable query of both dashboards runs (Grafana's
//!   variables substituted, `$job` and `$service` with the values of the dashboards' own
//!   variable queries); every panel shows data; every `{{label}}` of a legend is on the series;
//! - the alerts that say the controller is unhealthy are neither pending nor firing.
//!
//! `tests/dashboards.rs` checks the same files statically (they parse, name exported metrics);
//! this one catches what only evaluation shows: a matcher or join that selects nothing, or an
//! expression Prometheus rejects at evaluation ("many-to-many matching not allowed").
//! `cargo test --release --test dashboards_live -- --nocapture` prints the per-panel table,
//! also written to `target/test-reports/dashboards_live.json`.
//!
//! Cluster: 2 nodes x 8 CPU. NGINX: 2 replicas of 1 CPU, HPA status written by the test. Jobs:
//! 1-CPU workers, 1..12 each. Service load and latency: Prometheus's own request counter and
//! latency histogram, through the same Prometheus.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use support::cluster::{
    self, deployment_replicas, eventually, pod_counts, report_dir, set_hpa, Behaviour, Controller, ElasticJob,
    QUICK_FLAGS,
};
use support::grafana::{self, legend_labels, Variables};
use support::process::{free_port, path};
use support::prometheus::{Prometheus, PrometheusApi, Series};

/// Scrape and rule evaluation interval. Grafana's data source is taken to know it (its "scrape
/// interval" setting), so `$__rate_interval` is max(`$__interval` + 1 s, 4 x 1 s) = 4 s.
const SCRAPE_INTERVAL: &str = "1s";
const INTERVAL: Duration = Duration::from_secs(1);
const RATE_INTERVAL: &str = "4s";

/// The service's load: the rate of Prometheus's scrapes of itself (one a second, so the load is
/// flat and the controller's load-trend forecast reserves nothing for noise).
const LOAD: &str = r#"sum(rate(prometheus_http_requests_total{handler="/metrics"}[10s]))"#;
/// The service's p99: Prometheus's request latency histogram (every handler; the replicas'
/// sampling queries keep it fed).
const P99: &str = "histogram_quantile(0.99, sum by (le) (rate(prometheus_http_request_duration_seconds_bucket[10s])))";

/// Panel targets allowed to return no data in this run; their queries must still succeed.
/// Every other target must return data, so a matcher or join that selects nothing fails the
/// test even where another target of the same panel has data. No panel here shows data only
/// on failure: the controller creates its failure counters at 0 (forced preemptions per job,
/// sampling errors and stale samples per source, actuation errors per kind), so those panels
/// show zeros. (dashboard file, panel title, refId, why)
const NO_DATA_HERE: &[(&str, &str, &str, &str)] = &[
    (
        "colocate-cluster.json",
        "Residual capacity in the cluster",
        "C",
        "GPU room is drawn only when above 0 (`> 0`), and the test bed's nodes have no GPU",
    ),
    ("colocate-cluster.json", "CPU usage vs allocation", "A", USAGE_MODE),
    ("colocate-cluster.json", "CPU usage vs allocation per node", "A", USAGE_MODE),
    ("colocate-cluster.json", "CPU usage vs allocation per node", "B", USAGE_MODE),
    ("colocate-cluster.json", "CPU cores used vs requested by class", "A", USAGE_MODE),
    ("colocate-cluster.json", "Batch CPU capacity published vs used", "A", USAGE_MODE),
    ("colocate-cluster.json", "Batch CPU capacity published vs used", "B", USAGE_MODE),
    ("colocate-cluster.json", "Batch CPU capacity published vs used", "C", USAGE_MODE),
    ("colocate-cluster.json", "Batch memory capacity published vs used", "A", USAGE_MODE),
    ("colocate-cluster.json", "Batch memory capacity published vs used", "B", USAGE_MODE),
    ("colocate-cluster.json", "Batch memory capacity published vs used", "C", USAGE_MODE),
    ("colocate-cluster.json", "Batch memory capacity published vs used", "D", USAGE_MODE),
];

/// Why the usage-mode series are absent here: the replicas run in `capacity: requests`, where
/// no usage is known and no batch capacity is published (tests/dashboards.rs checks their
/// names and labels against what the controller exports in usage mode).
const USAGE_MODE: &str = "capacity: usage only, and this run is in capacity: requests";

/// Alerts that say the controller itself is broken; none may be pending or firing here. The
/// others (allocation under target, latency over SLO) describe the cluster, not the controller.
const HEALTH_ALERTS: &[&str] = &[
    "ColocateMetricsAbsent",
    "ColocateNoLeader",
    "ColocateSeveralLeaders",
    "ColocateNotDeciding",
    "ColocateReflectorsNotReady",
    "ColocateSamplesStale",
    "ColocateSampleErrors",
    "ColocateActuationFailures",
    "ColocateJobMasterDown",
    "ColocateForcedPreemptions",
    "ColocateDecisionsSlow",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboards_and_rules_return_data_from_two_live_replicas() {
    let started = Instant::now();
    let bed = cluster::bed_playing_the_hpa().await;
    let dir = tempfile::Builder::new().prefix("colocate-dashboards-").tempdir().expect("a temporary directory");
    let targets = dir.path().join("colocate-targets.json");
    scrape_targets(&targets, &[]);
    let port = free_port();
    let prometheus = Prometheus::start(dir.path(), port, &prometheus_config(port, &targets)).await;
    let api = &prometheus.api();
    let from = unix_now();
    // The controllers start once their load and latency queries answer, so that sampling errors
    // seen later are real ones.
    eventually(Duration::from_secs(30), "Prometheus to answer the load and p99 queries", || async move {
        let answers = [api.query(LOAD, None).await, api.query(P99, None).await];
        answers.iter().all(|a| a.as_ref().is_ok_and(|s| s.iter().any(Series::has_finite_value))).then_some(())
    })
    .await;

    let client = cluster::two_nodes_with_nginx(&bed).await;
    set_hpa(&client, 2, 10).await; // see spike_and_calm
    let ja = ElasticJob::start(&bed, &client, "ml", "ja", (1, 12, 2), Behaviour::Honest, None).await;
    let jb = ElasticJob::start(&bed, &client, "ml", "jb", (1, 12, 2), Behaviour::Honest, None).await;
    let config = controller_config(&prometheus.url());
    // Two replicas, as the chart deploys by default: distinct metrics ports, one Lease.
    let replicas =
        [Controller::start(&bed, &config, QUICK_FLAGS).await, Controller::start(&bed, &config, QUICK_FLAGS).await];
    scrape_targets(&targets, &replicas);
    eventually(Duration::from_secs(20), "Prometheus to scrape both replicas", || async move {
        (scalar(api, r#"count(up{job="colocate"} == 1)"#).await == Some(2.0)).then_some(())
    })
    .await;
    let controllers_scraped = started.elapsed();

    let phases = spike_and_calm(&client, api, &ja, &jb).await;
    // Prometheus has scraped the end state: the dashboards' workers per job are the cluster's.
    let running = phases.regrown as f64;
    eventually(Duration::from_secs(15), "the regrown workers in Prometheus", || async move {
        (scalar(api, "sum(max by (job) (colocate_job_workers))").await == Some(running)).then_some(())
    })
    .await;
    let to = unix_now();
    let leaders = scalar(api, "sum(colocate_leader)").await;
    let instances = scalar(api, "count(colocate_leader)").await;
    eprintln!(
        "scenario: {} workers held, filled to {}, shrunk to {}, regrown to {}; controllers scraped {:.0} s after \
         start, queries over {:.0} s; phases (s since the scenario began): {:?}",
        phases.held,
        phases.filled,
        phases.shrunk,
        phases.regrown,
        controllers_scraped.as_secs_f64(),
        to - from,
        phases.at
    );

    let mut problems = Vec::new();
    if (instances, leaders) != (Some(2.0), Some(1.0)) {
        problems.push(format!("expected 2 replicas scraped and 1 leader, got {instances:?} and {leaders:?}"));
    }
    // ColocateSamplesStale compares sample ages with the threshold the replicas export: the
    // default run.sample_stale_after here.
    let stale_after = scalar(api, "max(colocate_sample_stale_after_seconds)").await;
    if stale_after != Some(60.0) {
        problems.push(format!("colocate_sample_stale_after_seconds is {stale_after:?}, expected 60 (the default)"));
    }
    let rules = check_rules(api, from, to, &mut problems).await;
    let variables = run_variables(api, from, to, &mut problems).await;
    let vars = Variables {
        interval: format!("{}s", INTERVAL.as_secs()),
        rate_interval: RATE_INTERVAL.into(),
        range: format!("{}s", (to - from).ceil()),
        selected: variables.iter().map(|v| (v.name.clone(), v.values.clone())).collect(),
    };
    let panels = run_panels(api, &vars, from, to, &mut problems).await;
    let annotations = run_annotations(api, &vars, from, to, &mut problems).await;

    print_table(&panels);
    let report = json!({
        "wall_time_s": started.elapsed().as_secs_f64(),
        "range_s": to - from,
        "scenario": {"held": phases.held, "filled": phases.filled, "shrunk": phases.shrunk, "regrown": phases.regrown,
                     "phases_s": phases.at.iter().map(|(p, t)| json!({"phase": p, "at_s": t})).collect::<Vec<_>>()},
        "variables": variables.iter().map(|v| json!({"dashboard": v.dashboard, "name": v.name, "values": v.values})).collect::<Vec<_>>(),
        "panels": panels.iter().map(PanelResult::to_json).collect::<Vec<_>>(),
        "annotations": annotations,
        "rules": rules,
        "problems": problems,
    });
    let file = report_dir().join("dashboards_live.json");
    std::fs::write(&file, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    eprintln!("report: {}; wall time {:.0} s", file.display(), started.elapsed().as_secs_f64());
    let log = prometheus.log_text();
    let log_tail: Vec<&str> = log.lines().rev().take(10).collect::<Vec<_>>().into_iter().rev().collect();
    assert!(
        problems.is_empty(),
        "{} problem(s):\n{}\nPrometheus log, last lines:\n{}",
        problems.len(),
        problems.join("\n"),
        log_tail.join("\n")
    );
    drop(replicas);
}

// ---- the scenario

/// Worker counts at each phase, and when each phase ended (seconds since the scenario began).
struct Phases {
    held: u32,
    filled: u32,
    shrunk: u32,
    regrown: u32,
    at: Vec<(&'static str, f64)>,
}

async fn workers(client: &kube::Client) -> u32 {
    deployment_replicas(client, "ml", "ja-workers").await + deployment_replicas(client, "ml", "jb-workers").await
}

/// Waits until the jobs have at least `at_least` workers, all running, and no change for 5 s
/// (longer than the 3 s grow stabilization); returns their number.
async fn settled_workers(client: &kube::Client, at_least: u32, what: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut since = (u32::MAX, Instant::now());
    loop {
        let w = workers(client).await;
        let (running, _) = pod_counts(client, "ml", "colocate.dev/role=worker").await;
        let now = Instant::now();
        let seen = if running as u32 == w { w } else { u32::MAX };
        if seen != since.0 {
            since = (seen, now);
        }
        if seen != u32::MAX && w >= at_least && now - since.1 >= Duration::from_secs(5) {
            return w;
        }
        assert!(now < deadline, "timed out after 60 s waiting for {what}: {w} workers wanted, {running} running");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The sum over jobs of the worker targets the dashboards show (the leader's), once Prometheus
/// has it.
async fn shown_targets(api: &PrometheusApi) -> Option<f64> {
    scalar(api, "sum(max by (job) (colocate_job_target_workers and on (instance) (colocate_leader == 1)))").await
}

/// Starts with the HPA expecting NGINX at its maximum, so the jobs hold at a small size (what
/// the reservation leaves) while Prometheus records it; then the jobs fill the idle room (a grow against a minute
/// earlier: the Grows annotation); a minute later the HPA decides 6 replicas and the jobs
/// shrink below what they had a minute earlier (intents, commands, decision annotations: the
/// Shrinks annotation); NGINX scales; the spike ends and the jobs grow back. The annotations
/// compare with `offset 1m`, hence the minute between the fill and the spike.
async fn spike_and_calm(client: &kube::Client, api: &PrometheusApi, ja: &ElasticJob, jb: &ElasticJob) -> Phases {
    let start = Instant::now();
    let mut at = Vec::new();
    let mut mark = |phase| at.push((phase, start.elapsed().as_secs_f64()));
    // The jobs may grow into what the HPA's reservation leaves before Prometheus first sees the
    // leader (it must be elected and scraped first, which takes longer on a loaded machine):
    // what is held is whatever they settle at, once Prometheus shows it.
    settled_workers(client, 1, "the jobs to settle with the HPA at its maximum").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let held = loop {
        let (shown, now) = (shown_targets(api).await, workers(client).await);
        if shown == Some(f64::from(now)) {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after 60 s waiting for Prometheus to record the jobs' first targets: the leader's \
             targets sum to {shown:?}, the jobs have {now} workers"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    mark("first targets recorded");
    set_hpa(client, 2, 2).await;
    let filled = settled_workers(client, 10, "the jobs to fill the idle room").await;
    assert!(filled > held, "the jobs did not grow when the HPA's reservation went: {held} -> {filled} workers");
    eventually(Duration::from_secs(15), "Prometheus to record the filled targets", || async move {
        (shown_targets(api).await == Some(f64::from(filled))).then_some(())
    })
    .await;
    mark("filled");
    tokio::time::sleep(Duration::from_secs(62)).await;
    let before_spike = workers(client).await;
    assert_eq!(before_spike, filled, "the jobs changed in a minute of steady cluster");

    set_hpa(client, 2, 6).await;
    eventually(Duration::from_secs(10), "a shrink command", || async move {
        ja.commands().iter().chain(&jb.commands()).any(|c| c.reason == "online-headroom").then_some(())
    })
    .await;
    cluster::scale_nginx(client, 6).await;
    eventually(Duration::from_secs(30), "6 NGINX replicas bound", || async move {
        (pod_counts(client, "web", "app=nginx").await.0 == 6).then_some(())
    })
    .await;
    set_hpa(client, 6, 6).await;
    let shrunk = workers(client).await;
    assert!(shrunk < filled, "the jobs did not shrink: {shrunk} workers (were {filled})");
    mark("shrunk");

    set_hpa(client, 6, 2).await;
    cluster::scale_nginx(client, 2).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    set_hpa(client, 2, 2).await;
    let regrown = settled_workers(client, filled, "the jobs to grow back").await;
    mark("regrown");
    Phases { held, filled, shrunk, regrown, at }
}

// ---- rules

/// Every rule of the chart's file is loaded and healthy, every recorded series has data, and
/// no health alert is pending or firing. Returns the rules' states for the report.
async fn check_rules(api: &PrometheusApi, from: f64, to: f64, problems: &mut Vec<String>) -> Vec<Value> {
    let file = grafana::files_dir().join("rules/colocate.rules.yml");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let declared: Value = serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let declared: BTreeSet<String> = declared["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r.get("record").or_else(|| r.get("alert")).and_then(Value::as_str).map(String::from))
        .collect();
    let groups = api.rule_groups().await.unwrap_or_else(|e| panic!("GET /api/v1/rules: {e}"));
    let mut out = Vec::new();
    let mut loaded = BTreeSet::new();
    for rule in groups.iter().flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default()) {
        let name = rule["name"].as_str().unwrap_or("?").to_string();
        loaded.insert(name.clone());
        let health = rule["health"].as_str().unwrap_or("?");
        if health != "ok" {
            problems.push(format!("rule {name}: health {health}: {}", rule["lastError"].as_str().unwrap_or("")));
        }
        let mut entry = json!({"name": name, "type": rule["type"], "health": health, "last_error": rule["lastError"]});
        if rule["type"] == "recording" {
            let series = match api.query_range(&name, from, to, INTERVAL).await {
                Ok(s) => s,
                Err(e) => {
                    problems.push(format!("recorded series {name}: {e}"));
                    Vec::new()
                }
            };
            if !series.iter().any(Series::has_finite_value) {
                problems.push(format!("recorded series {name} has no data ({} series, none finite)", series.len()));
            }
            // A stored NaN turns every avg_over_time or sum_over_time across it into NaN.
            let nan: usize = series.iter().map(Series::nan_points).sum();
            if nan > 0 {
                problems.push(format!("recorded series {name} has {nan} NaN points (0/0?): record no sample instead"));
            }
            entry["series"] = json!(series.len());
            entry["nan_points"] = json!(nan);
        } else {
            let state = rule["state"].as_str().unwrap_or("?");
            if HEALTH_ALERTS.contains(&name.as_str()) && state != "inactive" {
                problems.push(format!("alert {name} is {state} in a healthy cluster: {}", rule["alerts"]));
            }
            entry["state"] = json!(state);
        }
        out.push(entry);
    }
    for missing in declared.difference(&loaded) {
        problems.push(format!("rule {missing} of {} is not loaded by Prometheus", file.display()));
    }
    for alert in HEALTH_ALERTS.iter().filter(|a| !declared.contains(**a)) {
        problems.push(format!("health alert {alert} is not in {} (rename it here too)", file.display()));
    }
    out
}

// ---- dashboards

struct VariableValues {
    dashboard: String,
    name: String,
    values: Vec<String>,
}

/// Runs every `label_values` variable query; the job and service variables must list exactly
/// the test's jobs and service.
async fn run_variables(api: &PrometheusApi, from: f64, to: f64, problems: &mut Vec<String>) -> Vec<VariableValues> {
    let expected = BTreeMap::from([("job", vec!["ml/ja", "ml/jb"]), ("service", vec!["web/nginx"])]);
    let mut out = Vec::new();
    for d in grafana::dashboards() {
        for v in d.variables() {
            let mut values = api.label_values(&v.label, &v.selector, from, to).await.unwrap_or_else(|e| {
                problems.push(format!("{}: variable {}: {e}", d.file, v.name));
                Vec::new()
            });
            values.sort();
            match expected.get(v.name.as_str()) {
                Some(want) if values != *want => {
                    problems.push(format!("{}: variable {} lists {values:?}, expected {want:?}", d.file, v.name))
                }
                None => problems.push(format!("{}: variable {} is new: add its expected values here", d.file, v.name)),
                _ => {}
            }
            out.push(VariableValues { dashboard: d.file.clone(), name: v.name, values });
        }
    }
    out
}

struct TargetResult {
    ref_id: String,
    expr: String,
    series: usize,
    nan: usize,
    /// Some series has a number (not only NaN, as 0/0 gives).
    finite: bool,
    /// Why it may return no data, from [`NO_DATA_HERE`].
    exempt: Option<&'static str>,
}

struct PanelResult {
    dashboard: String,
    title: String,
    targets: Vec<TargetResult>,
}

impl PanelResult {
    fn has_data(&self) -> bool {
        self.targets.iter().any(|t| t.finite)
    }

    fn to_json(&self) -> Value {
        let targets: Vec<Value> = self
            .targets
            .iter()
            .map(|t| {
                json!({"ref": t.ref_id, "expr": t.expr, "series": t.series, "nan_points": t.nan, "has_data": t.finite,
                       "no_data_allowed": t.exempt})
            })
            .collect();
        json!({"dashboard": self.dashboard, "panel": self.title, "series": self.series(), "has_data": self.has_data(),
               "targets": targets})
    }

    fn series(&self) -> usize {
        self.targets.iter().map(|t| t.series).sum()
    }
}

/// Runs every panel target as Grafana does (instant ones at the end, the others over the whole
/// range every `$__interval`); each must return data unless [`NO_DATA_HERE`] says why not.
async fn run_panels(
    api: &PrometheusApi,
    vars: &Variables,
    from: f64,
    to: f64,
    problems: &mut Vec<String>,
) -> Vec<PanelResult> {
    let mut out = Vec::new();
    for d in grafana::dashboards() {
        for panel in d.panels() {
            let mut targets = Vec::new();
            for t in &panel.targets {
                let expr = vars.substitute(&t.expr);
                let answer = match t.instant {
                    true => api.query(&expr, Some(to)).await,
                    false => api.query_range(&expr, from, to, INTERVAL).await,
                };
                let where_ = format!("{}: panel {:?} target {}", d.file, panel.title, t.ref_id);
                let series = answer.unwrap_or_else(|e| {
                    problems.push(format!("{where_}: {e}\n  query: {expr}"));
                    Vec::new()
                });
                for label in legend_labels(&t.legend) {
                    if let Some(s) = series.iter().find(|s| !s.labels.contains_key(&label)) {
                        problems
                            .push(format!("{where_}: legend uses {{{{{label}}}}}, a series has only {:?}", s.labels));
                    }
                }
                let finite = series.iter().any(Series::has_finite_value);
                // Grafana shows NaN as "NaN" in stats and tooltips: a query should return no
                // point where it has no number.
                let nan: usize = series.iter().map(Series::nan_points).sum();
                if nan > 0 {
                    problems.push(format!("{where_}: {nan} NaN points (0/0?)\n  query: {expr}"));
                }
                let exempt = NO_DATA_HERE
                    .iter()
                    .find(|(f, p, r, _)| *f == d.file && *p == panel.title && *r == t.ref_id)
                    .map(|(_, _, _, why)| *why);
                if !finite && exempt.is_none() {
                    problems.push(format!("{where_}: no data ({} series, none finite)\n  query: {expr}", series.len()));
                }
                targets.push(TargetResult {
                    ref_id: t.ref_id.clone(),
                    expr,
                    series: series.len(),
                    nan,
                    finite,
                    exempt,
                });
            }
            out.push(PanelResult { dashboard: d.file.clone(), title: panel.title, targets });
        }
    }
    out
}

/// Runs every annotation query over the range every second (their declared step, 1 m, is a
/// minimum Grafana applies on long ranges; over this short run it would sample two points).
/// The scenario made each thing they mark happen (a grow, a shrink), so each returns data.
async fn run_annotations(
    api: &PrometheusApi,
    vars: &Variables,
    from: f64,
    to: f64,
    problems: &mut Vec<String>,
) -> Vec<Value> {
    let mut out = Vec::new();
    for d in grafana::dashboards() {
        for a in d.annotations() {
            let expr = vars.substitute(&a.expr);
            let series = api.query_range(&expr, from, to, INTERVAL).await.unwrap_or_else(|e| {
                problems.push(format!("{}: annotation {:?}: {e}\n  query: {expr}", d.file, a.name));
                Vec::new()
            });
            let points: usize = series.iter().map(|s| s.points.len()).sum();
            if series.is_empty() {
                problems.push(format!("{}: annotation {:?} marks nothing\n  query: {expr}", d.file, a.name));
            }
            out.push(json!({"dashboard": d.file, "annotation": a.name, "series": series.len(), "points": points}));
        }
    }
    out
}

fn print_table(panels: &[PanelResult]) {
    eprintln!("{:<26} {:<45} {:>6}  per target (- : no data, allowed here)", "dashboard", "panel", "series");
    for p in panels {
        let per: Vec<String> = p
            .targets
            .iter()
            .map(|t| {
                format!(
                    "{} {}{}",
                    t.ref_id,
                    t.series,
                    if t.finite {
                        ""
                    } else if t.exempt.is_some() {
                        " -"
                    } else {
                        " NO DATA"
                    }
                )
            })
            .collect();
        eprintln!("{:<26} {:<45} {:>6}  {}", p.dashboard, p.title, p.series(), per.join(", "));
    }
}

// ---- Prometheus

fn prometheus_config(port: u16, targets: &Path) -> String {
    let rules = grafana::files_dir().join("rules/colocate.rules.yml");
    format!(
        "global:\n  scrape_interval: {SCRAPE_INTERVAL}\n  evaluation_interval: {SCRAPE_INTERVAL}\n\
         rule_files: ['{rules}']\n\
         scrape_configs:\n\
         \x20 - job_name: colocate\n    honor_labels: true\n    file_sd_configs: [{{files: ['{targets}']}}]\n\
         \x20 - job_name: prometheus\n    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n",
        rules = path(&rules),
        targets = path(targets),
    )
}

/// Points Prometheus at the replicas' /metrics (file-based discovery: the replicas' ports are
/// known only once they run). Written whole then renamed, so Prometheus never reads half a file.
fn scrape_targets(file: &Path, replicas: &[Controller]) {
    let hosts: Vec<&str> = replicas.iter().map(|c| c.metrics_url.trim_start_matches("http://")).collect();
    let text = json!([{"targets": hosts}]).to_string();
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, text).expect("writing the scrape targets");
    std::fs::rename(&tmp, file).expect("renaming the scrape targets");
}

/// `colocate run`'s configuration: the NGINX service by its HPA, with a load, a p99 and an SLO
/// read from Prometheus, so that the service series exist.
fn controller_config(prometheus: &str) -> String {
    // reserve_tolerance: the HPA status the test writes puts the metric exactly at target, where
    // any upward wobble of the load would reserve a replica.
    format!(
        "controller:\n  grow_stabilization: 3s\n  release_deadline: 20s\n  reserve_tolerance: 0.1\n\
         run:\n  prometheus_url: {prometheus}\n  sample_interval: 500ms\n\
         services:\n  - name: nginx\n    namespace: web\n    hpa: nginx\n    slo_p99: 2s\n    \
         load: {{promql: '{LOAD}'}}\n    latency_p99: {{promql: '{P99}'}}\n"
    )
}

/// The value of a one-series instant query now, if it has one.
async fn scalar(api: &PrometheusApi, expr: &str) -> Option<f64> {
    let series = api.query(expr, None).await.ok()?;
    match series.as_slice() {
        [one] => one.points.first().map(|p| p.1),
        _ => None,
    }
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs_f64()
}
