//! The allocator's policy for the long-running controller.
//!
//! glibc serves an allocation above its mmap threshold (128 KiB at first) from `mmap` and gives
//! it back to the kernel on free; but each time such a block is freed it raises the threshold to
//! that block's size (up to 32 MiB), so later allocations that large come from its arenas, whose
//! freed space is reused but seldom returned, and is fragmented by the small allocations between.
//! In `capacity: usage` the controller receives a Prometheus answer of megabytes every half
//! second (two queries of 30,000 series per second at 1,000 nodes): with the threshold left to
//! rise, its resident memory grew from 83 to 142 MiB in 7 minutes; held at 256 KiB, from 74 to
//! 92 MiB (`tests/scale.rs`, docs/results.md).

/// Holds glibc's mmap threshold at 256 KiB, which also stops its adjustment, unless
/// `MALLOC_MMAP_THRESHOLD_` sets one. To be called before the runtime starts its threads.
pub fn hold_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        // SAFETY: mallopt only sets a parameter of the allocator, and no other thread is
        // allocating yet.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
        }
    }
}
