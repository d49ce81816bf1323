//! The master side of master protocol v1 (`docs/master-protocol.md`), callable in process:
//! what a master adds on top of a worker count (the generation, idempotent command ids, bounds,
//! the phase) over a [`WorkerBackend`].
//!
//! [`MasterState::status`] and [`MasterState::scale`] are the protocol's two calls without
//! HTTP: the reference master's handlers add the token check, body parsing and status codes,
//! and the controller's Kubernetes adapters run the same ledger for jobs that have no master of
//! their own.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, RwLock};

use tokio::sync::Mutex;

use super::wire::{Phase, ScaleAccepted, ScaleCommand, Status, WorkerResources, Workers};
use super::worker_backend::{BackendError, Observed, WorkerBackend};

/// Longest accepted `command_id`: the master remembers ids, so their size is bounded too.
pub const MAX_COMMAND_ID: usize = 256;

/// What a master serves besides the worker count.
#[derive(Clone, Debug)]
pub struct MasterConfig {
    pub job: String,
    pub min: u32,
    pub max: u32,
    pub worker_resources: WorkerResources,
    pub rescale_cost_s: Option<f64>,
    /// Announced as `worker_release_s` (v1.1): how long a released worker takes to be gone.
    pub worker_release_s: Option<f64>,
    /// When set, every request needs `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Accepted command ids remembered for idempotency (oldest forgotten first). A controller
    /// retries a command within seconds, so a few hundred recent ids are plenty; the default is
    /// 1024.
    pub remembered_commands: usize,
    /// The first generation. The protocol says the generation only grows; a master that can
    /// restart should seed this from something that survives it (over a Deployment, its
    /// `metadata.generation`, which grows on every replicas change).
    pub initial_generation: u64,
}

impl MasterConfig {
    pub fn new(job: impl Into<String>, min: u32, max: u32, worker_resources: WorkerResources) -> MasterConfig {
        MasterConfig {
            job: job.into(),
            min,
            max,
            worker_resources,
            rescale_cost_s: None,
            worker_release_s: None,
            token: None,
            remembered_commands: 1024,
            initial_generation: 1,
        }
    }
}

/// A configuration the master refuses to start with.
#[derive(Debug, thiserror::Error)]
pub enum MasterConfigError {
    #[error("min workers ({min}) is above max workers ({max})")]
    Bounds { min: u32, max: u32 },
    #[error("the job name is empty")]
    EmptyJob,
    #[error("the bearer token is empty (leave it unset to serve without one)")]
    EmptyToken,
    #[error("remembered_commands must be at least 1 (idempotency needs to remember the last command)")]
    NoMemory,
}

impl MasterConfig {
    fn validate(&self) -> Result<(), MasterConfigError> {
        if self.min > self.max {
            return Err(MasterConfigError::Bounds { min: self.min, max: self.max });
        }
        if self.job.is_empty() {
            return Err(MasterConfigError::EmptyJob);
        }
        if self.token.as_deref().is_some_and(str::is_empty) {
            return Err(MasterConfigError::EmptyToken);
        }
        if self.remembered_commands == 0 {
            return Err(MasterConfigError::NoMemory);
        }
        Ok(())
    }
}

/// Why [`MasterState::scale`] did not accept a command. Over HTTP: 400, 409 and 503.
#[derive(Debug, thiserror::Error)]
pub enum ScaleError {
    #[error("command_id: must be 1 to {MAX_COMMAND_ID} bytes, got {0}")]
    BadCommandId(usize),
    #[error("target {target} is outside [{min}, {max}]")]
    OutOfBounds { target: u32, min: u32, max: u32 },
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Shared state of a master: configuration, backend, generation and recent commands. Cheap to
/// clone (an `Arc`).
pub struct MasterState<B> {
    shared: Arc<Shared<B>>,
}

impl<B> Clone for MasterState<B> {
    fn clone(&self) -> Self {
        MasterState { shared: Arc::clone(&self.shared) }
    }
}

struct Shared<B> {
    /// Replaced whole by [`MasterState::reconfigure`]; every request reads one version.
    config: RwLock<Arc<MasterConfig>>,
    backend: B,
    /// One lock over the ledger and the backend calls: a command's check, backend call and
    /// generation bump are one step, so a retry racing its original is still applied once and a
    /// status read never sees a target without its generation.
    ledger: Mutex<Ledger>,
}

struct Ledger {
    generation: u64,
    /// The target of `generation`; `None` until the backend is first observed.
    target: Option<u32>,
    order: VecDeque<String>,
    answers: HashMap<String, ScaleAccepted>,
}

impl Ledger {
    /// Adopts the backend's target; a change made behind the master's back is a new generation.
    fn follow(&mut self, observed: u32) {
        match self.target {
            Some(t) if t != observed => self.generation += 1,
            _ => {}
        }
        self.target = Some(observed);
    }

    fn remember(&mut self, id: String, answer: ScaleAccepted, capacity: usize) {
        while self.order.len() >= capacity {
            if let Some(old) = self.order.pop_front() {
                self.answers.remove(&old);
            }
        }
        self.order.push_back(id.clone());
        self.answers.insert(id, answer);
    }
}

impl<B: WorkerBackend> MasterState<B> {
    pub fn new(config: MasterConfig, backend: B) -> Result<MasterState<B>, MasterConfigError> {
        config.validate()?;
        let ledger = Ledger {
            generation: config.initial_generation,
            target: None,
            order: VecDeque::new(),
            answers: HashMap::new(),
        };
        let config = RwLock::new(Arc::new(config));
        Ok(MasterState { shared: Arc::new(Shared { config, backend, ledger: Mutex::new(ledger) }) })
    }

    pub fn backend(&self) -> &B {
        &self.shared.backend
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<MasterConfig> {
        // A writer only swaps the Arc, so a poisoned lock still holds a whole configuration.
        Arc::clone(&self.shared.config.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Replaces the configuration (new bounds, resources, rescale cost) and keeps the ledger:
    /// the generation goes on from where it is (`initial_generation` is ignored) and remembered
    /// command ids still answer with their first answer, so a retry stays idempotent.
    pub fn reconfigure(&self, config: MasterConfig) -> Result<(), MasterConfigError> {
        config.validate()?;
        *self.shared.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
        Ok(())
    }

    /// `GET /v1/status`: observes the backend and follows a target changed behind the master's
    /// back with a new generation.
    pub async fn status(&self) -> Result<Status, BackendError> {
        let mut ledger = self.shared.ledger.lock().await;
        let observed = self.shared.backend.observe().await?;
        ledger.follow(observed.target);
        Ok(status_of(&self.config(), ledger.generation, &observed))
    }

    /// `POST /v1/scale`: a repeated `command_id` gets its first answer and changes nothing; a
    /// target outside `[min, max]` is refused (and its id not remembered, so a retry is checked
    /// again); the backend is called only when the target changes, and then the generation grows.
    pub async fn scale(&self, command: &ScaleCommand) -> Result<ScaleAccepted, ScaleError> {
        if command.command_id.is_empty() || command.command_id.len() > MAX_COMMAND_ID {
            return Err(ScaleError::BadCommandId(command.command_id.len()));
        }
        let mut ledger = self.shared.ledger.lock().await;
        // Read under the lock: a command waiting for it is checked against the bounds in force.
        let config = self.config();
        if let Some(answer) = ledger.answers.get(&command.command_id) {
            if answer.accepted_target != command.target {
                tracing::warn!(command_id = %command.command_id, first = answer.accepted_target, now = command.target,
                    "command id reused with another target; answering the first command");
            }
            return Ok(*answer);
        }
        if command.target < config.min || command.target > config.max {
            return Err(ScaleError::OutOfBounds { target: command.target, min: config.min, max: config.max });
        }
        let observed = self.shared.backend.observe().await?;
        ledger.follow(observed.target);
        if ledger.target != Some(command.target) {
            self.shared.backend.scale(command).await?;
            ledger.generation += 1;
            ledger.target = Some(command.target);
            tracing::info!(job = %config.job, command_id = %command.command_id, target = command.target,
                reason = %command.reason, release_pods = command.release_pods.len(), generation = ledger.generation,
                "scaling");
        }
        let answer = ScaleAccepted { accepted_target: command.target, generation: ledger.generation };
        ledger.remember(command.command_id.clone(), answer, config.remembered_commands);
        Ok(answer)
    }
}

fn status_of(config: &MasterConfig, generation: u64, observed: &Observed) -> Status {
    let phase = match observed.phase {
        Some(p @ (Phase::Completed | Phase::Failed)) => p,
        _ if observed.current != observed.target => Phase::Rescaling,
        Some(Phase::Pending) => Phase::Pending,
        _ => Phase::Running,
    };
    Status {
        job: config.job.clone(),
        generation,
        phase,
        workers: Workers {
            current: observed.current,
            target: observed.target,
            min: config.min,
            max: config.max,
            pending: observed.pending,
        },
        worker_resources: config.worker_resources.clone(),
        rescale_cost_s: config.rescale_cost_s,
        worker_release_s: config.worker_release_s,
        throughput: observed.throughput,
        progress: observed.progress,
        checkpoint: None,
    }
}
