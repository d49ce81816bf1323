//! What the worker backends over Kubernetes objects share: the reference master's Deployment
//! backend and the controller's adapters, which drive a job's object without a master process.
//!
//! - [`kube_failure`]: a failed Kubernetes call as a [`BackendError`] of the kind a retry can
//!   cure.
//! - [`mark_released`]: the workers a shrink releases marked with a low pod-deletion-cost, so
//!   that the ReplicaSet controller removes them first.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};

use crate::master_protocol::{BackendError, BackendErrorKind};

/// The annotation the ReplicaSet controller reads to pick which pods to remove on a scale-down
/// (lowest first; absent means 0).
pub const DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

/// The cost given to released workers: below the default 0 of every unmarked worker.
pub const RELEASE_DELETION_COST: &str = "-1000";

/// Marks exactly the named pods among `owner`'s (those in `namespace` matching `selector`) with
/// [`DELETION_COST_ANNOTATION`] = [`RELEASE_DELETION_COST`], so that the ReplicaSet controller
/// removes them first, and clears that mark from the others (left over from an earlier shrink
/// that removed fewer pods than were named). Names may be `pod` or `namespace/pod`; others are
/// skipped with a warning. `owner` names the workload in messages (`deployment ml/wd`).
pub async fn mark_released(
    pods: &Api<Pod>,
    namespace: &str,
    owner: &str,
    release_pods: &[String],
    selector: &str,
) -> Result<(), BackendError> {
    let named = named_in(namespace, owner, release_pods);
    let workers = list_workers(pods, owner, selector).await?;
    warn_unknown(owner, &named, &workers);
    mark_among(pods, namespace, owner, &named, &workers).await
}

/// Warns of each named pod that is not among the workload's workers: it is skipped.
pub(crate) fn warn_unknown(owner: &str, named: &BTreeSet<&str>, workers: &[Pod]) {
    let known: BTreeSet<&str> = workers.iter().filter_map(|p| p.metadata.name.as_deref()).collect();
    for missing in named.difference(&known) {
        tracing::warn!(pod = %missing, %owner, "release_pods: no such pod among the workload's workers; skipped");
    }
}

/// The pod names of `release_pods` (`pod` or `namespace/pod`) in `namespace`; the others are
/// skipped with a warning.
pub(crate) fn named_in<'a>(namespace: &str, owner: &str, release_pods: &'a [String]) -> BTreeSet<&'a str> {
    let mut named = BTreeSet::new();
    for pod in release_pods {
        let (pod_namespace, name) = pod.split_once('/').unwrap_or((namespace, pod));
        if pod_namespace == namespace {
            named.insert(name);
        } else {
            tracing::warn!(pod = %pod, %owner, "release_pods: not in the workload's namespace; skipped");
        }
    }
    named
}

pub(crate) async fn list_workers(pods: &Api<Pod>, owner: &str, selector: &str) -> Result<Vec<Pod>, BackendError> {
    let list = pods
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| kube_failure(format!("listing pods ({selector}) of {owner}"), &e))?;
    Ok(list.items)
}

/// Marks exactly the `named` pods among `workers` and clears the mark from the others.
pub(crate) async fn mark_among(
    pods: &Api<Pod>,
    namespace: &str,
    owner: &str,
    named: &BTreeSet<&str>,
    workers: &[Pod],
) -> Result<(), BackendError> {
    // A worker being deleted is past the ReplicaSet's choice: its mark no longer matters, and
    // clearing it would cost a call per worker leaving (ten at a flash crowd's step, before the
    // count can go down). All at once: one after another, 28 marks take 0.3 s of WorldCup98's
    // 55 s step on the test bed, while the online pods' preemptions are under way.
    let changes = workers.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).filter_map(|pod| {
        let name = pod.metadata.name.as_deref()?;
        let cost = pod.metadata.annotations.as_ref().and_then(|a| a.get(DELETION_COST_ANNOTATION));
        let marked = cost.map(String::as_str) == Some(RELEASE_DELETION_COST);
        let wanted = named.contains(name);
        (wanted != marked).then(|| set_mark(pods, namespace, owner, name, wanted))
    });
    futures::future::join_all(changes).await.into_iter().collect()
}

async fn set_mark(pods: &Api<Pod>, namespace: &str, owner: &str, pod: &str, mark: bool) -> Result<(), BackendError> {
    let value = if mark { Value::from(RELEASE_DELETION_COST) } else { Value::Null };
    let patch = json!({"metadata": {"annotations": {DELETION_COST_ANNOTATION: value}}});
    match pods.patch(pod, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => {
            tracing::info!(pod, namespace, released = mark, "pod deletion cost set");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.is_not_found() => {
            tracing::warn!(pod, namespace, "pod gone before it could be marked; skipped");
            Ok(())
        }
        Err(e) => Err(kube_failure(format!("annotating pod {namespace}/{pod} for {owner}"), &e)),
    }
}

/// A failed Kubernetes call as a [`BackendError`]: `context` (what was being done), the API
/// server's message and code (or the error with its causes), and the kind a retry can cure.
pub fn kube_failure(context: impl std::fmt::Display, e: &kube::Error) -> BackendError {
    let (kind, status) = classify(e);
    BackendError::new(format!("{context}: {}", describe(e))).with_kind(kind, status)
}

fn classify(e: &kube::Error) -> (BackendErrorKind, Option<u16>) {
    match e {
        kube::Error::Api(s) => {
            let kind = match s.code {
                401 | 403 => BackendErrorKind::Forbidden,
                408 | 429 => BackendErrorKind::Unavailable,
                c if c >= 500 => BackendErrorKind::Unavailable,
                c if c >= 400 => BackendErrorKind::Rejected,
                _ => BackendErrorKind::Unavailable,
            };
            (kind, Some(s.code))
        }
        // hyper-util reports a failed connection as "client error (Connect)"; the error type
        // itself is not reachable through kube's boxed service error.
        kube::Error::Service(_) | kube::Error::HyperError(_) if super::error_chain(e).contains("(Connect)") => {
            (BackendErrorKind::Unreachable, None)
        }
        _ => (BackendErrorKind::Unavailable, None),
    }
}

/// The API server's message and code, or the error with its causes.
pub(crate) fn describe(e: &kube::Error) -> String {
    if let kube::Error::Api(s) = e {
        return format!("{} ({} {})", s.message, s.code, s.reason);
    }
    super::error_chain(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status::failure("no", "Reason").with_code(code)))
    }

    #[test]
    fn kube_failures_are_classified_for_retries() {
        let kind = |code| {
            let e = kube_failure("patching x", &api_error(code));
            (e.kind, e.status)
        };
        assert_eq!(kind(403), (BackendErrorKind::Forbidden, Some(403)));
        assert_eq!(kind(422), (BackendErrorKind::Rejected, Some(422)));
        assert_eq!(kind(404), (BackendErrorKind::Rejected, Some(404)));
        assert_eq!(kind(429), (BackendErrorKind::Unavailable, Some(429)));
        assert_eq!(kind(503), (BackendErrorKind::Unavailable, Some(503)));
        assert_eq!(kube_failure("patching x", &api_error(422)).message, "patching x: no (422 Reason)");
    }
}
