use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::patch;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::*;

fn batch(node: &str, want: Option<i64>, carried: Option<i64>) -> NodeBatch {
    let r = |cpu: i64| Resources::new(cpu, 1 << 30, 0);
    NodeBatch { node: node.into(), want: want.map(r), carried: carried.map(r) }
}

fn names(w: Vec<&NodeBatch>) -> Vec<String> {
    w.iter().map(|b| b.node.clone()).collect()
}

#[test]
fn only_nodes_that_carry_something_else_are_written_and_a_fresh_write_is_not_repeated() {
    let plan = vec![
        batch("same", Some(4000), Some(4000)),
        batch("fell", Some(2000), Some(4000)),
        batch("gone", None, Some(1000)),
    ];
    let now = Instant::now();
    assert_eq!(names(writes_needed(&plan, &SentLog::new(), now)), ["fell", "gone"]);
    let mut sent = SentLog::new();
    record(&mut sent, &plan[1], Outcome::Written, now);
    assert_eq!(names(writes_needed(&plan, &sent, now + Duration::from_secs(1))), ["gone"]);
    // Not seen back by the watch after a while: written again; another value at once.
    assert_eq!(names(writes_needed(&plan, &sent, now + RESEND_AFTER)), ["fell", "gone"]);
    let other = batch("fell", Some(3000), Some(4000));
    assert_eq!(names(writes_needed(std::slice::from_ref(&other), &sent, now)), ["fell"]);
}

#[test]
fn a_failing_node_is_written_once_per_backoff_whatever_the_value_and_the_backoff_doubles_to_a_cap() {
    let t0 = Instant::now();
    let mut sent = SentLog::new();
    let mut at = t0;
    let mut waits = Vec::new();
    for _ in 0..6 {
        let plan = [batch("n1", Some(1000), None)];
        assert_eq!(names(writes_needed(&plan, &sent, at)), ["n1"], "due at {:?}", at - t0);
        record(&mut sent, &plan[0], Outcome::Failed, at);
        // Neither the same value nor another one goes before the backoff has passed.
        let wait = sent["n1"].next - at;
        for want in [1000, 500] {
            let plan = [batch("n1", Some(want), None)];
            assert!(writes_needed(&plan, &sent, at + wait - Duration::from_millis(1)).is_empty());
        }
        waits.push(wait.as_secs());
        at += wait;
    }
    assert_eq!(waits, [2, 4, 8, 16, 30, 30]);
    // A success ends the backoff: the next failure waits the first backoff again.
    record(&mut sent, &batch("n1", Some(1000), None), Outcome::Written, at);
    assert_eq!(sent["n1"].failures, 0);
    record(&mut sent, &batch("n1", Some(900), None), Outcome::Failed, at);
    assert_eq!(sent["n1"].next - at, FIRST_BACKOFF);
}

#[test]
fn a_node_gone_from_the_api_server_waits_the_longest_backoff_and_a_drop_as_follower_is_not_recorded() {
    let now = Instant::now();
    let mut sent = SentLog::new();
    let plan = [batch("gone", Some(1000), None), batch("other", Some(1000), None)];
    record(&mut sent, &plan[0], Outcome::NotFound, now);
    record(&mut sent, &plan[1], Outcome::NotLeader, now);
    assert_eq!(names(writes_needed(&plan, &sent, now + MAX_BACKOFF - Duration::from_millis(1))), ["other"]);
    assert_eq!(names(writes_needed(&plan, &sent, now + MAX_BACKOFF)), ["gone", "other"]);
}

#[test]
fn outcome_label_values_are_the_ones_the_metric_starts_at_zero() {
    assert_eq!(Outcome::ALL.map(Outcome::as_str), crate::telemetry::metrics::NODE_STATUS_WRITE_OUTCOMES);
}

/// A stand-in for the API server's `nodes/{name}/status`: answers by node name and counts the
/// patches each node received.
async fn fake_api_server() -> (String, Arc<Mutex<HashMap<String, u32>>>) {
    type Seen = Arc<Mutex<HashMap<String, u32>>>;
    async fn status(Path(node): Path<String>, State(seen): State<Seen>) -> (StatusCode, Json<Value>) {
        *seen.lock().unwrap().entry(node.clone()).or_default() += 1;
        let code = match node.as_str() {
            "forbidden" => StatusCode::FORBIDDEN,
            "deleted" => StatusCode::NOT_FOUND,
            _ => {
                return (StatusCode::OK, Json(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})))
            }
        };
        let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "message": "no",
            "reason": code.canonical_reason(), "code": code.as_u16()});
        (code, Json(status))
    }
    let seen = Seen::default();
    let app = Router::new().route("/api/v1/nodes/{node}/status", patch(status)).with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

fn writes(metrics: &Metrics, outcome: &str) -> u64 {
    let text = metrics.encode();
    let line = text
        .lines()
        .find(|l| l.starts_with("colocate_node_status_writes_total{") && l.contains(&format!("outcome=\"{outcome}\"")))
        .unwrap_or_else(|| panic!("no {outcome} series in\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn against_an_api_server_a_failing_node_is_retried_after_its_backoff_a_deleted_one_not_and_a_follower_sends_nothing(
) {
    let (url, seen) = fake_api_server().await;
    let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
    let metrics = Arc::new(Metrics::new());
    let (leader_tx, leader_rx) = watch::channel(true);
    let gate = Arc::new(WriteGate::new(leader_rx, Duration::from_secs(5), metrics.clone()));
    let writer = NodeStatusWriter::new(Api::all(client), gate, BatchNames::Colocate, metrics.clone());
    let (plans, plans_rx) = watch::channel(NodeBatches::new());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(writer.run(plans_rx, async move {
        let _ = stop_rx.await;
    }));

    // A decision every 50 ms for 3 s (the watch never brings the written value back): the node
    // that refuses is written at 0 s and once more after the first backoff (2 s; the next
    // would be 4 s later), the deleted one once.
    let plan =
        vec![batch("ok", Some(4000), None), batch("forbidden", Some(4000), None), batch("deleted", Some(4000), None)];
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        plans.send_replace(plan.clone());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let count = |node: &str| seen.lock().unwrap().get(node).copied().unwrap_or(0);
    assert_eq!((count("ok"), count("forbidden"), count("deleted")), (1, 2, 1));
    assert_eq!((writes(&metrics, "written"), writes(&metrics, "failed"), writes(&metrics, "not_found")), (1, 2, 1));

    // No longer leading, with a new value in hand: nothing reaches the API server.
    leader_tx.send(false).unwrap();
    plans.send_replace(vec![batch("ok", Some(3000), None)]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(count("ok"), 1);
    assert_eq!(writes(&metrics, "not_leader"), 1);
    stop_tx.send(()).unwrap();
    task.await.unwrap();
}
