//! Status polling: every discovered job's `GET /v1/status` (or its adapter's equivalent) on an
//! interval, all jobs concurrently, each bounded by the interval so a hanging master delays
//! only itself. What the polls find goes into the [`Book`], which decisions read.
//!
//! The poller owns the list of jobs: discovery runs once per poll, and decisions read the jobs
//! found then with their statuses, so the two always describe the same set.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use tokio::sync::Notify;

use super::book::{Book, Known};
use super::jobs::JobDirectory;
use crate::live::endpoint::DiscoveredJob;
use crate::telemetry::Metrics;

/// Polls the discovered jobs into the book shared by the decision loop and the actuator.
pub struct Poller {
    book: Arc<Book>,
    timeout: Duration,
}

impl Poller {
    /// `timeout` bounds one job's poll; `stale_after` is how old a status may be and still be
    /// steered on (a few intervals, so one lost poll does not drop a job).
    pub fn new(timeout: Duration, stale_after: Duration, metrics: Arc<Metrics>, changed: Arc<Notify>) -> Poller {
        Poller { book: Arc::new(Book::new(stale_after, metrics, changed)), timeout }
    }

    /// The book the polls go into, where the actuator keeps its commands.
    pub fn book(&self) -> Arc<Book> {
        self.book.clone()
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
        self.book.observe(&jobs, results, problems, asked);
    }

    /// The jobs found by the latest poll with their statuses as known (see [`Book::known`]).
    pub fn known(&self) -> Known {
        self.book.known()
    }
}

#[cfg(test)]
mod tests {
    use futures::future::BoxFuture;
    use serde_json::json;

    use std::sync::Mutex;

    use super::*;
    use crate::live::controller::ledger::Outcome;
    use crate::live::endpoint::{JobEndpoint, JobObject};
    use crate::live::master_client::MasterError;
    use crate::master_protocol::{Phase, ScaleAccepted, ScaleCommand, Status};

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
        let first = poller.book.moved_at("ml/a").expect("the first status is a move");
        // The same status again (throughput aside): no move.
        master.0.lock().unwrap().throughput = None;
        poller.poll(jobs.clone(), vec![]).await;
        assert_eq!(poller.book.moved_at("ml/a"), Some(first));
        assert_eq!(poller.known().jobs["ml/a"].moved_at, Some(first), "decisions read it with the status");
        // Someone scaled the job: a move.
        *master.0.lock().unwrap() = status(6, 2);
        poller.poll(jobs.clone(), vec![]).await;
        let scaled = poller.book.moved_at("ml/a").unwrap();
        assert!(scaled > first);
        // An accepted command moves it at once, before the next poll.
        poller.book.answered("ml/a", Outcome::Accepted { target: 4, generation: 3 });
        let accepted = poller.book.moved_at("ml/a").unwrap();
        assert!(accepted > scaled);
        let polled = poller.known().jobs["ml/a"].status.clone().unwrap();
        assert_eq!((polled.workers.target, polled.generation), (4, 3));
        *master.0.lock().unwrap() = status(4, 3);
        poller.poll(jobs.clone(), vec![]).await;
        assert_eq!(poller.book.moved_at("ml/a"), Some(accepted), "the master caught up: no move");
    }

    #[tokio::test]
    async fn decisions_plan_from_a_command_in_flight_until_the_master_answers() {
        let master = Arc::new(Scripted(Mutex::new(status(7, 1))));
        let poller = poller();
        let jobs = vec![job_of(master.clone())];
        poller.poll(jobs.clone(), vec![]).await;
        let polled = poller.book.moved_at("ml/a").unwrap();
        // A shrink to 3 is sent: decisions read 3 at once (another job is not asked for the
        // room this one is giving), and one made before reads as stale.
        poller.book.sending("ml/a", 3);
        let sent = poller.book.moved_at("ml/a").unwrap();
        assert!(sent > polled);
        assert_eq!(target_seen(&poller), (3, Phase::Rescaling));
        // A poll answered before the master took it changes nothing.
        poller.poll(jobs.clone(), vec![]).await;
        assert_eq!((target_seen(&poller).0, poller.book.moved_at("ml/a")), (3, Some(sent)));
        // Accepted as sent: the target decisions read stays, the generation is new (a move).
        poller.book.answered("ml/a", Outcome::Accepted { target: 3, generation: 2 });
        assert_eq!(target_seen(&poller).0, 3);
        let accepted = poller.book.moved_at("ml/a").unwrap();
        assert!(accepted > sent);
        // A command the master did not take: back to the master's own target, a move.
        poller.book.sending("ml/a", 2);
        assert_eq!(target_seen(&poller).0, 2);
        poller.book.answered("ml/a", Outcome::Failed);
        assert_eq!(target_seen(&poller).0, 3);
        assert!(poller.book.moved_at("ml/a").unwrap() > accepted);
        // Accepted at another target than was sent (a master that clamps): a move.
        poller.book.sending("ml/a", 1);
        let clamped = poller.book.moved_at("ml/a").unwrap();
        poller.book.answered("ml/a", Outcome::Accepted { target: 2, generation: 3 });
        assert_eq!(target_seen(&poller).0, 2);
        assert!(poller.book.moved_at("ml/a").unwrap() > clamped);
    }
}
