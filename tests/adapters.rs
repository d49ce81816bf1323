//! The adapters for jobs without a master, against a real kube-apiserver (the test bed, or the
//! cluster in COLOCATE_TEST_KUBECONFIG): Deployments, StatefulSets and a PyTorchJob through
//! `/scale`, a Volcano Job through a guarded replicas patch, and the discovery of opted-in
//! objects.
//!
//! The test bed runs no kube-controller-manager, training operator or Volcano: nothing creates
//! pods for these objects. The "workers" are pods made by hand with the job's worker labels and a
//! kwok node, which kwok marks Ready; what is checked is what the adapters read (replicas, pods,
//! status) and write (replicas, minAvailable, pod-deletion-cost). The adapters run as a
//! ServiceAccount bound to exactly the ClusterRole their module documents
//! (`tests/fixtures/adapters/rbac.yaml`), so a missing rule fails these tests.

mod support;

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use colocate::live::adapters::{AdapterJobs, VolcanoBackend};
use colocate::live::batch::BatchNames;
use colocate::live::endpoint::{DiscoveredJob, JobEndpoint};
use colocate::live::master_client::MasterError;
use colocate::master_protocol::{BackendErrorKind, Phase, ScaleCommand, Status};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{discovery, Api, Client};
use serde_json::{json, Value};
use support::testbed::{node_manifest, Testbed};
use tokio::sync::Notify;

const NS: &str = "ml";
const COST: &str = "controller.kubernetes.io/pod-deletion-cost";

async fn admin(bed: &Testbed) -> Client {
    support::cluster::client(bed).await
}

/// A client authenticating as a ServiceAccount bound to the adapters' documented ClusterRole.
async fn adapters_client(bed: &Testbed) -> Client {
    bed.kubectl_run(&["apply", "-f", &fixture("rbac.yaml")]);
    bed.kubectl_run(&["create", "serviceaccount", "colocate", "-n", NS]);
    bed.kubectl_run(&[
        "create",
        "clusterrolebinding",
        "colocate-adapters",
        "--clusterrole=colocate-adapters",
        &format!("--serviceaccount={NS}:colocate"),
    ]);
    let text = bed.kubeconfig_as(NS, "colocate", "1h");
    support::cluster::client_from_yaml(&text).await
}

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/adapters").join(name);
    path.to_string_lossy().into_owned()
}

fn install_crd(bed: &Testbed, file: &str, name: &str) {
    bed.kubectl_run(&["apply", "-f", &fixture(file)]);
    bed.kubectl_run(&["wait", "--for=condition=Established", "--timeout=30s", &format!("crd/{name}")]);
}

/// The namespace and a kwok node for the workers.
fn prepare(bed: &Testbed) {
    bed.kubectl_apply(&node_manifest("n1", "64", "256Gi"));
    bed.kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}));
}

fn worker_labels(job: &str) -> Value {
    json!({"colocate.dev/job": job, "colocate.dev/role": "worker"})
}

fn template(job: &str) -> Value {
    json!({
        "metadata": {"labels": worker_labels(job)},
        "spec": {"containers": [{"name": "worker", "image": "registry.invalid/fake",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}
    })
}

fn elastic(name: &str, scale_via: &str, extra: Value) -> Value {
    let mut annotations = json!({
        "colocate.dev/scale-via": scale_via,
        "colocate.dev/min-workers": "1",
        "colocate.dev/max-workers": "6",
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        annotations[k] = v.clone();
    }
    json!({"name": name, "namespace": NS, "labels": {"colocate.dev/elastic": "true"}, "annotations": annotations})
}

/// A worker pod of `job` bound to the kwok node (kwok makes it Running and Ready).
fn worker_pod(bed: &Testbed, job: &str, name: &str) {
    bed.kubectl_apply(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": NS, "name": name, "labels": worker_labels(job)},
        "spec": {"nodeName": "n1", "containers": [{"name": "worker", "image": "registry.invalid/fake"}]}
    }));
}

/// Polls `probe` until it returns `Some`, failing after `timeout` with `what`.
async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn status_where(e: &dyn JobEndpoint, what: &str, ok: impl Fn(&Status) -> bool) -> Status {
    eventually(what, Duration::from_secs(30), || async {
        let s = e.status().await.unwrap_or_else(|err| panic!("{}: status: {err}", e.describe()));
        ok(&s).then_some(s)
    })
    .await
}

async fn resource(client: &Client, group: &str, version: &str, kind: &str) -> ApiResource {
    discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, kind)).await.expect("served kind").0
}

async fn scale_replicas(api: &Api<DynamicObject>, name: &str) -> i32 {
    api.get_scale(name).await.unwrap().spec.unwrap().replicas.unwrap()
}

async fn started(client: Client) -> (AdapterJobs, Arc<Notify>, Arc<AtomicU64>) {
    let changed = Arc::new(Notify::new());
    let (jobs, drivers) =
        AdapterJobs::start(client, Arc::clone(&changed), BatchNames::Colocate).await.expect("adapters start");
    for d in drivers {
        tokio::spawn(d);
    }
    // Counts wake-ups, to show that watch events reach the decision loop.
    let events = Arc::new(AtomicU64::new(0));
    let (n, c) = (Arc::clone(&events), Arc::clone(&changed));
    tokio::spawn(async move {
        loop {
            c.notified().await;
            n.fetch_add(1, Ordering::Relaxed);
        }
    });
    tokio::time::timeout(Duration::from_secs(30), jobs.wait_until_ready()).await.expect("reflectors ready");
    (jobs, changed, events)
}

/// The jobs once `ok` holds for them (the reflectors have caught up with the test's changes).
async fn jobs_where(
    jobs: &AdapterJobs,
    what: &str,
    ok: impl Fn(&[DiscoveredJob], &[String]) -> bool,
) -> (Vec<DiscoveredJob>, Vec<String>) {
    eventually(what, Duration::from_secs(30), || async {
        let (found, problems) = jobs.jobs();
        ok(&found, &problems).then_some((found, problems))
    })
    .await
}

/// One `/scale`-driven job: `kubectl_ref` (`deployment/wd`) for changes made behind the
/// adapter's back, `api` to read what it wrote.
struct Subject<'a> {
    bed: &'a Testbed,
    job: &'a DiscoveredJob,
    api: Api<DynamicObject>,
    kubectl_ref: &'a str,
    honours_release_pods: bool,
}

/// Protocol v1 over a `/scale` adapter: the object starts at 3 replicas with three Ready
/// worker pods (`<job>-0..2`); bounds [1, 6].
async fn check_scale_protocol(s: Subject<'_>, pods: &Api<Pod>) {
    let e = s.job.endpoint.as_ref();
    let name = s.job.object.name.as_str();
    let job = s.job.name.as_str();
    let ready = status_where(e, &format!("{job}: 3 ready workers"), |st| st.workers.current == 3).await;
    assert_eq!(ready.job, job);
    assert_eq!((ready.workers.target, ready.workers.min, ready.workers.max, ready.workers.pending), (3, 1, 6, 0));
    assert_eq!(ready.phase, Phase::Running);
    assert_eq!((ready.worker_resources.cpu.as_str(), ready.worker_resources.memory.as_str()), ("1", "1Gi"));
    let g0 = ready.generation;
    let object_generation = s.api.get(name).await.unwrap().metadata.generation.unwrap() as u64;
    assert_eq!(g0, object_generation, "{job}: the generation starts from the object's");

    // Shrink, preferring to lose worker 1.
    let shrink = ScaleCommand::new(2, "test-shrink", 30).with_release_pods([format!("{job}-1")]);
    let accepted = e.scale(&shrink).await.unwrap();
    assert_eq!((accepted.accepted_target, accepted.generation), (2, g0 + 1));
    assert_eq!(scale_replicas(&s.api, name).await, 2);
    let marked = pods.get(&format!("{job}-1")).await.unwrap().metadata.annotations.unwrap_or_default();
    if s.honours_release_pods {
        assert_eq!(marked.get(COST).map(String::as_str), Some("-1000"), "{job}: released pod marked");
    } else {
        assert!(!marked.contains_key(COST), "{job}: this kind picks its own pods; nothing to mark");
    }
    let shrinking = e.status().await.unwrap();
    assert_eq!((shrinking.workers.target, shrinking.workers.current, shrinking.phase), (2, 3, Phase::Rescaling));
    assert_eq!(shrinking.generation, g0 + 1);

    // Someone else scales it; the same command again is answered as before and changes nothing.
    s.bed.kubectl_run(&["scale", s.kubectl_ref, "-n", NS, "--replicas=4"]);
    assert_eq!(e.scale(&shrink).await.unwrap(), accepted, "{job}: a repeated command id is accepted once");
    assert_eq!(scale_replicas(&s.api, name).await, 4);
    let followed = e.status().await.unwrap();
    assert_eq!((followed.workers.target, followed.generation), (4, g0 + 2), "{job}: outside change followed");

    for target in [7, 0] {
        match e.scale(&ScaleCommand::new(target, "test-bounds", 30)).await {
            Err(MasterError::OutOfBounds { min: 1, max: 6, .. }) => {}
            other => panic!("{job}: target {target}: expected OutOfBounds, got {other:?}"),
        }
    }
    assert_eq!(scale_replicas(&s.api, name).await, 4, "{job}: a refused command changes nothing");

    // A fourth worker joins: the job runs at its target again.
    worker_pod(s.bed, job, &format!("{job}-3"));
    let caught_up = status_where(e, &format!("{job}: 4 ready workers"), |st| st.workers.current == 4).await;
    assert_eq!((caught_up.phase, caught_up.generation), (Phase::Running, g0 + 2));

    // The same target is accepted without a new generation; a new one grows it.
    let same = e.scale(&ScaleCommand::new(4, "test-same", 30)).await.unwrap();
    assert_eq!(same.generation, g0 + 2);
    let grow = e.scale(&ScaleCommand::new(5, "test-grow", 30)).await.unwrap();
    assert_eq!((grow.accepted_target, grow.generation), (5, g0 + 3));
    assert_eq!(scale_replicas(&s.api, name).await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_statefulsets_and_pytorchjobs_through_scale() {
    let bed = tokio::task::spawn_blocking(Testbed::start).await.unwrap();
    prepare(&bed);
    install_crd(&bed, "pytorchjob-crd.yaml", "pytorchjobs.kubeflow.org");
    let admin = admin(&bed).await;
    let client = adapters_client(&bed).await;

    let selector = json!({"matchLabels": worker_labels("wd")});
    bed.kubectl_apply(&json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": elastic("wd", "scale-subresource", json!({})),
        "spec": {"replicas": 3, "selector": selector, "template": template("wd")}
    }));
    bed.kubectl_apply(&json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": elastic("ss", "scale-subresource", json!({"colocate.dev/job": "sst"})),
        "spec": {"replicas": 3, "serviceName": "sst", "selector": {"matchLabels": worker_labels("sst")},
            "template": template("sst")}
    }));
    bed.kubectl_apply(&json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": elastic("pt", "scale-subresource", json!({})),
        "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "m", "image": "registry.invalid/fake"}]}}},
            "Worker": {"replicas": 3, "template": template("pt")}}}
    }));
    for job in ["wd", "sst", "pt"] {
        for i in 0..3 {
            worker_pod(&bed, job, &format!("{job}-{i}"));
        }
    }

    let (adapters, _changed, events) = started(client).await;
    assert_eq!(adapters.watched_kinds(), ["Deployment", "StatefulSet", "PyTorchJob.kubeflow.org"]);
    assert_eq!(adapters.absent_kinds(), ["Job.batch.volcano.sh"]);
    let (found, problems) = jobs_where(&adapters, "three jobs", |j, _| j.len() == 3).await;
    assert!(problems.is_empty(), "{problems:?}");
    let keys: Vec<String> = found.iter().map(DiscoveredJob::key).collect();
    assert_eq!(keys, ["ml/pt", "ml/sst", "ml/wd"]);
    assert!(events.load(Ordering::Relaxed) > 0, "watch events notify the decision loop");

    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let deployments = resource(&admin, "apps", "v1", "Deployment").await;
    let statefulsets = resource(&admin, "apps", "v1", "StatefulSet").await;
    let pytorchjobs = resource(&admin, "kubeflow.org", "v1", "PyTorchJob").await;
    let api = |r: &ApiResource| Api::<DynamicObject>::namespaced_with(admin.clone(), NS, r);
    let subjects = [
        (&found[2], api(&deployments), "deployment/wd", true),
        (&found[1], api(&statefulsets), "statefulset/ss", false),
        (&found[0], api(&pytorchjobs), "pytorchjob/pt", false),
    ];
    for (job, api, kubectl_ref, honours_release_pods) in subjects {
        assert_eq!(job.endpoint.describe(), format!("{} via /scale", describe_object(job)));
        check_scale_protocol(Subject { bed: &bed, job, api, kubectl_ref, honours_release_pods }, &pods).await;
    }

    // The PyTorchJob's status says it is done: the adapter reports Completed.
    bed.kubectl_run(&[
        "patch",
        "pytorchjob/pt",
        "-n",
        NS,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}"#,
    ]);
    status_where(found[0].endpoint.as_ref(), "pt: Completed", |s| s.phase == Phase::Completed).await;
}

fn describe_object(job: &DiscoveredJob) -> String {
    let kind = match job.object.kind.as_str() {
        "PyTorchJob" => "PyTorchJob.kubeflow.org",
        other => other,
    };
    format!("{kind} {}/{}", job.object.namespace, job.object.name)
}

fn volcano_job(bed: &Testbed) {
    bed.kubectl_apply(&json!({
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": elastic("vj", "volcano-replicas", json!({"colocate.dev/worker-task": "trainer"})),
        "spec": {"minAvailable": 5, "schedulerName": "volcano", "tasks": [
            {"name": "ps", "replicas": 1, "template": {"spec": {"containers": [{"name": "ps", "image": "registry.invalid/fake"}]}}},
            {"name": "trainer", "replicas": 4, "minAvailable": 3, "template": template("vj")}
        ]}
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volcano_jobs_through_a_guarded_replicas_patch() {
    let bed = tokio::task::spawn_blocking(Testbed::start).await.unwrap();
    prepare(&bed);
    install_crd(&bed, "volcano-job-crd.yaml", "jobs.batch.volcano.sh");
    let admin = admin(&bed).await;
    let client = adapters_client(&bed).await;
    volcano_job(&bed);
    for i in 0..4 {
        worker_pod(&bed, "vj", &format!("vj-{i}"));
    }
    let vcjobs = resource(&admin, "batch.volcano.sh", "v1alpha1", "Job").await;
    let api = Api::<DynamicObject>::namespaced_with(admin.clone(), NS, &vcjobs);
    let spec = |o: &DynamicObject| o.data["spec"].clone();

    let (adapters, _changed, _events) = started(client.clone()).await;
    assert_eq!(adapters.absent_kinds(), ["PyTorchJob.kubeflow.org"]);
    let (found, problems) = jobs_where(&adapters, "the Volcano job", |j, _| j.len() == 1).await;
    assert!(problems.is_empty(), "{problems:?}");
    let job = &found[0];
    assert_eq!(
        (job.key(), job.object.api_version.as_str(), job.object.kind.as_str()),
        ("ml/vj".into(), "batch.volcano.sh/v1alpha1", "Job")
    );
    let e = job.endpoint.as_ref();
    assert_eq!(e.describe(), "Job.batch.volcano.sh ml/vj via task trainer replicas");

    let ready = status_where(e, "4 ready workers", |s| s.workers.current == 4).await;
    assert_eq!((ready.workers.target, ready.phase), (4, Phase::Running));
    let g0 = ready.generation;

    // Shrink to 2: the job's total (1 + 2) is below spec.minAvailable (5), the task's 3 above 2.
    let shrink = ScaleCommand::new(2, "test-shrink", 30);
    let accepted = e.scale(&shrink).await.unwrap();
    assert_eq!((accepted.accepted_target, accepted.generation), (2, g0 + 1));
    let after = spec(&api.get("vj").await.unwrap());
    assert_eq!(after["tasks"][1]["replicas"], 2);
    assert_eq!(after["tasks"][1]["minAvailable"], 2);
    assert_eq!(after["minAvailable"], 3);
    assert_eq!(after["tasks"][0]["replicas"], 1, "the other task is left alone");
    assert_eq!(e.scale(&shrink).await.unwrap(), accepted);
    assert!(matches!(
        e.scale(&ScaleCommand::new(7, "test-bounds", 30)).await,
        Err(MasterError::OutOfBounds { min: 1, max: 6, .. })
    ));
    let shrinking = e.status().await.unwrap();
    assert_eq!((shrinking.workers.target, shrinking.phase, shrinking.generation), (2, Phase::Rescaling, g0 + 1));

    // The `test` op: a patch computed from a read taken before the tasks were reordered fails
    // and changes nothing.
    let backend = VolcanoBackend::new(client.clone(), &vcjobs, NS, "vj", "vj", "trainer");
    let stale = api.get("vj").await.unwrap();
    let mut reordered = spec(&stale)["tasks"].clone();
    reordered.as_array_mut().unwrap().reverse();
    bed.kubectl_run(&[
        "patch",
        "jobs.batch.volcano.sh/vj",
        "-n",
        NS,
        "--type=merge",
        "-p",
        &json!({"spec": {"tasks": reordered}}).to_string(),
    ]);
    let refused = backend.scale_from(&stale, 3).await.unwrap_err();
    assert_eq!(refused.kind, BackendErrorKind::Rejected, "{refused}");
    assert_eq!(refused.status, Some(422), "{refused}");
    assert!(
        refused.message.contains("spec.tasks[1] (trainer)") && refused.message.contains("task moved?"),
        "{refused}"
    );
    eprintln!("refused as expected: {refused}");
    let untouched = spec(&api.get("vj").await.unwrap());
    assert_eq!(
        (untouched["tasks"][0]["name"].as_str(), untouched["tasks"][0]["replicas"].as_i64()),
        (Some("trainer"), Some(2))
    );
    assert_eq!(
        (untouched["tasks"][1]["name"].as_str(), untouched["tasks"][1]["replicas"].as_i64()),
        (Some("ps"), Some(1))
    );

    // The endpoint reads the job afresh and finds the task at its new index.
    let grow = e.scale(&ScaleCommand::new(3, "test-grow", 30)).await.unwrap();
    assert_eq!((grow.accepted_target, grow.generation), (3, g0 + 2));
    let grown = spec(&api.get("vj").await.unwrap());
    assert_eq!((grown["tasks"][0]["replicas"].as_i64(), grown["tasks"][1]["replicas"].as_i64()), (Some(3), Some(1)));
    assert_eq!(grown["minAvailable"], 3, "a grow does not raise minAvailable");

    // A Volcano job that completed is reported so.
    bed.kubectl_run(&[
        "patch",
        "jobs.batch.volcano.sh/vj",
        "-n",
        NS,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status": {"state": {"phase": "Completed"}}}"#,
    ]);
    assert_eq!(e.status().await.unwrap().phase, Phase::Completed);

    // The worker task gone: a clear, permanent refusal naming the tasks.
    bed.kubectl_run(&[
        "patch",
        "jobs.batch.volcano.sh/vj",
        "-n",
        NS,
        "--type=json",
        "-p",
        r#"[{"op": "remove", "path": "/spec/tasks/0"}]"#,
    ]);
    match e.status().await {
        Err(MasterError::Rejected { message, .. }) => {
            assert!(message.contains("no task named `trainer` in spec.tasks (tasks: ps)"), "{message}")
        }
        other => panic!("expected Rejected, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_finds_opted_in_objects_and_reports_problems() {
    let bed = tokio::task::spawn_blocking(Testbed::start).await.unwrap();
    prepare(&bed);
    let client = adapters_client(&bed).await;
    let deployment = |metadata: Value, job: &str, labels: Value| {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": job}},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "w",
                    "image": "registry.invalid/fake", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}}}
        })
    };
    let labels = |job: &str| {
        let mut l = worker_labels(job);
        l["app"] = json!(job);
        l
    };
    let overrides = json!({"colocate.dev/job": "wide-deep", "colocate.dev/priority": "5", "colocate.dev/weight": "2",
        "colocate.dev/min-workers": "2", "colocate.dev/max-workers": "10", "colocate.dev/rescale-cost": "30s"});
    bed.kubectl_apply(&deployment(elastic("wd", "scale-subresource", overrides), "wide-deep", labels("wide-deep")));
    bed.kubectl_apply(&deployment(
        elastic("bad", "scale-subresource", json!({"colocate.dev/max-workers": "many"})),
        "bad",
        labels("bad"),
    ));
    bed.kubectl_apply(&deployment(
        elastic("unlabelled", "scale-subresource", json!({})),
        "unlabelled",
        json!({"app": "unlabelled"}),
    ));
    let mut not_opted_in = elastic("plain", "scale-subresource", json!({}));
    not_opted_in["labels"] = json!({});
    bed.kubectl_apply(&deployment(not_opted_in, "plain", labels("plain")));

    // No PyTorchJob or Volcano CRD: not an error, just not watched.
    let (adapters, _changed, _events) = started(client).await;
    assert_eq!(adapters.watched_kinds(), ["Deployment", "StatefulSet"]);
    assert_eq!(adapters.absent_kinds(), ["PyTorchJob.kubeflow.org", "Job.batch.volcano.sh"]);

    let (found, problems) = jobs_where(&adapters, "one job, two problems", |j, p| j.len() == 1 && p.len() == 2).await;
    let job = &found[0];
    assert_eq!(job.key(), "ml/wide-deep");
    assert_eq!(job.object.to_string(), "Deployment ml/wd");
    assert!(job.object.uid.is_some());
    assert_eq!(
        (job.overrides.priority, job.overrides.weight, job.overrides.min_workers, job.overrides.max_workers),
        (Some(5), Some(2.0), Some(2), Some(10))
    );
    assert_eq!(
        problems,
        [
            "Deployment ml/bad: annotation colocate.dev/max-workers=`many`: expected a whole number 0 or more",
            "Deployment ml/unlabelled: the worker pod template lacks label(s) colocate.dev/job=unlabelled, \
             colocate.dev/role=worker; the controller finds a job's workers by colocate.dev/job=<job> and \
             colocate.dev/role=worker",
        ]
    );
    let status = job.endpoint.status().await.unwrap();
    assert_eq!((status.workers.min, status.workers.max, status.rescale_cost_s), (2, 10, Some(30.0)));
    assert_eq!((status.worker_resources.cpu.as_str(), status.worker_resources.memory.as_str()), ("500m", "1Gi"));

    // The endpoint is the same object from call to call, so its idempotency memory holds.
    let command = ScaleCommand::new(3, "test", 30);
    let first = job.endpoint.scale(&command).await.unwrap();
    bed.kubectl_run(&["scale", "deployment/wd", "-n", NS, "--replicas=2"]);
    let (again, _) = adapters.jobs();
    assert!(Arc::ptr_eq(&again[0].endpoint, &job.endpoint), "endpoints are cached by uid");
    assert_eq!(again[0].endpoint.scale(&command).await.unwrap(), first);
    let replicas = bed.kubectl_run(&["get", "deployment/wd", "-n", NS, "-o", "jsonpath={.spec.replicas}"]);
    assert_eq!(replicas.trim(), "2", "the repeated command was not applied again");

    // New bounds are taken in place; fixing an annotation brings the object in.
    bed.kubectl_run(&["annotate", "deployment/wd", "-n", NS, "--overwrite", "colocate.dev/max-workers=12"]);
    bed.kubectl_run(&["annotate", "deployment/bad", "-n", NS, "--overwrite", "colocate.dev/max-workers=4"]);
    let (found, problems) = jobs_where(&adapters, "new bounds and the fixed object", |j, _| {
        j.len() == 2 && j.iter().any(|j| j.overrides.max_workers == Some(12))
    })
    .await;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(found.iter().map(DiscoveredJob::key).collect::<Vec<_>>(), ["ml/bad", "ml/wide-deep"]);
    assert!(Arc::ptr_eq(&found[1].endpoint, &job.endpoint), "reconfigured, not rebuilt");
    let status = found[1].endpoint.status().await.unwrap();
    assert_eq!((status.workers.max, status.generation), (12, first.generation + 1), "the kubectl scale was followed");
    assert!(found[1].endpoint.scale(&ScaleCommand::new(12, "test", 30)).await.is_ok());

    // Two objects claiming one job: neither is driven, and the first keeps its endpoint.
    let twin = elastic("twin", "scale-subresource", json!({"colocate.dev/job": "wide-deep"}));
    bed.kubectl_apply(&deployment(twin, "wide-deep", labels("wide-deep")));
    let (_, problems) = jobs_where(&adapters, "a job claimed twice", |j, _| j.len() == 1).await;
    assert!(
        problems.iter().any(|p| p
            == "job ml/wide-deep is claimed by Deployment ml/twin and Deployment ml/wd \
             (annotation colocate.dev/job, or their names): none of them is driven until only one claims it"),
        "{problems:?}"
    );

    // Deleted objects leave.
    bed.kubectl_run(&[
        "delete",
        "deployment/bad",
        "deployment/unlabelled",
        "deployment/twin",
        "-n",
        NS,
        "--wait=false",
    ]);
    let (found, _) = jobs_where(&adapters, "only wd left", |j, p| j.len() == 1 && p.is_empty()).await;
    assert_eq!(found[0].key(), "ml/wide-deep");
    assert!(Arc::ptr_eq(&found[0].endpoint, &job.endpoint), "kept while its object exists");
}
