//! Room per node for training: allocatable minus system daemons, online pods, the online pods
//! the HPA will add (decided or implied by its metric), and the safety margin.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use super::config::Config;
use super::forecast::{hpa_growth, release_lead, Calibration};
use super::intent::Reason;
use super::resources::Resources;
use super::snapshot::{PodClass, Sample, Service, Snapshot};

/// One node as the planner sees it.
#[derive(Clone, Debug)]
pub struct NodeRoom {
    pub name: String,
    pub schedulable: bool,
    pub allocatable: Resources,
    /// Not held by any bound pod (what the scheduler sees as free right now).
    pub free: Resources,
    /// Online pods expected to land here that do not exist or are not bound yet.
    pub reserved: Resources,
    /// What training may hold here after every reservation and the margin.
    pub training_room: Resources,
    /// Latency guard: no new workers here.
    pub hold_growth: bool,
    /// Why room is short here, for the explanation of any worker released on this node.
    pub pressure: Vec<(Reason, String)>,
}

/// How many replicas a service is expected to need soon, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct OnlineNeed {
    pub service: String,
    pub replica: Resources,
    /// Replicas bound to a node now.
    pub bound: u32,
    /// Replicas to make room for.
    pub expected: u32,
    pub because: String,
    /// Its load is rising: more pods are likely to follow the ones reserved for.
    pub rising: bool,
}

impl OnlineNeed {
    pub fn missing(&self) -> u32 {
        self.expected.saturating_sub(self.bound)
    }
}

/// Bound pod counts per service, and pending ones.
#[derive(Default)]
struct ReplicaCounts {
    bound: u32,
    ready: u32,
    pending: u32,
}

/// Replicas each service will need before released workers could be gone.
///
/// The HPA already decided on `desired - current` pods; beyond that, the growth its metric or
/// the load implies within the release lead (`forecast::hpa_growth`). Reserving for it now is
/// what lets training leave before the new pods exist.
pub fn online_needs(snap: &Snapshot, config: &Config, calibration: &Calibration) -> Vec<OnlineNeed> {
    let mut counts: HashMap<&str, ReplicaCounts> = HashMap::new();
    let mut unknown_pending: HashMap<&str, (Resources, u32)> = HashMap::new();
    let known: HashMap<&str, &Service> = snap.services.iter().map(|s| (s.name.as_str(), s)).collect();
    for pod in &snap.pods {
        if let PodClass::Online { service } = &pod.class {
            if pod.terminating {
                continue;
            }
            let c = counts.entry(service.as_str()).or_default();
            match &pod.node {
                Some(_) => {
                    c.bound += 1;
                    c.ready += u32::from(pod.ready);
                }
                None => {
                    c.pending += 1;
                    if !known.contains_key(service.as_str()) {
                        let e = unknown_pending.entry(service.as_str()).or_insert((pod.requests, 0));
                        e.1 += 1;
                    }
                }
            }
        }
    }

    let lead = release_lead(snap, config);
    let mut needs = Vec::new();
    for svc in &snap.services {
        let c = counts.remove(svc.name.as_str()).unwrap_or_default();
        let mut expected = c.bound + c.pending;
        let mut rising = false;
        let mut because = if c.pending > 0 { format!("{} pending pods", c.pending) } else { String::new() };
        if let Some(h) = &svc.hpa {
            let desired = h.desired_replicas.clamp(h.min_replicas, h.max_replicas.max(h.min_replicas));
            if desired > expected {
                because =
                    format!("HPA desired {desired} > {} replicas (status current {})", expected, h.current_replicas);
                expected = desired;
            }
            // Replicas the HPA counted that are gone (evicted, not yet replaced) come back; but
            // when it scales down, `current` is what it is removing: reserving for it would
            // shrink training for pods about to go.
            expected = expected.max(h.current_replicas.min(desired));
            if let Some(g) = hpa_growth(svc, h, c.ready, snap.now, calibration.per_replica(&svc.name), lead, config) {
                rising = g.rising;
                if let Some(r) = g.replicas.filter(|r| *r > expected) {
                    expected = r;
                    because = g.because;
                }
            }
        }
        let missing = expected.saturating_sub(c.bound);
        // Only HPA-driven growth is uncertain; a fixed set of pending pods is reserved exactly.
        if let (true, Some(h)) = (missing > 0 && config.reserve_quantum > 0.0, &svc.hpa) {
            let base = h.current_replicas.max(c.bound + c.pending);
            let quantum = ((base as f64 * config.reserve_quantum - 1e-9).ceil() as u32).max(1);
            // While the load still rises the forecast runs behind it: one more quantum absorbs the
            // error, so training does not grow into room the next HPA step takes.
            let rounded = (missing.div_ceil(quantum) + u32::from(rising)) * quantum;
            let ceiling = h.max_replicas.max(expected);
            expected = (c.bound + rounded).min(ceiling);
        }
        needs.push(OnlineNeed {
            service: svc.name.clone(),
            replica: svc.replica,
            bound: c.bound,
            expected,
            because,
            rising,
        });
    }
    // Pending online pods of services the controller was not told about still need a node.
    let mut rest: Vec<_> = unknown_pending.into_iter().collect();
    rest.sort_by(|a, b| a.0.cmp(b.0));
    for (name, (req, n)) in rest {
        let bound = counts.get(name).map_or(0, |c| c.bound);
        needs.push(OnlineNeed {
            service: name.to_string(),
            replica: req,
            bound,
            expected: bound + n,
            because: format!("{n} pending pods"),
            rising: false,
        });
    }
    needs
}

/// (value now + upward slope * horizon) / value now, from least-squares fits of the samples
/// inside the window. The slope is the smaller of the whole window's and its last third's, so a
/// jump that has levelled off stops being extrapolated once the newest samples are flat.
/// Falling load never lowers a reservation: that is the HPA's business.
pub fn load_trend_factor(samples: &[Sample], now: Duration, window: Duration, horizon: Duration) -> f64 {
    let within = |from: Duration| -> Vec<(f64, f64)> {
        samples
            .iter()
            .filter(|s| s.at >= from && s.at <= now && s.value.is_finite())
            .map(|s| (s.at.as_secs_f64(), s.value))
            .collect()
    };
    let pts = within(now.saturating_sub(window));
    let Some(whole) = slope(&pts) else { return 1.0 };
    let recent = slope(&within(now.saturating_sub(window / 3))).unwrap_or(whole);
    let rate = whole.min(recent);
    let last = pts.last().map_or(0.0, |p| p.1);
    if last <= 0.0 || rate <= 0.0 {
        return 1.0;
    }
    (last + rate * horizon.as_secs_f64()) / last
}

/// Least-squares slope; `None` for fewer than two distinct times.
fn slope(pts: &[(f64, f64)]) -> Option<f64> {
    if pts.len() < 2 {
        return None;
    }
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    (sxx > 0.0).then(|| pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>() / sxx)
}

/// Builds the per-node rooms: what is held now, then the reservations for `needs` placed where
/// the scheduler would put them (the freest node first; a node where releasing training makes
/// room only when no node has free room), then the margin.
pub fn node_rooms(snap: &Snapshot, needs: &[OnlineNeed], config: &Config) -> (Vec<NodeRoom>, Vec<String>) {
    let index: HashMap<&str, usize> = snap.nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
    let mut rooms: Vec<NodeRoom> = snap
        .nodes
        .iter()
        .map(|n| NodeRoom {
            name: n.name.clone(),
            schedulable: n.schedulable,
            allocatable: n.allocatable,
            free: n.allocatable,
            reserved: Resources::ZERO,
            training_room: n.allocatable,
            hold_growth: false,
            pressure: Vec::new(),
        })
        .collect();
    for pod in &snap.pods {
        let Some(i) = pod.node.as_deref().and_then(|n| index.get(n)) else { continue };
        let room = &mut rooms[*i];
        room.free -= pod.requests;
        // Workers are what is being planned; a terminating one is leaving anyway.
        if !matches!(pod.class, PodClass::Worker { .. }) {
            room.training_room -= pod.requests;
        }
    }

    let mut unplaced = Vec::new();
    let mut spread = SpreadIndex::new(&rooms);
    for need in needs {
        let mut per_node: HashMap<usize, u32> = HashMap::new();
        for _ in 0..need.missing() {
            let pick = spread.pick(&rooms, &need.replica);
            let Some(i) = pick else {
                unplaced.push(format!(
                    "{}: {} replicas will not fit even without training",
                    need.service,
                    need.missing() - per_node.values().sum::<u32>()
                ));
                break;
            };
            let before = SpreadIndex::keys(i, &rooms[i]);
            let room = &mut rooms[i];
            room.free -= need.replica;
            room.training_room -= need.replica;
            room.reserved += need.replica;
            spread.refile(before, i, room);
            *per_node.entry(i).or_default() += 1;
        }
        let mut placed: Vec<_> = per_node.into_iter().collect();
        placed.sort();
        for (i, n) in placed {
            rooms[i]
                .pressure
                .push((Reason::OnlineHeadroom, format!("{n} {} pod(s) coming ({})", need.service, need.because)));
        }
    }

    if config.safety_margin > 0.0 {
        for room in &mut rooms {
            room.training_room -= room.allocatable.scaled_up(config.safety_margin);
        }
    }
    (rooms, unplaced)
}

/// The scheduler's choice for a new online pod: the node with the most free room where it fits;
/// failing that, the node with the most room once training leaves. Nodes are kept ordered by
/// both so a reservation costs O(log n), not a scan of the cluster.
struct SpreadIndex {
    by_free: BTreeSet<(i64, i64, Reverse<usize>)>,
    by_room: BTreeSet<(i64, i64, Reverse<usize>)>,
}

impl SpreadIndex {
    fn keys(i: usize, room: &NodeRoom) -> [(i64, i64, Reverse<usize>); 2] {
        [
            (room.free.cpu_milli, room.free.memory_bytes, Reverse(i)),
            (room.training_room.cpu_milli, room.training_room.memory_bytes, Reverse(i)),
        ]
    }

    fn new(rooms: &[NodeRoom]) -> SpreadIndex {
        let mut index = SpreadIndex { by_free: BTreeSet::new(), by_room: BTreeSet::new() };
        for (i, room) in rooms.iter().enumerate().filter(|(_, r)| r.schedulable) {
            let [f, r] = Self::keys(i, room);
            index.by_free.insert(f);
            index.by_room.insert(r);
        }
        index
    }

    fn pick(&self, rooms: &[NodeRoom], pod: &Resources) -> Option<usize> {
        // Largest first; the first that fits in every dimension (CPU fits for all before the
        // first whose CPU is too small, so the scan stops there).
        let first_fit = |set: &BTreeSet<(i64, i64, Reverse<usize>)>, room_of: fn(&NodeRoom) -> Resources| {
            set.iter()
                .rev()
                .take_while(|(cpu, _, _)| *cpu >= pod.cpu_milli)
                .map(|(_, _, Reverse(i))| *i)
                .find(|&i| pod.fits_in(&room_of(&rooms[i])))
        };
        first_fit(&self.by_free, |r| r.free).or_else(|| first_fit(&self.by_room, |r| r.training_room))
    }

    /// Moves node `i` from its keys `before` a change to its keys now.
    fn refile(&mut self, before: [(i64, i64, Reverse<usize>); 2], i: usize, room: &NodeRoom) {
        self.by_free.remove(&before[0]);
        self.by_room.remove(&before[1]);
        let [f, r] = Self::keys(i, room);
        self.by_free.insert(f);
        self.by_room.insert(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at: u64, value: f64) -> Sample {
        Sample { at: Duration::from_secs(at), value }
    }

    #[test]
    fn trend_extrapolates_rising_load_only() {
        let rising = [s(0, 100.0), s(10, 110.0), s(20, 120.0), s(30, 130.0)];
        let f = load_trend_factor(&rising, Duration::from_secs(30), Duration::from_secs(30), Duration::from_secs(15));
        assert!((f - 145.0 / 130.0).abs() < 1e-9, "{f}");
        let falling = [s(0, 130.0), s(10, 120.0), s(20, 110.0)];
        assert_eq!(
            load_trend_factor(&falling, Duration::from_secs(20), Duration::from_secs(30), Duration::from_secs(15)),
            1.0
        );
        // A jump that has levelled off: the newest third of the window is flat.
        let jump = [s(0, 100.0), s(5, 100.0), s(10, 400.0), s(20, 400.0), s(25, 400.0), s(30, 400.0)];
        assert_eq!(
            load_trend_factor(&jump, Duration::from_secs(30), Duration::from_secs(30), Duration::from_secs(15)),
            1.0
        );
        let old = [s(0, 100.0), s(1, 200.0)];
        assert_eq!(
            load_trend_factor(&old, Duration::from_secs(100), Duration::from_secs(30), Duration::from_secs(15)),
            1.0
        );
    }
}
