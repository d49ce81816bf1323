//! The actuator: turns the latest decision's intents into scale commands, one in flight per
//! job, and enforces shrink deadlines. It runs as its own task fed through a `watch` channel,
//! so a slow master never delays decisions and a newer decision replaces an older one that
//! was not sent yet.
//!
//! What it remembers per job, and the rules on when a command goes out, are the ledger's
//! (ledger.rs, synchronous and unit-tested), kept in the [`Book`] decisions read their
//! statuses from (book.rs); this file does the I/O around it. Past a shrink's
//! deadline, bound workers beyond that shrink's target and what the latest decision wants
//! (never below the floor) are deleted and counted as forced preemptions, whether the master
//! accepted and did not act, failed, or hung.
//!
//! Every command and deletion goes through the lease gate ([`WriteGate`]) as it is sent: one
//! dropped because this replica no longer leads is not a failure (no backoff); the deadline it
//! set is dropped when due, as its deletions would be.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Preconditions};
use kube::{Api, Client};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::book::Book;
use super::forced::{self, Victim};
use super::gate::{Dropped, Write, WriteGate};
use super::ledger::{bare, Actuation, Command, Outcome};
use super::record::{DecisionRecorder, Record};
use crate::live::endpoint::JobObject;
use crate::live::master_client::MasterError;
use crate::live::names::object_key;
use crate::live::state::{lock, SharedState};
use crate::master_protocol::{ScaleAccepted, ScaleCommand};
use crate::telemetry::Metrics;

#[derive(Clone, Copy, Debug)]
pub struct ActuatorConfig {
    /// Sent as `deadline_s` on shrinks; past it the controller deletes workers itself.
    pub release_deadline: Duration,
    /// Bound on one command including the client's retries.
    pub command_timeout: Duration,
    /// Longest wait before retrying a job whose master failed.
    pub max_backoff: Duration,
}

struct Sent {
    command: Command,
    /// The master's answer; `Err` when the gate did not let the command out.
    result: Result<Result<ScaleAccepted, MasterError>, Dropped>,
}

pub struct Actuator {
    config: ActuatorConfig,
    client: Client,
    /// The cluster state: the workers to delete past a deadline are found there.
    state: SharedState,
    /// The jobs' statuses as decisions read them, and the ledger of commands.
    book: Arc<Book>,
    metrics: Arc<Metrics>,
    recorder: Arc<DecisionRecorder>,
    gate: Arc<WriteGate>,
}

impl Actuator {
    /// `client` deletes workers past a deadline; every write goes through `gate`, and what was
    /// done is written on the job by `recorder`.
    pub fn new(
        config: ActuatorConfig,
        client: Client,
        state: SharedState,
        book: Arc<Book>,
        metrics: Arc<Metrics>,
        recorder: Arc<DecisionRecorder>,
        gate: Arc<WriteGate>,
    ) -> Actuator {
        Actuator { config, client, state, book, metrics, recorder, gate }
    }

    /// Runs until `shutdown` resolves, then waits up to `grace` for commands in flight (a
    /// master may already be applying them; their answers are still recorded) and abandons the
    /// rest. Pending deadlines are dropped: the next leader decides afresh.
    pub async fn run(self, mut latest: watch::Receiver<Actuation>, shutdown: impl std::future::Future<Output = ()>) {
        let grace = self.config.command_timeout;
        let mut commands: JoinSet<()> = JoinSet::new();
        let (done_tx, mut done) = mpsc::unbounded_channel::<Sent>();
        tokio::pin!(shutdown);
        loop {
            let wake = self.book.next_due().unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            // Plan again on a new decision, or once a command's answer may have freed its job
            // for the intent held behind it. A command the gate kept in frees nothing: planning
            // again would only send the same decision to the gate again, at once and forever,
            // until the next leader decides afresh.
            let replan = tokio::select! {
                _ = &mut shutdown => break,
                changed = latest.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    true
                }
                Some(sent) = done.recv() => self.finish(sent),
                _ = tokio::time::sleep_until(wake) => {
                    self.enforce_deadlines().await;
                    true
                }
                Some(_) = commands.join_next(), if !commands.is_empty() => false,
            };
            if replan {
                let actuation = latest.borrow_and_update().clone();
                self.dispatch(&actuation, &mut commands, &done_tx);
            }
        }
        drop(done_tx);
        let waited = tokio::time::timeout(grace, async {
            while self.book.any_in_flight() {
                match done.recv().await {
                    Some(sent) => {
                        self.finish(sent);
                    }
                    None => break,
                }
            }
        })
        .await;
        if waited.is_err() {
            tracing::warn!("shutdown: abandoning scale commands still in flight");
        }
        commands.abort_all();
    }

    fn dispatch(&self, actuation: &Actuation, commands: &mut JoinSet<()>, done: &mpsc::UnboundedSender<Sent>) {
        // Each command is in the known status as it is let out (Book::plan).
        for command in self.book.plan(actuation, self.config.release_deadline) {
            let shrink = command.shrink();
            let release: Vec<String> =
                if shrink { command.intent.release_pods.iter().map(|p| bare(p)).collect() } else { vec![] };
            let deadline_s = if shrink { self.config.release_deadline.as_secs() } else { 0 };
            let message = ScaleCommand::new(command.target, command.intent.reason.as_str(), deadline_s)
                .with_release_pods(release);
            let (done, timeout, gate) = (done.clone(), self.config.command_timeout, self.gate.clone());
            commands.spawn(async move {
                let send = async {
                    match tokio::time::timeout(timeout, command.bounded.job.endpoint.scale(&message)).await {
                        Ok(r) => r,
                        Err(_) => Err(MasterError::Timeout { attempts: 0, timeout }),
                    }
                };
                let result = gate.write(Write::Scale, &command.key, send).await;
                let _ = done.send(Sent { command, result });
            });
        }
    }

    /// Records what became of a command; whether it was sent at all (a command the gate kept
    /// in leaves nothing new to plan from).
    fn finish(&self, sent: Sent) -> bool {
        let Sent { command, result } = sent;
        let result = match result {
            Ok(answer) => answer,
            // Not sent: nothing failed, and the next leader decides afresh.
            Err(Dropped::NotLeader) => {
                self.book.finish(&command, Outcome::NotSent, self.config.max_backoff);
                return false;
            }
            // Abandoned mid-way: the master may or may not have applied it, as after a timeout.
            Err(Dropped::OutlastedLease(timeout)) => Err(MasterError::Timeout { attempts: 0, timeout }),
        };
        self.metrics.record_actuation(result.as_ref().err().map(MasterError::kind));
        let intent = &command.intent;
        let outcome = match &result {
            Ok(answer) => Outcome::Accepted { target: answer.accepted_target, generation: answer.generation },
            Err(MasterError::OutOfBounds { .. }) => Outcome::Refused,
            Err(_) => Outcome::Failed,
        };
        // The known status takes the answer in first: a decision made from now on starts from
        // the accepted target, or from the master's own again when it did not take the command.
        self.book.finish(&command, outcome, self.config.max_backoff);
        match result {
            Ok(answer) => {
                tracing::info!(job = %command.key, from = intent.from, target = command.target, reason = %intent.reason,
                    generation = answer.generation, why = %intent.why, "scale command accepted");
                let record = Record {
                    reason: if command.shrink() { "Shrink" } else { "Grow" },
                    action: "Scale",
                    note: format!("{} -> {} workers ({}): {}", intent.from, command.target, intent.reason, intent.why),
                    annotation: Some(format!(
                        "{} {} -> {} workers ({}): {}",
                        humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
                        intent.from,
                        command.target,
                        intent.reason,
                        intent.why
                    )),
                    warning: false,
                };
                self.spawn_record(command.bounded.job.object.clone(), record);
            }
            Err(e) => {
                tracing::warn!(job = %command.key, target = command.target, reason = %intent.reason, error = %e,
                    kind = e.kind(), "scale command failed");
            }
        }
        true
    }

    fn spawn_record(&self, object: JobObject, record: Record) {
        let recorder = self.recorder.clone();
        tokio::spawn(async move { recorder.record(&object, &record).await });
    }

    /// Deletes workers of jobs past a shrink's deadline that still have more than that
    /// shrink's target (and than the latest decision wants; never below the floor), counting
    /// each as a forced preemption.
    async fn enforce_deadlines(&self) {
        let due = self.book.take_due();
        if due.is_empty() {
            return;
        }
        for (d, target) in due {
            let workers = lock(&self.state).workers_of(&d.namespace, &d.job);
            let victims = forced::choose(&workers, target, d.min, &d.release_pods);
            if victims.is_empty() {
                continue;
            }
            let key = object_key(&d.namespace, &d.job);
            let deleted = self.delete(&d.namespace, &victims).await;
            tracing::warn!(job = %key, target, deleted = ?deleted, wanted = victims.len(),
                "shrink deadline passed; deleted workers the master did not release");
            if deleted.is_empty() {
                continue;
            }
            self.metrics.record_forced_preemptions(&key, deleted.len() as u64);
            let note = format!(
                "the master did not release workers within {}s; deleted {}",
                self.config.release_deadline.as_secs(),
                deleted.join(", ")
            );
            let record =
                Record { reason: "ForcedPreemption", action: "DeleteWorkers", note, annotation: None, warning: true };
            self.spawn_record(d.object, record);
        }
    }

    async fn delete(&self, namespace: &str, victims: &[Victim]) -> Vec<String> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let mut deleted = Vec::new();
        for v in victims {
            let params = DeleteParams {
                preconditions: Some(Preconditions { uid: v.uid.clone(), resource_version: None }),
                ..DeleteParams::default()
            };
            let what = object_key(namespace, &v.name);
            match self.gate.write(Write::Delete, &what, api.delete(&v.name, &params)).await {
                Ok(Ok(_)) => deleted.push(v.name.clone()),
                // Gone or replaced meanwhile: it is not holding the room any more either.
                Ok(Err(kube::Error::Api(s))) if s.code == 404 || s.code == 409 => {}
                Ok(Err(e)) => {
                    tracing::warn!(pod = %v.name, namespace, error = %e, "could not delete a worker past its deadline")
                }
                // Not leading: the rest would be dropped too.
                Err(Dropped::NotLeader) => break,
                Err(Dropped::OutlastedLease(_)) => {}
            }
        }
        deleted
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use futures::future::BoxFuture;
    use tokio::sync::{Notify, Semaphore};

    use super::*;
    use crate::core::{Reason, ScaleIntent};
    use crate::live::controller::ledger::Bounded;
    use crate::live::endpoint::{DiscoveredJob, JobEndpoint};
    use crate::live::kinds::KindResources;
    use crate::master_protocol::Status;

    const CONFIG: ActuatorConfig = ActuatorConfig {
        release_deadline: Duration::from_secs(30),
        command_timeout: Duration::from_secs(20),
        max_backoff: Duration::from_secs(30),
    };

    #[derive(Clone, Copy, PartialEq)]
    enum Answer {
        Accept,
        /// 409: the target is outside the job's bounds.
        Refuse,
        /// 503 on every attempt.
        Fail,
        /// Accepts once the test adds a permit to `release`.
        Hold,
    }

    /// A master that records every scale command and answers as the test says.
    struct Fake {
        sent: Mutex<Vec<ScaleCommand>>,
        answer: Mutex<Answer>,
        release: Semaphore,
    }

    impl Fake {
        fn new(answer: Answer) -> Arc<Fake> {
            Arc::new(Fake { sent: Mutex::default(), answer: Mutex::new(answer), release: Semaphore::new(0) })
        }

        fn targets(&self) -> Vec<u32> {
            self.sent.lock().unwrap().iter().map(|c| c.target).collect()
        }
    }

    impl JobEndpoint for Fake {
        fn describe(&self) -> String {
            "fake".into()
        }
        fn status(&self) -> BoxFuture<'_, Result<Status, MasterError>> {
            unreachable!("the actuator never polls")
        }
        fn scale<'a>(&'a self, command: &'a ScaleCommand) -> BoxFuture<'a, Result<ScaleAccepted, MasterError>> {
            self.sent.lock().unwrap().push(command.clone());
            let answer = *self.answer.lock().unwrap();
            Box::pin(async move {
                match answer {
                    Answer::Accept => {}
                    Answer::Hold => self.release.acquire().await.expect("open").forget(),
                    Answer::Refuse => return Err(MasterError::OutOfBounds { min: 2, max: 10, message: "no".into() }),
                    Answer::Fail => {
                        return Err(MasterError::ServerError { status: 503, attempts: 3, message: "busy".into() })
                    }
                }
                Ok(ScaleAccepted { accepted_target: command.target, generation: 2 })
            })
        }
    }

    struct Running {
        decisions: watch::Sender<Actuation>,
        metrics: Arc<Metrics>,
        book: Arc<Book>,
    }

    /// An actuator for one job whose master is `fake`, leading or not. Its client points
    /// nowhere: the events it records fail and are only logged.
    fn start(leading: bool) -> Running {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let metrics = Arc::new(Metrics::new());
        let (leader, follows) = watch::channel(leading);
        // The actuator's gate outlives this function; the sender is not needed after.
        std::mem::forget(leader);
        let gate = Arc::new(WriteGate::new(follows, Duration::from_secs(10), metrics.clone()));
        let kinds = Arc::new(KindResources::new(client.clone()));
        let recorder = Arc::new(DecisionRecorder::new(client.clone(), "test".into(), gate.clone(), kinds));
        let book = Arc::new(Book::new(Duration::from_secs(60), metrics.clone(), Arc::new(Notify::new())));
        let actuator =
            Actuator::new(CONFIG, client, SharedState::default(), book.clone(), metrics.clone(), recorder, gate);
        let (decisions, latest) = watch::channel(Actuation::default());
        tokio::spawn(actuator.run(latest, std::future::pending()));
        Running { decisions, metrics, book }
    }

    impl Running {
        /// A decision that asks the job (at `from` workers) for `target`, then lets every
        /// task run.
        async fn decide(&self, fake: &Arc<Fake>, from: u32, target: u32) {
            self.propose(fake, from, target);
            settle().await;
        }

        /// The same decision, without waiting for anything.
        fn propose(&self, fake: &Arc<Fake>, from: u32, target: u32) {
            // Made from the status as the book knows it now, as the decision loop's are.
            let moved_at = self.book.moved_at("ml/a");
            let bounded = Bounded { job: job_of(fake), min: 2, max: 10, target: from, generation: 1, moved_at };
            let reason = if target < from { Reason::OnlineHeadroom } else { Reason::Grow };
            let intent = ScaleIntent {
                job: "ml/a".into(),
                from,
                target,
                release_pods: vec![],
                release_nodes: vec![],
                reason,
                why: String::new(),
            };
            let actuation = Actuation { intents: vec![intent], jobs: BTreeMap::from([("ml/a".to_string(), bounded)]) };
            self.decisions.send_replace(actuation);
        }
    }

    fn job_of(fake: &Arc<Fake>) -> DiscoveredJob {
        DiscoveredJob {
            namespace: "ml".into(),
            name: "a".into(),
            object: crate::live::endpoint::JobObject {
                api_version: "v1".into(),
                kind: "Service".into(),
                namespace: "ml".into(),
                name: "a-master".into(),
                uid: None,
            },
            endpoint: fake.clone(),
            overrides: Default::default(),
        }
    }

    /// Lets every task run until all wait (paused time moves on only then).
    async fn settle() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn one_command_in_flight_per_job() {
        let fake = Fake::new(Answer::Hold);
        let actuator = start(true);
        actuator.decide(&fake, 8, 5).await;
        assert_eq!(fake.targets(), [5]);
        // A newer decision while the master has not answered: nothing more goes out.
        actuator.decide(&fake, 8, 4).await;
        assert_eq!(fake.targets(), [5]);
        // Answered: the next decision's target goes out.
        fake.release.add_permits(1);
        settle().await;
        actuator.decide(&fake, 5, 4).await;
        assert_eq!(fake.targets(), [5, 4]);
    }

    /// How many scale commands the gate kept in.
    fn scale_drops(metrics: &Metrics) -> u64 {
        let text = metrics.encode();
        let line = text
            .lines()
            .find(|l| {
                l.starts_with("colocate_writes_dropped_total{")
                    && l.contains("write=\"scale\"")
                    && l.contains("cause=\"not_leader\"")
            })
            .unwrap_or_else(|| panic!("no scale drop counter in\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_sends_nothing_and_asks_the_gate_once_per_decision() {
        let fake = Fake::new(Answer::Accept);
        let actuator = start(false);
        // Turns, not time: a loop that planned again after each drop would never let paused
        // time move on.
        let turns = || async {
            for _ in 0..200 {
                tokio::task::yield_now().await;
            }
        };
        actuator.propose(&fake, 8, 5);
        turns().await;
        assert_eq!(fake.targets(), Vec::<u32>::new());
        assert_eq!(scale_drops(&actuator.metrics), 1);
        actuator.propose(&fake, 8, 4);
        turns().await;
        assert_eq!(scale_drops(&actuator.metrics), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_target_the_master_refused_is_not_sent_again() {
        let fake = Fake::new(Answer::Refuse);
        let actuator = start(true);
        actuator.decide(&fake, 8, 5).await;
        actuator.decide(&fake, 8, 5).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        actuator.decide(&fake, 8, 5).await;
        assert_eq!(fake.targets(), [5]);
        // Another target is asked.
        actuator.decide(&fake, 8, 6).await;
        assert_eq!(fake.targets(), [5, 6]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_command_is_retried_after_a_backoff() {
        let fake = Fake::new(Answer::Fail);
        let actuator = start(true);
        actuator.decide(&fake, 8, 5).await;
        assert_eq!(fake.targets(), [5]);
        // The first backoff is a second: a decision within it sends nothing.
        tokio::time::sleep(Duration::from_millis(500)).await;
        actuator.decide(&fake, 8, 5).await;
        assert_eq!(fake.targets(), [5]);
        tokio::time::sleep(Duration::from_millis(600)).await;
        actuator.decide(&fake, 8, 5).await;
        assert_eq!(fake.targets(), [5, 5]);
        // The second failure doubles it: 2 s.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        actuator.decide(&fake, 8, 5).await;
        assert_eq!(fake.targets(), [5, 5]);
        *fake.answer.lock().unwrap() = Answer::Accept;
        tokio::time::sleep(Duration::from_millis(600)).await;
        actuator.decide(&fake, 8, 5).await;
        assert_eq!(fake.targets(), [5, 5, 5]);
    }

    #[tokio::test(start_paused = true)]
    async fn decisions_read_a_command_in_flight_and_its_answer_from_the_book() {
        let fake = Fake::new(Answer::Hold);
        let actuator = start(true);
        let job = job_of(&fake);
        let polled: Status = serde_json::from_value(serde_json::json!({
            "job": "a", "generation": 1, "phase": "Running",
            "workers": {"current": 8, "target": 8, "min": 2, "max": 10, "pending": 0},
            "worker_resources": {"cpu": "1", "memory": "1Gi"}
        }))
        .unwrap();
        let now = std::time::Instant::now();
        actuator.book.observe(std::slice::from_ref(&job), vec![(&job, Ok(polled))], vec![], now);
        let known = || {
            let status = actuator.book.known().jobs["ml/a"].status.clone().unwrap();
            (status.workers.target, status.generation)
        };
        // In flight: decisions plan from its target before the master answers.
        actuator.decide(&fake, 8, 5).await;
        assert_eq!((fake.targets(), known()), (vec![5], (5, 1)));
        // Accepted: laid over the polled status until a poll asked since replaces it.
        fake.release.add_permits(1);
        settle().await;
        assert_eq!(known(), (5, 2));
        // Refused: back to the status as it was before the command.
        *fake.answer.lock().unwrap() = Answer::Refuse;
        actuator.decide(&fake, 5, 4).await;
        assert_eq!((fake.targets(), known()), (vec![5, 4], (5, 2)));
    }
}
