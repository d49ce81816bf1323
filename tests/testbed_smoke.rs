//! The test bed itself (Rust version of hack/testbed/smoke.sh): a control plane comes up, kwok
//! makes a fake node Ready and runs a pod on it, and no component outlives its `Testbed`, whether
//! the test passes, panics, or its process is killed.

mod support;

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use support::testbed::{node_manifest, Testbed};

/// Set in the child process of `teardown_when_the_process_is_killed`.
const CHILD_ENV: &str = "COLOCATE_TESTBED_SMOKE_CHILD";

#[test]
fn pod_runs_on_a_fake_node() {
    let tb = Testbed::start();
    let pids = tb.pids();
    assert_eq!(pids.len(), 4, "etcd, kube-apiserver, kube-scheduler, kwok: {pids:?}");
    assert_eq!(tb.kubectl_run(&["get", "--raw", "/readyz"]).trim(), "ok");

    // Unique names, in case COLOCATE_TEST_KUBECONFIG points at a shared cluster.
    let suffix = std::process::id();
    let (node, pod) = (format!("kwok-smoke-{suffix}"), format!("smoke-{suffix}"));
    tb.kubectl_apply(&node_manifest(&node, "32", "256Gi"));
    tb.kubectl_apply(&json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": pod, "namespace": "default" },
        "spec": {
            "containers": [{
                "name": "c",
                "image": "fake-image",
                "resources": { "requests": { "cpu": "100m", "memory": "64Mi" } },
            }],
        },
    }));
    let t0 = Instant::now();
    tb.kubectl_run(&["wait", "--for=condition=Ready", &format!("node/{node}"), "--timeout=60s"]);
    tb.kubectl_run(&["wait", "--for=jsonpath={.status.phase}=Running", &format!("pod/{pod}"), "--timeout=60s"]);
    eprintln!("node Ready and pod Running {:.1}s after creation", t0.elapsed().as_secs_f64());

    assert_eq!(tb.kubectl_run(&["get", "pod", &pod, "-o", "jsonpath={.spec.nodeName}"]), node);
    let allocatable = tb.kubectl_run(&["get", "node", &node, "-o", "jsonpath={.status.allocatable}"]);
    let allocatable: serde_json::Value = serde_json::from_str(&allocatable).unwrap();
    assert_eq!(allocatable, json!({ "cpu": "32", "memory": "256Gi", "pods": "110" }));

    tb.kubectl_run(&["delete", "pod", &pod, "--wait=true", "--timeout=60s"]);
    tb.kubectl_run(&["delete", "node", &node, "--wait=true", "--timeout=60s"]);
    drop(tb);
    assert_gone(&pids, Duration::from_secs(5));
}

#[test]
fn teardown_when_the_test_panics() {
    let tb = Testbed::start();
    if tb.is_external() {
        eprintln!("external cluster ({}): no processes of ours to check", tb.kubeconfig.display());
        return;
    }
    let pids = tb.pids();
    let dir = tb.dir().unwrap().to_path_buf();
    assert_eq!(pids.len(), 4, "{pids:?}");
    let result = std::panic::catch_unwind(AssertUnwindSafe(move || {
        let _tb = tb;
        panic!("deliberate panic with a live testbed");
    }));
    assert!(result.is_err());
    assert_gone(&pids, Duration::from_secs(5));
    // On a failure the dir and the component logs stay for a post-mortem.
    assert!(dir.join("logs/kube-apiserver.log").is_file(), "logs of {} not kept", dir.display());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn teardown_when_the_process_is_killed() {
    if std::env::var_os(support::testbed::KUBECONFIG_ENV).is_some_and(|v| !v.is_empty()) {
        eprintln!("external cluster: no processes of ours to check");
        return;
    }
    // The child (this binary, running `child_killed_with_a_live_testbed`) starts a testbed, prints its
    // pids and dir, and SIGKILLs itself: no unwinding, no Drop; the watchdog must stop everything.
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_killed_with_a_live_testbed", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let field = |key: &str| {
        stdout.lines().find_map(|l| l.split_once(key).map(|(_, value)| value)).map(str::to_string).unwrap_or_else(
            || {
                panic!(
                    "child printed no {key} ({}):\n{stdout}\nstderr:\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                )
            },
        )
    };
    let pids: Vec<u32> = field("TESTBED_PIDS=").split_whitespace().map(|p| p.parse().unwrap()).collect();
    let dir = PathBuf::from(field("TESTBED_DIR="));
    assert_eq!(pids.len(), 4, "{pids:?}");
    assert!(!out.status.success(), "the child should have been killed: {}", out.status);
    assert_gone(&pids, Duration::from_secs(30));
    let log = std::fs::read_to_string(dir.join("watchdog-down.log")).unwrap_or_default();
    assert!(log.contains("stopped kube-apiserver"), "watchdog log: {log}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The child of `teardown_when_the_process_is_killed`; does nothing unless run by it.
#[test]
#[ignore = "run by teardown_when_the_process_is_killed"]
fn child_killed_with_a_live_testbed() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let tb = Testbed::start();
    let pids: Vec<String> = tb.pids().iter().map(u32::to_string).collect();
    println!("TESTBED_PIDS={}", pids.join(" "));
    println!("TESTBED_DIR={}", tb.dir().unwrap().display());
    let me = std::process::id().to_string();
    let _ = Command::new("kill").args(["-KILL", &me]).status();
    std::thread::sleep(Duration::from_secs(60));
    unreachable!("not killed");
}

/// Asserts that none of `pids` is still running (zombies waiting for their reaper count as
/// stopped), polling for up to `grace` (down.sh does not wait after a KILL).
fn assert_gone(pids: &[u32], grace: Duration) {
    let deadline = Instant::now() + grace;
    loop {
        let alive: Vec<u32> = pids.iter().copied().filter(|&p| running(p)).collect();
        if alive.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "testbed processes still running: {alive:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}
