//! The engine's view of a spike window being played (`window.rs` plays it): when the jobs are
//! filled and the controller starts, what the controller samples, the HPA syncs of the
//! scenario's `online-only` replay still to play, and the client the ReplicaSets create pods
//! through.

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
    /// Where Prometheus' scrapes of the pods' usage fall, as an offset into the scrape interval:
    /// against the spike, that is chance in a live run.
    pub usage_scrape_phase_s: f64,
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

/// The ReplicaSet controller's API client in kube-controller-manager: each of its controllers
/// has its own, at `--kube-api-qps` 20 and `--kube-api-burst` 30 by default, shared by every
/// ReplicaSet. In a window a scale-up's pods are created through it: at once while the burst
/// lasts, then 20 a second. Measured in `--v=5` kube-scheduler logs: on the WorldCup spike the
/// pods of every sync reach the scheduler 0.01-0.02 s after the scale, 12, 24 and 29 of them
/// within 0.2 s, and 48 as 30 within 0.1 s then 18 at 20 a second; on the flash crowd, 25 in
/// 0.7 s and 50 in 1.0 s, some syncs starting 0.4 s late. That delay is not modelled and not
/// explained: the controller's other requests (deleting released workers, creating
/// replacements, status writes) may have spent the burst.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClientBucket {
    tokens: f64,
    at: f64,
}

impl ClientBucket {
    const PER_S: f64 = 20.0;
    const BURST: f64 = 30.0;

    pub fn full(at: f64) -> ClientBucket {
        ClientBucket { tokens: Self::BURST, at }
    }

    /// When a request made at `now` (or after the requests already queued) goes out.
    pub fn take(&mut self, now: f64) -> f64 {
        if now > self.at {
            self.tokens = (self.tokens + (now - self.at) * Self::PER_S).min(Self::BURST);
            self.at = now;
        }
        if self.tokens < 1.0 {
            self.at += (1.0 - self.tokens) / Self::PER_S;
            self.tokens = 1.0;
        }
        self.tokens -= 1.0;
        self.at
    }
}
