//! Status polling: every discovered job's `GET /v1/status` (or its adapter's equivalent) on an
//! interval, all jobs concurrently, each bounded by the interval so a hanging master delays
//! only itself. A job whose last good status is older than `stale_after` counts as
//! unreachable: the snapshot then leaves its workers alone instead of steering on old counts.
//!
//! The poller owns the list of jobs: discovery runs once per poll, and decisions read the jobs
//! found then with their statuses, so the two always describe the same set.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use tokio::sync::Notify;

use super::jobs::JobDirectory;
use crate::live::endpoint::DiscoveredJob;
use crate::master_protocol::{Phase, ScaleAccepted, Status};
use crate::telemetry::Metrics;

struct Entry {
    /// How the job was found and is reached (the latest discovery).
    job: DiscoveredJob,
    status: Option<Status>,
    /// When `status` was read.
    at: Option<Instant>,
    /// The last poll's error, logged once per change.
    error: Option<String>,
    /// When an accepted command last updated `status`: a poll sent before then answered with
    /// the state before the command and must not undo it.
    accepted_at: Option<Instant>,
    /// The target of a command sent and not yet answered: decisions plan from it, so one made
    /// meanwhile does not ask another job for the room this one is already giving.
    sent: Option<u32>,
    /// When the target decisions read or the generation last changed: by a poll, a command
    /// sent, answered or not taken.
    moved_at: Option<Instant>,
}

/// A job's status as a decision reads it.
#[derive(Clone)]
pub struct Polled {
    pub job: DiscoveredJob,
    pub status: Option<Status>,
    /// When its target or generation last changed (see [`Poller::moved_at`]).
    pub moved_at: Option<Instant>,
}

/// What the latest poll found: every job's status, and what discovery could not use.
pub struct Known {
    pub jobs: BTreeMap<String, Polled>,
    /// A sentence for each object that announces a job but cannot be steered.
    pub problems: Vec<String>,
}

#[derive(Default)]
struct Book {
    entries: BTreeMap<String, Entry>,
    problems: Vec<String>,
}

/// The discovered jobs and the latest status of each, shared by the decision loop and the
/// actuator.
pub struct Poller {
    book: Mutex<Book>,
    stale_after: Duration,
    timeout: Duration,
    metrics: Arc<Metrics>,
    changed: Arc<Notify>,
}

impl Poller {
    /// `timeout` bounds one job's poll; `stale_after` is how old a status may be and still be
    /// steered on (a few intervals, so one lost poll does not drop a job).
    pub fn new(timeout: Duration, stale_after: Duration, metrics: Arc<Metrics>, changed: Arc<Notify>) -> Poller {
        Poller { book: Mutex::new(Book::default()), stale_after, timeout, metrics, changed }
    }

    /// Discovers the jobs through `directory` and polls them.
    pub async fn discover_and_poll(&self, directory: &JobDirectory) {
        let (jobs, problems) = directory.jobs();
        self.poll(jobs, problems).await;
    }

    /// Polls `jobs` once, concurrently; `problems` are what discovery could not use. Jobs no
    /// longer discovered are forgotten. Wakes the decision loop when something it decides on
    /// changed.
    pub async fn poll(&self, jobs: Vec<DiscoveredJob>, problems: Vec<String>) {
        let asked = Instant::now();
        let results = join_all(jobs.iter().map(|j| async move {
            let result = match tokio::time::timeout(self.timeout, j.endpoint.status()).await {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err(format!("no status within {:?}", self.timeout)),
            };
            (j, result)
        }))
        .await;
        let now = Instant::now();
        let mut book = self.lock();
        let mut changed = book.problems != problems;
        book.problems = problems;
        let entries = &mut book.entries;
        let keys: Vec<String> = jobs.iter().map(DiscoveredJob::key).collect();
        for gone in entries.keys().filter(|k| !keys.contains(k)).cloned().collect::<Vec<_>>() {
            entries.remove(&gone);
            self.metrics.forget_job(&gone);
            changed = true;
        }
        for (job, result) in results {
            let key = job.key();
            let entry = entries.entry(key.clone()).or_insert_with(|| {
                self.metrics.job_discovered(&key);
                Entry {
                    job: job.clone(),
                    status: None,
                    at: None,
                    error: None,
                    accepted_at: None,
                    sent: None,
                    moved_at: None,
                }
            });
            entry.job = job.clone();
            self.metrics.set_master_up(&key, result.is_ok());
            match result {
                Ok(status) => {
                    if entry.error.take().is_some() {
                        tracing::info!(job = %key, endpoint = %job.endpoint.describe(), "master answers again");
                    }
                    entry.at = Some(now);
                    if entry.accepted_at.is_some_and(|accepted| asked < accepted) {
                        continue;
                    }
                    changed |= entry.status.as_ref().is_none_or(|old| differs(old, &status));
                    if entry.status.as_ref().is_none_or(|old| moved(old, &status)) {
                        entry.moved_at = Some(now);
                    }
                    entry.status = Some(status);
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
        drop(book);
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
        let book = self.lock();
        let jobs = book
            .entries
            .iter()
            .map(|(k, e)| {
                let fresh = e.at.is_some_and(|at| now.duration_since(at) <= self.stale_after);
                let status = e.status.clone().filter(|_| fresh).map(|mut status| {
                    if let Some(target) = e.sent {
                        rescaling_to(&mut status, target);
                    }
                    status
                });
                let polled = Polled { job: e.job.clone(), status, moved_at: e.moved_at };
                (k.clone(), polled)
            })
            .collect();
        Known { jobs, problems: book.problems.clone() }
    }

    /// When the job's status last changed target or generation, by a poll or an accepted
    /// command (the one record of it).
    pub fn moved_at(&self, job: &str) -> Option<Instant> {
        self.lock().entries.get(job).and_then(|e| e.moved_at)
    }

    /// Takes a command being sent into the known status: decisions from now on plan from its
    /// target until the master answers. A decision made meanwhile from the old target would
    /// find the room this job is giving still held, and ask another job for it too.
    pub fn sending(&self, job: &str, target: u32) {
        let mut book = self.lock();
        let Some(entry) = book.entries.get_mut(job) else { return };
        entry.sent = Some(target);
        entry.moved_at = Some(Instant::now());
        drop(book);
        self.changed.notify_one();
    }

    /// A command sent for `job` was not taken (failed, refused, or kept in by the lease gate):
    /// decisions plan from the master's own target again.
    pub fn not_taken(&self, job: &str) {
        let mut book = self.lock();
        let Some(entry) = book.entries.get_mut(job) else { return };
        if entry.sent.take().is_some() {
            entry.moved_at = Some(Instant::now());
            drop(book);
            self.changed.notify_one();
        }
    }

    /// Takes an accepted command into the known status at once, so the next decision does not
    /// ask for the same change again before the next poll.
    pub fn accepted(&self, job: &str, answer: &ScaleAccepted) {
        let mut book = self.lock();
        let Some(entry) = book.entries.get_mut(job) else { return };
        let sent = entry.sent.take();
        let Some(status) = entry.status.as_mut() else { return };
        // What decisions read until now: the sent target, else the status'.
        let seen = sent.unwrap_or(status.workers.target);
        let newer = answer.generation >= status.generation && status.workers.target != answer.accepted_target;
        if newer {
            entry.accepted_at = Some(Instant::now());
            status.generation = answer.generation;
            rescaling_to(status, answer.accepted_target);
        }
        if newer || seen != status.workers.target {
            entry.moved_at = Some(Instant::now());
            drop(book);
            // Decisions made while the command was in flight started from a target the job
            // has left; the actuator skips them, so decide again from the new one.
            self.changed.notify_one();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
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

#[cfg(test)]
mod tests {
    use futures::future::BoxFuture;
    use serde_json::json;

    use super::*;
    use crate::live::endpoint::{JobEndpoint, JobObject};
    use crate::live::master_client::MasterError;
    use crate::master_protocol::ScaleCommand;

    /// A master that answers with whatever status the test last set.
    struct Scripted(Mutex<Status>);

    impl JobEndpoint for Scripted {
        fn describe(&self) -> String {
            "scripted".into()
        }
        fn status(&self) -> BoxFuture<'_, Result<Status, MasterError>> {
            let s = self.0.lock().unwrap().clone();
            Box::pin(async move { Ok(s) })
        }
        fn scale<'a>(&'a self, _: &'a ScaleCommand) -> BoxFuture<'a, Result<ScaleAccepted, MasterError>> {
            unreachable!("the poller never scales")
        }
    }

    fn status(target: u32, generation: u64) -> Status {
        serde_json::from_value(json!({
            "job": "a", "generation": generation, "phase": "Running",
            "workers": {"current": target, "target": target, "min": 1, "max": 10, "pending": 0},
            "worker_resources": {"cpu": "1", "memory": "1Gi"},
            "throughput": {"samples_per_s": 1.0}
        }))
        .unwrap()
    }

    fn job_of(master: Arc<Scripted>) -> DiscoveredJob {
        let object = JobObject {
            api_version: "v1".into(),
            kind: "Service".into(),
            namespace: "ml".into(),
            name: "a".into(),
            uid: None,
        };
        DiscoveredJob {
            namespace: "ml".into(),
            name: "a".into(),
            object,
            endpoint: master,
            overrides: Default::default(),
        }
    }

    fn poller() -> Poller {
        let changed = Arc::new(Notify::new());
        Poller::new(Duration::from_secs(1), Duration::from_secs(60), Arc::new(Metrics::new()), changed)
    }

    fn target_seen(poller: &Poller) -> (u32, Phase) {
        let status = poller.known().jobs["ml/a"].status.clone().unwrap();
        (status.workers.target, status.phase)
    }

    #[tokio::test]
    async fn a_status_moves_when_its_target_or_generation_changes_by_a_poll_or_an_acceptance() {
        let master = Arc::new(Scripted(Mutex::new(status(8, 1))));
        let poller = poller();
        let jobs = vec![job_of(master.clone())];
        poller.poll(jobs.clone(), vec![]).await;
        let first = poller.moved_at("ml/a").expect("the first status is a move");
        // The same status again (throughput aside): no move.
        master.0.lock().unwrap().throughput = None;
        poller.poll(jobs.clone(), vec![]).await;
        assert_eq!(poller.moved_at("ml/a"), Some(first));
        assert_eq!(poller.known().jobs["ml/a"].moved_at, Some(first), "decisions read it with the status");
        // Someone scaled the job: a move.
        *master.0.lock().unwrap() = status(6, 2);
        poller.poll(jobs.clone(), vec![]).await;
        let scaled = poller.moved_at("ml/a").unwrap();
        assert!(scaled > first);
        // An accepted command moves it at once, before the next poll.
        poller.accepted("ml/a", &ScaleAccepted { accepted_target: 4, generation: 3 });
        let accepted = poller.moved_at("ml/a").unwrap();
        assert!(accepted > scaled);
        let polled = poller.known().jobs["ml/a"].status.clone().unwrap();
        assert_eq!((polled.workers.target, polled.generation), (4, 3));
        *master.0.lock().unwrap() = status(4, 3);
        poller.poll(jobs.clone(), vec![]).await;
        assert_eq!(poller.moved_at("ml/a"), Some(accepted), "the master caught up: no move");
    }

    #[tokio::test]
    async fn decisions_plan_from_a_command_in_flight_until_the_master_answers() {
        let master = Arc::new(Scripted(Mutex::new(status(7, 1))));
        let poller = poller();
        let jobs = vec![job_of(master.clone())];
        poller.poll(jobs.clone(), vec![]).await;
        let polled = poller.moved_at("ml/a").unwrap();
        // A shrink to 3 is sent: decisions read 3 at once (another job is not asked for the
        // room this one is giving), and one made before reads as stale.
        poller.sending("ml/a", 3);
        let sent = poller.moved_at("ml/a").unwrap();
        assert!(sent > polled);
        assert_eq!(target_seen(&poller), (3, Phase::Rescaling));
        // A poll answered before the master took it changes nothing.
        poller.poll(jobs.clone(), vec![]).await;
        assert_eq!((target_seen(&poller).0, poller.moved_at("ml/a")), (3, Some(sent)));
        // Accepted as sent: the target decisions read stays, the generation is new (a move).
        poller.accepted("ml/a", &ScaleAccepted { accepted_target: 3, generation: 2 });
        assert_eq!(target_seen(&poller).0, 3);
        let accepted = poller.moved_at("ml/a").unwrap();
        assert!(accepted > sent);
        // A command the master did not take: back to the master's own target, a move.
        poller.sending("ml/a", 2);
        assert_eq!(target_seen(&poller).0, 2);
        poller.not_taken("ml/a");
        assert_eq!(target_seen(&poller).0, 3);
        assert!(poller.moved_at("ml/a").unwrap() > accepted);
        // Accepted at another target than was sent (a master that clamps): a move.
        poller.sending("ml/a", 1);
        let clamped = poller.moved_at("ml/a").unwrap();
        poller.accepted("ml/a", &ScaleAccepted { accepted_target: 2, generation: 3 });
        assert_eq!(target_seen(&poller).0, 2);
        assert!(poller.moved_at("ml/a").unwrap() > clamped);
    }
}
