//! The torchrun master (`python/colocate_torchrun`) with real PyTorch: its own tests (unit tests
//! of its logic, and real torchrun groups grown, shrunk and killed under it), and colocate's
//! master client driving it, so both sides of master protocol v1.2 are held to one contract.
//!
//! On the test bed (kube-apiserver, kube-scheduler, kube-controller-manager, kwok nodes), the
//! master keeps a worker Deployment at its target and sizes each torchrun group to the worker
//! pods that run.
//!
//! Needs the torch venv: `$COLOCATE_TORCH_PYTHON` (hack/test.sh exports what
//! `hack/torch/venv.sh` prints), else the test runs `hack/torch/venv.sh` itself (1-2 minutes
//! and about 3 GB of downloads the first time).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use colocate::live::master_client::{MasterClient, MasterError, RetryPolicy};
use colocate::master_protocol::{CheckpointCommand, Phase, ScaleCommand, Status};
use serde_json::{json, Value};
use support::testbed::{node_manifest, Testbed};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The python that has torch.
fn torch_python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        if let Some(p) = std::env::var_os("COLOCATE_TORCH_PYTHON").filter(|v| !v.is_empty()) {
            return PathBuf::from(p);
        }
        let out = Command::new("bash")
            .arg(repo().join("hack/torch/venv.sh"))
            .stderr(Stdio::inherit())
            .output()
            .expect("running hack/torch/venv.sh");
        assert!(out.status.success(), "hack/torch/venv.sh failed: {:?}", out.status);
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

#[test]
fn the_masters_own_tests_pass_with_real_torchrun_groups() {
    let out = Command::new(torch_python())
        .args(["-m", "unittest", "discover", "-v", "-s", "tests", "-t", "."])
        .current_dir(repo().join("python"))
        .output()
        .expect("running the python tests");
    let log = String::from_utf8_lossy(&out.stderr);
    println!("{log}");
    assert!(out.status.success(), "python -m unittest failed:\n{log}");
    assert!(log.contains("\nOK"), "no test result in:\n{log}");
}

#[test]
fn the_master_type_checks() {
    let out = Command::new(torch_python())
        .args(["-m", "mypy", "--config-file", "mypy.ini", "colocate_torchrun", "tests"])
        .current_dir(repo().join("python"))
        .output()
        .expect("running mypy");
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "mypy found errors:\n{log}{}", String::from_utf8_lossy(&out.stderr));
}

/// A master process, killed when dropped.
struct Master {
    child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Drop for Master {
    fn drop(&mut self) {
        // SIGTERM: the master stops its workers at their next step and exits.
        let _ = Command::new("kill").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
    }
}

fn start_master(workers: u32, max: u32) -> Master {
    start_master_with(workers, max, &[])
}

fn start_master_with(workers: u32, max: u32, extra: &[&str]) -> Master {
    let dir = tempfile::tempdir().unwrap();
    let port = support::process::free_port();
    let log = std::fs::File::create(dir.path().join("master.log")).unwrap();
    let child = Command::new(torch_python())
        .args(["-m", "colocate_torchrun", "--job", "mlp", "--min-workers", "1"])
        .args(["--max-workers", &max.to_string(), "--workers", &workers.to_string()])
        .args(["--worker-cpu", "1", "--worker-memory", "512Mi", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--workdir")
        .arg(dir.path().join("job"))
        .arg("--python")
        .arg(torch_python())
        .args(extra)
        .args(["--", "--task", "mlp", "--train-samples", "20000", "--test-samples", "4000"])
        .args(["--steps", "100000", "--step-delay-s", "0.05", "--eval-every", "20"])
        .env("PYTHONPATH", repo().join("python"))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("starting the torchrun master");
    Master { child, base: format!("http://127.0.0.1:{port}"), _dir: dir }
}

async fn wait_for(client: &MasterClient, what: &str, check: impl Fn(&Status) -> bool) -> Status {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = None;
    while Instant::now() < deadline {
        match client.status().await {
            Ok(s) if check(&s) => return s,
            Ok(s) => last = Some(s),
            Err(MasterError::Unreachable { .. }) => {}
            Err(e) => panic!("status: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("no {what} within 120 s; last status {last:?}");
}

#[tokio::test]
async fn colocates_client_grows_a_torchrun_job_and_reads_its_training() {
    let master = start_master(1, 2);
    let client =
        MasterClient::new(&master.base).unwrap().with_timeout(Duration::from_secs(5)).with_retry(RetryPolicy {
            max_attempts: 2,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(100),
        });
    let running = |n: u32| move |s: &Status| s.phase == Phase::Running && s.workers.current == n;
    let first = wait_for(&client, "one worker training", running(1)).await;
    assert_eq!((first.job.as_str(), first.generation, first.workers.max), ("mlp", 1, 2));
    assert_eq!((first.worker_resources.cpu.as_str(), first.worker_resources.memory.as_str()), ("1", "512Mi"));
    let checkpoint = first.checkpoint.expect("a v1.2 master reports its checkpoint");
    assert!(checkpoint.on_demand);

    let asked = client.checkpoint(&CheckpointCommand::new("expected-shrink")).await.unwrap();
    assert_eq!(asked.requested, 1);
    let accepted = client.scale(&ScaleCommand::new(2, "grow", 30)).await.unwrap();
    assert_eq!((accepted.accepted_target, accepted.generation), (2, 2));
    let grown = wait_for(&client, "two workers training", running(2)).await;
    // Throughput and progress come from the training itself once the new group runs.
    let throughput = grown.throughput.expect("throughput while running").samples_per_s;
    assert!(throughput > 0.0, "{grown:?}");
    let progress = grown.progress.expect("progress");
    assert!(progress.done > 0 && progress.total == 100_000 * 840, "{progress:?}");
    // Measured on the change just made: how long the old group took to go, and the whole pause.
    let release = grown.worker_release_s.expect("worker_release_s measured on the grow");
    let pause = grown.rescale_cost_s.expect("rescale_cost_s measured on the grow");
    assert!(release > 0.0 && pause > release, "release {release} s, pause {pause} s");
    let out_of_bounds = client.scale(&ScaleCommand::new(3, "grow", 30)).await.unwrap_err();
    assert!(matches!(out_of_bounds, MasterError::OutOfBounds { min: 1, max: 2, .. }), "{out_of_bounds}");
}

fn worker_deployment(replicas: u32) -> Value {
    let labels = json!({"colocate.dev/job": "mlp", "colocate.dev/role": "worker"});
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "mlp-worker", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "agent", "image": "registry.invalid/torchrun-agent",
                    "resources": {"requests": {"cpu": "1", "memory": "512Mi"}}}]}
            }
        }
    })
}

/// The worker pods: (name, running, being deleted).
fn worker_pods(bed: &Testbed) -> Vec<(String, bool, bool)> {
    let out = bed.kubectl_run(&["get", "pods", "-n", "default", "-l", "colocate.dev/job=mlp", "-o", "json"]);
    let list: Value = serde_json::from_str(&out).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let name = p["metadata"]["name"].as_str().unwrap().to_string();
            (name, p["status"]["phase"] == "Running", !p["metadata"]["deletionTimestamp"].is_null())
        })
        .collect()
}

#[tokio::test]
async fn on_the_test_bed_each_group_is_sized_to_the_running_worker_pods() {
    let bed = tokio::task::spawn_blocking(|| Testbed::start_with_controller_manager("*,-horizontalpodautoscaling"))
        .await
        .unwrap();
    // Room for three 1-CPU workers.
    bed.kubectl_apply(&node_manifest("node-a", "3", "16Gi"));
    bed.kubectl_apply(&worker_deployment(1));
    let kubeconfig = bed.kubeconfig.to_str().unwrap().to_string();
    let master = start_master_with(
        1,
        4,
        &["--worker-deployment", "mlp-worker", "--namespace", "default", "--kubeconfig", &kubeconfig],
    );
    let client = MasterClient::new(&master.base).unwrap().with_timeout(Duration::from_secs(5));
    wait_for(&client, "one worker training", |s| s.phase == Phase::Running && s.workers.current == 1).await;

    // A grow past the room: the Deployment goes to 4, three pods run, the group runs on three.
    client.scale(&ScaleCommand::new(4, "grow", 30)).await.unwrap();
    let grown = wait_for(&client, "three workers training", |s| s.workers.current == 3).await;
    assert_eq!((grown.workers.target, grown.phase), (4, Phase::Rescaling), "{grown:?}");
    let pods = worker_pods(&bed);
    assert_eq!((pods.len(), pods.iter().filter(|p| p.1).count()), (4, 3), "{pods:?}");

    // A shrink naming a running pod: that pod goes, and the group runs on the others.
    let named = pods.iter().find(|p| p.1).unwrap().0.clone();
    client.scale(&ScaleCommand::new(2, "online-headroom", 30).with_release_pods([named.as_str()])).await.unwrap();
    let shrunk =
        wait_for(&client, "two workers training", |s| s.phase == Phase::Running && s.workers.current == 2).await;
    assert_eq!(shrunk.workers.target, 2);
    let deadline = Instant::now() + Duration::from_secs(30);
    while worker_pods(&bed).iter().any(|p| p.0 == named && !p.2) {
        assert!(Instant::now() < deadline, "the named pod {named} was not removed: {:?}", worker_pods(&bed));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    drop(master);
}
