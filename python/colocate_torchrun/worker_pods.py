"""A worker Deployment kept in step with the job: where the workers' room is on the cluster.

colocate counts a job's room by its worker pods (labelled ``colocate.dev/job`` and
``colocate.dev/role: worker``). With ``--worker-deployment``, the master scales that Deployment to
its target and sizes each torchrun group to the worker pods that are running, at most the
target: a worker the scheduler cannot place yet does not join the group, and a shrink gives
back the pods colocate named (``release_pods``) first. The agents themselves run as local
processes beside the master, one per running pod: the pods stand for where the agents run (on
a test bed of kwok nodes, whose pods run nothing).

:func:`leaving` decides which pods go (pure); :class:`KubernetesWorkerPods` is the API edge.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger("colocate_torchrun.pods")
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


@dataclass(frozen=True)
class WorkerPod:
    name: str
    running: bool  # bound, phase Running, not being deleted
    deleting: bool
    created: float  # seconds since the epoch


class WorkerPods(Protocol):
    def list_pods(self) -> list[WorkerPod]: ...

    def replicas(self) -> int: ...

    def scale(self, replicas: int) -> None: ...

    def prefer_to_remove(self, names: list[str]) -> None:
        """Gives these pods the lowest deletion cost, so the ReplicaSet removes them first."""


def leaving(pods: list[WorkerPod], target: int, release_pods: tuple[str, ...]) -> list[str]:
    """The pods a shrink to ``target`` removes: those colocate named, in its order, then pods
    not running (they hold no worker), then the newest (the least training behind them)."""
    present = [p for p in pods if not p.deleting]
    excess = len(present) - target
    if excess <= 0:
        return []
    by_name = {p.name: p for p in present}
    chosen = [n for n in dict.fromkeys(release_pods) if n in by_name][:excess]
    rest = sorted((p for p in present if p.name not in chosen), key=lambda p: (p.running, -p.created))
    return chosen + [p.name for p in rest[: excess - len(chosen)]]


class PodSync:
    """Each tick: the Deployment at the target, and the group size the pods allow.

    A shrink takes effect at once. A grow waits until every pod of the target runs, or until no
    new pod has started for ``settle_s``: each change of group is a restart of every worker, so
    pods arriving one by one should not restart the job once each.
    """

    def __init__(self, pods: WorkerPods, settle_s: float = 5.0) -> None:
        self.pods, self.settle_s = pods, settle_s
        self.size = 0
        self._seen, self._seen_at = 0, 0.0

    def sync(self, target: int, release_pods: tuple[str, ...], now: float) -> int:
        pods = self.pods.list_pods()
        if self.pods.replicas() != target:
            going = leaving(pods, target, release_pods)
            if going:
                self.pods.prefer_to_remove(going)
            self.pods.scale(target)
            log.info("worker deployment scaled to %d (leaving first: %s)", target, ", ".join(going) or "none")
        running = min(target, sum(p.running for p in pods))
        if running > self.size:
            if running != self._seen:
                self._seen, self._seen_at = running, now
            if running < target and now - self._seen_at < self.settle_s:
                return self.size
        self.size = running
        return running


class KubernetesWorkerPods:
    """The worker Deployment through the Kubernetes API (the ``kubernetes`` client)."""

    def __init__(self, deployment: str, namespace: str, kubeconfig: str | None) -> None:
        from kubernetes import client, config  # the master needs it only with --worker-deployment

        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig)
        else:
            config.load_incluster_config()
        self.apps, self.core = client.AppsV1Api(), client.CoreV1Api()
        self.deployment, self.namespace = deployment, namespace
        selector = self.apps.read_namespaced_deployment(deployment, namespace).spec.selector.match_labels or {}
        if not selector:
            raise ValueError(f"deployment {namespace}/{deployment} selects its pods by expressions only; give it matchLabels")
        self.selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))

    def list_pods(self) -> list[WorkerPod]:
        items: list[Any] = self.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items
        return [
            WorkerPod(
                name=p.metadata.name,
                running=bool(p.spec.node_name) and p.status.phase == "Running" and p.metadata.deletion_timestamp is None,
                deleting=p.metadata.deletion_timestamp is not None,
                created=p.metadata.creation_timestamp.timestamp(),
            )
            for p in items
        ]

    def replicas(self) -> int:
        spec = self.apps.read_namespaced_deployment_scale(self.deployment, self.namespace).spec
        return int(spec.replicas or 0) if spec is not None else 0

    def scale(self, replicas: int) -> None:
        self.apps.patch_namespaced_deployment_scale(self.deployment, self.namespace, {"spec": {"replicas": replicas}})

    def prefer_to_remove(self, names: list[str]) -> None:
        from kubernetes.client.exceptions import ApiException

        for name in names:
            body = {"metadata": {"annotations": {DELETION_COST: "-2147483648"}}}
            try:
                self.core.patch_namespaced_pod(name, self.namespace, body)
            except ApiException as e:
                if e.status != 404:  # gone already: nothing to prefer
                    raise
