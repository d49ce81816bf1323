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
from .ledger import Accepted, Ledger, ScaleCommand, ScaleRefused
from .worker_pods import PodSync

STATUS_FILE = "status.json"
CHECKPOINT_REQUEST_FILE = "checkpoint-request"
RESCALES_FILE = "rescales.jsonl"
log = logging.getLogger("colocate_torchrun.master")


@dataclass(frozen=True)
class WorkerResources:
    cpu: str
    memory: str


def read_status_file(workdir: Path) -> dict[str, object] | None:
    """Rank 0's last status, or None before the first one (it is replaced whole, never torn)."""
    try:
        value = json.loads((workdir / STATUS_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


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
        self._checkpoint_ids: dict[str, int] = {}
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
        if not 1 <= len(command_id.encode()) <= 256:
            raise ScaleRefused(400, "command_id: must be 1 to 256 bytes", field="command_id")
        with self._lock:
            if command_id not in self._checkpoint_ids:
                self._checkpoint_requests += 1
                self._checkpoint_ids[command_id] = self._checkpoint_requests
                if len(self._checkpoint_ids) > 1024:
                    self._checkpoint_ids.pop(next(iter(self._checkpoint_ids)))
                tmp = self.workdir / (CHECKPOINT_REQUEST_FILE + ".tmp")
                tmp.write_text(f"{self._checkpoint_requests}\n")
                tmp.replace(self.workdir / CHECKPOINT_REQUEST_FILE)
            return {"requested": self._checkpoint_ids[command_id]}

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
        training = read_status_file(self.workdir)
        if training is not None:
            body["progress"] = {"done": training.get("samples", 0), "total": training.get("total_samples", 0)}
            if phase == "Running" and training.get("samples_per_s"):
                body["throughput"] = {"samples_per_s": training["samples_per_s"]}
            body["checkpoint"] = {
                "step": training.get("checkpoint_step", 0),
                "age_s": round(max(0.0, self.clock() - float(training.get("checkpoint_at", 0.0))), 3),  # type: ignore[arg-type]
                "on_demand": True,
            }
        else:
            body["checkpoint"] = {"on_demand": True}
        return body

    def _record_rescale(self, rescale: Rescale) -> None:
        with open(self.workdir / RESCALES_FILE, "a") as f:
            f.write(json.dumps(rescale.as_record()) + "\n")
