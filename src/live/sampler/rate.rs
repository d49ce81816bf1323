//! Numbers that need two scrapes: a counter's rate and a histogram's p99 over the interval.
//!
//! Both work per series and use only series present in both scrapes, so a series that appears
//! (a new pod) adds nothing until its second scrape instead of its whole count at once. A
//! counter that went down in any series was reset (its process restarted): that pair of scrapes
//! yields no sample, the next pair does.
//!
//! The p99 of a histogram is Prometheus's `histogram_quantile(0.99, rate(x_bucket[..]))` over the
//! interval between the two scrapes: bucket counts are differenced per series, summed by upper
//! bound over series, and the quantile is interpolated linearly inside the bucket it falls in
//! ([`bucket_quantile`]). An interval without observations has no p99 (no sample, not an
//! error: the previous p99 stays usable until it is stale).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::exposition::Reading;

/// A reading and when it was scraped.
#[derive(Debug, Clone)]
pub(crate) struct Scraped {
    pub at: Duration,
    pub reading: Reading,
}

/// The value of `current` given the scrape before it (`None` on the first scrape).
pub(crate) fn value_between(previous: Option<&Scraped>, current: &Scraped) -> Option<f64> {
    match (&current.reading, previous.map(|p| (&p.reading, p.at))) {
        (Reading::Value(v), _) => Some(*v),
        (Reading::Counter(now), Some((Reading::Counter(before), at))) => {
            counter_rate(before, now, current.at.checked_sub(at)?)
        }
        (Reading::Histogram(now), Some((Reading::Histogram(before), _))) => histogram_p99(before, now),
        _ => None,
    }
}

/// The shortest span a scraped counter's rate or histogram's p99 is taken over. The controller
/// samples every second by default, and a rate over one second of a request counter is mostly
/// noise (integer counts, requests landing either side of a scrape); over 5 s it is what the
/// controller read when it sampled every 5 s.
pub(crate) const MIN_SPAN: Duration = Duration::from_secs(5);

/// The scrapes of one source kept to pair each new one with a scrape at least [`MIN_SPAN`]
/// before it: the newest such, or the oldest kept while there is none yet.
#[derive(Debug, Default)]
pub(crate) struct Scrapes {
    kept: VecDeque<Scraped>,
}

impl Scrapes {
    /// The value `current` yields, then keeps it. A counter reset (or a histogram's) between
    /// the base and `current` yields nothing for that pair; the scrapes before it are dropped,
    /// so the next scrape pairs with the ones after the reset.
    pub(crate) fn value_for(&mut self, current: Scraped) -> Option<f64> {
        if let Some(cut) = current.at.checked_sub(MIN_SPAN) {
            while self.kept.get(1).is_some_and(|s| s.at <= cut) {
                self.kept.pop_front();
            }
        }
        let value = value_between(self.kept.front(), &current).or_else(|| {
            let since_last = value_between(self.kept.back(), &current);
            if since_last.is_some() {
                // Nothing over the span but something since the last scrape: a reset in
                // between. The last scrape is after it; the next rates start there.
                self.kept.drain(..self.kept.len() - 1);
            }
            since_last
        });
        self.kept.push_back(current);
        value
    }
}

/// Increase per second of the series in both scrapes; `None` after a reset, when no series is
/// in both, or when no time passed.
pub(crate) fn counter_rate(before: &BTreeMap<String, f64>, now: &BTreeMap<String, f64>, dt: Duration) -> Option<f64> {
    if dt.is_zero() {
        return None;
    }
    let mut increase = 0.0;
    let mut common = 0;
    for (series, value) in now {
        if let Some(old) = before.get(series) {
            if value < old {
                return None;
            }
            increase += value - old;
            common += 1;
        }
    }
    (common > 0).then(|| increase / dt.as_secs_f64())
}

type Buckets = Vec<(f64, f64)>;

/// p99 of the observations made between the two scrapes.
pub(crate) fn histogram_p99(before: &BTreeMap<String, Buckets>, now: &BTreeMap<String, Buckets>) -> Option<f64> {
    let mut delta_by_bound: Vec<(f64, f64)> = Vec::new();
    for (series, buckets) in now {
        let Some(old) = before.get(series) else { continue };
        for (bound, count) in buckets {
            // A bucket the series did not have before counts from zero.
            let old_count = old.iter().find(|(b, _)| b == bound).map_or(0.0, |(_, c)| *c);
            if *count < old_count {
                return None; // reset
            }
            match delta_by_bound.iter_mut().find(|(b, _)| b == bound) {
                Some((_, sum)) => *sum += count - old_count,
                None => delta_by_bound.push((*bound, count - old_count)),
            }
        }
    }
    delta_by_bound.sort_by(|a, b| a.0.total_cmp(&b.0));
    bucket_quantile(0.99, &delta_by_bound)
}

/// Prometheus's `bucketQuantile`: `buckets` are (upper bound, cumulative count) sorted by bound,
/// ending with `+Inf`. `None` without observations or with fewer than two buckets. A quantile in
/// the `+Inf` bucket is the highest finite bound (all that is known); in the first bucket it is
/// interpolated from 0 (or is the bound itself if that is not positive).
pub(crate) fn bucket_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    if buckets.len() < 2 || buckets.last()?.0 != f64::INFINITY {
        return None;
    }
    // Counts of a scrape are not always monotonic (buckets read while being updated); like
    // Prometheus, never let a cumulative count go down.
    let mut cumulative = Vec::with_capacity(buckets.len());
    let mut highest: f64 = 0.0;
    for (bound, count) in buckets {
        highest = highest.max(*count);
        cumulative.push((*bound, highest));
    }
    let total = cumulative.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let b = cumulative.iter().position(|(_, c)| *c >= rank)?;
    if b == cumulative.len() - 1 {
        return Some(cumulative[b - 1].0);
    }
    let (end, count_to_end) = cumulative[b];
    if b == 0 && end <= 0.0 {
        return Some(end);
    }
    let (start, count_before) = if b == 0 { (0.0, 0.0) } else { cumulative[b - 1] };
    Some(start + (end - start) * (rank - count_before) / (count_to_end - count_before))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INF: f64 = f64::INFINITY;

    fn series(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn hist(entries: &[(&str, &[(f64, f64)])]) -> BTreeMap<String, Buckets> {
        entries.iter().map(|(k, b)| (k.to_string(), b.to_vec())).collect()
    }

    fn scraped(at: u64, reading: Reading) -> Scraped {
        Scraped { at: Duration::from_secs(at), reading }
    }

    #[test]
    fn scrapes_a_second_apart_give_rates_over_at_least_five_seconds() {
        let mut scrapes = Scrapes::default();
        // 100 requests a second, and a burst of 50 in the second before t = 7.
        let count = |t: u64| 100.0 * t as f64 + if t >= 7 { 50.0 } else { 0.0 };
        let at = |t: u64| scraped(t, Reading::Counter(series(&[("", count(t))])));
        assert_eq!(scrapes.value_for(at(0)), None);
        // Until a scrape 5 s back exists, the rate is over all there is.
        assert_eq!(scrapes.value_for(at(1)), Some(100.0));
        for t in 2..7 {
            assert_eq!(scrapes.value_for(at(t)), Some(100.0), "t = {t}");
        }
        // The burst is spread over the 5 s, not read as 150/s.
        assert_eq!(scrapes.value_for(at(7)), Some(110.0));
        assert_eq!(scrapes.value_for(at(8)), Some(110.0));
        assert!(scrapes.kept.len() <= 7, "kept {}", scrapes.kept.len());
        // A restart resets the counter: no value across it, and rates resume from the scrape
        // after it rather than 5 s later.
        let restarted = |t: u64, c: f64| scraped(t, Reading::Counter(series(&[("", c)])));
        assert_eq!(scrapes.value_for(restarted(9, 40.0)), None);
        assert_eq!(scrapes.value_for(restarted(10, 140.0)), Some(100.0));
        assert_eq!(scrapes.value_for(restarted(11, 240.0)), Some(100.0));
    }

    #[test]
    fn a_counter_becomes_a_rate_from_its_second_scrape() {
        let first = scraped(100, Reading::Counter(series(&[("", 1000.0)])));
        let second = scraped(102, Reading::Counter(series(&[("", 1500.0)])));
        assert_eq!(value_between(None, &first), None);
        assert_eq!(value_between(Some(&first), &second), Some(250.0));
    }

    #[test]
    fn a_reset_yields_no_sample_for_that_pair_only() {
        let before = series(&[("pod=\"a\"", 500.0), ("pod=\"b\"", 100.0)]);
        let reset = series(&[("pod=\"a\"", 600.0), ("pod=\"b\"", 3.0)]);
        let after = series(&[("pod=\"a\"", 700.0), ("pod=\"b\"", 13.0)]);
        assert_eq!(counter_rate(&before, &reset, Duration::from_secs(1)), None);
        assert_eq!(counter_rate(&reset, &after, Duration::from_secs(1)), Some(110.0));
    }

    #[test]
    fn series_count_from_their_second_scrape_and_time_must_pass() {
        let before = series(&[("pod=\"a\"", 10.0)]);
        let now = series(&[("pod=\"a\"", 30.0), ("pod=\"new\"", 1e6)]);
        assert_eq!(counter_rate(&before, &now, Duration::from_secs(2)), Some(10.0));
        assert_eq!(counter_rate(&before, &now, Duration::ZERO), None);
        assert_eq!(counter_rate(&series(&[("pod=\"x\"", 1.0)]), &now, Duration::from_secs(1)), None);
    }

    #[test]
    fn a_gauge_needs_no_previous_scrape() {
        assert_eq!(value_between(None, &scraped(5, Reading::Value(0.25))), Some(0.25));
    }

    #[test]
    fn bucket_quantile_interpolates_like_prometheus() {
        // 100 observations: 90 below 0.1 s, 9 in (0.1, 0.5], 1 in (0.5, 1].
        let buckets = [(0.1, 90.0), (0.5, 99.0), (1.0, 100.0), (INF, 100.0)];
        assert_eq!(bucket_quantile(0.99, &buckets), Some(0.5));
        assert_eq!(bucket_quantile(0.5, &buckets), Some(0.1 * 50.0 / 90.0));
        let q = bucket_quantile(0.95, &buckets).unwrap();
        assert!((q - (0.1 + 0.4 * 5.0 / 9.0)).abs() < 1e-12, "{q}");
    }

    #[test]
    fn bucket_quantile_edges() {
        assert_eq!(bucket_quantile(0.99, &[(0.1, 0.0), (INF, 0.0)]), None, "no observations");
        assert_eq!(bucket_quantile(0.99, &[(INF, 5.0)]), None, "a single bucket says nothing");
        assert_eq!(bucket_quantile(0.99, &[(0.1, 5.0), (1.0, 5.0)]), None, "no +Inf bucket");
        assert_eq!(bucket_quantile(0.99, &[(0.1, 1.0), (0.5, 2.0), (INF, 10.0)]), Some(0.5), "in +Inf: highest bound");
        assert_eq!(bucket_quantile(0.5, &[(-1.0, 10.0), (INF, 10.0)]), Some(-1.0));
        // Non-monotonic counts are made monotonic: the 0.5 bucket counts as 10, not 8.
        assert_eq!(bucket_quantile(0.99, &[(0.1, 10.0), (0.5, 8.0), (INF, 10.0)]), Some(0.099));
    }

    #[test]
    fn histogram_p99_uses_bucket_deltas_summed_over_series() {
        let before = hist(&[
            ("h=\"a\"", &[(0.1, 1000.0), (1.0, 1000.0), (INF, 1000.0)]),
            ("h=\"b\"", &[(0.1, 5.0), (1.0, 5.0), (INF, 5.0)]),
        ]);
        // Since then: a got 50 fast requests, b got 50 of which 2 slow (0.1..1 s): 2 of 100 slow.
        let now = hist(&[
            ("h=\"a\"", &[(0.1, 1050.0), (1.0, 1050.0), (INF, 1050.0)]),
            ("h=\"b\"", &[(0.1, 53.0), (1.0, 55.0), (INF, 55.0)]),
        ]);
        let p99 = histogram_p99(&before, &now).unwrap();
        // rank 99 of 100: one of the two slow observations, halfway through (0.1, 1].
        assert!((p99 - 0.55).abs() < 1e-12, "{p99}");
        assert_eq!(histogram_p99(&now, &now), None, "no observations in between");
        let reset = hist(&[("h=\"a\"", &[(0.1, 1.0), (1.0, 1.0), (INF, 1.0)])]);
        assert_eq!(histogram_p99(&before, &reset), None);
        let (first, second) = (scraped(1, Reading::Histogram(before)), scraped(2, Reading::Histogram(now)));
        assert_eq!(value_between(None, &first), None);
        assert!(value_between(Some(&first), &second).is_some());
    }
}
