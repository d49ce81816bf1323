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

/// The p99 of each step's requests, kept for the controller's p99 samples: a Prometheus
/// histogram's quantile over a window is of all the requests served in it.
#[derive(Debug, Default)]
pub struct LatencyHistory {
    /// (step start, requests served, their p99 in seconds), oldest first.
    steps: VecDeque<(f64, f64, f64)>,
}

impl LatencyHistory {
    /// Records a step and forgets the steps that started more than `keep` seconds before it.
    pub fn record(&mut self, at: f64, requests: f64, p99: f64, keep: f64) {
        self.steps.push_back((at, requests, p99));
        while self.steps.front().is_some_and(|s| s.0 < at - keep) {
            self.steps.pop_front();
        }
    }

    /// The p99 of the requests of the steps that started in `(from, to]` and of `newest`
    /// (requests, p99) of the moment.
    pub fn p99_with(&self, from: f64, to: f64, newest: (f64, f64)) -> f64 {
        let mut parts: Vec<(f64, f64)> =
            self.steps.iter().filter(|s| s.0 > from && s.0 <= to).map(|s| (s.1, s.2)).collect();
        parts.push(newest);
        pooled_p99(&parts).unwrap_or(newest.1)
    }
}

/// The p99 of requests pooled from parts of (requests, p99). The model's p99, base / (1 - rho),
/// is an M/M/1 sojourn time's, which is exponential: a part's requests slower than x are
/// 100^(-x / p99) of them. The pooled p99 is the x where the slower requests of all parts are 1%
/// of all: between the parts' smallest and largest p99. Parts without requests count once each
/// when no part has any (an idle window still has a latency to report).
pub fn pooled_p99(parts: &[(f64, f64)]) -> Option<f64> {
    if let [only] = parts {
        return Some(only.1);
    }
    let total: f64 = parts.iter().map(|p| p.0.max(0.0)).sum();
    let weight = |p: &(f64, f64)| if total > 0.0 { p.0.max(0.0) } else { 1.0 };
    let total = if total > 0.0 { total } else { parts.len() as f64 };
    let slower = |x: f64| parts.iter().map(|p| weight(p) * 100f64.powf(-x / p.1)).sum::<f64>() / total;
    let mut lo = parts.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let mut hi = parts.iter().map(|p| p.1).fold(0.0, f64::max);
    if !lo.is_finite() || lo <= 0.0 {
        return parts.first().map(|p| p.1);
    }
    // `slower` falls as x grows: at lo at least 1% are slower, at hi at most 1%.
    while hi - lo > hi * 1e-6 {
        let mid = (lo + hi) / 2.0;
        if slower(mid) > 0.01 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some((lo + hi) / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// min 2, max 50, 50% target, 100 rps per replica (a replica's worth of load is 100 rps).
    fn spec() -> ServiceSpec {
        let yaml = r#"
version: 1
name: t
duration: 1m
cluster: {nodes: [{pool: a, count: 1, allocatable: {cpu: "64", memory: 64Gi}}]}
services:
  - name: web
    replica: {cpu: "1", memory: 1Gi}
    replica_capacity_rps: 100
    latency: {base_p99: 20ms, slo_p99: 250ms}
    hpa: {min_replicas: 2, max_replicas: 50, target_utilization: 0.5}
    load: {constant: 100}
"#;
        crate::sim::scenario::Scenario::parse(std::path::Path::new("t.yaml"), yaml).unwrap().spec.services.remove(0)
    }

    #[test]
    fn hpa_never_goes_below_min_replicas() {
        let s = spec();
        let mut h = HpaState::new(&s, 0.0);
        assert_eq!(h.desired, 2);
        assert_eq!(h.sync(&s, 0.0, 0.0, 2, 2), 2);
        // Below the floor (a pod was lost), even with no load: back up to the floor.
        assert_eq!(h.sync(&s, 15.0, 0.0, 1, 1), 2);
        // ... and with no pod ready at all.
        assert_eq!(h.sync(&s, 30.0, 0.0, 1, 0), 2);
        assert_eq!(h.next_sync, 45.0);
    }

    #[test]
    fn hpa_never_goes_above_max_replicas() {
        let s = spec();
        assert_eq!(HpaState::new(&s, 1e6).desired, 50);
        let mut h = HpaState::new(&s, 100.0);
        // 40 ready at 100x the target want far more; the step allows 80; the max is 50.
        assert_eq!(h.sync(&s, 0.0, 1e6, 40, 40), 50);
        // Above the max (it was lowered): down to the max even inside the stabilization window.
        let mut h = HpaState::new(&s, 100.0);
        assert_eq!(h.sync(&s, 0.0, 3000.0, 60, 60), 50);
    }

    #[test]
    fn hpa_scale_up_counts_not_ready_pods_as_idle() {
        let s = spec();
        // 10 replicas, 4 ready, 1000 rps: 10 replicas' worth of load wants 20 at 50%.
        let mut h = HpaState::new(&s, 100.0);
        assert_eq!(h.sync(&s, 0.0, 1000.0, 10, 4), 20);
        // 520 rps: the 4 ready pods run at 130% of their request, but counting the 6 not ready as
        // idle the usage is 1.04 x the target, inside the tolerance: no change.
        let mut h = HpaState::new(&s, 100.0);
        assert_eq!(h.sync(&s, 0.0, 520.0, 10, 4), 10);
        // No pod ready: no recommendation at all.
        let mut h = HpaState::new(&s, 100.0);
        assert_eq!(h.sync(&s, 0.0, 5000.0, 10, 0), 10);
        // Few pods: the step is max(+100%, +4).
        let mut h = HpaState::new(&s, 100.0);
        assert_eq!(h.sync(&s, 0.0, 2000.0, 2, 1), 6);
    }

    #[test]
    fn pooled_p99_is_of_all_requests_not_of_the_worst_moment() {
        // One part alone: its own p99.
        assert!((pooled_p99(&[(100.0, 0.2)]).unwrap() - 0.2).abs() < 1e-6);
        // Equal parts with one p99: that p99.
        assert!((pooled_p99(&[(100.0, 0.2), (100.0, 0.2)]).unwrap() - 0.2).abs() < 1e-6);
        // One overloaded second in a minute of 100 requests a second: the window's p99 lies
        // between the calm seconds' and the overloaded one's, far below the latter.
        let mut parts = vec![(100.0, 0.02); 59];
        parts.push((100.0, 2.0));
        let p = pooled_p99(&parts).unwrap();
        assert!(p > 0.1 && p < 0.3, "{p}");
        // Half the requests overloaded: the pooled p99 is close to theirs.
        let p = pooled_p99(&[(100.0, 0.02), (100.0, 2.0)]).unwrap();
        assert!(p > 1.5 && p < 2.0, "{p}");
        // No requests anywhere: each part counts once.
        assert!((pooled_p99(&[(0.0, 0.05)]).unwrap() - 0.05).abs() < 1e-6);
        assert_eq!(pooled_p99(&[]), None);
    }

    #[test]
    fn latency_history_pools_the_window_and_forgets_what_is_older() {
        let mut h = LatencyHistory::default();
        // 20 s of 100 requests a second at 20 ms, then one second at 2 s.
        for t in 0..20 {
            h.record(t as f64, 100.0, 0.02, 16.0);
        }
        h.record(20.0, 100.0, 2.0, 16.0);
        // Kept: the steps of the last 16 s.
        assert_eq!(h.steps.len(), 17);
        // A window holding the slow second: its p99 is far above the calm one's.
        let held = h.p99_with(5.5, 20.5, (100.0, 0.02));
        assert!(held > 0.1 && held < 2.0, "{held}");
        // A window ending before it: the calm p99.
        assert!((h.p99_with(3.5, 18.5, (100.0, 0.02)) - 0.02).abs() < 1e-6);
        // An empty window: the moment's.
        assert_eq!(h.p99_with(20.5, 20.5, (100.0, 0.05)), 0.05);
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
