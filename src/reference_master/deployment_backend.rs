//! A [`WorkerBackend`] over a worker Deployment: the reference master for jobs whose workers are
//! plain Deployment replicas (`colocate example-master`).
//!
//! - [`observe`](WorkerBackend::observe) reads the Deployment once: the target is `spec.replicas`
//!   (what its `/scale` subresource shows as `spec.replicas`), `current` is
//!   `status.readyReplicas`, `pending` is `status.replicas - status.readyReplicas`. Reading the
//!   Deployment rather than `/scale` keeps target and readiness from the same version.
//! - [`scale`](WorkerBackend::scale) sets `spec.replicas` through `/scale`. On a shrink it first
//!   marks the workers that leave (the pods named in `release_pods` that hold a node, then the
//!   ReplicaSet's own order) with the lowest pod-deletion-cost
//!   ([`kube_backend`](crate::live::kube_backend)), so the ReplicaSet controller removes them
//!   first, and clears that mark from the Deployment's other pods (left over from an earlier
//!   shrink). Once the count is down the master deletes the leaving workers itself, all at
//!   once ([`super::removal`]): the ReplicaSet prefers pods that are unscheduled, pending or not
//!   ready over any cost (a replacement of a preempted worker, say), and it removes pods through
//!   kube-controller-manager's client, which an online service's scale-up keeps busy at the very
//!   moment of a release. Where the ReplicaSet's ranking would remove the same workers, the
//!   master first waits (at most a second) for the Deployment controller to lower the
//!   ReplicaSet's count, so that its deletes do not make the ReplicaSet replace them.
//!
//! - With a release grace period ([`DeploymentBackend::with_release_grace`], `example-master
//!   --worker-release`), the workers a shrink removes are gone within it rather than the pods'
//!   own `terminationGracePeriodSeconds`: the master deletes them with it, and deletes again
//!   with it any pod the ReplicaSet removed with the pod's own (a second delete may only
//!   shorten it).
//!   This is for frameworks whose workers drain in seconds (the master says when one is done);
//!   the scheduler's preemptions still take the pods' full grace period. It needs `pods delete`.
//! - Releasing in place ([`DeploymentBackend::with_release_in_place`], `example-master
//!   --release-in-place`): before lowering the count, the workers the ReplicaSet will remove are
//!   resized down and their room freed once the kubelet reports it ([`super::in_place`]); they
//!   then exit within their grace period. It needs `pods/resize patch`.
//!
//! The deletion-cost marks and the classification of failed calls are shared with the
//! controller's Kubernetes adapters, which drive Deployments without a master process
//! ([`crate::live::kube_backend`]).
//!
//! RBAC the master's ServiceAccount needs in the Deployment's namespace:
//!
//! ```yaml
//! rules:
//! - {apiGroups: [apps], resources: [deployments], verbs: [get]}
//! - {apiGroups: [apps], resources: [deployments/scale], verbs: [get, patch]}
//! - {apiGroups: [""], resources: [pods], verbs: [list, patch, delete]}   # + get in place
//! - {apiGroups: [""], resources: [pods/resize], verbs: [patch]}   # releasing in place only
//! ```

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use super::in_place;
use super::removal;
use crate::live::kube_backend::{describe, kube_failure, list_workers, mark_among, named_in, warn_unknown};
use crate::master_protocol::{BackendError, Observed, ScaleCommand, WorkerBackend};

/// The worker count of one Deployment; see the module docs.
#[derive(Clone)]
pub struct DeploymentBackend {
    namespace: String,
    name: String,
    deployments: Api<Deployment>,
    pods: Api<Pod>,
    /// Released workers are deleted again with this grace period (seconds).
    release_grace_s: Option<u32>,
    /// Released workers give their room back by an in-place resize before they are removed.
    release_in_place: bool,
}

impl DeploymentBackend {
    /// The Deployment `namespace/name`. Nothing is read until the first call.
    pub fn new(client: Client, namespace: &str, name: &str) -> DeploymentBackend {
        DeploymentBackend {
            namespace: namespace.to_string(),
            name: name.to_string(),
            deployments: Api::namespaced(client.clone(), namespace),
            pods: Api::namespaced(client, namespace),
            release_grace_s: None,
            release_in_place: false,
        }
    }

    /// How long a released worker holds its room, for the master to announce as
    /// `worker_release_s`: the release grace period, or with releases in place, the longest wait
    /// for the kubelet, whichever is shorter. None: the pods' own grace period.
    pub fn worker_release(&self) -> Option<std::time::Duration> {
        let grace = self.release_grace_s.map(|s| std::time::Duration::from_secs(u64::from(s)));
        let in_place = self.release_in_place.then_some(in_place::ACTUATION_WAIT);
        grace.into_iter().chain(in_place).min()
    }

    /// Workers removed by a shrink are first resized down in place, so that their room frees
    /// about a second later instead of when they exit (see [`super::in_place`]).
    pub fn with_release_in_place(mut self) -> DeploymentBackend {
        self.release_in_place = true;
        self
    }

    /// Workers removed by a shrink leave within `grace` (whole seconds, rounded up) instead of
    /// their pods' termination grace period.
    pub fn with_release_grace(mut self, grace: std::time::Duration) -> DeploymentBackend {
        self.release_grace_s =
            Some(u32::try_from(grace.as_secs() + u64::from(grace.subsec_nanos() > 0)).unwrap_or(u32::MAX));
        self
    }

    /// The Deployment's `metadata.generation`, which grows on every replicas change: a restarted
    /// master seeds [`MasterConfig::initial_generation`](crate::master_protocol::MasterConfig) with it so its own
    /// generation never goes back. Also checks at start-up that the Deployment is readable.
    pub async fn generation(&self) -> Result<u64, BackendError> {
        let d = self.deployments.get(&self.name).await.map_err(|e| self.failed("reading", &e))?;
        Ok(d.metadata.generation.and_then(|g| u64::try_from(g).ok()).unwrap_or(1))
    }

    /// Before a shrink to `target` lowers the count: picks the
    /// workers that leave (the named ones holding a node first, [`removal::plan`]), resizes them
    /// down in place when releasing in place, and marks those with the lowest deletion cost, so
    /// that the ReplicaSet, should it act before the master's deletes, removes the same ones.
    /// Returns the workers for the master to delete once the count is down ([`Self::release`]),
    /// and whether the ReplicaSet would remove the same ones ([`removal::replica_set_agrees`]).
    ///
    /// Which ones leave is decided on the workers as they are just before the count goes down,
    /// and as many as the ReplicaSet then counts beyond the target ([`removal::excess`]): the
    /// scheduler preempts workers while a shrink is prepared (an HPA's new pods and colocate's
    /// command come together). A victim leaves in a shrink's stead; its replacement, created a
    /// moment later, waits for a node. On the test bed's WorldCup98 spike, replacements created
    /// 0.1 s after the master's list take a named worker's place; and naming `spec.replicas`
    /// less the target (rather than what the ReplicaSet counts beyond it) names 28 where the
    /// ReplicaSet removes 24, and a spared named worker is preempted 15 s later.
    ///
    /// Releasing in place, every resized worker still counted leaves, even beyond that count: a
    /// replacement on full CPU is better than a worker left training on 1m. And once a worker is
    /// resized the shrink goes on whatever fails (a failed mark is logged, the master deletes
    /// them anyway).
    async fn prepare_shrink(
        &self,
        owner: &str,
        selector: &str,
        release_pods: &[String],
        target: u32,
    ) -> Result<Shrink, BackendError> {
        let named = named_in(&self.namespace, owner, release_pods);
        let workers = list_workers(&self.pods, owner, selector).await?;
        warn_unknown(owner, &named, &workers);
        let excess = removal::excess(&workers, target);
        let (workers, leaving): (Vec<Pod>, BTreeSet<String>) = if self.release_in_place {
            self.resize_leaving(owner, selector, &named, workers, excess).await
        } else {
            let leaving = removal::plan(&workers, &named, excess);
            let leaving = leaving.iter().filter_map(|p| p.metadata.name.clone()).collect();
            (workers, leaving)
        };
        let leaving_names: BTreeSet<&str> = leaving.iter().map(String::as_str).collect();
        let marked = mark_among(&self.pods, &self.namespace, owner, &leaving_names, &workers).await;
        match marked {
            Err(e) if self.release_in_place => {
                tracing::warn!(%owner, error = %e, "marking the resized workers; the master deletes them itself")
            }
            other => other?,
        }
        let now = match list_workers(&self.pods, owner, selector).await {
            Ok(now) => now,
            Err(e) => {
                tracing::warn!(%owner, error = %e, "listing the workers again before the count goes down; planning on the earlier list");
                workers
            }
        };
        let excess_now = removal::excess(&now, target);
        let mut delete: BTreeSet<String> =
            removal::plan(&now, &leaving_names, excess_now).iter().filter_map(|p| p.metadata.name.clone()).collect();
        if self.release_in_place {
            let released_still_counted =
                now.iter().filter(|p| removal::counted(p)).filter_map(|p| p.metadata.name.as_deref());
            delete.extend(released_still_counted.filter(|n| leaving_names.contains(n)).map(String::from));
        }
        let delete_names: BTreeSet<&str> = delete.iter().map(String::as_str).collect();
        let replica_set_agrees = removal::replica_set_agrees(&now, &delete_names, excess_now);
        Ok(Shrink { delete: delete.into_iter().collect(), replica_set_agrees })
    }

    /// Waits, at most [`REPLICA_SET_WAIT`], until the Deployment controller has acted on the
    /// newest `spec.replicas` (`status.observedGeneration`; it sets the ReplicaSet's count
    /// before it writes that status). Deleted before, a released worker is replaced by the
    /// ReplicaSet, still at the old count, and the replacement may bind in the very room the
    /// release freed: on a cluster at rest the test bed's Deployment controller lowers the
    /// count 13 ms after the master's deletes in 3 of 8 runs, and in about one run in 6-7 the
    /// replacement takes an online pod's room.
    async fn await_replica_set(&self, owner: &str) {
        let started = tokio::time::Instant::now();
        loop {
            match self.deployments.get(&self.name).await {
                Ok(d) => {
                    let generation = d.metadata.generation;
                    let observed = d.status.and_then(|s| s.observed_generation);
                    if generation.is_some() && observed >= generation {
                        tracing::info!(%owner, waited_ms = started.elapsed().as_millis(), "the Deployment controller lowered the ReplicaSet's count; deleting the released workers");
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!(%owner, error = %describe(&e), "reading the deployment after its count went down; deleting the released workers now");
                    return;
                }
            }
            if started.elapsed() >= REPLICA_SET_WAIT {
                tracing::info!(%owner, wait = ?REPLICA_SET_WAIT, "the Deployment controller has not lowered the ReplicaSet's count; deleting the released workers now");
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Deletes the workers a shrink removes, all at once and with the release grace period when
    /// there is one, right after the count went down: their room frees a fixed time after the
    /// command (a grace period after it), not when the ReplicaSet gets round to them, and none
    /// is left running for the ReplicaSet to spare. Failures are logged: without `pods delete`
    /// the ReplicaSet's choice stands (the count is down), and colocate's deadline backs the
    /// room it asked for.
    async fn release(&self, owner: &str, leaving: &[String]) {
        let params = kube::api::DeleteParams { grace_period_seconds: self.release_grace_s, ..Default::default() };
        let params = &params;
        let deletes = leaving.iter().map(|name| async move {
            match self.pods.delete(name, params).await {
                Ok(_) => tracing::info!(pod = %name, %owner, "released worker deleted by the master"),
                Err(kube::Error::Api(s)) if s.is_not_found() => {}
                Err(e) => {
                    tracing::warn!(pod = %name, %owner, error = %describe(&e), "could not delete a released worker; the ReplicaSet picks which workers leave")
                }
            }
        });
        futures::future::join_all(deletes).await;
    }

    /// Releasing in place: resizes the workers a shrink by `excess` removes
    /// ([`removal::in_place_leaving`]) and returns the workers as they are once the kubelet has
    /// reported it, with the names of those that leave. A worker the scheduler preempts while
    /// its resize waits is never resized and is no longer counted by the ReplicaSet, so the
    /// lowered count would remove another worker in its stead: by the ReplicaSet's ranking,
    /// often the preempted worker's own replacement, just bound in the room the other resizes
    /// freed, which then holds that room for its whole grace period. On the live flash crowd,
    /// two such replacements at each of two HPA steps keep 4 CPU for 30 s while online pods
    /// preempt more workers. So the workers are listed again after each round, and
    /// where a resized one is no longer counted the substitutes are resized too: two rounds at
    /// most, both within one [`in_place::ACTUATION_WAIT`] (what the master announces). Never
    /// fails: after any resize the shrink must go on, or the resized workers would train on no
    /// CPU; a failed list leaves the plan to the last good one.
    async fn resize_leaving(
        &self,
        owner: &str,
        selector: &str,
        named: &BTreeSet<&str>,
        mut workers: Vec<Pod>,
        excess: usize,
    ) -> (Vec<Pod>, BTreeSet<String>) {
        let deadline = tokio::time::Instant::now() + in_place::ACTUATION_WAIT;
        let mut resized: BTreeSet<String> = BTreeSet::new();
        for _round in 0..2 {
            let leaving = removal::in_place_leaving(&workers, named, &resized, excess);
            let substitutes: Vec<&Pod> = workers
                .iter()
                .filter(|p| p.metadata.name.as_deref().is_some_and(|n| leaving.contains(n) && !resized.contains(n)))
                .collect();
            if substitutes.is_empty() {
                break;
            }
            resized.extend(substitutes.iter().filter_map(|p| p.metadata.name.clone()));
            in_place::release(&self.pods, owner, &substitutes, deadline).await;
            match list_workers(&self.pods, owner, selector).await {
                Ok(now) => workers = now,
                Err(e) => {
                    tracing::warn!(%owner, error = %e, "listing the workers after their resizes; planning on the earlier list");
                    break;
                }
            }
            let counted =
                |n: &String| workers.iter().any(|p| p.metadata.name.as_ref() == Some(n) && removal::counted(p));
            if resized.iter().all(counted) {
                break;
            }
        }
        let leaving = removal::in_place_leaving(&workers, named, &resized, excess);
        let leaving = leaving.into_iter().map(String::from).collect();
        (workers, leaving)
    }

    fn failed(&self, action: &str, e: &kube::Error) -> BackendError {
        kube_failure(format!("{action} deployment {}/{}", self.namespace, self.name), e)
    }
}

impl WorkerBackend for DeploymentBackend {
    async fn observe(&self) -> Result<Observed, BackendError> {
        let d = self.deployments.get(&self.name).await.map_err(|e| self.failed("reading", &e))?;
        let count = |n: Option<i32>| n.and_then(|n| u32::try_from(n).ok()).unwrap_or(0);
        let status = d.status.unwrap_or_default();
        let ready = count(status.ready_replicas);
        Ok(Observed {
            // The API server defaults spec.replicas to 1; absent only in a hand-made object.
            target: d.spec.map_or(1, |s| count(s.replicas)),
            current: ready,
            pending: count(status.replicas).saturating_sub(ready),
            ..Observed::default()
        })
    }

    async fn scale(&self, command: &ScaleCommand) -> Result<(), BackendError> {
        let scale = self.deployments.get_scale(&self.name).await.map_err(|e| self.failed("reading /scale of", &e))?;
        let replicas = scale.spec.and_then(|s| s.replicas).unwrap_or(0);
        // On a shrink: who owns the workers and how to find them, for the marks and the release.
        let mut shrink = None;
        if i64::from(command.target) < i64::from(replicas) {
            let Some(selector) = scale.status.and_then(|s| s.selector).filter(|s| !s.is_empty()) else {
                return Err(BackendError::new(format!(
                    "deployment {}/{}: /scale reports no selector; cannot find its pods",
                    self.namespace, self.name
                )));
            };
            let owner = format!("deployment {}/{}", self.namespace, self.name);
            let leaving = self.prepare_shrink(&owner, &selector, &command.release_pods, command.target).await?;
            shrink = Some((owner, selector, leaving));
        }
        let patch = json!({"spec": {"replicas": command.target}});
        self.deployments
            .patch_scale(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| self.failed(&format!("setting replicas to {} on", command.target), &e))?;
        if let Some((owner, selector, leaving)) = shrink {
            // Where the ReplicaSet would remove others first (a replacement waiting for a node,
            // a worker not ready yet), the master deletes at once: waiting, the ReplicaSet would
            // remove those and the deletes then take the job below its target.
            if leaving.replica_set_agrees {
                self.await_replica_set(&owner).await;
            }
            self.release(&owner, &leaving.delete).await;
            // The ReplicaSet may still remove a pod of its own choosing, with the pod's grace.
            if let Some(grace) = self.release_grace_s {
                tokio::spawn(shorten_releases(self.pods.clone(), owner, selector, grace));
            }
        }
        Ok(())
    }
}

/// The workers a shrink removes ([`DeploymentBackend::prepare_shrink`]).
struct Shrink {
    /// For the master to delete once the count is down.
    delete: Vec<String>,
    /// The ReplicaSet's own ranking removes the same ones.
    replica_set_agrees: bool,
}

/// The longest the master waits for the Deployment controller to lower the ReplicaSet's count
/// before it deletes released workers that the ReplicaSet would remove too. At rest it takes
/// milliseconds; with kube-controller-manager's client busy (an online service's scale-up) it
/// may take seconds, and the release must not wait on it that long.
const REPLICA_SET_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// How long after a shrink the backend looks for the pods the ReplicaSet deleted.
const RELEASE_WATCH: std::time::Duration = std::time::Duration::from_secs(10);

/// Deletes again, with `grace` seconds, every pod of `selector` that is being deleted with a
/// longer grace period, for `RELEASE_WATCH` after a shrink (the ReplicaSet deletes them shortly
/// after the replicas change). Failures are logged: the workers then leave at their own pace.
async fn shorten_releases(pods: Api<Pod>, owner: String, selector: String, grace: u32) {
    let started = tokio::time::Instant::now();
    let mut shortened = BTreeSet::new();
    while started.elapsed() < RELEASE_WATCH {
        match pods.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => {
                for pod in list.items {
                    let Some(name) = pod.metadata.name.clone() else { continue };
                    let longer = pod.metadata.deletion_grace_period_seconds.is_some_and(|g| g > i64::from(grace));
                    if pod.metadata.deletion_timestamp.is_none() || !longer || shortened.contains(&name) {
                        continue;
                    }
                    let params = kube::api::DeleteParams { grace_period_seconds: Some(grace), ..Default::default() };
                    match pods.delete(&name, &params).await {
                        Ok(_) => {
                            tracing::info!(pod = %name, %owner, grace_s = grace, "released worker deleted with its release grace period");
                            shortened.insert(name);
                        }
                        Err(kube::Error::Api(s)) if s.is_not_found() => {}
                        Err(e) => {
                            tracing::warn!(pod = %name, %owner, error = %describe(&e), "could not shorten a released worker's grace period")
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(%owner, error = %describe(&e), "listing released workers"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
