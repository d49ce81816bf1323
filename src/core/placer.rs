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
        for (i, room) in rooms.iter().enumerate() {
            p.file(i, room);
        }
        p
    }

    fn file(&mut self, node: usize, room: &NodeRoom) {
        for s in 0..self.shapes.len() {
            if let Some((set, key)) = self.filed[s][node].take() {
                self.sets[s][set].remove(&key);
            }
            let shape = self.shapes[s];
            if !room.schedulable || room.hold_growth || !shape.fits_in(&room.training_room) {
                continue;
            }
            let set = usize::from(!shape.fits_in(&(room.training_room - self.held_below[node])));
            let r = room.training_room;
            let key = (r.cpu_milli, r.memory_bytes, r.gpu, node);
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
