//! What the core asks the actuators to do.

use std::fmt;

use super::resources::Resources;

/// Why a job's worker count changes; exported as a metric label and sent to masters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// Online pods (existing, decided by the HPA, or forecast) need the room.
    OnlineHeadroom,
    /// A service's latency slack fell below the shrink threshold.
    LatencyGuard,
    /// A higher-priority job takes the room.
    HigherPriority,
    /// Jobs of the same priority waiting for their floor take the room of this job's extras.
    FairShare,
    /// The job cannot keep its floor and gives way entirely.
    GiveWay,
    /// Spare room, stable for the stabilization window.
    Grow,
    /// A waiting job's floor fits: it starts.
    Start,
}

impl Reason {
    pub const ALL: [Reason; 7] = [
        Reason::OnlineHeadroom,
        Reason::LatencyGuard,
        Reason::HigherPriority,
        Reason::FairShare,
        Reason::GiveWay,
        Reason::Grow,
        Reason::Start,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            Reason::OnlineHeadroom => "online-headroom",
            Reason::LatencyGuard => "latency-guard",
            Reason::HigherPriority => "higher-priority",
            Reason::FairShare => "fair-share",
            Reason::GiveWay => "give-way",
            Reason::Grow => "grow",
            Reason::Start => "start",
        }
    }

    pub fn is_shrink(&self) -> bool {
        !matches!(self, Reason::Grow | Reason::Start)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Move `job` from `from` to `target` workers.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleIntent {
    pub job: String,
    pub from: u32,
    /// 0 means the job gives way entirely (it cannot keep its floor).
    pub target: u32,
    /// Workers the controller prefers the job to lose, most wanted first.
    pub release_pods: Vec<String>,
    /// Nodes where room is needed, for adapters that cannot name pods.
    pub release_nodes: Vec<String>,
    pub reason: Reason,
    /// A sentence a person can read: what changes and why.
    pub why: String,
}

/// Room for training on one node as decided; exported per node.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeCapacity {
    pub node: String,
    pub allocatable: Resources,
    /// Held for online pods that do not exist or are not bound yet.
    pub reserved_online: Resources,
    /// What training may hold here (residual capacity after all reservations and the margin).
    pub training_room: Resources,
    /// What the plan leaves training holding here.
    pub training_planned: Resources,
    /// `capacity: usage`: the batch capacity the node should carry (CPU and memory; see
    /// `publish`); `None` in `capacity: requests`.
    pub batch: Option<Resources>,
}
