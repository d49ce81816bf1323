//! The actuator: turns the latest decision's intents into scale commands, one in flight per
//! job, and enforces shrink deadlines. It runs as its own task fed through a `watch` channel,
//! so a slow master never delays decisions and a newer decision replaces an older one that
//! was not sent yet.
//!
//! Per job it remembers the target the master last accepted (not to send it again before the
//! next status poll shows it), a backoff after transient failures, a refused target (409) and
//! the shrink deadlines: `release_deadline` after each shrink was asked for. Past one, bound
//! workers beyond that shrink's target and what the latest decision wants (never below the
//! floor) are deleted and counted as forced preemptions, whether the master accepted and did
//! not act, failed, or hung.
//!
//! Every command and deletion goes through the lease gate ([`WriteGate`]) as it is sent: one
//! dropped because this replica no longer leads is not a failure (no backoff); the deadline it
//! set is dropped when due, as its deletions would be.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::reflector::Store;
use kube::{Api, Client};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::forced::{self, ShrinkSteps, Victim};
use super::gate::{Dropped, Write, WriteGate};
use super::poller::Poller;
use super::record::{DecisionRecorder, Record};
use crate::core::ScaleIntent;
use crate::live::endpoint::{DiscoveredJob, JobObject};
use crate::live::master::{MasterError, ScaleAccepted, ScaleCommand};
use crate::telemetry::Metrics;

/// What one decision asks for: its intents and the jobs they name, with their bounds.
#[derive(Clone, Default)]
pub struct Actuation {
    pub intents: Vec<ScaleIntent>,
    pub jobs: BTreeMap<String, Bounded>,
    /// When the decision started reading the cached statuses (None: the empty initial value).
    pub decided_at: Option<Instant>,
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
}

#[derive(Clone, Copy, Debug)]
pub struct ActuatorConfig {
    /// Sent as `deadline_s` on shrinks; past it the controller deletes workers itself.
    pub release_deadline: Duration,
    /// Bound on one command including the client's retries.
    pub command_timeout: Duration,
    /// Longest wait before retrying a job whose master failed.
    pub max_backoff: Duration,
}

#[derive(Default)]
struct JobState {
    /// Target and generation of the last accepted command: not sent again until a newer
    /// generation shows the job moved away from it (someone else scaled it).
    accepted: Option<(u32, u64)>,
    /// When the last command was accepted (after the cached status took it in).
    accepted_at: Option<Instant>,
    in_flight: bool,
    failures: u32,
    retry_at: Option<Instant>,
    refused: Option<u32>,
    /// What the latest decision wants (its intent, else the master's target): a deadline never
    /// removes workers the job may keep now.
    wanted: u32,
    deadline: Option<Deadline>,
}

#[derive(Clone)]
struct Deadline {
    steps: ShrinkSteps,
    min: u32,
    release_pods: Vec<String>,
    object: JobObject,
    namespace: String,
    job: String,
}

struct Sent {
    key: String,
    target: u32,
    intent: ScaleIntent,
    bounded: Bounded,
    /// The master's answer; `Err` when the gate did not let the command out.
    result: Result<Result<ScaleAccepted, MasterError>, Dropped>,
}

pub struct Actuator {
    pub config: ActuatorConfig,
    pub client: Client,
    pub pods: Store<Pod>,
    pub poller: Arc<Poller>,
    pub metrics: Arc<Metrics>,
    pub recorder: Arc<DecisionRecorder>,
    pub gate: Arc<WriteGate>,
}

impl Actuator {
    /// Runs until `shutdown` resolves, then waits up to `grace` for commands in flight (a
    /// master may already be applying them; their answers are still recorded) and abandons the
    /// rest. Pending deadlines are dropped: the next leader decides afresh.
    pub async fn run(self, mut latest: watch::Receiver<Actuation>, shutdown: impl std::future::Future<Output = ()>) {
        let grace = self.config.command_timeout;
        let mut states: BTreeMap<String, JobState> = BTreeMap::new();
        let mut commands: JoinSet<()> = JoinSet::new();
        let (done_tx, mut done) = mpsc::unbounded_channel::<Sent>();
        tokio::pin!(shutdown);
        loop {
            let next_due = states.values().filter_map(|s| s.deadline.as_ref()?.steps.next_due()).min();
            let wake = next_due.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                _ = &mut shutdown => break,
                changed = latest.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                Some(sent) = done.recv() => self.finish(sent, &mut states).await,
                _ = tokio::time::sleep_until(wake) => self.enforce_deadlines(&mut states).await,
                Some(_) = commands.join_next(), if !commands.is_empty() => {}
            }
            let actuation = latest.borrow_and_update().clone();
            self.dispatch(&actuation, &mut states, &mut commands, &done_tx);
        }
        drop(done_tx);
        let waited = tokio::time::timeout(grace, async {
            while states.values().any(|s| s.in_flight) {
                match done.recv().await {
                    Some(sent) => self.finish(sent, &mut states).await,
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

    fn dispatch(
        &self,
        actuation: &Actuation,
        states: &mut BTreeMap<String, JobState>,
        commands: &mut JoinSet<()>,
        done: &mpsc::UnboundedSender<Sent>,
    ) {
        states.retain(|k, s| actuation.jobs.contains_key(k) || s.in_flight);
        let now = Instant::now();
        for (key, bounded) in &actuation.jobs {
            let intent = actuation.intents.iter().find(|i| i.job == *key);
            let wanted = intent.map_or(bounded.target, |i| i.target.clamp(bounded.min, bounded.max.max(bounded.min)));
            states.entry(key.clone()).or_default().wanted = wanted;
        }
        for intent in &actuation.intents {
            let Some(bounded) = actuation.jobs.get(&intent.job) else { continue };
            let state = states.entry(intent.job.clone()).or_default();
            // The floor is never broken by a command: a job asked to give way (target 0) keeps
            // its floor; protocol v1 refuses targets below `min` anyway.
            let target = intent.target.clamp(bounded.min, bounded.max.max(bounded.min));
            let already = state.accepted.is_some_and(|(t, g)| t == target && bounded.generation <= g);
            // A decision made before the last acceptance started from the old target (say 28
            // while the master already moved to 20): a rise to 22 would pass for a shrink and
            // skip the growth damping. The acceptance wakes the decision loop for a fresh one.
            let stale = state.accepted_at.is_some_and(|at| actuation.decided_at.is_none_or(|d| d < at));
            if state.in_flight
                || stale
                || already
                || state.refused == Some(target)
                || state.retry_at.is_some_and(|t| t > now)
                || target == intent.from
            {
                continue;
            }
            state.in_flight = true;
            let shrink = target < intent.from;
            if shrink {
                // The deadline runs from the time the room was asked for, whether the master
                // accepts, fails or hangs: online pods wait on it either way.
                let deadline = state.deadline.get_or_insert_with(|| Deadline {
                    steps: ShrinkSteps::default(),
                    min: bounded.min,
                    release_pods: Vec::new(),
                    object: bounded.job.object.clone(),
                    namespace: bounded.job.namespace.clone(),
                    job: bounded.job.name.clone(),
                });
                deadline.steps.push(now + self.config.release_deadline, target);
                deadline.release_pods = intent.release_pods.iter().map(|p| bare(p)).collect();
            }
            let release: Vec<String> =
                if shrink { intent.release_pods.iter().map(|p| bare(p)).collect() } else { vec![] };
            let deadline_s = if shrink { self.config.release_deadline.as_secs() } else { 0 };
            let command = ScaleCommand::new(target, intent.reason.as_str(), deadline_s).with_release_pods(release);
            let (intent, bounded, done, timeout, gate) =
                (intent.clone(), bounded.clone(), done.clone(), self.config.command_timeout, self.gate.clone());
            commands.spawn(async move {
                let send = async {
                    match tokio::time::timeout(timeout, bounded.job.endpoint.scale(&command)).await {
                        Ok(r) => r,
                        Err(_) => Err(MasterError::Timeout { attempts: 0, timeout }),
                    }
                };
                let result = gate.write(Write::Scale, &intent.job, send).await;
                let key = intent.job.clone();
                let _ = done.send(Sent { key, target, intent, bounded, result });
            });
        }
    }

    async fn finish(&self, sent: Sent, states: &mut BTreeMap<String, JobState>) {
        let state = states.entry(sent.key.clone()).or_default();
        state.in_flight = false;
        let result = match sent.result {
            Ok(answer) => answer,
            // Not sent: nothing failed, and the next leader decides afresh.
            Err(Dropped::NotLeader) => return,
            // Abandoned mid-way: the master may or may not have applied it, as after a timeout.
            Err(Dropped::OutlastedLease(timeout)) => Err(MasterError::Timeout { attempts: 0, timeout }),
        };
        self.metrics.record_actuation(result.as_ref().err().map(MasterError::kind));
        let intent = &sent.intent;
        match result {
            Ok(answer) => {
                state.accepted = Some((answer.accepted_target, answer.generation));
                state.failures = 0;
                state.retry_at = None;
                state.refused = None;
                self.poller.accepted(&sent.key, &answer);
                state.accepted_at = Some(Instant::now());
                let shrink = sent.target < intent.from;
                tracing::info!(job = %sent.key, from = intent.from, target = sent.target, reason = %intent.reason,
                    generation = answer.generation, why = %intent.why, "scale command accepted");
                if !shrink {
                    state.deadline = None;
                }
                let record = Record {
                    reason: if shrink { "Shrink" } else { "Grow" },
                    action: "Scale",
                    note: format!("{} -> {} workers ({}): {}", intent.from, sent.target, intent.reason, intent.why),
                    annotation: Some(format!(
                        "{} {} -> {} workers ({}): {}",
                        humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
                        intent.from,
                        sent.target,
                        intent.reason,
                        intent.why
                    )),
                    warning: false,
                };
                self.spawn_record(sent.bounded.job.object.clone(), record);
            }
            Err(e) => {
                tracing::warn!(job = %sent.key, target = sent.target, reason = %intent.reason, error = %e,
                    kind = e.kind(), "scale command failed");
                if let MasterError::OutOfBounds { .. } = e {
                    state.refused = Some(sent.target);
                } else {
                    state.failures += 1;
                    let backoff = Duration::from_millis(500u64.saturating_mul(1 << state.failures.min(10)));
                    state.retry_at = Some(Instant::now() + backoff.min(self.config.max_backoff));
                }
            }
        }
    }

    fn spawn_record(&self, object: JobObject, record: Record) {
        let recorder = self.recorder.clone();
        tokio::spawn(async move { recorder.record(&object, &record).await });
    }

    /// Deletes workers of jobs past a shrink's deadline that still have more than that
    /// shrink's target (and than the latest decision wants; never below the floor), counting
    /// each as a forced preemption.
    async fn enforce_deadlines(&self, states: &mut BTreeMap<String, JobState>) {
        let now = Instant::now();
        let mut due: Vec<(Deadline, u32)> = Vec::new();
        for state in states.values_mut() {
            let Some(d) = state.deadline.as_mut() else { continue };
            let Some(target) = d.steps.take_due(now) else { continue };
            due.push((d.clone(), target.max(state.wanted)));
            if d.steps.is_empty() {
                state.deadline = None;
            }
        }
        if due.is_empty() {
            return;
        }
        let pods = self.pods.state();
        for (d, target) in due {
            let victims = forced::choose(&pods, &d.namespace, &d.job, target, d.min, &d.release_pods);
            if victims.is_empty() {
                continue;
            }
            let key = format!("{}/{}", d.namespace, d.job);
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
            let what = format!("{namespace}/{}", v.name);
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

/// A pod name without the `namespace/` the snapshot qualifies it with.
fn bare(qualified: &str) -> String {
    qualified.rsplit_once('/').map_or(qualified, |(_, n)| n).to_string()
}
