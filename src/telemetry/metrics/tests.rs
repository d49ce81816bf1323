use super::*;
use crate::core::{CapacityMode, Config, Core, Job, Node, Pod};

pub(super) const GI: i64 = 1 << 30;

pub(super) fn pod(name: &str, class: PodClass, node: Option<&str>, cpu: i64) -> Pod {
    Pod {
        name: name.into(),
        class,
        node: node.map(Into::into),
        requests: Resources::new(cpu, GI, 0),
        ready: true,
        terminating_until: None,
        preempted: false,
        started: None,
        usage: None,
    }
}

/// n1 (8 cores, 32 GiB): a 500m daemon, one 2-core nginx replica, job `a` with 2 workers of
/// 1 core bound and a master of 250m; job `a` may grow to 6.
pub(super) fn snapshot(node: &str) -> Snapshot {
    let worker = |i: u32| pod(&format!("a-{i}"), PodClass::Worker { job: "a".into() }, Some(node), 1000);
    Snapshot {
        now: Duration::from_secs(100),
        nodes: vec![Node {
            name: node.into(),
            allocatable: Resources::new(8000, 32 * GI, 0),
            schedulable: true,
            batch: None,
        }],
        pods: vec![
            pod("ds", PodClass::System, Some(node), 500),
            pod("nginx-0", PodClass::Online { service: "nginx".into() }, Some(node), 2000),
            pod("a-master", PodClass::Master { job: "a".into() }, Some(node), 250),
            worker(0),
            worker(1),
            // Still waiting for the scheduler: holds no CPU yet.
            pod("nginx-1", PodClass::Online { service: "nginx".into() }, None, 2000),
        ],
        services: vec![],
        jobs: vec![Job {
            name: "a".into(),
            priority: 0,
            weight: 1.0,
            worker: Resources::new(1000, GI, 0),
            min_workers: 1,
            max_workers: 6,
            target_workers: 2,
            rescaling: false,
            rescale_cost: Duration::ZERO,
            release_latency: Duration::from_secs(2),
            work: None,
        }],
    }
}

pub(super) fn usage_core() -> Core {
    Core::new(Config { capacity: CapacityMode::Usage, grow_stabilization: Duration::ZERO, ..Config::default() })
}

/// `tests::snapshot` in usage mode: n1 carries 5 cores and 20 GiB of batch capacity; the
/// daemon uses 200m of its 500m, nginx 800m of its 2 cores; the master and the workers (2 x
/// 1 core and 1 GiB of batch resources) have no usage known.
pub(super) fn usage_snapshot(node: &str) -> Snapshot {
    let mut snap = snapshot(node);
    snap.nodes[0].batch = Some(Resources::new(5000, 20 * GI, 0));
    for p in &mut snap.pods {
        p.usage = match p.name.as_str() {
            "ds" => Some(Resources::new(200, GI / 2, 0)),
            "nginx-0" => Some(Resources::new(800, GI / 2, 0)),
            _ => None,
        };
    }
    snap
}

fn eager() -> Core {
    Core::new(Config { grow_stabilization: Duration::ZERO, safety_margin: 0.0, ..Config::default() })
}

#[track_caller]
pub(super) fn assert_sample(text: &str, sample: &str) {
    assert!(text.lines().any(|l| l == sample), "no line `{sample}` in:\n{text}");
}

#[test]
fn decision_sets_capacity_allocation_jobs_and_intents() {
    let snap = snapshot("n1");
    let decision = eager().decide(&snap);
    let grow = decision.intents.iter().find(|i| i.job == "a").expect("job a grows into spare room");
    assert_eq!(grow.reason, Reason::Grow);
    let room = decision.nodes[0].training_room;

    let m = Metrics::new();
    m.observe_decision(&decision, &snap, Duration::from_micros(300));
    let text = m.encode();

    assert_sample(
        &text,
        &format!("{NODE_RESIDUAL_CAPACITY}{{node=\"n1\",resource=\"cpu\",unit=\"core\"}} {}", fmt(room.cpu_cores())),
    );
    assert_sample(
        &text,
        &format!(
            "{NODE_RESIDUAL_CAPACITY}{{node=\"n1\",resource=\"memory\",unit=\"byte\"}} {}",
            fmt(room.memory_bytes as f64)
        ),
    );
    assert_sample(
        &text,
        &format!("{CLUSTER_RESIDUAL_CAPACITY}{{resource=\"cpu\",unit=\"core\"}} {}", fmt(room.cpu_cores())),
    );
    assert!(room.cpu_milli > 0, "room {room}");

    assert_sample(&text, &format!("{CPU_ALLOCATION_CORES}{{class=\"system\"}} 0.5"));
    assert_sample(&text, &format!("{CPU_ALLOCATION_CORES}{{class=\"online\"}} 2.0"));
    assert_sample(&text, &format!("{CPU_ALLOCATION_CORES}{{class=\"training\"}} 2.25"));
    assert_sample(&text, &format!("{CPU_ALLOCATION_CORES}{{class=\"idle\"}} 3.25"));
    assert_sample(&text, &format!("{CPU_ALLOCATION_RATIO}{{class=\"online\"}} 0.25"));

    assert_sample(&text, &format!("{JOB_WORKERS}{{job=\"a\"}} 2"));
    assert_sample(&text, &format!("{JOB_TARGET_WORKERS}{{job=\"a\"}} {}", grow.target));
    assert!(grow.target > 2);
    assert_sample(&text, &format!("{JOB_MIN_WORKERS}{{job=\"a\"}} 1"));
    assert_sample(&text, &format!("{JOB_MAX_WORKERS}{{job=\"a\"}} 6"));
    // nginx-0 shares n1 with the two 1-core workers; the master is not a worker.
    assert_sample(&text, &format!("{SERVICE_TRAINING_CPU_CORES}{{service=\"nginx\"}} 2.0"));

    assert_sample(&text, &format!("{INTENTS_TOTAL}{{reason=\"grow\"}} 1"));
    assert_sample(&text, &format!("{INTENTS_TOTAL}{{reason=\"online-headroom\"}} 0"));
    assert_sample(&text, &format!("{DECISION_DURATION_SECONDS}_count 1"));
    assert_sample(&text, &format!("{DECISION_DURATION_SECONDS}_bucket{{le=\"0.00025\"}} 0"));
    assert_sample(&text, &format!("{DECISION_DURATION_SECONDS}_bucket{{le=\"0.0005\"}} 1"));
    assert_sample(&text, &format!("{DECISION_DURATION_SECONDS}_bucket{{le=\"5.0\"}} 1"));
    assert!(text.contains(&format!("# UNIT {DECISION_DURATION_SECONDS} seconds")), "{text}");
    assert!(text.ends_with("# EOF\n"));
}

pub(super) fn fmt(v: f64) -> String {
    let mut s = format!("{v}");
    if !s.contains(['.', 'e']) {
        s.push_str(".0");
    }
    s
}

#[test]
fn series_of_vanished_nodes_and_jobs_are_removed() {
    let m = Metrics::new();
    let mut core = eager();
    let first = snapshot("n1");
    m.observe_decision(&core.decide(&first), &first, Duration::from_millis(1));
    let mut second = snapshot("n2");
    second.jobs.clear();
    m.observe_decision(&core.decide(&second), &second, Duration::from_millis(1));
    let text = m.encode();
    assert!(!text.contains("node=\"n1\""), "{text}");
    assert!(text.contains("node=\"n2\""), "{text}");
    assert!(!text.contains("job=\"a\""), "{text}");
}

#[test]
fn actuations_count_by_outcome_and_error_kind() {
    let m = Metrics::new();
    m.record_actuation(None);
    m.record_actuation(None);
    m.record_actuation(Some("timeout"));
    let text = m.encode();
    assert_sample(&text, &format!("{ACTUATIONS_TOTAL}{{outcome=\"ok\",error=\"none\"}} 2"));
    assert_sample(&text, &format!("{ACTUATIONS_TOTAL}{{outcome=\"error\",error=\"timeout\"}} 1"));
    assert_sample(&text, &format!("{ACTUATIONS_TOTAL}{{outcome=\"error\",error=\"rejected\"}} 0"));
}

#[test]
fn gauges_counters_and_watch_stats() {
    let m = Metrics::new();
    m.set_leader(true);
    m.set_reflectors_ready(true);
    m.set_target_utilization(0.9);
    m.set_sample_stale_after(Duration::from_secs(60));
    m.set_sample_age("nginx", "latency", Duration::from_millis(1500));
    m.record_stale_sample("nginx", "load");
    m.record_watch_restart("pods");
    // The reflectors' own counts: taken up to them, never counted twice.
    for _ in 0..2 {
        m.sync_watch_restarts("pods", 3);
        m.sync_watch_restarts("nodes", 2);
    }
    let text = m.encode();
    assert_sample(&text, &format!("{LEADER} 1"));
    assert_sample(&text, &format!("{REFLECTORS_READY} 1"));
    assert_sample(&text, &format!("{TARGET_UTILIZATION_RATIO} 0.9"));
    assert_sample(&text, &format!("{SAMPLE_STALE_AFTER_SECONDS} 60.0"));
    assert_sample(&text, &format!("{SAMPLE_AGE_SECONDS}{{service=\"nginx\",source=\"latency\"}} 1.5"));
    assert_sample(&text, &format!("{SAMPLES_STALE_TOTAL}{{service=\"nginx\",source=\"load\"}} 1"));
    assert_sample(&text, &format!("{WATCH_RESTARTS_TOTAL}{{kind=\"pods\"}} 3"));
    assert_sample(&text, &format!("{WATCH_RESTARTS_TOTAL}{{kind=\"nodes\"}} 2"));
    assert_sample(&text, &format!("{WATCH_RESTARTS_TOTAL}{{kind=\"services\"}} 0"));
    assert_sample(&text, &format!("{WATCH_RESTARTS_TOTAL}{{kind=\"adapter_jobs\"}} 0"));
    m.set_leader(false);
    assert_sample(&m.encode(), &format!("{LEADER} 0"));
    m.forget_service("nginx", "latency");
    assert!(!m.encode().contains("source=\"latency\""));
}

#[test]
fn every_name_is_a_family_with_help_once_recorded() {
    let m = Metrics::new();
    let snap = snapshot("n1");
    m.observe_decision(&eager().decide(&snap), &snap, Duration::from_millis(1));
    // `capacity: usage` has series of its own.
    let usage = usage_snapshot("n1");
    m.observe_decision(&usage_core().decide(&usage), &usage, Duration::from_millis(1));
    m.set_sample_age("nginx", "load", Duration::from_secs(2));
    m.record_stale_sample("nginx", "load");
    m.set_master_up("ml/a", false);
    m.record_forced_preemptions("ml/a", 1);
    m.record_decision();
    m.set_service_reading("web/nginx", Some(1.0), Some(Duration::from_millis(5)), Some(Duration::from_millis(9)));
    m.record_sample_error("web/nginx", "latency");
    let text = m.encode();
    for name in ALL {
        let family = name.strip_suffix("_total").unwrap_or(name);
        assert!(text.contains(&format!("# TYPE {family} ")), "no TYPE for {name}:\n{text}");
        let help = text.lines().find(|l| l.starts_with(&format!("# HELP {family} "))).expect("HELP line");
        assert!(help.len() > format!("# HELP {family} ").len() + 20, "short help: {help}");
    }
}

fn intents_counted(m: &Metrics, reason: &str) -> String {
    let prefix = format!("{INTENTS_TOTAL}{{reason=\"{reason}\"}} ");
    m.encode().lines().find_map(|l| l.strip_prefix(&prefix).map(String::from)).expect("the reason's series")
}

#[test]
fn an_intent_repeated_by_later_decisions_is_counted_once() {
    let m = Metrics::new();
    let snap = snapshot("n1");
    let decision = eager().decide(&snap);
    let grow = decision.intents.iter().find(|i| i.job == "a").expect("job a grows").clone();
    // The master has not applied the intent yet: every decision repeats it. Only the first says
    // the job's intent is new (what the decision loop logs at info).
    let fresh: Vec<_> = (0..5).map(|_| m.observe_decision(&decision, &snap, Duration::from_millis(1))).collect();
    assert_eq!(intents_counted(&m, "grow"), "1", "one intent repeated five times");
    assert!(fresh[0].contains("a") && fresh[1..].iter().all(|f| !f.contains("a")), "{fresh:?}");

    // A new target for the same job is a new intent.
    let mut bigger = decision.clone();
    bigger.intents[0].target = grow.target + 1;
    assert!(m.observe_decision(&bigger, &snap, Duration::from_millis(1)).contains("a"));
    assert_eq!(intents_counted(&m, "grow"), "2");
    // So is the same target for another reason.
    let mut other_reason = bigger.clone();
    other_reason.intents[0].reason = Reason::OnlineHeadroom;
    m.observe_decision(&other_reason, &snap, Duration::from_millis(1));
    assert_eq!(intents_counted(&m, "online-headroom"), "1");

    // Once a decision has no intent for the job (the master applied it), the same intent
    // decided again later is new.
    let mut applied = decision.clone();
    applied.intents.clear();
    m.observe_decision(&applied, &snap, Duration::from_millis(1));
    m.observe_decision(&decision, &snap, Duration::from_millis(1));
    assert_eq!(intents_counted(&m, "grow"), "3");
}

#[test]
fn training_cpu_per_service_counts_workers_on_the_services_nodes_only() {
    let mut snap = snapshot("n1");
    snap.nodes.push(Node {
        name: "n2".into(),
        allocatable: Resources::new(8000, 32 * GI, 0),
        schedulable: true,
        batch: None,
    });
    snap.nodes.push(Node {
        name: "n3".into(),
        allocatable: Resources::new(8000, 32 * GI, 0),
        schedulable: true,
        batch: None,
    });
    let worker = |name: &str, node: &str, cpu: i64| pod(name, PodClass::Worker { job: "a".into() }, Some(node), cpu);
    snap.pods.extend([
        // A second nginx replica on n1 does not count n1's workers twice.
        pod("nginx-2", PodClass::Online { service: "nginx".into() }, Some("n1"), 2000),
        pod("api-0", PodClass::Online { service: "api".into() }, Some("n2"), 1000),
        worker("a-2", "n2", 1500),
        Pod { terminating_until: Some(Duration::from_secs(30)), ..worker("a-3", "n2", 1000) },
        // n3 hosts no service: its workers count for none.
        worker("a-4", "n3", 4000),
    ]);
    // A configured service with no replica bound anywhere.
    snap.services.push(crate::core::Service {
        name: "batch".into(),
        replica: Resources::new(1000, GI, 0),
        hpa: None,
        load: vec![],
        latency: None,
        headroom_replicas: 0,
    });
    let m = Metrics::new();
    m.observe_decision(&eager().decide(&snap), &snap, Duration::from_millis(1));
    let text = m.encode();
    assert_sample(&text, &format!("{SERVICE_TRAINING_CPU_CORES}{{service=\"nginx\"}} 2.0"));
    assert_sample(&text, &format!("{SERVICE_TRAINING_CPU_CORES}{{service=\"api\"}} 1.5"));
    assert_sample(&text, &format!("{SERVICE_TRAINING_CPU_CORES}{{service=\"batch\"}} 0.0"));

    // A service that is gone loses its series.
    snap.pods.retain(|p| p.name != "api-0");
    m.observe_decision(&eager().decide(&snap), &snap, Duration::from_millis(1));
    assert!(!m.encode().contains("service=\"api\""), "{}", m.encode());
}

#[test]
fn online_pods_waiting_and_the_pod_seconds_they_waited() {
    let m = Metrics::new();
    let mut core = eager();
    // nginx-1 waits at 100 s and still at 110 s; at 114 s it is bound.
    let snap = snapshot("n1");
    m.observe_decision(&core.decide(&snap), &snap, Duration::ZERO);
    assert_sample(&m.encode(), "colocate_online_pods_waiting{service=\"nginx\"} 1");
    assert_sample(&m.encode(), "colocate_online_waiting_pod_seconds_total{service=\"nginx\"} 0.0");
    let later = Snapshot { now: Duration::from_secs(110), ..snapshot("n1") };
    m.observe_decision(&core.decide(&later), &later, Duration::ZERO);
    assert_sample(&m.encode(), "colocate_online_waiting_pod_seconds_total{service=\"nginx\"} 10.0");
    let mut bound = Snapshot { now: Duration::from_secs(114), ..snapshot("n1") };
    bound.pods.iter_mut().filter(|p| p.name == "nginx-1").for_each(|p| p.node = Some("n1".into()));
    m.observe_decision(&core.decide(&bound), &bound, Duration::ZERO);
    let text = m.encode();
    assert_sample(&text, "colocate_online_pods_waiting{service=\"nginx\"} 0");
    // Counted at the previous decision's count: one pod for the 4 s up to this one.
    assert_sample(&text, "colocate_online_waiting_pod_seconds_total{service=\"nginx\"} 14.0");
}

#[test]
fn counts_kept_elsewhere_are_read_each_time_the_metrics_are_encoded() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let m = Metrics::new();
    let restarts = std::sync::Arc::new(AtomicU64::new(0));
    let kept = restarts.clone();
    m.sync_before_encode(move |m| m.sync_watch_restarts("pods", kept.load(Ordering::Relaxed)));
    restarts.store(3, Ordering::Relaxed);
    assert_sample(&m.encode(), &format!("{WATCH_RESTARTS_TOTAL}{{kind=\"pods\"}} 3"));
    restarts.store(5, Ordering::Relaxed);
    assert_sample(&m.encode(), &format!("{WATCH_RESTARTS_TOTAL}{{kind=\"pods\"}} 5"));
}
