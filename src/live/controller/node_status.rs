//! `capacity: usage`: writes the batch capacity each decision wants a node to carry onto the
//! node's status (`nodes/status`, a merge patch), through the lease-gated writer. Only what
//! differs from what the node carries (as the node watch last saw it) is written, so a new
//! leader rewrites nothing that is already right; a write is not repeated while it may still be
//! on its way to the watch. Writes run here, in their own task and a few at a time, never in
//! the decision's way.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node as KubeNode;
use kube::api::{Patch, PatchParams};
use kube::Api;
use tokio::sync::watch;

use super::gate::{Write, WriteGate};
use crate::core::Resources;
use crate::live::batch::{status_patch, BatchNames};

/// What one node should carry, beside what it carries now.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeBatch {
    pub node: String,
    /// `None`: carry no batch resources (the node is no longer given any).
    pub want: Option<Resources>,
    pub carried: Option<Resources>,
}

/// A decision's batch capacity for every node that needs a write or may.
pub type NodeBatches = Vec<NodeBatch>;

/// Writes in flight at once: enough that a fall on many nodes reaches them within a second,
/// few enough that the API server sees a trickle.
const IN_FLIGHT: usize = 8;

/// A write not yet seen by the node watch is sent again only after this long.
const RESEND_AFTER: Duration = Duration::from_secs(10);

/// The writes a plan needs: nodes whose wanted batch capacity differs from what they carry,
/// except those just written with the same value (the watch has not brought it back yet).
pub fn writes_needed<'a>(
    plan: &'a [NodeBatch],
    sent: &HashMap<String, (Option<Resources>, Instant)>,
    now: Instant,
) -> Vec<&'a NodeBatch> {
    plan.iter()
        .filter(|b| b.want != b.carried)
        .filter(|b| sent.get(&b.node).is_none_or(|(v, at)| *v != b.want || now.duration_since(*at) >= RESEND_AFTER))
        .collect()
}

pub struct NodeStatusWriter {
    api: Api<KubeNode>,
    gate: Arc<WriteGate>,
    names: BatchNames,
}

impl NodeStatusWriter {
    pub fn new(api: Api<KubeNode>, gate: Arc<WriteGate>, names: BatchNames) -> NodeStatusWriter {
        NodeStatusWriter { api, gate, names }
    }

    pub async fn run(self, mut plans: watch::Receiver<NodeBatches>, stopped: impl std::future::Future<Output = ()>) {
        tokio::pin!(stopped);
        let mut sent: HashMap<String, (Option<Resources>, Instant)> = HashMap::new();
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                changed = plans.changed() => if changed.is_err() { break },
            }
            let plan = plans.borrow_and_update().clone();
            let now = Instant::now();
            let writes: Vec<NodeBatch> = writes_needed(&plan, &sent, now).into_iter().cloned().collect();
            for chunk in writes.chunks(IN_FLIGHT) {
                let done = futures::future::join_all(chunk.iter().map(|b| self.write(b))).await;
                for (b, ok) in chunk.iter().zip(done) {
                    if ok {
                        sent.insert(b.node.clone(), (b.want, now));
                    }
                }
            }
            sent.retain(|node, _| plan.iter().any(|b| &b.node == node));
        }
    }

    /// One node's write; whether it went out and succeeded.
    async fn write(&self, b: &NodeBatch) -> bool {
        let patch = Patch::Merge(status_patch(b.want, self.names));
        let params = PatchParams::default();
        let sent = self.gate.write(Write::NodeStatus, &b.node, self.api.patch_status(&b.node, &params, &patch));
        match sent.await {
            Ok(Ok(_)) => {
                tracing::debug!(node = %b.node, want = ?b.want, carried = ?b.carried, "node batch capacity written");
                true
            }
            Ok(Err(kube::Error::Api(e))) if e.code == 404 => false,
            Ok(Err(e)) => {
                tracing::warn!(node = %b.node, error = %e, "cannot write the node's batch capacity (nodes/status patch)");
                false
            }
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(node: &str, want: Option<i64>, carried: Option<i64>) -> NodeBatch {
        let r = |cpu: i64| Resources::new(cpu, 1 << 30, 0);
        NodeBatch { node: node.into(), want: want.map(r), carried: carried.map(r) }
    }

    #[test]
    fn only_nodes_that_carry_something_else_are_written_and_a_fresh_write_is_not_repeated() {
        let plan = vec![
            batch("same", Some(4000), Some(4000)),
            batch("fell", Some(2000), Some(4000)),
            batch("gone", None, Some(1000)),
        ];
        let now = Instant::now();
        let names = |w: Vec<&NodeBatch>| w.iter().map(|b| b.node.clone()).collect::<Vec<_>>();
        assert_eq!(names(writes_needed(&plan, &HashMap::new(), now)), ["fell", "gone"]);
        let mut sent = HashMap::new();
        sent.insert("fell".to_string(), (Some(Resources::new(2000, 1 << 30, 0)), now));
        assert_eq!(names(writes_needed(&plan, &sent, now + Duration::from_secs(1))), ["gone"]);
        // Not seen back by the watch after a while: written again; another value at once.
        assert_eq!(names(writes_needed(&plan, &sent, now + RESEND_AFTER)), ["fell", "gone"]);
        sent.insert("fell".to_string(), (Some(Resources::new(3000, 1 << 30, 0)), now));
        assert_eq!(names(writes_needed(&plan, &sent, now)), ["fell", "gone"]);
    }
}
