//! `capacity: usage`: utilization beside allocation, per node and in the cluster, the batch
//! capacity nodes carry beside what the decision wants them to carry and what workers request
//! of it, and the node-status writes. These series exist only in usage mode (in requests mode
//! no usage is known: utilization would repeat allocation) and a node's go with it.

use std::collections::BTreeSet;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::{add, FloatGauge, Labels};
use super::{
    CPU_CLASSES, CPU_USAGE_CORES, CPU_USAGE_RATIO, NODE_BATCH_CAPACITY, NODE_BATCH_MEMORY_MARGIN_BYTES,
    NODE_BATCH_TARGET, NODE_BATCH_USED, NODE_CPU_ALLOCATION_CORES, NODE_CPU_USAGE_CORES, NODE_STATUS_WRITES_TOTAL,
    NODE_STATUS_WRITE_OUTCOMES,
};
use crate::core::name_map::NameMap;
use crate::core::{Decision, PodClass, Resources, Snapshot};

#[derive(Default)]
pub(super) struct UsageMetrics {
    writes: Family<Labels<1>, Counter>,
    cpu_usage: Family<Labels<1>, FloatGauge>,
    cpu_usage_ratio: Family<Labels<1>, FloatGauge>,
    node_usage: Family<Labels<1>, FloatGauge>,
    node_allocation: Family<Labels<1>, FloatGauge>,
    batch_capacity: Family<Labels<3>, FloatGauge>,
    batch_target: Family<Labels<3>, FloatGauge>,
    batch_used: Family<Labels<3>, FloatGauge>,
    memory_margin: Family<Labels<1>, FloatGauge>,
    /// `usage_memory_margin`, a fraction of each node's allocatable memory.
    memory_margin_fraction: std::sync::Mutex<f64>,
    /// Each node's series, looked up once: a decision sets 9 per node, and finding each in its
    /// family by labels (three strings copied and hashed) cost a 1,000-node controller more CPU
    /// than the decision itself.
    nodes: std::sync::Mutex<NameMap<String, NodeSeries>>,
}

/// One node's series in usage mode (a gauge clone shares its value with the family's).
struct NodeSeries {
    usage: FloatGauge,
    allocation: FloatGauge,
    memory_margin: FloatGauge,
    /// Capacity, target and used; each CPU then memory.
    batch: [[FloatGauge; 2]; 3],
}

/// (label value, unit label value, amount) of the batch resources (CPU and memory) of `r`.
fn batch_values(r: &Resources) -> [(&'static str, &'static str, f64); 2] {
    [("cpu", "core", r.cpu_cores()), ("memory", "byte", r.memory_bytes as f64)]
}

fn batch_labels(node: &str, resource: &str, unit: &str) -> Labels<3> {
    [("node", node.to_string()), ("resource", resource.to_string()), ("unit", unit.to_string())]
}

/// What one node's pods take, in `capacity: usage`.
#[derive(Default)]
struct NodeUse {
    /// CPU millicores used: each pod's usage where known, else its request.
    cpu_usage: i64,
    /// CPU millicores requested.
    cpu_allocation: i64,
    /// Batch requests of the workers bound here (terminating ones still hold theirs).
    batch_used: Resources,
}

impl UsageMetrics {
    pub(super) fn new() -> UsageMetrics {
        let m = UsageMetrics::default();
        for outcome in NODE_STATUS_WRITE_OUTCOMES {
            let _ = m.writes.get_or_create(&[("outcome", outcome.to_string())]);
        }
        m
    }

    pub(super) fn register(&self, r: &mut Registry) {
        add(
            r,
            NODE_STATUS_WRITES_TOTAL,
            "Writes of a node's batch capacity to its status (capacity: usage), by outcome: written, failed \
             (refused or unanswered; the node is retried after a backoff), not_found (the node is gone), \
             not_leader (not sent: this replica no longer leads)",
            None,
            self.writes.clone(),
        );
        add(
            r,
            CPU_USAGE_CORES,
            "capacity: usage: CPU used by pods bound to nodes, by class (system, online, training; idle is \
             allocatable CPU nobody uses); a pod whose usage is not known counts at its request",
            Some("cores"),
            self.cpu_usage.clone(),
        );
        add(
            r,
            CPU_USAGE_RATIO,
            "capacity: usage: CPU used by pods bound to nodes, by class, as a fraction of the cluster's \
             allocatable CPU (utilization, beside colocate_cpu_allocation_ratio); a pod whose usage is not \
             known counts at its request",
            Some("ratio"),
            self.cpu_usage_ratio.clone(),
        );
        add(
            r,
            NODE_CPU_USAGE_CORES,
            "capacity: usage: CPU used by the pods bound to a node; a pod whose usage is not known counts at \
             its request",
            Some("cores"),
            self.node_usage.clone(),
        );
        add(
            r,
            NODE_CPU_ALLOCATION_CORES,
            "capacity: usage: CPU requested by the pods bound to a node (workers' batch CPU included)",
            Some("cores"),
            self.node_allocation.clone(),
        );
        add(
            r,
            NODE_BATCH_CAPACITY,
            "capacity: usage: batch capacity a node carries on its status as the controller last saw it (what \
             the scheduler places BestEffort workers against); cpu in cores, memory in bytes",
            None,
            self.batch_capacity.clone(),
        );
        add(
            r,
            NODE_BATCH_TARGET,
            "capacity: usage: batch capacity the last decision wants a node to carry (written when it moves \
             past the threshold or falls); cpu in cores, memory in bytes",
            None,
            self.batch_target.clone(),
        );
        add(
            r,
            NODE_BATCH_USED,
            "capacity: usage: batch resources requested by the workers bound to a node; cpu in cores, memory \
             in bytes",
            None,
            self.batch_used.clone(),
        );
        add(
            r,
            NODE_BATCH_MEMORY_MARGIN_BYTES,
            "capacity: usage: memory kept out of a node's batch capacity (controller.usage_memory_margin of its \
             allocatable memory): what online growth may take before workers' memory is at risk",
            Some("bytes"),
            self.memory_margin.clone(),
        );
    }

    pub(super) fn set_memory_margin(&self, fraction: f64) {
        *self.memory_margin_fraction.lock().unwrap_or_else(|e| e.into_inner()) = fraction;
    }

    pub(super) fn record_write(&self, outcome: &str) {
        self.writes.get_or_create(&[("outcome", outcome.to_string())]).inc();
    }

    /// Records one decision's usage-mode series; `seen` holds the nodes that have them, whose
    /// series are removed when they are no longer in a usage-mode decision.
    pub(super) fn observe(&self, decision: &Decision, snap: &Snapshot, seen: &mut BTreeSet<String>) {
        let usage_mode = decision.nodes.iter().any(|n| n.batch.is_some());
        let nodes: BTreeSet<String> =
            if usage_mode { snap.nodes.iter().map(|n| n.name.clone()).collect() } else { BTreeSet::new() };
        for gone in seen.difference(&nodes) {
            self.forget_node(gone);
        }
        *seen = nodes;
        if !usage_mode {
            for class in CPU_CLASSES {
                self.cpu_usage.remove(&[("class", class.to_string())]);
                self.cpu_usage_ratio.remove(&[("class", class.to_string())]);
            }
            return;
        }

        let mut uses: Vec<NodeUse> = snap.nodes.iter().map(|_| NodeUse::default()).collect();
        let mut by_class = [0i64; 3];
        for (p, pod) in snap.pods.iter().enumerate() {
            if pod.node.is_none() {
                continue;
            }
            let cpu = pod.usage.map_or(pod.requests.cpu_milli, |u| u.cpu_milli);
            by_class[match pod.class {
                PodClass::System => 0,
                PodClass::Online { .. } => 1,
                PodClass::Worker { .. } | PodClass::Master { .. } => 2,
            }] += cpu;
            // The node's position, as the decision's pod index found it (none for a node the
            // snapshot does not have).
            let Some(u) = decision.index.node_of(p).map(|i| &mut uses[i]) else { continue };
            u.cpu_usage += cpu;
            u.cpu_allocation += pod.requests.cpu_milli;
            if matches!(pod.class, PodClass::Worker { .. }) {
                u.batch_used += Resources { gpu: 0, ..pod.requests };
            }
        }
        let allocatable: i64 = snap.nodes.iter().map(|n| n.allocatable.cpu_milli).sum();
        let used: i64 = by_class.iter().sum();
        let idle = (allocatable - used).max(0);
        for (class, milli) in CPU_CLASSES.iter().zip(by_class.into_iter().chain([idle])) {
            let label = [("class", class.to_string())];
            self.cpu_usage.get_or_create(&label).set(milli as f64 / 1000.0);
            let ratio = if allocatable > 0 { milli as f64 / allocatable as f64 } else { 0.0 };
            self.cpu_usage_ratio.get_or_create(&label).set(ratio);
        }

        let margin = *self.memory_margin_fraction.lock().unwrap_or_else(|e| e.into_inner());
        let mut series = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        // A decision has one entry per node of its snapshot, in the same order.
        for ((n, u), d) in snap.nodes.iter().zip(&uses).zip(&decision.nodes) {
            let name = n.name.as_str();
            if !series.contains_key(name) {
                series.insert(n.name.clone(), self.node_series(name));
            }
            let s = &series[name];
            s.usage.set(u.cpu_usage as f64 / 1000.0);
            s.allocation.set(u.cpu_allocation as f64 / 1000.0);
            s.memory_margin.set((n.allocatable.memory_bytes as f64 * margin).floor());
            let carried = n.batch.unwrap_or(Resources::ZERO);
            let target = d.batch.unwrap_or(Resources::ZERO);
            for (gauges, r) in s.batch.iter().zip([carried, target, u.batch_used]) {
                for (gauge, (_, _, v)) in gauges.iter().zip(batch_values(&r)) {
                    gauge.set(v);
                }
            }
        }
    }

    /// `node`'s series, created in their families.
    fn node_series(&self, node: &str) -> NodeSeries {
        let label = [("node", node.to_string())];
        let batch = |family: &Family<Labels<3>, FloatGauge>| {
            batch_values(&Resources::ZERO)
                .map(|(resource, unit, _)| family.get_or_create(&batch_labels(node, resource, unit)).clone())
        };
        NodeSeries {
            usage: self.node_usage.get_or_create(&label).clone(),
            allocation: self.node_allocation.get_or_create(&label).clone(),
            memory_margin: self.memory_margin.get_or_create(&label).clone(),
            batch: [batch(&self.batch_capacity), batch(&self.batch_target), batch(&self.batch_used)],
        }
    }

    fn forget_node(&self, node: &str) {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner()).remove(node);
        let label = [("node", node.to_string())];
        self.node_usage.remove(&label);
        self.node_allocation.remove(&label);
        self.memory_margin.remove(&label);
        for family in [&self.batch_capacity, &self.batch_target, &self.batch_used] {
            for (resource, unit, _) in batch_values(&Resources::ZERO) {
                family.remove(&batch_labels(node, resource, unit));
            }
        }
    }
}
