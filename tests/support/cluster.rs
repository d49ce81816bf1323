//! What the controller tests put on the test bed: an NGINX-like Deployment with an HPA whose
//! status the test writes (it plays the HPA controller), elastic jobs whose workers are a
//! Deployment behind a reference master served from the test process, and `colocate run` as a
//! child process.

#![allow(dead_code)] // each test binary uses part of it

use std::io::{BufRead, BufReader};
use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use colocate::master_protocol::{
    BackendError, MasterConfig, MasterState, Observed, ScaleCommand, WorkerBackend, WorkerResources,
};
use colocate::reference_master::deployment_backend::DeploymentBackend;
use colocate::reference_master::modelled::{ModelledTraining, TrainingModel};
use colocate::reference_master::serve_with_shutdown;
use colocate::reference_master::tls_listener::TlsListener;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::testbed::Testbed;

/// A test bed whose kube-controller-manager runs without its HPA controller: the controller
/// tests play the HPA (its status and the Deployment's scale), so nothing else changes them.
pub async fn bed_playing_the_hpa() -> Testbed {
    tokio::task::spawn_blocking(|| Testbed::start_with_controller_manager("*,-horizontalpodautoscaling")).await.unwrap()
}

/// Seconds from `origin` to `at`, negative when `at` came first (a command before a spike).
pub fn seconds_after(at: std::time::Instant, origin: std::time::Instant) -> f64 {
    if at >= origin {
        at.duration_since(origin).as_secs_f64()
    } else {
        -origin.duration_since(at).as_secs_f64()
    }
}

/// A client with the test bed's admin credentials.
pub async fn client(bed: &Testbed) -> Client {
    client_from_yaml(&std::fs::read_to_string(&bed.kubeconfig).expect("readable kubeconfig")).await
}

/// A client from kubeconfig text (e.g. the admin one with a ServiceAccount's token).
pub async fn client_from_yaml(kubeconfig: &str) -> Client {
    let kubeconfig = Kubeconfig::from_yaml(kubeconfig).expect("valid kubeconfig");
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.expect("kubeconfig");
    Client::try_from(config).expect("client")
}

pub fn namespace(bed: &Testbed, name: &str) {
    bed.kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}));
}

fn container(cpu: &str) -> Value {
    json!([{"name": "c", "image": "registry.invalid/fake",
            "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}])
}

/// A Deployment of `replicas` pods labelled `labels`, each requesting `cpu`.
pub fn deployment(
    ns: &str,
    name: &str,
    labels: Value,
    replicas: u32,
    cpu: &str,
    priority_class: Option<&str>,
) -> Value {
    let mut spec = json!({"containers": container(cpu), "tolerations": [{"operator": "Exists"}],
                          "terminationGracePeriodSeconds": 0});
    if let Some(pc) = priority_class {
        spec["priorityClassName"] = json!(pc);
    }
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"namespace": ns, "name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec}
        }
    })
}

/// `colocate run`'s config for tests on [`two_nodes_with_nginx`]: the NGINX service by its HPA,
/// and short windows so that growth shows within seconds.
pub const QUICK_CONFIG: &str = "\
controller:
  grow_stabilization: 3s
  release_deadline: 20s
services:
  - name: nginx
    namespace: web
    hpa: nginx
";

/// Flags to go with [`QUICK_CONFIG`]: a 1 s tick, status every 500 ms, 3 s leases.
pub const QUICK_FLAGS: &[&str] = &["--tick", "1s", "--status-interval", "500ms", "--lease-duration", "3s"];

/// The cluster most controller tests use: kwok nodes `node-a` and `node-b` (8 CPU, 64 GiB
/// each), NGINX at 2 replicas with its HPA status at 2/2, and namespace `ml` for the jobs.
pub async fn two_nodes_with_nginx(bed: &Testbed) -> Client {
    for n in ["node-a", "node-b"] {
        bed.kubectl_apply(&super::testbed::node_manifest(n, "8", "64Gi"));
    }
    let client = client(bed).await;
    nginx(bed, 2, None);
    set_hpa(&client, 2, 2).await;
    namespace(bed, "ml");
    client
}

/// [`two_nodes_with_nginx`], returning once both NGINX pods are bound.
pub async fn two_nodes_with_nginx_bound(bed: &Testbed) -> Client {
    let client = two_nodes_with_nginx(bed).await;
    eventually(Duration::from_secs(30), "NGINX bound", || {
        let client = client.clone();
        async move { (pod_counts(&client, "web", "app=nginx").await.0 == 2).then_some(()) }
    })
    .await;
    client
}

/// The online service: Deployment `web/nginx` (1 CPU per replica) and its HPA (2..10 on CPU).
pub fn nginx(bed: &Testbed, replicas: u32, priority_class: Option<&str>) {
    namespace(bed, "web");
    bed.kubectl_apply(&deployment("web", "nginx", json!({"app": "nginx"}), replicas, "1", priority_class));
    bed.kubectl_apply(&json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"namespace": "web", "name": "nginx"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"},
            "minReplicas": 2, "maxReplicas": 10,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 60}}}]
        }
    }));
}

/// Writes the HPA's status as its controller would: `desired` decided, `current` running, and
/// the CPU utilization (target 60%) that made it decide so.
pub async fn set_hpa(client: &Client, current: u32, desired: u32) {
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), "web");
    let utilization = 60 * desired / current.max(1);
    let status = json!({"status": {"currentReplicas": current, "desiredReplicas": desired,
        "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu",
            "current": {"averageUtilization": utilization}}}]}});
    api.patch_status("nginx", &PatchParams::default(), &Patch::Merge(&status)).await.expect("HPA status patch");
}

/// Scales the NGINX Deployment as the HPA controller does after deciding.
pub async fn scale_nginx(client: &Client, replicas: u32) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), "web");
    let patch = json!({"spec": {"replicas": replicas}});
    api.patch_scale("nginx", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("scale nginx");
}

/// One scale command as the master's backend saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub at: Instant,
    pub target: u32,
    pub reason: String,
    pub release_pods: Vec<String>,
}

/// How a test master behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Scales the worker Deployment (the reference master over `DeploymentBackend`).
    Honest,
    /// Accepts every command and never changes the workers (misses every deadline).
    Ignores,
    /// Fails every scale with a backend error (the master answers 503).
    Fails,
    /// Never finishes a scale (the request hangs).
    Hangs,
}

/// A `DeploymentBackend` that records commands and can misbehave.
pub struct TestBackend {
    inner: DeploymentBackend,
    behaviour: Behaviour,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    ignored_target: Mutex<Option<u32>>,
}

impl WorkerBackend for TestBackend {
    async fn observe(&self) -> Result<Observed, BackendError> {
        let mut o = self.inner.observe().await?;
        if let Some(t) = *self.ignored_target.lock().unwrap() {
            o.target = t;
        }
        Ok(o)
    }

    async fn scale(&self, command: &ScaleCommand) -> Result<(), BackendError> {
        self.seen.lock().unwrap().push(Seen {
            at: Instant::now(),
            target: command.target,
            reason: command.reason.clone(),
            release_pods: command.release_pods.clone(),
        });
        match self.behaviour {
            Behaviour::Honest => self.inner.scale(command).await,
            Behaviour::Ignores => {
                *self.ignored_target.lock().unwrap() = Some(command.target);
                Ok(())
            }
            Behaviour::Fails => Err(BackendError::new("injected failure")),
            Behaviour::Hangs => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(())
            }
        }
    }
}

/// What each worker pod of an [`ElasticJob`] is.
#[derive(Clone, Copy, Debug)]
pub struct WorkerPod<'a> {
    /// CPU request; the master announces the same.
    pub cpu: &'a str,
    pub priority_class: Option<&'a str>,
    /// `terminationGracePeriodSeconds`: how long a deleted worker may keep its node.
    pub termination_grace_s: u32,
    /// The master releases workers within this many seconds (deletes them again with it as
    /// their grace period) and announces it as `worker_release_s`.
    pub release_grace_s: Option<u32>,
    /// The master resizes released workers down in place before removing them
    /// ([`DeploymentBackend::with_release_in_place`]) and announces `worker_release_s: 3`.
    pub release_in_place: bool,
    /// The master reports the throughput and progress of this modelled job
    /// ([`ModelledTraining`]), as `example-master --model-samples` does.
    pub model: Option<TrainingModel>,
    /// `controller.capacity: usage`: the worker asks for `colocate.dev/batch-cpu` (as much as
    /// `cpu`) and `colocate.dev/batch-memory` as limits and no `cpu` or `memory` (BestEffort).
    pub best_effort: bool,
    /// Memory a BestEffort worker asks of `colocate.dev/batch-memory`, and the master announces.
    pub memory: &'a str,
}

/// An elastic job: worker Deployment `<ns>/<name>-workers` (1 CPU each unless
/// [`start_with`](ElasticJob::start_with) says otherwise), a reference master on loopback, and
/// the master Service or Pod that announces it.
pub struct ElasticJob {
    pub name: String,
    pub ns: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    stop: Option<oneshot::Sender<()>>,
}

/// How a job's master announces itself (master protocol v1, "Discovery").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Announce {
    /// A Service `<name>-master` labelled `colocate.dev/master: "true"`.
    Service,
    /// A Pod `<name>-master` so labelled, with a container port named `master` (run by kwok).
    Pod,
}

impl<'a> WorkerPod<'a> {
    /// 1 CPU, deleted at once: what most tests use.
    pub fn one_cpu(priority_class: Option<&'a str>) -> WorkerPod<'a> {
        WorkerPod {
            cpu: "1",
            priority_class,
            termination_grace_s: 0,
            release_grace_s: None,
            release_in_place: false,
            model: None,
            best_effort: false,
            memory: "256Mi",
        }
    }
}

impl ElasticJob {
    /// A job of [`WorkerPod::one_cpu`] workers whose master is announced by a Service.
    pub async fn start(
        bed: &Testbed,
        client: &Client,
        ns: &str,
        name: &str,
        sizes: (u32, u32, u32),
        behaviour: Behaviour,
        priority_class: Option<&str>,
    ) -> ElasticJob {
        let worker = WorkerPod::one_cpu(priority_class);
        ElasticJob::start_with(bed, client, ns, name, sizes, behaviour, worker, Announce::Service).await
    }

    /// `(min, max, replicas)` workers like `worker`; the master is served on loopback, and the
    /// object that announces it points there with the `colocate.dev/master-url` annotation.
    #[allow(clippy::too_many_arguments)]
    pub async fn start_with(
        bed: &Testbed,
        client: &Client,
        ns: &str,
        name: &str,
        sizes: (u32, u32, u32),
        behaviour: Behaviour,
        worker: WorkerPod<'_>,
        announce: Announce,
    ) -> ElasticJob {
        ElasticJob::start_serving(bed, client, ns, name, sizes, behaviour, worker, announce, None, &[]).await
    }

    /// As [`start_with`](ElasticJob::start_with); with `tls` the master serves https as
    /// `localhost` (the annotation says `https://localhost:PORT`). The object that announces the
    /// master carries `annotations` too (a job's `colocate.dev/priority`, `colocate.dev/weight`)
    /// from its creation, so the controller never sees the job without them.
    #[allow(clippy::too_many_arguments)]
    pub async fn start_serving(
        bed: &Testbed,
        client: &Client,
        ns: &str,
        name: &str,
        (min, max, replicas): (u32, u32, u32),
        behaviour: Behaviour,
        worker: WorkerPod<'_>,
        announce: Announce,
        tls: Option<Arc<rustls::ServerConfig>>,
        annotations: &[(&str, String)],
    ) -> ElasticJob {
        let labels = json!({"colocate.dev/job": name, "colocate.dev/role": "worker"});
        let workers = format!("{name}-workers");
        let mut manifest = deployment(ns, &workers, labels, replicas, worker.cpu, worker.priority_class);
        manifest["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(worker.termination_grace_s);
        if worker.best_effort {
            let milli = colocate::core::resources::parse_cpu(worker.cpu).expect("a CPU quantity");
            manifest["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({"limits": {
                "colocate.dev/batch-cpu": milli.to_string(), "colocate.dev/batch-memory": worker.memory}});
        }
        bed.kubectl_apply(&manifest);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut inner = DeploymentBackend::new(client.clone(), ns, &workers);
        if let Some(s) = worker.release_grace_s {
            inner = inner.with_release_grace(Duration::from_secs(u64::from(s)));
        }
        if worker.release_in_place {
            inner = inner.with_release_in_place();
        }
        let worker_release = inner.worker_release();
        let backend = TestBackend { inner, behaviour, seen: seen.clone(), ignored_target: Mutex::new(None) };
        let mut config = MasterConfig::new(
            name,
            min,
            max,
            WorkerResources::new(worker.cpu, if worker.best_effort { worker.memory } else { "256Mi" }),
        );
        config.rescale_cost_s = Some(1.0);
        config.worker_release_s = worker_release.map(|d| d.as_secs_f64());
        let (stop, stopped) = oneshot::channel::<()>();
        let url = match worker.model {
            Some(model) => spawn_master(config, ModelledTraining::new(backend, model), tls, stopped).await,
            None => spawn_master(config, backend, tls, stopped).await,
        };
        let mut metadata = json!({"namespace": ns, "name": format!("{name}-master"),
            "labels": {"colocate.dev/master": "true", "colocate.dev/job": name},
            "annotations": {"colocate.dev/master-url": url}});
        for (key, value) in annotations {
            metadata["annotations"][*key] = json!(value);
        }
        bed.kubectl_apply(&match announce {
            Announce::Service => json!({"apiVersion": "v1", "kind": "Service", "metadata": metadata,
                "spec": {"ports": [{"name": "master", "port": 8080}]}}),
            Announce::Pod => json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                "spec": {"tolerations": [{"operator": "Exists"}], "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "master", "image": "registry.invalid/fake",
                        "ports": [{"name": "master", "containerPort": 8080}],
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}),
        });
        ElasticJob { name: name.to_string(), ns: ns.to_string(), seen, stop: Some(stop) }
    }

    pub fn commands(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Serves a reference master over `backend` on loopback until `stop`; returns its URL.
async fn spawn_master<B: WorkerBackend>(
    config: MasterConfig,
    backend: B,
    tls: Option<Arc<rustls::ServerConfig>>,
    stop: oneshot::Receiver<()>,
) -> String {
    let state = MasterState::new(config, backend).expect("master config");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stopped = async {
        let _ = stop.await;
    };
    match tls {
        Some(tls) => {
            let listener = TlsListener::new(listener, tls).unwrap();
            tokio::spawn(serve_with_shutdown(listener, state, stopped));
            format!("https://localhost:{port}")
        }
        None => {
            tokio::spawn(serve_with_shutdown(listener, state, stopped));
            format!("http://127.0.0.1:{port}")
        }
    }
}

impl Drop for ElasticJob {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// The `colocate.dev/last-decision` annotation the controller keeps on a job's master Service:
/// its latest decision about the job, with the why.
pub fn last_decision(bed: &Testbed, ns: &str, master_service: &str) -> String {
    let jsonpath = "jsonpath={.metadata.annotations.colocate\\.dev/last-decision}";
    bed.kubectl_run(&["get", "service", "-n", ns, master_service, "-o", jsonpath])
}

/// Pods of `ns` matching `selector`: (bound and not terminating, pending for lack of room).
pub async fn pod_counts(client: &Client, ns: &str, selector: &str) -> (usize, usize) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pods = api.list(&ListParams::default().labels(selector)).await.expect("list pods");
    let mut bound = 0;
    let mut unschedulable = 0;
    for p in pods.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
            bound += 1;
        } else if p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
            cs.iter().any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable"))
        }) {
            unschedulable += 1;
        }
    }
    (bound, unschedulable)
}

pub async fn deployment_replicas(client: &Client, ns: &str, name: &str) -> u32 {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d = api.get(name).await.expect("get deployment");
    d.spec.and_then(|s| s.replicas).unwrap_or(0) as u32
}

/// Polls `check` every 100 ms until it returns `Some`, or panics after `timeout` with `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `colocate run` as a child process against the test bed; stopped with SIGTERM on drop.
pub struct Controller {
    child: Option<Child>,
    pub metrics_url: String,
    pub logs: Arc<Mutex<String>>,
    _config: tempfile::NamedTempFile,
}

impl Controller {
    /// Starts `colocate run` with `config` (the YAML of `--config`) and extra flags; waits until
    /// /readyz answers 200.
    pub async fn start(bed: &Testbed, config: &str, flags: &[&str]) -> Controller {
        let c = Controller::spawn(&bed.kubeconfig, config, flags);
        c.wait_ready(Duration::from_secs(30)).await;
        c
    }

    /// Starts `colocate run` against the cluster of `kubeconfig` (say, with another identity than
    /// the test bed's admin) and returns at once, without waiting for it to be ready.
    pub fn spawn(kubeconfig: &Path, config: &str, flags: &[&str]) -> Controller {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), config).unwrap();
        let port = StdListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_colocate"))
            .arg("run")
            .arg("--config")
            .arg(file.path())
            .args(["--metrics-addr", &format!("127.0.0.1:{port}"), "--lease-namespace", "default"])
            .args(flags)
            .env("KUBECONFIG", kubeconfig)
            // COLOCATE_TEST_RUST_LOG: a finer filter for a run under study (say
            // `info,kube=warn,colocate::live::controller::decider=debug`).
            .env("RUST_LOG", std::env::var("COLOCATE_TEST_RUST_LOG").unwrap_or_else(|_| "info,kube=warn".into()))
            .env_remove("COLOCATE_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn colocate run");
        let logs = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        Controller { child: Some(child), metrics_url: format!("http://127.0.0.1:{port}"), logs, _config: file }
    }

    /// Polls /readyz every 100 ms until it answers 200; panics after `timeout`.
    pub async fn wait_ready(&self, timeout: Duration) {
        let url = format!("{}/readyz", self.metrics_url);
        colocate::live::tls::install_crypto_provider();
        eventually(timeout, "colocate run to be ready", || {
            let url = url.clone();
            async move { reqwest::get(&url).await.ok().filter(|r| r.status().is_success()).map(|_| ()) }
        })
        .await;
    }

    /// The process id of `colocate run` while it runs (for /proc/<pid>/status).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub async fn metrics(&self) -> String {
        colocate::live::tls::install_crypto_provider();
        reqwest::get(format!("{}/metrics", self.metrics_url)).await.expect("GET /metrics").text().await.unwrap()
    }

    /// The value of the sample `series` (`name{labels}` exactly as exported), 0 when absent.
    pub async fn metric(&self, series: &str) -> f64 {
        metric_value(&self.metrics().await, series)
    }

    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }

    /// The exit code if the process has exited on its own (`Some(None)`: killed by a signal).
    pub fn exited(&mut self) -> Option<Option<i32>> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(status.code())
    }

    /// SIGTERM, then waits for the exit; returns the exit code.
    pub fn stop(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            if start.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL: no cleanup, as when a node dies.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            let logs = self.logs();
            let file = report_dir().join(format!("colocate-run-{}.log", std::process::id()));
            if std::fs::write(&file, &logs).is_ok() {
                eprintln!("--- colocate run: whole log in {}", file.display());
            }
            let tail: Vec<&str> = logs.lines().rev().take(60).collect();
            eprintln!("--- colocate run, last log lines ---");
            for l in tail.iter().rev() {
                eprintln!("{l}");
            }
        }
    }
}

pub fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Where test reports go: `target/test-reports/` (kept for the closing note and CI logs).
pub fn report_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target").join("test-reports");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
