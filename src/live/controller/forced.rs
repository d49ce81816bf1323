//! Past a shrink's deadline the controller removes workers itself (master protocol v1,
//! `deadline_s`). Which ones, and how many, is decided here from the job's worker pods as the
//! cluster state holds them; pure.

use std::collections::VecDeque;

use tokio::time::Instant;

use crate::live::state::WorkerPod;

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
pub fn choose(workers: &[WorkerPod], target: u32, min: u32, named: &[String]) -> Vec<Victim> {
    let mut live: Vec<&WorkerPod> = workers.iter().filter(|w| w.holding).collect();
    let keep = target.max(min) as usize;
    if live.len() <= keep {
        return Vec::new();
    }
    let rank = |w: &WorkerPod| {
        let named_at = named.iter().position(|x| *x == w.name).unwrap_or(usize::MAX);
        (named_at, std::cmp::Reverse(w.name.clone()))
    };
    live.sort_by_key(|w| rank(w));
    let excess = live.len() - keep;
    live.into_iter().take(excess).map(|w| Victim { name: w.name.clone(), uid: w.uid.clone() }).collect()
}

#[cfg(test)]
mod tests {

    use super::*;

    fn worker(name: &str, node: Option<&str>, terminating: bool) -> WorkerPod {
        WorkerPod { name: name.into(), uid: Some(format!("uid-{name}")), holding: node.is_some() && !terminating }
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
            worker("w-0", Some("n1"), false),
            worker("w-1", Some("n1"), false),
            worker("w-2", None, false),
            worker("w-3", Some("n2"), false),
            worker("w-4", Some("n2"), false),
        ];
        let v = choose(&pods, 1, 1, &["w-1".to_string(), "gone".to_string()]);
        assert_eq!(names(&v), ["w-1", "w-4", "w-3"], "4 bound, keep 1; w-2 is pending");
        assert_eq!(v[0].uid.as_deref(), Some("uid-w-1"));
    }

    #[test]
    fn never_below_the_floor_and_leaving_pods_do_not_count() {
        let pods = [
            worker("w-0", Some("n1"), false),
            worker("w-1", Some("n1"), true),
            worker("w-2", Some("n1"), false),
            worker("w-3", Some("n1"), false),
        ];
        assert_eq!(names(&choose(&pods, 0, 2, &[])), ["w-3"], "target 0 but floor 2");
        assert!(choose(&pods, 3, 1, &[]).is_empty(), "3 live workers, target 3");
    }
}
