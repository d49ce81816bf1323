//! The controller's tasks, supervised: each runs in a `tracing` span naming it, and one that
//! ends before the controller is told to stop, or panics at any time, stops the controller
//! with an error naming it (the others still shut down cleanly and the Lease is released).
//!
//! Shutdown has two kinds of tasks: those that end by themselves once the stop is signalled
//! (the decision loop, the actuator after its commands in flight, the poller, the campaign,
//! the metrics server) are waited for; those that run until they are aborted (the reflectors,
//! the leader gauge) are aborted after that.

use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;

use tokio::sync::watch;
use tokio::task::{Id, JoinError, JoinSet};
use tracing::Instrument;

use crate::telemetry::Health;

/// A task that stopped the controller.
#[derive(Debug, thiserror::Error)]
#[error("task {task} {how}")]
pub struct TaskFailed {
    pub task: String,
    /// `ended unexpectedly`, `failed: ...` or `panicked: ...`.
    pub how: String,
}

/// How a task is expected to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// It ends by itself once the stop is signalled; it is waited for.
    Stop,
    /// It runs until aborted, after the [`Until::Stop`] tasks have ended.
    Aborted,
}

struct Task {
    name: String,
    until: Until,
}

pub struct Supervisor {
    set: JoinSet<Result<(), String>>,
    tasks: HashMap<Id, Task>,
    stop: watch::Sender<bool>,
    health: Health,
    /// The caller's shutdown signal; taken once it fired.
    shutdown: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    failed: Option<TaskFailed>,
}

impl Supervisor {
    pub fn new(shutdown: impl Future<Output = ()> + Send + 'static, health: Health) -> Supervisor {
        Supervisor {
            set: JoinSet::new(),
            tasks: HashMap::new(),
            stop: watch::channel(false).0,
            health,
            shutdown: Some(Box::pin(shutdown)),
            failed: None,
        }
    }

    /// Resolves once the controller is told to stop (by the signal or by a task failing).
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.stop.subscribe();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    }

    /// Spawns `task` in a span named after it.
    pub fn spawn<E: Display>(
        &mut self,
        name: impl Into<String>,
        until: Until,
        task: impl Future<Output = Result<(), E>> + Send + 'static,
    ) {
        let name = name.into();
        let span = tracing::info_span!("task", task = %name);
        let handle = self.set.spawn(async move { task.await.map_err(|e| e.to_string()) }.instrument(span));
        self.tasks.insert(handle.id(), Task { name, until });
    }

    /// Spawns a task that cannot fail, only end.
    pub fn spawn_infallible(
        &mut self,
        name: impl Into<String>,
        until: Until,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        self.spawn(name, until, async move {
            task.await;
            Ok::<(), std::convert::Infallible>(())
        });
    }

    /// Drives `work` while watching the tasks and the shutdown signal; `None` when the
    /// controller was told to stop before `work` finished.
    pub async fn until<T>(&mut self, work: impl Future<Output = T>) -> Option<T> {
        tokio::pin!(work);
        let mut stopped = std::pin::pin!(self.stopped());
        loop {
            let listening = self.shutdown.is_some();
            let (signal, set) = (&mut self.shutdown, &mut self.set);
            tokio::select! {
                out = &mut work => return Some(out),
                _ = &mut stopped => return None,
                _ = async { signal.as_mut().expect("listening").await }, if listening => {
                    self.shutdown = None;
                    tracing::info!("shutting down");
                    self.begin_stop();
                }
                Some(joined) = set.join_next_with_id() => self.ended(joined),
            }
        }
    }

    /// Runs until the controller is told to stop.
    pub async fn run_until_stopped(&mut self) {
        self.until(std::future::pending::<()>()).await;
    }

    /// After the stop: waits for every [`Until::Stop`] task to end (each bounds its own
    /// shutdown), then aborts the rest.
    pub async fn drain(&mut self) {
        while self.tasks.values().any(|t| t.until == Until::Stop) {
            match self.set.join_next_with_id().await {
                Some(joined) => self.ended(joined),
                None => break,
            }
        }
    }

    /// Aborts the tasks still running and reports the first failure, if any.
    pub async fn finish(mut self) -> Result<(), TaskFailed> {
        self.set.abort_all();
        while let Some(joined) = self.set.join_next_with_id().await {
            self.ended(joined);
        }
        match self.failed {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }

    fn begin_stop(&self) {
        self.health.begin_shutdown();
        let _ = self.stop.send(true);
    }

    fn ended(&mut self, joined: Result<(Id, Result<(), String>), JoinError>) {
        let (id, how) = match joined {
            Ok((id, Ok(()))) => (id, None),
            Ok((id, Err(e))) => (id, Some(format!("failed: {e}"))),
            Err(e) if e.is_cancelled() => {
                self.tasks.remove(&e.id());
                return;
            }
            Err(e) => {
                let id = e.id();
                (id, Some(format!("panicked: {}", panic_message(e))))
            }
        };
        let Some(task) = self.tasks.remove(&id) else { return };
        let stopping = *self.stop.borrow();
        let how = match how {
            Some(how) => how,
            None if stopping && task.until == Until::Stop => return,
            None => "ended unexpectedly".to_string(),
        };
        let failed = TaskFailed { task: task.name, how };
        tracing::error!(task = %failed.task, error = %failed, "a task stopped; stopping the controller");
        if !stopping {
            self.begin_stop();
        }
        self.failed.get_or_insert(failed);
    }
}

fn panic_message(e: JoinError) -> String {
    match e.try_into_panic() {
        Ok(payload) => match payload.downcast::<String>() {
            Ok(s) => *s,
            Err(payload) => match payload.downcast::<&'static str>() {
                Ok(s) => s.to_string(),
                Err(_) => "a non-text panic".to_string(),
            },
        },
        Err(e) => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn supervisor(signal: impl Future<Output = ()> + Send + 'static) -> Supervisor {
        Supervisor::new(signal, Health::new())
    }

    #[tokio::test(start_paused = true)]
    async fn a_signal_stops_the_tasks_and_none_failed() {
        let mut s = supervisor(tokio::time::sleep(Duration::from_secs(5)));
        let stopped = s.stopped();
        s.spawn_infallible("loop", Until::Stop, stopped);
        s.spawn_infallible("reflector", Until::Aborted, std::future::pending());
        s.run_until_stopped().await;
        s.drain().await;
        s.finish().await.expect("a clean shutdown");
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_ends_early_stops_the_controller_with_its_name() {
        let mut s = supervisor(std::future::pending());
        let stopped = s.stopped();
        s.spawn_infallible("decider", Until::Stop, stopped);
        s.spawn_infallible("reflector pods", Until::Aborted, tokio::time::sleep(Duration::from_secs(1)));
        s.run_until_stopped().await;
        s.drain().await;
        let failed = s.finish().await.unwrap_err();
        assert_eq!(failed.to_string(), "task reflector pods ended unexpectedly");
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_panics_or_fails_names_itself_and_the_first_failure_wins() {
        let mut s = supervisor(std::future::pending());
        s.spawn_infallible("actuator", Until::Stop, async { panic!("boom") });
        s.spawn("metrics server", Until::Stop, async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Err("address in use")
        });
        s.run_until_stopped().await;
        s.drain().await;
        assert_eq!(s.finish().await.unwrap_err().to_string(), "task actuator panicked: boom");

        let mut s = supervisor(std::future::pending());
        s.spawn("metrics server", Until::Stop, async { Err("address in use") });
        s.run_until_stopped().await;
        s.drain().await;
        assert_eq!(s.finish().await.unwrap_err().to_string(), "task metrics server failed: address in use");
    }

    #[tokio::test(start_paused = true)]
    async fn work_is_given_up_when_the_signal_comes_first() {
        let mut s = supervisor(tokio::time::sleep(Duration::from_secs(1)));
        assert_eq!(s.until(async { 7 }).await, Some(7));
        assert_eq!(s.until(std::future::pending::<()>()).await, None);
        s.finish().await.expect("nothing failed");
    }
}
