"""The master's control loop: one torchrun group per worker count, changed at step boundaries.

``tick()`` is called a few times a second. It reads the job's status (rank 0's ``status.json``)
and the agents' exit codes, and moves the group toward the target:

- no group: start one of ``target`` agents (the workers resume from the last checkpoint);
- a group of the wrong size: ask it to stop (``graceful``: the workers checkpoint and exit at the
  next step) or, for a shrink in ``kill`` mode (what a preemption does), kill the agents that
  leave; the survivors fail at their next collective and everything since the last checkpoint is
  lost; then start the next group;
- an agent that exits without being asked (a worker crashed, a node went away): the group is
  over; the next one starts from the last checkpoint.

Every change of group is measured (:class:`Rescale`): the release (stop request to every old
agent gone), the restart (new agents started to their first step) and the steps lost. The
median release and pause are what the master announces as ``worker_release_s`` and
``rescale_cost_s``.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Literal

from .agents import Agents, GroupSpec

Mode = Literal["graceful", "kill"]
# Rank 0's status.json as read; its values are whatever the training program wrote.
JobStatus = dict[str, Any]
StatusReader = Callable[[], "JobStatus | None"]


@dataclass
class Rescale:
    """One change of group, measured (seconds on the coordinator's clock)."""

    from_size: int
    to_size: int
    mode: str  # graceful, kill, or failure (an agent exited unasked)
    requested_at: float
    last_step: int = 0  # the old group's last completed step
    released_at: float | None = None  # every old agent gone
    started_at: float | None = None  # the new group's agents started
    first_step_at: float | None = None  # the new group's first step done
    resumed_step: int | None = None  # the checkpoint the new group started from

    @property
    def release_s(self) -> float | None:
        return None if self.released_at is None else self.released_at - self.requested_at

    @property
    def restart_s(self) -> float | None:
        if self.started_at is None or self.first_step_at is None:
            return None
        return self.first_step_at - self.started_at

    @property
    def pause_s(self) -> float | None:
        return None if self.first_step_at is None else self.first_step_at - self.requested_at

    @property
    def lost_steps(self) -> int | None:
        return None if self.resumed_step is None else max(0, self.last_step - self.resumed_step)

    def as_record(self) -> dict[str, object]:
        record = asdict(self)
        record.update(release_s=self.release_s, restart_s=self.restart_s, pause_s=self.pause_s, lost_steps=self.lost_steps)
        return record


@dataclass
class _Group:
    spec: GroupSpec
    stepping: bool = False
    stopping: Mode | None = None
    stop_deadline: float | None = None


@dataclass
class Coordinator:
    """Owns the group; the HTTP layer sets the target and reads :meth:`view`."""

    job: str
    agents: Agents
    read_status: StatusReader
    train_args: tuple[str, ...]
    target: int
    mode: Mode = "graceful"
    stop_timeout_s: float = 120.0  # a graceful stop taking longer is killed
    pg_timeout_s: float = 30.0  # survivors of a kill fail within this; killed after it plus a margin
    max_failures: int = 5  # unasked group failures in a row before the job is Failed
    on_rescale: Callable[[Rescale], None] = lambda _: None
    rescales: list[Rescale] = field(default_factory=list)
    phase: str = "Pending"
    _group: _Group | None = None
    _next_group: int = 1
    _pending: Rescale | None = None  # measured until the next group's first step
    _failures: int = 0

    def tick(self, now: float) -> None:
        if self.phase in ("Completed", "Failed"):
            return
        status = self.read_status()
        group = self._group
        if group is None:
            self._start(now, status)
            return
        mine = status if status is not None and status.get("generation") == group.spec.group else None
        if mine is not None and mine.get("first_step_at") and not group.stepping:
            self._first_step(now, mine)
        codes = self.agents.exit_codes()
        if all(c is not None for c in codes):
            self._group_over(now, group, mine, codes)
        elif group.stopping is None and any(c is not None for c in codes):
            # An agent went away unasked: its peers fail at their next collective; give them the
            # process group's timeout, then end the group.
            self._begin_stop(now, group, "failure", deadline=now + self.pg_timeout_s + 5.0)
        elif group.stopping is None and self.target != group.spec.size:
            if not group.stepping:
                # Still starting: it has computed nothing since the checkpoint it loaded, so
                # ending it at once loses nothing and frees the room sooner than its first step.
                self._begin_stop(now, group, "graceful", deadline=now)
                self.agents.kill_all()
            elif self.mode == "kill" and self.target < group.spec.size:
                self._begin_stop(now, group, "kill", deadline=now + self.pg_timeout_s + 5.0)
                self.agents.kill(group.spec.size - self.target)
            else:
                self._begin_stop(now, group, "graceful", deadline=now + self.stop_timeout_s)
                self.agents.request_stop()
        elif group.stop_deadline is not None and now > group.stop_deadline:
            self.agents.kill_all()

    def view(self) -> dict[str, object]:
        """What the status endpoint reports besides the ledger's fields."""
        group = self._group
        current = group.spec.size if group is not None and group.stepping and group.stopping is None else 0
        starting = group.spec.size - current if group is not None and group.stopping is None else 0
        releases = [r.release_s for r in self.rescales if r.release_s is not None and r.mode == "graceful"]
        pauses = [r.pause_s for r in self.rescales if r.pause_s is not None and r.mode == "graceful"]
        return {
            "phase": self.phase if self.phase in ("Completed", "Failed", "Pending") or current == self.target else "Rescaling",
            "current": current,
            "pending": starting,
            "worker_release_s": statistics.median(releases) if releases else None,
            "rescale_cost_s": statistics.median(pauses) if pauses else None,
        }

    def _start(self, now: float, status: JobStatus | None) -> None:
        if status is not None and status.get("state") == "completed":
            self.phase = "Completed"
            return
        if self.target < 1:
            return
        spec = GroupSpec(self.job, self._next_group, self.target, self.train_args)
        self._next_group += 1
        self.agents.start(spec)
        self._group = _Group(spec)
        if self._pending is not None:
            self._pending.started_at = now

    def _first_step(self, now: float, mine: JobStatus) -> None:
        assert self._group is not None
        self._group.stepping = True
        if self.phase == "Pending":
            self.phase = "Running"
        self._failures = 0
        if self._pending is not None:
            self._pending.first_step_at = float(mine["first_step_at"])
            self._pending.resumed_step = int(mine.get("resumed_step", 0))
            self.rescales.append(self._pending)
            self.on_rescale(self._pending)
            self._pending = None

    def _begin_stop(self, now: float, group: _Group, mode: str, deadline: float) -> None:
        group.stopping = "kill" if mode == "kill" else "graceful"
        group.stop_deadline = deadline
        if self._pending is not None:
            # The group of the previous change never took a step: that change is recorded as
            # it ended (no restart time), and this one measured from now.
            self.rescales.append(self._pending)
            self.on_rescale(self._pending)
        self._pending = Rescale(group.spec.size, self.target, mode, requested_at=now)

    def _group_over(self, now: float, group: _Group, mine: JobStatus | None, codes: list[int | None]) -> None:
        self._group = None
        last = self.read_status()  # written by rank 0 as it stopped: the group's last step
        if last is not None and last.get("generation") == group.spec.group:
            mine = last
        if mine is not None and mine.get("state") == "completed" and all(c == 0 for c in codes):
            self.phase = "Completed"
            self._pending = None
            return
        if group.stopping is None:  # every agent exited at once, unasked
            self._begin_stop(now, group, "failure", deadline=now)
        assert self._pending is not None
        self._pending.released_at = now
        # A group that never stepped left the previous group's last status: its step is where
        # the work stood.
        latest = mine if mine is not None else last
        self._pending.last_step = int(latest.get("step", 0)) if latest is not None else 0
        if self._pending.mode == "failure":
            self._failures += 1
            if self._failures > self.max_failures:
                self.phase = "Failed"
                return
        self._start(now, None)
