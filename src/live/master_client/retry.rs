//! Retry policy of the master client.
//!
//! Randomness comes from std's `RandomState` (randomly keyed SipHash) so that no crate is added
//! for it: jitter only has to keep many controllers' retries from lining up.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

/// Bounded retries with jittered exponential backoff, for transport errors, timeouts and 5xx
/// answers (never for 4xx: the same request would get the same answer).
///
/// The defaults keep a failing master from holding the actuator for long: at most 3 attempts
/// with the default 5 s request timeout and backoffs of about 0.2 s and 0.4 s, so under 16 s in
/// the worst case, well inside the 30 s release deadline the controller gives a job.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in total, the first included; at least 1.
    pub max_attempts: u32,
    /// Backoff before the second attempt; it doubles on each further attempt.
    pub initial_backoff: Duration,
    /// Ceiling of the backoff before jitter.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retry.
    pub fn none() -> RetryPolicy {
        RetryPolicy { max_attempts: 1, ..RetryPolicy::default() }
    }

    /// The pause after failed attempt `attempt` (1-based): "equal jitter", i.e. a uniform draw in
    /// `[base/2, base]` where `base = min(max_backoff, initial_backoff * 2^(attempt-1))`. Half of
    /// the base stays fixed so that a retry never comes at once; the other half spreads them.
    /// `key` seeds the draw (the command id, or a per-request counter).
    pub fn backoff(&self, key: &str, attempt: u32) -> Duration {
        let doubling = 2u32.saturating_pow(attempt.saturating_sub(1));
        let base = self.initial_backoff.saturating_mul(doubling).min(self.max_backoff);
        let unit = (RandomState::new().hash_one((key, attempt)) >> 11) as f64 / (1u64 << 53) as f64;
        base.mul_f64(0.5 + 0.5 * unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn backoff_doubles_is_capped_and_jittered_within_half_to_full() {
        let p = RetryPolicy {
            max_attempts: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(300),
        };
        for (attempt, base) in [(1, 100), (2, 200), (3, 300), (4, 300)] {
            let base = Duration::from_millis(base);
            let draws: HashSet<Duration> = (0..50).map(|_| p.backoff("id", attempt)).collect();
            assert!(draws.iter().all(|d| *d >= base / 2 && *d <= base), "attempt {attempt}: {draws:?}");
            assert!(draws.len() > 1, "attempt {attempt}: no jitter");
        }
    }
}
