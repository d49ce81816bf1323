//! `controller.capacity: usage` on a real control plane (etcd, kube-apiserver, kube-scheduler,
//! kube-controller-manager, kwok nodes): the controller publishes each node's batch capacity on
//! the node's status, the real kube-scheduler binds a BestEffort worker that requests it and
//! keeps one that asks for more than any node carries Pending, naming the resource; a dry run
//! writes nothing; a cordoned node keeps what it carries; a replica that lost its Lease writes
//! nothing, though the batch capacity it decides has moved, and writes again once it leads.
//!
//! Cluster: 2 nodes x 8 CPU, 64 GiB; NGINX at 2 replicas of 1 CPU and 256 MiB, each using what
//! it requests (served under cAdvisor's names to a real Prometheus), so each node's batch
//! capacity is its allocatable minus its pods' requests (the usage margins are set to 0 here).

mod support;

use std::time::Duration;

use colocate::core::resources::parse_memory;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use support::cadvisor;
use support::cluster::{self, eventually, Controller};

fn config(prometheus: &str) -> String {
    format!(
        "controller:\n  capacity: usage\n  usage_cpu_margin: 0\n  usage_memory_margin: 0\n  grow_stabilization: 3s\n\
         run:\n  prometheus_url: {prometheus}\n\
         services:\n  - name: nginx\n    namespace: web\n    hpa: nginx\n"
    )
}

const GI: i64 = 1 << 30;

/// (batch-cpu millicores, batch-memory bytes) node `name` carries in its allocatable.
async fn carried(client: &Client, name: &str) -> Option<(i64, i64)> {
    let node = Api::<Node>::all(client.clone()).get(name).await.expect("node");
    let allocatable = node.status?.allocatable?;
    // The API server keeps a quantity in its canonical form: 7000 millicores reads "7k".
    let cpu = parse_memory(&allocatable.get("colocate.dev/batch-cpu")?.0).ok()?;
    let memory = parse_memory(&allocatable.get("colocate.dev/batch-memory")?.0).ok()?;
    Some((cpu, memory))
}

/// CPU millicores and memory bytes NGINX's pods request on node `name`.
async fn nginx_requests_on(client: &Client, name: &str) -> (i64, i64) {
    let pods = Api::<Pod>::namespaced(client.clone(), "web");
    let on = pods.list(&ListParams::default().fields(&format!("spec.nodeName={name}"))).await.expect("pods");
    let n = on.items.len() as i64;
    (n * 1000, n * 256 * (1 << 20))
}

/// What each node should carry with no usage known and no margins: its allocatable less
/// NGINX's requests there.
async fn expected(client: &Client) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    for node in ["node-a", "node-b"] {
        let (cpu, memory) = nginx_requests_on(client, node).await;
        out.push((8000 - cpu, 64 * GI - memory));
    }
    out
}

async fn carried_by_both(client: &Client) -> Vec<Option<(i64, i64)>> {
    vec![carried(client, "node-a").await, carried(client, "node-b").await]
}

/// Whether both nodes carry what `want` says: CPU within a few millicores (usage is a rate of a
/// counter Prometheus scraped), memory exactly.
fn carry(got: &[Option<(i64, i64)>], want: &[(i64, i64)]) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|(g, w)| g.is_some_and(|(cpu, memory)| (cpu - w.0).abs() <= 10 && memory == w.1))
}

/// A BestEffort worker asking for `cpu` millicores of batch CPU and 1 GiB of batch memory.
fn worker(name: &str, cpu: i64) -> Pod {
    let limits = json!({"colocate.dev/batch-cpu": cpu.to_string(), "colocate.dev/batch-memory": "1Gi"});
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ml", "labels": {"app": "probe"}},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/fake", "resources": {"limits": limits}}],
                 "tolerations": [{"operator": "Exists"}], "terminationGracePeriodSeconds": 0}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_carry_their_batch_capacity_and_the_scheduler_places_best_effort_workers_against_it() {
    let bed = cluster::bed_playing_the_hpa().await;
    let client = cluster::two_nodes_with_nginx_bound(&bed).await;

    let dir = tempfile::tempdir().unwrap();
    let (prometheus, _following) = cadvisor::nginx_at(dir.path(), &client, 1.0, 256.0 * (1 << 20) as f64).await;
    let config = config(&prometheus.url());

    // A dry run decides but writes nothing.
    let mut dry = Controller::start(&bed, &config, &["--tick", "1s", "--lease-duration", "3s", "--dry-run"]).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(carried(&client, "node-a").await, None, "a dry run wrote node status");
    dry.stop();

    let _controller = Controller::start(&bed, &config, cluster::QUICK_FLAGS).await;
    for node in ["node-a", "node-b"] {
        let (cpu, memory) = nginx_requests_on(&client, node).await;
        let want = (8000 - cpu, 64 * GI - memory);
        eventually(Duration::from_secs(20), "the node's batch capacity", || {
            let client = client.clone();
            async move { carried(&client, node).await }
        })
        .await;
        // Past a few decisions (1 s ticks): what it settles at.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let got = carried(&client, node).await.unwrap();
        // CPU usage is a rate of a counter Prometheus scraped: within a few millicores.
        assert!(
            (got.0 - want.0).abs() <= 10 && got.1 == want.1,
            "{node}: (batch-cpu, batch-memory) {got:?}, want {want:?}"
        );
        eprintln!("{node} carries batch-cpu {} and batch-memory {} (NGINX requests {cpu}m there)", got.0, got.1);
    }
    // The kubelet's stand-in keeps renewing the node's status: the resources stay.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(carried(&client, "node-a").await.is_some(), "the batch capacity did not survive the node's heartbeats");

    let pods = Api::<Pod>::namespaced(client.clone(), "ml");
    pods.create(&PostParams::default(), &worker("fits", 4000)).await.expect("create a worker");
    pods.create(&PostParams::default(), &worker("too-big", 9000)).await.expect("create a worker");
    let node = eventually(Duration::from_secs(20), "the worker that fits bound", || {
        let pods = pods.clone();
        async move { pods.get("fits").await.ok()?.spec?.node_name }
    })
    .await;
    let qos = pods.get("fits").await.unwrap().status.and_then(|s| s.qos_class);
    assert_eq!(qos.as_deref(), Some("BestEffort"), "a worker requesting only batch resources");
    eprintln!("the 4-CPU BestEffort worker was bound to {node}");
    let why = eventually(Duration::from_secs(20), "the oversize worker's scheduling failure", || {
        let pods = pods.clone();
        async move {
            let status = pods.get("too-big").await.ok()?.status?;
            let unschedulable =
                status.conditions?.into_iter().find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
            unschedulable.message
        }
    })
    .await;
    assert!(why.contains("Insufficient colocate.dev/batch-cpu"), "{why}");

    // A cordoned node takes no new pods; what it carries stays as it was.
    let before = carried(&client, "node-b").await;
    bed.kubectl().args(["cordon", "node-b"]).output().expect("kubectl cordon");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(carried(&client, "node-b").await, before, "cordoning changed the batch capacity");
}

/// Sets the holder of the controller's Lease (`default/colocate` under the test flags): another
/// identity holding it for an hour takes it from the replica, `None` frees it.
async fn lease_holder(client: &Client, holder: Option<&str>) {
    let leases = Api::<Lease>::namespaced(client.clone(), "default");
    let patch = json!({"spec": {"holderIdentity": holder, "leaseDurationSeconds": 3600}});
    leases.patch("colocate", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("Lease patch");
}

/// A replica that lost its Lease keeps deciding (its caches stay warm for a takeover) and the
/// batch capacity it decides moves when NGINX grows, but once it knows it no longer leads no
/// node status write of its goes out; when it leads again, the nodes get the new values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_lost_its_lease_writes_no_node_status_until_it_leads_again() {
    let bed = cluster::bed_playing_the_hpa().await;
    let client = cluster::two_nodes_with_nginx_bound(&bed).await;
    let dir = tempfile::tempdir().unwrap();
    let (prometheus, _following) = cadvisor::nginx_at(dir.path(), &client, 1.0, 256.0 * (1 << 20) as f64).await;
    let controller = Controller::start(&bed, &config(&prometheus.url()), cluster::QUICK_FLAGS).await;
    let want = expected(&client).await;
    eventually(Duration::from_secs(20), "both nodes carrying their batch capacity", || {
        let (client, want) = (client.clone(), want.clone());
        async move { carry(&carried_by_both(&client).await, &want).then_some(()) }
    })
    .await;

    // Another holder takes the Lease: the replica reads it at its next renew and steps down.
    lease_holder(&client, Some("another-replica")).await;
    eventually(Duration::from_secs(10), "the replica to step down", || {
        let c = &controller;
        async move { (c.metric("colocate_leader").await == 0.0).then_some(()) }
    })
    .await;
    let written = "colocate_node_status_writes_total{outcome=\"written\"}";
    let written_then = controller.metric(written).await;
    let before = carried_by_both(&client).await;

    // NGINX grows from 2 to 6 replicas: both nodes' batch capacity falls by what lands there.
    cluster::set_hpa(&client, 6, 6).await;
    cluster::scale_nginx(&client, 6).await;
    eventually(Duration::from_secs(30), "6 NGINX replicas bound", || {
        let client = client.clone();
        async move { (cluster::pod_counts(&client, "web", "app=nginx").await.0 == 6).then_some(()) }
    })
    .await;
    let after = expected(&client).await;
    assert!(!carry(&before, &after), "NGINX's growth moved no node's batch capacity");
    // The replica decides the new values (it would write them if it led)...
    let target = |node: &str| format!("colocate_node_batch_target{{node=\"{node}\",resource=\"cpu\",unit=\"core\"}}");
    eventually(Duration::from_secs(10), "the follower's decisions to want the new values", || {
        let (c, after) = (&controller, after.clone());
        async move {
            let m = c.metrics().await;
            let got = ["node-a", "node-b"].map(|n| (cluster::metric_value(&m, &target(n)) * 1000.0).round() as i64);
            got.iter().zip(&after).all(|(g, w)| (g - w.0).abs() <= 10).then_some(())
        }
    })
    .await;
    // ... and for several decisions (1 s ticks) writes none of them.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(carried_by_both(&client).await, before, "a replica that no longer leads wrote node status");
    let m = controller.metrics().await;
    assert_eq!(cluster::metric_value(&m, written), written_then, "node status writes counted as a follower:\n{m}");
    assert_eq!(cluster::metric_value(&m, "colocate_leader"), 0.0);

    // The Lease is freed: the replica takes it and the nodes get the values it decided.
    lease_holder(&client, None).await;
    let got = eventually(Duration::from_secs(15), "the nodes' new batch capacity once the replica leads again", || {
        let (client, after) = (client.clone(), after.clone());
        async move {
            let got = carried_by_both(&client).await;
            carry(&got, &after).then_some(got)
        }
    })
    .await;
    eprintln!("node-a and node-b carry (batch-cpu, batch-memory) {got:?} after the replica led again");
}
