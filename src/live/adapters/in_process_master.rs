//! The protocol's master-side ledger ([`MasterState`]) run in process, as a [`JobEndpoint`]:
//! what the controller talks to for a job without a master. Calls are bounded like the HTTP
//! client's (a timeout per attempt, bounded jittered retries of transient failures) and fail
//! with the same [`MasterError`] kinds, so the actuator and the metrics treat every job alike.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::live::endpoint::JobEndpoint;
use crate::live::master_client::{MasterError, RetryPolicy};
use crate::master_protocol::{
    BackendError, BackendErrorKind, MasterState, ScaleAccepted, ScaleCommand, ScaleError, Status, WorkerBackend,
};

/// How long one attempt (the API calls of one status read or scale) may take.
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// A [`MasterState`] over a Kubernetes backend, as a [`JobEndpoint`].
pub struct AdapterEndpoint<B> {
    describe: String,
    state: MasterState<B>,
    timeout: Duration,
    retry: RetryPolicy,
}

impl<B: WorkerBackend> AdapterEndpoint<B> {
    /// `describe` says what it drives, for logs (`Deployment ml/wd via /scale`).
    pub fn new(describe: impl Into<String>, state: MasterState<B>) -> AdapterEndpoint<B> {
        AdapterEndpoint {
            describe: describe.into(),
            state,
            timeout: DEFAULT_ATTEMPT_TIMEOUT,
            retry: RetryPolicy::default(),
        }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> AdapterEndpoint<B> {
        self.timeout = timeout;
        self
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> AdapterEndpoint<B> {
        self.retry = RetryPolicy { max_attempts: retry.max_attempts.max(1), ..retry };
        self
    }

    /// The ledger (bounds, generation, remembered commands) and the backend.
    pub fn state(&self) -> &MasterState<B> {
        &self.state
    }

    /// Runs `attempt` until it succeeds, fails for good, or the attempts run out. An attempt cut
    /// by the timeout leaves the ledger consistent: it holds the ledger's lock, which is released
    /// with it, and a backend change that landed anyway is followed as a new generation.
    async fn call<T, F, Fut>(&self, key: &str, attempt: F) -> Result<T, MasterError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, ScaleError>>,
    {
        let mut n = 1;
        loop {
            let error = match tokio::time::timeout(self.timeout, attempt()).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(e)) => master_error(&e, n),
                Err(_) => MasterError::Timeout { attempts: n, timeout: self.timeout },
            };
            if !error.is_transient() || n >= self.retry.max_attempts {
                return Err(error);
            }
            let pause = self.retry.backoff(key, n);
            tracing::debug!(endpoint = %self.describe, attempt = n, error = %error, ?pause, "retrying");
            tokio::time::sleep(pause).await;
            n += 1;
        }
    }
}

impl<B: WorkerBackend> JobEndpoint for AdapterEndpoint<B> {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn status(&self) -> BoxFuture<'_, Result<Status, MasterError>> {
        Box::pin(self.call("status", || async { self.state.status().await.map_err(ScaleError::Backend) }))
    }

    fn scale<'a>(&'a self, command: &'a ScaleCommand) -> BoxFuture<'a, Result<ScaleAccepted, MasterError>> {
        Box::pin(self.call(&command.command_id, move || self.state.scale(command)))
    }
}

/// A refused or failed command as the HTTP client would report it: a backend that failed
/// transiently as a 503 (or unreachable), RBAC as 403, a refused change as a 4xx rejection, a
/// target outside the bounds as a 409 with them. `attempts` is the attempt count so far.
pub fn master_error(e: &ScaleError, attempts: u32) -> MasterError {
    match e {
        ScaleError::OutOfBounds { min, max, .. } => {
            MasterError::OutOfBounds { min: *min, max: *max, message: e.to_string() }
        }
        ScaleError::BadCommandId(_) => MasterError::Rejected { status: 400, message: e.to_string() },
        ScaleError::Backend(b) => backend_error(b, attempts),
    }
}

fn backend_error(e: &BackendError, attempts: u32) -> MasterError {
    let message = e.message.clone();
    match e.kind {
        BackendErrorKind::Unavailable => MasterError::ServerError { status: 503, attempts, message },
        BackendErrorKind::Unreachable => MasterError::Unreachable { attempts, message },
        BackendErrorKind::Forbidden => MasterError::Unauthorized { status: e.status.unwrap_or(403), message },
        BackendErrorKind::Rejected => MasterError::Rejected { status: e.status.unwrap_or(422), message },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::master_protocol::{MasterConfig, MemoryBackend, Observed, WorkerResources};

    fn config() -> MasterConfig {
        MasterConfig::new("wd", 1, 8, WorkerResources::new("2", "4Gi"))
    }

    fn quick() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(2),
        }
    }

    #[test]
    fn errors_map_to_the_clients_kinds() {
        let kind = |k: BackendErrorKind, status: Option<u16>| {
            master_error(&ScaleError::Backend(BackendError::new("x").with_kind(k, status)), 2)
        };
        assert!(matches!(
            kind(BackendErrorKind::Unavailable, Some(500)),
            MasterError::ServerError { status: 503, attempts: 2, .. }
        ));
        assert!(matches!(kind(BackendErrorKind::Unreachable, None), MasterError::Unreachable { attempts: 2, .. }));
        assert!(matches!(kind(BackendErrorKind::Forbidden, Some(403)), MasterError::Unauthorized { status: 403, .. }));
        assert!(matches!(kind(BackendErrorKind::Rejected, Some(404)), MasterError::Rejected { status: 404, .. }));
        let oob = master_error(&ScaleError::OutOfBounds { target: 9, min: 1, max: 8 }, 1);
        assert!(matches!(oob, MasterError::OutOfBounds { min: 1, max: 8, .. }));
        assert_eq!(oob.kind(), "out_of_bounds");
    }

    #[tokio::test]
    async fn protocol_semantics_in_process() {
        let e = AdapterEndpoint::new("memory", MasterState::new(config(), MemoryBackend::new(4)).unwrap());
        let s = JobEndpoint::status(&e).await.unwrap();
        assert_eq!((s.workers.current, s.workers.target, s.generation), (4, 4, 1));
        let cmd = ScaleCommand::new(2, "test", 30);
        let first = JobEndpoint::scale(&e, &cmd).await.unwrap();
        assert_eq!((first.accepted_target, first.generation), (2, 2));
        assert_eq!(JobEndpoint::scale(&e, &cmd).await.unwrap(), first, "same id, same answer");
        assert_eq!(e.state().backend().commands().len(), 1);
        let out = JobEndpoint::scale(&e, &ScaleCommand::new(9, "test", 30)).await.unwrap_err();
        assert!(matches!(out, MasterError::OutOfBounds { min: 1, max: 8, .. }), "{out:?}");
        let mut empty_id = ScaleCommand::new(3, "test", 30);
        empty_id.command_id.clear();
        assert!(matches!(JobEndpoint::scale(&e, &empty_id).await, Err(MasterError::Rejected { status: 400, .. })));
    }

    /// Fails `failures` times with `kind`, then works like a memory backend.
    struct Flaky {
        inner: MemoryBackend,
        failures: u32,
        kind: BackendErrorKind,
        calls: Arc<AtomicU32>,
    }

    impl WorkerBackend for Flaky {
        async fn observe(&self) -> Result<Observed, BackendError> {
            if self.calls.fetch_add(1, Ordering::SeqCst) < self.failures {
                return Err(BackendError::new("flaky").with_kind(self.kind, None));
            }
            self.inner.observe().await
        }
        async fn scale(&self, command: &ScaleCommand) -> Result<(), BackendError> {
            self.inner.scale(command).await
        }
    }

    fn flaky(failures: u32, kind: BackendErrorKind) -> (AdapterEndpoint<Flaky>, Arc<AtomicU32>) {
        let calls = Arc::new(AtomicU32::new(0));
        let backend = Flaky { inner: MemoryBackend::new(4), failures, kind, calls: Arc::clone(&calls) };
        (AdapterEndpoint::new("flaky", MasterState::new(config(), backend).unwrap()).with_retry(quick()), calls)
    }

    #[tokio::test]
    async fn transient_failures_are_retried_boundedly_and_permanent_ones_not() {
        let (e, calls) = flaky(2, BackendErrorKind::Unavailable);
        assert_eq!(JobEndpoint::status(&e).await.unwrap().workers.target, 4);
        assert_eq!(calls.load(Ordering::SeqCst), 3);

        let (e, calls) = flaky(5, BackendErrorKind::Unavailable);
        let err = JobEndpoint::scale(&e, &ScaleCommand::new(2, "t", 30)).await.unwrap_err();
        assert!(matches!(err, MasterError::ServerError { attempts: 3, .. }), "{err:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 3);

        let (e, calls) = flaky(5, BackendErrorKind::Forbidden);
        assert!(matches!(JobEndpoint::status(&e).await, Err(MasterError::Unauthorized { status: 403, .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    /// Never answers.
    struct Hanging;

    impl WorkerBackend for Hanging {
        async fn observe(&self) -> Result<Observed, BackendError> {
            std::future::pending().await
        }
        async fn scale(&self, _: &ScaleCommand) -> Result<(), BackendError> {
            std::future::pending().await
        }
    }

    #[tokio::test]
    async fn a_hanging_backend_times_out_on_every_attempt() {
        let e = AdapterEndpoint::new("hanging", MasterState::new(config(), Hanging).unwrap())
            .with_timeout(Duration::from_millis(20))
            .with_retry(RetryPolicy { max_attempts: 2, ..quick() });
        let err = JobEndpoint::status(&e).await.unwrap_err();
        assert!(matches!(err, MasterError::Timeout { attempts: 2, .. }), "{err:?}");
    }
}
