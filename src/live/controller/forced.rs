//! Past a shrink's deadline the controller removes workers itself (master protocol v1,
//! `deadline_s`). Which ones, and how many, is decided here from the pod cache; pure.

use std::collections::VecDeque;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::time::Instant;

use crate::live::translate::{self, JOB_LABEL, ROLE_LABEL};

/// A worker pod to delete, with the uid it must still have (a StatefulSet may have replaced
/// the pod under the same name since, and that one must not be deleted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Victim {
    pub name: String,
    pub uid: Option<String>,
}

/// The shrink steps of one job still within their deadlines. Each command has its own: a
/// deeper shrink sent 1 s before an earlier one's deadline gets its full `deadline_s` too
/// (one deadline running from the first shrink with the latest target once deleted, at that
/// deadline, workers the master had been asked to release a moment before).
#[derive(Clone, Debug, Default)]
pub struct ShrinkSteps {
    /// `(due, target)` in the order sent, so dues never decrease.
    steps: VecDeque<(Instant, u32)>,
}

impl ShrinkSteps {
    /// A shrink to `target` sent now, with its deadline `due`.
    pub fn push(&mut self, due: Instant, target: u32) {
        self.steps.push_back((due, target));
    }

    /// When the earliest step falls due.
    pub fn next_due(&self) -> Option<Instant> {
        self.steps.front().map(|&(due, _)| due)
    }

    /// Removes the steps due by `now` and returns the lowest target among them: what the
    /// master has had its full deadline to reach. None when none is due.
    pub fn take_due(&mut self, now: Instant) -> Option<u32> {
        let mut lowest = None;
        while let Some(&(due, target)) = self.steps.front() {
            if due > now {
                break;
            }
            self.steps.pop_front();
            lowest = Some(lowest.map_or(target, |l: u32| l.min(target)));
        }
        lowest
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

/// Workers of `job` in `namespace` to delete so that at most `max(target, min)` stay bound to
/// nodes: the floor is never broken, whatever the command said. Only bound workers count and
/// are deleted: a pending one holds no room (and its controller would only recreate it), and
/// terminating or finished ones are already leaving. Order: the pods the command named (in its
/// order), then the rest by name, last first (the newest ordinals of StatefulSets; arbitrary
/// but stable otherwise).
pub fn choose(pods: &[Arc<Pod>], namespace: &str, job: &str, target: u32, min: u32, named: &[String]) -> Vec<Victim> {
    let mut live: Vec<&Pod> = pods
        .iter()
        .map(Arc::as_ref)
        .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
        .filter(|p| is_worker_of(p, job))
        .filter(|p| p.metadata.deletion_timestamp.is_none() && !translate::pod_is_finished(p))
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .collect();
    let keep = target.max(min) as usize;
    if live.len() <= keep {
        return Vec::new();
    }
    let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
    let rank = |p: &Pod| {
        let n = name(p);
        let named_at = named.iter().position(|x| *x == n).unwrap_or(usize::MAX);
        (named_at, std::cmp::Reverse(n))
    };
    live.sort_by_key(|p| rank(p));
    let excess = live.len() - keep;
    live.into_iter().take(excess).map(|p| Victim { name: name(p), uid: p.metadata.uid.clone() }).collect()
}

fn is_worker_of(p: &Pod, job: &str) -> bool {
    let labels = p.metadata.labels.as_ref();
    labels.and_then(|l| l.get(JOB_LABEL)).is_some_and(|j| j == job)
        && labels.and_then(|l| l.get(ROLE_LABEL)).is_some_and(|r| r == "worker")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn worker(name: &str, job: &str, node: Option<&str>, terminating: bool) -> Arc<Pod> {
        let mut v = json!({
            "metadata": {"namespace": "ml", "name": name, "uid": format!("uid-{name}"),
                "labels": {"colocate.dev/job": job, "colocate.dev/role": "worker"}},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": "Running"}
        });
        if terminating {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn names(v: &[Victim]) -> Vec<&str> {
        v.iter().map(|v| v.name.as_str()).collect()
    }

    #[test]
    fn each_shrink_step_gets_its_own_deadline() {
        let t0 = Instant::now();
        let s = std::time::Duration::from_secs;
        let mut steps = ShrinkSteps::default();
        steps.push(t0 + s(30), 51);
        steps.push(t0 + s(31), 45);
        steps.push(t0 + s(59), 21);
        assert_eq!(steps.next_due(), Some(t0 + s(30)));
        assert_eq!(steps.take_due(t0 + s(29)), None, "nothing due yet");
        assert_eq!(steps.take_due(t0 + s(31)), Some(45), "the two first steps are due; the lowest");
        assert_eq!(steps.next_due(), Some(t0 + s(59)), "the deeper shrink keeps its own 30 s");
        assert!(!steps.is_empty());
        assert_eq!(steps.take_due(t0 + s(60)), Some(21));
        assert!(steps.is_empty());
        assert_eq!(steps.take_due(t0 + s(90)), None);
    }

    #[test]
    fn named_first_then_last_by_name_and_pending_ones_are_left() {
        let pods = [
            worker("w-0", "wd", Some("n1"), false),
            worker("w-1", "wd", Some("n1"), false),
            worker("w-2", "wd", None, false),
            worker("w-3", "wd", Some("n2"), false),
            worker("w-4", "wd", Some("n2"), false),
            worker("other-0", "other", Some("n1"), false),
        ];
        let v = choose(&pods, "ml", "wd", 1, 1, &["w-1".to_string(), "gone".to_string()]);
        assert_eq!(names(&v), ["w-1", "w-4", "w-3"], "4 bound, keep 1; w-2 is pending");
        assert_eq!(v[0].uid.as_deref(), Some("uid-w-1"));
    }

    #[test]
    fn never_below_the_floor_and_leaving_pods_do_not_count() {
        let pods = [
            worker("w-0", "wd", Some("n1"), false),
            worker("w-1", "wd", Some("n1"), true),
            worker("w-2", "wd", Some("n1"), false),
            worker("w-3", "wd", Some("n1"), false),
        ];
        assert_eq!(names(&choose(&pods, "ml", "wd", 0, 2, &[])), ["w-3"], "target 0 but floor 2");
        assert!(choose(&pods, "ml", "wd", 3, 1, &[]).is_empty(), "3 live workers, target 3");
        assert!(choose(&pods, "other-ns", "wd", 0, 0, &[]).is_empty());
    }
}
