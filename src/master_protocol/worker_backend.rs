//! What a master's ledger ([`MasterState`](super::MasterState)) drives: something that holds a
//! worker count. In a cluster that is a Deployment's (or StatefulSet's) `/scale` subresource or
//! another object's worker replicas; in tests and examples it is [`MemoryBackend`].

use std::future::Future;
use std::sync::{Mutex, MutexGuard};

use super::wire::{Phase, Progress, ScaleCommand, Throughput};

/// The workers as the backend sees them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// The count the backend is steering to (a Deployment's `spec.replicas`). When it differs
    /// from what the master last set, someone else changed it (`kubectl scale`), and the master
    /// follows it as a new target with a new generation.
    pub target: u32,
    /// Workers taking part in training (a Deployment's `status.readyReplicas`).
    pub current: u32,
    /// Workers created but not yet taking part.
    pub pending: u32,
    /// What only the job knows: `Pending` before training starts, `Completed`, `Failed`.
    /// `None` (or `Running`/`Rescaling`) lets the master derive the phase from the counts.
    pub phase: Option<Phase>,
    pub throughput: Option<Throughput>,
    pub progress: Option<Progress>,
}

/// The backend could not read or set the workers. Over HTTP the master answers 503 whatever the
/// kind (the controller retries); an in-process caller (a Kubernetes adapter) reports the kind.
#[derive(Debug, thiserror::Error)]
#[error("worker backend: {message}")]
pub struct BackendError {
    pub message: String,
    pub kind: BackendErrorKind,
    /// The status code of the API that failed, when it answered.
    pub status: Option<u16>,
}

/// What a retry can do about a [`BackendError`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendErrorKind {
    /// Failed, maybe for a moment (timeout, 5xx, 429): worth retrying.
    #[default]
    Unavailable,
    /// No connection could be made: worth retrying.
    Unreachable,
    /// Not allowed (RBAC): the same call fails until permissions change.
    Forbidden,
    /// Refused for good (object gone, invalid change, a guard failed): the same call fails again.
    Rejected,
}

impl BackendError {
    /// A failure of kind [`BackendErrorKind::Unavailable`].
    pub fn new(message: impl Into<String>) -> BackendError {
        BackendError { message: message.into(), kind: BackendErrorKind::Unavailable, status: None }
    }

    pub fn with_kind(mut self, kind: BackendErrorKind, status: Option<u16>) -> BackendError {
        self.kind = kind;
        self.status = status;
        self
    }
}

/// The worker count behind a master's ledger.
///
/// Generic rather than boxed: `impl Future` in a trait keeps implementations plain
/// `async fn`s without an extra crate. The master serializes calls (one at a time), so an
/// implementation need not guard against its own concurrency.
pub trait WorkerBackend: Send + Sync + 'static {
    /// Reads the workers; called on every status request and before every change.
    fn observe(&self) -> impl Future<Output = Result<Observed, BackendError>> + Send;

    /// Sets the worker count to `command.target`. Called only when the target changes, after
    /// the bounds are checked, at most once per `command_id`.
    ///
    /// `command.release_pods` names the workers the controller prefers to lose on a shrink, best
    /// first, and `command.deadline_s` says when they must be gone (past it the controller may
    /// delete worker pods itself, lowest cost first). What an integrator should do with them:
    /// - a framework master: tell those workers to leave gracefully first (checkpoint, leave the
    ///   rendezvous), then lower the count; ignore names that are not its workers;
    /// - over a Deployment: annotate those pods with `controller.kubernetes.io/pod-deletion-cost`
    ///   set below every other worker's before lowering `spec.replicas`, so the ReplicaSet
    ///   removes them first (pod deletion cost is a preference, honoured "where it can");
    /// - over a StatefulSet: it removes the highest ordinals whatever is asked; the names cannot
    ///   be honoured, which the protocol allows.
    ///
    /// On a grow the list is normally empty and can be ignored.
    fn scale(&self, command: &ScaleCommand) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// An in-memory worker count, for tests and as a template for integrators. By default the
/// workers follow a new target at once; [`MemoryBackend::lagging`] leaves `current` where it
/// is until [`set_current`](MemoryBackend::set_current), to show the `Rescaling` phase.
#[derive(Debug)]
pub struct MemoryBackend {
    inner: Mutex<Memory>,
}

#[derive(Debug)]
struct Memory {
    observed: Observed,
    follow: bool,
    commands: Vec<ScaleCommand>,
}

impl MemoryBackend {
    /// `workers` running, steering to `workers`; changes apply at once.
    pub fn new(workers: u32) -> MemoryBackend {
        MemoryBackend::with(workers, true)
    }

    /// Like [`new`](MemoryBackend::new), but workers join or leave only through
    /// [`set_current`](MemoryBackend::set_current); until then the difference is pending.
    pub fn lagging(workers: u32) -> MemoryBackend {
        MemoryBackend::with(workers, false)
    }

    fn with(workers: u32, follow: bool) -> MemoryBackend {
        let observed = Observed { target: workers, current: workers, ..Observed::default() };
        MemoryBackend { inner: Mutex::new(Memory { observed, follow, commands: Vec::new() }) }
    }

    fn lock(&self) -> MutexGuard<'_, Memory> {
        // The data stays consistent even if a holder panicked (every update is one assignment).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the master will observe next.
    pub fn observed(&self) -> Observed {
        self.lock().observed.clone()
    }

    /// Every command that changed the count, in order, with its `release_pods`.
    pub fn commands(&self) -> Vec<ScaleCommand> {
        self.lock().commands.clone()
    }

    /// Workers join or leave (a lagging backend catching up).
    pub fn set_current(&self, current: u32) {
        let mut m = self.lock();
        m.observed.current = current;
        m.observed.pending = m.observed.target.saturating_sub(current);
    }

    /// Someone else changes the count (`kubectl scale`): the master follows it.
    pub fn set_target(&self, target: u32) {
        let mut m = self.lock();
        m.observed.target = target;
        if m.follow {
            m.observed.current = target;
        }
        m.observed.pending = target.saturating_sub(m.observed.current);
    }

    pub fn set_phase(&self, phase: Option<Phase>) {
        self.lock().observed.phase = phase;
    }

    pub fn set_throughput(&self, throughput: Option<Throughput>) {
        self.lock().observed.throughput = throughput;
    }

    pub fn set_progress(&self, progress: Option<Progress>) {
        self.lock().observed.progress = progress;
    }
}

impl WorkerBackend for MemoryBackend {
    async fn observe(&self) -> Result<Observed, BackendError> {
        Ok(self.observed())
    }

    async fn scale(&self, command: &ScaleCommand) -> Result<(), BackendError> {
        let mut m = self.lock();
        m.commands.push(command.clone());
        drop(m);
        self.set_target(command.target);
        Ok(())
    }
}
