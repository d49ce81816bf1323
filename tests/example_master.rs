//! `colocate example-master` (the binary) over a worker Deployment of a real kube-apiserver (the
//! test bed, or the cluster in COLOCATE_TEST_KUBECONFIG), driven with the crate's `MasterClient`.
//!
//! The default test bed runs no kube-controller-manager, so the Deployment never gets pods or a
//! status: the master reports 0 ready workers, and the "workers" are pods created by hand with the
//! Deployment's labels. What is checked is what the master writes: `spec.replicas` through `/scale`
//! and the pod-deletion-cost marks. The master runs as a ServiceAccount holding only the Role the
//! `deployment` module documents, so that Role is checked to be enough.

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use colocate::live::master_client::{MasterClient, MasterError, RetryPolicy};
use colocate::master_protocol::{Phase, Progress, ScaleCommand, Workers};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::{json, Value};
use support::testbed::Testbed;

const NS: &str = "ml-example";
const COST: &str = "controller.kubernetes.io/pod-deletion-cost";
const TOKEN: &str = "example-master-token";

async fn client(bed: &Testbed) -> Client {
    let kubeconfig = Kubeconfig::read_from(&bed.kubeconfig).expect("readable kubeconfig");
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.expect("kubeconfig");
    Client::try_from(config).expect("client")
}

fn worker_labels() -> Value {
    json!({"colocate.dev/job": "wd", "colocate.dev/role": "worker"})
}

fn deployment() -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "wd", "namespace": NS},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": worker_labels()},
            "template": {
                "metadata": {"labels": worker_labels()},
                "spec": {"containers": [{"name": "worker", "image": "registry.invalid/fake",
                    "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]}
            }
        }
    }))
    .unwrap()
}

fn pod(name: &str, labels: Value, annotations: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": NS, "name": name, "labels": labels, "annotations": annotations},
        "spec": {"containers": [{"name": "worker", "image": "registry.invalid/fake"}]}
    })
}

/// A kubeconfig like the test bed's, authenticating as ServiceAccount `sa` of `NS` instead.
fn kubeconfig_for(bed: &Testbed, sa: &str, dir: &Path) -> PathBuf {
    let text = bed.kubeconfig_as(NS, sa, "1h");
    let path = dir.join(format!("{sa}.kubeconfig"));
    std::fs::write(&path, text).unwrap();
    path
}

/// The `colocate example-master` binary, running; stderr is collected line by line.
struct Master {
    child: Child,
    base: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Master {
    /// The command with every setting but `--listen` and `--token-file`; the ones given as
    /// environment variables can be overridden with flags.
    fn command(kubeconfig: &Path) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_colocate"));
        cmd.args(["example-master", "--job", "wd", "--max-workers", "8"])
            .env_remove("KUBECONFIG")
            // Flags and environment variables both reach it.
            .env("COLOCATE_MASTER_KUBECONFIG", kubeconfig)
            .env("COLOCATE_MASTER_DEPLOYMENT", "wd")
            .env("COLOCATE_MASTER_NAMESPACE", NS)
            .env("COLOCATE_MASTER_MIN_WORKERS", "1")
            .env("COLOCATE_MASTER_WORKER_CPU", "2")
            .env("COLOCATE_MASTER_WORKER_MEMORY", "4Gi")
            .env("COLOCATE_MASTER_RESCALE_COST", "10s")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd
    }

    /// Starts it on 127.0.0.1:0 and waits for the address it prints.
    fn spawn(mut cmd: Command) -> Master {
        let mut child = cmd.args(["--listen", "127.0.0.1:0"]).spawn().expect("spawning colocate example-master");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let lines = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[example-master] {line}");
                // `... listening on 127.0.0.1:PORT job=... ` (the message, then its fields).
                if let Some(addr) =
                    line.split_once("listening on ").and_then(|(_, rest)| rest.split_whitespace().next())
                {
                    let _ = tx.send(addr.to_string());
                }
                lines.lock().unwrap().push(line);
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => Master { child, base: format!("http://{addr}"), log },
            Err(_) => {
                let _ = child.kill();
                let status = child.wait();
                panic!("example-master did not start ({status:?}):\n{}", log.lock().unwrap().join("\n"));
            }
        }
    }

    fn client(&self) -> MasterClient {
        let retry = RetryPolicy {
            max_attempts: 2,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(50),
        };
        MasterClient::new(&self.base).unwrap().with_timeout(Duration::from_secs(10)).with_retry(retry)
    }

    /// Waits until a line of its stderr contains every one of `words`.
    async fn wait_for_log(&self, words: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if self.log.lock().unwrap().iter().any(|l| words.iter().all(|w| l.contains(w))) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no stderr line of example-master contains {words:?}:\n{}",
                self.log.lock().unwrap().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// How many lines of its stderr contain `words`.
    fn log_count(&self, words: &str) -> usize {
        self.log.lock().unwrap().iter().filter(|l| l.contains(words)).count()
    }

    /// SIGTERM, then its exit status.
    fn terminate(mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().expect("running kill");
        assert!(sent.success(), "kill -TERM {pid} failed");
        wait_with_timeout(&mut self.child, Duration::from_secs(10))
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn wait_with_timeout(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("colocate example-master did not exit within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs the binary to its end; returns its exit code and stderr.
fn run_to_end(mut cmd: Command) -> (Option<i32>, String) {
    let mut child = cmd.spawn().expect("spawning colocate example-master");
    let status = wait_with_timeout(&mut child, Duration::from_secs(30));
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    (status.code(), stderr)
}

/// What the master logs when it deletes released workers once the Deployment controller has
/// lowered the ReplicaSet's count, and when it gave up waiting for that.
const LOWERED: &str = "the Deployment controller lowered the ReplicaSet's count";
const NOT_LOWERED: &str = "the Deployment controller has not lowered the ReplicaSet's count";

/// Writes `status.observedGeneration` up to `metadata.generation` whenever it lags, as
/// kube-controller-manager's Deployment controller does once it has acted on a change.
async fn play_the_deployment_controller(deployments: Api<Deployment>) {
    loop {
        let d = deployments.get("wd").await.unwrap();
        let generation = d.metadata.generation;
        if d.status.and_then(|s| s.observed_generation) < generation {
            let status = json!({"status": {"observedGeneration": generation}});
            deployments.patch_status("wd", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn replicas(deployments: &Api<Deployment>) -> i32 {
    let d = deployments.get("wd").await.unwrap();
    d.spec.unwrap().replicas.unwrap()
}

async fn deletion_cost(pods: &Api<Pod>, name: &str) -> Option<String> {
    pods.get(name).await.unwrap().metadata.annotations.unwrap_or_default().get(COST).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_master_scales_a_deployment_through_its_scale_subresource() {
    let bed = tokio::task::spawn_blocking(Testbed::start).await.unwrap();
    let kube = client(&bed).await;
    let dir = tempfile::tempdir().unwrap();

    bed.kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}));
    let deployments: Api<Deployment> = Api::namespaced(kube.clone(), NS);
    deployments.create(&PostParams::default(), &deployment()).await.expect("create the Deployment");
    // A template change moves metadata.generation past the master's default first generation (1).
    let touch = json!({"spec": {"template": {"metadata": {"annotations": {"example/touched": "yes"}}}}});
    let touched = deployments.patch("wd", &PatchParams::default(), &Patch::Merge(&touch)).await.unwrap();
    let generation0 = touched.metadata.generation.unwrap() as u64;
    assert_eq!(generation0, 2);
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NS);
    bed.kubectl_apply(&pod("wd-worker-a", worker_labels(), json!({})));
    bed.kubectl_apply(&pod("wd-worker-b", worker_labels(), json!({})));
    // Marked by an earlier shrink that removed fewer pods than it named: not named now, so the
    // mark must go.
    bed.kubectl_apply(&pod("wd-worker-c", worker_labels(), json!({COST: "-1000"})));
    // In the namespace, named below, but not one of the Deployment's pods.
    bed.kubectl_apply(&pod("bystander", json!({"app": "other"}), json!({})));

    // The master runs with exactly the documented Role.
    bed.kubectl_run(&["create", "serviceaccount", "colocate-master", "-n", NS]);
    bed.kubectl_apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "colocate-master", "namespace": NS},
        "rules": [
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]},
            {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["get", "patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "patch", "delete"]}
        ]
    }));
    bed.kubectl_run(&[
        "create",
        "rolebinding",
        "colocate-master",
        "-n",
        NS,
        "--role=colocate-master",
        &format!("--serviceaccount={NS}:colocate-master"),
    ]);
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let mut cmd = Master::command(&kubeconfig_for(&bed, "colocate-master", dir.path()));
    cmd.arg("--token-file").arg(&token_file);
    // Its workers do nothing: it reports the progress of a modelled job of 1M samples.
    cmd.args(["--model-samples", "1000000", "--model-samples-per-worker-s", "25"]);
    let master = Master::spawn(cmd);
    let mc = master.client().with_token(TOKEN).unwrap();

    // The token is required.
    colocate::live::tls::install_crypto_provider();
    let anonymous = reqwest::Client::builder().no_proxy().build().unwrap();
    let res = anonymous.get(format!("{}/v1/status", master.base)).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 401);

    // Status: the Deployment's replicas are the target; no controller manager, so none ready.
    let s = mc.status().await.expect("status");
    assert_eq!(s.job, "wd");
    assert_eq!(s.workers, Workers { current: 0, target: 4, min: 1, max: 8, pending: 0 });
    assert_eq!(s.phase, Phase::Rescaling);
    assert_eq!((s.worker_resources.cpu.as_str(), s.worker_resources.memory.as_str()), ("2", "4Gi"));
    assert_eq!(s.rescale_cost_s, Some(10.0));
    assert_eq!(s.generation, generation0, "seeded from the Deployment's metadata.generation");
    assert_eq!(s.progress, Some(Progress { done: 0, total: 1_000_000 }), "no worker ready, nothing done");
    assert_eq!(s.throughput.map(|t| t.samples_per_s), Some(0.0));

    // Shrink to 2, releasing two workers (both name forms), a pod that does not exist, a pod that
    // is not a worker of this Deployment, and a pod of another namespace.
    let shrink = ScaleCommand::new(2, "online-headroom", 30).with_release_pods([
        format!("{NS}/wd-worker-a"),
        "wd-worker-b".to_string(),
        "wd-worker-gone".to_string(),
        "bystander".to_string(),
        "elsewhere/wd-worker-c".to_string(),
    ]);
    let accepted = mc.scale(&shrink).await.expect("scale to 2");
    assert_eq!(accepted.accepted_target, 2);
    assert!(accepted.generation > s.generation, "generation grew: {} -> {}", s.generation, accepted.generation);
    assert_eq!(replicas(&deployments).await, 2, "spec.replicas set through /scale");
    // Three workers counted, two wanted: one leaves. The master marks it, should the ReplicaSet
    // act first, and deletes it itself (here, with no kubelet, a pod on no node is gone at
    // once); the other named worker stays, unmarked.
    master.wait_for_log(&["released worker deleted by the master"]).await;
    // Before its deletes it waited for the Deployment controller to lower the ReplicaSet's
    // count (none runs here, so for its bound): deleted before, a worker is replaced.
    let (waited, deleted) = {
        let log = master.log.lock().unwrap();
        let at = |words: &str| log.iter().position(|l| l.contains(words));
        (at(NOT_LOWERED), at("released worker deleted by the master"))
    };
    assert!(waited.is_some() && waited < deleted, "waited, then deleted: lines {waited:?}, {deleted:?}");
    let (a, b) = (pods.get_opt("wd-worker-a").await.unwrap(), pods.get_opt("wd-worker-b").await.unwrap());
    let Some(kept) = (match (&a, &b) {
        (None, Some(kept)) | (Some(kept), None) => Some(kept),
        _ => None,
    }) else {
        panic!("exactly one of the two named workers is deleted: a {:?}, b {:?}", a.is_some(), b.is_some())
    };
    let kept = kept.metadata.name.clone().unwrap();
    assert_eq!(deletion_cost(&pods, &kept).await, None, "only the one leaving is marked");
    assert_eq!(deletion_cost(&pods, "wd-worker-c").await, None, "a stale mark is cleared");
    assert_eq!(deletion_cost(&pods, "bystander").await, None, "only the Deployment's pods are marked");
    master.wait_for_log(&["wd-worker-gone", "skipped"]).await;
    master.wait_for_log(&["bystander", "skipped"]).await;
    master.wait_for_log(&["elsewhere/wd-worker-c", "skipped"]).await;
    let s = mc.status().await.unwrap();
    assert_eq!((s.workers.target, s.generation), (2, accepted.generation));

    // Outside [1, 8]: 409 with the bounds, and the Deployment is left alone.
    for target in [0, 9] {
        match mc.scale(&ScaleCommand::new(target, "grow", 30)).await {
            Err(MasterError::OutOfBounds { min: 1, max: 8, .. }) => {}
            other => panic!("target {target}: expected 409 out of bounds, got {other:?}"),
        }
    }
    assert_eq!(replicas(&deployments).await, 2);

    // The same command id twice is applied once: after someone else scales the Deployment in
    // between, the retry answers as the first time and does not undo that change.
    let grow = ScaleCommand::new(3, "grow", 30);
    let first = mc.scale(&grow).await.expect("scale to 3");
    assert_eq!((first.accepted_target, first.generation), (3, accepted.generation + 1));
    assert_eq!(replicas(&deployments).await, 3);
    let kubectl_scale = json!({"spec": {"replicas": 5}});
    deployments.patch_scale("wd", &PatchParams::default(), &Patch::Merge(&kubectl_scale)).await.unwrap();
    let again = mc.scale(&grow).await.expect("the same command again");
    assert_eq!(again, first);
    assert_eq!(replicas(&deployments).await, 5, "the repeated command was not applied again");
    let s = mc.status().await.unwrap();
    assert_eq!((s.workers.target, s.generation), (5, first.generation + 1), "the master follows kubectl scale");

    // A shrink that names a worker holding a node while others wait for one (replacements of
    // preempted workers): the ReplicaSet would remove a waiting pod and free no room, so the
    // master deletes the named worker itself and leaves the waiting ones. Three counted, two
    // wanted: one leaves, whatever `spec.replicas` said (5).
    let mut running = pod("wd-worker-d", worker_labels(), json!({}));
    running["spec"]["nodeName"] = json!("node-x");
    bed.kubectl_apply(&running);
    let release_d = ScaleCommand::new(2, "online-headroom", 30).with_release_pods(["wd-worker-d".to_string()]);
    mc.scale(&release_d).await.expect("scale to 2, releasing wd-worker-d");
    master.wait_for_log(&["wd-worker-d", "released worker deleted by the master"]).await;
    let leaving = |p: Option<Pod>| p.is_none_or(|p| p.metadata.deletion_timestamp.is_some());
    assert!(leaving(pods.get_opt("wd-worker-d").await.unwrap()), "the named running worker is being deleted");
    for waiting in [kept.as_str(), "wd-worker-c"] {
        let p = pods.get(waiting).await.unwrap();
        assert!(p.metadata.deletion_timestamp.is_none(), "{waiting} waits for a node and was not named: kept");
    }
    assert_eq!(replicas(&deployments).await, 2);
    // Here the ReplicaSet would remove a waiting pod first, so the master did not wait for it.
    assert_eq!(master.log_count(NOT_LOWERED), 1, "no wait where the ReplicaSet would remove others");

    // Every worker on a node, the one named ranks first for the ReplicaSet too: the master waits
    // for the Deployment controller (played here by the test: it writes the status'
    // observedGeneration, as the controller does once it has set the ReplicaSet's count).
    for gone in [kept.as_str(), "wd-worker-c"] {
        pods.delete(gone, &Default::default()).await.unwrap();
    }
    for name in ["wd-worker-e", "wd-worker-f", "wd-worker-g"] {
        let mut bound = pod(name, worker_labels(), json!({}));
        bound["spec"]["nodeName"] = json!("node-x");
        bed.kubectl_apply(&bound);
    }
    let controller = tokio::spawn(play_the_deployment_controller(deployments.clone()));
    deployments
        .patch_scale("wd", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"replicas": 3}})))
        .await
        .unwrap();
    let release_e = ScaleCommand::new(2, "online-headroom", 30).with_release_pods(["wd-worker-e".to_string()]);
    mc.scale(&release_e).await.expect("scale to 2, releasing wd-worker-e");
    master.wait_for_log(&["wd-worker-e", "released worker deleted by the master"]).await;
    controller.abort();
    assert_eq!(master.log_count(LOWERED), 1, "it waited for the Deployment controller");
    assert_eq!(master.log_count(NOT_LOWERED), 1, "and not for its bound");
    assert!(leaving(pods.get_opt("wd-worker-e").await.unwrap()), "the named worker is being deleted");

    let status = master.terminate();
    assert!(status.success(), "example-master exits 0 on SIGTERM, got {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_master_names_the_deployment_it_cannot_read() {
    let bed = tokio::task::spawn_blocking(Testbed::start).await.unwrap();
    let kube = client(&bed).await;
    let dir = tempfile::tempdir().unwrap();
    bed.kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}));
    Api::<Deployment>::namespaced(kube, NS).create(&PostParams::default(), &deployment()).await.unwrap();
    bed.kubectl_run(&["create", "serviceaccount", "nobody", "-n", NS]);

    // No Role: forbidden is a runtime failure (exit 1) naming the Deployment.
    let (code, stderr) = run_to_end(Master::command(&kubeconfig_for(&bed, "nobody", dir.path())));
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert!(stderr.contains(&format!("deployment {NS}/wd")) && stderr.contains("403"), "stderr: {stderr}");

    // A Deployment that does not exist: the same, with 404.
    let mut cmd = Master::command(&bed.kubeconfig);
    cmd.args(["--deployment", "missing"]);
    let (code, stderr) = run_to_end(cmd);
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert!(stderr.contains(&format!("deployment {NS}/missing")) && stderr.contains("404"), "stderr: {stderr}");
}

#[test]
fn example_master_exits_2_on_bad_configuration_and_1_when_the_cluster_is_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    let unreachable = dir.path().join("unreachable.kubeconfig");
    std::fs::write(
        &unreachable,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n\
         users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n\
         current-context: c\n",
    )
    .unwrap();
    let empty_token = dir.path().join("empty-token");
    std::fs::write(&empty_token, "\n").unwrap();

    let cases: [(&[&str], i32, &str); 9] = [
        (&["--min-workers", "9"], 2, "--min-workers (9) is above --max-workers (8)"),
        (&["--worker-cpu", "two"], 2, "--worker-cpu"),
        (&["--rescale-cost", "soon"], 2, "--rescale-cost"),
        (&["--token-file", empty_token.to_str().unwrap()], 2, "is empty"),
        (&["--kubeconfig", "/nonexistent/kubeconfig"], 2, "/nonexistent/kubeconfig"),
        (&["--model-samples", "1000"], 2, "--model-samples-per-worker-s"),
        (&["--model-samples", "1000", "--model-samples-per-worker-s", "0"], 2, "must be a positive number, got 0"),
        (
            &["--model-samples", "1000", "--model-samples-per-worker-s", "5", "--model-exponent", "1.5"],
            2,
            "--model-exponent must be in (0, 1], got 1.5",
        ),
        (&[], 1, "deployment ml-example/wd"),
    ];
    for (args, want, message) in cases {
        let mut cmd = Master::command(&unreachable);
        cmd.args(args);
        let (code, stderr) = run_to_end(cmd);
        assert_eq!(code, Some(want), "{args:?}: stderr: {stderr}");
        assert!(stderr.contains(message), "{args:?}: stderr should contain {message:?}: {stderr}");
    }
}
