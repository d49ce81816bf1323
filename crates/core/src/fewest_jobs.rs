//! When room goes back to online services, take it from as few jobs as it can come from.
//!
//! Every job that loses a worker pauses to rescale (its `rescale_cost`: a checkpoint, a
//! restart, a new ring), however few workers it loses, so the cost of giving room back is
//! counted in jobs touched before workers (Lyra's preemption cost: fewest workers of the
//! fewest jobs). The keeping order of `plan.rs` takes extras from the jobs with the highest
//! weighted share, one worker each in turn, which on a short node spreads the loss over every
//! job there. This pass moves such losses, node by node, onto jobs that lose workers anyway:
//! the same nodes give the same room back, fewer jobs pause. Weights keep their meaning: the
//! job that gave more is the lowest share when room returns, and growth serves it first.

use super::resources::Resources;

/// A bound worker of a job.
pub(super) struct Worker<'a> {
    pub(super) name: &'a str,
    pub(super) node: usize,
    pub(super) requests: Resources,
    pub(super) started: Option<std::time::Duration>,
}

/// One job of a priority level that loses running workers in the plan so far.
pub(super) struct Losing<'a> {
    /// Its index among the level's members.
    pub(super) member: usize,
    /// Workers it keeps, bound and starting.
    pub(super) kept: u32,
    /// The fewest it keeps (its floor) and the most (its master's target).
    pub(super) floor: u32,
    pub(super) target: u32,
    /// Its weighted dominant share once kept.
    pub(super) share: f64,
    /// Bound workers kept, and bound workers released.
    pub(super) kept_bound: Vec<&'a Worker<'a>>,
    pub(super) released: Vec<&'a Worker<'a>>,
}

/// A released worker of `spared` that stays, and a kept worker of `sink` on the same node that
/// leaves instead (indices into their `released` and `kept_bound`).
#[derive(Debug, PartialEq)]
pub(super) struct Swap {
    pub(super) spared: usize,
    pub(super) stays: usize,
    pub(super) sink: usize,
    pub(super) leaves: usize,
}

/// Swaps that leave the fewest jobs losing workers; indices of `Swap` are into `losing`.
/// Greedy: from the job least placed to take a loss, move all of its loss onto the others
/// still losing, best placed first, or leave it where it is (a job that loses one worker fewer
/// still pauses). The nodes' training room is left as planned: what a bigger worker leaving
/// frees beyond it is not granted again in the same decision.
pub(super) fn concentrate(losing: &[Losing]) -> Vec<Swap> {
    // Best placed to take more: losing the most already, then the highest weighted share (a
    // worker is the smallest part of what it holds), then the level's order.
    let mut order: Vec<usize> = (0..losing.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&losing[a], &losing[b]);
        b.released.len().cmp(&a.released.len()).then(b.share.total_cmp(&a.share)).then(a.member.cmp(&b.member))
    });
    let mut given = vec![0u32; losing.len()];
    let mut gone: Vec<(usize, usize)> = Vec::new();
    let mut swaps = Vec::new();
    for i in (0..order.len()).rev() {
        if order.len() < 2 {
            break;
        }
        let spared = order[i];
        // Its own loss could move, not what it took from others.
        if given[spared] > 0 {
            continue;
        }
        let sinks: Vec<usize> = order.iter().copied().filter(|&s| s != spared).collect();
        if let Some(found) = find_swaps(losing, spared, &sinks, &given, &gone) {
            for swap in found {
                given[swap.sink] += 1;
                gone.push((swap.sink, swap.leaves));
                swaps.push(swap);
            }
            order.remove(i);
        }
    }
    swaps
}

/// Every released worker of `spared` matched with a kept worker of a sink on its node, or None.
fn find_swaps(
    losing: &[Losing],
    spared: usize,
    sinks: &[usize],
    given: &[u32],
    gone: &[(usize, usize)],
) -> Option<Vec<Swap>> {
    let job = &losing[spared];
    // Kept back beyond its target it would not be: a job above its target releases workers
    // that its master is removing anyway.
    if job.kept + job.released.len() as u32 > job.target {
        return None;
    }
    let mut given: Vec<u32> = given.to_vec();
    let mut gone: Vec<(usize, usize)> = gone.to_vec();
    let mut swaps = Vec::with_capacity(job.released.len());
    for (stays, w) in job.released.iter().enumerate() {
        // A sink keeps its floor in running workers: it gives extras, never what it needs to run
        // (workers it is starting do not count: they are pods not bound yet). The worker that
        // leaves instead frees at least as much in every dimension: the node gets back no less
        // room than the plan gave it (what is over absorbs the next pods of a spike).
        let running = |s: usize| losing[s].kept_bound.len() as u32 - given[s];
        let (sink, leaves) = sinks.iter().filter(|&&s| running(s) > losing[s].floor).find_map(|&s| {
            let kept = &losing[s].kept_bound;
            (0..kept.len())
                .rev()
                .find(|&b| kept[b].node == w.node && !gone.contains(&(s, b)) && w.requests.fits_in(&kept[b].requests))
                .map(|b| (s, b))
        })?;
        given[sink] += 1;
        gone.push((sink, leaves));
        swaps.push(Swap { spared, stays, sink, leaves });
    }
    Some(swaps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(name: &'static str, node: usize, cpu: i64) -> Worker<'static> {
        Worker { name, node, requests: Resources::new(cpu, 1 << 30, 0), started: None }
    }

    fn losing<'a>(member: usize, share: f64, kept: &[&'a Worker<'a>], released: &[&'a Worker<'a>]) -> Losing<'a> {
        let n = kept.len() as u32;
        Losing {
            member,
            kept: n,
            floor: 1,
            target: n + released.len() as u32,
            share,
            kept_bound: kept.to_vec(),
            released: released.to_vec(),
        }
    }

    #[test]
    fn a_loss_moves_only_to_a_worker_on_its_node_that_frees_as_much() {
        // a (higher share) loses a 4-CPU worker on node 0, b a 2-CPU one on node 1. a has no
        // worker on node 1, so b's loss stays; b's workers on node 0 are 2 CPU: a's loss stays
        // too, since a smaller worker leaving would give node 0 less room than the plan.
        let (a0, a1) = (worker("a-0", 0, 4000), worker("a-1", 0, 4000));
        let (b0, b1, b2) = (worker("b-0", 0, 2000), worker("b-1", 1, 2000), worker("b-2", 1, 2000));
        let jobs = [losing(0, 0.5, &[&a0], &[&a1]), losing(1, 0.3, &[&b0, &b1], &[&b2])];
        assert_eq!(concentrate(&jobs), []);
        // b's worker on node 0 as big as a's: a is spared, b gives it instead.
        let b0 = worker("b-0", 0, 4000);
        let jobs = [losing(0, 0.5, &[&a0], &[&a1]), losing(1, 0.3, &[&b0, &b1], &[&b2])];
        assert_eq!(concentrate(&jobs), [Swap { spared: 0, stays: 0, sink: 1, leaves: 0 }]);
    }

    #[test]
    fn a_sink_keeps_its_floor_in_running_workers() {
        // b runs two workers and starts two more (kept counts all four); its floor is 2. It may
        // not give a running worker for a's: what it starts is not running yet.
        let (a0, a1) = (worker("a-0", 0, 4000), worker("a-1", 0, 4000));
        let (b0, b1, b2) = (worker("b-0", 0, 4000), worker("b-1", 0, 4000), worker("b-2", 1, 4000));
        let b = Losing { kept: 4, floor: 2, target: 5, ..losing(1, 0.9, &[&b0, &b1], &[&b2]) };
        assert_eq!(concentrate(&[losing(0, 0.5, &[&a0], &[&a1]), b]), []);
        // With a floor of 1 it may.
        let b = Losing { kept: 4, floor: 1, target: 5, ..losing(1, 0.9, &[&b0, &b1], &[&b2]) };
        assert_eq!(
            concentrate(&[losing(0, 0.5, &[&a0], &[&a1]), b]),
            [Swap { spared: 0, stays: 0, sink: 1, leaves: 1 }]
        );
    }
}
