//! The live controller's one clock: Unix time as it was when the process started, advanced by
//! the monotonic clock since. Decisions measure their windows (growth stabilization, the
//! latency window after a scale-up, the guard's interval) and sample ages on it, so a step of
//! the wall clock (NTP correcting it, a virtual machine resumed after a pause) neither ages
//! every sample and every memory at once nor makes them younger. Measured on the wall clock, a
//! jump of 21 s (as a CI machine's clock can make) would make the scale-up the latency window
//! remembers look 33 s old while the p99 sample from before the jump still looks fresh, and the
//! guard would shrink training for latency the scale-up explains.
//!
//! Times other machines stamp (Prometheus's evaluation time, the API server's
//! `deletionTimestamp`) are placed on it by their age on the wall clock when they arrive.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

struct Origin {
    instant: Instant,
    unix: Duration,
}

static ORIGIN: OnceLock<Origin> = OnceLock::new();

fn origin() -> &'static Origin {
    ORIGIN.get_or_init(|| Origin { instant: Instant::now(), unix: wall_now() })
}

/// Now on the controller's clock.
pub fn now() -> Duration {
    let origin = origin();
    origin.unix + origin.instant.elapsed()
}

/// A wall-clock time stamped elsewhere, on the controller's clock: as far from now as it is from
/// the wall clock now.
pub fn from_wall(t: Duration) -> Duration {
    // The origin first: its wall reading must not be taken after this one.
    let now = now();
    on_timeline(t, wall_now(), now)
}

/// A wall-clock time as a Unix duration (times before 1970 as 0).
pub fn unix(t: SystemTime) -> Duration {
    t.duration_since(UNIX_EPOCH).unwrap_or_default()
}

fn wall_now() -> Duration {
    unix(SystemTime::now())
}

/// `t` (wall clock) placed on a timeline whose `now` is the wall clock's `wall`.
fn on_timeline(t: Duration, wall: Duration, now: Duration) -> Duration {
    if t <= wall {
        now.saturating_sub(wall - t)
    } else {
        now + (t - wall)
    }
}

/// CPU time the calling thread has used, where the platform reports it. Read before and after
/// work that does not yield, the difference is that work's CPU cost, apart from the time the
/// thread waited for a CPU.
pub fn thread_cpu() -> Option<Duration> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a pointer to a live, owned value.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| Duration::new(u64::try_from(ts.tv_sec).unwrap_or(0), u32::try_from(ts.tv_nsec).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_keeps_its_age_when_the_wall_clock_has_stepped() {
        let s = Duration::from_secs;
        // The wall clock is 21 s ahead of the controller's: a sample stamped 2 s ago on it is
        // 2 s old on the controller's clock, not 23 s.
        assert_eq!(on_timeline(s(1_000), s(1_002), s(981)), s(979));
        // A stamp from a clock a little ahead of ours stays ahead.
        assert_eq!(on_timeline(s(1_003), s(1_002), s(981)), s(982));
        // Older than the timeline's start: 0, not an underflow.
        assert_eq!(on_timeline(s(0), s(1_002), s(981)), Duration::ZERO);
    }

    #[test]
    fn the_clock_starts_at_the_wall_clock_and_never_goes_back() {
        let first = now();
        let wall = wall_now();
        assert!(first.abs_diff(wall) < Duration::from_secs(5), "{first:?} vs the wall's {wall:?}");
        assert!(now() >= first);
    }

    #[test]
    fn thread_cpu_counts_work_and_not_sleep() {
        let start = super::thread_cpu().expect("Linux reports a thread's CPU time");
        std::thread::sleep(Duration::from_millis(100));
        let slept = super::thread_cpu().unwrap() - start;
        assert!(slept < Duration::from_millis(20), "a 100 ms sleep cost {slept:?} of CPU");
        let busy_until = std::time::Instant::now() + Duration::from_millis(50);
        let mut spins = 0_u64;
        while std::time::Instant::now() < busy_until {
            spins = std::hint::black_box(spins + 1);
        }
        let worked = super::thread_cpu().unwrap() - start - slept;
        assert!(worked > Duration::from_millis(1), "50 ms of spinning ({spins} spins) cost {worked:?} of CPU");
    }
}
