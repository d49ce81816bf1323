//! A service's Deployment following its HPA: the pods of a scale-up, as its ReplicaSet creates
//! them, and the pods a scale-down removes.

use super::cluster::PodKind;
use super::engine::World;

impl World<'_> {
    /// The Deployment follows the HPA: new pods are created pending (in a window, paced as its
    /// ReplicaSet creates them); on scale-down, pods not yet created go first, then pending
    /// ones, then not-ready ones, then the newest.
    pub(super) fn set_replicas(&mut self, s: usize, desired: u32) {
        let now = self.now;
        let mut pods: Vec<(u64, bool, bool)> = self
            .cluster
            .pods
            .iter()
            .filter(|(_, p)| p.kind == (PodKind::Online { service: s }) && p.leaving_at.is_none())
            .map(|(id, p)| (*id, p.node.is_some(), p.is_ready(now)))
            .collect();
        let creating = &mut self.services[s].creating;
        let have = (pods.len() + creating.len()) as u32;
        if desired > have {
            for _ in have..desired {
                // Full replays (steps of a second or more) and the window's fill create pods at once.
                let at = match self.window.as_mut() {
                    Some(w) if w.filled => w.kcm.take(now),
                    _ => now,
                };
                creating.push_back(at);
            }
            self.create_due_pods(s);
        } else if desired < have {
            let mut excess = have - desired;
            // Creations not yet sent are dropped; the bucket keeps their tokens spent (a scale-down
            // inside the second a scale-up is still being created: not seen in a spike window).
            while excess > 0 && creating.pop_back().is_some() {
                excess -= 1;
            }
            pods.sort_by_key(|(id, bound, ready)| (*bound, *ready, std::cmp::Reverse(*id)));
            for (id, _, _) in pods.into_iter().take(excess as usize) {
                self.cluster.delete(id, now, 0.0);
            }
        }
    }

    /// Creates the pods of service `s` whose time has come.
    pub(super) fn create_due_pods(&mut self, s: usize) {
        let svc = &self.scenario.spec.services[s];
        while self.services[s].creating.front().is_some_and(|at| *at <= self.now + 1e-9) {
            self.services[s].creating.pop_front();
            let name = format!("{}-{}", svc.name, self.services[s].next_pod);
            self.services[s].next_pod += 1;
            self.cluster.create(name, PodKind::Online { service: s }, svc.replica.resources(), self.now);
        }
    }
}
