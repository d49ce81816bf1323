//! The fill of one priority level: weighted dominant-resource-share water filling of the room
//! left after keeping, one worker at a time, each on the tightest node that fits it. plan.rs
//! fills twice: a dry run for what each job could have (counted when it can be, `fill_counts`),
//! then the fill the damping allows.

use super::capacity::NodeRoom;
use super::placer::Placer;
use super::resources::Resources;
use super::snapshot::Job;

/// One job in a fill.
pub struct FillEntry {
    pub job: usize,
    /// Breaks ties of share: the waiting job's place in the queue.
    pub rank: usize,
    pub worker: Resources,
    pub weight: f64,
    /// Its floor: a job at zero gets this many at once or none.
    pub min: u32,
    /// Workers it has before the fill.
    pub start: u32,
    /// Workers it has so far.
    pub count: u32,
    /// Workers it may have at most.
    pub cap: u32,
    /// Still taking workers.
    pub active: bool,
}

impl FillEntry {
    /// Job `j` of the snapshot with `start` workers kept, up to `cap`.
    pub fn new(j: usize, job: &Job, weight: f64, start: u32, cap: u32, rank: usize) -> Self {
        FillEntry {
            job: j,
            rank,
            worker: job.worker,
            weight,
            min: job.min_workers.max(1),
            start,
            count: start,
            cap,
            active: true,
        }
    }

    fn share(&self, total: &Resources) -> f64 {
        self.worker.times(self.count as i64).dominant_share(total) / self.weight
    }
}

/// Weighted dominant-resource-share water filling: the job furthest below its fair share gets
/// the next worker; a job at zero gets its whole floor at once or nothing (gang floor). Each
/// worker goes on the tightest node that fits it (the Placer).
pub fn water_fill(rooms: &mut [NodeRoom], held_below: &[Resources], entries: &mut [FillEntry], total: &Resources) {
    let shapes: Vec<Resources> = entries.iter().map(|e| e.worker).collect();
    let placer = Placer::new(rooms, held_below, &shapes);
    fill_by_share(entries, total, &mut OnNodes { placer, rooms });
}

/// How many workers each job would get from `water_fill`, without placing them: when every job
/// of the fill has the same worker shape, which node takes a worker changes nothing about how
/// many fit in all (each node holds as many as fit in its room, whoever's they are), so the
/// dry run of plan_jobs counts slots instead of keeping nodes ordered (30,000 placements at
/// 5,000 nodes). False, counting nothing, when the shapes differ.
pub fn fill_counts(rooms: &[NodeRoom], entries: &mut [FillEntry], total: &Resources) -> bool {
    let Some(worker) = entries.first().map(|e| e.worker) else { return true };
    if entries.iter().any(|e| e.worker != worker) {
        return false;
    }
    let slots: u64 = rooms
        .iter()
        .filter(|r| r.open_to_growth())
        .map(|r| how_many_fit(&worker, &r.training_room))
        .fold(0, u64::saturating_add);
    fill_by_share(entries, total, &mut Counted(slots));
    true
}

/// Workers like `worker` that fit side by side in `room`, by `Resources::fits_in`'s rule in each
/// dimension (a dimension the worker does not need, or needs less than nothing of, never runs
/// out once it fits).
fn how_many_fit(worker: &Resources, room: &Resources) -> u64 {
    let per = |need: i64, have: i64| match need {
        _ if have < need => 0,
        need if need > 0 => (have / need) as u64,
        _ => u64::MAX,
    };
    per(worker.cpu_milli, room.cpu_milli)
        .min(per(worker.memory_bytes, room.memory_bytes))
        .min(per(worker.gpu, room.gpu))
}

/// Where a fill takes room for one worker.
trait Room {
    /// Takes room for one `worker`: its node, or `None` when none fits.
    fn take(&mut self, worker: &Resources) -> Option<usize>;
    /// Returns what `take` took (a gang floor that could not be placed whole).
    fn give_back(&mut self, node: usize, worker: &Resources);
}

/// On the tightest node that fits.
struct OnNodes<'a> {
    placer: Placer,
    rooms: &'a mut [NodeRoom],
}

impl Room for OnNodes<'_> {
    fn take(&mut self, worker: &Resources) -> Option<usize> {
        self.placer.place(self.rooms, worker)
    }

    fn give_back(&mut self, node: usize, worker: &Resources) {
        self.placer.give_back(self.rooms, node, worker);
    }
}

/// Slots for workers of one shape, counted (see `fill_counts`); every worker is on "node" 0.
struct Counted(u64);

impl Room for Counted {
    fn take(&mut self, _: &Resources) -> Option<usize> {
        self.0 = self.0.checked_sub(1)?;
        Some(0)
    }

    fn give_back(&mut self, _: usize, _: &Resources) {
        self.0 += 1;
    }
}

/// The water filling itself, taking room from `room`.
fn fill_by_share(entries: &mut [FillEntry], total: &Resources, room: &mut impl Room) {
    // Kept per entry and updated when its count changes (see keep_level).
    let mut shares: Vec<f64> = entries.iter().map(|e| e.share(total)).collect();
    loop {
        let next = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.active)
            .min_by(|(ia, a), (ib, b)| shares[*ia].total_cmp(&shares[*ib]).then(a.rank.cmp(&b.rank)).then(ia.cmp(ib)))
            .map(|(i, _)| i);
        let Some(i) = next else { return };
        let e = &mut entries[i];
        let need = if e.count == 0 { e.min } else { 1 };
        if e.count + need > e.cap {
            e.active = false;
            continue;
        }
        let mut got = Vec::with_capacity(need as usize);
        for _ in 0..need {
            match room.take(&e.worker) {
                Some(node) => got.push(node),
                None => break,
            }
        }
        if got.len() < need as usize {
            for node in got {
                room.give_back(node, &e.worker);
            }
            e.active = false;
            continue;
        }
        e.count += need;
        shares[i] = e.share(total);
    }
}
