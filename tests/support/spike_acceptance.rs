//! The acceptance of the side-by-side spike replay on a real scheduler, judged per
//! configuration from one run's figures: colocate's Unschedulable online pod-seconds against
//! the baseline's of the same run, and replay against live.
//!
//! Every run prints and reports the verdicts; `tests/spike_replay.rs` asserts them for every
//! configuration: replay within bounds of live, and no target that replay claims met and live
//! misses. A target that both miss is reported, not asserted: replay's figure is then the
//! honest one, and the test's job is that no replay figure goes unbacked.

use serde_json::{json, Value};

/// What colocate is held to in one configuration: its pending pod-seconds at most `pct` of the
/// baseline's, and where the target says so, no worker killed or forced.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Target {
    pub pct: f64,
    pub nothing_killed: bool,
}

/// The target for `config`, if it has one.
pub fn target(config: &str) -> Option<Target> {
    let (pct, nothing_killed) = match config {
        "load-signal-fast-release" => (5.0, true),
        "load-signal-grace30" => (20.0, false),
        "hpa-only-grace30" => (45.0, false),
        // BestEffort workers request no CPU or memory an online pod needs: nothing waits for
        // them and the scheduler has nothing to preempt, whatever their release time.
        "usage-hpa-only-grace30" | "usage-load-signal-grace30" => (0.0, true),
        _ => return None,
    };
    Some(Target { pct, nothing_killed })
}

/// Replay predicts live pod-seconds: within ±30%, or within 100 pod-s when live is under 400.
pub fn pod_s_agree(replay: f64, live: f64) -> bool {
    if live < 400.0 {
        (replay - live).abs() <= 100.0
    } else {
        (replay / live - 1.0).abs() <= 0.30 + 1e-9
    }
}

/// Replay predicts the workers the scheduler preempted: within ±30%, or within 3.
pub fn killed_agree(replay: u64, live: usize) -> bool {
    let (r, l) = (replay as f64, live as f64);
    (r - l).abs() <= 3.0 || (l > 0.0 && (r / l - 1.0).abs() <= 0.30 + 1e-9)
}

/// Replay predicts how much CPU the running workers ask for (in usage mode, where nothing waits
/// or is killed, what the configuration shows is how far colocate shrinks the jobs): the
/// window's mean within ±15%, or within 8 cores (a couple of workers of any size).
pub fn worker_cpu_agree(replay_cores: f64, live_cores: f64) -> bool {
    (replay_cores - live_cores).abs() <= 8.0 + 1e-9
        || (live_cores > 0.0 && (replay_cores / live_cores - 1.0).abs() <= 0.15 + 1e-9)
}

/// The configuration that differs from `config` only in leaving out the load signal
/// (`load-signal-grace30` -> `hpa-only-grace30`), if `config` uses it.
pub fn without_load_signal(config: &str) -> Option<String> {
    config.contains("load-signal-").then(|| config.replacen("load-signal-", "hpa-only-", 1))
}

/// The load signal leads the HPA; it must not make things worse than the HPA alone: its
/// configuration's pending pod-seconds and killed workers at most the HPA-only twin's, within
/// the noise between runs the agreement bounds allow (30%, or 100 pod-s and 3 workers).
pub fn lead_no_worse(lead: (f64, u64), hpa_only: (f64, u64)) -> bool {
    let (pod_s, killed) = (lead.0, lead.1 as f64);
    let (hpa_pod_s, hpa_killed) = (hpa_only.0, hpa_only.1 as f64);
    pod_s <= hpa_pod_s + (0.30 * hpa_pod_s).max(100.0) + 1e-9
        && killed <= hpa_killed + (0.30 * hpa_killed).max(3.0) + 1e-9
}

/// One configuration's figures, in the terms the acceptance judges.
#[derive(Clone, Copy, Debug)]
pub struct Judged {
    pub live_baseline_pod_s: f64,
    pub live_baseline_killed: usize,
    pub live_pod_s: f64,
    pub live_killed: usize,
    pub live_forced: f64,
    pub replay_baseline_pod_s: f64,
    pub replay_baseline_killed: u64,
    pub replay_pod_s: f64,
    pub replay_killed: u64,
    pub replay_forced: u64,
}

/// The verdicts on one configuration.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub config: String,
    /// colocate's pending pod-seconds as a percentage of the baseline's, live.
    pub pending_pct: f64,
    pub target_pct: Option<f64>,
    /// Within the target (and, where asked, nothing killed or forced), live; `None` without a
    /// target.
    pub target_met: Option<bool>,
    /// The same, by replay's figures (against replay's baseline).
    pub replay_target_met: Option<bool>,
    /// Replay against live, for the baseline and for colocate: pod-seconds, killed workers.
    pub baseline_agrees: (bool, bool),
    pub colocate_agrees: (bool, bool),
}

impl Verdict {
    pub fn judge(config: &str, j: &Judged) -> Verdict {
        let pending_pct = 100.0 * j.live_pod_s / j.live_baseline_pod_s.max(1e-9);
        let replay_pct = 100.0 * j.replay_pod_s / j.replay_baseline_pod_s.max(1e-9);
        let target = target(config);
        let met = |pct: f64, killed_none: bool| target.map(|t| pct <= t.pct && (killed_none || !t.nothing_killed));
        Verdict {
            config: config.to_string(),
            pending_pct,
            target_pct: target.map(|t| t.pct),
            target_met: met(pending_pct, j.live_killed == 0 && j.live_forced == 0.0),
            replay_target_met: met(replay_pct, j.replay_killed == 0 && j.replay_forced == 0),
            baseline_agrees: (
                pod_s_agree(j.replay_baseline_pod_s, j.live_baseline_pod_s),
                killed_agree(j.replay_baseline_killed, j.live_baseline_killed),
            ),
            colocate_agrees: (pod_s_agree(j.replay_pod_s, j.live_pod_s), killed_agree(j.replay_killed, j.live_killed)),
        }
    }

    /// Replay predicts live: within bounds on both policies, and no target that replay claims
    /// met is missed live.
    pub fn holds(&self) -> bool {
        let (a, b) = (self.baseline_agrees, self.colocate_agrees);
        let claim_backed = !(self.replay_target_met == Some(true) && self.target_met == Some(false));
        claim_backed && a.0 && a.1 && b.0 && b.1
    }

    pub fn line(&self) -> String {
        let mark = |ok: bool| if ok { "ok" } else { "MISSED" };
        let target = match (self.target_pct, self.target_met, self.replay_target_met) {
            (Some(t), Some(met), Some(replay)) => {
                format!("target <= {t:.0}%: live {}, replay {}", mark(met), mark(replay))
            }
            _ => "no target".to_string(),
        };
        format!(
            "{:<30} pending {:>5.1}% of the baseline ({target}); replay vs live: baseline pod-s {}, killed {}; \
             colocate pod-s {}, killed {}",
            self.config,
            self.pending_pct,
            mark(self.baseline_agrees.0),
            mark(self.baseline_agrees.1),
            mark(self.colocate_agrees.0),
            mark(self.colocate_agrees.1),
        )
    }

    pub fn to_json(&self) -> Value {
        json!({
            "pending_pct_of_baseline": self.pending_pct,
            "target_pct": self.target_pct,
            "target_met": self.target_met,
            "replay_target_met": self.replay_target_met,
            "replay_agrees": {
                "preemption": {"online_unschedulable_pod_s": self.baseline_agrees.0, "scheduler_preemptions": self.baseline_agrees.1},
                "colocate": {"online_unschedulable_pod_s": self.colocate_agrees.0, "scheduler_preemptions": self.colocate_agrees.1},
            },
        })
    }
}
