//! The per-job ledger of scale commands and the rules that use it, synchronous and with time
//! passed in, so they are tested as the core is (the actuator owns the one ledger and does the
//! I/O around it).
//!
//! Per job it keeps the target the master last accepted (not sent again before a newer status
//! generation shows the job moved away from it), the command in flight (one per job), a backoff
//! after transient
//! failures, a target the master refused (409), what the latest decision wants, and the shrink
//! deadlines: `release_deadline` after each shrink was asked for, whether the master accepts,
//! fails or hangs (online pods wait on it either way).
//!
//! It also keeps what commands change in the status decisions read ([`Overlay`]): the target
//! of a command in flight, the target and generation a command was accepted at and when, and
//! when either last moved the status. The book (book.rs) lays it over the polled status; the
//! rules for when a command's answer moves that status are here.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::forced::ShrinkSteps;
use crate::core::ScaleIntent;
use crate::live::endpoint::{DiscoveredJob, JobObject};
use crate::master_protocol::Status;

/// What one decision asks for: its intents and the jobs they name, with their bounds.
#[derive(Clone, Default)]
pub struct Actuation {
    pub intents: Vec<ScaleIntent>,
    pub jobs: BTreeMap<String, Bounded>,
}

/// A discovered job with the bounds of its last status.
#[derive(Clone)]
pub struct Bounded {
    pub job: DiscoveredJob,
    pub min: u32,
    pub max: u32,
    /// The master's target as the decision saw it.
    pub target: u32,
    /// The status generation the decision saw.
    pub generation: u64,
    /// When that status last changed target or generation ([`Book::moved_at`](super::book::Book::moved_at)).
    pub moved_at: Option<std::time::Instant>,
}

/// A command the ledger lets out: send it, then report its [`Outcome`].
#[derive(Clone)]
pub struct Command {
    pub key: String,
    /// The intent's target within the job's bounds (the floor is never broken by a command).
    pub target: u32,
    pub intent: ScaleIntent,
    pub bounded: Bounded,
}

impl Command {
    pub fn shrink(&self) -> bool {
        self.target < self.intent.from
    }
}

/// What became of a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Accepted {
        target: u32,
        generation: u64,
    },
    /// 409: the target is outside the master's bounds; not asked again.
    Refused,
    /// Failed or timed out: retried after a backoff.
    Failed,
    /// The lease gate kept it in: nothing failed, the next leader decides afresh.
    NotSent,
}

/// A job's shrinks within their deadlines, and what a forced deletion needs to find its pods.
#[derive(Clone)]
pub struct Deadline {
    pub steps: ShrinkSteps,
    pub min: u32,
    /// Workers the last shrink named, preferred as victims.
    pub release_pods: Vec<String>,
    pub object: JobObject,
    pub namespace: String,
    pub job: String,
}

#[derive(Default)]
struct JobState {
    accepted: Option<(u32, u64)>,
    in_flight: bool,
    failures: u32,
    retry_at: Option<Instant>,
    refused: Option<u32>,
    /// What the latest decision wants (its intent, else the master's target): a deadline never
    /// removes workers the job may keep now.
    wanted: u32,
    deadline: Option<Deadline>,
}

/// What commands change in a job's status as decisions read it, kept while the job is
/// discovered (the book forgets it with the job's polled status).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Overlay {
    /// The target of a command sent and not yet answered: decisions plan from it, so one made
    /// meanwhile does not ask another job for the room this one is already giving.
    pub sent: Option<u32>,
    /// The target and generation of an accepted command, laid over the polled status until a
    /// poll asked after it replaces that status.
    pub accepted: Option<(u32, u64)>,
    /// When an accepted command last updated the status: a poll sent before then answered with
    /// the state before the command and must not undo it.
    pub accepted_at: Option<std::time::Instant>,
    /// When a command sent, answered or not taken last moved the target decisions read or the
    /// generation (polls record their own moves).
    pub moved_at: Option<std::time::Instant>,
}

#[derive(Default)]
pub struct Ledger {
    jobs: BTreeMap<String, JobState>,
    overlays: BTreeMap<String, Overlay>,
}

impl Ledger {
    /// Takes the latest decision in: forgets jobs no longer discovered (unless a command is in
    /// flight) and returns the commands to send now, marking them in flight and starting a
    /// shrink's deadline. `moved_at` says when a job's status last changed target or generation
    /// (the poller's record); a decision made from a status that has moved since is stale, for
    /// every job it names.
    pub fn plan(
        &mut self,
        actuation: &Actuation,
        now: Instant,
        release_deadline: Duration,
        moved_at: &dyn Fn(&str) -> Option<std::time::Instant>,
    ) -> Vec<Command> {
        self.jobs.retain(|k, s| actuation.jobs.contains_key(k) || s.in_flight);
        // A decision is one plan for all jobs: made from a status that has moved since (a
        // command sent or answered, a poll), it started from a target the job has left (say 28
        // while the master already moved to 20). Its intent for that job is wrong (a rise to 22
        // would pass for a shrink and skip the growth damping), and so are its intents for the
        // others: the room that job is giving would be asked of another job too. The move
        // wakes the decision loop for a fresh one.
        if actuation.jobs.iter().any(|(key, bounded)| moved_at(key) != bounded.moved_at) {
            return Vec::new();
        }
        for (key, bounded) in &actuation.jobs {
            let intent = actuation.intents.iter().find(|i| i.job == *key);
            let wanted = intent.map_or(bounded.target, |i| clamp(i.target, bounded));
            self.jobs.entry(key.clone()).or_default().wanted = wanted;
        }
        let mut out = Vec::new();
        for intent in &actuation.intents {
            let Some(bounded) = actuation.jobs.get(&intent.job) else { continue };
            let state = self.jobs.entry(intent.job.clone()).or_default();
            // A job asked to give way (target 0) keeps its floor; protocol v1 refuses targets
            // below `min` anyway.
            let target = clamp(intent.target, bounded);
            let already = state.accepted.is_some_and(|(t, g)| t == target && bounded.generation <= g);
            if state.in_flight
                || already
                || state.refused == Some(target)
                || state.retry_at.is_some_and(|t| t > now)
                || target == intent.from
            {
                continue;
            }
            state.in_flight = true;
            let command = Command { key: intent.job.clone(), target, intent: intent.clone(), bounded: bounded.clone() };
            if command.shrink() {
                let deadline = state.deadline.get_or_insert_with(|| Deadline {
                    steps: ShrinkSteps::default(),
                    min: bounded.min,
                    release_pods: Vec::new(),
                    object: bounded.job.object.clone(),
                    namespace: bounded.job.namespace.clone(),
                    job: bounded.job.name.clone(),
                });
                deadline.steps.push(now + release_deadline, target);
                deadline.release_pods = intent.release_pods.iter().map(|p| bare(p)).collect();
            }
            out.push(command);
        }
        out
    }

    /// Records what became of a command sent for `key`.
    pub fn finish(&mut self, command: &Command, outcome: Outcome, now: Instant, max_backoff: Duration) {
        let state = self.jobs.entry(command.key.clone()).or_default();
        state.in_flight = false;
        match outcome {
            Outcome::NotSent => {}
            Outcome::Accepted { target, generation } => {
                state.accepted = Some((target, generation));
                state.failures = 0;
                state.retry_at = None;
                state.refused = None;
                // A grow accepted: no shrink of before is still owed.
                if !command.shrink() {
                    state.deadline = None;
                }
            }
            Outcome::Refused => state.refused = Some(command.target),
            Outcome::Failed => {
                state.failures += 1;
                let backoff = Duration::from_millis(500u64.saturating_mul(1 << state.failures.min(10)));
                state.retry_at = Some(now + backoff.min(max_backoff));
            }
        }
    }

    /// When the earliest shrink deadline falls due.
    pub fn next_due(&self) -> Option<Instant> {
        self.jobs.values().filter_map(|s| s.deadline.as_ref()?.steps.next_due()).min()
    }

    /// The jobs whose shrinks fell due by `now`, each with the count it may keep: the lowest
    /// target due, but never less than the latest decision wants.
    pub fn take_due(&mut self, now: Instant) -> Vec<(Deadline, u32)> {
        let mut due = Vec::new();
        for state in self.jobs.values_mut() {
            let Some(d) = state.deadline.as_mut() else { continue };
            let Some(target) = d.steps.take_due(now) else { continue };
            due.push((d.clone(), target.max(state.wanted)));
            if d.steps.is_empty() {
                state.deadline = None;
            }
        }
        due
    }

    pub fn any_in_flight(&self) -> bool {
        self.jobs.values().any(|s| s.in_flight)
    }

    /// What commands change in `job`'s status.
    pub fn overlay(&self, job: &str) -> Overlay {
        self.overlays.get(job).copied().unwrap_or_default()
    }

    /// A poll replaced `job`'s status: an accepted command is no longer laid over it.
    pub fn polled(&mut self, job: &str) {
        if let Some(o) = self.overlays.get_mut(job) {
            o.accepted = None;
        }
    }

    /// `job` is no longer discovered: what commands changed in its status goes with it.
    pub fn forget(&mut self, job: &str) {
        self.overlays.remove(job);
    }

    /// Takes a command being sent into the known status: decisions from now on plan from its
    /// target until the master answers. A decision made meanwhile from the old target would
    /// find the room this job is giving still held, and ask another job for it too. Always a
    /// move.
    pub fn sending(&mut self, job: &str, target: u32, now: std::time::Instant) {
        let o = self.overlays.entry(job.to_string()).or_default();
        o.sent = Some(target);
        o.moved_at = Some(now);
    }

    /// A command sent for `job` was not taken (failed, refused, or kept in by the lease gate):
    /// decisions plan from the master's own target again. Whether that moved the status.
    pub fn not_taken(&mut self, job: &str, now: std::time::Instant) -> bool {
        let Some(o) = self.overlays.get_mut(job) else { return false };
        if o.sent.take().is_some() {
            o.moved_at = Some(now);
            return true;
        }
        false
    }

    /// Takes an accepted command into the known status at once, so the next decision does not
    /// ask for the same change again before the next poll. `status` is the job's status as
    /// known without a command in flight (`None` before its first poll). Whether that moved the
    /// status: decisions made while the command was in flight started from a target the job
    /// has left; the actuator skips them, so the decision loop must decide again.
    pub fn accepted(
        &mut self,
        job: &str,
        (target, generation): (u32, u64),
        status: Option<&Status>,
        now: std::time::Instant,
    ) -> bool {
        let o = self.overlays.entry(job.to_string()).or_default();
        let sent = o.sent.take();
        let Some(status) = status else { return false };
        // What decisions read until now: the sent target, else the status'.
        let seen = sent.unwrap_or(status.workers.target);
        let newer = generation >= status.generation && status.workers.target != target;
        if newer {
            o.accepted = Some((target, generation));
            o.accepted_at = Some(now);
        }
        let known = if newer { target } else { status.workers.target };
        if newer || seen != known {
            o.moved_at = Some(now);
            return true;
        }
        false
    }
}

fn clamp(target: u32, bounded: &Bounded) -> u32 {
    target.clamp(bounded.min, bounded.max.max(bounded.min))
}

/// A pod name without the `namespace/` the snapshot qualifies it with.
pub fn bare(qualified: &str) -> String {
    qualified.rsplit_once('/').map_or(qualified, |(_, n)| n).to_string()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::core::Reason;
    use crate::live::endpoint::DiscoveredJob;
    use crate::live::master_client::MasterClient;

    const DEADLINE: Duration = Duration::from_secs(30);
    const BACKOFF: Duration = Duration::from_secs(8);

    fn bounded(name: &str, target: u32, generation: u64) -> Bounded {
        let object = JobObject {
            api_version: "v1".into(),
            kind: "Service".into(),
            namespace: "ml".into(),
            name: format!("{name}-master"),
            uid: None,
        };
        // Never called: the ledger only decides what to send.
        let endpoint = Arc::new(MasterClient::new("http://127.0.0.1:9").unwrap());
        let job = DiscoveredJob {
            namespace: "ml".into(),
            name: name.into(),
            object,
            endpoint,
            overrides: Default::default(),
        };
        Bounded { job, min: 2, max: 10, target, generation, moved_at: None }
    }

    fn intent(name: &str, from: u32, target: u32) -> ScaleIntent {
        let reason = if target < from { Reason::OnlineHeadroom } else { Reason::Grow };
        ScaleIntent {
            job: format!("ml/{name}"),
            from,
            target,
            release_pods: vec![format!("ml/{name}-w-1")],
            release_nodes: vec![],
            reason,
            why: String::new(),
        }
    }

    /// A decision that asks job `a` (at `from`, status generation `generation`) for `target`,
    /// made from a status no accepted command had changed.
    fn ask(from: u32, target: u32, generation: u64) -> Actuation {
        Actuation {
            intents: vec![intent("a", from, target)],
            jobs: BTreeMap::from([("ml/a".to_string(), bounded("a", from, generation))]),
        }
    }

    /// The poller's record when no status has moved.
    fn none(_: &str) -> Option<std::time::Instant> {
        None
    }

    fn targets(commands: &[Command]) -> Vec<u32> {
        commands.iter().map(|c| c.target).collect()
    }

    #[test]
    fn one_command_in_flight_per_job_and_an_accepted_target_is_not_sent_again() {
        let (mut ledger, t0) = (Ledger::default(), Instant::now());
        let sent = ledger.plan(&ask(8, 5, 1), t0, DEADLINE, &none);
        assert_eq!(targets(&sent), [5]);
        assert!(ledger.any_in_flight());
        // A newer decision while it is in flight: nothing more goes out.
        assert!(ledger.plan(&ask(8, 4, 1), t0, DEADLINE, &none).is_empty());
        ledger.finish(&sent[0], Outcome::Accepted { target: 5, generation: 2 }, t0, BACKOFF);
        assert!(!ledger.any_in_flight());
        // The acceptance moved the cached status at `accepted`: a decision made from the status
        // before it started from the old target and is skipped.
        let accepted = std::time::Instant::now();
        let now = |_: &str| Some(accepted);
        assert!(ledger.plan(&ask(8, 4, 1), t0, DEADLINE, &now).is_empty());
        // One made since goes ahead, but 5 is not asked again even if a poll answered before
        // the master moved (generation 1, target 8)...
        let mut fresh = ask(8, 5, 1);
        fresh.jobs.get_mut("ml/a").unwrap().moved_at = Some(accepted);
        assert!(ledger.plan(&fresh, t0, DEADLINE, &now).is_empty());
        fresh.intents[0].target = 4;
        assert_eq!(targets(&ledger.plan(&fresh, t0, DEADLINE, &now)), [4]);
        // ...until someone scaled the job since (generation 3).
        let mut moved = ask(3, 5, 3);
        moved.jobs.get_mut("ml/a").unwrap().moved_at = Some(accepted);
        let mut ledger2 = Ledger::default();
        let sent = ledger2.plan(&ask(8, 5, 1), t0, DEADLINE, &none);
        ledger2.finish(&sent[0], Outcome::Accepted { target: 5, generation: 2 }, t0, BACKOFF);
        assert!(ledger2.plan(&ask(8, 5, 2), t0, DEADLINE, &none).is_empty(), "the status shows it");
        assert_eq!(targets(&ledger2.plan(&moved, t0, DEADLINE, &now)), [5]);
    }

    #[test]
    fn a_failure_backs_off_and_a_refused_target_is_not_asked_again() {
        let (mut ledger, t0) = (Ledger::default(), Instant::now());
        let sent = ledger.plan(&ask(8, 5, 1), t0, DEADLINE, &none);
        ledger.finish(&sent[0], Outcome::Failed, t0, BACKOFF);
        // First backoff: 1 s.
        assert!(ledger.plan(&ask(8, 5, 1), t0 + Duration::from_millis(900), DEADLINE, &none).is_empty());
        let t1 = t0 + Duration::from_secs(1);
        let sent = ledger.plan(&ask(8, 5, 1), t1, DEADLINE, &none);
        assert_eq!(targets(&sent), [5]);
        ledger.finish(&sent[0], Outcome::Refused, t1, BACKOFF);
        assert!(ledger.plan(&ask(8, 5, 1), t1 + Duration::from_secs(60), DEADLINE, &none).is_empty());
        // Another target is asked.
        assert_eq!(targets(&ledger.plan(&ask(8, 6, 1), t1 + Duration::from_secs(60), DEADLINE, &none)), [6]);
    }

    #[test]
    fn the_floor_is_never_broken_by_a_command() {
        let (mut ledger, t0) = (Ledger::default(), Instant::now());
        assert_eq!(targets(&ledger.plan(&ask(8, 0, 1), t0, DEADLINE, &none)), [2], "gives way at its floor of 2");
    }

    #[test]
    fn each_shrink_has_its_own_deadline_and_what_is_wanted_now_is_kept() {
        let (mut ledger, t0) = (Ledger::default(), Instant::now());
        let first = ledger.plan(&ask(8, 6, 1), t0, DEADLINE, &none);
        ledger.finish(&first[0], Outcome::Accepted { target: 6, generation: 2 }, t0, BACKOFF);
        assert_eq!(ledger.next_due(), Some(t0 + DEADLINE));
        // 29 s later a deeper shrink, with its own 30 s.
        let t1 = t0 + Duration::from_secs(29);
        let second = ledger.plan(&ask(6, 3, 2), t1, DEADLINE, &none);
        assert_eq!(targets(&second), [3]);
        ledger.finish(&second[0], Outcome::Failed, t1, BACKOFF);
        // At the first deadline only the first shrink's target is owed.
        let due = ledger.take_due(t0 + DEADLINE);
        assert_eq!(due.iter().map(|(d, t)| (d.job.as_str(), *t)).collect::<Vec<_>>(), [("a", 6)]);
        assert_eq!(due[0].0.release_pods, ["a-w-1"], "named without the namespace");
        assert_eq!(ledger.next_due(), Some(t1 + DEADLINE));
        // The latest decision wants 5 now (sent as a shrink of its own, the failed one's backoff
        // over): the second deadline removes no more than that.
        let t2 = t1 + Duration::from_secs(2);
        assert_eq!(targets(&ledger.plan(&ask(6, 5, 2), t2, DEADLINE, &none)), [5]);
        let due = ledger.take_due(t1 + DEADLINE);
        assert_eq!(due.iter().map(|(_, t)| *t).collect::<Vec<_>>(), [5]);
        assert_eq!(ledger.next_due(), Some(t2 + DEADLINE));
    }

    #[test]
    fn an_accepted_grow_clears_what_earlier_shrinks_owed_and_a_dropped_write_changes_nothing() {
        let (mut ledger, t0) = (Ledger::default(), Instant::now());
        let shrink = ledger.plan(&ask(8, 6, 1), t0, DEADLINE, &none);
        ledger.finish(&shrink[0], Outcome::NotSent, t0, BACKOFF);
        assert!(!ledger.any_in_flight());
        // Not sent is no failure: asked again at once.
        let t1 = t0 + Duration::from_millis(10);
        let again = ledger.plan(&ask(8, 6, 1), t1, DEADLINE, &none);
        assert_eq!(targets(&again), [6]);
        ledger.finish(&again[0], Outcome::Accepted { target: 6, generation: 2 }, t1, BACKOFF);
        let t2 = t1 + Duration::from_secs(5);
        let grow = ledger.plan(&ask(6, 9, 2), t2, DEADLINE, &none);
        assert_eq!(targets(&grow), [9]);
        ledger.finish(&grow[0], Outcome::Accepted { target: 9, generation: 3 }, t2, BACKOFF);
        assert_eq!(ledger.next_due(), None);
        assert!(ledger.take_due(t0 + Duration::from_secs(120)).is_empty());
    }

    #[test]
    fn jobs_no_longer_discovered_are_forgotten_unless_a_command_is_in_flight() {
        let (mut ledger, t0) = (Ledger::default(), Instant::now());
        let sent = ledger.plan(&ask(8, 5, 1), t0, DEADLINE, &none);
        ledger.plan(&Actuation::default(), t0, DEADLINE, &none);
        assert!(ledger.any_in_flight(), "kept while its command is in flight");
        ledger.finish(&sent[0], Outcome::Accepted { target: 5, generation: 2 }, t0, BACKOFF);
        ledger.plan(&Actuation::default(), t0, DEADLINE, &none);
        assert_eq!(ledger.next_due(), None, "forgotten with its deadline");
    }

    #[test]
    fn a_decision_made_before_any_of_its_jobs_moved_is_skipped_for_all_of_them() {
        // Job a was sent a shrink after this decision was made (its status moved at `sent`);
        // the decision, made from a's old target, asks b for room a is already giving.
        let (mut ledger, t0) = (Ledger::default(), Instant::now());
        let sent = std::time::Instant::now();
        let mut decision = ask(7, 6, 1);
        decision.intents.push(intent("b", 6, 3));
        decision.jobs.insert("ml/b".into(), bounded("b", 6, 1));
        let moved = |job: &str| (job == "ml/a").then_some(sent);
        assert!(ledger.plan(&decision, t0, DEADLINE, &moved).is_empty());
        assert_eq!(ledger.next_due(), None, "no shrink is owed by a skipped decision");
        // Made since: both go.
        decision.jobs.get_mut("ml/a").unwrap().moved_at = Some(sent);
        assert_eq!(targets(&ledger.plan(&decision, t0, DEADLINE, &moved)), [6, 3]);
    }

    fn status(target: u32, generation: u64) -> Status {
        serde_json::from_value(serde_json::json!({
            "job": "a", "generation": generation, "phase": "Running",
            "workers": {"current": target, "target": target, "min": 1, "max": 10, "pending": 0},
            "worker_resources": {"cpu": "1", "memory": "1Gi"}
        }))
        .unwrap()
    }

    #[test]
    fn a_command_moves_the_known_status_when_sent_when_not_taken_and_when_accepted_anew() {
        let (mut ledger, t0) = (Ledger::default(), std::time::Instant::now());
        let at = |s: u64| t0 + Duration::from_secs(s);
        // Sent: decisions plan from its target at once.
        ledger.sending("ml/a", 3, at(1));
        assert_eq!(ledger.overlay("ml/a"), Overlay { sent: Some(3), moved_at: Some(at(1)), ..Overlay::default() });
        // Not taken: back to the master's target, a move; nothing to take back a second time.
        assert!(ledger.not_taken("ml/a", at(2)));
        assert!(!ledger.not_taken("ml/a", at(3)));
        assert_eq!(ledger.overlay("ml/a").moved_at, Some(at(2)));
        // Accepted as sent at a newer generation: laid over the status, a move.
        ledger.sending("ml/a", 3, at(4));
        assert!(ledger.accepted("ml/a", (3, 2), Some(&status(7, 1)), at(5)));
        let overlay = ledger.overlay("ml/a");
        assert_eq!((overlay.sent, overlay.accepted, overlay.accepted_at), (None, Some((3, 2)), Some(at(5))));
        // An answer the status already shows, to a command whose target decisions read: no move.
        ledger.sending("ml/a", 3, at(6));
        assert!(!ledger.accepted("ml/a", (3, 2), Some(&status(3, 2)), at(7)));
        assert_eq!(ledger.overlay("ml/a").moved_at, Some(at(6)));
        // Accepted at another target than was sent, but older than the status: the status
        // stands, and decisions move back to it from the sent target.
        ledger.sending("ml/a", 1, at(8));
        assert!(ledger.accepted("ml/a", (1, 1), Some(&status(3, 2)), at(9)));
        assert_eq!(ledger.overlay("ml/a").accepted_at, Some(at(5)), "not laid over a newer status");
        // Before the first poll nothing is laid over, but the command is no longer in flight.
        ledger.sending("ml/b", 4, at(10));
        assert!(!ledger.accepted("ml/b", (4, 2), None, at(11)));
        assert_eq!(ledger.overlay("ml/b").sent, None);
        // A poll replaced the status: the acceptance is no longer laid over it, but its time
        // still keeps out polls asked before it.
        ledger.polled("ml/a");
        assert_eq!((ledger.overlay("ml/a").accepted, ledger.overlay("ml/a").accepted_at), (None, Some(at(5))));
        ledger.forget("ml/a");
        assert_eq!(ledger.overlay("ml/a"), Overlay::default());
    }
}
