//! Each service's online pods counted once per decision (bound, ready, pending), so that the
//! forecast's calibration and the online needs read the same counts.

use super::name_map::NameMap;
use super::pod_index::PodIndex;
use super::resources::Resources;
use super::snapshot::{PodClass, Snapshot};

/// One service's online pods that are not terminating.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaCounts {
    /// Bound to a node.
    pub bound: u32,
    /// Bound and ready.
    pub ready: u32,
    /// Not bound yet.
    pub pending: u32,
}

impl ReplicaCounts {
    fn add(&mut self, bound: bool, ready: bool) {
        if bound {
            self.bound += 1;
            self.ready += u32::from(ready);
        } else {
            self.pending += 1;
        }
    }
}

pub struct OnlineCounts<'a> {
    /// Per service of the snapshot, in its order.
    pub known: Vec<ReplicaCounts>,
    /// Services the controller was not told about, with the requests of their first pending pod.
    pub unknown: NameMap<&'a str, (ReplicaCounts, Option<Resources>)>,
}

impl<'a> OnlineCounts<'a> {
    pub fn of(snap: &'a Snapshot, index: &PodIndex) -> OnlineCounts<'a> {
        let mut counts =
            OnlineCounts { known: vec![ReplicaCounts::default(); snap.services.len()], unknown: NameMap::default() };
        for (p, pod) in snap.pods.iter().enumerate() {
            let PodClass::Online { service } = &pod.class else { continue };
            if pod.terminating() {
                continue;
            }
            let c = match index.owner_of(p) {
                Some(s) => &mut counts.known[s],
                None => {
                    let e = counts.unknown.entry(&**service).or_default();
                    if pod.node.is_none() {
                        e.1.get_or_insert(pod.requests);
                    }
                    &mut e.0
                }
            };
            c.add(pod.node.is_some(), pod.ready);
        }
        counts
    }
}
