//! The decision loop: on watch events (debounced) and on a tick, build a snapshot from the
//! caches, the polled statuses and the samples, run the core, export the result and, when
//! leading and not in dry-run, hand the intents to the actuator.
//!
//! Debounce is leading-edge: the first event after a quiet period is decided on at once (the
//! reaction time of a spike is what matters), and events that follow within `debounce` of a
//! decision are folded into one decision at the end of that window.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use super::ledger::{Actuation, Bounded};
use super::node_status::{NodeBatch, NodeBatches};
use super::poller::Poller;
use super::services::ServiceDirectory;
use crate::core::Core;
use crate::live::sampler::usage::PodUsages;
use crate::live::sampler::ServiceReading;
use crate::live::view::{self, Inputs, JobSource};
use crate::live::watch::Caches;
use crate::telemetry::Metrics;

/// Where service readings come from (the sampler; nothing when no service has a source).
pub type ReadingsFn = Box<dyn Fn(Duration) -> BTreeMap<String, ServiceReading> + Send + Sync>;

/// Where pods' usage comes from (`capacity: usage`; nothing otherwise, and pods count at their
/// requests).
pub type UsageFn = Box<dyn Fn(Duration) -> Arc<PodUsages> + Send + Sync>;

/// Where a decision reads the cluster from, besides the core's own memory.
pub struct Sources {
    /// The reflectors' caches: nodes, pods, HPAs, master Services.
    pub caches: Caches,
    /// The jobs and their statuses.
    pub poller: Arc<Poller>,
    /// The online services and their selectors.
    pub services: ServiceDirectory,
    /// The services' load and latency samples.
    pub readings: ReadingsFn,
    /// The pods' CPU and memory usage.
    pub usage: UsageFn,
}

pub struct Decider {
    core: Core,
    sources: Sources,
    metrics: Arc<Metrics>,
    leader: watch::Receiver<bool>,
    dry_run: bool,
    actuation: watch::Sender<Actuation>,
    /// Where the batch capacity each node should carry goes (the node-status writer).
    node_batches: watch::Sender<NodeBatches>,
    /// Batch resources colocate names as its own (`colocate.dev/`): a node still carrying them
    /// when the decision gives it none (`capacity: requests`) has them removed. Koordinator's
    /// names are left alone then: Koordinator may be the one publishing them.
    owns_batch_names: bool,
    /// Problems reported by the previous decision, so each is logged once when it appears.
    known_problems: Vec<String>,
}

impl Decider {
    /// A decider that hands its intents to `actuation` while `leader` says this replica leads
    /// and it is not a dry run (a follower sends an empty actuation instead).
    pub fn new(
        core: Core,
        sources: Sources,
        metrics: Arc<Metrics>,
        leader: watch::Receiver<bool>,
        dry_run: bool,
        actuation: watch::Sender<Actuation>,
    ) -> Decider {
        let (node_batches, _) = watch::channel(NodeBatches::new());
        Decider {
            core,
            sources,
            metrics,
            leader,
            dry_run,
            actuation,
            node_batches,
            owns_batch_names: false,
            known_problems: Vec::new(),
        }
    }

    /// Hands each decision's batch capacity per node to `node_batches` (while leading and not
    /// in a dry run); `owns_batch_names`: see the field.
    pub fn publishing(mut self, node_batches: watch::Sender<NodeBatches>, owns_batch_names: bool) -> Decider {
        self.node_batches = node_batches;
        self.owns_batch_names = owns_batch_names;
        self
    }

    pub async fn run(
        mut self,
        changed: Arc<Notify>,
        tick: Duration,
        debounce: Duration,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let mut ticker = tokio::time::interval(tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut leader = self.leader.clone();
        let mut last = Instant::now() - debounce;
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = ticker.tick() => {}
                _ = changed.notified() => {
                    let quiet_until = last + debounce;
                    if Instant::now() < quiet_until {
                        tokio::select! {
                            _ = &mut shutdown => break,
                            _ = tokio::time::sleep_until(quiet_until.into()) => {}
                        }
                    }
                }
                // Decide at once on becoming leader rather than at the next event or tick.
                Ok(()) = leader.changed() => {}
            }
            last = Instant::now();
            self.decide_once().await;
            ticker.reset();
        }
    }

    /// One decision; returns the actuation it produced (also sent to the actuator when acting).
    pub async fn decide_once(&mut self) -> Actuation {
        let Sources { caches, poller, services, readings, usage } = &self.sources;
        let hpas = caches.hpas.state();
        services.resolve(&hpas).await;
        let started = Instant::now();
        let cpu_started = crate::live::clock::thread_cpu();
        // Monotonic: a step of the wall clock must not age the core's memories at once.
        let now = crate::live::clock::now();
        let (services, mut problems) = services.services(&hpas, &readings(now));
        // The jobs the latest poll found, with their statuses: one list, owned by the poller.
        let known = poller.known();
        problems.extend(known.problems);
        let statuses = known.jobs;
        let sources: Vec<JobSource> = statuses
            .values()
            .map(|p| JobSource {
                namespace: p.job.namespace.clone(),
                name: p.job.name.clone(),
                status: p.status.clone(),
                overrides: p.job.overrides.clone(),
            })
            .collect();
        let usage = usage(now);
        let inputs = Inputs { now, hpas: &hpas, services: &services, jobs: &sources, usage: &usage };
        // The state is held for the decision only: watch events wait meanwhile, so the
        // snapshot is one consistent picture, and nothing is copied out of it.
        let shared = caches.state.clone();
        let mut state = crate::live::state::lock(&shared);
        let (snap, view_problems) = view::snapshot(&mut state, &inputs);
        problems.extend(view_problems);
        let span = tracing::info_span!(
            "decision",
            nodes = snap.nodes.len(),
            pods = snap.pods.len(),
            jobs = snap.jobs.len(),
            intents = tracing::field::Empty
        );
        let _entered = span.enter();
        if tracing::enabled!(tracing::Level::DEBUG) {
            // What the decision read of each service's load: a live decision and its replay can
            // only be compared sample by sample (docs/replay.md, on checking replay against
            // live runs).
            for s in &snap.services {
                if let Some(newest) = s.load.last() {
                    tracing::debug!(service = %s.name, load = newest.value, age = ?now.saturating_sub(newest.at),
                        samples = s.load.len(), "load read");
                }
            }
        }
        let decision = self.core.decide(snap);
        let batches: NodeBatches = decision
            .nodes
            .iter()
            .zip(&snap.nodes)
            .filter(|(d, n)| d.batch.is_some() || (n.batch.is_some() && self.owns_batch_names))
            .map(|(d, n)| NodeBatch { node: n.name.clone(), want: d.batch, carried: n.batch })
            .collect();
        // The same span on both clocks; nothing in it yields, so the thread's CPU time is this
        // decision's alone.
        let took = started.elapsed();
        let cpu = cpu_started.zip(crate::live::clock::thread_cpu()).map(|(from, to)| to.saturating_sub(from));
        let fresh = self.metrics.observe_decision(&decision, snap, took);
        if let Some(cpu) = cpu {
            self.metrics.observe_decision_cpu(cpu);
        }
        self.metrics.record_decision();
        span.record("intents", decision.intents.len());
        self.log_problems(problems, &decision.notes);

        let jobs = snap
            .jobs
            .iter()
            .filter_map(|j| {
                let polled = statuses.get(&j.name)?;
                let status = polled.status.as_ref()?;
                let bounded = Bounded {
                    job: polled.job.clone(),
                    min: j.min_workers,
                    max: j.max_workers,
                    generation: status.generation,
                    moved_at: polled.moved_at,
                    target: j.target_workers,
                };
                Some((j.name.clone(), bounded))
            })
            .collect();
        drop(state);
        let actuation = Actuation { intents: decision.intents, jobs };
        let leading = *self.leader.borrow();
        for i in &actuation.intents {
            let acting = leading && !self.dry_run;
            if fresh.contains(&i.job) {
                tracing::info!(job = %i.job, from = i.from, target = i.target, reason = %i.reason, why = %i.why,
                    acting, dry_run = self.dry_run, "intent");
            } else {
                tracing::debug!(job = %i.job, from = i.from, target = i.target, reason = %i.reason, "intent (repeated)");
            }
        }
        if leading && !self.dry_run {
            self.actuation.send_replace(actuation.clone());
            self.node_batches.send_replace(batches);
        } else {
            // A follower (or a dry run) must not leave a stale actuation for when it leads.
            self.actuation.send_replace(Actuation::default());
            self.node_batches.send_replace(NodeBatches::new());
        }
        actuation
    }

    fn log_problems(&mut self, mut problems: Vec<String>, notes: &[String]) {
        problems.extend(notes.iter().cloned());
        problems.sort();
        problems.dedup();
        for p in problems.iter().filter(|p| !self.known_problems.contains(p)) {
            tracing::warn!(problem = %p, "cannot use part of the cluster state");
        }
        self.known_problems = problems;
    }
}

#[cfg(test)]
#[path = "decider_tests.rs"]
mod tests;
