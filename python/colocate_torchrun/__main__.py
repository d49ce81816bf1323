"""``python -m colocate_torchrun``: serve master protocol v1.2 for one torchrun elastic job.

Everything after ``--`` goes to the training program (``colocate_torchrun.train``); the master
adds ``--workdir``, ``--generation``, ``--stop-file`` and ``--checkpoint-request-file``. Every
flag also reads ``COLOCATE_MASTER_<FLAG>`` (capitals, ``_`` for ``-``), for a pod spec.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from .agents import LocalAgents
from .coordinator import Coordinator
from .http_api import make_server
from .ledger import Ledger
from .job_files import CHECKPOINT_REQUEST, read_status
from .master import Master, WorkerResources

TRAIN_FLAGS_OWNED = ("--workdir", "--generation", "--stop-file", "--checkpoint-request-file")


def env_default(flag: str, default: str | None = None) -> str | None:
    return os.environ.get("COLOCATE_MASTER_" + flag.upper().replace("-", "_"), default)


def parse_args(argv: list[str]) -> argparse.Namespace:
    if "--" in argv:
        split = argv.index("--")
        argv, train_args = argv[:split], argv[split + 1 :]
    else:
        train_args = []
    p = argparse.ArgumentParser(prog="python -m colocate_torchrun", description=__doc__.split("\n\n")[0])

    def flag(name: str, *, type=str, default: str | None = None, help: str, choices=None) -> None:
        value = env_default(name, default)
        p.add_argument(f"--{name}", type=type, default=None if value is None else type(value), required=value is None,
                       help=help, choices=choices)  # fmt: skip

    flag("job", help="the job name it reports (its workers' colocate.dev/job label)")
    flag("workdir", type=Path, help="the job's directory: checkpoint, status, curves, agent logs")
    flag("min-workers", type=int, help="the floor it reports and enforces")
    flag("max-workers", type=int, help="the ceiling it reports and enforces")
    flag("workers", type=int, help="workers to start with (within the bounds)")
    flag("worker-cpu", default="1", help="one worker's CPU request, reported as worker_resources")
    flag("worker-memory", default="1Gi", help="one worker's memory request, reported as worker_resources")
    flag("listen", default="0.0.0.0:8090", help="address to serve the protocol on")
    flag("token-file", default="", help="every request must carry this bearer token")
    flag("shrink", default="graceful", choices=["graceful", "kill"],
         help="graceful: checkpoint at the next step, then stop; kill: kill the leaving agents (a preemption, for experiments)")  # fmt: skip
    flag("pg-timeout-s", type=float, default="30", help="a collective waiting longer fails (after a peer is killed)")
    flag("python", default=sys.executable, help="the python that has torch (runs torchrun)")
    flag("worker-deployment", default="",
         help="keep this Deployment's worker pods at the target and size each group to the running ones")  # fmt: skip
    flag("namespace", default="default", help="the worker Deployment's namespace")
    flag("kubeconfig", default=os.environ.get("KUBECONFIG", ""), help="how to reach the API server (default: in-cluster)")
    args = p.parse_args(argv)
    for owned in TRAIN_FLAGS_OWNED:
        if any(a == owned or a.startswith(owned + "=") for a in train_args):
            p.error(f"{owned} after -- is set by the master; leave it out")
    if not args.min_workers <= args.workers <= args.max_workers or args.min_workers < 1:
        p.error(f"need 1 <= --min-workers <= --workers <= --max-workers, got {args.min_workers}, {args.workers}, {args.max_workers}")
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        p.error(f"--listen: expected HOST:PORT, got {args.listen!r}")
    args.train_args = train_args
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("colocate_torchrun")
    workdir: Path = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    token = None
    if args.token_file:
        token = Path(args.token_file).read_text().strip()
    train_args = (
        "--workdir", str(workdir), "--checkpoint-request-file", str(workdir / CHECKPOINT_REQUEST),
        "--pg-timeout-s", str(args.pg_timeout_s), *args.train_args,
    )  # fmt: skip
    agents = LocalAgents(workdir, python=args.python)
    coordinator = Coordinator(
        args.job, agents, lambda: read_status(workdir), train_args, target=args.workers,
        mode=args.shrink, pg_timeout_s=args.pg_timeout_s,
    )  # fmt: skip
    ledger = Ledger(args.min_workers, args.max_workers, args.workers)
    pod_sync = None
    if args.worker_deployment:
        from .worker_pods import KubernetesWorkerPods, PodSync

        pod_sync = PodSync(KubernetesWorkerPods(args.worker_deployment, args.namespace, args.kubeconfig or None))
        coordinator.target = 0  # sized by the running pods from the first tick
    resources = WorkerResources(args.worker_cpu, args.worker_memory)
    master = Master(args.job, ledger, coordinator, workdir, resources, token, pod_sync=pod_sync)
    host, _, port = args.listen.rpartition(":")
    server = make_server(master, host, int(port))
    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping the workers at their next step, then exiting", signum)
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log.info("serving master protocol v1.2 for job %s on %s (workdir %s)", args.job, args.listen, workdir)
    while not stopping.is_set():
        master.tick()
        stopping.wait(0.2)
    server.shutdown()
    agents.request_stop()
    deadline = time.time() + 60
    while any(c is None for c in agents.exit_codes()) and time.time() < deadline:
        time.sleep(0.2)
    agents.kill_all()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
