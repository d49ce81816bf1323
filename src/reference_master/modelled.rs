//! Training modelled over any [`WorkerBackend`], for test beds and demos whose workers do no
//! real work (kwok pods, sleeping containers): the master reports the `throughput` and
//! `progress` a job of known size would, so a controller's completion-time decisions can be
//! watched end to end. Throughput is `samples_per_worker_s * n^exponent` for the `n` workers
//! taking part, the model replay uses (sim/job_model.rs); the job reports `Completed` once its
//! samples are done. A real master reports what its framework measures instead.

use std::sync::Mutex;
use std::time::Instant;

use crate::master_protocol::{BackendError, Observed, Phase, Progress, ScaleCommand, Throughput, WorkerBackend};

/// The job's size and how it scales.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainingModel {
    /// Samples in all.
    pub total: u64,
    /// Samples/s of one worker.
    pub samples_per_worker_s: f64,
    /// Speedup exponent: n workers process n^exponent times one worker's samples.
    pub exponent: f64,
}

impl TrainingModel {
    pub fn rate(&self, workers: u32) -> f64 {
        if workers == 0 {
            0.0
        } else {
            self.samples_per_worker_s * f64::from(workers).powf(self.exponent)
        }
    }
}

/// A backend whose observations carry the modelled throughput and progress.
pub struct ModelledTraining<B> {
    inner: B,
    model: TrainingModel,
    /// Samples done, and when and at how many workers they were last brought up to date.
    state: Mutex<(f64, Option<(Instant, u32)>)>,
}

impl<B: WorkerBackend> ModelledTraining<B> {
    pub fn new(inner: B, model: TrainingModel) -> Self {
        ModelledTraining { inner, model, state: Mutex::new((0.0, None)) }
    }

    /// Brings progress up to `now`: the workers seen at the last observation trained since.
    fn advance(&self, observed: &mut Observed, now: Instant) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (done, last) = &mut *state;
        if let Some((at, workers)) = *last {
            *done += self.model.rate(workers) * now.duration_since(at).as_secs_f64();
        }
        let total = self.model.total as f64;
        *done = done.min(total);
        let finished = *done >= total;
        *last = Some((now, if finished { 0 } else { observed.current }));
        observed.progress = Some(Progress { done: *done as u64, total: self.model.total });
        observed.throughput = (!finished).then(|| Throughput { samples_per_s: self.model.rate(observed.current) });
        if finished {
            observed.phase = Some(Phase::Completed);
        }
    }
}

impl<B: WorkerBackend> WorkerBackend for ModelledTraining<B> {
    async fn observe(&self) -> Result<Observed, BackendError> {
        let mut observed = self.inner.observe().await?;
        self.advance(&mut observed, Instant::now());
        Ok(observed)
    }

    async fn scale(&self, command: &ScaleCommand) -> Result<(), BackendError> {
        self.inner.scale(command).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::master_protocol::MemoryBackend;

    #[test]
    fn progress_follows_the_workers_that_trained_and_completes() {
        let model = TrainingModel { total: 1000, samples_per_worker_s: 10.0, exponent: 0.5 };
        let job = ModelledTraining::new(MemoryBackend::new(4), model);
        let t0 = Instant::now();
        let mut seen = job.inner.observed();
        job.advance(&mut seen, t0);
        assert_eq!(seen.progress, Some(Progress { done: 0, total: 1000 }));
        assert_eq!(seen.throughput, Some(Throughput { samples_per_s: 20.0 }), "10 * 4^0.5");
        // 10 s at 4 workers: 200 samples; then 16 workers.
        job.inner.set_target(16);
        let mut seen = job.inner.observed();
        job.advance(&mut seen, t0 + Duration::from_secs(10));
        assert_eq!(seen.progress.map(|p| p.done), Some(200));
        assert_eq!(seen.throughput.map(|t| t.samples_per_s), Some(40.0));
        assert_eq!(seen.phase, None);
        // 40 s at 40/s would be 1,600 more: it completes at the total and stops reporting a rate.
        let mut seen = job.inner.observed();
        job.advance(&mut seen, t0 + Duration::from_secs(50));
        assert_eq!(seen.progress, Some(Progress { done: 1000, total: 1000 }));
        assert_eq!((seen.throughput, seen.phase), (None, Some(Phase::Completed)));
    }
}
