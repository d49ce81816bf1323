//! The book of jobs shared by the decision loop, the poller and the actuator: what polls
//! observed of each discovered job (the poller writes it) and the [`Ledger`] of scale commands
//! (the actuator writes it), under one lock so that the status a decision reads is composed
//! from both in one place ([`Book::known`]): the polled status, overlaid by a command accepted
//! since and then by a command in flight.
//!
//! A job whose last good status is older than `stale_after` counts as unreachable: the
//! snapshot then leaves its workers alone instead of steering on old counts.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::ledger::{Actuation, Command, Deadline, Ledger, Outcome};
use crate::live::endpoint::DiscoveredJob;
use crate::master_protocol::{Phase, Status};
use crate::telemetry::Metrics;

/// What polls observed of one job.
struct Entry {
    /// How the job was found and is reached (the latest discovery).
    job: DiscoveredJob,
    /// The status as the master last answered it.
    status: Option<Status>,
    /// When `status` was read.
    at: Option<Instant>,
    /// The last poll's error, logged once per change.
    error: Option<String>,
    /// When a poll last changed the target or generation decisions read.
    moved_at: Option<Instant>,
}

/// A job's status as a decision reads it.
#[derive(Clone)]
pub struct Polled {
    pub job: DiscoveredJob,
    pub status: Option<Status>,
    /// When its target or generation last changed (see [`Book::moved_at`]).
    pub moved_at: Option<Instant>,
}

/// What the latest poll found: every job's status, and what discovery could not use.
pub struct Known {
    pub jobs: BTreeMap<String, Polled>,
    /// A sentence for each object that announces a job but cannot be steered.
    pub problems: Vec<String>,
}

#[derive(Default)]
struct Inner {
    entries: BTreeMap<String, Entry>,
    problems: Vec<String>,
    ledger: Ledger,
}

impl Inner {
    /// The job's status as known without a command in flight: the polled one, overlaid by a
    /// command accepted since.
    fn settled(&self, job: &str) -> Option<Status> {
        let mut status = self.entries.get(job)?.status.clone()?;
        if let Some((target, generation)) = self.ledger.overlay(job).accepted {
            status.generation = generation;
            rescaling_to(&mut status, target);
        }
        Some(status)
    }

    /// When the job's status last moved, by a poll or a command: the later of the two records.
    fn moved_at(&self, job: &str) -> Option<Instant> {
        let polled = self.entries.get(job)?.moved_at;
        polled.max(self.ledger.overlay(job).moved_at)
    }
}

/// The discovered jobs, what polls observed of each, and the commands sent to them.
pub struct Book {
    inner: Mutex<Inner>,
    stale_after: Duration,
    metrics: Arc<Metrics>,
    changed: Arc<Notify>,
}

impl Book {
    /// `stale_after` is how old a status may be and still be steered on (a few poll
    /// intervals, so one lost poll does not drop a job); `changed` wakes the decision loop on
    /// each change a decision must see.
    pub fn new(stale_after: Duration, metrics: Arc<Metrics>, changed: Arc<Notify>) -> Book {
        Book { inner: Mutex::new(Inner::default()), stale_after, metrics, changed }
    }

    /// Takes one poll in: `asked` is when it was sent, `results` each job's answer, `problems`
    /// what discovery could not use. Jobs no longer discovered are forgotten. Wakes the
    /// decision loop when something it decides on changed.
    pub fn observe(
        &self,
        jobs: &[DiscoveredJob],
        results: Vec<(&DiscoveredJob, Result<Status, String>)>,
        problems: Vec<String>,
        asked: Instant,
    ) {
        let mut inner = self.lock();
        // Read under the lock, so a move recorded here is later than any a command recorded.
        let now = Instant::now();
        let mut changed = inner.problems != problems;
        inner.problems = problems;
        let keys: Vec<String> = jobs.iter().map(DiscoveredJob::key).collect();
        for gone in inner.entries.keys().filter(|k| !keys.contains(k)).cloned().collect::<Vec<_>>() {
            inner.entries.remove(&gone);
            inner.ledger.forget(&gone);
            self.metrics.forget_job(&gone);
            changed = true;
        }
        for (job, result) in results {
            let key = job.key();
            if !inner.entries.contains_key(&key) {
                self.metrics.job_discovered(&key);
                let entry = Entry { job: job.clone(), status: None, at: None, error: None, moved_at: None };
                inner.entries.insert(key.clone(), entry);
            }
            self.metrics.set_master_up(&key, result.is_ok());
            let overlay = inner.ledger.overlay(&key);
            let settled = inner.settled(&key);
            let entry = inner.entries.get_mut(&key).expect("inserted above");
            entry.job = job.clone();
            match result {
                Ok(status) => {
                    if entry.error.take().is_some() {
                        tracing::info!(job = %key, endpoint = %job.endpoint.describe(), "master answers again");
                    }
                    entry.at = Some(now);
                    if overlay.accepted_at.is_some_and(|accepted| asked < accepted) {
                        continue;
                    }
                    changed |= settled.as_ref().is_none_or(|old| differs(old, &status));
                    if settled.as_ref().is_none_or(|old| moved(old, &status)) {
                        entry.moved_at = Some(now);
                    }
                    entry.status = Some(status);
                    inner.ledger.polled(&key);
                }
                Err(e) => {
                    if entry.error.as_deref() != Some(e.as_str()) {
                        let endpoint = job.endpoint.describe();
                        let hint = super::masters::unresolved_hint(&endpoint, &e).unwrap_or_default();
                        tracing::warn!(job = %key, %endpoint, error = %e, hint,
                            "status poll failed; the job's workers are left alone once its status is stale");
                    }
                    entry.error = Some(e);
                    changed |= entry.at.is_some_and(|at| now.duration_since(at) > self.stale_after);
                }
            }
        }
        drop(inner);
        if changed {
            self.changed.notify_one();
        }
    }

    /// The jobs found by the latest poll, each with its status if fresh enough to steer on
    /// (`None` for jobs whose master is unreachable) and when its target or generation last
    /// changed: a decision made from a status that has moved since started from a target the
    /// job has left.
    pub fn known(&self) -> Known {
        let now = Instant::now();
        let inner = self.lock();
        let jobs = inner
            .entries
            .iter()
            .map(|(k, e)| {
                let fresh = e.at.is_some_and(|at| now.duration_since(at) <= self.stale_after);
                let status = inner.settled(k).filter(|_| fresh).map(|mut status| {
                    if let Some(target) = inner.ledger.overlay(k).sent {
                        rescaling_to(&mut status, target);
                    }
                    status
                });
                let polled = Polled { job: e.job.clone(), status, moved_at: inner.moved_at(k) };
                (k.clone(), polled)
            })
            .collect();
        Known { jobs, problems: inner.problems.clone() }
    }

    /// When the job's status last changed target or generation, by a poll or a command sent,
    /// answered or not taken (the one record of it).
    pub fn moved_at(&self, job: &str) -> Option<Instant> {
        self.lock().moved_at(job)
    }

    /// Takes the latest decision into the ledger and returns the commands to send now (see
    /// [`Ledger::plan`]), each taken into the known status as it is let out.
    pub fn plan(&self, actuation: &Actuation, release_deadline: Duration) -> Vec<Command> {
        let mut inner = self.lock();
        let moved: BTreeMap<String, Option<Instant>> =
            actuation.jobs.keys().map(|k| (k.clone(), inner.moved_at(k))).collect();
        let moved_at = |job: &str| moved.get(job).copied().flatten();
        let commands = inner.ledger.plan(actuation, tokio::time::Instant::now(), release_deadline, &moved_at);
        drop(inner);
        for command in &commands {
            self.sending(&command.key, command.target);
        }
        commands
    }

    /// Records what became of a command: first in the known status (a decision made from now
    /// on starts from the accepted target, or from the master's own again when it did not take
    /// the command), then in the ledger.
    pub fn finish(&self, command: &Command, outcome: Outcome, max_backoff: Duration) {
        self.answered(&command.key, outcome);
        self.lock().ledger.finish(command, outcome, tokio::time::Instant::now(), max_backoff);
    }

    /// A command for `job` is being sent (see [`Ledger::sending`]).
    pub(super) fn sending(&self, job: &str, target: u32) {
        let mut inner = self.lock();
        if !inner.entries.contains_key(job) {
            return;
        }
        inner.ledger.sending(job, target, Instant::now());
        drop(inner);
        self.changed.notify_one();
    }

    /// The master's answer to a command for `job`, taken into the known status (see
    /// [`Ledger::accepted`] and [`Ledger::not_taken`]).
    pub(super) fn answered(&self, job: &str, outcome: Outcome) {
        let mut inner = self.lock();
        if !inner.entries.contains_key(job) {
            return;
        }
        let moved = match outcome {
            Outcome::Accepted { target, generation } => {
                let settled = inner.settled(job);
                inner.ledger.accepted(job, (target, generation), settled.as_ref(), Instant::now())
            }
            Outcome::Refused | Outcome::Failed | Outcome::NotSent => inner.ledger.not_taken(job, Instant::now()),
        };
        drop(inner);
        if moved {
            self.changed.notify_one();
        }
    }

    /// When the earliest shrink deadline falls due.
    pub fn next_due(&self) -> Option<tokio::time::Instant> {
        self.lock().ledger.next_due()
    }

    /// The jobs whose shrinks fell due by now (see [`Ledger::take_due`]).
    pub fn take_due(&self) -> Vec<(Deadline, u32)> {
        self.lock().ledger.take_due(tokio::time::Instant::now())
    }

    pub fn any_in_flight(&self) -> bool {
        self.lock().ledger.any_in_flight()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The status of a job asked for `target`: rescaling to it unless it has ended.
fn rescaling_to(status: &mut Status, target: u32) {
    status.workers.target = target;
    if !matches!(status.phase, Phase::Completed | Phase::Failed) {
        status.phase = Phase::Rescaling;
    }
}

/// Whether the job moved: another target or generation.
fn moved(old: &Status, new: &Status) -> bool {
    old.workers.target != new.workers.target || old.generation != new.generation
}

/// Whether a new status changes anything the decision reads (throughput and progress do not).
fn differs(old: &Status, new: &Status) -> bool {
    old.phase != new.phase
        || old.workers != new.workers
        || old.generation != new.generation
        || old.worker_resources != new.worker_resources
        || old.rescale_cost_s != new.rescale_cost_s
        || old.worker_release_s != new.worker_release_s
}
