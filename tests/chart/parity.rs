//! The chart refuses every configuration `colocate check-config` refuses, naming the same key,
//! so that a bad value fails at `helm install` rather than in a crash loop. Each case is a
//! fragment of the controller's configuration file that one check refuses (the parsing of the
//! file, `Config::validate`, `RunConfig::resolve`): written as a file, check-config must refuse
//! it naming the key; given to Helm under `config:`, in a values file (Helm 4 and 3) and as
//! `--set` (Helm 4), the chart must refuse it naming `config.<key>`: with check-config's words
//! when a template check refuses it, or at the key's path when values.schema.json does.

use std::process::Command;

use serde_json::Value;

use crate::chart_support::{documents, helm, helm3, output, template_with};

pub struct Refusal {
    /// A fragment of the configuration file; the chart gets it as its `config:` value.
    fragment: String,
    /// The key check-config names (`run.tick`); Helm names `config.run.tick`.
    key: String,
    /// check-config's words after the key (a prefix where the chart's differ in the details).
    problem: String,
    /// The template's words where they differ from check-config's altogether.
    chart_words: Option<&'static str>,
}

fn refusal(fragment: &str, key: &str, problem: &str) -> Refusal {
    Refusal { fragment: fragment.into(), key: key.into(), problem: problem.into(), chart_words: None }
}

/// One setting of the file: `key` is `block.name`.
fn setting(key: &str, value: &str, problem: &str) -> Refusal {
    let (block, name) = key.split_once('.').unwrap();
    refusal(&format!("{block}:\n  {name}: {value}\n"), key, problem)
}

impl Refusal {
    fn chart_says(mut self, words: &'static str) -> Refusal {
        self.chart_words = Some(words);
        self
    }
}

/// One service that check-config and the chart accept, with `extra` (YAML lines at the
/// service's indentation) appended.
fn service(extra: &str) -> String {
    format!("services:\n  - name: a\n    namespace: web\n{extra}")
}

const DURATIONS: [&str; 16] = [
    "controller.forecast_horizon",
    "controller.hpa_sync_period",
    "controller.trend_window",
    "controller.grow_stabilization",
    "controller.grow_payback",
    "controller.latency_guard_interval",
    "controller.latency_window",
    "controller.release_deadline",
    "controller.waiting_reservation_after",
    "run.tick",
    "run.debounce",
    "run.sample_stale_after",
    "run.sample_interval",
    "run.lease_duration",
    "run.status_interval",
    "run.master_timeout",
];

/// Every refusal a chart value can reach. Not here: run.metrics_addr, lease_name,
/// lease_namespace and master_token_file, which the chart sets itself (values.schema.json
/// refuses them as values; the lease name from the release is in chart.rs).
pub fn refusals() -> Vec<Refusal> {
    let mut cases = Vec::new();
    // Config::validate: every range, then the consistency checks.
    for (key, bad, range) in [
        ("target_utilization", "1.5", "[0, 1]"),
        ("target_utilization", "-0.1", "[0, 1]"),
        ("safety_margin", "0.95", "[0, 0.9]"),
        ("usage_cpu_margin", "0.95", "[0, 0.9]"),
        ("usage_memory_margin", "-0.1", "[0, 0.9]"),
        ("usage_cpu_overcommit", "4.5", "[0, 4]"),
        ("batch_rise_threshold", "1.5", "[0, 1]"),
        ("reserve_tolerance", "1.2", "[0, 1]"),
        ("reserve_quantum", "2", "[0, 1]"),
        ("grow_min_gain", "11", "[0, 10]"),
        ("latency_slack_hold", "1.5", "[-1, 1]"),
        ("latency_slack_shrink", "-2", "[-1, 1]"),
        ("latency_shrink_fraction", "1.5", "[0, 1]"),
        ("usage_latency_shrink_fraction", "-0.5", "[0, 1]"),
    ] {
        cases.push(setting(&format!("controller.{key}"), bad, &format!("{bad} is outside {range}")));
    }
    cases.extend([
        setting("controller.latency_slack_shrink", "0.5", "0.5 is above latency_slack_hold (0.1)"),
        refusal(
            "controller:\n  latency_slack_hold: 0\n  latency_slack_shrink: 0.05\n",
            "controller.latency_slack_shrink",
            "0.05 is above latency_slack_hold (0)",
        ),
        setting("controller.grow_max_step", "0", "must be at least 1"),
        setting("controller.trend_window", "0s", "must be longer than 0s"),
        setting("controller.trend_window", "0h 0ms", "must be longer than 0s"),
        setting("controller.hpa_sync_period", "0s", "must be longer than 0s"),
        // The parsing of the file: types, unknown keys.
        setting("controller.grow_max_step", "1.5", "invalid type: floating point `1.5`, expected u32"),
        setting("controller.latency_guard_max_steps", "-1", "invalid type: integer `-1`, expected u32"),
        setting("controller.grow_max_step", "4294967296", "invalid value: integer `4294967296`, expected u32"),
        setting("controller.target_utilization", "high", "invalid type: string \"high\", expected f64"),
        setting("controller.target_utilisation", "0.8", "unknown field"),
        refusal("controler:\n  target_utilization: 0.8\n", "controler", "unknown field"),
        setting("run.tik", "5s", "unknown field"),
        setting("run.log_format", "xml", "unknown variant `xml`, expected `text` or `json`"),
        setting("run.dry_run", "maybe", "invalid type: string \"maybe\", expected a boolean"),
        setting("run.adapters", "maybe", "invalid type: string \"maybe\", expected a boolean"),
        setting("controller.completion_time_split", "maybe", "invalid type: string \"maybe\", expected a boolean"),
        setting("run.metrics_addr", "everywhere", "invalid socket address syntax"),
    ]);
    // Durations: a bare number and an unknown unit, for every key.
    for key in DURATIONS {
        cases.push(setting(key, "15", "`15` has no unit; write a duration such as 500ms, 15s, 5m or 1h 30m"));
        cases.push(setting(key, "5 parsecs", "`5 parsecs` is not a duration such as 500ms, 15s, 5m or 1h 30m"));
    }
    // RunConfig::resolve, in its order.
    for key in ["sample_interval", "status_interval", "sample_stale_after", "master_timeout", "tick"] {
        cases.push(setting(&format!("run.{key}"), "0s", "must be longer than 0s"));
    }
    cases.extend([
        refusal("run:\n  sample_interval: 2m\n", "run.sample_stale_after", "must be longer than"),
        setting("run.sample_stale_after", "1s", "must be longer than"),
        refusal(
            "run:\n  sample_stale_after: 1m\n  sample_interval: 1h 30s\n",
            "run.sample_stale_after",
            "must be longer than",
        ),
        setting("run.lease_duration", "1s", "must be at least 3s"),
        setting("run.lease_duration", "2s 999ms", "must be at least 3s"),
        setting("run.lease_duration", "70y", "must be shorter than 2147483647s"),
        setting("run.debounce", "20s", "must be shorter than the tick (10s)"),
        setting("run.debounce", "10000ms", "must be shorter than the tick (10s)"),
        refusal("run:\n  tick: 1m\n  debounce: 1h\n", "run.debounce", "must be shorter than the tick"),
        refusal(
            "controller:\n  capacity: usage\n",
            "controller.capacity",
            "usage reads pods' CPU and memory usage from Prometheus",
        ),
        refusal(
            "controller:\n  capacity: usage\nrun:\n  prometheus_url: http://p:9090\n  usage_cpu_query: ''\n",
            "run.usage_cpu_query",
            "the query is empty",
        ),
    ]);
    // run.prometheus_url and scrape URLs: http:// or https:// with a host (`http_url`).
    let url_cases = [
        ("ftp://prometheus/", "scheme `ftp` is not http or https", None),
        ("prometheus.monitoring:9090", "scheme `prometheus.monitoring` is not http or https", None),
        ("https://:9090", "empty host", Some("not an http(s)://HOST")),
        ("/prometheus", "relative URL without a base", None),
        ("http://:9090", "empty host", Some("not an http(s)://HOST")),
        ("http://prometheus:99999", "invalid port number", Some("not an http(s)://HOST")),
        ("http://10.0.0.256:9090", "invalid IPv4 address", Some("not an http(s)://HOST")),
        ("http://prometheus.1:9090", "invalid IPv4 address", Some("not an http(s)://HOST")),
        ("http://[::g]:9090", "invalid IPv6 address", Some("not an http(s)://HOST")),
        ("http://prom etheus:9090", "invalid international domain name", Some("not an http(s)://HOST")),
    ];
    for (url, problem, chart) in url_cases {
        let scrape = service(&format!("    hpa: a\n    load: {{scrape: {{url: '{url}', metric: up}}}}\n"));
        for mut case in [
            setting("run.prometheus_url", &format!("'{url}'"), &format!("`{url}`: {problem}")),
            refusal(&scrape, "services[0].load.scrape.url", &format!("`{url}`: {problem}")),
        ] {
            case.chart_words = chart;
            cases.push(case);
        }
    }
    // Services: the parsing of each, then RunConfig::resolve's checks in its order.
    let latency = "    slo_p99: 250ms\n    latency_p99: {scrape: {url: 'http://a.web/metrics', metric: p99}}\n";
    cases.extend([
        refusal("services:\n  - namespace: web\n    hpa: a\n", "services[0]", "missing field `name`"),
        refusal("services:\n  - name: a\n    hpa: a\n", "services[0]", "missing field `namespace`"),
        refusal(&service("    hpa: a\n    port: 80\n"), "services[0].port", "unknown field"),
        refusal(
            &service("    hpa: a\n    slo_p99: 250\n    latency_p99: {scrape: {url: 'http://a/m', metric: p99}}\n"),
            "services[0].slo_p99",
            "`250` has no unit",
        ),
        refusal(&service("    hpa: a\n    load: {}\n"), "services[0].load", "give exactly one of promql, scrape"),
        refusal(&service("    hpa: a\n    load: {query: up}\n"), "services[0].load.query", "unknown field"),
        refusal(
            &format!(
                "run:\n  prometheus_url: http://p:9090\n{}",
                service("    hpa: a\n    load: {promql: up, scrape: {url: 'http://a/m', metric: up}}\n")
            ),
            "services[0].load",
            "give exactly one of promql, scrape",
        ),
        refusal(
            &format!("run:\n  prometheus_url: http://p:9090\n{}", service("    hpa: a\n    load: {promql: ' '}\n")),
            "services[0].load",
            "promql is empty",
        ),
        refusal(
            &service("    hpa: a\n    load: {scrape: {url: 'http://a/m', metric: http-requests}}\n"),
            "services[0].load.scrape.metric",
            "`http-requests` is not a Prometheus metric name",
        ),
        refusal(
            &service("    hpa: a\n    load: {scrape: {url: 'http://a/m'}}\n"),
            "services[0].load.scrape",
            "missing field `metric`",
        ),
        refusal(
            &format!("{}  - name: a\n    namespace: web\n    hpa: b\n", service("    hpa: a\n")),
            "services[1].name",
            "`web/a` is listed twice",
        ),
        refusal(&service(""), "services[0].hpa", "give an HPA name or a selector"),
        refusal(
            &service("    hpa: a\n    selector: app=a\n"),
            "services[0].selector",
            "give an HPA name or a selector, not both",
        ),
        refusal(
            &service("    load: {promql: up}\n    hpa: a\n"),
            "services[0].load",
            "a promql source needs run.prometheus_url",
        )
        .chart_says("a promql source needs config.run.prometheus_url"),
        refusal(
            &service("    hpa: a\n    slo_p99: 250ms\n    latency_p99: {promql: up}\n"),
            "services[0].latency_p99",
            "a promql source needs run.prometheus_url",
        )
        .chart_says("a promql source needs config.run.prometheus_url"),
        refusal(
            &service("    hpa: a\n    latency_p99: {scrape: {url: 'http://a/m', metric: p99}}\n"),
            "services[0].slo_p99",
            "a latency_p99 source needs the SLO",
        ),
        refusal(
            &service("    hpa: a\n    slo_p99: 250ms\n"),
            "services[0].latency_p99",
            "an slo_p99 needs a latency_p99 source",
        ),
        refusal(
            &service(&format!("    hpa: a\n{latency}    load: {{scrape: {{url: 'gopher://a/m', metric: up}}}}\n")),
            "services[0].load.scrape.url",
            "`gopher://a/m`: scheme `gopher` is not http or https",
        ),
    ]);
    // Selectors the controller's parser refuses (src/live/selector.rs).
    for (selector, problem) in [
        ("app in (x", "`(x` should be a set in parentheses"),
        ("tier in front", "`front` should be a set in parentheses"),
        ("app=a, tier notin (b, c", "`(b, c` should be a set in parentheses"),
        ("=web", "`=web` has no valid key"),
        ("!", "`!` has no valid key"),
        ("app=a,web server", "`web server` has no valid key"),
        ("app=a b", "`app=a b`: `a b` is not a label value"),
        ("a!b", "`a!b` has no valid key"),
        ("a=b in (c)", "`a=b in (c)` has no valid key"),
        ("Example.com/app=x", "`Example.com/app=x` has no valid key"),
        (",", "an empty selector would count every pod in the namespace as the service"),
    ] {
        let fragment = service(&format!("    selector: '{selector}'\n"));
        cases.push(refusal(&fragment, "services[0].selector", problem).chart_says("is not a label selector"));
    }
    cases
}

/// check-config's error for `fragment` written as a configuration file.
fn check_config_error(fragment: &str) -> Result<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, fragment).unwrap();
    let out = output(Command::new(env!("CARGO_BIN_EXE_colocate")).arg("check-config").arg(&path));
    match out.status.code() {
        Some(2) => Ok(String::from_utf8_lossy(&out.stderr).into_owned()),
        code => Err(format!("exit code {code:?}, stdout:\n{}", String::from_utf8_lossy(&out.stdout))),
    }
}

/// The fragment as `--set` / `--set-string` arguments under `config.`; `None` where --set cannot
/// say it (an empty map or list). A string that --set would read as another type (`15`, `true`)
/// goes by --set-string; numbers and booleans by --set, as a user would type them.
pub fn set_args(fragment: &str) -> Option<Vec<String>> {
    fn leaves(path: String, v: &Value, out: &mut Vec<(String, Value)>) -> Option<()> {
        match v {
            Value::Object(m) if !m.is_empty() => m.iter().try_for_each(|(k, v)| leaves(format!("{path}.{k}"), v, out)),
            Value::Array(a) if !a.is_empty() => {
                a.iter().enumerate().try_for_each(|(i, v)| leaves(format!("{path}[{i}]"), v, out))
            }
            Value::Object(_) | Value::Array(_) | Value::Null => None,
            _ => {
                out.push((path, v.clone()));
                Some(())
            }
        }
    }
    let mut out = Vec::new();
    leaves("config".into(), &documents(fragment).remove(0), &mut out)?;
    let mut args = Vec::new();
    for (path, v) in out {
        let (flag, text) = match &v {
            Value::String(s) => {
                let typed = s.parse::<i64>().is_ok() || ["true", "false", "null"].contains(&s.as_str());
                (if typed { "--set-string" } else { "--set" }, s.clone())
            }
            other => ("--set", other.to_string()),
        };
        args.push(flag.to_string());
        args.push(format!("{path}={}", text.replace('\\', "\\\\").replace(',', "\\,")));
    }
    Some(args)
}

/// Whether Helm's error refuses `key` as the case expects: a template check with `words` after
/// `config.<key>: `, or values.schema.json at the key's path (Helm 4 prints a JSON pointer,
/// Helm 3 a dotted path; an unknown key is reported at its parent, naming it).
fn names_key(err: &str, key: &str, words: &str) -> bool {
    if !err.contains("don't meet the specifications of the schema") {
        let named = format!("config.{key}: ");
        return err.lines().filter_map(|l| l.split_once(&named)).any(|(_, rest)| rest.contains(words));
    }
    // The path of `k` or of a value inside it, in either spelling.
    let at = |k: &str| {
        let pointer = format!("'/config/{}", k.replace(['.', '['], "/").replace(']', ""));
        let dotted = format!("config.{}", k.replace('[', ".").replace(']', ""));
        [format!("{pointer}'"), format!("{pointer}/"), format!("{dotted}:"), format!("{dotted}.")]
            .iter()
            .any(|p| err.contains(p.as_str()))
    };
    let (parent, last) = key.rsplit_once('.').unwrap_or(("", key));
    let parent_named =
        if parent.is_empty() { err.contains("'/config'") || err.contains("- config:") } else { at(parent) };
    at(key) || (parent_named && err.contains(last))
}

/// Runs one case; the problems found, if any.
fn check(case: &Refusal, dir: &std::path::Path, i: usize) -> Vec<String> {
    let mut problems = Vec::new();
    let Refusal { fragment, key, problem, chart_words } = case;
    let expected = format!("{key}: {problem}");
    match check_config_error(fragment) {
        Ok(err) if err.contains(&expected) => {}
        Ok(err) => problems.push(format!("check-config: expected `{expected}` in: {err}")),
        Err(why) => problems.push(format!("check-config did not refuse it ({why})")),
    }
    let values = dir.join(format!("case-{i}.yaml"));
    let indented: String = fragment.lines().map(|l| format!("  {l}\n")).collect();
    std::fs::write(&values, format!("config:\n{indented}")).unwrap();
    let values = values.display().to_string();
    let words = chart_words.unwrap_or(problem.as_str());
    let mut routes = vec![("helm 4 -f", helm(), vec!["-f".to_string(), values.clone()])];
    routes.push(("helm 3 -f", helm3(), vec!["-f".to_string(), values]));
    if let Some(set) = set_args(fragment) {
        routes.push(("helm 4 --set", helm(), set));
    }
    for (route, helm, args) in routes {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match template_with(&helm, &args) {
            Ok(_) => problems.push(format!("{route} {args:?}: rendered; expected a refusal of config.{key}")),
            Err(err) if names_key(&err, key, words) => {}
            Err(err) => problems.push(format!("{route} {args:?}: expected config.{key} refused ({words}) in:\n{err}")),
        }
    }
    problems
}

#[test]
fn the_chart_refuses_whatever_check_config_refuses() {
    let cases = refusals();
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    // Four workers: each case runs four processes one after the other.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                for p in check(case, dir.path(), i) {
                    failures.lock().unwrap().push(format!("case {i}:\n{}\n  {p}", case.fragment.trim_end()));
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    println!("{} refusals checked against check-config, Helm 4 and Helm 3 in {:.1?}", cases.len(), started.elapsed());
    assert!(failures.is_empty(), "{} of {} cases out of step:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

/// Every duration key is in the table: a new one in crates/core/src/config.rs or src/live/config/
/// must be added to DURATIONS (and so to the chart's checks).
#[test]
fn every_duration_setting_is_covered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.yaml");
    std::fs::write(&path, "{}\n").unwrap();
    let printed =
        crate::chart_support::run(Command::new(env!("CARGO_BIN_EXE_colocate")).arg("check-config").arg(&path));
    let mut section = "";
    let mut durations = Vec::new();
    for line in printed.lines() {
        if let Some(name) = line.strip_suffix(':').filter(|l| !l.starts_with(' ')) {
            section = name;
        } else if let Some((key, value)) = line.strip_prefix("  ").and_then(|l| l.split_once(": ")) {
            if is_printed_duration(value) {
                durations.push(format!("{section}.{key}"));
            }
        }
    }
    let missing: Vec<&String> = durations.iter().filter(|d| !DURATIONS.contains(&d.as_str())).collect();
    assert!(durations.len() >= 13 && missing.is_empty(), "durations {durations:?}; not in DURATIONS: {missing:?}");
}

/// How describe() prints a duration (humantime): `15s`, `1m 30s`, `50ms`.
fn is_printed_duration(value: &str) -> bool {
    value.split(' ').all(|part| {
        let unit = part.trim_start_matches(|c: char| c.is_ascii_digit());
        unit.len() < part.len() && ["ns", "us", "µs", "ms", "s", "m", "h", "d", "w", "M", "y"].contains(&unit)
    })
}

/// The leader Lease is named like the release (its full name): an override check-config would
/// refuse as `run.lease_name` is refused by the schema.
#[test]
fn lease_name_from_the_release_is_checked_like_check_config() {
    let err = check_config_error("run:\n  lease_name: Colocate_A\n").expect("check-config refuses it");
    assert!(err.contains("run.lease_name: `Colocate_A` is not a valid object name"), "{err}");
    for value in ["fullnameOverride=Colocate_A", "nameOverride=Colocate_A"] {
        let err = template_with(&helm(), &["--set", value]).expect_err(value);
        let name = value.split('=').next().unwrap();
        assert!(err.contains(&format!("'/{name}'")), "{value}: {err}");
    }
}

/// The other side of the edge: values check-config accepts, close to what it refuses, render,
/// and the rendered file passes check-config; the chart's checks are not stricter here.
#[test]
fn the_chart_accepts_the_edges_check_config_accepts() {
    let selectors =
        ["app == web", "app=web, tier in (front, edge),!canary,track!=beta", "example.com/app=x", "! canary"];
    let urls =
        ["http://[::1]:9090/prom/", "HTTP://Prometheus:9090", "http://user:pw@10.0.0.1:9090/x?y=1#z", "http://a.0xg"];
    let mut fragments = vec![
        "run:\n  tick: 010s\n  debounce: 9s\n".to_string(),
        "run:\n  tick: 1h30m\n  debounce: 5 m 3s\n".to_string(),
        "run:\n  tick: 10s\n  debounce: 9999ms\n  sample_interval: 5s\n  sample_stale_after: 5001ms\n".to_string(),
        "run:\n  lease_duration: 2147483646s\n".to_string(),
        "run:\n  lease_duration: 3s\n  master_timeout: 1ns\n  status_interval: 2 minutes\n".to_string(),
        "controller:\n  trend_window: 0s 1ns\n  latency_slack_hold: -1\n  latency_slack_shrink: -1\n".to_string(),
    ];
    for selector in selectors {
        fragments.push(service(&format!("    selector: '{selector}'\n")));
    }
    for url in urls {
        fragments.push(format!("run:\n  prometheus_url: '{url}'\n"));
        fragments.push(service(&format!("    hpa: a\n    load: {{scrape: {{url: '{url}', metric: up}}}}\n")));
    }
    let dir = tempfile::tempdir().unwrap();
    for (i, fragment) in fragments.iter().enumerate() {
        // Panics with check-config's error if it refuses the case.
        crate::check_config(fragment);
        let values = dir.path().join(format!("good-{i}.yaml"));
        let indented: String = fragment.lines().map(|l| format!("  {l}\n")).collect();
        std::fs::write(&values, format!("config:\n{indented}")).unwrap();
        let rendered = template_with(&helm(), &["-f", &values.display().to_string()])
            .unwrap_or_else(|e| panic!("the chart refuses what check-config accepts:\n{fragment}\n{e}"));
        crate::check_config(&crate::rendered_config(&rendered));
    }
}
