//! Each online pod's CPU usage as colocate's default usage query reads it: `irate` over
//! cAdvisor's counter, the mean over the last complete scrape interval, unchanged until the next
//! scrape, and nothing for a pod scraped fewer than two times (the controller counts it at its
//! HPA's target).
//!
//! A pod's counter grows with its share of the load while it serves it, so what it reports is
//! the mean over the interval of the load per ready replica, not the interval's load spread
//! over the replicas ready now: right after the HPA's new replicas become ready, the pods that
//! were there before still report the share they served alone.

use std::collections::VecDeque;
use std::time::Duration;

use super::load::{mean_load, LoadCurve};

/// When Prometheus last scraped the pods' usage, as of `now`: scrapes fall every `scrape` from
/// `phase`.
fn newest_usage_scrape(now: f64, phase: f64, scrape: Duration) -> f64 {
    let every = scrape.as_secs_f64();
    ((now - phase) / every + 1e-9).floor() * every + phase
}

/// Whether `irate` answers for a pod ready since `ready_at`: it needs two scrapes of the pod,
/// and until then the controller counts the pod as not measured.
pub(super) fn usage_scraped(ready_at: f64, now: f64, phase: f64, scrape: Duration) -> bool {
    ready_at <= newest_usage_scrape(now, phase, scrape) - scrape.as_secs_f64() + 1e-9
}

/// A service's ready replicas over time, as far back as the last complete scrape interval
/// needs: `(since, ready)` from each change on.
#[derive(Clone, Debug, Default)]
pub struct ReadyHistory {
    changes: VecDeque<(f64, u32)>,
}

impl ReadyHistory {
    /// `ready` replicas from `at` on. Changes before `keep_since` are dropped, except the one in
    /// force then.
    pub fn record(&mut self, at: f64, ready: u32, keep_since: f64) {
        if self.changes.back().is_none_or(|&(_, r)| r != ready) {
            self.changes.push_back((at, ready));
        }
        while self.changes.len() >= 2 && self.changes[1].0 <= keep_since {
            self.changes.pop_front();
        }
    }

    /// The load per ready replica that a pod ready throughout the last complete scrape interval
    /// reports at `now` (scrapes every `scrape` from `phase`): the mean over that interval of
    /// the load divided by the replicas then ready. `None` where no replica was ready in it.
    pub fn scraped_load_per_replica(&self, curve: &LoadCurve, now: f64, phase: f64, scrape: Duration) -> Option<f64> {
        let to = newest_usage_scrape(now, phase, scrape);
        let from = to - scrape.as_secs_f64();
        let (mut sum, mut span) = (0.0, 0.0);
        for (k, &(since, ready)) in self.changes.iter().enumerate() {
            let until = self.changes.get(k + 1).map_or(f64::INFINITY, |&(next, _)| next);
            let (a, b) = (since.max(from), until.min(to));
            if b <= a || ready == 0 {
                continue;
            }
            sum += mean_load(curve, a, b) * (b - a) / f64::from(ready);
            span += b - a;
        }
        (span > 0.0).then(|| sum / span)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 0 rps until 20 s, then 150.
    fn step_load() -> LoadCurve {
        LoadCurve::Steps(vec![(0.0, 0.0), (20.0, 150.0)])
    }

    fn ready_from(changes: &[(f64, u32)]) -> ReadyHistory {
        let mut h = ReadyHistory::default();
        for &(at, ready) in changes {
            h.record(at, ready, 0.0);
        }
        h
    }

    #[test]
    fn usage_is_read_as_irate_over_the_usage_scrapes() {
        let every = Duration::from_secs(15);
        let one = ready_from(&[(0.0, 1)]);
        let curve = step_load();
        assert_eq!(
            one.scraped_load_per_replica(&curve, 29.0, 0.0, every),
            Some(0.0),
            "the scrape at 15 s covers 0..15"
        );
        let at_30 = one.scraped_load_per_replica(&curve, 30.0, 0.0, every).unwrap();
        assert!((at_30 - 100.0).abs() < 1e-9, "the scrape at 30 s covers 15..30: {at_30}");
        assert_eq!(
            one.scraped_load_per_replica(&curve, 44.9, 0.0, every),
            Some(at_30),
            "unchanged until the next scrape"
        );
        assert_eq!(one.scraped_load_per_replica(&curve, 45.0, 0.0, every), Some(150.0));
        // A pod ready at 10 s is scraped at 15 s and 30 s.
        assert!(!usage_scraped(10.0, 29.0, 0.0, every));
        assert!(usage_scraped(10.0, 30.0, 0.0, every));
        // Scraped every second, the reading follows the load within a second.
        assert_eq!(one.scraped_load_per_replica(&curve, 21.5, 0.0, Duration::from_secs(1)), Some(150.0));
        assert!(usage_scraped(20.0, 22.0, 0.0, Duration::from_secs(1)));
    }

    /// Replicas that become ready halve the share of the pods already there only from then on:
    /// the scrape after reports the mean of the two shares over the interval.
    #[test]
    fn a_pods_usage_is_its_share_of_the_load_while_it_served_it() {
        let every = Duration::from_secs(15);
        let curve = LoadCurve::Steps(vec![(0.0, 120.0)]);
        // 2 replicas until 40 s, then 4.
        let h = ready_from(&[(0.0, 2), (40.0, 4)]);
        assert_eq!(h.scraped_load_per_replica(&curve, 44.0, 0.0, every), Some(60.0), "30..45 not scraped yet");
        // 30..45: 10 s at 60 per replica, 5 s at 30.
        let at_45 = h.scraped_load_per_replica(&curve, 45.0, 0.0, every).unwrap();
        assert!((at_45 - 50.0).abs() < 1e-9, "{at_45}");
        assert_eq!(h.scraped_load_per_replica(&curve, 60.0, 0.0, every), Some(30.0));
        // No replica ready: nothing to read.
        assert_eq!(ready_from(&[(0.0, 0)]).scraped_load_per_replica(&curve, 30.0, 0.0, every), None);
    }

    #[test]
    fn history_older_than_needed_is_dropped_but_the_value_then_in_force_kept() {
        let mut h = ReadyHistory::default();
        h.record(0.0, 2, 0.0);
        h.record(1.0, 2, 0.0);
        h.record(10.0, 3, 0.0);
        h.record(20.0, 4, 15.0);
        assert_eq!(h.changes, VecDeque::from(vec![(10.0, 3), (20.0, 4)]));
    }
}
