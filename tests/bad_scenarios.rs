//! Malformed scenarios: `colocate replay` exits with 2 and names the file, the line and the key.

use std::path::{Path, PathBuf};
use std::process::Command;

const GOOD: &str = r#"version: 1
name: small
duration: 2m
cluster:
  nodes:
    - pool: cpu
      count: 2
      allocatable: {cpu: "8", memory: 32Gi}
services:
  - name: web
    replica: {cpu: "1", memory: 512Mi}
    replica_capacity_rps: 100
    startup: 5s
    latency: {base_p99: 20ms, slo_p99: 200ms}
    hpa:
      min_replicas: 2
      max_replicas: 10
      target_utilization: 0.6
    load:
      constant: 300
jobs:
  - name: train
    worker: {cpu: "1", memory: 2Gi}
    min_workers: 1
    max_workers: 8
    throughput_per_worker: 10
"#;

struct Outcome {
    code: Option<i32>,
    stderr: String,
}

fn replay(dir: &Path, yaml: &str) -> (PathBuf, Outcome) {
    let path = dir.join("scenario.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_colocate")).args(["replay", "--quiet"]).arg(&path).output().unwrap();
    (path, Outcome { code: out.status.code(), stderr: String::from_utf8_lossy(&out.stderr).into_owned() })
}

/// Replaces the first occurrence of `from`, failing loudly if the fixture changed.
fn edit(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "fixture has no `{from}`");
    GOOD.replacen(from, to, 1)
}

fn assert_bad(yaml: &str, line: usize, key: &str, words: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (path, out) = replay(dir.path(), yaml);
    assert_eq!(out.code, Some(2), "exit code; stderr: {}", out.stderr);
    let location = format!("{}:{line}: {key}: ", path.display());
    assert!(out.stderr.contains(&location), "expected `{location}` in: {}", out.stderr);
    assert!(out.stderr.contains(words), "expected `{words}` in: {}", out.stderr);
}

#[test]
fn the_fixture_itself_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let (_, out) = replay(dir.path(), GOOD);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

#[test]
fn unknown_key_names_its_path() {
    let yaml = edit("      max_replicas: 10", "      max_replica: 10");
    assert_bad(&yaml, 17, "services[0].hpa.max_replica", "unknown field, expected one of");
}

#[test]
fn unknown_top_level_key() {
    let yaml = GOOD.replace("duration: 2m", "duration: 2m\nsteps: 1s");
    assert_bad(&yaml, 4, "steps", "unknown field");
}

#[test]
fn wrong_cpu_unit() {
    let yaml = edit(r#"replica: {cpu: "1", memory: 512Mi}"#, r#"replica: {cpu: "1GHz", memory: 512Mi}"#);
    assert_bad(&yaml, 11, "services[0].replica.cpu", "`1GHz` is not a Kubernetes quantity");
}

#[test]
fn wrong_memory_unit() {
    let yaml = edit("memory: 2Gi}", "memory: 2GB}");
    assert_bad(&yaml, 23, "jobs[0].worker.memory", "`2GB` is not a Kubernetes quantity");
}

#[test]
fn duration_without_unit() {
    let yaml = edit("startup: 5s", "startup: 5");
    assert_bad(&yaml, 13, "services[0].startup", "has no unit");
}

#[test]
fn negative_count() {
    let yaml = edit("count: 2", "count: -2");
    assert_bad(&yaml, 7, "cluster.nodes[0].count", "-2");
}

#[test]
fn min_above_max() {
    let yaml = edit("min_workers: 1", "min_workers: 9");
    assert_bad(&yaml, 24, "jobs[0].min_workers", "9 is above max_workers (8)");
}

#[test]
fn hpa_min_above_max() {
    let yaml = edit("min_replicas: 2", "min_replicas: 12");
    assert_bad(&yaml, 16, "services[0].hpa.min_replicas", "12 is above max_replicas (10)");
}

#[test]
fn missing_trace_file() {
    let yaml = edit("constant: 300", "trace: {file: no/such.csv, time_column: t_s, value_column: rps}");
    assert_bad(&yaml, 20, "services[0].load.trace.file", "cannot read");
    let dir = tempfile::tempdir().unwrap();
    let (_, out) = replay(dir.path(), &yaml);
    assert!(out.stderr.contains("no/such.csv"), "{}", out.stderr);
}

#[test]
fn trace_with_a_bad_row_names_the_trace_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("load.csv"), "t_s,rps\n0,100\n60,lots\n").unwrap();
    let yaml = edit("constant: 300", "trace: {file: load.csv}");
    let (_, out) = replay(dir.path(), &yaml);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("load.csv:3: value `lots` is not a number"), "{}", out.stderr);
}

#[test]
fn two_load_kinds_at_once() {
    let yaml = edit("constant: 300", "constant: 300\n      points: [[\"0s\", 1]]");
    assert_bad(&yaml, 19, "services[0].load", "exactly one of constant, points, trace");
}

#[test]
fn missing_required_key() {
    let yaml = edit("    throughput_per_worker: 10\n", "");
    let dir = tempfile::tempdir().unwrap();
    let (path, out) = replay(dir.path(), &yaml);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains(&path.display().to_string()), "{}", out.stderr);
    assert!(
        out.stderr.contains("jobs[0]") && out.stderr.contains("missing field `throughput_per_worker`"),
        "{}",
        out.stderr
    );
}

#[test]
fn bad_controller_value() {
    let yaml = format!("{GOOD}controller:\n  target_utilization: 1.5\n");
    assert_bad(&yaml, 28, "controller.target_utilization", "1.5 is outside [0, 1]");
}

#[test]
fn a_scenario_too_large_to_hold_is_refused_up_front_with_what_it_would_need() {
    // Once: 829 GB asked for, and an abort (exit 134) instead of an answer.
    let yaml = edit("duration: 2m", "duration: 100000d");
    assert_bad(&yaml, 3, "duration", "is 8640000000 steps");
    assert_bad(&yaml, 3, "duration", "use a coarser `step` or a shorter `duration`");
    let yaml = edit("count: 2", "count: 100000000");
    assert_bad(&yaml, 7, "cluster.nodes[0].count", "100000000 nodes in all; replay plays at most 10000");
    let yaml = edit("max_workers: 8", "max_workers: 4000000");
    assert_bad(&yaml, 25, "jobs[0].max_workers", "up to 4000010 pods at once");
}

#[test]
fn missing_scenario_file() {
    let out = Command::new(env!("CARGO_BIN_EXE_colocate")).args(["replay", "/no/such/scenario.yaml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/no/such/scenario.yaml: cannot read the scenario"), "{stderr}");
}

#[test]
fn worker_that_fits_on_no_node_is_a_warning_not_an_error() {
    let yaml = edit(r#"worker: {cpu: "1", memory: 2Gi}"#, r#"worker: {cpu: "16", memory: 2Gi}"#);
    let dir = tempfile::tempdir().unwrap();
    let (path, out) = replay(dir.path(), &yaml);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let expected = format!("warning: {}: jobs[0].worker: cpu=16 memory=2048Mi fits on no node", path.display());
    assert!(out.stderr.contains(&expected), "{}", out.stderr);
}
