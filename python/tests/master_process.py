"""A real master (``python -m colocate_torchrun``) on a free port, with a client for its HTTP API."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

from colocate_torchrun.job_files import CURVE, RESCALES, read_jsonl

PYTHON_DIR = Path(__file__).resolve().parent.parent


def require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise RuntimeError(
            f"these tests run real torchrun groups and need torch in {sys.executable}: "
            "run them with the python that hack/torch/venv.sh prints"
        ) from e


class MasterProcess:
    def __init__(self, workdir: Path, master_args: list[str], train_args: list[str]) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        self.workdir = workdir
        self.log = open(workdir.parent / f"{workdir.name}-master.log", "wb")
        env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
        cmd = [sys.executable, "-m", "colocate_torchrun", "--workdir", str(workdir), "--listen", f"127.0.0.1:{port}",
               "--python", sys.executable, *master_args, "--", *train_args]  # fmt: skip
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def request(self, method: str, path: str, body: object = None, token: str | None = None) -> tuple[int, dict]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=5) as res:
                return res.status, json.loads(res.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def status(self) -> dict:
        code, body = self.request("GET", "/v1/status")
        assert code == 200, (code, body)
        return body

    def wait_for(self, what: str, check: Callable[[dict], bool], timeout_s: float = 120.0) -> dict:
        deadline = time.time() + timeout_s
        last: dict = {}
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the master exited ({self.proc.returncode}) waiting for {what}; see {self.log.name}")
            try:
                last = self.status()
                if check(last):
                    return last
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.2)
        raise AssertionError(f"no {what} within {timeout_s} s; last status {last}")

    def running_with(self, workers: int, timeout_s: float = 120.0) -> dict:
        return self.wait_for(
            f"{workers} workers training",
            lambda s: s["phase"] == "Running" and s["workers"]["current"] == workers,
            timeout_s,
        )

    def scale(self, command_id: str, target: int, reason: str = "online-headroom") -> dict:
        code, body = self.request("POST", "/v1/scale", {"command_id": command_id, "target": target, "reason": reason})
        assert code == 202, (code, body)
        return body

    def rescales(self) -> list[dict]:
        return read_jsonl(self.workdir / RESCALES)

    def curve(self) -> list[dict]:
        return read_jsonl(self.workdir / CURVE)

    def leftover_processes(self) -> list[str]:
        """Processes still running for this job (agents, workers): none should outlive a group."""
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != self.proc.pid:
                try:
                    cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if str(self.workdir) in cmdline:
                    found.append(f"{entry.name}: {cmdline[:200]}")
        return found

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.log.close()
        return code
