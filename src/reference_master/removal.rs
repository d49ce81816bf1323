//! Which workers a shrink of a worker Deployment removes. The ReplicaSet controller picks by its
//! own ranking, in which any pod still waiting for a node goes before every running one whatever
//! its `pod-deletion-cost`. While online pods wait for room, a job's preempted workers come back
//! as such pods, and colocate keeps them in the target and names running workers on the nodes
//! that need room: left to the ReplicaSet, that shrink removes the waiting pods and frees no room
//! at all, and the online pods preempt more workers (a live flash-crowd run: colocate's shrinks
//! at 45-50 s freed nothing while 9 replacements waited, and the scheduler killed 23 workers
//! where replay, whose masters release what they are asked, killed 15). So the master removes
//! the named workers itself ([`plan`]), as many as the ReplicaSet would remove ([`excess`]).
//! Pure, so it is tested without a cluster.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;

use super::in_place::{phase, ready};

/// The workers a ReplicaSet scaled down removes, first to last: its ranking (kube-controller-
/// manager `ActivePodsWithRanks`: unassigned before assigned, Pending before Running, not ready
/// before ready, then the lower `pod-deletion-cost`), where the named pods are the ones the
/// master marks with the lowest cost; newest first among equals. Pods being deleted or finished
/// are not counted by the ReplicaSet and are left out.
pub fn removal_order<'a>(pods: &'a [Pod], named: &BTreeSet<&str>) -> Vec<&'a Pod> {
    let mut active: Vec<&Pod> = pods.iter().filter(|p| counted(p)).collect();
    let rank = |p: &Pod| {
        let phase_rank = match phase(p) {
            Some("Pending") | None => 0,
            Some("Running") => 2,
            Some(_) => 1,
        };
        let created = p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        (bound(p), phase_rank, ready(p), !is_named(p, named), std::cmp::Reverse(created), p.metadata.name.clone())
    };
    active.sort_by_cached_key(|p| rank(p));
    active
}

/// The workers a shrink by `excess` removes when the master honours the names: the named ones
/// holding a node first (at most `excess`), then the ReplicaSet's own order. The master deletes
/// them itself once the count is down ([`super::deployment_backend`]).
pub fn plan<'a>(pods: &'a [Pod], named: &BTreeSet<&str>, excess: usize) -> Vec<&'a Pod> {
    let order = removal_order(pods, named);
    let mut leaving: Vec<&Pod> =
        order.iter().copied().filter(|p| bound(p) && is_named(p, named)).take(excess).collect();
    for p in &order {
        if leaving.len() >= excess {
            break;
        }
        if !leaving.iter().any(|l| std::ptr::eq(*l, *p)) {
            leaving.push(p);
        }
    }
    leaving
}

/// Whether the ReplicaSet, once its count is down, removes exactly `leaving` by its own ranking
/// with them marked ([`removal_order`]): every other worker it counts ranks after them (none is
/// waiting for a node or not ready while a leaving one is ready), and `leaving` is the whole
/// `excess`. Then the master can wait for the count to go down before it deletes them and no
/// replacement comes of its deletes ([`super::deployment_backend`]). Otherwise the ReplicaSet would
/// remove others first (a preempted worker's replacement, say), and the master deletes at once.
pub fn replica_set_agrees(pods: &[Pod], leaving: &BTreeSet<&str>, excess: usize) -> bool {
    leaving.len() == excess && removal_order(pods, leaving).iter().take(excess).all(|p| is_named(p, leaving))
}

/// How many of `pods` a ReplicaSet scaled to `target` removes: those it counts beyond the
/// target. Fewer than the Deployment's `spec.replicas` less the target when the scheduler has
/// just preempted workers whose replacements do not exist yet: those victims leave in the
/// shrink's stead, and removing the full difference would take the job below its target.
pub fn excess(pods: &[Pod], target: u32) -> usize {
    pods.iter().filter(|p| counted(p)).count().saturating_sub(usize::try_from(target).unwrap_or(usize::MAX))
}

/// Releasing in place, the workers that leave for the named ones: as many on each named
/// worker's node, the oldest there first. Online pods created with a release preempt before the
/// kubelet reports the resize (about a second), and kube-scheduler's victims on a node are its
/// newest workers (MoreImportantPod: the earlier start is the more important). A victim's
/// resize is never actuated (the kubelet does not resize a pod it is terminating), so a named
/// worker the scheduler also picks gives its room only after its grace period, and the online
/// pods that need it wait that long. On the live flash crowd, releasing the named workers
/// themselves, 8 of 12 workers resized at the 45 s step are preempted within the second, 7 of
/// them replacements started 15 s before. The oldest on the same node leave the same room there
/// and are the scheduler's last choice; the newest it picks anyway. Named pods that hold no
/// node stay named (nothing to resize).
pub fn in_place_choice<'a>(pods: &'a [Pod], named: &BTreeSet<&str>) -> BTreeSet<&'a str> {
    let active = |p: &&Pod| counted(p);
    let node = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone());
    let mut chosen = BTreeSet::new();
    let mut per_node: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for p in pods.iter().filter(active).filter(|p| is_named(p, named)) {
        match node(p) {
            Some(n) => *per_node.entry(n).or_default() += 1,
            None => chosen.extend(p.metadata.name.as_deref()),
        }
    }
    for (n, count) in per_node {
        let mut there: Vec<&Pod> =
            pods.iter().filter(active).filter(|p| node(p).as_deref() == Some(n.as_str())).collect();
        there.sort_by_cached_key(|p| {
            let started = p.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0);
            let created = p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            (started.is_none(), started, created, p.metadata.name.clone())
        });
        chosen.extend(there.iter().take(count).filter_map(|p| p.metadata.name.as_deref()));
    }
    chosen
}

/// Releasing in place, the workers that leave once some were resized: the resized ones the
/// ReplicaSet still counts first (their CPU is gone; left running they would train on almost
/// none), then, for what is left of `excess`, those of [`plan`] over [`in_place_choice`]. A
/// resized worker the scheduler preempted is no longer counted, and another leaves in its
/// stead. Chosen again from scratch, a node whose named workers were preempted too would drop
/// out of the choice and leave its resized workers running.
pub fn in_place_leaving<'a>(
    pods: &'a [Pod],
    named: &BTreeSet<&str>,
    resized: &BTreeSet<String>,
    excess: usize,
) -> BTreeSet<&'a str> {
    let name = |p: &&'a Pod| p.metadata.name.as_deref();
    let mut leaving: BTreeSet<&str> = pods
        .iter()
        .filter(|p| counted(p))
        .filter_map(|p| name(&p))
        .filter(|n| resized.contains(*n))
        .take(excess)
        .collect();
    let choice = in_place_choice(pods, named);
    for p in plan(pods, &choice, excess) {
        if leaving.len() >= excess {
            break;
        }
        leaving.extend(name(&p));
    }
    leaving
}

/// Counted by the ReplicaSet: neither being deleted nor finished.
pub(super) fn counted(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none() && !matches!(phase(p), Some("Succeeded" | "Failed"))
}

fn bound(p: &Pod) -> bool {
    p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
}

fn is_named(p: &Pod, named: &BTreeSet<&str>) -> bool {
    p.metadata.name.as_deref().is_some_and(|n| named.contains(n))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(name: &str, node: Option<&str>, phase: &str, ready: bool, created: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .unwrap()
    }

    fn names(pods: &[&Pod]) -> Vec<String> {
        pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect()
    }

    #[test]
    fn removal_follows_the_replicaset_ranking_with_named_pods_first_among_ready_ones() {
        let pods = [
            pod("old", Some("n1"), "Running", true, "2026-01-01T00:00:00Z"),
            pod("new", Some("n1"), "Running", true, "2026-01-01T00:05:00Z"),
            pod("named", Some("n2"), "Running", true, "2026-01-01T00:00:00Z"),
            pod("unready", Some("n2"), "Running", false, "2026-01-01T00:00:00Z"),
            pod("pending", None, "Pending", false, "2026-01-01T00:00:00Z"),
        ];
        let order = removal_order(&pods, &BTreeSet::from(["named"]));
        assert_eq!(names(&order), ["pending", "unready", "named", "new", "old"]);
    }

    #[test]
    fn named_running_workers_leave_even_when_replacements_wait() {
        let pods = [
            pod("a", Some("n1"), "Running", true, "2026-01-01T00:00:00Z"),
            pod("b", Some("n2"), "Running", true, "2026-01-01T00:00:00Z"),
            pod("keep", Some("n2"), "Running", true, "2026-01-01T00:00:00Z"),
            pod("replacement", None, "Pending", false, "2026-01-01T00:09:00Z"),
        ];
        let named = BTreeSet::from(["a", "b"]);
        // The ReplicaSet alone would remove the replacement and `a`: the room on n2 stays held.
        assert_eq!(names(&removal_order(&pods, &named)[..2]), ["replacement", "a"]);
        assert_eq!(names(&plan(&pods, &named, 2)), ["a", "b"]);
    }

    #[test]
    fn unnamed_the_replicaset_order_and_victims_leave_in_a_shrinks_stead() {
        let mut victim = pod("victim", Some("n1"), "Running", true, "2026-01-01T00:00:00Z");
        victim.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()));
        let pods = [
            pod("a", Some("n1"), "Running", true, "2026-01-01T00:00:00Z"),
            pod("b", Some("n2"), "Running", true, "2026-01-01T00:00:00Z"),
            pod("c", Some("n2"), "Running", true, "2026-01-01T00:05:00Z"),
            victim,
        ];
        // `a` by its name, then the newest: the ReplicaSet's own order.
        assert_eq!(names(&plan(&pods, &BTreeSet::from(["a"]), 2)), ["a", "c"]);
        // Four workers wanted down to one: the ReplicaSet counts three, so two leave, not three.
        assert_eq!(excess(&pods, 1), 2);
        assert_eq!(excess(&pods, 5), 0, "a grow removes nothing");
        // No names, a shrink of pods still waiting for a node: those first.
        let waiting = [pod("p", None, "Pending", false, "2026-01-01T00:00:00Z"), pods[0].clone()];
        assert_eq!(names(&plan(&waiting, &BTreeSet::new(), 1)), ["p"]);
    }

    #[test]
    fn the_replicaset_agrees_only_when_nothing_it_counts_ranks_before_the_leaving_workers() {
        let ready = [
            pod("a", Some("n1"), "Running", true, "2026-01-01T00:00:00Z"),
            pod("b", Some("n2"), "Running", true, "2026-01-01T00:05:00Z"),
            pod("c", Some("n2"), "Running", true, "2026-01-01T00:00:00Z"),
        ];
        assert!(replica_set_agrees(&ready, &BTreeSet::from(["a"]), 1));
        assert!(replica_set_agrees(&ready, &BTreeSet::from(["a", "c"]), 2));
        // Fewer or more leaving than the ReplicaSet removes.
        assert!(!replica_set_agrees(&ready, &BTreeSet::from(["a"]), 2));
        assert!(!replica_set_agrees(&ready, &BTreeSet::from(["a", "c"]), 1));
        // A replacement waiting for a node, or a worker not ready yet, goes first.
        let mut waiting = ready.to_vec();
        waiting.push(pod("replacement", None, "Pending", false, "2026-01-01T00:09:00Z"));
        assert!(!replica_set_agrees(&waiting, &BTreeSet::from(["a"]), 1));
        let mut unready = ready.to_vec();
        unready[1] = pod("b", Some("n2"), "Running", false, "2026-01-01T00:05:00Z");
        assert!(!replica_set_agrees(&unready, &BTreeSet::from(["a"]), 1));
        // ... unless it is the one leaving.
        assert!(replica_set_agrees(&unready, &BTreeSet::from(["b"]), 1));
    }

    #[test]
    fn released_in_place_the_oldest_workers_of_each_named_node_leave() {
        let started = |mut p: Pod, at: &str| {
            p.status.as_mut().unwrap().start_time = Some(serde_json::from_value(json!(at)).unwrap());
            p
        };
        let pods = [
            started(pod("old-1", Some("n1"), "Running", true, "2026-01-01T00:00:00Z"), "2026-01-01T00:00:05Z"),
            started(pod("old-2", Some("n1"), "Running", true, "2026-01-01T00:00:00Z"), "2026-01-01T00:00:06Z"),
            started(pod("replacement", Some("n1"), "Running", true, "2026-01-01T00:09:00Z"), "2026-01-01T00:09:02Z"),
            started(pod("only", Some("n2"), "Running", true, "2026-01-01T00:00:00Z"), "2026-01-01T00:00:05Z"),
            started(pod("elsewhere", Some("n3"), "Running", true, "2026-01-01T00:00:00Z"), "2026-01-01T00:00:01Z"),
            pod("waiting", None, "Pending", false, "2026-01-01T00:09:00Z"),
        ];
        let named = BTreeSet::from(["replacement", "old-2", "only", "waiting"]);
        let chosen = in_place_choice(&pods, &named);
        // Two named on n1: its two oldest; n2's only worker; n3 has none named; the pending one stays.
        assert_eq!(chosen, BTreeSet::from(["old-1", "old-2", "only", "waiting"]));
        assert_eq!(names(&plan(&pods, &chosen, 3)), ["old-1", "old-2", "only"]);
    }

    #[test]
    fn resized_workers_still_counted_leave_and_others_stand_in_for_the_preempted() {
        let started = |mut p: Pod, at: &str| {
            p.status.as_mut().unwrap().start_time = Some(serde_json::from_value(json!(at)).unwrap());
            p
        };
        let deleted = |mut p: Pod| {
            p.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()));
            p
        };
        // Named a1 and a2 on n1, so n1's oldest (o1, o2) were resized, and n2's oldest (o3) for
        // b. Then the scheduler preempted a1, a2 and the resized o3.
        let pods = [
            started(pod("o1", Some("n1"), "Running", true, "2026-01-01T00:00:00Z"), "2026-01-01T00:00:01Z"),
            started(pod("o2", Some("n1"), "Running", true, "2026-01-01T00:00:00Z"), "2026-01-01T00:00:02Z"),
            deleted(started(pod("a1", Some("n1"), "Running", true, "2026-01-01T00:05:00Z"), "2026-01-01T00:05:01Z")),
            deleted(started(pod("a2", Some("n1"), "Running", true, "2026-01-01T00:05:00Z"), "2026-01-01T00:05:02Z")),
            deleted(started(pod("o3", Some("n2"), "Running", true, "2026-01-01T00:00:00Z"), "2026-01-01T00:00:01Z")),
            started(pod("o4", Some("n2"), "Running", true, "2026-01-01T00:00:00Z"), "2026-01-01T00:00:03Z"),
            started(pod("b", Some("n2"), "Running", true, "2026-01-01T00:05:00Z"), "2026-01-01T00:05:03Z"),
            pod("replacement", None, "Pending", false, "2026-01-01T00:09:00Z"),
        ];
        let named = BTreeSet::from(["a1", "a2", "b"]);
        let resized = BTreeSet::from(["o1".to_string(), "o2".to_string(), "o3".to_string()]);
        // From scratch, n1 has no named worker left and its resized workers would stay.
        assert_eq!(in_place_choice(&pods, &named), BTreeSet::from(["o4"]));
        // o1 and o2 leave; o4 stands in for o3 on n2.
        assert_eq!(in_place_leaving(&pods, &named, &resized, 3), BTreeSet::from(["o1", "o2", "o4"]));
        // Never more than the excess.
        assert_eq!(in_place_leaving(&pods, &named, &resized, 1).len(), 1);
        // Nothing resized yet: the in-place choice, as before.
        assert_eq!(in_place_leaving(&pods, &named, &BTreeSet::new(), 1), BTreeSet::from(["o4"]));
    }

    #[test]
    fn never_more_than_the_excess_and_leaving_or_gone_workers_do_not_count() {
        let mut leaving = pod("gone", Some("n1"), "Running", true, "2026-01-01T00:00:00Z");
        leaving.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()));
        let pods = [
            leaving,
            pod("a", Some("n1"), "Running", true, "2026-01-01T00:00:00Z"),
            pod("b", Some("n1"), "Running", true, "2026-01-01T00:00:00Z"),
            pod("w", None, "Pending", false, "2026-01-01T00:00:00Z"),
        ];
        let leaving = plan(&pods, &BTreeSet::from(["gone", "a", "b"]), 1);
        assert_eq!(names(&leaving), ["a"], "one named running worker, the excess");
        assert!(plan(&pods, &BTreeSet::new(), 0).is_empty());
        assert_eq!(plan(&pods, &BTreeSet::new(), 9).len(), 3, "only active pods can leave");
    }
}
