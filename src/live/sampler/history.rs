//! The samples kept for one source, and which of them are fresh enough to use.
//!
//! A source is *fresh* while its newest sample is at most `stale_after` old; then every sample
//! within the trend window is returned (the trend needs the older ones too, even when the
//! window is longer than `stale_after`). Once the newest sample is older than `stale_after`
//! the source is *stale* and nothing is returned: a load trend or a latency built on old data
//! would be a guess, and the core treats an unknown latency conservatively.

use std::collections::VecDeque;
use std::time::Duration;

use crate::core::Sample;

#[derive(Debug, Default)]
pub(crate) struct History {
    /// Oldest first; timestamps strictly increasing.
    samples: VecDeque<Sample>,
}

impl History {
    /// Adds `sample` unless it is not newer than the newest one (the same Prometheus evaluation
    /// seen twice), and forgets samples more than `keep` older than it. Returns whether it was added.
    pub fn push(&mut self, sample: Sample, keep: Duration) -> bool {
        if self.newest().is_some_and(|newest| sample.at <= newest.at) {
            return false;
        }
        self.samples.push_back(sample);
        let oldest_kept = sample.at.saturating_sub(keep);
        while self.samples.front().is_some_and(|s| s.at < oldest_kept) {
            self.samples.pop_front();
        }
        true
    }

    pub fn newest(&self) -> Option<Sample> {
        self.samples.back().copied()
    }

    /// Whether there is a sample and the newest is older than `stale_after` at `now`.
    pub fn is_stale(&self, now: Duration, stale_after: Duration) -> bool {
        self.newest().is_some_and(|s| age(s, now) > stale_after)
    }

    /// Samples no older than `window` at `now`, oldest first; none when the source is stale.
    pub fn fresh(&self, now: Duration, window: Duration, stale_after: Duration) -> Vec<Sample> {
        if self.is_stale(now, stale_after) {
            return Vec::new();
        }
        self.samples.iter().filter(|s| age(**s, now) <= window).copied().collect()
    }

    /// The newest sample if the source is fresh.
    pub fn latest_fresh(&self, now: Duration, stale_after: Duration) -> Option<Sample> {
        self.newest().filter(|s| age(*s, now) <= stale_after)
    }
}

/// Age of `sample` at `now`; a sample stamped in the future (the Prometheus server's clock is
/// ahead of ours) counts as brand new rather than failing.
pub(crate) fn age(sample: Sample, now: Duration) -> Duration {
    now.saturating_sub(sample.at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at: u64, value: f64) -> Sample {
        Sample { at: Duration::from_secs(at), value }
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn values(samples: &[Sample]) -> Vec<f64> {
        samples.iter().map(|s| s.value).collect()
    }

    #[test]
    fn keeps_samples_in_order_and_forgets_old_ones() {
        let mut h = History::default();
        for t in [100, 110, 120, 130] {
            assert!(h.push(s(t, t as f64), secs(20)));
        }
        assert!(!h.push(s(130, 0.0), secs(20)), "the same evaluation twice is not a new sample");
        assert!(!h.push(s(125, 0.0), secs(20)), "nor is an older one");
        assert_eq!(values(&h.fresh(secs(130), secs(60), secs(60))), [110.0, 120.0, 130.0]);
    }

    #[test]
    fn fresh_returns_the_window_while_the_newest_sample_is_fresh() {
        let mut h = History::default();
        for t in [100, 110, 120] {
            h.push(s(t, t as f64), secs(300));
        }
        // Window longer than stale_after: older samples still feed the trend.
        assert_eq!(values(&h.fresh(secs(125), secs(30), secs(10))), [100.0, 110.0, 120.0]);
        assert_eq!(values(&h.fresh(secs(125), secs(15), secs(10))), [110.0, 120.0]);
        assert_eq!(h.latest_fresh(secs(125), secs(10)).map(|s| s.value), Some(120.0));
    }

    #[test]
    fn a_stale_source_yields_nothing() {
        let mut h = History::default();
        h.push(s(100, 1.0), secs(300));
        assert!(!h.is_stale(secs(110), secs(10)), "exactly stale_after old is still usable");
        assert!(h.is_stale(secs(111), secs(10)));
        assert!(h.fresh(secs(111), secs(60), secs(10)).is_empty());
        assert!(h.latest_fresh(secs(111), secs(10)).is_none());
        assert!(!History::default().is_stale(secs(111), secs(10)), "no sample yet is missing, not stale");
    }

    #[test]
    fn a_sample_from_the_future_is_fresh() {
        let mut h = History::default();
        h.push(s(105, 1.0), secs(60));
        assert_eq!(age(s(105, 1.0), secs(100)), Duration::ZERO);
        assert_eq!(values(&h.fresh(secs(100), secs(60), secs(10))), [1.0]);
    }
}
