//! The Helm chart (`charts/colocate`), rendered by a real Helm: `helm lint --strict`, golden
//! manifests, Kubernetes schema validation (kubernetes-validate), the rendered configuration
//! accepted by `colocate check-config`, every configuration check-config refuses refused by the
//! chart too (chart/parity.rs), chart-only bad values refused with a message naming them, and
//! the same output from Helm 3. The install into a real API server is tests/chart_install.rs.
//!
//! Golden files: `tests/golden/chart/<case>.yaml`; `UPDATE_GOLDEN=1 cargo test --release --test
//! chart` rewrites them after an intended change (review the diff).

mod chart_support;
// Certificates for the TLS case's files.
#[path = "support/certs.rs"]
mod certs;
#[path = "support/settings.rs"]
mod settings;

use settings::{printed_settings, same_value};
// The parity table of check-config and the chart, in its own file for its length.
#[path = "chart/parity.rs"]
mod parity;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use chart_support::{documents, helm, helm3, kinds, object, output, run, template, template_with, NAMESPACE};
use serde_json::{json, Value};

/// Render cases: name and `helm template` arguments. Every `ci/*-values.yaml` is one more case.
fn cases() -> Vec<(String, Vec<String>)> {
    let mut cases = vec![
        ("default".to_string(), vec![]),
        // `auto` monitoring objects appear when the cluster serves their CRDs.
        (
            "monitoring-auto".to_string(),
            ["--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"]
                .into_iter()
                .chain(["--api-versions", "monitoring.coreos.com/v1/PrometheusRule"])
                .map(String::from)
                .collect(),
        ),
    ];
    let dir = chart_support::chart_dir().join("ci");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with("-values.yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "expected the ci/*-values.yaml cases in {}", dir.display());
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy().trim_end_matches("-values.yaml").to_string();
        cases.push((name, vec!["-f".to_string(), f.display().to_string()]));
    }
    cases
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The arguments `helm lint` takes: it has no `--api-versions` (it lints the values only).
fn lint_args(v: &[String]) -> Vec<&str> {
    let mut out = Vec::new();
    let mut it = v.iter();
    while let Some(a) = it.next() {
        if a == "--api-versions" {
            it.next();
        } else {
            out.push(a.as_str());
        }
    }
    out
}

fn golden_path(case: &str) -> PathBuf {
    chart_support::repo().join("tests/golden/chart").join(format!("{case}.yaml"))
}

#[test]
fn lint_strict_passes_for_every_case() {
    for (case, a) in cases() {
        let out =
            run(Command::new(helm()).args(["lint", "--strict"]).arg(chart_support::chart_dir()).args(lint_args(&a)));
        assert!(out.contains("0 chart(s) failed"), "{case}: {out}");
    }
}

#[test]
fn renders_match_the_golden_manifests() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (case, a) in cases() {
        let rendered = template(&args(&a));
        let path = golden_path(&case);
        if update {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &rendered).unwrap();
            continue;
        }
        let golden = std::fs::read_to_string(&path).unwrap_or_default();
        if golden != rendered {
            let first = golden.lines().zip(rendered.lines()).position(|(g, r)| g != r);
            let line = first.unwrap_or(golden.lines().count().min(rendered.lines().count()));
            stale.push(format!(
                "{case}: {} differs from line {}:\n  golden:   {}\n  rendered: {}",
                path.display(),
                line + 1,
                golden.lines().nth(line).unwrap_or("<end>"),
                rendered.lines().nth(line).unwrap_or("<end>")
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "{}\nIf the change is intended: UPDATE_GOLDEN=1 cargo test --release --test chart, and review the diff",
        stale.join("\n")
    );
}

#[test]
fn renders_validate_against_kubernetes_schemas() {
    let kv = chart_support::kubernetes_validate();
    let dir = tempfile::tempdir().unwrap();
    for (case, a) in cases() {
        let rendered = template(&args(&a));
        let file = dir.path().join(format!("{case}.yaml"));
        std::fs::write(&file, &rendered).unwrap();
        // The oldest version the chart claims (Chart.yaml kubeVersion) and the newest known.
        for version in ["1.25.0", "1.37.0"] {
            let out = output(Command::new(&kv).args(["--strict", "--quiet", "-k", version]).arg(&file));
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            // Prometheus Operator kinds have no built-in schema; they are checked below.
            let unexpected: Vec<&str> = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .filter(|l| {
                    !(l.starts_with("WARN") && (l.contains("kind ServiceMonitor") || l.contains("kind PrometheusRule")))
                })
                .collect();
            assert!(out.status.success() && unexpected.is_empty(), "{case} against {version}:\n{text}");
        }
        for doc in documents(&rendered) {
            if doc["apiVersion"] == "monitoring.coreos.com/v1" {
                check_monitoring_object(&case, &doc);
            }
        }
    }
}

/// What the Prometheus Operator needs of the two custom resources the chart renders.
fn check_monitoring_object(case: &str, doc: &Value) {
    let spec = &doc["spec"];
    match doc["kind"].as_str() {
        Some("ServiceMonitor") => {
            let endpoint = &spec["endpoints"][0];
            assert_eq!(endpoint["port"], "metrics", "{case}: {doc}");
            assert_eq!(endpoint["path"], "/metrics", "{case}");
            assert_eq!(endpoint["honorLabels"], true, "{case}: the controller's job/service labels must win");
            assert_eq!(spec["selector"]["matchLabels"]["app.kubernetes.io/name"], "colocate", "{case}");
        }
        Some("PrometheusRule") => {
            let groups = spec["groups"].as_array().unwrap_or_else(|| panic!("{case}: no groups: {doc}"));
            for rule in groups.iter().flat_map(|g| g["rules"].as_array().unwrap()) {
                assert!(rule["expr"].is_string(), "{case}: {rule}");
                assert!(rule["record"].is_string() ^ rule["alert"].is_string(), "{case}: {rule}");
            }
        }
        other => panic!("{case}: unexpected monitoring kind {other:?}"),
    }
}

/// The config.yaml of the rendered ConfigMap.
fn rendered_config(rendered: &str) -> String {
    let docs = documents(rendered);
    let cm = object(&docs, "ConfigMap", "colocate");
    cm["data"]["config.yaml"].as_str().expect("config.yaml in the ConfigMap").to_string()
}

/// check-config's error for a configuration it must refuse.
fn check_config_refusal(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_colocate")).arg("check-config").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "check-config accepted:\n{text}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn check_config(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, text).unwrap();
    run(Command::new(env!("CARGO_BIN_EXE_colocate")).arg("check-config").arg(&path))
}

/// The rendered config with the TLS files where the chart mounts them moved into `dir`, and
/// certificates written there: check-config reads them, as the controller does at start.
fn with_certificates_in(dir: &std::path::Path, config: &str) -> String {
    let ca = certs::Ca::new("test CA");
    let client = ca.issue(&["colocate"]);
    for peer in ["master", "prometheus"] {
        let d = dir.join(peer);
        std::fs::create_dir_all(&d).unwrap();
        for (name, text) in [("ca.crt", &ca.pem), ("tls.crt", &client.cert_pem), ("tls.key", &client.key_pem)] {
            std::fs::write(d.join(name), text).unwrap();
        }
    }
    config.replace("/var/run/secrets/colocate-tls/", &format!("{}/", dir.display()))
}

#[test]
fn rendered_configuration_is_accepted_by_check_config() {
    let certificates = tempfile::tempdir().unwrap();
    for (case, a) in cases() {
        let out = check_config(&with_certificates_in(certificates.path(), &rendered_config(&template(&args(&a)))));
        assert!(out.contains("metrics_addr: 0.0.0.0:8080"), "{case}: {out}");
        if case == "tls" {
            let dir = certificates.path().display();
            for expected in [
                format!("master_tls: CA {dir}/master/ca.crt"),
                format!("prometheus_tls: CA {dir}/prometheus/ca.crt, client certificate {dir}/prometheus/tls.crt"),
                "prometheus_token_file: /var/run/secrets/colocate-prometheus/token".to_string(),
            ] {
                assert!(out.contains(&expected), "{case}: no `{expected}` in {out}");
            }
            // Where the Secrets are not mounted, check-config refuses, naming the file.
            let bare = rendered_config(&template(&args(&a)));
            let refused = check_config_refusal(&bare);
            assert!(
                refused.contains(
                    "run.prometheus_tls.ca_file: cannot read /var/run/secrets/colocate-tls/prometheus/ca.crt"
                ),
                "{refused}"
            );
        }
    }
    // The full case reaches the file as written.
    let full_values = chart_support::chart_dir().join("ci/full-values.yaml").display().to_string();
    let full = check_config(&rendered_config(&template(&["-f", &full_values])));
    for expected in [
        "target_utilization: 0.85",
        "dry_run: true",
        "master_token_file: /var/run/secrets/colocate/token",
        "prometheus_url: http://prometheus-operated.monitoring:9090",
        "web/nginx: pods by HPA nginx, p99 SLO 250ms",
        "web/api: pods by selector app=api,tier!=canary, p99 SLO 100ms",
    ] {
        assert!(full.contains(expected), "no `{expected}` in:\n{full}");
    }
}

/// The chart's defaults are the controller's, so that there is one default per setting:
/// values.yaml (which repeats them, to document them where they are set) renders a file with
/// the effective settings of an empty one but for what the chart decides itself; and the
/// defaults the chart's checks assume for a key left out (`colocate.controllerDefaults` in
/// templates/_config.tpl) are the ones check-config prints.
#[test]
fn the_charts_defaults_are_the_controllers() {
    let own = printed_settings(&check_config("{}\n"));
    assert!(own.len() > 30, "read only {} settings from check-config: {own:?}", own.len());
    let chart = printed_settings(&check_config(&rendered_config(&template(&[]))));
    let chart_decides = BTreeMap::from([("run.metrics_addr", "0.0.0.0:8080"), ("run.log_format", "json")]);
    let mut drifted = Vec::new();
    for (key, default) in &own {
        let expected = chart_decides.get(key.as_str()).map_or(default.as_str(), |v| v);
        match chart.get(key) {
            Some(value) if value == expected => {}
            value => drifted.push(format!("{key}: the chart renders {value:?}, expected {expected}")),
        }
    }
    assert!(drifted.is_empty(), "values.yaml drifted from the controller's defaults:\n{}", drifted.join("\n"));

    let template = std::fs::read_to_string(chart_support::chart_dir().join("templates/_config.tpl")).unwrap();
    let start = r#"{{- define "colocate.controllerDefaults" -}}"#;
    let block = template.split_once(start).and_then(|(_, rest)| rest.split_once("{{- end }}")).map(|(b, _)| b);
    let block = block.unwrap_or_else(|| panic!("no `{start}` ... `{{{{- end }}}}` in _config.tpl"));
    let assumed = documents(block).remove(0);
    let mut checked = 0;
    for (section, settings) in assumed.as_object().expect("blocks of settings") {
        for (key, value) in settings.as_object().expect("settings") {
            let key = format!("{section}.{key}");
            let value = value.as_str().map_or_else(|| value.to_string(), str::to_string);
            let printed =
                own.get(&key).unwrap_or_else(|| panic!("_config.tpl assumes a default for {key}, no setting"));
            assert!(same_value(&value, printed), "_config.tpl assumes {key} defaults to {value}; it is {printed}");
            checked += 1;
        }
    }
    assert!(checked >= 10, "read only {checked} defaults from _config.tpl");
}

/// Every setting `colocate check-config` prints (the controller's own list) has a value in
/// values.yaml, where it is documented, unless the chart sets it itself.
#[test]
fn values_cover_every_controller_setting() {
    let chart_sets = [
        "metrics_addr",
        "lease_namespace",
        "lease_name",
        "master_token_file",
        "job_namespaces",
        // From the tls and prometheusToken values: the chart mounts the Secrets.
        "master_tls",
        "prometheus_tls",
        "prometheus_token_file",
    ];
    let values = documents(&std::fs::read_to_string(chart_support::chart_dir().join("values.yaml")).unwrap()).remove(0);
    let printed = check_config("{}\n");
    let mut section = "";
    let (mut missing, mut checked) = (Vec::new(), 0);
    for line in printed.lines() {
        if let Some(name) = line.strip_suffix(':').filter(|l| !l.starts_with(' ')) {
            section = name;
        } else if let Some((key, _)) = line.strip_prefix("  ").and_then(|l| l.split_once(':')) {
            checked += 1;
            let chart_set = section == "run" && chart_sets.contains(&key);
            if values["config"][section].get(key).is_none() && !chart_set {
                missing.push(format!("config.{section}.{key}"));
            }
        }
    }
    assert!(checked > 20, "read only {checked} settings from check-config's output:\n{printed}");
    assert!(missing.is_empty(), "controller settings without a value in values.yaml: {missing:?}");
}

/// Values only the chart refuses (check-config has no such setting, or the chart sets it itself):
/// (helm arguments, text the error must contain). Values files are written from the YAML given.
/// Everything check-config refuses is in chart/parity.rs.
fn chart_only_bad_values() -> Vec<(Vec<String>, &'static str)> {
    let set = |s: &str| vec!["--set".to_string(), s.to_string()];
    vec![
        (set("config.run.metrics_addr=0.0.0.0:9090"), "additional properties 'metrics_addr' not allowed"),
        (set("config.run.lease_name=colocate"), "additional properties 'lease_name' not allowed"),
        (set("replicaCount=0"), "/replicaCount"),
        (set("podAntiAffinity=always"), "/podAntiAffinity"),
        (set("rbac.jobNamespaces[0]=Not_A_Namespace"), "/rbac/jobNamespaces/0"),
        (set("metrics.serviceMonitor.enabled=maybe"), "/metrics/serviceMonitor/enabled"),
        (set("serviceAccount.create=false"), "serviceAccount.name: name the existing ServiceAccount"),
        (set("config.run.adapters=yes"), "/config/run/adapters"),
        (
            set("podDisruptionBudget.minAvailable=2"),
            "podDisruptionBudget.minAvailable: 2 is not below replicaCount (2)",
        ),
        (
            set("podDisruptionBudget.minAvailable=100%"),
            "podDisruptionBudget.minAvailable: 100% is not below replicaCount (2)",
        ),
        (
            vec![
                "--set".into(),
                "replicaCount=3".into(),
                "--set".into(),
                "podDisruptionBudget.minAvailable=67%".into(),
            ],
            "podDisruptionBudget.minAvailable: 67% is not below replicaCount (3)",
        ),
        (vec!["-f".into(), "podDisruptionBudget:\n  minAvailable: '1'\n".into()], "/podDisruptionBudget/minAvailable"),
        (set("tls.master.caKey=ca.crt"), "tls.master.existingSecret: name the Secret"),
        (set("tls.prometheus.existingSecret=p"), "tls.prometheus.existingSecret: p names no file of it"),
        (
            vec![
                "--set".into(),
                "tls.master.existingSecret=m".into(),
                "--set".into(),
                "tls.master.certKey=tls.crt".into(),
            ],
            "tls.master.keyKey: the client certificate (certKey tls.crt) needs its key",
        ),
        (set("config.run.master_tls.ca_file=/ca.crt"), "additional properties 'master_tls' not allowed"),
        // humantime takes fractions; the chart does not (values.schema.json says so).
        (set("config.run.tick=1.5s"), "/config/run/tick"),
    ]
}

#[test]
fn chart_only_bad_values_fail_with_a_message_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    for (i, (mut a, expected)) in chart_only_bad_values().into_iter().enumerate() {
        if a[0] == "-f" {
            let file = dir.path().join(format!("bad-{i}.yaml"));
            std::fs::write(&file, &a[1]).unwrap();
            a[1] = file.display().to_string();
        }
        match template_with(&helm(), &args(&a)) {
            Ok(_) => panic!("helm template {a:?} succeeded; expected an error containing `{expected}`"),
            Err(e) => assert!(e.contains(expected), "helm template {a:?}: expected `{expected}` in:\n{e}"),
        }
    }
    // The edges of what is accepted: a PDB that leaves one replica evictable.
    for ok in [
        ["replicaCount=2", "podDisruptionBudget.minAvailable=50%"],
        ["replicaCount=3", "podDisruptionBudget.minAvailable=2"],
    ] {
        let docs = documents(&template(&["--set", ok[0], "--set", ok[1]]));
        let min = &object(&docs, "PodDisruptionBudget", "colocate")["spec"]["minAvailable"];
        assert_eq!(min.to_string().trim_matches('"'), ok[1].split_once('=').unwrap().1, "{ok:?}");
    }
}

#[test]
fn default_install_is_hardened_and_highly_available() {
    let docs = documents(&template(&[]));
    let deploy = object(&docs, "Deployment", "colocate");
    let pod = &deploy["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(deploy["spec"]["replicas"], 2, "two replicas with leader election");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    let sc = &c["securityContext"];
    assert_eq!((&sc["allowPrivilegeEscalation"], &sc["readOnlyRootFilesystem"]), (&json!(false), &json!(true)));
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["args"], json!(["run", "--config=/etc/colocate/config.yaml"]));
    let env: BTreeMap<&str, &str> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["valueFrom"]["fieldRef"]["fieldPath"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(env.get("POD_NAME"), Some(&"metadata.name"), "lease identity from the downward API");
    assert_eq!(env.get("POD_NAMESPACE"), Some(&"metadata.namespace"), "lease namespace from the downward API");
    assert!(c["resources"]["requests"]["cpu"].is_string() && c["resources"]["limits"]["memory"].is_string());
    let anti = &pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(anti["podAffinityTerm"]["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(object(&docs, "PodDisruptionBudget", "colocate")["spec"]["minAvailable"], 1);
    let svc = object(&docs, "Service", "colocate");
    assert_eq!(svc["spec"]["ports"][0]["name"], "metrics");
    assert_eq!(object(&docs, "Role", "colocate-lease")["metadata"]["namespace"], NAMESPACE);
    // Adapters are opt-in: by default the controller may write no workload and patch no pod.
    let act = object(&docs, "ClusterRole", "colocate-act");
    let resources: Vec<&str> = act["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["resources"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()))
        .collect();
    assert_eq!(resources, ["pods", "services", "events"], "default act rules: {}", act["rules"]);
    assert!(rendered_config(&template(&[])).contains("adapters: false"), "run.adapters follows rbac.adapters");
    // Off unless asked for or their CRDs are served.
    for kind in ["ServiceMonitor", "PrometheusRule", "PriorityClass"] {
        assert!(!docs.iter().any(|d| d["kind"] == kind), "{kind} rendered by default: {}", kinds(&docs));
    }
}

/// `capacity: usage` needs to patch nodes' status, and only that: a role of its own, rendered
/// only then, bound to the controller's ServiceAccount.
/// Usage mode as a user sets it: it reads pods' usage from Prometheus.
const USAGE: &[&str] =
    &["--set", "config.controller.capacity=usage", "--set", "config.run.prometheus_url=http://prometheus:9090"];

#[test]
fn usage_mode_may_patch_node_status_and_requests_mode_may_not() {
    let requests = documents(&template(&[]));
    let writes_nodes = |docs: &[Value]| {
        docs.iter().filter(|d| d["kind"] == "ClusterRole").flat_map(|d| d["rules"].as_array().unwrap().clone()).any(
            |r| {
                r["resources"].as_array().unwrap().iter().any(|v| v.as_str().unwrap().starts_with("nodes"))
                    && r["verbs"].as_array().unwrap().iter().any(|v| v != "get" && v != "list" && v != "watch")
            },
        )
    };
    assert!(!writes_nodes(&requests), "requests mode may write nodes: {}", kinds(&requests));
    let usage = documents(&template(USAGE));
    let role = object(&usage, "ClusterRole", "colocate-node-status");
    assert_eq!(role["rules"], json!([{"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}]));
    let binding = object(&usage, "ClusterRoleBinding", "colocate-node-status");
    assert_eq!(binding["roleRef"]["name"], "colocate-node-status");
    assert_eq!(binding["subjects"][0]["name"], "colocate");
    assert!(rendered_config(&template(USAGE)).contains("capacity: usage"));
}

#[test]
fn prometheus_rule_carries_the_plain_rules_file_plus_alert_labels() {
    let docs = documents(&template(&[
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--set",
        "metrics.prometheusRule.alertLabels.team=ml",
    ]));
    let rule = object(&docs, "PrometheusRule", "colocate");
    let path = chart_support::chart_dir().join("files/rules/colocate.rules.yml");
    let mut file = documents(&std::fs::read_to_string(&path).unwrap()).remove(0);
    for group in file["groups"].as_array_mut().unwrap() {
        for r in group["rules"].as_array_mut().unwrap() {
            if r.get("alert").is_some() {
                r["labels"]["team"] = json!("ml");
            }
        }
    }
    assert_eq!(rule["spec"]["groups"], file["groups"], "the PrometheusRule differs from {}", path.display());
}

#[test]
fn grafana_dashboard_configmaps_carry_the_dashboard_files() {
    let docs = documents(&template(&["--set", "grafanaDashboards.enabled=true"]));
    for name in ["cluster", "controller"] {
        let cm = object(&docs, "ConfigMap", &format!("colocate-dashboard-{name}"));
        assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
        let file = format!("colocate-{name}.json");
        let want = std::fs::read_to_string(chart_support::chart_dir().join("files/dashboards").join(&file)).unwrap();
        assert_eq!(cm["data"][&file].as_str().map(str::trim_end), Some(want.trim_end()), "{file}");
    }
}

#[test]
fn helm3_lints_and_renders_the_same_manifests() {
    let helm3 = helm3();
    for (case, a) in cases() {
        let out =
            run(Command::new(&helm3).args(["lint", "--strict"]).arg(chart_support::chart_dir()).args(lint_args(&a)));
        assert!(out.contains("0 chart(s) failed"), "helm 3 lint {case}: {out}");
        let rendered = template_with(&helm3, &args(&a)).unwrap_or_else(|e| panic!("helm 3 template {case}: {e}"));
        assert!(rendered == template(&args(&a)), "{case}: Helm 3 renders differently from Helm 4");
    }
    let bad = template_with(&helm3, &["--set", "config.controller.target_utilization=1.5"]);
    assert!(bad.is_err_and(|e| e.contains("1.5 is outside [0, 1]")));
}

#[test]
fn readme_documents_every_value() {
    let values = documents(&std::fs::read_to_string(chart_support::chart_dir().join("values.yaml")).unwrap()).remove(0);
    let readme = std::fs::read_to_string(chart_support::chart_dir().join("README.md")).unwrap();
    let rows: Vec<&str> = readme.lines().filter_map(|l| l.strip_prefix("| `")?.split('`').next()).collect();
    let mut missing = Vec::new();
    let mut stack = vec![(String::new(), &values)];
    while let Some((path, v)) = stack.pop() {
        // A key is documented by its own row or by a row of a map containing it.
        if !path.is_empty() && rows.iter().any(|r| path == *r || path.starts_with(&format!("{r}."))) {
            continue;
        }
        match v.as_object() {
            Some(m) if !m.is_empty() => {
                let prefix = if path.is_empty() { String::new() } else { format!("{path}.") };
                stack.extend(m.iter().map(|(k, v)| (format!("{prefix}{k}"), v)));
            }
            _ => missing.push(path),
        }
    }
    assert!(missing.is_empty(), "values without a row in charts/colocate/README.md: {missing:?}");
}
