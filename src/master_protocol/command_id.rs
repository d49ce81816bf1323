//! Command ids of `POST /v1/scale`: a retry carries the same id, so the master applies a command
//! once.
//!
//! Randomness comes from std's `RandomState` (randomly keyed SipHash) so that no crate is added
//! for it: a command id only has to be unique, not secret.

use std::hash::{BuildHasher, RandomState};
use std::process;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A fresh command id: 32 hex digits from the wall clock (nanoseconds), a process-wide counter
/// and a randomly keyed hash of both with the process id. The counter makes ids unique inside
/// the process, the clock and the hash across restarts and controller replicas.
pub fn new_command_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0) as u64;
    let mix = RandomState::new().hash_one((nanos, n, process::id()));
    format!("{nanos:016x}{:04x}{:012x}", n & 0xffff, mix >> 16)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn command_ids_are_unique_hex() {
        let ids: HashSet<String> = (0..10_000).map(|_| new_command_id()).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(ids.iter().all(|i| i.len() == 32 && i.chars().all(|c| c.is_ascii_hexdigit())));
    }
}
