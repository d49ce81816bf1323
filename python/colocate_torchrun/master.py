"""The master: the protocol's ledger, the coordinator and the job's files behind one lock.

The HTTP layer calls :meth:`Master.status`, :meth:`Master.scale` and :meth:`Master.checkpoint`;
a thread calls :meth:`Master.tick`. Everything the status reports about the training itself
(progress, throughput, the last checkpoint) comes from rank 0's ``status.json``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .coordinator import Coordinator, Rescale
from .job_files import CHECKPOINT_REQUEST, RESCALES, read_status, write_atomically
from .ledger import Accepted, Ledger, RememberedIds, ScaleCommand, check_command_id
from .worker_pods import PodSync

log = logging.getLogger("colocate_torchrun.master")


@dataclass(frozen=True)
class WorkerResources:
    cpu: str
    memory: str


class Master:
    def __init__(
        self, job: str, ledger: Ledger, coordinator: Coordinator, workdir: Path, resources: WorkerResources,
        token: str | None = None, clock: Callable[[], float] = time.time, pod_sync: PodSync | None = None,
    ) -> None:  # fmt: skip
        if not job:
            raise ValueError("the job name is empty")
        if token is not None and not token:
            raise ValueError("the bearer token is empty (leave it unset to serve without one)")
        self.job, self.ledger, self.coordinator, self.workdir = job, ledger, coordinator, workdir
        self.resources, self.token, self.clock, self.pod_sync = resources, token, clock, pod_sync
        self._release_pods: tuple[str, ...] = ()
        self._lock = threading.Lock()
        self._checkpoint_requests = 0
        self._checkpoint_ids: RememberedIds[int] = RememberedIds()
        coordinator.on_rescale = self._record_rescale

    def tick(self) -> None:
        with self._lock:
            now = self.clock()
            if self.pod_sync is not None:
                try:
                    self.coordinator.target = self.pod_sync.sync(self.ledger.target, self._release_pods, now)
                except Exception as e:  # the API server may be away for a while: keep the group as it is
                    log.warning("worker deployment not synced: %s", e)
            self.coordinator.tick(now)

    def scale(self, command: ScaleCommand) -> Accepted:
        with self._lock:
            answer = self.ledger.scale(command)
            if answer.changed:
                self._release_pods = command.release_pods
                if self.pod_sync is None:  # else the next tick sizes the group to the running pods
                    self.coordinator.target = answer.accepted_target
            return answer

    def checkpoint(self, command_id: str) -> dict[str, object]:
        """v1.2 ``POST /v1/checkpoint``: rank 0 checkpoints after its current step. Idempotent by id."""
        check_command_id(command_id)
        with self._lock:
            first = self._checkpoint_ids.get(command_id)
            if first is not None:
                return {"requested": first}
            self._checkpoint_requests += 1
            self._checkpoint_ids.remember(command_id, self._checkpoint_requests)
            write_atomically(self.workdir / CHECKPOINT_REQUEST, f"{self._checkpoint_requests}\n")
            return {"requested": self._checkpoint_requests}

    def status(self) -> dict[str, object]:
        with self._lock:
            view = self.coordinator.view()
            ledger = self.ledger
            phase = view["phase"]
            if phase == "Running" and view["current"] != ledger.target:
                phase = "Rescaling"  # workers the pods do not allow yet, or leaving
            body: dict[str, object] = {
                "job": self.job,
                "generation": ledger.generation,
                "phase": phase,
                "workers": {
                    "current": view["current"], "target": ledger.target, "min": ledger.minimum, "max": ledger.maximum,
                    "pending": view["pending"],
                },
                "worker_resources": {"cpu": self.resources.cpu, "memory": self.resources.memory},
            }  # fmt: skip
        for key in ("rescale_cost_s", "worker_release_s"):
            if view[key] is not None:
                body[key] = round(float(view[key]), 3)  # type: ignore[arg-type]
        training = read_status(self.workdir)
        if training is not None:
            body["progress"] = {"done": training.get("samples", 0), "total": training.get("total_samples", 0)}
            if phase == "Running" and training.get("samples_per_s"):
                body["throughput"] = {"samples_per_s": training["samples_per_s"]}
            body["checkpoint"] = {
                "step": training.get("checkpoint_step", 0),
                "age_s": round(max(0.0, self.clock() - float(training.get("checkpoint_at", 0.0))), 3),
                "on_demand": True,
            }
        else:
            body["checkpoint"] = {"on_demand": True}
        return body

    def _record_rescale(self, rescale: Rescale) -> None:
        with open(self.workdir / RESCALES, "a") as f:
            f.write(json.dumps(rescale.as_record()) + "\n")
