"""Master protocol v1 bookkeeping without I/O: the generation, idempotent command ids and bounds,
exactly as docs/master-protocol.md states them (and as the reference master keeps them).

The HTTP layer turns a :class:`ScaleRefused` into 400 or 409; the coordinator applies an accepted
target. A command id seen before gets its first answer and changes nothing; a refused command's
id is not remembered, so a retry is checked again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, TypeVar

MAX_COMMAND_ID = 256


@dataclass(frozen=True)
class ScaleCommand:
    command_id: str
    target: int
    reason: str = ""
    deadline_s: float | None = None
    release_pods: tuple[str, ...] = ()


@dataclass(frozen=True)
class Accepted:
    accepted_target: int
    generation: int
    changed: bool  # False for a repeat or a target already in force: nothing to apply


class ScaleRefused(Exception):
    """A command the master does not accept; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str, **details: object) -> None:
        super().__init__(message)
        self.status = status
        self.details = details


class BadCommand(ValueError):
    """A request body that is not a scale command; names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def parse_scale_command(body: object) -> ScaleCommand:
    """The body of ``POST /v1/scale``; unknown fields are ignored, as the protocol says."""
    if not isinstance(body, dict):
        raise BadCommand("body", "must be a JSON object")
    command_id = body.get("command_id")
    if not isinstance(command_id, str):
        raise BadCommand("command_id", "must be a string")
    target = body.get("target")
    if isinstance(target, bool) or not isinstance(target, int) or target < 0:
        raise BadCommand("target", "must be a whole number of workers, 0 or more")
    reason = body.get("reason", "")
    if not isinstance(reason, str):
        raise BadCommand("reason", "must be a string")
    deadline = body.get("deadline_s")
    if deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or deadline < 0):
        raise BadCommand("deadline_s", "must be a number of seconds, 0 or more")
    pods = body.get("release_pods", [])
    if not isinstance(pods, list) or not all(isinstance(p, str) for p in pods):
        raise BadCommand("release_pods", "must be a list of pod names")
    return ScaleCommand(command_id, target, reason, None if deadline is None else float(deadline), tuple(pods))


def parse_checkpoint_command(body: object) -> str:
    """The body of ``POST /v1/checkpoint``: its ``command_id``; other fields are ignored."""
    command_id = body.get("command_id") if isinstance(body, dict) else None
    if not isinstance(command_id, str):
        raise BadCommand("command_id", "must be a string")
    return command_id


def check_command_id(command_id: str) -> None:
    """Ids are remembered, so their size is bounded too (400 outside it)."""
    if not 1 <= len(command_id.encode()) <= MAX_COMMAND_ID:
        raise ScaleRefused(400, f"command_id: must be 1 to {MAX_COMMAND_ID} bytes", field="command_id")


Answer = TypeVar("Answer")


class RememberedIds(Generic[Answer]):
    """The first answer to each of the last ``capacity`` accepted command ids, oldest forgotten
    first: a controller retries within seconds, so a bounded memory makes a retry idempotent."""

    def __init__(self, capacity: int = 1024) -> None:
        if capacity < 1:
            raise ValueError("remembered commands must be at least 1")
        self._capacity = capacity
        self._answers: OrderedDict[str, Answer] = OrderedDict()

    def get(self, command_id: str) -> Answer | None:
        return self._answers.get(command_id)

    def remember(self, command_id: str, answer: Answer) -> None:
        self._answers[command_id] = answer
        while len(self._answers) > self._capacity:
            self._answers.popitem(last=False)


class Ledger:
    """Generation, target and the last accepted command ids of one job."""

    def __init__(self, minimum: int, maximum: int, target: int, generation: int = 1, remembered: int = 1024) -> None:
        if minimum > maximum:
            raise ValueError(f"min workers ({minimum}) is above max workers ({maximum})")
        if not minimum <= target <= maximum:
            raise ValueError(f"initial workers ({target}) outside [{minimum}, {maximum}]")
        self.minimum, self.maximum = minimum, maximum
        self.target, self.generation = target, generation
        self._answers: RememberedIds[Accepted] = RememberedIds(remembered)

    def scale(self, command: ScaleCommand) -> Accepted:
        check_command_id(command.command_id)
        first = self._answers.get(command.command_id)
        if first is not None:
            return Accepted(first.accepted_target, first.generation, changed=False)
        if not self.minimum <= command.target <= self.maximum:
            raise ScaleRefused(
                409, f"target {command.target} is outside [{self.minimum}, {self.maximum}]", min=self.minimum, max=self.maximum
            )
        changed = command.target != self.target
        if changed:
            self.target = command.target
            self.generation += 1
        answer = Accepted(command.target, self.generation, changed)
        self._answers.remember(command.command_id, answer)
        return answer
