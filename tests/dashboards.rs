//! Grafana dashboards and Prometheus rules (`charts/colocate/files/`, linked from
//! `dashboards/`): every PromQL expression parses (promtool), names only metrics the
//! controller exports (read from `colocate::telemetry::metrics::Metrics` itself) or the rules
//! record, with label values the controller uses; the rules pass `promtool check rules` and
//! their unit tests; the dashboards follow the conventions a shared Grafana needs.

mod chart_support;
#[allow(dead_code)] // the live test uses the rest
#[path = "support/grafana.rs"]
mod grafana;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use chart_support::promql::{selectors, Selector};
use chart_support::{documents, output, promtool, run};
use colocate::core::{CapacityMode, Config, Core, Job, Node, Pod, PodClass, Resources, Snapshot};
use colocate::live::master_client::MasterError;
use colocate::telemetry::metrics::{self, Metrics};
use serde_json::Value;

/// Metrics of other exporters the dashboards or rules may name. None so far: everything comes
/// from the controller. Add an exporter's metric here with where it comes from.
const EXTERNAL_METRICS: [&str; 0] = [];

/// Labels whose values are a closed set the controller defines: a matcher on them must use a
/// value the controller exports (a typo would select nothing, silently).
const CLOSED_LABELS: [&str; 7] = ["class", "resource", "unit", "outcome", "error", "reason", "kind"];

/// Grafana's variables, replaced for promtool by what Grafana would put there.
const GRAFANA_VARIABLES: [(&str, &str); 5] =
    [("$__rate_interval", "1m"), ("$__interval", "1m"), ("$__range", "1h"), ("$job", ".*"), ("$service", ".*")];

/// The dashboards as (file name, JSON); read by the loader the live test uses.
fn dashboards() -> Vec<(String, Value)> {
    let out: Vec<(String, Value)> = grafana::dashboards().into_iter().map(|d| (d.file, d.json)).collect();
    let dir = grafana::files_dir().join("dashboards");
    assert_eq!(out.len(), 2, "expected the cluster and controller dashboards in {}", dir.display());
    out
}

fn rules() -> Value {
    let text = std::fs::read_to_string(grafana::files_dir().join("rules/colocate.rules.yml")).unwrap();
    documents(&text).remove(0)
}

fn rule_list(rules: &Value) -> Vec<&Value> {
    rules["groups"].as_array().unwrap().iter().flat_map(|g| g["rules"].as_array().unwrap()).collect()
}

/// (where, PromQL) of every expression in the dashboards (panel targets, annotations, the
/// selectors of variable queries) and the rules.
fn expressions() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for d in grafana::dashboards() {
        let file = &d.file;
        for p in d.panels() {
            for t in p.targets {
                out.push((format!("{file}: panel {:?}", p.title), t.expr));
            }
        }
        for a in d.annotations() {
            out.push((format!("{file}: annotation {:?}", a.name), a.expr));
        }
        // label_values(SELECTOR, LABEL): the selector is PromQL.
        for v in d.variables() {
            out.push((format!("{file}: variable {:?}", v.name), v.selector));
        }
    }
    for r in rule_list(&rules()) {
        let name = r.get("alert").or_else(|| r.get("record")).unwrap();
        out.push((format!("colocate.rules.yml: {name}"), r["expr"].as_str().unwrap().to_string()));
    }
    out
}

/// One pass of everything the controller records, so that every family has samples.
fn exported() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let gi = 1 << 30;
    let pod = |name: &str, class: PodClass, cpu: i64| Pod {
        name: name.into(),
        class,
        node: Some("n1".into()),
        requests: Resources::new(cpu, gi, 0),
        ready: true,
        terminating_until: None,
        preempted: false,
        started: None,
        usage: None,
    };
    let snap = Snapshot {
        now: Duration::from_secs(60),
        nodes: vec![Node {
            name: "n1".into(),
            allocatable: Resources::new(8000, 32 * gi, 0),
            schedulable: true,
            batch: None,
        }],
        pods: vec![
            pod("ds", PodClass::System, 500),
            pod("nginx-0", PodClass::Online { service: "nginx".into() }, 2000),
            pod("a-0", PodClass::Worker { job: "ml/a".into() }, 1000),
            // An online pod waiting for a node.
            Pod { node: None, ready: false, ..pod("nginx-1", PodClass::Online { service: "nginx".into() }, 2000) },
        ],
        services: vec![],
        jobs: vec![Job {
            name: "ml/a".into(),
            priority: 0,
            weight: 1.0,
            worker: Resources::new(1000, gi, 0),
            min_workers: 1,
            max_workers: 6,
            target_workers: 1,
            rescaling: false,
            rescale_cost: Duration::ZERO,
            release_latency: Duration::from_secs(2),
            work: None,
        }],
    };
    let m = Metrics::new();
    let mut core = Core::new(Config { grow_stabilization: Duration::ZERO, ..Config::default() });
    m.observe_decision(&core.decide(&snap), &snap, Duration::from_micros(400));
    m.observe_decision_cpu(Duration::from_micros(300));
    // capacity: usage has series of its own: the same cluster, the node carrying batch capacity.
    let mut usage = snap.clone();
    usage.nodes[0].batch = Some(Resources::new(4000, 16 * gi, 0));
    let mut usage_core = Core::new(Config { capacity: CapacityMode::Usage, ..Config::default() });
    m.observe_decision(&usage_core.decide(&usage), &usage, Duration::from_micros(400));
    m.set_usage_memory_margin(0.05);
    m.record_node_status_write("written");
    m.set_target_utilization(0.9);
    m.set_sample_stale_after(Duration::from_secs(60));
    m.record_actuation(None);
    m.record_actuation(Some(MasterError::BadResponse { message: "html".into() }.kind()));
    m.set_sample_age("web/nginx", "latency", Duration::from_secs(3));
    m.record_stale_sample("web/nginx", "latency");
    m.record_sample_error("web/nginx", "load");
    m.record_watch_restart("pods");
    m.set_leader(true);
    m.set_master_up("ml/a", true);
    m.record_forced_preemptions("ml/a", 1);
    m.record_decision();
    m.set_service_reading("web/nginx", Some(1.0), Some(Duration::from_millis(80)), Some(Duration::from_millis(250)));

    // name -> label -> values, from the sample lines of the OpenMetrics text.
    let mut out: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for line in m.encode().lines().filter(|l| !l.starts_with('#')) {
        let (series, _) = line.rsplit_once(' ').unwrap();
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let entry = out.entry(name.to_string()).or_default();
        for pair in labels.trim_end_matches('}').split(',').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap();
            entry.entry(k.to_string()).or_default().insert(v.trim_matches('"').to_string());
        }
    }
    for name in metrics::ALL {
        let family = |n: &String| n == name || ["_bucket", "_sum", "_count"].iter().any(|s| *n == format!("{name}{s}"));
        assert!(out.keys().any(family), "{name} has no samples: record it above");
    }
    out
}

#[test]
fn promql_extraction_finds_metrics_not_functions_keywords_labels_or_durations() {
    let names = |e: &str| selectors(e).into_iter().map(|s| s.metric).collect::<Vec<_>>();
    assert_eq!(
        names(r#"sum by (job) (rate(a_total{x="b{c}"}[5m]) and on (instance) (b_up == 1)) > bool 0"#),
        ["a_total", "b_up"]
    );
    assert_eq!(names("histogram_quantile(0.99, sum(rate(h_bucket[$__rate_interval])) by (le))"), ["h_bucket"]);
    assert_eq!(names("max(a offset 1m) - 1e3 * b:rec:ratio / Inf"), ["a", "b:rec:ratio"]);
    assert_eq!(names("avg_over_time((x >= bool y)[$__range:1m])"), ["x", "y"]);
    let m = &selectors(r#"m{class!="idle", job=~"$job",a='q'}"#)[0].matchers;
    let m: Vec<(&str, &str, &str)> = m.iter().map(|(l, o, v)| (l.as_str(), o.as_str(), v.as_str())).collect();
    assert_eq!(m, [("class", "!=", "idle"), ("job", "=~", "$job"), ("a", "=", "q")]);
}

#[test]
fn every_metric_named_in_dashboards_and_rules_is_exported() {
    let exported = exported();
    let recorded: BTreeSet<String> =
        rule_list(&rules()).iter().filter_map(|r| r["record"].as_str()).map(String::from).collect();
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    for (at, expr) in expressions() {
        let found = selectors(&expr);
        if found.is_empty() {
            problems.push(format!("{at}: no metric found in `{expr}`"));
        }
        for Selector { metric, matchers } in found {
            used.insert(metric.clone());
            if recorded.contains(&metric) || EXTERNAL_METRICS.contains(&metric.as_str()) {
                continue;
            }
            let Some(labels) = exported.get(&metric) else {
                problems
                    .push(format!("{at}: `{metric}` is not exported by the controller (nor recorded by the rules)"));
                continue;
            };
            for (label, op, value) in matchers {
                match labels.get(&label) {
                    None => problems.push(format!("{at}: `{metric}` has no label `{label}`")),
                    Some(values) if op == "=" || op == "!=" => {
                        if CLOSED_LABELS.contains(&label.as_str()) && !values.contains(&value) {
                            problems.push(format!(
                                "{at}: `{metric}{{{label}=\"{value}\"}}`: the controller uses {values:?}"
                            ));
                        }
                    }
                    Some(_) => {}
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Every exported metric is shown or alerted on somewhere: one that is not is either missing
    // from the dashboards or not worth exporting.
    let unused: Vec<&str> =
        metrics::ALL.into_iter().filter(|n| !used.iter().any(|u| u == n || u.starts_with(&format!("{n}_")))).collect();
    assert!(unused.is_empty(), "exported but shown nowhere: {unused:?}");
}

#[test]
fn every_expression_parses() {
    // promtool parses the expressions of a rules file: one recording rule per expression.
    let exprs = expressions();
    let mut rules = String::from("groups:\n  - name: every-expression\n    rules:\n");
    for (i, (_, expr)) in exprs.iter().enumerate() {
        let mut e = expr.clone();
        for (var, value) in GRAFANA_VARIABLES {
            e = e.replace(var, value);
        }
        assert!(!e.contains('$'), "unknown Grafana variable in `{expr}`");
        rules.push_str(&format!(
            "      - record: expression_{i}\n        expr: {}\n",
            serde_json::to_string(&e).unwrap()
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("expressions.yml");
    std::fs::write(&file, &rules).unwrap();
    let out = output(Command::new(promtool()).args(["check", "rules"]).arg(&file));
    let listing: Vec<String> =
        exprs.iter().enumerate().map(|(i, (at, e))| format!("expression_{i}: {at}: {e}")).collect();
    assert!(
        out.status.success(),
        "promtool check rules failed:\n{}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        listing.join("\n")
    );
}

#[test]
fn rules_pass_promtool_check_and_unit_tests() {
    let dir = chart_support::repo().join("dashboards/rules");
    let check = run(Command::new(promtool()).args(["check", "rules"]).arg(dir.join("colocate.rules.yml")));
    assert!(check.contains("SUCCESS"), "{check}");
    let test = run(Command::new(promtool()).args(["test", "rules"]).arg(dir.join("colocate.rules.test.yml")));
    assert!(test.contains("SUCCESS"), "{test}");
}

#[test]
fn every_alert_is_tested_firing_and_not_firing() {
    let path = chart_support::repo().join("dashboards/rules/colocate.rules.test.yml");
    let tests = documents(&std::fs::read_to_string(&path).unwrap()).remove(0);
    let mut fired = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for t in tests["tests"].as_array().unwrap() {
        for a in t["alert_rule_test"].as_array().into_iter().flatten() {
            let name = a["alertname"].as_str().unwrap().to_string();
            if a["exp_alerts"].as_array().is_some_and(|e| !e.is_empty()) {
                fired.insert(name);
            } else {
                quiet.insert(name);
            }
        }
    }
    for r in rule_list(&rules()) {
        let Some(alert) = r["alert"].as_str() else { continue };
        assert!(fired.contains(alert), "{alert}: no test in {} where it fires", path.display());
        assert!(quiet.contains(alert), "{alert}: no test in {} where it stays quiet", path.display());
        let ann = &r["annotations"];
        assert!(ann["summary"].is_string() && ann["description"].as_str().is_some_and(|d| d.len() > 80), "{alert}");
        assert!(matches!(r["labels"]["severity"].as_str(), Some("critical" | "warning" | "info")), "{alert}");
    }
}

#[test]
fn dashboards_use_a_datasource_variable_and_describe_every_panel() {
    let ds = serde_json::json!({"type": "prometheus", "uid": "${datasource}"});
    let mut uids = BTreeSet::new();
    for (file, d) in dashboards() {
        assert!(d["schemaVersion"].as_u64().is_some_and(|v| v >= 39), "{file}: schemaVersion of Grafana 11 or later");
        assert!(d["id"].is_null(), "{file}: id belongs to one Grafana; leave it null");
        assert!(d.get("__inputs").is_none(), "{file}: use the datasource variable, not import inputs");
        assert!(uids.insert(d["uid"].as_str().unwrap().to_string()), "{file}: duplicate dashboard uid");
        assert!(d["description"].as_str().is_some_and(|s| s.len() > 40), "{file}: dashboard description");
        let vars = d["templating"]["list"].as_array().unwrap();
        let dsv =
            vars.iter().find(|v| v["name"] == "datasource").unwrap_or_else(|| panic!("{file}: no datasource var"));
        assert_eq!((&dsv["type"], &dsv["query"]), (&serde_json::json!("datasource"), &serde_json::json!("prometheus")));
        for v in vars.iter().filter(|v| v["type"] == "query") {
            assert_eq!(v["datasource"], ds, "{file}: variable {}", v["name"]);
        }
        for a in d["annotations"]["list"].as_array().unwrap() {
            assert_eq!(a["datasource"], ds, "{file}: annotation {}", a["name"]);
        }
        // No datasource UID of a particular Grafana anywhere.
        let mut stack = vec![&d];
        while let Some(v) = stack.pop() {
            match v {
                Value::Object(m) => {
                    if let Some(Value::Object(src)) = m.get("datasource") {
                        assert_eq!(src.get("uid"), Some(&serde_json::json!("${datasource}")), "{file}: {v}");
                    }
                    stack.extend(m.values());
                }
                Value::Array(a) => stack.extend(a),
                _ => {}
            }
        }
        let mut ids = BTreeSet::new();
        for p in d["panels"].as_array().unwrap() {
            let title = p["title"].as_str().unwrap_or_default();
            assert!(!title.is_empty(), "{file}: panel without a title: {p}");
            assert!(ids.insert(p["id"].as_u64().unwrap()), "{file}: duplicate panel id in {title}");
            let desc = p["description"].as_str().unwrap_or_default();
            let min = if p["type"] == "row" { 20 } else { 80 };
            assert!(desc.len() >= min, "{file}: panel {title:?} needs a description saying what it shows");
            let g = &p["gridPos"];
            assert!(g["x"].as_u64().unwrap() + g["w"].as_u64().unwrap() <= 24, "{file}: {title} overflows the grid");
            if p["type"] == "row" {
                continue;
            }
            assert_eq!(p["datasource"], ds, "{file}: {title}");
            let targets = p["targets"].as_array().unwrap();
            assert!(!targets.is_empty(), "{file}: {title} has no query");
            let refs: BTreeSet<&str> = targets.iter().map(|t| t["refId"].as_str().unwrap()).collect();
            assert_eq!(refs.len(), targets.len(), "{file}: {title}: duplicate refId");
        }
    }
}

#[test]
fn utilization_panel_stacks_classes_under_the_target_line() {
    let (_, d) = dashboards().into_iter().find(|(f, _)| f == "colocate-cluster.json").unwrap();
    let p = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["title"] == "CPU allocation by class, with the target")
        .expect("the utilization panel");
    let legends: Vec<&str> =
        p["targets"].as_array().unwrap().iter().map(|t| t["legendFormat"].as_str().unwrap()).collect();
    assert_eq!(legends, ["online", "training", "system", "idle", "target"]);
    let defaults = &p["fieldConfig"]["defaults"];
    assert_eq!(defaults["custom"]["stacking"]["mode"], "normal", "classes stack to 100%");
    assert_eq!((&defaults["unit"], &defaults["max"]), (&serde_json::json!("percentunit"), &serde_json::json!(1)));
    let target = p["fieldConfig"]["overrides"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["matcher"]["options"] == "target")
        .expect("an override for the target line");
    let props = target["properties"].as_array().unwrap();
    assert!(
        props.iter().any(|p| p["id"] == "custom.stacking" && p["value"]["mode"] == "none"),
        "the target is a line, not a stacked area"
    );
}
