//! The engine's view of a spike window being played (`window.rs` plays it): when the jobs are
//! filled and the controller starts, what the controller samples, and the HPA syncs of the
//! scenario's `online-only` replay still to play.

use super::deployment::ClientBucket;
use super::service::{HpaState, HpaSync};

/// The engine's view of a window being played.
pub(crate) struct Window {
    /// The window opens here.
    pub from_s: f64,
    /// The run stops here.
    pub until: f64,
    /// Replay's step inside the window run ([`WINDOW_STEP_S`](super::window::WINDOW_STEP_S) at most).
    pub step_s: f64,
    /// When the jobs are filled and the controller starts.
    pub jobs_at: f64,
    pub load_signal: bool,
    pub latency_signal: bool,
    /// Per service, the syncs still to play, the next last.
    pub(super) script: Vec<Vec<HpaSync>>,
    pub filled: bool,
    /// kube-controller-manager's requests, through which the ReplicaSets create pods.
    pub kcm: ClientBucket,
}

impl Window {
    pub fn scripted(&self) -> bool {
        !self.script.is_empty()
    }

    /// Plays service `s`'s scripted sync due at `now`, if any: the HPA's status as the script
    /// says, and the replicas to set.
    pub fn scripted_sync(&mut self, s: usize, now: f64, hpa: &mut HpaState) -> Option<u32> {
        self.play_until(s, |at| at <= now + 1e-9, hpa)
    }

    /// Plays service `s`'s scripted syncs for which `due(at_s)` holds, at once: the last one
    /// sets the HPA's status and the replicas returned.
    pub(super) fn play_until(&mut self, s: usize, due: impl Fn(f64) -> bool, hpa: &mut HpaState) -> Option<u32> {
        let syncs = self.script.get_mut(s)?;
        let mut played = None;
        while syncs.last().is_some_and(|sync| due(sync.at_s)) {
            played = syncs.pop();
        }
        let sync = played?;
        hpa.desired = sync.desired;
        hpa.observed = sync.observed;
        hpa.observed_replicas = sync.current;
        Some(sync.desired)
    }
}
