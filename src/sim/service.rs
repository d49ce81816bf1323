//! A simulated online service: its HPA (Kubernetes' algorithm with the default behaviour) and
//! its latency model.
//!
//! Latency: per-replica utilization rho = load / (ready replicas * replica_capacity_rps), and
//! p99 = base_p99 / max(1 - rho, 0.01), the M/M/1 shape (response time grows as 1/(1-rho)),
//! capped at 100 x base_p99 when the service is saturated (rho >= 0.99) or has no ready pod.

use std::collections::VecDeque;

use super::scenario::ServiceSpec;

/// One sync of a service's HPA: what it decided and what it wrote to its status.
#[derive(Clone, Debug, PartialEq)]
pub struct HpaSync {
    pub at_s: f64,
    /// Replicas before the sync (`status.currentReplicas`).
    pub current: u32,
    /// Replicas it decided on (`status.desiredReplicas`).
    pub desired: u32,
    /// Utilization of the ready pods it saw (`currentMetrics`), if any pod was ready.
    pub observed: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct HpaState {
    /// The replica count the HPA has set on the Deployment.
    pub desired: u32,
    pub next_sync: f64,
    /// (time, recommendation) for the scale-down stabilization window.
    recommendations: VecDeque<(f64, u32)>,
    /// What its last sync wrote to `status.currentMetrics`: the utilization of the ready pods
    /// it saw (load through the metrics pipeline); `None` before the first sync or with no
    /// ready pod.
    pub observed: Option<f64>,
    /// `status.currentReplicas` of its last sync: the replicas that metric was measured on.
    pub observed_replicas: u32,
}

impl HpaState {
    pub fn new(spec: &ServiceSpec, initial_load: f64) -> HpaState {
        let h = &spec.hpa;
        let need = (initial_load / (spec.replica_capacity_rps * h.target_utilization)).ceil() as u32;
        HpaState {
            desired: need.clamp(h.min_replicas, h.max_replicas),
            next_sync: 0.0,
            recommendations: VecDeque::new(),
            observed: None,
            observed_replicas: 0,
        }
    }

    /// One HPA sync. `replicas` are the Deployment's pods, `ready` those serving, `load` the
    /// load as the metrics pipeline delivers it.
    ///
    /// Not-ready pods count as 0% utilized (as Kubernetes does when scaling up); inside the
    /// tolerance nothing changes; downscale uses the highest recommendation of the
    /// stabilization window; upscale is limited to max(+100%, +4 pods) per sync (the default
    /// scale-up policies, 15 s period).
    pub fn sync(&mut self, spec: &ServiceSpec, now: f64, load: f64, replicas: u32, ready: u32) -> u32 {
        let h = &spec.hpa;
        self.next_sync = now + h.sync_period.as_secs_f64();
        let current = replicas.max(1);
        let demand = load / spec.replica_capacity_rps; // replicas' worth of CPU at 100%
        self.observed = (ready > 0).then(|| demand / ready as f64);
        self.observed_replicas = replicas;
        let usage_ratio = demand / (h.target_utilization * current as f64);
        let mut raw = if ready == 0 || (usage_ratio - 1.0).abs() <= h.tolerance {
            replicas
        } else {
            (demand / h.target_utilization - 1e-9).ceil() as u32
        };
        raw = raw.clamp(h.min_replicas, h.max_replicas);
        self.recommendations.push_back((now, raw));
        let window = h.scale_down_stabilization.as_secs_f64();
        while self.recommendations.front().is_some_and(|(t, _)| *t < now - window) {
            self.recommendations.pop_front();
        }
        let stabilized = if raw < replicas {
            self.recommendations.iter().map(|(_, r)| *r).max().unwrap_or(raw).min(replicas)
        } else {
            raw
        };
        let limit = (replicas * 2).max(replicas + 4);
        self.desired = stabilized.min(limit).clamp(h.min_replicas, h.max_replicas);
        self.desired
    }
}

/// Utilization of ready replicas (1.0 = every ready replica at 100% of its CPU request).
pub fn utilization(spec: &ServiceSpec, load: f64, ready: u32) -> f64 {
    if ready == 0 {
        return if load > 0.0 { f64::INFINITY } else { 0.0 };
    }
    load / (ready as f64 * spec.replica_capacity_rps)
}

/// Modelled p99 in seconds.
pub fn p99_seconds(spec: &ServiceSpec, rho: f64) -> f64 {
    let base = spec.latency.base_p99.as_secs_f64();
    base / (1.0 - rho.min(0.99)).max(0.01)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same service as the sim model tests use (min 2, max 50, 50% target, 100 rps each).
    fn spec() -> ServiceSpec {
        crate::sim::tests::service_spec()
    }

    #[test]
    fn hpa_scales_up_within_default_policy_limit() {
        let s = spec();
        let mut h = HpaState::new(&s, 100.0);
        assert_eq!(h.desired, 2);
        // 2000 rps wants 40 replicas at 50%; one sync may go from 2 to max(4, 6) = 6.
        assert_eq!(h.sync(&s, 0.0, 2000.0, 2, 2), 6);
        assert_eq!(h.sync(&s, 15.0, 2000.0, 6, 6), 12);
    }

    #[test]
    fn hpa_holds_within_tolerance_and_stabilizes_downscale() {
        let s = spec();
        let mut h = HpaState::new(&s, 1000.0);
        assert_eq!(h.desired, 20);
        assert_eq!(h.sync(&s, 0.0, 1050.0, 20, 20), 20, "5% over target is inside the 10% tolerance");
        assert_eq!(h.sync(&s, 15.0, 200.0, 20, 20), 20, "downscale waits for the window");
        assert_eq!(h.sync(&s, 400.0, 200.0, 20, 20), 4);
    }

    #[test]
    fn latency_grows_toward_saturation() {
        let s = spec();
        assert!((p99_seconds(&s, 0.0) - 0.020).abs() < 1e-9);
        assert!((p99_seconds(&s, 0.5) - 0.040).abs() < 1e-9);
        assert!((p99_seconds(&s, 5.0) - 2.0).abs() < 1e-9);
    }
}
