//! What the scale test puts on the test bed, created through the API with bounded concurrency:
//! kwok nodes, two system pods per node, the bulk of online pods (already bound, so the scheduler
//! is not the bottleneck) belonging to NGINX-like Deployments with HPAs, and the identity
//! `colocate run` uses (its own ServiceAccount, so the audit log can tell its requests apart).

use std::fmt::Debug;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::{stream, StreamExt};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use crate::support::cluster::{self, eventually};
use crate::support::testbed::{node_manifest, Testbed};

/// Creates in flight at once: enough to keep the apiserver busy, few enough not to queue in APF.
const IN_FLIGHT: usize = 32;
/// Allocatable CPU of every node.
const NODE_CPU_MILLI: u32 = 16_000;
/// Per node: a kube-proxy-like and a node-exporter-like pod (DaemonSets in a real cluster).
const SYSTEM_PODS_PER_NODE: usize = 2;
const SYSTEM_POD_CPU_MILLI: u32 = 100;
/// CPU left per node once system and online pods are bound: one 1-CPU worker fits and a second
/// does not, so the jobs (which could take two workers per node together) compete for the room.
const ROOM_MILLI: u32 = 1_300;
/// NGINX-like services, each a Deployment with an HPA in its own namespace `web-<i>`.
pub const SERVICES: usize = 10;
/// Services whose HPA the test scales up (the biggest ones, by 10%).
pub const SPIKED_SERVICES: usize = 3;
/// Namespace of the elastic jobs.
pub const JOBS_NAMESPACE: &str = "ml";
/// Where `colocate run`'s ServiceAccount lives.
const CONTROLLER_NAMESPACE: &str = "colocate-system";
/// The user name the apiserver sees for `colocate run` (the audit policy logs only this one).
pub const CONTROLLER_USER: &str = "system:serviceaccount:colocate-system:colocate";

/// How many objects of each kind a run creates, derived from the node and pod counts.
#[derive(Clone, Debug)]
pub struct Layout {
    pub nodes: usize,
    /// Pods asked for: system + online pods created directly, plus about one worker per node.
    pub pods: usize,
    pub online_per_node: usize,
    pub online_cpu_milli: u32,
    pub jobs: usize,
    pub job_max_workers: u32,
}

impl Layout {
    pub fn new(nodes: usize, pods: usize) -> Layout {
        assert!(nodes >= 10, "the scale test needs at least 10 nodes, got {nodes}");
        let slots = pods / nodes;
        assert!(
            slots > SYSTEM_PODS_PER_NODE + 1,
            "{pods} pods on {nodes} nodes leave no room for online pods: ask for at least {} pods",
            nodes * (SYSTEM_PODS_PER_NODE + 2)
        );
        // One slot per node is left for a worker; the rest are online pods sized to leave ROOM.
        let online_per_node = slots - SYSTEM_PODS_PER_NODE - 1;
        let online_cpu_milli =
            (NODE_CPU_MILLI - SYSTEM_PODS_PER_NODE as u32 * SYSTEM_POD_CPU_MILLI - ROOM_MILLI) / online_per_node as u32;
        let jobs = (nodes / 64).clamp(3, 16);
        Layout {
            nodes,
            pods,
            online_per_node,
            online_cpu_milli,
            jobs,
            job_max_workers: (2 * nodes).div_ceil(jobs) as u32,
        }
    }

    pub fn system_pods(&self) -> usize {
        self.nodes * SYSTEM_PODS_PER_NODE
    }

    pub fn online_pods(&self) -> usize {
        self.nodes * self.online_per_node
    }

    /// Online pods of service `s`: slot `k` of every node belongs to service `k % SERVICES`.
    pub fn service_pods(&self, s: usize) -> usize {
        self.nodes * (0..self.online_per_node).filter(|k| k % SERVICES == s).count()
    }

    pub fn system_cpu_cores(&self) -> f64 {
        (self.system_pods() as u32 * SYSTEM_POD_CPU_MILLI) as f64 / 1000.0
    }

    pub fn online_cpu_cores(&self) -> f64 {
        self.online_pods() as f64 * self.online_cpu_milli as f64 / 1000.0
    }

    pub fn online_cpu(&self) -> String {
        format!("{}m", self.online_cpu_milli)
    }
}

pub fn node_name(i: usize) -> String {
    format!("node-{i:05}")
}

pub fn service_namespace(s: usize) -> String {
    format!("web-{s}")
}

pub fn job_name(j: usize) -> String {
    format!("job-{j:02}")
}

/// Nodes, namespaces, the services' Deployments (no replicas of their own yet) and HPAs, then
/// the system and online pods, bound to their nodes. Returns how long the pods took to create.
pub async fn populate(bed: &Testbed, client: &Client, layout: &Layout) -> Duration {
    let nodes: Vec<Node> = (0..layout.nodes).map(|i| from_json(node_manifest(&node_name(i), "16", "64Gi"))).collect();
    create_all(nodes, |_| Api::all(client.clone()), "nodes").await;

    let mut namespaces: Vec<String> = (0..SERVICES).map(service_namespace).collect();
    namespaces.extend([JOBS_NAMESPACE.to_string(), CONTROLLER_NAMESPACE.to_string()]);
    for ns in &namespaces {
        cluster::namespace(bed, ns);
    }
    // The ServiceAccount admission plugin rejects pods until the namespace's `default` exists.
    namespaces.push("kube-system".into());
    for ns in &namespaces {
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        eventually(Duration::from_secs(60), &format!("ServiceAccount {ns}/default"), || {
            let api = api.clone();
            async move { api.get_opt("default").await.ok().flatten().map(|_| ()) }
        })
        .await;
    }

    for s in 0..SERVICES {
        let ns = service_namespace(s);
        bed.kubectl_apply(&cluster::deployment(&ns, "nginx", json!({"app": "nginx"}), 0, &layout.online_cpu(), None));
        let replicas = layout.service_pods(s) as u32;
        bed.kubectl_apply(&json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"namespace": ns, "name": "nginx"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"},
                "minReplicas": replicas.max(1), "maxReplicas": 2 * replicas.max(1),
                "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 60}}}]
            }
        }));
        set_hpa(client, &ns, replicas, replicas).await;
    }

    let mut pods = Vec::with_capacity(layout.system_pods() + layout.online_pods());
    for n in 0..layout.nodes {
        let node = node_name(n);
        for app in ["kube-proxy", "node-exporter"] {
            let name = format!("{app}-{node}");
            pods.push(pod("kube-system", &name, &node, json!({"app": app}), &format!("{SYSTEM_POD_CPU_MILLI}m")));
        }
    }
    // Slot by slot, so that every node gets pods of every service and creation fills nodes evenly.
    for k in 0..layout.online_per_node {
        for n in 0..layout.nodes {
            let ns = service_namespace(k % SERVICES);
            let name = format!("nginx-{}-{k:02}", node_name(n));
            pods.push(pod(&ns, &name, &node_name(n), json!({"app": "nginx"}), &layout.online_cpu()));
        }
    }
    let t0 = Instant::now();
    create_all(pods, |p: &Pod| Api::namespaced(client.clone(), &p.namespace().unwrap_or_default()), "pods").await;
    t0.elapsed()
}

/// A pod bound to `node` (as if scheduled) with one container requesting `cpu` and 256Mi.
/// No ServiceAccount token is mounted: it would only make every object bigger.
fn pod(ns: &str, name: &str, node: &str, labels: Value, cpu: &str) -> Pod {
    from_json(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": ns, "name": name, "labels": labels},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "registry.invalid/fake",
                "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}],
            "tolerations": [{"operator": "Exists"}],
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": false
        }
    }))
}

fn from_json<K: DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).expect("a valid object")
}

/// Creates `objects`, `IN_FLIGHT` at a time, each retried on transient errors; panics naming
/// the first object that could not be created.
async fn create_all<K>(objects: Vec<K>, api: impl Fn(&K) -> Api<K>, what: &str)
where
    K: Clone + Debug + Serialize + DeserializeOwned + kube::Resource,
{
    let total = objects.len();
    let t0 = Instant::now();
    let failures: Vec<String> = stream::iter(objects)
        .map(|o| {
            let api = api(&o);
            async move { create_one(&api, &o).await.err() }
        })
        .buffer_unordered(IN_FLIGHT)
        .filter_map(|e| async move { e })
        .collect()
        .await;
    assert!(
        failures.is_empty(),
        "{} of {total} {what} could not be created; the first: {}",
        failures.len(),
        failures[0]
    );
    let secs = t0.elapsed().as_secs_f64();
    eprintln!("scale: created {total} {what} in {secs:.1} s ({:.0}/s)", total as f64 / secs.max(1e-3));
}

async fn create_one<K>(api: &Api<K>, o: &K) -> Result<(), String>
where
    K: Clone + Debug + Serialize + DeserializeOwned + kube::Resource,
{
    const ATTEMPTS: u32 = 5;
    for attempt in 1..=ATTEMPTS {
        match api.create(&PostParams::default(), o).await {
            Ok(_) => return Ok(()),
            // A retry of a create that did succeed (its answer was lost).
            Err(kube::Error::Api(s)) if s.is_already_exists() && attempt > 1 => return Ok(()),
            Err(kube::Error::Api(s)) if s.code < 500 && s.code != 429 => {
                return Err(format!("{}: {} ({})", o.name_any(), s.message, s.code));
            }
            Err(e) if attempt == ATTEMPTS => return Err(format!("{}: {e}", o.name_any())),
            Err(_) => tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await,
        }
    }
    unreachable!("the last attempt returns")
}

/// Pods in the cluster that kwok has not marked Running yet (read from the watch cache), but
/// those in `skip` (BestEffort workers wait for the batch capacity the controller publishes).
pub async fn pods_not_running(client: &Client, skip: Option<&str>) -> Result<usize, kube::Error> {
    let api: Api<Pod> = Api::all(client.clone());
    let fields = match skip {
        Some(ns) => format!("status.phase!=Running,metadata.namespace!={ns}"),
        None => "status.phase!=Running".to_string(),
    };
    let lp = ListParams::default().fields(&fields).match_any();
    Ok(api.list_metadata(&lp).await?.items.len())
}

/// Waits until kwok has marked every pod Running (but those in `skip`); returns how long that
/// took.
pub async fn wait_all_running(client: &Client, timeout: Duration, skip: Option<&str>) -> Duration {
    let t0 = Instant::now();
    let mut last_report = Instant::now();
    loop {
        let left = match pods_not_running(client, skip).await {
            Ok(0) => return t0.elapsed(),
            Ok(n) => n.to_string(),
            Err(e) => format!("an unknown number of (listing failed: {e})"),
        };
        assert!(
            t0.elapsed() < timeout,
            "{left} pods still not Running after {timeout:?}: kwok does not keep up (see its log in the test bed dir)"
        );
        if last_report.elapsed() > Duration::from_secs(15) {
            eprintln!("scale: {left} pods not Running yet");
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Writes HPA `ns/nginx`'s status as its controller would (CPU target 60%).
pub async fn set_hpa(client: &Client, ns: &str, current: u32, desired: u32) {
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), ns);
    let utilization = 60 * desired / current.max(1);
    let status = json!({"status": {"currentReplicas": current, "desiredReplicas": desired,
        "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu",
            "current": {"averageUtilization": utilization}}}]}});
    api.patch_status("nginx", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap_or_else(|e| panic!("HPA {ns}/nginx status patch: {e}"));
}

/// A kubeconfig for the test bed authenticating as `CONTROLLER_USER`, bound to cluster-admin:
/// what this test measures is load, not permissions.
pub fn controller_kubeconfig(bed: &Testbed, dir: &Path) -> std::path::PathBuf {
    bed.kubectl_run(&["create", "serviceaccount", "colocate", "-n", CONTROLLER_NAMESPACE]);
    bed.kubectl_run(&[
        "create",
        "clusterrolebinding",
        "colocate-scale",
        "--clusterrole=cluster-admin",
        &format!("--serviceaccount={CONTROLLER_NAMESPACE}:colocate"),
    ]);
    let text = bed.kubeconfig_as(CONTROLLER_NAMESPACE, "colocate", "24h");
    let path = dir.join("colocate-kubeconfig");
    std::fs::write(&path, text).expect("writing the controller's kubeconfig");
    path
}
