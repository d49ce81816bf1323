//! Where a new worker goes: the placement rule ([`fit`]), applied by a scan over every node
//! ([`place_one`]) where the planner places a few workers, and by the [`Placer`], which finds the
//! same node in O(log n) per worker for the fill's thousands of workers on thousands of nodes.
//!
//! The [`Placer`] keeps, for every distinct worker shape, the nodes where such a worker fits,
//! ordered by the rule's key: the first is the node the rule picks. Taking room on a node
//! re-files that node for every shape.

use std::collections::BTreeSet;

use super::capacity::NodeRoom;
use super::resources::Resources;

/// Whether a worker may go on a node the latency guard holds for growth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holds {
    /// Growth: no new worker on a held node.
    Respect,
    /// A worker the job is starting: it was granted, and keeps its claim even on a held node.
    Ignore,
}

/// A node's rank for one worker shape, smaller first: whether the worker would push out a
/// lower-priority worker there, then the training room left in CPU, memory and GPUs, then the
/// node's index.
type Key = (bool, i64, i64, i64, usize);

/// The placement rule. A worker may go on a schedulable node (without a growth hold, unless
/// `holds` says to ignore it) where it fits the training room. Nodes where it fits without
/// displacing a lower-priority worker (whose room `held_below` counts) come first; among them
/// the tightest fit: the least CPU left, then memory, then GPUs (a CPU worker prefers a node
/// without spare GPUs), then the lowest index. For one shape the room before placing orders
/// nodes as the room left after it does, so the key is the room before: it stays valid in the
/// [`Placer`] until the node's room changes. `None` when the worker may not go there.
fn fit(node: usize, room: &NodeRoom, held_below: Resources, worker: &Resources, holds: Holds) -> Option<Key> {
    let open = match holds {
        Holds::Respect => room.open_to_growth(),
        Holds::Ignore => room.schedulable,
    };
    if !open || !worker.fits_in(&room.training_room) {
        return None;
    }
    let displaces = !worker.fits_in(&(room.training_room - held_below));
    let r = room.training_room;
    Some((displaces, r.cpu_milli, r.memory_bytes, r.gpu, node))
}

/// Places one `worker` by the rule with a scan over every node and takes its room; `None` when
/// it fits nowhere.
pub fn place_one(rooms: &mut [NodeRoom], held_below: &[Resources], worker: &Resources, holds: Holds) -> Option<usize> {
    let best = rooms.iter().enumerate().filter_map(|(i, room)| fit(i, room, held_below[i], worker, holds)).min();
    let node = best?.4;
    rooms[node].training_room -= *worker;
    Some(node)
}

pub struct Placer {
    shapes: Vec<Resources>,
    /// Per shape: the nodes where such a worker may go, by the rule's key.
    sets: Vec<BTreeSet<Key>>,
    /// Per shape and node: the key the node is filed under.
    filed: Vec<Vec<Option<Key>>>,
    held_below: Vec<Resources>,
}

impl Placer {
    /// Files every schedulable node without a growth hold for each shape in `shapes`.
    pub fn new(rooms: &[NodeRoom], held_below: &[Resources], shapes: &[Resources]) -> Placer {
        let mut unique: Vec<Resources> = Vec::new();
        for s in shapes {
            if !unique.contains(s) {
                unique.push(*s);
            }
        }
        let mut p = Placer {
            sets: unique.iter().map(|_| BTreeSet::new()).collect(),
            filed: unique.iter().map(|_| vec![None; rooms.len()]).collect(),
            shapes: unique,
            held_below: held_below.to_vec(),
        };
        // Filed in bulk: a BTreeSet built from all its keys at once is built in linear time after
        // the sort, where one insert per node costs a descent each (5,000 nodes, six builds a
        // decision).
        let mut keys: Vec<Vec<Key>> = p.shapes.iter().map(|_| Vec::new()).collect();
        for (node, room) in rooms.iter().enumerate() {
            for (s, shape) in p.shapes.iter().enumerate() {
                if let Some(key) = fit(node, room, p.held_below[node], shape, Holds::Respect) {
                    keys[s].push(key);
                    p.filed[s][node] = Some(key);
                }
            }
        }
        for (set, keys) in p.sets.iter_mut().zip(keys) {
            *set = BTreeSet::from_iter(keys);
        }
        p
    }

    fn file(&mut self, node: usize, room: &NodeRoom) {
        for s in 0..self.shapes.len() {
            if let Some(key) = self.filed[s][node].take() {
                self.sets[s].remove(&key);
            }
            let Some(key) = fit(node, room, self.held_below[node], &self.shapes[s], Holds::Respect) else { continue };
            self.sets[s].insert(key);
            self.filed[s][node] = Some(key);
        }
    }

    /// Takes room for one `worker` on the node the rule picks; `None` when it fits nowhere.
    pub fn place(&mut self, rooms: &mut [NodeRoom], worker: &Resources) -> Option<usize> {
        let s = self.shapes.iter().position(|x| x == worker)?;
        let node = self.sets[s].first()?.4;
        rooms[node].training_room -= *worker;
        self.file(node, &rooms[node]);
        Some(node)
    }

    /// Gives room back (a gang floor that could not be placed whole).
    pub fn give_back(&mut self, rooms: &mut [NodeRoom], node: usize, worker: &Resources) {
        rooms[node].training_room += *worker;
        self.file(node, &rooms[node]);
    }
}
