//! kube-scheduler v1.34's pace and queue in a window replay, where tenths of a second decide
//! which pod takes the room that frees (a full replay's steps of a second or more cannot
//! resolve them, so it has neither).
//!
//! **Pace.** One scheduling loop tries one pod at a time. A preemption's dry run over every
//! node costs [`PREEMPTION_ATTEMPT_S`] of it; a plain attempt [`PLAIN_ATTEMPT_S`]. Every
//! attempt also calls the API server through one client, `--kube-api-qps` 50 and
//! `--kube-api-burst` 100 by default, shared by the loop (a failed pod's status update,
//! synchronous while `SchedulerAsyncAPICalls` is off, as it is by default in 1.34), the binding
//! goroutines (one bind each) and the preemption goroutines (each victim deleted, and marked
//! `DisruptionTarget` the first time). Once the burst is spent, the loop waits for the
//! goroutines' calls as well as its own: kube-scheduler's `--v=5` log of WorldCup98's 70 s sync
//! on the test bed shows 43 preemptions of 2-4 victims each in the first second and the client
//! throttling 68 calls over the next two, so the sync's last pods are first tried 1.9 s after
//! its first.
//!
//! **Backoff.** A pod that failed waits in the unschedulable pods until an event may help it
//! (room freed); then it goes to the active queue if its backoff is over, else to the backoff
//! queue (`requeuePodWithQueueingStrategy`). Its backoff is 1 s doubled per failure, at most
//! 10 s, counted from its last failure and aligned to whole wall-clock seconds; the backoff
//! queue is flushed on each wall-clock second (`backoff_queue.go`: `getBackoffTime`,
//! `alignToWindow`, `isPodBackingoff`). The active queue goes first (priority, then the time
//! the pod was queued: created, or last failed); the backoff queue only when the active one is
//! empty (`SchedulerPopFromBackoffQ`, beta and on since 1.33). On the test bed this leaves 22
//! NGINX pods Unschedulable for 12 s beside 19 free CPUs in WorldCup98's spike: when a
//! release's room frees, the pods nominated for it are backing off from their first failure, a
//! newer pod still in the active queue finds that room held for them, preempts one more leaving
//! worker on the node and is nominated there too, and then nine nominated pods each find the
//! room the other eight hold.

/// How long one scheduling attempt that ends in a preemption keeps kube-scheduler's loop busy
/// (its dry run over every node): 8.7-26 ms a preemption, median 14.5 ms, in the six bursts of
/// two `--v=5` logs of the WorldCup98 spike on the test bed (a preemption's API calls run
/// asynchronously, `SchedulerAsyncPreemption`, on by default since 1.33). It decides whose
/// victims a master's releases can be: on the 55 s sync the scheduler has started 7 of 26
/// preemptions when the master's deletes of that sync's releases reach it (140-155 ms after the
/// sync), and the other 19 mostly pick those workers, already leaving, as victims. A replay
/// that tried every pod of a sync before the releases of its step land would kill 5 running
/// workers at the 40 s sync where live kills 3, and 17 in all where live kills 6-8.
pub const PREEMPTION_ATTEMPT_S: f64 = 0.0145;

/// An attempt that binds the pod or fails without a preemption: 13 binds in 21 ms when 19
/// nominated pods find their room at once (kube-scheduler's `--v=5` log of the WorldCup98
/// spike).
pub const PLAIN_ATTEMPT_S: f64 = 0.0016;

/// kube-scheduler's client: `--kube-api-qps`, `--kube-api-burst` (defaults).
const API_QPS: f64 = 50.0;
const API_BURST: f64 = 100.0;

/// `podInitialBackoffSeconds` and `podMaxBackoffSeconds` (defaults).
const INITIAL_BACKOFF_S: f64 = 1.0;
const MAX_BACKOFF_S: f64 = 10.0;

/// The scheduling loop's clock and its API client's tokens.
#[derive(Clone, Debug)]
pub struct SchedulerPace {
    /// Where the loop is: it tries the next pod at this time, or at the pass's, if later.
    loop_at: f64,
    /// The client's tokens (negative: calls waiting for a token), as of `tokens_at`.
    tokens: f64,
    tokens_at: f64,
    /// The most idle time the loop banks: the replay's step.
    idle_limit_s: f64,
}

/// What one attempt did, for its cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    Bound,
    Failed,
    /// Failed and preempted; `calls` are the victims' API calls.
    Preempted {
        calls: u32,
    },
}

impl SchedulerPace {
    /// An idle loop with a full client, for a replay whose passes are at most `idle_limit_s`
    /// apart.
    pub fn new(idle_limit_s: f64) -> SchedulerPace {
        SchedulerPace { loop_at: f64::NEG_INFINITY, tokens: API_BURST, tokens_at: 0.0, idle_limit_s }
    }

    /// A pass at `now` begins: an idle loop banks at most one step of the time since its last
    /// attempt.
    pub fn begin_pass(&mut self, now: f64) {
        self.loop_at = self.loop_at.max(now - self.idle_limit_s);
    }

    /// Whether the loop, where it is, has the time for one more attempt by `now`: one that
    /// preempts, or a plain one. The pods it does not reach wait for the next pass.
    pub fn reaches(&self, now: f64, preempts: bool) -> bool {
        let cost = if preempts { PREEMPTION_ATTEMPT_S } else { PLAIN_ATTEMPT_S };
        self.loop_at + cost <= now + 1e-9
    }

    /// The loop makes `attempt` where it is; it is free again when the attempt's own time and
    /// its synchronous call are done.
    pub fn attempt(&mut self, attempt: Attempt) {
        let at = self.loop_at;
        self.loop_at = match attempt {
            Attempt::Bound => {
                // The bind is a goroutine's; the loop goes on.
                self.take(at, 1.0);
                at + PLAIN_ATTEMPT_S
            }
            Attempt::Failed => self.take(at + PLAIN_ATTEMPT_S, 1.0),
            Attempt::Preempted { calls } => {
                let done = self.take(at + PREEMPTION_ATTEMPT_S, 1.0);
                self.take(at + PREEMPTION_ATTEMPT_S, f64::from(calls));
                done
            }
        };
    }

    /// Takes `calls` tokens at `t` (client-go's token bucket reserves in call order); returns
    /// when the last of them is granted.
    fn take(&mut self, t: f64, calls: f64) -> f64 {
        let t = t.max(self.tokens_at);
        self.tokens = (self.tokens + (t - self.tokens_at) * API_QPS).min(API_BURST) - calls;
        self.tokens_at = t;
        if self.tokens >= 0.0 {
            t
        } else {
            t - self.tokens / API_QPS
        }
    }
}

/// A pod's backoff after `failures` failed attempts (`calculateBackoffDuration`).
pub fn backoff_s(failures: u32) -> f64 {
    let doubled = INITIAL_BACKOFF_S * 2f64.powi(failures.saturating_sub(1).min(16) as i32);
    doubled.min(MAX_BACKOFF_S)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_second_up_to_ten() {
        let b: Vec<f64> = (1..=6).map(backoff_s).collect();
        assert_eq!(b, [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]);
    }

    #[test]
    fn the_loop_waits_for_tokens_once_the_burst_is_spent() {
        let mut p = SchedulerPace::new(0.1);
        // 20 preemptions of 4 calls each and their own status updates: 100 tokens, the burst.
        p.begin_pass(1.0);
        let t0 = p.loop_at;
        assert_eq!(t0, 0.9, "an idle loop banks one step");
        for _ in 0..20 {
            p.attempt(Attempt::Preempted { calls: 4 });
        }
        let at = p.loop_at;
        assert!((at - t0 - 20.0 * PREEMPTION_ATTEMPT_S).abs() < 1e-9, "no wait within the burst: {at}");
        // The 21st's status update does not wait yet: the bucket refilled 0.29 s worth (14.5
        // calls) while the loop ran.
        p.attempt(Attempt::Preempted { calls: 4 });
        assert!(p.loop_at - (at + PREEMPTION_ATTEMPT_S) < 1e-9, "still tokens left: {}", p.loop_at);
        for _ in 0..5 {
            p.attempt(Attempt::Preempted { calls: 4 });
        }
        // The last status update is the 126th call: it waits for the client's 50 a second,
        // from the end of its dry run.
        let at = p.loop_at - t0;
        assert!(at > 26.0 * PREEMPTION_ATTEMPT_S + 0.05, "throttled: {at}");
        let granted = (126.0 - API_BURST) / API_QPS + PREEMPTION_ATTEMPT_S;
        assert!((at - granted).abs() < 1e-9, "at the client's rate: {at} against {granted}");
    }
}
