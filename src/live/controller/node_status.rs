//! `capacity: usage`: writes the batch capacity each decision wants a node to carry onto the
//! node's status (`nodes/status`, a merge patch), through the lease-gated writer. Only what
//! differs from what the node carries (as the node watch last saw it) is written, so a new
//! leader rewrites nothing that is already right; a write is not repeated while it may still be
//! on its way to the watch. Writes run here, in their own task and a few at a time, never in
//! the decision's way.
//!
//! A write that fails is not retried at every decision (about one a second): the node waits a
//! backoff that doubles with each failure in a row, so a node the controller cannot write
//! (RBAC, a webhook, a conflict that lasts) costs at most one write per backoff. A node the API
//! server no longer has is left alone until the node watch drops it from the plan.

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
use crate::telemetry::Metrics;

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
pub const RESEND_AFTER: Duration = Duration::from_secs(10);

/// Wait after a first failed write; it doubles with each failure in a row, up to
/// [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(2);

/// The longest wait between two writes to a node that keeps failing, and the wait after a
/// write to a node the API server no longer has (the node watch drops it from the plan well
/// before: a node of the same name created meanwhile is written after this at the latest).
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How a write ended (the `outcome` label of `colocate_node_status_writes_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Written,
    /// Refused or not answered (403, 409, 422, 5xx, a timeout, the lease margin passed).
    Failed,
    /// 404: the node is gone.
    NotFound,
    /// Not sent: this replica no longer leads (the write gate counts it too).
    NotLeader,
}

impl Outcome {
    pub const ALL: [Outcome; 4] = [Outcome::Written, Outcome::Failed, Outcome::NotFound, Outcome::NotLeader];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Written => "written",
            Outcome::Failed => "failed",
            Outcome::NotFound => "not_found",
            Outcome::NotLeader => "not_leader",
        }
    }
}

/// The last write to a node and when the next may go.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sent {
    pub want: Option<Resources>,
    pub at: Instant,
    /// Failed writes in a row (0 after a success).
    pub failures: u32,
    /// After a failure, nothing is sent before this, whatever the value; after a success, the
    /// same value is not sent again before it (another value is sent at once).
    pub next: Instant,
}

/// Last writes by node.
pub type SentLog = HashMap<String, Sent>;

/// The writes a plan needs: nodes whose wanted batch capacity differs from what they carry,
/// except those just written with the same value (the watch has not brought it back yet) and
/// those waiting out a failure's backoff.
pub fn writes_needed<'a>(plan: &'a [NodeBatch], sent: &SentLog, now: Instant) -> Vec<&'a NodeBatch> {
    plan.iter()
        .filter(|b| b.want != b.carried)
        .filter(|b| match sent.get(&b.node) {
            None => true,
            Some(s) if s.failures > 0 => now >= s.next,
            Some(s) => s.want != b.want || now >= s.next,
        })
        .collect()
}

/// Records how the write of `b` sent at `now` ended.
pub fn record(sent: &mut SentLog, b: &NodeBatch, outcome: Outcome, now: Instant) {
    let failures = sent.get(&b.node).map_or(0, |s| s.failures);
    let (failures, wait) = match outcome {
        Outcome::Written => (0, RESEND_AFTER),
        Outcome::Failed => (failures + 1, backoff(failures + 1)),
        Outcome::NotFound => (failures + 1, MAX_BACKOFF),
        // Nothing went out: a replica that leads again writes at once.
        Outcome::NotLeader => return,
    };
    sent.insert(b.node.clone(), Sent { want: b.want, at: now, failures, next: now + wait });
}

/// The wait after `failures` failed writes in a row.
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    (FIRST_BACKOFF * 2u32.pow(doublings)).min(MAX_BACKOFF)
}

pub struct NodeStatusWriter {
    api: Api<KubeNode>,
    gate: Arc<WriteGate>,
    names: BatchNames,
    metrics: Arc<Metrics>,
}

impl NodeStatusWriter {
    pub fn new(api: Api<KubeNode>, gate: Arc<WriteGate>, names: BatchNames, metrics: Arc<Metrics>) -> NodeStatusWriter {
        NodeStatusWriter { api, gate, names, metrics }
    }

    pub async fn run(self, mut plans: watch::Receiver<NodeBatches>, stopped: impl std::future::Future<Output = ()>) {
        tokio::pin!(stopped);
        let mut sent = SentLog::new();
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
                for (b, outcome) in chunk.iter().zip(done) {
                    self.metrics.record_node_status_write(outcome.as_str());
                    record(&mut sent, b, outcome, now);
                }
            }
            // A node the plan no longer lists (deleted, or given nothing) is forgotten.
            sent.retain(|node, _| plan.iter().any(|b| &b.node == node));
        }
    }

    /// One node's write, and how it ended.
    async fn write(&self, b: &NodeBatch) -> Outcome {
        let patch = Patch::Merge(status_patch(b.want, self.names));
        let params = PatchParams::default();
        let sent = self.gate.write(Write::NodeStatus, &b.node, self.api.patch_status(&b.node, &params, &patch));
        match sent.await {
            Ok(Ok(_)) => {
                tracing::debug!(node = %b.node, want = ?b.want, carried = ?b.carried, "node batch capacity written");
                Outcome::Written
            }
            Ok(Err(kube::Error::Api(e))) if e.code == 404 => {
                tracing::debug!(node = %b.node, "node gone before its batch capacity was written");
                Outcome::NotFound
            }
            Ok(Err(e)) => {
                tracing::warn!(node = %b.node, error = %e,
                    "cannot write the node's batch capacity (nodes/status patch); retried after a backoff");
                Outcome::Failed
            }
            Err(super::gate::Dropped::NotLeader) => Outcome::NotLeader,
            Err(super::gate::Dropped::OutlastedLease(_)) => Outcome::Failed,
        }
    }
}

#[cfg(test)]
#[path = "node_status_tests.rs"]
mod tests;
