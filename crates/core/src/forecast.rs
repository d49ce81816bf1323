//! How many replicas a service's HPA will have asked for by the time released workers are gone.
//!
//! Two lags meet here:
//! - The HPA's metric trails the load: metrics-server publishes a CPU rate every 15 s and the HPA
//!   reads it at its next sync, so a CPU-based HPA first acts 10-30 s after a load step and
//!   reaches its final size 40-60 s later. A request rate sampled from Prometheus leads it. So
//!   the core learns, while a service is calm, how much load one replica carries at 100% of its
//!   CPU request (the HPA's metric against the load of the same moment), and from then on reads
//!   demand from the load itself: a step shows as soon as the samples do. Without a load signal
//!   (or before it is learned) demand is the HPA's metric times the replicas it was measured on.
//! - A released worker keeps its node for its job's release latency (drain and exit, up to the
//!   termination grace period). Room for pods the HPA creates within that time must be released
//!   now, so the forecast looks `lead` ahead: the load trend (without a load signal, the HPA
//!   metric's, `metric_trend.rs`) is extrapolated that far, and the HPA may take as many
//!   scale-up steps as it has syncs in that time, each limited by its default policy
//!   (max(+100%, +4 pods) per sync).

use std::collections::HashMap;
use std::time::Duration;

use super::config::Config;
use super::replicas::ReplicaCounts;
use super::snapshot::{Hpa, HpaMetric, Sample, Service, Snapshot};

/// Load is calm when every sample of the window is within this factor of the smallest.
const CALM_SPREAD: f64 = 1.1;
/// A metric below this (5% of requests) says too little about capacity to learn from.
const MIN_METRIC: f64 = 0.05;
/// Growth implied within this fraction of the replicas is measurement noise (a rate over a
/// window, a utilization averaged over pods), not a coming scale-up: it reserves nothing. Without
/// it a load of 1500.07/s after a calm 1500.00/s would round 25.001 replicas up to 26 (seen on the
/// test bed). Well below the HPA's own tolerance (10%), so reservations still come first.
const NOISE: f64 = 0.01;

/// What the core has learned about each service's capacity. Owned by the core; one entry per
/// service, forgotten with the service.
#[derive(Clone, Debug, Default)]
pub struct Calibration {
    /// Per service: load (in the load signal's unit) one replica carries at 100% of its CPU.
    per_replica: HashMap<String, f64>,
}

impl Calibration {
    /// Learns from every service that is calm now: load flat (within 10%) over `trend_window`
    /// with at least three samples, its HPA at rest (desired = current) with a metric, and as
    /// many ready replicas bound as the HPA counts.
    pub fn observe(&mut self, snap: &Snapshot, counts: &[ReplicaCounts], config: &Config) {
        for (svc, ready) in snap.services.iter().zip(counts.iter().map(|c| c.ready)) {
            let Some(h) = &svc.hpa else { continue };
            let Some(m) = h.metric.filter(|m| m.current.is_finite() && m.current >= MIN_METRIC) else { continue };
            if h.desired_replicas != h.current_replicas || h.current_replicas == 0 || ready != h.current_replicas {
                continue;
            }
            let Some(mean) = calm_mean(&svc.load, snap.now, config.trend_window) else { continue };
            let per_replica = mean / (m.current * f64::from(h.current_replicas));
            if per_replica.is_finite() && per_replica > 0.0 {
                self.per_replica.insert(svc.name.clone(), per_replica);
            }
        }
    }

    pub fn per_replica(&self, service: &str) -> Option<f64> {
        self.per_replica.get(service).copied()
    }

    pub fn retain(&mut self, services: &[&str]) {
        self.per_replica.retain(|s, _| services.contains(&s.as_str()));
    }
}

/// The mean of the samples in the window that ends at the newest sample (the same at every
/// moment between two samples, as the trend), if the newest is at most half a window old, there
/// are at least three, they span half the window, and they are flat.
fn calm_mean(samples: &[Sample], now: Duration, window: Duration) -> Option<f64> {
    let recent = RecentSamples::seen(samples, now, window)?;
    let (end, _) = recent.newest();
    if now.as_secs_f64() - end > window.as_secs_f64() / 2.0 {
        return None;
    }
    // The whole window, edge included: three samples 15 s apart still fit in 30 s.
    let pts = recent.since(end - window.as_secs_f64());
    let (first, last) = (pts.first()?, pts.last()?);
    if pts.len() < 3 || last.0 - first.0 < window.as_secs_f64() / 2.0 {
        return None;
    }
    let min = pts.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let max = pts.iter().map(|p| p.1).fold(0.0, f64::max);
    (min > 0.0 && max <= min * CALM_SPREAD).then(|| pts.iter().map(|p| p.1).sum::<f64>() / pts.len() as f64)
}

/// What the core has learned of a service from earlier snapshots.
#[derive(Clone, Copy, Debug)]
pub struct Learned {
    /// Load one replica carries at 100% of its CPU ([`Calibration`]).
    pub per_replica: Option<f64>,
    /// The trend of the HPA's metric ([`MetricSteps`](super::metric_trend::MetricSteps)):
    /// [`hpa_growth`] takes it where the load's samples give no trend.
    pub metric_trend: f64,
}

/// What the HPA is expected to do within the lead.
pub struct Growth {
    /// Replicas it will want; `None` when nothing says it grows beyond what it has or already
    /// decided on.
    pub replicas: Option<u32>,
    pub because: String,
    /// The load is rising: more pods are likely to follow.
    pub rising: bool,
    /// Factor the load (or the metric) is expected to grow by within the lead: what the usage
    /// of the pods serving it now will grow by before more pods take a share.
    pub trend: f64,
}

/// `ready` is the service's ready replicas now: the HPA's metric averages the ready pods it
/// measured, which are at most its status' current replicas and no more than are ready now (pods
/// it has added since are not in the metric; counting them would inflate demand).
pub fn hpa_growth(
    svc: &Service,
    h: &Hpa,
    ready: u32,
    now: Duration,
    learned: Learned,
    lead: Duration,
    config: &Config,
) -> Option<Growth> {
    let m = h.metric.filter(|m| m.target > 0.0 && m.current.is_finite())?;
    // The load leads the HPA's metric, so its trend comes first; where its samples give none
    // (no load signal, or too few fresh samples after an outage) the metric's is the trend.
    let load_trend = load_trend_factor(&svc.load, now, config.trend_window, lead);
    let trend = load_trend.unwrap_or(learned.metric_trend);
    let rising = trend > 1.0;
    // The load is demand while its samples give a trend; older ones say less than the metric.
    let latest = load_trend.and_then(|_| svc.load.iter().rev().find(|s| s.at <= now && s.value.is_finite()));
    // Replicas' worth of CPU at 100%, now, and the words for it.
    let (demand, seen) = match (learned.per_replica, latest) {
        (Some(per), Some(l)) => {
            (l.value / per, format!("load {:.0}/s = {:.1} replicas at 100%", l.value, l.value / per))
        }
        _ => {
            let measured_on = measured_on(h, ready);
            (
                metric_demand(h, m, ready),
                format!("metric {:.2} vs target {:.2} on {measured_on} replicas", m.current, m.target),
            )
        }
    };
    let base = h.current_replicas.max(h.desired_replicas).max(1);
    let want_now = demand * trend / m.target;
    if want_now <= f64::from(base) * (1.0 + config.reserve_tolerance.max(NOISE)) {
        return Some(Growth { replicas: None, because: String::new(), rising, trend });
    }
    let want = (want_now - 1e-9).ceil() as u32;
    // The HPA's syncs within the lead, each at most max(+100%, +4 pods).
    let sync = config.hpa_sync_period.as_secs_f64().max(1e-3);
    let syncs = ((lead.as_secs_f64() / sync).ceil() as u32).max(1);
    let limit = (0..syncs).fold(base, |r, _| scale_up_limit(r));
    let replicas = want.min(limit).min(h.max_replicas);
    if replicas <= base {
        return Some(Growth { replicas: None, because: String::new(), rising, trend });
    }
    let trend_words = if rising { format!(", rising x{trend:.2} over {lead:?}") } else { String::new() };
    let because = format!(
        "{seen}{trend_words} implies {replicas} replicas within {lead:?} ({syncs} HPA sync{})",
        if syncs == 1 { "" } else { "s" }
    );
    Some(Growth { replicas: Some(replicas), because, rising, trend })
}

/// Replicas' worth of CPU at 100% the HPA's metric shows: the metric times the replicas it was
/// measured on.
pub fn metric_demand(h: &Hpa, m: HpaMetric, ready: u32) -> f64 {
    m.current * f64::from(measured_on(h, ready))
}

/// The replicas the HPA's metric was measured on: its status' current replicas, no more than
/// are ready now (pods it added since are not in the metric; counting them would inflate demand).
fn measured_on(h: &Hpa, ready: u32) -> u32 {
    h.current_replicas.min(ready)
}

/// The most replicas one HPA sync may decide on from `replicas`: its default scale-up policies,
/// max(+100%, +4 pods) per 15 s period.
pub fn scale_up_limit(replicas: u32) -> u32 {
    replicas.saturating_mul(2).max(replicas.saturating_add(4))
}

/// How far ahead room must be released: the longest release latency among the jobs, and at
/// least `forecast_horizon`.
pub fn release_lead(snap: &Snapshot, config: &Config) -> Duration {
    snap.jobs.iter().map(|j| j.release_latency).fold(config.forecast_horizon, Duration::max)
}

/// (value now + upward slope * horizon) / value now, from least-squares fits of the samples
/// inside the window. The slope is the smaller of the whole window's and its last third's (the
/// newest two samples' when the third holds fewer), so a jump that has levelled off stops being
/// extrapolated once the newest samples are flat. Falling load never lowers a reservation: that
/// is the HPA's business.
///
/// At a rise's onset the last third's slope is taken instead when it is steeper than the
/// window's and the third rises at every sample, at least twice (`rises_throughout`: a value
/// repeated exactly between two rises is the same data seen again): the flat samples before the
/// onset dilute the window's slope, and a windowed request rate keeps rising for a whole window
/// after a load step, so a third that rises throughout is the step showing, not noise. Sampled
/// so sparsely that the third holds two samples (every 5 s or more in a 30 s window), one uptick
/// would pass, so the rule stays off there. Without the rule the reservation lags the rise by most
/// of a window: on the test bed's real kube-scheduler, WorldCup98's flash crowd with 5 s releases
/// loses 3-4 workers to preemption in two of three runs (none with the rule), and the flash crowd
/// with 30 s releases leaves 30-35% of the baseline's pending pod-s (21.7-22.8% with it). The rule
/// reserves earlier on long rises of a noisy load too, at an allocation cost.
///
/// The window ends at the newest sample, not at `now`, and its edge lies half a sampling gap
/// inside it: the trend is a property of the samples, so every decision between two samples
/// sees the same one. Measured from `now`, a sample would slide out of the window between two
/// decisions on the same data: on the flash crowd, replay (deciding every 0.1 s) would release
/// two more workers 0.1 s after a sample, which the live controller (deciding on events) keeps.
/// Samples older than the window are no trend. `samples` are oldest first (the sampler's
/// history and replay's both keep them so): the newest is the last, and the gap is the last
/// two's.
///
/// `None` where the samples say nothing of a trend: none inside the window (or all older than
/// it), or fewer than two there (the first fresh sample after an outage). 1.0 where they say the
/// load is not rising.
pub fn load_trend_factor(samples: &[Sample], now: Duration, window: Duration, horizon: Duration) -> Option<f64> {
    let recent = RecentSamples::seen(samples, now, window)?;
    let pts = recent.within(window);
    let whole = slope(pts)?;
    let third_pts = recent.newest_third(window);
    let third = slope(third_pts).unwrap_or(whole);
    let rising_throughout = rises_throughout(third_pts);
    let rate = if third > whole && rising_throughout { third } else { whole.min(third) };
    let (_, last) = recent.newest();
    if last <= 0.0 || rate <= 0.0 {
        return Some(1.0);
    }
    Some((last + rate * horizon.as_secs_f64()) / last)
}

/// Whether `pts` rise at every sample, at least twice (of two samples, "rising throughout" is any
/// uptick of noise). A value repeated exactly between two rises is the same data seen again, not a
/// pause: a Prometheus that scrapes as often as colocate samples answers two queries from the same
/// scrapes whenever the two clocks drift across each other (a rate is the same to the last bit only
/// then). Counted as a pause, one such repeat in WorldCup98's rise on the test bed switches the
/// onset off for a whole third: 692 pending pod-s against replay's 461. A repeat first or last is
/// not between rises: a flat start is the load before the rise, and a flat end may be a plateau.
fn rises_throughout(pts: &[(f64, f64)]) -> bool {
    let n = pts.len();
    n >= 3 && pts[1].1 > pts[0].1 && pts[n - 1].1 > pts[n - 2].1 && pts.windows(2).all(|w| w[1].1 >= w[0].1)
}

/// The finite samples seen by `now`, as (seconds, value), oldest first, for windows that end at
/// the newest of them with their edge half a sampling gap inside: what the calm mean and the
/// trend read are properties of the samples, the same at every moment between two of them.
/// `None` without samples, or when the newest is older than the window (no recent samples).
struct RecentSamples {
    /// Never empty.
    pts: Vec<(f64, f64)>,
    /// Half the gap between the newest two samples.
    half_gap: f64,
}

impl RecentSamples {
    fn seen(samples: &[Sample], now: Duration, window: Duration) -> Option<RecentSamples> {
        debug_assert!(samples.windows(2).all(|w| w[0].at <= w[1].at), "samples oldest first");
        let pts: Vec<(f64, f64)> = samples
            .iter()
            .filter(|s| s.at <= now && s.value.is_finite())
            .map(|s| (s.at.as_secs_f64(), s.value))
            .collect();
        let end = pts.last()?.0;
        if end + window.as_secs_f64() < now.as_secs_f64() {
            return None;
        }
        let half_gap = pts.len().checked_sub(2).map_or(0.0, |i| (end - pts[i].0) / 2.0);
        Some(RecentSamples { pts, half_gap })
    }

    /// The samples at or after `from` seconds.
    fn since(&self, from: f64) -> &[(f64, f64)] {
        &self.pts[self.pts.partition_point(|p| p.0 < from)..]
    }

    /// The samples inside the `span` that ends at the newest, its edge half a gap inside.
    fn within(&self, span: Duration) -> &[(f64, f64)] {
        self.since(self.newest().0 - span.as_secs_f64() + self.half_gap)
    }

    /// The samples of the window's newest third, or the newest two where it holds fewer (with
    /// the half-gap edge, samples more than 2/9 of the window apart: 6.7 s in 30 s): without a
    /// recent slope the trend would be the whole window's and keep extrapolating a jump that
    /// has levelled off.
    fn newest_third(&self, window: Duration) -> &[(f64, f64)] {
        let third = self.within(window / 3);
        if third.len() >= 2 {
            third
        } else {
            &self.pts[self.pts.len().saturating_sub(2)..]
        }
    }

    /// (seconds, value) of the newest sample.
    fn newest(&self) -> (f64, f64) {
        self.pts[self.pts.len() - 1]
    }
}

/// Least-squares slope; `None` for fewer than two distinct x values.
pub(super) fn slope(pts: &[(f64, f64)]) -> Option<f64> {
    if pts.len() < 2 {
        return None;
    }
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    (sxx > 0.0).then(|| pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>() / sxx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at: u64, value: f64) -> Sample {
        Sample { at: Duration::from_secs(at), value }
    }

    #[test]
    fn trend_is_the_same_at_every_moment_between_two_samples() {
        // Flat, then rising from 20 s; sampled every 5 s from 0.15 s.
        let samples: Vec<Sample> = (0..9)
            .map(|k| Sample {
                at: Duration::from_millis(150 + 5000 * k),
                value: if k < 5 { 100.0 } else { 100.0 + 20.0 * (k - 4) as f64 },
            })
            .collect();
        let window = Duration::from_secs(30);
        let horizon = Duration::from_secs(15);
        let at_sample = load_trend_factor(&samples, Duration::from_millis(40_150), window, horizon).unwrap();
        assert!(at_sample > 1.0, "{at_sample}");
        // Moments at which the window measured from `now` would have dropped the 10.15 s sample.
        for now_ms in [40_150, 40_200, 42_000, 45_100] {
            let f = load_trend_factor(&samples, Duration::from_millis(now_ms), window, horizon).unwrap();
            assert_eq!(f, at_sample, "at {now_ms} ms");
        }
    }

    #[test]
    fn calm_mean_is_the_same_at_every_moment_between_two_samples() {
        // Sampled every second from 0.3 s; a noisy 12% blip at 0.3 s that a window measured
        // from `now` keeps at the sample 30.3 s and drops 0.1 s later.
        let samples: Vec<Sample> = (0..31)
            .map(|k| Sample { at: Duration::from_millis(300 + 1000 * k), value: if k == 0 { 112.0 } else { 100.0 } })
            .collect();
        let window = Duration::from_secs(30);
        let at_sample = calm_mean(&samples, Duration::from_millis(30_300), window);
        assert_eq!(at_sample, Some(100.0), "the window ends at the newest sample: 1.3..30.3 s");
        for now_ms in [30_300, 30_400, 31_000, 31_299] {
            assert_eq!(calm_mean(&samples, Duration::from_millis(now_ms), window), at_sample, "at {now_ms} ms");
        }
        // Not calm while the blip is inside the window; none once the newest sample is more
        // than half a window old.
        assert_eq!(calm_mean(&samples[..30], Duration::from_millis(29_300), window), None);
        assert_eq!(calm_mean(&samples, Duration::from_millis(45_301), window), None);
        // Samples 15 s apart: three fit in the window, its edge included.
        let sparse = [s(0, 100.0), s(15, 100.0), s(30, 100.0)];
        assert_eq!(calm_mean(&sparse, Duration::from_secs(31), window), Some(100.0));
    }

    #[test]
    fn trend_takes_an_onset_at_its_own_slope_when_it_rises_throughout() {
        let window = Duration::from_secs(30);
        let horizon = Duration::from_secs(15);
        // Flat for two thirds of the window, then rising 10 per second at every sample.
        let onset: Vec<Sample> =
            (0..=30).map(|k| s(k, if k <= 20 { 100.0 } else { 100.0 + 10.0 * (k - 20) as f64 })).collect();
        // The factor at 30 s, with the whole window's slope and its newest third's.
        let trend = |samples: &[Sample]| {
            let recent = RecentSamples::seen(samples, Duration::from_secs(30), window).unwrap();
            let whole = slope(recent.within(window)).unwrap();
            let third = slope(recent.newest_third(window)).unwrap();
            (load_trend_factor(samples, Duration::from_secs(30), window, horizon).unwrap(), whole, third)
        };
        let (f, ..) = trend(&onset);
        assert!((f - (200.0 + 10.0 * 15.0) / 200.0).abs() < 1e-9, "the onset's own slope: {f}");
        // The same rise with one dip in the newest third: noise, so the smaller (whole window's)
        // slope, as without the onset rule.
        let mut dipped = onset.clone();
        dipped[25].value = dipped[23].value;
        let (f, whole, _) = trend(&dipped);
        assert!((f - (200.0 + whole * 15.0) / 200.0).abs() < 1e-9, "the window's slope {whole}: {f}");
        assert!(f < 1.5, "{f}");
        // A value repeated exactly inside the rise (the same scrapes answering two queries) does
        // not end the onset; the trend is then the third's slope with the repeat in it.
        let mut repeated = onset.clone();
        repeated[25].value = repeated[24].value;
        let (f, _, third) = trend(&repeated);
        assert!((f - (200.0 + third * 15.0) / 200.0).abs() < 1e-9, "the third's slope {third}: {f}");
        assert!(f > 1.6, "{f}");
        // Repeats where the third begins (the load before the rise) or ends (a plateau, for all
        // one knows) are no onset.
        for at in [30, 22] {
            let mut flat = onset.clone();
            flat[at].value = flat[at - 1].value;
            let (f, whole, _) = trend(&flat);
            let last = flat[30].value;
            assert!((f - (last + whole * 15.0) / last).abs() < 1e-9, "repeat at {at}: the window's slope {whole}: {f}");
        }
        // Sampled every 5 s, the third holds two samples: one uptick is no onset.
        let sparse: Vec<Sample> = (0..=6).map(|k| s(5 * k, if k < 6 { 100.0 } else { 130.0 })).collect();
        let recent = RecentSamples::seen(&sparse, Duration::from_secs(30), window).unwrap();
        assert_eq!(recent.newest_third(window).len(), 2);
        let whole = slope(recent.within(window)).unwrap();
        let f = load_trend_factor(&sparse, Duration::from_secs(30), window, horizon).unwrap();
        assert!((f - (130.0 + whole * 15.0) / 130.0).abs() < 1e-9, "the window's slope {whole}: {f}");
    }

    /// The HPA at 10 replicas at its 0.6 target (calm), with `load` samples and no calibration.
    fn growth_with(load: Vec<Sample>, metric_trend: f64) -> Option<u32> {
        use crate::resources::Resources;
        let h = Hpa {
            min_replicas: 1,
            max_replicas: 100,
            current_replicas: 10,
            desired_replicas: 10,
            metric: Some(HpaMetric { current: 0.6, target: 0.6 }),
        };
        let svc = Service {
            name: "web".into(),
            replica: Resources::default(),
            hpa: Some(h.clone()),
            load,
            latency: None,
            headroom_replicas: 0,
        };
        let learned = Learned { per_replica: None, metric_trend };
        let lead = Duration::from_secs(30);
        hpa_growth(&svc, &h, 10, Duration::from_secs(100), learned, lead, &Config::default())?.replicas
    }

    #[test]
    fn the_metric_trend_stands_in_where_the_load_gives_none() {
        // No load signal, or one fresh sample after an outage: the metric's trend.
        assert_eq!(growth_with(vec![], 1.5), Some(15));
        assert_eq!(growth_with(vec![s(40, 100.0), s(100, 100.0)], 1.5), Some(15));
        // A flat load over the window is a trend, and it says the metric's rise is not coming.
        assert_eq!(growth_with((70..=100).map(|t| s(t, 100.0)).collect(), 1.5), None);
    }

    #[test]
    fn trend_extrapolates_rising_load_only() {
        let rising = [s(0, 100.0), s(10, 110.0), s(20, 120.0), s(30, 130.0)];
        let f = load_trend_factor(&rising, Duration::from_secs(30), Duration::from_secs(30), Duration::from_secs(15))
            .unwrap();
        assert!((f - 145.0 / 130.0).abs() < 1e-9, "{f}");
        let falling = [s(0, 130.0), s(10, 120.0), s(20, 110.0)];
        assert_eq!(
            load_trend_factor(&falling, Duration::from_secs(20), Duration::from_secs(30), Duration::from_secs(15)),
            Some(1.0)
        );
        // A jump that has levelled off: the newest third of the window is flat.
        let jump = [s(0, 100.0), s(5, 100.0), s(10, 400.0), s(20, 400.0), s(25, 400.0), s(30, 400.0)];
        assert_eq!(
            load_trend_factor(&jump, Duration::from_secs(30), Duration::from_secs(30), Duration::from_secs(15)),
            Some(1.0)
        );
        // Sampled every 10 s: the last third holds one sample, so the newest two stand in for
        // it; flat at the end, the jump is not extrapolated.
        let sparse = [s(0, 100.0), s(10, 400.0), s(20, 400.0)];
        assert_eq!(
            load_trend_factor(&sparse, Duration::from_secs(20), Duration::from_secs(30), Duration::from_secs(15)),
            Some(1.0)
        );
        // Samples older than the window, or one alone in it, say nothing of a trend.
        let old = [s(0, 100.0), s(1, 200.0)];
        assert_eq!(
            load_trend_factor(&old, Duration::from_secs(100), Duration::from_secs(30), Duration::from_secs(15)),
            None
        );
        let after_an_outage = [s(0, 100.0), s(1, 200.0), s(100, 300.0)];
        assert_eq!(
            load_trend_factor(
                &after_an_outage,
                Duration::from_secs(100),
                Duration::from_secs(30),
                Duration::from_secs(15)
            ),
            None
        );
    }
}
