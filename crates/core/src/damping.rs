//! What the core remembers between decisions so growth is damped: a short history of how many
//! workers each job could have had, and when the latency guard last shrank a service's nodes;
//! and the workers it named in a shrink that are still there while their master removes them.
//! It is plain data fed by `now` from the snapshot, never by a clock.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use super::config::Config;
use super::snapshot::Job;

#[derive(Clone, Debug, Default)]
pub struct Memory {
    /// Per job: (time, workers the capacity allowed then), oldest first.
    possible: HashMap<String, VecDeque<(Duration, u32)>>,
    /// Per service: when the latency guard last shrank training on its nodes.
    guard_shrunk_at: HashMap<String, Duration>,
    /// Per service: guard shrinks in the current episode of low slack.
    guard_steps: HashMap<String, u32>,
    /// Per service: since when its slack has been healthy without interruption.
    guard_calm_since: HashMap<String, Duration>,
    /// Per service: the last decision at which it was scaling up (replicas it expects not all
    /// serving yet: not bound, or bound and starting; `OnlineNeed::scaling_up`).
    scaling_seen: HashMap<String, Duration>,
    /// Per job with no workers wanted yet (target 0): since when the core has seen it waiting.
    /// Waiting jobs get their floors oldest first.
    waiting_since: HashMap<String, Duration>,
    /// Per job: the target of its last shrink and the workers that shrink named (with those of
    /// earlier shrinks still there). Between the command and the pods' deletion they are bound
    /// and not terminating; planned again as if staying, they would take the room of the
    /// workers that stay, which would then be named in turn (on a live two-job spike: 5
    /// released for 4).
    leaving: HashMap<String, (u32, Vec<String>)>,
}

/// How a job may move this decision, and why growth was held back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrowVerdict {
    pub allowed: u32,
    pub held_back: Option<String>,
}

impl Memory {
    /// Records that `possible` workers would fit for `job` now and returns how many it may have.
    ///
    /// Shrinks (possible <= target) pass through at once. Growth is allowed only up to the
    /// smallest `possible` seen during the stabilization window (a running job needs samples
    /// spanning the whole window), at most `grow_max_step` more than now, and only when the gain
    /// pays back the job's rescale pause within `grow_payback`.
    pub fn damp_growth(&mut self, job: &Job, possible: u32, now: Duration, config: &Config) -> GrowVerdict {
        let history = self.possible.entry(job.name.clone()).or_default();
        // Runs of the same value are one entry (the time the run began): a value holds until the
        // next one, and the history stays small however often decisions run.
        if history.back().is_none_or(|(_, last)| *last != possible) {
            history.push_back((now, possible));
        }
        let window_start = now.saturating_sub(config.grow_stabilization);
        // A sample holds until the next one: keep the last one taken at or before the window
        // start (what fitted when the window opened), drop the older ones.
        while history.get(1).is_some_and(|(t, _)| *t <= window_start) {
            history.pop_front();
        }
        let current = job.target_workers;
        // A running job grows only on samples spanning the whole window: one seen for the first
        // time (or by a core just started) has no evidence yet that the room is stable. A
        // waiting job interrupts no work by starting, so it needs no more than what was seen.
        let watched = history.front().map_or(Duration::ZERO, |(t, _)| now.saturating_sub(*t));
        let covered = current == 0 || watched >= config.grow_stabilization;
        if possible <= current {
            return GrowVerdict { allowed: possible, held_back: None };
        }
        if job.rescaling {
            return GrowVerdict {
                allowed: current,
                held_back: Some("the master is still applying the last change".into()),
            };
        }
        let stable = if covered { history.iter().map(|(_, p)| *p).min().unwrap_or(possible) } else { current };
        // A job that is not running yet interrupts nothing by starting large.
        let step_limit = if current == 0 { u32::MAX } else { current.saturating_add(config.grow_max_step) };
        let mut allowed = stable.min(step_limit);
        // Every change pauses the whole job; small steps are not worth one each.
        // Never more than the step limit, or a large job could not grow at all.
        let min_step = ((current as f64 * config.grow_min_gain - 1e-9).ceil() as u32).clamp(1, config.grow_max_step);
        if current > 0 && allowed > current && allowed - current < min_step && allowed < job.max_workers {
            return GrowVerdict {
                allowed: current,
                held_back: Some(format!(
                    "+{} workers is less than the minimum step of {min_step} ({:.0}% of {current})",
                    allowed - current,
                    config.grow_min_gain * 100.0
                )),
            };
        }
        let mut held_back = None;
        if !covered {
            held_back = Some(format!(
                "room for {possible} workers, but watched for only {} of {}",
                humantime::format_duration(watched),
                humantime::format_duration(config.grow_stabilization)
            ));
        } else if stable < possible {
            held_back = Some(format!(
                "room for {possible} workers, but only {stable} have fitted throughout the last {}",
                humantime::format_duration(config.grow_stabilization)
            ));
        } else if allowed < possible {
            held_back = Some(format!("growth is limited to {} workers per step", config.grow_max_step));
        }
        if current == 0 && allowed < job.min_workers {
            return GrowVerdict { allowed: 0, held_back: held_back.or(Some("its floor does not fit yet".into())) };
        }
        if current > 0 && allowed > current {
            // Gain as a fraction of current throughput (linear scaling is an upper bound), paid
            // for by pausing every worker for rescale_cost.
            let gain = (allowed - current) as f64 / current as f64;
            let pays_back = gain * config.grow_payback.as_secs_f64() >= job.rescale_cost.as_secs_f64();
            if !pays_back {
                return GrowVerdict {
                    allowed: current,
                    held_back: Some(format!(
                        "+{} workers would not pay back a {} pause within {}",
                        allowed - current,
                        humantime::format_duration(job.rescale_cost),
                        humantime::format_duration(config.grow_payback)
                    )),
                };
            }
        }
        allowed = allowed.max(current);
        GrowVerdict { allowed, held_back }
    }

    /// Since when `job` has been waiting for its floor (its master steers to 0 workers), first
    /// seen at `now`; `None` for a job that has workers, which forgets its wait.
    pub fn waiting_since(&mut self, job: &Job, now: Duration) -> Option<Duration> {
        if job.target_workers > 0 {
            self.waiting_since.remove(&job.name);
            return None;
        }
        Some(*self.waiting_since.entry(job.name.clone()).or_insert(now))
    }

    /// True (and remembered) when the latency guard may shrink `service`'s nodes again now.
    ///
    /// Within one episode of low slack the guard shrinks at most `latency_guard_max_steps`
    /// times: if latency has not recovered after that, training on the nodes is not what hurts
    /// it (the service is saturated or lags its own load), and further shrinks only lose work.
    pub fn guard_may_shrink(&mut self, service: &str, now: Duration, config: &Config) -> bool {
        self.guard_calm_since.remove(service);
        let steps = self.guard_steps.get(service).copied().unwrap_or(0);
        if steps >= config.latency_guard_max_steps {
            return false;
        }
        match self.guard_shrunk_at.get(service) {
            Some(t) if now.saturating_sub(*t) < config.latency_guard_interval => false,
            _ => {
                self.guard_shrunk_at.insert(service.to_string(), now);
                self.guard_steps.insert(service.to_string(), steps + 1);
                true
            }
        }
    }

    /// Whether `service` was scaling up within `window` of `now` (`scaling` says whether it is
    /// now): a latency query over a window keeps the excursion a scale-up explains in view for
    /// that window after the pods are ready.
    pub fn scaled_up_within(&mut self, service: &str, scaling: bool, now: Duration, window: Duration) -> bool {
        if scaling {
            self.scaling_seen.insert(service.to_string(), now);
            return true;
        }
        self.scaling_seen.get(service).is_some_and(|t| now.saturating_sub(*t) <= window)
    }

    /// The service's slack is low but the guard only holds: the episode goes on.
    pub fn guard_troubled(&mut self, service: &str) {
        self.guard_calm_since.remove(service);
    }

    /// The service's slack is healthy. The episode ends once it has stayed healthy for the
    /// growth stabilization window: a noisy service that dips every few seconds stays in one
    /// episode and is not shrunk again and again.
    pub fn guard_recovered(&mut self, service: &str, now: Duration, config: &Config) {
        let since = *self.guard_calm_since.entry(service.to_string()).or_insert(now);
        if now.saturating_sub(since) >= config.grow_stabilization {
            self.guard_steps.remove(service);
        }
    }

    /// The workers `job`'s master is removing at the core's request: named in a shrink to the
    /// target it now has (or a lower one). Empty while the master has not taken the shrink yet:
    /// then they are still to release, and a plan names them again.
    pub fn leaving(&self, job: &Job) -> &[String] {
        match self.leaving.get(&job.name) {
            Some((target, names)) if job.target_workers <= *target => names,
            _ => &[],
        }
    }

    /// Keeps of `job`'s leaving workers only `still_there`; forgets them all when none is.
    pub fn keep_leaving(&mut self, job: &str, still_there: Vec<String>) {
        if still_there.is_empty() {
            self.leaving.remove(job);
        } else if let Some((_, names)) = self.leaving.get_mut(job) {
            *names = still_there;
        }
    }

    /// A shrink of `job` to `target` naming `released`, beside those still leaving.
    pub fn note_shrink(&mut self, job: &str, target: u32, released: impl IntoIterator<Item = String>) {
        let (t, names) = self.leaving.entry(job.to_string()).or_default();
        *t = target;
        for name in released {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }

    /// Drops state of jobs and services that are gone.
    pub fn retain(&mut self, jobs: &[&str], services: &[&str]) {
        self.possible.retain(|k, _| jobs.contains(&k.as_str()));
        self.waiting_since.retain(|k, _| jobs.contains(&k.as_str()));
        self.leaving.retain(|k, _| jobs.contains(&k.as_str()));
        self.guard_shrunk_at.retain(|k, _| services.contains(&k.as_str()));
        self.guard_steps.retain(|k, _| services.contains(&k.as_str()));
        self.guard_calm_since.retain(|k, _| services.contains(&k.as_str()));
        self.scaling_seen.retain(|k, _| services.contains(&k.as_str()));
    }
}
