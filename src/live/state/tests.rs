use k8s_openapi::api::core::v1::{Node as KubeNode, Pod as KubePod};
use serde_json::json;

use super::*;
use crate::core::Resources;

fn node(name: &str, cpu: &str) -> KubeNode {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": "64Gi"}, "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn pod(ns: &str, name: &str, labels: serde_json::Value, node: Option<&str>, cpu: &str) -> KubePod {
    serde_json::from_value(json!({
        "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{name}"), "labels": labels},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 45,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn worker(name: &str, node: Option<&str>) -> KubePod {
    pod("ml", name, json!({"colocate.dev/job": "wd", "colocate.dev/role": "worker"}), node, "1")
}

fn names(s: &ClusterState) -> Vec<String> {
    let mut v: Vec<String> = s.snapshot.pods.iter().map(|p| p.name.clone()).collect();
    v.sort();
    v
}

fn class_of(s: &ClusterState, name: &str) -> PodClass {
    s.snapshot.pods.iter().find(|p| p.name == name).map(|p| p.class.clone()).expect(name)
}

fn nginx_classifier() -> Classifier {
    let mut c = Classifier { managed: ["ml/wd".to_string()].into(), ..Classifier::default() };
    c.selectors.insert("web".into(), vec![("web/nginx".into(), LabelSelector::parse("app=nginx").unwrap())]);
    c
}

#[test]
fn events_update_pods_in_place_and_deletions_keep_the_index_whole() {
    let mut s = ClusterState::from_objects(&[node("n1", "8")], &[worker("w-0", Some("n1")), worker("w-1", None)]);
    assert!(s.is_listed());
    s.apply_pod(&Event::Apply(worker("w-2", Some("n1"))));
    // w-1 is bound: the same pod, changed in place.
    s.apply_pod(&Event::Apply(worker("w-1", Some("n1"))));
    assert_eq!(names(&s), ["ml/w-0", "ml/w-1", "ml/w-2"]);
    assert_eq!(s.snapshot.pods.iter().filter(|p| p.node.is_some()).count(), 3);
    // Deleting the first moves the last into its slot; each name still finds its own pod.
    s.apply_pod(&Event::Delete(worker("w-0", Some("n1"))));
    assert_eq!(names(&s), ["ml/w-1", "ml/w-2"]);
    for (name, &i) in &s.pod_slots {
        assert_eq!(&s.snapshot.pods[i].name, name);
        assert_eq!(s.facts[i].uid.as_deref(), Some(format!("uid-{}", &name[3..]).as_str()));
    }
    // A finished pod holds nothing: gone from the view.
    let mut done = worker("w-2", Some("n1"));
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    s.apply_pod(&Event::Apply(done));
    assert_eq!(names(&s), ["ml/w-1"]);
    // Deleting what is not there changes nothing.
    s.apply_pod(&Event::Delete(worker("w-9", None)));
    assert_eq!(s.pod_count(), 1);
}

#[test]
fn a_relist_replaces_everything_and_only_completes_at_init_done() {
    let mut s = ClusterState::default();
    s.apply_node(&Event::Init);
    s.apply_node(&Event::InitApply(node("n1", "8")));
    s.apply_pod(&Event::Init);
    s.apply_pod(&Event::InitApply(worker("w-0", Some("n1"))));
    assert!(!s.is_listed() && s.pod_count() == 0, "nothing is decided on before a whole list");
    s.apply_node(&Event::InitDone);
    s.apply_pod(&Event::InitDone);
    assert!(s.is_listed());
    assert_eq!((s.node_count(), s.pod_count()), (1, 1));
    // After a watch error the watcher lists again: pods deleted meanwhile must go, and the
    // old contents stay until the new list is complete.
    s.apply_pod(&Event::Init);
    s.apply_pod(&Event::InitApply(worker("w-1", Some("n1"))));
    assert_eq!(names(&s), ["ml/w-0"]);
    s.apply_pod(&Event::InitDone);
    assert_eq!(names(&s), ["ml/w-1"]);
    s.apply_node(&Event::Init);
    s.apply_node(&Event::InitApply(node("n2", "4")));
    s.apply_node(&Event::InitDone);
    assert_eq!(s.snapshot.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["n2"]);
    assert_eq!(s.node_slots.get("n2"), Some(&0));
}

#[test]
fn classes_follow_the_classifier_and_new_pods_take_the_current_one() {
    let nginx = pod("web", "nginx-0", json!({"app": "nginx"}), Some("n1"), "1");
    let mut s = ClusterState::from_objects(&[node("n1", "8")], &[nginx, worker("w-0", Some("n1"))]);
    // Before any decision no service or job is known: everything is load it cannot move.
    assert_eq!(class_of(&s, "web/nginx-0"), PodClass::System);
    assert_eq!(class_of(&s, "ml/w-0"), PodClass::System);
    s.set_classifier(nginx_classifier());
    assert_eq!(class_of(&s, "web/nginx-0"), PodClass::Online { service: "web/nginx".into() });
    assert_eq!(class_of(&s, "ml/w-0"), PodClass::Worker { job: "ml/wd".into() });
    s.apply_pod(&Event::Apply(pod("web", "nginx-1", json!({"app": "nginx"}), None, "1")));
    assert_eq!(class_of(&s, "web/nginx-1"), PodClass::Online { service: "web/nginx".into() });
    // The job's master stops answering: its workers are left alone.
    s.set_classifier(Classifier { managed: BTreeSet::new(), ..nginx_classifier() });
    assert_eq!(class_of(&s, "ml/w-0"), PodClass::System);
}

#[test]
fn untranslatable_objects_are_reported_until_fixed_or_gone() {
    let mut bad = worker("w-bad", Some("n1"));
    bad.spec.as_mut().unwrap().containers[0]
        .resources
        .as_mut()
        .unwrap()
        .requests
        .as_mut()
        .unwrap()
        .insert("cpu".into(), k8s_openapi::apimachinery::pkg::api::resource::Quantity("lots".into()));
    let mut s = ClusterState::from_objects(&[node("n1", "8"), node("n2", "many")], &[bad.clone()]);
    let problems: Vec<&String> = s.problems().collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].starts_with("node/n2: status.allocatable.cpu `many`"), "{problems:?}");
    assert!(problems[1].starts_with("pod/ml/w-bad: containers[c].resources.requests.cpu `lots`"), "{problems:?}");
    assert_eq!((s.node_count(), s.pod_count()), (1, 0));
    s.apply_pod(&Event::Apply(worker("w-bad", Some("n1"))));
    s.apply_node(&Event::Delete(node("n2", "many")));
    assert_eq!(s.problems().count(), 0);
    assert_eq!(s.snapshot.pods[0].requests, Resources::new(1000, 0, 0));
}

#[test]
fn workers_of_a_job_and_master_pods_for_discovery() {
    let master =
        pod("ml", "wd-master", json!({"colocate.dev/master": "true", "colocate.dev/job": "wd"}), Some("n1"), "1");
    let mut leaving = worker("w-1", Some("n1"));
    leaving.metadata.deletion_timestamp = Some(serde_json::from_value(json!("2026-11-27T17:00:30Z")).unwrap());
    // As kube-scheduler marks its victims before deleting them.
    let victim = json!({"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"});
    leaving.status.get_or_insert_with(Default::default).conditions =
        Some(vec![serde_json::from_value(victim).unwrap()]);
    let other = pod("other", "w-0", json!({"colocate.dev/job": "wd", "colocate.dev/role": "worker"}), Some("n1"), "1");
    let s = ClusterState::from_objects(
        &[node("n1", "8")],
        &[worker("w-0", Some("n1")), leaving, worker("w-2", None), master.clone(), other],
    );
    let mut w = s.workers_of("ml", "wd");
    w.sort_by(|a, b| a.name.cmp(&b.name));
    let holding: Vec<(&str, bool)> = w.iter().map(|w| (w.name.as_str(), w.holding)).collect();
    assert_eq!(holding, [("w-0", true), ("w-1", false), ("w-2", false)], "only bound, live workers hold room");
    assert_eq!(w[0].uid.as_deref(), Some("uid-w-0"));
    let masters = s.master_pods();
    assert_eq!(masters.len(), 1);
    assert_eq!(masters[0].metadata.name.as_deref(), Some("wd-master"));
    assert!(s.pods_with_grace().all(|(_, g)| g == Duration::from_secs(45)));
    // When its grace period ends, on the controller's clock (Unix time while the wall clock
    // keeps pace with the monotonic one).
    let until: Vec<Duration> = s.snapshot.pods.iter().filter_map(|p| p.terminating_until).collect();
    assert_eq!(until.len(), 1, "{until:?}");
    assert!(until[0].abs_diff(Duration::from_secs(1_795_798_830)) < Duration::from_secs(1), "{until:?}");
    let preempted: Vec<&str> = s.snapshot.pods.iter().filter(|p| p.preempted).map(|p| p.name.as_str()).collect();
    assert_eq!(preempted, ["ml/w-1"]);
}

#[test]
fn measured_usage_lands_on_its_pods_and_a_resource_left_unanswered_counts_as_requested() {
    use crate::live::sampler::usage::PodUsage;
    let nginx = |name| pod("web", name, json!({"app": "nginx"}), Some("n1"), "1");
    let mut with_memory = nginx("e");
    with_memory.spec.as_mut().unwrap().containers[0].resources =
        Some(serde_json::from_value(json!({"requests": {"cpu": "1", "memory": "64Mi"}})).unwrap());
    let mut s = ClusterState::from_objects(&[node("n1", "8")], &[nginx("a"), nginx("b"), nginx("c"), with_memory]);
    let usage = Arc::new(
        [
            ("web/a".into(), PodUsage { cpu_millicores: Some(300), memory_bytes: Some(5 << 20) }),
            ("web/b".into(), PodUsage { cpu_millicores: None, memory_bytes: Some(7 << 20) }),
            ("web/d".into(), PodUsage { cpu_millicores: Some(200), memory_bytes: Some(3 << 20) }),
            ("web/e".into(), PodUsage { cpu_millicores: None, memory_bytes: Some(40 << 20) }),
        ]
        .into_iter()
        .collect(),
    );
    s.set_usage(&usage);
    let usage_of = |s: &ClusterState, name: &str| s.snapshot.pods.iter().find(|p| p.name == name).and_then(|p| p.usage);
    assert_eq!(usage_of(&s, "web/a"), Some(Resources::new(300, 5 << 20, 0)));
    assert_eq!(
        usage_of(&s, "web/b"),
        Some(Resources::new(1000, 7 << 20, 0)),
        "CPU unanswered but memory above its request: held, CPU at its request"
    );
    assert_eq!(usage_of(&s, "web/e"), None, "CPU unanswered (scraped once), memory within its request: not measured");
    assert_eq!(usage_of(&s, "web/c"), None, "not measured: the core counts it at its requests");
    s.apply_pod(&Event::Apply(nginx("d")));
    assert_eq!(usage_of(&s, "web/d"), Some(Resources::new(200, 3 << 20, 0)), "a pod arriving later gets its usage");
    s.set_usage(&Default::default());
    assert_eq!(usage_of(&s, "web/a"), None, "usage gone stale is forgotten");
}

#[test]
fn a_worker_holds_its_batch_request_and_another_systems_batch_pod_holds_none() {
    use crate::live::sampler::usage::PodUsage;
    let batch = |p: &mut KubePod| {
        let c = &mut p.spec.as_mut().unwrap().containers[0];
        let limits = json!({"limits": {"colocate.dev/batch-cpu": "4000", "colocate.dev/batch-memory": "1Gi"}});
        c.resources = Some(serde_json::from_value(limits).unwrap());
    };
    let mut w = worker("w-0", Some("n1"));
    batch(&mut w);
    let mut foreign = pod("other", "be-0", json!({"app": "koord-batch"}), Some("n1"), "1");
    batch(&mut foreign);
    let mut s = ClusterState::from_objects(&[node("n1", "8")], &[w, foreign]);
    let requests = |s: &ClusterState, name: &str| s.snapshot.pods.iter().find(|p| p.name == name).unwrap().requests;
    assert_eq!(requests(&s, "ml/w-0").cpu_milli, 4000, "a worker holds its batch CPU");
    assert_eq!(requests(&s, "other/be-0"), Resources::ZERO, "a foreign batch pod holds nothing");
    let usage = [("other/be-0".into(), PodUsage { cpu_millicores: Some(3500), memory_bytes: Some(1 << 30) })];
    s.set_usage(&Arc::new(usage.into_iter().collect()));
    assert_eq!(s.snapshot.pods.iter().find(|p| p.name == "other/be-0").unwrap().usage, None, "its use is not counted");
}
