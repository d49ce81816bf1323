//! `capacity: usage`: the batch capacity each node carries on its status, which the scheduler
//! places workers against. Rewritten when what it should be has risen by more than
//! `batch_rise_threshold` of the node's allocatable, or fallen by more than a hundredth of it,
//! and only then: a node
//! object is written by every kubelet heartbeat already, and a write per node per sample would
//! load the API server in a cluster of thousands. A fall is written at once, so the scheduler
//! stops placing workers into room online pods are about to use.

use super::resources::Resources;

/// Memory is published in whole MiB: usage moves by bytes at every sample.
const MEMORY_UNIT: i64 = 1 << 20;

/// Smallest change worth a write, as a fraction of the node's allocatable: below it, a fall
/// leaves the node carrying slightly more than it should, which the usage margin covers.
const QUANTUM: f64 = 0.01;

/// What a node should carry, given what it carries now (`None`: nothing yet), the batch
/// capacity computed from usage (`computed`, negative where online pods use more than the node
/// leaves), its allocatable and the rise threshold. GPUs are not batch resources (0).
pub fn batch_to_carry(
    carried: Option<Resources>,
    computed: Resources,
    allocatable: Resources,
    rise_threshold: f64,
) -> Resources {
    let wanted = Resources {
        cpu_milli: computed.cpu_milli.max(0),
        memory_bytes: computed.memory_bytes.max(0) / MEMORY_UNIT * MEMORY_UNIT,
        gpu: 0,
    };
    let Some(carried) = carried else { return wanted };
    let moved = |now: i64, want: i64, node: i64| {
        let quantum = (node as f64 * QUANTUM).ceil() as i64;
        let rise = quantum.max((node as f64 * rise_threshold).ceil() as i64);
        want < now - quantum || want > now + rise
    };
    let cpu = moved(carried.cpu_milli, wanted.cpu_milli, allocatable.cpu_milli);
    let memory = moved(carried.memory_bytes, wanted.memory_bytes, allocatable.memory_bytes);
    if cpu || memory || carried.gpu != 0 {
        wanted
    } else {
        carried
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: i64 = 1 << 30;

    fn node() -> Resources {
        Resources::new(32_000, 128 * GI, 0)
    }

    #[test]
    fn a_node_carrying_nothing_gets_what_it_should_floored_at_zero_and_to_whole_mib() {
        let got = batch_to_carry(None, Resources::new(-500, 10 * GI + 12345, 2), node(), 0.1);
        assert_eq!(got, Resources::new(0, 10 * GI, 0));
    }

    #[test]
    fn a_rise_within_the_threshold_of_the_node_is_not_written_and_one_past_it_is() {
        let carried = Resources::new(10_000, 40 * GI, 0);
        // A tenth of 32 CPU is 3.2 CPU.
        let small = batch_to_carry(Some(carried), Resources::new(13_100, 40 * GI, 0), node(), 0.1);
        assert_eq!(small, carried);
        let large = batch_to_carry(Some(carried), Resources::new(13_300, 40 * GI, 0), node(), 0.1);
        assert_eq!(large, Resources::new(13_300, 40 * GI, 0));
    }

    #[test]
    fn a_fall_past_a_hundredth_of_the_node_is_written_at_once_in_either_resource() {
        let carried = Resources::new(10_000, 40 * GI, 0);
        // 320 millicores is a hundredth of the node: a fall of 300 stays, one of 400 is written.
        assert_eq!(batch_to_carry(Some(carried), Resources::new(9_700, 40 * GI, 0), node(), 0.1), carried);
        let cpu = batch_to_carry(Some(carried), Resources::new(9_600, 40 * GI, 0), node(), 0.1);
        assert_eq!(cpu, Resources::new(9_600, 40 * GI, 0));
        let memory = batch_to_carry(Some(carried), Resources::new(10_000, 38 * GI, 0), node(), 0.1);
        assert_eq!(memory, Resources::new(10_000, 38 * GI, 0));
    }

    #[test]
    fn without_a_threshold_a_rise_of_a_hundredth_of_the_node_is_written() {
        let carried = Resources::ZERO;
        assert_eq!(batch_to_carry(Some(carried), Resources::new(300, 0, 0), node(), 0.0), carried);
        assert_eq!(batch_to_carry(Some(carried), Resources::new(400, 0, 0), node(), 0.0), Resources::new(400, 0, 0));
    }
}
