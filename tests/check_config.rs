//! `colocate check-config FILE`: validates a controller configuration file and prints the
//! effective settings; bad files exit with 2 and name the file, line and key.

mod support;

use std::process::Command;

const GOOD: &str = r#"controller:
  target_utilization: 0.92
  grow_stabilization: 90s
run:
  tick: 5s
  debounce: 100ms
  prometheus_url: http://prometheus.monitoring:9090
services:
  - name: nginx
    namespace: web
    hpa: nginx
    slo_p99: 250ms
    load:
      promql: sum(rate(nginx_http_requests_total[1m]))
    latency_p99:
      promql: histogram_quantile(0.99, sum(rate(nginx_request_duration_seconds_bucket[1m])) by (le))
  - name: api
    namespace: web
    selector: app=api,tier in (front)
    load:
      scrape: {url: "http://api.web:9113/metrics", metric: nginx_http_requests_total}
    headroom_replicas: 2
"#;

fn check(yaml: &str, env: &[(&str, &str)]) -> (tempfile::TempDir, std::path::PathBuf, Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("colocate.yaml");
    std::fs::write(&path, yaml).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_colocate"));
    cmd.arg("check-config").arg(&path);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (dir, path, out.status.code(), stdout, stderr)
}

#[test]
fn prints_the_effective_settings() {
    let (_d, _p, code, out, err) = check(GOOD, &[]);
    assert_eq!(code, Some(0), "{err}");
    for line in [
        "  target_utilization: 0.92",
        "  grow_stabilization: 1m 30s",
        "  grow_max_step: 32",
        "  tick: 5s",
        "  debounce: 100ms",
        "  dry_run: false",
        "  - web/nginx: pods by HPA nginx, p99 SLO 250ms",
        "  - web/api: pods by selector app=api,tier in (front), room kept for 2 more replicas",
    ] {
        assert!(out.lines().any(|l| l == line), "no `{line}` in:\n{out}");
    }
}

#[test]
fn unknown_key_is_named_with_its_line() {
    let yaml = GOOD.replace("  grow_stabilization: 90s", "  grow_stabilisation: 90s");
    let (_d, path, code, _, err) = check(&yaml, &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains(&format!("{}:3: controller.grow_stabilisation: unknown field", path.display())), "{err}");
}

#[test]
fn out_of_range_and_inconsistent_values_are_named() {
    let (_d, path, code, _, err) = check(&GOOD.replace("0.92", "1.5"), &[]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains(&format!("{}:2: controller.target_utilization: 1.5 is outside [0, 1]", path.display())),
        "{err}"
    );

    let (_d, _p, code, _, err) = check(&GOOD.replace("debounce: 100ms", "debounce: 10s"), &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("run.debounce: must be shorter than the tick"), "{err}");

    let (_d, _p, code, _, err) = check(&GOOD.replace("    hpa: nginx\n", ""), &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("services[0].hpa: give an HPA name or a selector"), "{err}");

    let (_d, _p, code, _, err) = check(&GOOD.replace("app=api,tier in (front)", "tier in front"), &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("services[1].selector: `front` should be a set in parentheses"), "{err}");

    let no_prometheus = GOOD.replace("  prometheus_url: http://prometheus.monitoring:9090\n", "");
    let (_d, _p, code, _, err) = check(&no_prometheus, &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("services[0].load: a promql source needs run.prometheus_url"), "{err}");
}

#[test]
fn duration_without_unit_is_refused() {
    let (_d, _p, code, _, err) = check(&GOOD.replace("tick: 5s", "tick: 5"), &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("run.tick: `5` has no unit"), "{err}");
}

#[test]
fn missing_file_is_named() {
    let out =
        Command::new(env!("CARGO_BIN_EXE_colocate")).args(["check-config", "/no/such/colocate.yaml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/no/such/colocate.yaml: cannot read the configuration"), "{err}");
}

#[test]
fn a_token_file_that_cannot_be_read_here_is_a_warning_naming_it() {
    let yaml = GOOD.replace("run:\n", "run:\n  master_token_file: /no/such/token\n");
    let (_d, _p, code, out, err) = check(&yaml, &[]);
    assert_eq!(code, Some(0), "valid configuration: {err}");
    assert!(out.contains("/no/such/token"), "{out}");
    assert!(
        err.contains("warning: run.master_token_file: /no/such/token: No such file or directory")
            && err.contains("refuses to start"),
        "{err}"
    );
    // An empty token is refused by `run` too.
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "\n").unwrap();
    let yaml = GOOD.replace("run:\n", &format!("run:\n  master_token_file: {}\n", token.display()));
    let (_d, _p, code, _out, err) = check(&yaml, &[]);
    assert_eq!((code, err.contains("the file is empty")), (Some(0), true), "{err}");
}

#[test]
fn https_with_a_ca_bundle_is_accepted_and_a_certificate_file_it_cannot_use_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = support::certs::Ca::new("cluster CA");
    let ca_file = support::process::write(dir.path(), "ca.crt", &ca.pem);
    let tls = format!(
        "run:\n  prometheus_url: https://prometheus.example.com\n  prometheus_tls: {{ca_file: {ca}}}\n  \
         prometheus_token_file: {token}\n  master_tls: {{ca_file: {ca}}}\n",
        ca = ca_file.display(),
        token = support::process::write(dir.path(), "token", "t0ken\n").display(),
    );
    let yaml = GOOD.replace("run:\n", &tls).replace("  prometheus_url: http://prometheus.monitoring:9090\n", "");
    let (_d, _p, code, out, err) = check(&yaml, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("  master_tls: CA {}", ca_file.display())), "{out}");
    assert!(out.contains("  prometheus_url: https://prometheus.example.com"), "{out}");

    // A bundle that is not there, or is not PEM, is refused by its key.
    let missing = yaml.replacen(
        &format!("master_tls: {{ca_file: {}", ca_file.display()),
        "master_tls: {ca_file: /no/such/ca.crt",
        1,
    );
    let (_d, path, code, _, err) = check(&missing, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&path.display().to_string())
            && err.contains("run.master_tls.ca_file: cannot read /no/such/ca.crt"),
        "{err}"
    );
    let not_pem = support::process::write(dir.path(), "notes.txt", "hello");
    let yaml = yaml.replacen(&ca_file.display().to_string(), &not_pem.display().to_string(), 1);
    let (_d, _p, code, _, err) = check(&yaml, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("run.prometheus_tls.ca_file: ") && err.contains("notes.txt"), "{err}");
}
