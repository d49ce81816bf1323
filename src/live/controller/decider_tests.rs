//! The decider on a cluster held in memory: a node, a job's workers and its master (a fake
//! endpoint), no Kubernetes API. What is checked is what reaches the actuator: a leader's
//! intents, and nothing from a follower or a dry run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node as KubeNode, Pod as KubePod};
use kube::Client;
use serde_json::json;
use tokio::sync::{watch, Notify};

use super::*;
use crate::core::{Config, Reason, ScaleIntent};
use crate::live::endpoint::{DiscoveredJob, JobEndpoint, JobObject};
use crate::live::kinds::KindResources;
use crate::live::master_client::MasterError;
use crate::live::state::{lock, ClusterState};
use crate::live::watch::WatchStats;
use crate::master_protocol::{ScaleAccepted, ScaleCommand, Status};

fn from<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("valid object")
}

/// A master whose job runs `workers` of 2 CPUs, between 1 and 8.
struct Master {
    workers: u32,
}

impl JobEndpoint for Master {
    fn describe(&self) -> String {
        "fake".into()
    }
    fn status(&self) -> BoxFuture<'_, Result<Status, MasterError>> {
        let status = from(json!({
            "job": "a", "generation": 1, "phase": "Running",
            "workers": {"current": self.workers, "target": self.workers, "min": 1, "max": 8, "pending": 0},
            "worker_resources": {"cpu": "2", "memory": "1Gi"},
            "rescale_cost_s": 1.0
        }));
        Box::pin(async move { Ok(status) })
    }
    fn scale<'a>(&'a self, _: &'a ScaleCommand) -> BoxFuture<'a, Result<ScaleAccepted, MasterError>> {
        unreachable!("the decider sends no command")
    }
}

struct Setup {
    decider: Decider,
    actuator: watch::Receiver<Actuation>,
}

/// A decider over a 16-CPU node that runs two workers of job `ml/a`, with nothing else on it:
/// room to grow. Growth is not held back by a stabilization window, so the first decision
/// grows.
async fn setup(leading: bool, dry_run: bool) -> Setup {
    let client = Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
    let metrics = Arc::new(Metrics::new());
    let (caches, _drivers) =
        Caches::new(client.clone(), Arc::new(Notify::new()), Arc::new(WatchStats::default()), Default::default());
    let node: KubeNode = from(json!({
        "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "16", "memory": "64Gi"}, "conditions": [{"type": "Ready", "status": "True"}]}
    }));
    let worker = |i: u32| -> KubePod {
        from(json!({
            "metadata": {"namespace": "ml", "name": format!("a-w-{i}"),
                "labels": {"colocate.dev/job": "a", "colocate.dev/role": "worker"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
    };
    *lock(&caches.state) = ClusterState::from_objects(&[node], &[worker(0), worker(1)]);
    let poller = Arc::new(Poller::new(
        Duration::from_secs(1),
        Duration::from_secs(60),
        metrics.clone(),
        Arc::new(Notify::new()),
    ));
    let job = DiscoveredJob {
        namespace: "ml".into(),
        name: "a".into(),
        object: JobObject {
            api_version: "v1".into(),
            kind: "Service".into(),
            namespace: "ml".into(),
            name: "a-master".into(),
            uid: None,
        },
        endpoint: Arc::new(Master { workers: 2 }),
        overrides: Default::default(),
    };
    poller.poll(vec![job], Vec::new()).await;
    let kinds = Arc::new(KindResources::new(client.clone()));
    let sources = Sources {
        caches,
        poller,
        services: ServiceDirectory::new(client, Vec::new(), kinds),
        readings: Box::new(|_| BTreeMap::new()),
        usage: Box::new(|_| Default::default()),
    };
    let core = Core::new(Config { grow_stabilization: Duration::ZERO, ..Config::default() });
    let (leader, follows) = watch::channel(leading);
    std::mem::forget(leader);
    let (actuation, actuator) = watch::channel(Actuation::default());
    Setup { decider: Decider::new(core, sources, metrics, follows, dry_run, actuation), actuator }
}

#[tokio::test]
async fn a_leader_hands_its_intents_and_the_jobs_they_name_to_the_actuator() {
    let mut s = setup(true, false).await;
    let decided = s.decider.decide_once().await;
    let [intent] = decided.intents.as_slice() else { panic!("one intent: {:?}", decided.intents) };
    assert_eq!((intent.job.as_str(), intent.from, intent.reason), ("ml/a", 2, Reason::Grow), "{intent:?}");
    assert!(intent.target > 2, "{intent:?}");
    let bounded = &decided.jobs["ml/a"];
    assert_eq!((bounded.min, bounded.max, bounded.target, bounded.generation), (1, 8, 2, 1));
    let sent = s.actuator.borrow_and_update().clone();
    assert_eq!(sent.intents, decided.intents);
    assert_eq!(sent.jobs.keys().collect::<Vec<_>>(), ["ml/a"]);
}

#[tokio::test]
async fn a_follower_and_a_dry_run_decide_but_hand_nothing_to_the_actuator() {
    for (leading, dry_run) in [(false, false), (true, true)] {
        let mut s = setup(leading, dry_run).await;
        // An actuation left from when it led must not wait for when this replica leads again.
        let stale = ScaleIntent {
            job: "ml/a".into(),
            from: 2,
            target: 1,
            release_pods: vec![],
            release_nodes: vec![],
            reason: Reason::OnlineHeadroom,
            why: String::new(),
        };
        s.decider.actuation.send_replace(Actuation { intents: vec![stale], jobs: BTreeMap::new() });
        let decided = s.decider.decide_once().await;
        assert_eq!(decided.intents.len(), 1, "leading {leading}, dry run {dry_run}: {:?}", decided.intents);
        assert!(s.actuator.has_changed().unwrap());
        let sent = s.actuator.borrow_and_update().clone();
        assert!(sent.intents.is_empty() && sent.jobs.is_empty(), "leading {leading}, dry run {dry_run}");
    }
}
