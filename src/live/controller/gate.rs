//! The lease-gated writer: every write the controller makes (a scale command to a master or an
//! adapter, a forced worker deletion, an Event, the last-decision annotation, a node's batch
//! capacity) asks here at the
//! moment it is sent whether this replica still leads, and is bounded by the lease's margin.
//!
//! Checking upstream (in the decider) is not enough: a command queued, retried or waiting for a
//! deadline can go out after the Lease was lost, while another replica already steers the same
//! job. [`crate::live::lease`] publishes `false` at least `lease_duration - renew_deadline`
//! before anyone else may take over; a write that starts while `true` and is abandoned within
//! that margin cannot overlap a new leader's writes. A write dropped for either reason is
//! counted (`colocate_writes_dropped_total`) and the first one after each loss of leadership is
//! logged.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::telemetry::Metrics;

/// What kind of write asked (the metric's `write` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    Scale,
    Delete,
    Event,
    Annotation,
    /// A node's batch capacity (`capacity: usage`).
    NodeStatus,
}

impl Write {
    pub fn as_str(self) -> &'static str {
        match self {
            Write::Scale => "scale",
            Write::Delete => "delete",
            Write::Event => "event",
            Write::Annotation => "annotation",
            Write::NodeStatus => "node_status",
        }
    }
}

/// Why a write did not happen (the metric's `cause` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Dropped {
    #[error("not sent: this replica does not lead")]
    NotLeader,
    /// Abandoned: it would have outlasted the margin in which no other replica can lead.
    #[error("abandoned after {0:?}: longer than the lease margin")]
    OutlastedLease(Duration),
}

impl Dropped {
    pub fn as_str(self) -> &'static str {
        match self {
            Dropped::NotLeader => "not_leader",
            Dropped::OutlastedLease(_) => "lease_margin",
        }
    }
}

pub struct WriteGate {
    leader: watch::Receiver<bool>,
    /// `lease_duration - renew_deadline`: how long a write may take from its check.
    margin: Duration,
    metrics: Arc<Metrics>,
    /// Set once a drop was logged; cleared when a write goes out again as leader.
    logged: AtomicBool,
}

impl WriteGate {
    pub fn new(leader: watch::Receiver<bool>, margin: Duration, metrics: Arc<Metrics>) -> WriteGate {
        WriteGate { leader, margin, metrics, logged: AtomicBool::new(false) }
    }

    /// Runs `write` (a future: nothing is sent before it is polled) if this replica leads now,
    /// and abandons it past the lease margin.
    pub async fn write<T>(&self, kind: Write, what: &str, write: impl Future<Output = T>) -> Result<T, Dropped> {
        if !*self.leader.borrow() {
            return Err(self.dropped(kind, what, Dropped::NotLeader));
        }
        self.logged.store(false, Ordering::Relaxed);
        tokio::time::timeout(self.margin, write)
            .await
            .map_err(|_| self.dropped(kind, what, Dropped::OutlastedLease(self.margin)))
    }

    /// Whether writes would go out now (for work only a leader should prepare).
    pub fn leading(&self) -> bool {
        *self.leader.borrow()
    }

    fn dropped(&self, kind: Write, what: &str, cause: Dropped) -> Dropped {
        self.metrics.record_write_dropped(kind.as_str(), cause.as_str());
        if !self.logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                write = kind.as_str(),
                what,
                cause = cause.as_str(),
                "dropped a write: {cause} (further drops are only counted, colocate_writes_dropped_total)"
            );
        }
        cause
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use super::*;

    fn gate(leading: bool) -> (watch::Sender<bool>, WriteGate, Arc<Metrics>) {
        let (tx, rx) = watch::channel(leading);
        let metrics = Arc::new(Metrics::new());
        (tx, WriteGate::new(rx, Duration::from_secs(5), metrics.clone()), metrics)
    }

    fn dropped(metrics: &Metrics, write: &str, cause: &str) -> bool {
        let text = metrics.encode();
        text.lines().any(|l| {
            l.starts_with("colocate_writes_dropped_total{")
                && l.contains(&format!("write=\"{write}\""))
                && l.contains(&format!("cause=\"{cause}\""))
                && l.ends_with(" 1")
        })
    }

    #[tokio::test]
    async fn a_leader_writes_and_a_follower_sends_nothing() {
        let sent = AtomicU32::new(0);
        let (tx, gate, metrics) = gate(true);
        let send = || async { sent.fetch_add(1, Ordering::SeqCst) };
        assert_eq!(gate.write(Write::Scale, "ml/a", send()).await, Ok(0));
        tx.send(false).unwrap();
        // The future is built but never polled: the master sees nothing.
        assert_eq!(gate.write(Write::Scale, "ml/a", send()).await, Err(Dropped::NotLeader));
        assert_eq!(sent.load(Ordering::SeqCst), 1);
        assert!(dropped(&metrics, "scale", "not_leader"), "{}", metrics.encode());
        tx.send(true).unwrap();
        assert_eq!(gate.write(Write::Delete, "ml/a-0", send()).await, Ok(1));
    }

    #[test]
    fn label_values_are_the_ones_the_metric_starts_at_zero() {
        use crate::telemetry::metrics::{WRITE_DROP_CAUSES, WRITE_KINDS};
        let kinds =
            [Write::Scale, Write::Delete, Write::Event, Write::Annotation, Write::NodeStatus].map(Write::as_str);
        assert_eq!(kinds, WRITE_KINDS);
        let causes = [Dropped::NotLeader, Dropped::OutlastedLease(Duration::ZERO)].map(Dropped::as_str);
        assert_eq!(causes, WRITE_DROP_CAUSES);
    }

    #[tokio::test]
    async fn a_write_that_outlasts_the_lease_margin_is_abandoned() {
        let (_tx, rx) = watch::channel(true);
        let metrics = Arc::new(Metrics::new());
        let gate = WriteGate::new(rx, Duration::from_millis(50), metrics.clone());
        let hung = tokio::time::sleep(Duration::from_secs(60));
        let got = gate.write(Write::Event, "ml/a", hung).await;
        assert_eq!(got, Err(Dropped::OutlastedLease(Duration::from_millis(50))));
        assert!(dropped(&metrics, "event", "lease_margin"), "{}", metrics.encode());
    }
}
