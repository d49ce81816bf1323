//! The rise of a service's HPA metric from one sync to the next: the only trend there is when
//! the controller has no load signal, or its samples give none (too few fresh ones).
//!
//! Without a request rate the core sees demand only as the HPA does, at its syncs: its metric times
//! the replicas it was measured on. The HPA's first step after a load step is capped (max(+100%, +4
//! pods) per sync) and measures a load the metrics pipeline has only half shown, so reserving for
//! that level alone releases the room for the second step one sync too late, and with 30 s releases
//! its pods wait a whole release. When demand rose beyond the HPA's tolerance at its last sync and
//! the HPA decided on its scale-up limit (it could not follow the rise), demand is assumed to rise
//! as much at each sync within the lead, at most two syncs ahead (the half-shown step shows in full
//! by then). The assumption ends at the next sync without such a rise, or once 1.5 sync periods
//! pass without a sync. A rise the HPA follows in one step is taken as a step: on the test bed,
//! extrapolating every rise makes a 2 -> 6 scale-up release twice the room it needs, from two jobs
//! instead of one.
//!
//! Assumed, not measured: the metric is measured on the replicas ready at the sync. Kubernetes
//! leaves pods that just became ready out of the CPU average for a while; demand is then read on
//! more replicas than the metric covers, and may show a rise that is not there. Replay's HPA and
//! the test bed (which plays replay's HPA) do not show that.

use std::collections::HashMap;
use std::time::Duration;

use super::config::Config;
use super::forecast::{metric_demand, scale_up_limit};
use super::replicas::ReplicaCounts;
use super::snapshot::Snapshot;

/// A rise within this fraction of the demand is the metric's own noise, as the HPA's default
/// tolerance (10%, kube-controller-manager's `--horizontal-pod-autoscaler-tolerance`) treats it.
const RISE_TOLERANCE: f64 = 0.1;
/// A rise stays current this many sync periods after it was seen: the next sync may land a
/// moment late, and without a new status by then the demand has stopped rising.
const STALE_AFTER_SYNCS: f64 = 1.5;
/// Syncs ahead a rise is extrapolated at most, whatever the lead: the step the metrics pipeline
/// had half shown at one sync shows in full at the next; beyond that a rise is a guess.
const MAX_SYNCS_AHEAD: f64 = 2.0;

/// Per service, the HPA's demand at the last two syncs the core saw. Owned by the core;
/// forgotten with the service.
#[derive(Clone, Debug, Default)]
pub struct MetricSteps {
    per_service: HashMap<String, Steps>,
}

#[derive(Clone, Copy, Debug)]
struct Steps {
    /// What the HPA's status said (metric, its target, current replicas): a new value is a new
    /// sync.
    status: (f64, f64, u32),
    /// Demand (replicas' worth of CPU at 100%) at the previous sync seen, and at the last.
    previous: f64,
    last: f64,
    /// At the last sync the HPA decided on its scale-up limit, short of what the metric
    /// implies at its target: the load rose faster than it can follow.
    held_back: bool,
    /// When the last sync's status was first seen.
    last_at: Duration,
}

impl MetricSteps {
    /// Records every service whose HPA status changed since the last decision.
    pub fn observe(&mut self, snap: &Snapshot, counts: &[ReplicaCounts]) {
        for (svc, ready) in snap.services.iter().zip(counts.iter().map(|c| c.ready)) {
            let Some(h) = &svc.hpa else { continue };
            let Some(m) = h.metric.filter(|m| m.current.is_finite() && m.current >= 0.0 && m.target > 0.0) else {
                continue;
            };
            let status = (m.current, m.target, h.current_replicas);
            let demand = metric_demand(h, m, ready);
            let at_limit = h.desired_replicas >= scale_up_limit(h.current_replicas).min(h.max_replicas);
            let held_back = at_limit && demand / m.target > f64::from(h.desired_replicas) + 1e-9;
            let steps = self.per_service.entry(svc.name.clone()).or_insert(Steps {
                status,
                previous: demand,
                last: demand,
                held_back,
                last_at: snap.now,
            });
            if steps.status != status {
                // Another metric (its target changed) is no rise of this one.
                let previous = if steps.status.1 == m.target { steps.last } else { demand };
                *steps = Steps { status, previous, last: demand, held_back, last_at: snap.now };
            }
        }
    }

    /// The factor by which demand grows within `lead` (at most two syncs) if it keeps rising as
    /// much per sync as it did at the last one; 1 when it did not rise beyond the tolerance, the
    /// HPA could follow it, or the last sync was first seen more than 1.5 periods ago.
    pub fn factor(&self, service: &str, now: Duration, lead: Duration, config: &Config) -> f64 {
        let Some(s) = self.per_service.get(service) else { return 1.0 };
        let sync = config.hpa_sync_period.as_secs_f64().max(1e-3);
        let age = now.saturating_sub(s.last_at).as_secs_f64();
        let rose = s.previous > 0.0 && s.last > s.previous * (1.0 + RISE_TOLERANCE);
        if !rose || !s.held_back || age > sync * STALE_AFTER_SYNCS {
            return 1.0;
        }
        let syncs_ahead = (lead.as_secs_f64() / sync).min(MAX_SYNCS_AHEAD);
        (s.last + (s.last - s.previous) * syncs_ahead) / s.last
    }

    pub fn retain(&mut self, services: &[&str]) {
        self.per_service.retain(|s, _| services.contains(&s.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Resources;
    use crate::snapshot::{Hpa, HpaMetric, Service};

    /// The HPA at `current` replicas, deciding on what the metric implies up to its scale-up
    /// limit (max(+100%, +4 pods)), within its 10% tolerance on what it has.
    fn observe_at(steps: &mut MetricSteps, now: u64, metric: f64, current: u32, ready: u32) {
        let ratio = metric * f64::from(current.min(ready)) / (0.6 * f64::from(current));
        let implied = if (ratio - 1.0).abs() <= 0.1 {
            current
        } else {
            (metric * f64::from(current.min(ready)) / 0.6 - 1e-9).ceil() as u32
        };
        let hpa = Hpa {
            min_replicas: 1,
            max_replicas: 200,
            current_replicas: current,
            desired_replicas: implied.min(scale_up_limit(current)),
            metric: Some(HpaMetric { current: metric, target: 0.6 }),
        };
        let svc = Service {
            name: "web".into(),
            replica: Resources::default(),
            hpa: Some(hpa),
            load: Vec::new(),
            latency: None,
            headroom_replicas: 0,
        };
        let snap =
            Snapshot { now: Duration::from_secs(now), nodes: vec![], pods: vec![], services: vec![svc], jobs: vec![] };
        steps.observe(&snap, &[ReplicaCounts { ready, ..Default::default() }]);
    }

    #[test]
    fn a_rise_at_the_last_sync_is_extrapolated_until_a_sync_passes_without_one() {
        let config = Config::default();
        let lead = Duration::from_secs(30);
        let mut steps = MetricSteps::default();
        observe_at(&mut steps, 0, 0.6, 25, 25);
        assert_eq!(steps.factor("web", Duration::from_secs(1), lead, &config), 1.0, "one value is no trend");
        // 15 -> 37.5 replicas' worth at one sync: two more such rises within a 30 s lead.
        observe_at(&mut steps, 15, 1.5, 25, 25);
        let f = steps.factor("web", Duration::from_secs(16), lead, &config);
        assert!((f - (37.5 + 2.0 * 22.5) / 37.5).abs() < 1e-9, "{f}");
        // The same status seen again is the same sync.
        observe_at(&mut steps, 20, 1.5, 25, 25);
        assert_eq!(steps.factor("web", Duration::from_secs(20), lead, &config), f);
        // No new sync within 1.5 periods: the rise is over.
        assert_eq!(steps.factor("web", Duration::from_secs(38), lead, &config), 1.0);
        // A sync with the same demand on twice the replicas: no rise.
        observe_at(&mut steps, 30, 0.75, 50, 50);
        assert_eq!(steps.factor("web", Duration::from_secs(31), lead, &config), 1.0);
        // A rise the HPA follows in one step (50 -> 92 replicas, within its +100%) is a step.
        observe_at(&mut steps, 45, 1.1, 50, 50);
        assert_eq!(steps.factor("web", Duration::from_secs(46), lead, &config), 1.0);
    }

    #[test]
    fn a_rise_within_the_tolerance_is_noise() {
        let config = Config::default();
        let mut steps = MetricSteps::default();
        observe_at(&mut steps, 0, 0.60, 25, 25);
        observe_at(&mut steps, 15, 0.65, 25, 25);
        assert_eq!(steps.factor("web", Duration::from_secs(16), Duration::from_secs(30), &config), 1.0);
        // Measured on fewer ready pods than the HPA counts, demand is what those carry.
        observe_at(&mut steps, 30, 2.7, 50, 25);
        let f = steps.factor("web", Duration::from_secs(31), Duration::from_secs(30), &config);
        assert!((f - (67.5 + 2.0 * (67.5 - 16.25)) / 67.5).abs() < 1e-9, "{f}");
        steps.retain(&[]);
        assert_eq!(steps.factor("web", Duration::from_secs(31), Duration::from_secs(30), &config), 1.0);
    }

    #[test]
    fn only_a_rise_beyond_the_tolerance_from_a_measured_demand_counts_and_at_most_two_syncs_ahead() {
        let config = Config::default();
        let lead = Duration::from_secs(30);
        let mut steps = MetricSteps::default();
        // Held back at every sync (25 replicas, metric far above target: it decides 50), but
        // demand moves 5% up, then down: no rise.
        observe_at(&mut steps, 0, 2.0, 25, 25);
        observe_at(&mut steps, 15, 2.1, 25, 25);
        assert_eq!(steps.factor("web", Duration::from_secs(16), lead, &config), 1.0, "5% is noise");
        observe_at(&mut steps, 30, 2.0, 25, 25);
        assert_eq!(steps.factor("web", Duration::from_secs(31), lead, &config), 1.0, "falling");
        // From a sync with no ready pod (demand 0), any demand would be an infinite rise.
        let mut steps = MetricSteps::default();
        observe_at(&mut steps, 0, 0.0, 25, 0);
        observe_at(&mut steps, 15, 2.0, 25, 25);
        assert_eq!(steps.factor("web", Duration::from_secs(16), lead, &config), 1.0);
        // A real rise, with a lead of five minutes: extrapolated two syncs ahead, not twenty.
        observe_at(&mut steps, 30, 3.0, 25, 25);
        let f = steps.factor("web", Duration::from_secs(31), Duration::from_secs(300), &config);
        assert!((f - (75.0 + 2.0 * 25.0) / 75.0).abs() < 1e-9, "{f}");
        assert_eq!(f, steps.factor("web", Duration::from_secs(31), lead, &config));
    }
}
