use super::tests::{assert_sample, snapshot, usage_core, usage_snapshot, GI};
use super::*;
use crate::core::{Config, Core};

#[test]
fn usage_mode_exports_utilization_beside_allocation_and_batch_carried_wanted_and_used() {
    let snap = usage_snapshot("n1");
    let decision = usage_core().decide(&snap);
    let target = decision.nodes[0].batch.expect("usage mode decides a batch capacity");
    let m = Metrics::new();
    m.set_usage_memory_margin(0.05);
    m.observe_decision(&decision, &snap, Duration::from_millis(1));
    let text = m.encode();
    // Usage where known (200m + 800m), requests elsewhere (250m master, 2 x 1 core workers).
    assert_sample(&text, "colocate_node_cpu_usage_cores{node=\"n1\"} 3.25");
    assert_sample(&text, "colocate_node_cpu_allocation_cores{node=\"n1\"} 4.75");
    assert_sample(&text, "colocate_cpu_usage_cores{class=\"online\"} 0.8");
    assert_sample(&text, "colocate_cpu_usage_cores{class=\"training\"} 2.25");
    assert_sample(&text, "colocate_cpu_usage_cores{class=\"idle\"} 4.75");
    assert_sample(&text, "colocate_cpu_usage_ratio{class=\"system\"} 0.025");
    let batch = |metric: &str, resource: &str, unit: &str, v: f64| {
        assert_sample(
            &text,
            &format!("{metric}{{node=\"n1\",resource=\"{resource}\",unit=\"{unit}\"}} {}", super::tests::fmt(v)),
        );
    };
    batch(NODE_BATCH_CAPACITY, "cpu", "core", 5.0);
    batch(NODE_BATCH_CAPACITY, "memory", "byte", (20 * GI) as f64);
    batch(NODE_BATCH_USED, "cpu", "core", 2.0);
    batch(NODE_BATCH_USED, "memory", "byte", (2 * GI) as f64);
    batch(NODE_BATCH_TARGET, "cpu", "core", target.cpu_cores());
    batch(NODE_BATCH_TARGET, "memory", "byte", target.memory_bytes as f64);
    assert_sample(
        &text,
        &format!(
            "colocate_node_batch_memory_margin_bytes{{node=\"n1\"}} {}",
            super::tests::fmt(((32 * GI) as f64 * 0.05).floor())
        ),
    );
}

#[test]
fn usage_series_go_with_their_node_and_with_usage_mode_and_write_outcomes_start_at_zero() {
    let m = Metrics::new();
    let mut core = usage_core();
    let first = usage_snapshot("n1");
    m.observe_decision(&core.decide(&first), &first, Duration::from_millis(1));
    let second = usage_snapshot("n2");
    m.observe_decision(&core.decide(&second), &second, Duration::from_millis(1));
    let text = m.encode();
    assert!(!text.lines().any(|l| l.starts_with("colocate_node_batch") && l.contains("node=\"n1\"")), "{text}");
    assert!(text.contains("colocate_node_batch_used{node=\"n2\""), "{text}");

    // The same cluster in requests mode: no usage is known, nothing is published.
    let requests = snapshot("n2");
    m.observe_decision(&Core::new(Config::default()).decide(&requests), &requests, Duration::from_millis(1));
    let text = m.encode();
    for family in [CPU_USAGE_CORES, CPU_USAGE_RATIO, NODE_CPU_USAGE_CORES, NODE_BATCH_CAPACITY, NODE_BATCH_USED] {
        assert!(!text.lines().any(|l| l.starts_with(&format!("{family}{{"))), "{family} left in:\n{text}");
    }
    // Back in usage mode, the node's series come back (not kept detached from their families).
    let again = usage_snapshot("n2");
    m.observe_decision(&usage_core().decide(&again), &again, Duration::from_millis(1));
    let used =
        format!("colocate_node_batch_used{{node=\"n2\",resource=\"cpu\",unit=\"core\"}} {}", super::tests::fmt(2.0));
    assert_sample(&m.encode(), &used);
    assert!(m.encode().contains("colocate_node_cpu_usage_cores{node=\"n2\"} 3.25"), "{}", m.encode());
    let text = m.encode();
    for outcome in NODE_STATUS_WRITE_OUTCOMES {
        assert_sample(&text, &format!("colocate_node_status_writes_total{{outcome=\"{outcome}\"}} 0"));
    }
    m.record_node_status_write("failed");
    assert_sample(&m.encode(), "colocate_node_status_writes_total{outcome=\"failed\"} 1");
}
