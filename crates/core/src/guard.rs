//! Heracles-style latency guard: when a service's p99 slack runs low, training stops growing on
//! the nodes that host it; when the slack is gone, training there shrinks step by step.

use super::capacity::{NodeRoom, OnlineNeed};
use super::config::{CapacityMode, Config};
use super::damping::Memory;
use super::intent::Reason;
use super::pod_index::PodIndex;
use super::resources::Resources;
use super::snapshot::{PodClass, Snapshot};

/// Latency that the service's own scaling explains (pods are coming, reserved for already, or
/// came within the latency query's window, which still holds the excursion) is not answered by
/// shrinking training further: the guard then only holds growth. Slack that stays low once the
/// service has had the replicas it asked for over a whole window points at interference, and
/// shrinks.
pub fn apply_latency_guard(
    snap: &Snapshot,
    index: &PodIndex,
    needs: &[OnlineNeed],
    rooms: &mut [NodeRoom],
    memory: &mut Memory,
    config: &Config,
) {
    let mut training_on: Vec<Resources> = vec![Resources::ZERO; rooms.len()];
    // Per service of the snapshot: the nodes its pods are on.
    let mut hosts: Vec<Vec<usize>> = vec![Vec::new(); snap.services.len()];
    for (p, pod) in snap.pods.iter().enumerate() {
        let Some(i) = index.node_of(p) else { continue };
        match &pod.class {
            PodClass::Worker { .. } if !pod.terminating() => training_on[i] += pod.requests,
            PodClass::Online { .. } => {
                if let Some(s) = index.owner_of(p) {
                    hosts[s].push(i);
                }
            }
            _ => {}
        }
    }
    let shrink_fraction = match config.capacity {
        CapacityMode::Requests => config.latency_shrink_fraction,
        CapacityMode::Usage => config.usage_latency_shrink_fraction,
    };
    for (svc, nodes) in snap.services.iter().zip(&hosts) {
        // Noted at every decision, whatever the latency says now, so the window counts from
        // the scale-up's last moment.
        let explained =
            memory.scaled_up_within(&svc.name, scaling_up(needs, &svc.name), snap.now, config.latency_window);
        if nodes.is_empty() {
            continue;
        }
        let Some(lat) = svc.latency else { continue };
        let slack = lat.slack();
        let (shrink, text) = match slack {
            None => (false, format!("latency guard: {} p99 unknown or stale", svc.name)),
            Some(s) if s < config.latency_slack_shrink && explained => {
                (false, format!("latency guard: {} p99 slack {s:.2} while it scales up (or did within the latency window); holding growth", svc.name))
            }
            Some(s) if s < config.latency_slack_shrink => {
                // Only a shrink that happens starts the interval.
                let any_training = nodes.iter().any(|&i| !training_on[i].is_zero());
                // A fraction of 0 turns the guard's shrinks off (it still holds growth).
                let may = any_training
                    && shrink_fraction > 0.0
                    && memory.guard_may_shrink(&svc.name, snap.now, config);
                (may, format!("latency guard: {} p99 slack {s:.2} below {:.2}", svc.name, config.latency_slack_shrink))
            }
            Some(s) if s < config.latency_slack_hold => {
                (false, format!("latency guard: {} p99 slack {s:.2} below {:.2}", svc.name, config.latency_slack_hold))
            }
            Some(_) => {
                memory.guard_recovered(&svc.name, snap.now, config);
                continue;
            }
        };
        if !shrink {
            memory.guard_troubled(&svc.name);
        }
        let mut hosts: Vec<usize> = nodes.clone();
        hosts.sort_unstable();
        hosts.dedup();
        for &i in &hosts {
            rooms[i].hold_growth = true;
        }
        if !shrink {
            continue;
        }
        // Release `shrink_fraction` of the training CPU on the service's nodes, taken
        // from the most loaded nodes first: a per-node fraction would release every worker of
        // a node that holds only one.
        let total: i64 = hosts.iter().map(|&i| training_on[i].cpu_milli).sum();
        let mut goal = ((total as f64 * shrink_fraction).ceil() as i64).max(1);
        hosts.sort_by_key(|&i| (std::cmp::Reverse(training_on[i].cpu_milli), i));
        for i in hosts {
            if goal <= 0 || training_on[i].cpu_milli == 0 {
                break;
            }
            let cut = goal.min(training_on[i].cpu_milli);
            goal -= cut;
            let cap = training_on[i] - Resources::new(cut, 0, 0);
            let room = &mut rooms[i];
            room.training_room = room.training_room.min(cap.clamp_non_negative());
            room.keep_cpu_slack = 0;
            room.pressure.push((Reason::LatencyGuard, text.clone()));
        }
    }
}

fn scaling_up(needs: &[OnlineNeed], service: &str) -> bool {
    needs.iter().any(|n| n.service == service && n.scaling_up())
}
