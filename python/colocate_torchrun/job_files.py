"""The files of a job's directory: written by the training program (rank 0) and the master, read
by the master, the tests and the experiment. Their names live here only."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

CHECKPOINT = "ckpt.pt"  # rank 0: model and optimizer at a step
STATUS = "status.json"  # rank 0, after every step: what the master reports of the training
CURVE = "curve.jsonl"  # rank 0: one evaluation per line
CHECKPOINT_REQUEST = "checkpoint-request"  # the master: a new number asks for a checkpoint
RESCALES = "rescales.jsonl"  # the master: one measured change of group per line


def write_atomically(path: Path, text: str) -> None:
    """Written beside and renamed over, so a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_status(workdir: Path) -> dict[str, Any] | None:
    """Rank 0's last status, or None before the first one."""
    try:
        value = json.loads((workdir / STATUS).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every record of a JSON-lines file; none when it does not exist yet."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
