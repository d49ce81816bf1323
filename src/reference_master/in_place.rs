//! Giving a released worker's room back before it exits: an in-place resize (`/resize`,
//! KEP-1287, on by default since Kubernetes 1.33) lowers its requests to [`RELEASED_CPU`] and
//! [`RELEASED_MEMORY`], and kube-scheduler frees the difference once the kubelet reports it
//! (it counts the larger of spec and reported requests). The worker then drains and exits at
//! its own pace, within its grace period, while online pods already use its node.
//!
//! The order matters: the kubelet actuates resizes of running pods only, so the master resizes
//! the workers it is about to remove, waits (at most [`ACTUATION_WAIT`]) until their statuses
//! report the new requests, and only then lowers the count. The workers to remove are those of
//! [`super::removal::plan`], marked with the lowest deletion cost and deleted by the master once
//! the count is down, every one still counted: a resized worker left running would train on
//! almost no CPU.
//!
//! What it trades: a released worker drains with the CPU of [`RELEASED_CPU`], so a checkpoint it
//! writes on its way out is slow (elastic data-parallel workers hold no state of their own, and
//! the master releases them only after the job has let them go). It needs workers in the
//! Burstable QoS class (a resize may not change the class: a Guaranteed worker is refused, and
//! leaves with its grace period, as without release in place) and `pods/resize patch` in RBAC.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};

use crate::core::resources::{parse_cpu, parse_memory};

/// The CPU request a released worker keeps while it drains: the least Kubernetes allows, so that
/// what it still holds never keeps an online pod off a node whose room was otherwise exact.
pub const RELEASED_CPU: &str = "1m";
/// The memory request a released worker keeps while it drains (its limit, if any, stays; the
/// kubelet evicts a pod using more than it requests first under memory pressure, which suits a
/// worker on its way out).
pub const RELEASED_MEMORY: &str = "1Mi";
/// Longest wait for the kubelet to report a resize before the count is lowered anyway.
pub const ACTUATION_WAIT: Duration = Duration::from_secs(3);

pub(super) fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref().and_then(|s| s.phase.as_deref())
}

pub(super) fn ready(p: &Pod) -> bool {
    let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.into_iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The `/resize` patch that lowers each container's CPU and memory requests to the released
/// amounts (never raising one already below them). None when nothing would change.
pub fn release_patch(pod: &Pod) -> Option<Value> {
    let released_cpu = parse_cpu(RELEASED_CPU).ok()?;
    let released_memory = parse_memory(RELEASED_MEMORY).ok()?;
    let mut containers = Vec::new();
    for c in pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default() {
        let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        let request = |name: &str| requests.and_then(|r| r.get(name)).map(|q| q.0.as_str());
        let mut lower = serde_json::Map::new();
        if request("cpu").and_then(|q| parse_cpu(q).ok()).is_some_and(|v| v > released_cpu) {
            lower.insert("cpu".into(), json!(RELEASED_CPU));
        }
        if request("memory").and_then(|q| parse_memory(q).ok()).is_some_and(|v| v > released_memory) {
            lower.insert("memory".into(), json!(RELEASED_MEMORY));
        }
        if !lower.is_empty() {
            containers.push(json!({"name": c.name, "resources": {"requests": lower}}));
        }
    }
    (!containers.is_empty()).then(|| json!({"spec": {"containers": containers}}))
}

/// Whether the pod's statuses report every container at or below the requests its spec now
/// asks for: the kubelet has actuated the resize, and the scheduler counts the lower value.
pub fn actuated(pod: &Pod) -> bool {
    let Some(statuses) = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref()) else { return false };
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
    containers.iter().all(|c| {
        let spec = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        let status = statuses.iter().find(|s| s.name == c.name).and_then(|s| s.resources.as_ref());
        let reported = status.and_then(|r| r.requests.as_ref());
        ["cpu", "memory"].iter().all(|name| {
            let parse = |q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| match *name {
                "cpu" => parse_cpu(&q.0).ok(),
                _ => parse_memory(&q.0).ok(),
            };
            let want = spec.and_then(|r| r.get(*name)).and_then(parse);
            let have = reported.and_then(|r| r.get(*name)).and_then(parse);
            match (want, have) {
                (Some(w), Some(h)) => h <= w,
                (None, _) => true,
                (Some(_), None) => false,
            }
        })
    })
}

/// Resizes the bound, running `workers` down to the released requests and waits, until
/// `deadline` at most, until their statuses report it. Best effort: a worker the API server
/// refuses to resize (Guaranteed QoS, no RBAC, a node without resize support) or that is not
/// actuated in time is logged and leaves with its grace period as without this. A worker
/// deleted meanwhile (the scheduler preempts workers while their resizes wait) is never resized
/// (the kubelet resizes no pod it is terminating): the wait for it ends there, and the caller,
/// listing the workers again, finds it no longer counted.
pub async fn release(pods: &Api<Pod>, owner: &str, workers: &[&Pod], deadline: tokio::time::Instant) {
    let started = tokio::time::Instant::now();
    let mut waiting = Vec::new();
    for pod in workers {
        let Some(name) = pod.metadata.name.clone() else { continue };
        let running = phase(pod) == Some("Running") && pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
        let Some(patch) = release_patch(pod).filter(|_| running) else { continue };
        match pods.patch_subresource("resize", &name, &PatchParams::default(), &Patch::Strategic(&patch)).await {
            Ok(_) => waiting.push(name),
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => tracing::warn!(pod = %name, %owner, error = %crate::live::error_chain(&e),
                "could not resize a released worker in place; it keeps its room until it exits"),
        }
    }
    let (mut reported, mut deleted) = (Vec::new(), Vec::new());
    while !waiting.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut still = Vec::new();
        for name in waiting {
            match pods.get_opt(&name).await {
                Ok(Some(p)) if p.metadata.deletion_timestamp.is_some() => deleted.push(name),
                Ok(None) => deleted.push(name),
                Ok(Some(p)) if actuated(&p) => reported.push(name),
                Ok(Some(_)) => still.push(name),
                Err(e) => {
                    tracing::warn!(pod = %name, %owner, error = %crate::live::error_chain(&e), "reading a resized worker");
                    still.push(name);
                }
            }
        }
        waiting = still;
    }
    // Names, so that a run's log says which workers' room came back early, which were deleted
    // before the kubelet resized them (their room frees when they are gone), and which it had
    // not reported by the deadline (their room frees when it does).
    tracing::info!(%owner, pods = ?reported, reported_in_s = started.elapsed().as_secs_f64(), "released workers resized in place");
    if !deleted.is_empty() {
        tracing::info!(pods = ?deleted, %owner, "deleted before the kubelet resized them: they keep their room for their grace period");
    }
    if !waiting.is_empty() {
        tracing::warn!(pods = ?waiting, %owner, wait_s = ACTUATION_WAIT.as_secs(),
            "the kubelet did not report these resizes in time; their room frees when it does");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: Option<&str>, phase: &str, ready: bool, created: &str, cpu: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .unwrap()
    }

    #[test]
    fn the_patch_lowers_requests_and_actuation_is_read_from_the_status() {
        let mut p = pod("w", Some("n1"), "Running", true, "2026-01-01T00:00:00Z", "2");
        let patch = release_patch(&p).expect("a patch");
        assert_eq!(
            patch,
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}]}})
        );
        assert_eq!(
            release_patch(&pod("w", None, "Running", true, "2026-01-01T00:00:00Z", "1m")).unwrap(),
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"memory": "1Mi"}}}]}}),
            "a request already below the released one is not raised"
        );
        assert!(!actuated(&p), "no container status yet");
        let status = |cpu: &str| {
            json!([{"name": "c", "image": "x", "imageID": "", "ready": true, "restartCount": 0,
            "resources": {"requests": {"cpu": cpu, "memory": "1Mi"}}}])
        };
        p.spec.as_mut().unwrap().containers[0].resources =
            serde_json::from_value(json!({"requests": {"cpu": "1m", "memory": "1Mi"}})).unwrap();
        p.status.as_mut().unwrap().container_statuses = serde_json::from_value(status("2")).unwrap();
        assert!(!actuated(&p), "the status still reports 2 CPUs");
        p.status.as_mut().unwrap().container_statuses = serde_json::from_value(status("0.001")).unwrap();
        assert!(actuated(&p), "0.001 is 1m");
    }
}
