"""Where the torchrun agents run: the coordinator's only I/O besides the job's files.

A *group* is one torchrun rendezvous of ``size`` agents (``--nnodes=size:size``, one process per
agent): torchrun restarts every worker on any membership change anyway, so the coordinator makes
each change a new group it controls (checkpoint, stop, start) instead of letting agents join or
leave a running one.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

PACKAGE_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class GroupSpec:
    """What every agent of one group runs."""

    job: str
    group: int  # the rendezvous id's suffix: one per group, never reused
    size: int
    train_args: tuple[str, ...]  # after ``-m colocate_torchrun.train``


class Agents(Protocol):
    """Starts, stops and watches the agents of one group at a time."""

    def start(self, spec: GroupSpec) -> None: ...

    def request_stop(self) -> None:
        """Asks the group's workers to checkpoint and exit at their next step."""

    def kill(self, count: int) -> None:
        """Kills ``count`` agents with their workers at once, as a preemption does."""

    def exit_codes(self) -> list[int | None]:
        """One entry per agent of the group: None while it runs."""

    def kill_all(self) -> None: ...


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LocalAgents:
    """Each agent is a local ``python -m torch.distributed.run`` in its own process group, so a
    kill takes its worker with it, as deleting a pod would."""

    workdir: Path
    python: str = sys.executable
    log_dir: Path | None = None
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _stop_file: Path | None = None

    def start(self, spec: GroupSpec) -> None:
        if any(p.poll() is None for p in self._procs):
            raise RuntimeError("a group is still running; stop it before starting another")
        self._stop_file = self.workdir / f"stop-{spec.group}"
        self._stop_file.unlink(missing_ok=True)
        port = free_port()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")])))
        env.setdefault("OMP_NUM_THREADS", "1")
        cmd = [
            self.python, "-m", "torch.distributed.run",
            f"--nnodes={spec.size}:{spec.size}", "--nproc-per-node=1",
            "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={spec.job}-{spec.group}",
            "--max-restarts=0", "--monitor-interval=0.2",
            "-m", "colocate_torchrun.train", *spec.train_args,
            "--generation", str(spec.group), "--stop-file", str(self._stop_file),
        ]  # fmt: skip
        logs = self.log_dir or self.workdir
        self._procs = []
        for i in range(spec.size):
            with open(logs / f"agent-{spec.group}-{i}.log", "wb") as log:
                self._procs.append(
                    subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                )

    def request_stop(self) -> None:
        if self._stop_file is not None:
            self._stop_file.touch()

    def kill(self, count: int) -> None:
        alive = [p for p in self._procs if p.poll() is None]
        for p in alive[len(alive) - count :]:
            _kill_group(p)

    def exit_codes(self) -> list[int | None]:
        return [p.poll() for p in self._procs]

    def kill_all(self) -> None:
        for p in self._procs:
            _kill_group(p)
        for p in self._procs:
            p.wait()


def _kill_group(p: subprocess.Popen[bytes]) -> None:
    """Kills the agent and every process under it. torchrun starts each worker in a session of
    its own, so killing the agent's process group would leave the worker training on."""
    pids = [p.pid, *_descendants(p.pid)]  # listed first: once the agent dies they are reparented
    for pid in pids:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # the command name, in parentheses, may hold spaces: the parent pid follows its ")"
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
