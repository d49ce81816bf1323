//! The policies a replay compares (scenario-v1.md, "Policies every replay compares").

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// This project's controller: the decision core shrinks and grows jobs through their masters,
    /// with the scenario's `controller` block as written (`capacity: requests` unless it says).
    Colocate,
    /// The controller with `capacity: usage`: workers request the batch capacity it publishes
    /// on each node (what online and system pods leave unused) and run BestEffort.
    ColocateUsage,
    /// No controller: elastic jobs start as large as fits; online pods preempt workers.
    Preemption,
    /// Rigid jobs, FIFO: the head job starts when all its `gang_workers` fit, and the jobs behind
    /// it wait; never resized; preemption kills whole jobs.
    Gang,
    /// Rigid jobs with backfill (kube-batch/Volcano): whenever room frees, every queued job that
    /// fits starts, in arrival order, so a big job at the head blocks no small one.
    GangBackfill,
    /// The services alone: the latency floor.
    OnlineOnly,
}

impl Policy {
    pub const ALL: [Policy; 6] = [
        Policy::Colocate,
        Policy::ColocateUsage,
        Policy::Preemption,
        Policy::Gang,
        Policy::GangBackfill,
        Policy::OnlineOnly,
    ];

    /// The decision core runs it.
    pub fn is_colocate(&self) -> bool {
        matches!(self, Policy::Colocate | Policy::ColocateUsage)
    }

    /// Rigid jobs at `gang_workers`, queued, preempted as a whole.
    pub fn is_gang(&self) -> bool {
        matches!(self, Policy::Gang | Policy::GangBackfill)
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Policy::Colocate => "colocate",
            Policy::ColocateUsage => "colocate-usage",
            Policy::Preemption => "preemption",
            Policy::Gang => "gang",
            Policy::GangBackfill => "gang-backfill",
            Policy::OnlineOnly => "online-only",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Policy::ALL.into_iter().find(|p| p.as_str() == s).ok_or_else(|| {
            let names: Vec<&str> = Policy::ALL.iter().map(|p| p.as_str()).collect();
            format!("unknown policy `{s}`, expected one of {}", names.join(", "))
        })
    }
}

/// A number in [0, 1) fixed by the seed and a name: the same pod gets the same draw under
/// every policy, so policies differ only by what they do.
pub fn draw(seed: u64, name: &str) -> f64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    // splitmix64 finalizer
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    (h >> 11) as f64 / (1u64 << 53) as f64
}
