//! Each pod's node, service and job as positions in the snapshot, looked up once per decision.
//!
//! Every pass of a decision (calibration, online needs, node rooms, latency guard, the job
//! plan) walks the pods and needs to know where each one is and whom it belongs to. Looking the
//! names up in every pass takes most of a decision at 150,000 pods (`benches/live_state.rs`);
//! this does it once.

use super::name_map::NameMap;
use super::snapshot::{PodClass, SharedName, Snapshot};

/// Per pod of a snapshot, in its order: `[node, owner]`, each `NONE` when absent.
///
/// `node` is the position in `snap.nodes` of the node the pod is bound to (`NONE` while it is
/// pending, or when its node is not in the snapshot: it then holds no room the core knows of).
/// `owner` is the position in `snap.services` of an online pod's service, or in `snap.jobs` of a
/// worker's or master's job (`NONE` for system pods, and for services or jobs the snapshot does
/// not have). One vector of pairs: a decision reads both for most pods, and it is half the
/// memory of two of `Option<u32>`.
#[derive(Clone, Debug, Default)]
pub struct PodIndex {
    of: Vec<[u32; 2]>,
}

const NONE: u32 = u32::MAX;

impl PodIndex {
    pub fn new(snap: &Snapshot) -> PodIndex {
        let mut nodes = Positions::new(snap.nodes.iter().map(|n| n.name.as_str()));
        let mut services = Positions::new(snap.services.iter().map(|s| s.name.as_str()));
        let mut jobs = Positions::new(snap.jobs.iter().map(|j| j.name.as_str()));
        let of = snap
            .pods
            .iter()
            .map(|pod| {
                let node = pod.node.as_ref().and_then(|name| nodes.of(name));
                let owner = match &pod.class {
                    PodClass::Online { service } => services.of(service),
                    PodClass::Worker { job } | PodClass::Master { job } => jobs.of(job),
                    PodClass::System => None,
                };
                [node.unwrap_or(NONE), owner.unwrap_or(NONE)]
            })
            .collect();
        PodIndex { of }
    }

    /// The node position of pod `p`.
    pub fn node_of(&self, p: usize) -> Option<usize> {
        Some(self.of[p][0]).filter(|&i| i != NONE).map(|i| i as usize)
    }

    /// The owner position of pod `p` (see [`PodIndex`]).
    pub fn owner_of(&self, p: usize) -> Option<usize> {
        Some(self.of[p][1]).filter(|&i| i != NONE).map(|i| i as usize)
    }
}

/// Positions of names in a list, found by name once per shared copy: pods that share a copy of
/// their node's name (`SharedName`, as the live state and replay give them) cost one pointer
/// lookup each instead of hashing and comparing the string. Valid for one snapshot, whose pods
/// keep every copy alive while it is used.
struct Positions<'a> {
    by_name: NameMap<&'a str, u32>,
    by_copy: NameMap<*const u8, Option<u32>>,
}

impl<'a> Positions<'a> {
    fn new(names: impl Iterator<Item = &'a str>) -> Positions<'a> {
        let position = |i: usize| u32::try_from(i).expect("fewer than 4 billion nodes, services and jobs");
        Positions { by_name: names.enumerate().map(|(i, n)| (n, position(i))).collect(), by_copy: NameMap::default() }
    }

    fn of(&mut self, name: &SharedName) -> Option<u32> {
        let by_name = &self.by_name;
        *self.by_copy.entry(name.as_ptr()).or_insert_with(|| by_name.get(&**name).copied())
    }
}
