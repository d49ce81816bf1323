//! Best-fit placement of workers in O(log n) per worker, for clusters of thousands of nodes.
//!
//! For every distinct worker shape it keeps two ordered sets of nodes where such a worker fits:
//! those where it fits without pushing out a lower-priority worker, and those where it fits only
//! by doing so. The first node of the first non-empty set is the tightest fit. Taking room on a
//! node re-files that node for every shape.

use std::collections::BTreeSet;

use super::capacity::NodeRoom;
use super::resources::Resources;

type Key = (i64, i64, i64, usize);

pub struct Placer {
    shapes: Vec<Resources>,
    /// Per shape: [fits without displacing, fits only by displacing].
    sets: Vec<[BTreeSet<Key>; 2]>,
    /// Per shape and node: which set holds the node, and under which key.
    filed: Vec<Vec<Option<(usize, Key)>>>,
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
            sets: unique.iter().map(|_| [BTreeSet::new(), BTreeSet::new()]).collect(),
            filed: unique.iter().map(|_| vec![None; rooms.len()]).collect(),
            shapes: unique,
            held_below: held_below.to_vec(),
        };
        // Filed in bulk: a BTreeSet built from all its keys at once is built in linear time after
        // the sort, where one insert per node costs a descent each (5,000 nodes, six builds a
        // decision).
        let mut keys: Vec<[Vec<Key>; 2]> = p.shapes.iter().map(|_| [Vec::new(), Vec::new()]).collect();
        for (node, room) in rooms.iter().enumerate() {
            for (s, shape) in p.shapes.iter().enumerate() {
                if let Some((set, key)) = p.filing(node, room, shape) {
                    keys[s][set].push(key);
                    p.filed[s][node] = Some((set, key));
                }
            }
        }
        for (sets, [fits, displaces]) in p.sets.iter_mut().zip(keys) {
            *sets = [BTreeSet::from_iter(fits), BTreeSet::from_iter(displaces)];
        }
        p
    }

    /// Where node `node` belongs for `shape`: which set and under which key; `None` when such a
    /// worker may not go there.
    fn filing(&self, node: usize, room: &NodeRoom, shape: &Resources) -> Option<(usize, Key)> {
        if !room.open_to_growth() || !shape.fits_in(&room.training_room) {
            return None;
        }
        let set = usize::from(!shape.fits_in(&(room.training_room - self.held_below[node])));
        let r = room.training_room;
        Some((set, (r.cpu_milli, r.memory_bytes, r.gpu, node)))
    }

    fn file(&mut self, node: usize, room: &NodeRoom) {
        for s in 0..self.shapes.len() {
            if let Some((set, key)) = self.filed[s][node].take() {
                self.sets[s][set].remove(&key);
            }
            let Some((set, key)) = self.filing(node, room, &self.shapes[s]) else { continue };
            self.sets[s][set].insert(key);
            self.filed[s][node] = Some((set, key));
        }
    }

    /// Takes room for one `worker` on the tightest node that fits it; `None` when none does.
    pub fn place(&mut self, rooms: &mut [NodeRoom], worker: &Resources) -> Option<usize> {
        let s = self.shapes.iter().position(|x| x == worker)?;
        let node = self.sets[s][0].first().or_else(|| self.sets[s][1].first()).map(|k| k.3)?;
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
