"""The training program the master runs under torchrun: DDP on gloo, one process per agent.

Run by torchrun (``torchrun ... -m colocate_torchrun.train --workdir DIR ...``); it reads RANK
and WORLD_SIZE from torchrun's environment. What makes it elastic:

- **The global batch is constant** (``--global-batch``, 840 by default: divisible by every world
  size from 1 to 8). Each of W ranks takes its G/W share of the same global batch, and DDP
  averages the gradients, so a step is the same mean gradient over the same G samples whatever
  the world size: changing W changes the speed, not the trajectory.
- **The data order is a function of the step** (a seeded permutation per epoch), so a
  generation resuming at step k reads exactly the samples the previous one would have.
- **Checkpoints** (rank 0, written to a temporary file and renamed, so a kill never leaves half a
  checkpoint): every ``--checkpoint-every`` steps, when the master asks for one (the request file
  holds a number; a new number is a new request), and on a stop request.
- **A stop request** (``--stop-file`` exists on any rank) is all-reduced at the start of every
  step, so every rank sees it at the same step: rank 0 checkpoints, all exit 0. A graceful stop
  therefore finishes the step in progress and loses nothing.

Rank 0 writes ``status.json`` (the master's view of the job: step, samples, throughput, last
checkpoint) after every step and appends evaluations to ``curve.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .job_files import CHECKPOINT, CURVE, STATUS, write_atomically
from .models import TASKS, Dataset, Task



def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="colocate_torchrun.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", type=Path, required=True, help="shared by all ranks: checkpoint, status, curve")
    p.add_argument("--task", choices=sorted(TASKS), default="wide-deep")
    p.add_argument("--steps", type=int, default=300, help="training ends after this many global steps")
    p.add_argument("--global-batch", type=int, default=840)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--seed", type=int, default=1, help="model initialisation and data order")
    p.add_argument("--train-samples", type=int, default=200_000)
    p.add_argument("--test-samples", type=int, default=20_000)
    p.add_argument("--checkpoint-every", type=int, default=50, help="steps between periodic checkpoints (0: none)")
    p.add_argument("--eval-every", type=int, default=25, help="steps between evaluations on the test set")
    p.add_argument("--stop-file", type=Path, help="stop at the next step, after a checkpoint, once this file exists")
    p.add_argument("--checkpoint-request-file", type=Path, help="a new number in this file asks for a checkpoint")
    p.add_argument("--generation", type=int, default=0, help="the master's generation, echoed in status.json")
    p.add_argument("--pg-timeout-s", type=float, default=30.0, help="a collective waiting longer fails the worker")
    p.add_argument("--step-delay-s", type=float, default=0.0, help="sleep per step (tests: a slow model)")
    args = p.parse_args(argv)
    if args.steps < 1 or args.global_batch < 1 or args.checkpoint_every < 0 or args.eval_every < 1:
        p.error("--steps, --global-batch and --eval-every must be positive, --checkpoint-every not negative")
    return args


class Batches:
    """The global batch of a step: samples step*G .. (step+1)*G of an endless stream that
    visits the training set in a new seeded order every epoch."""

    def __init__(self, size: int, global_batch: int, seed: int) -> None:
        self.size, self.global_batch, self.seed = size, global_batch, seed
        self._orders: dict[int, torch.Tensor] = {}

    def _order(self, epoch: int) -> torch.Tensor:
        if epoch not in self._orders:
            # A batch spans at most two epochs; older orders are not needed again.
            self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}
            seed = self.seed * 100_003 + epoch
            self._orders[epoch] = torch.randperm(self.size, generator=torch.Generator().manual_seed(seed))
        return self._orders[epoch]

    def indices(self, step: int, rank: int, world: int) -> torch.Tensor:
        share = self.global_batch // world
        first = step * self.global_batch + rank * share
        stream = torch.arange(first, first + share)
        epochs = stream // self.size
        out = torch.empty(share, dtype=torch.int64)
        for epoch in torch.unique(epochs).tolist():
            mask = epochs == epoch
            out[mask] = self._order(int(epoch))[stream[mask] % self.size]
        return out


def save_checkpoint(workdir: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    tmp = workdir / (CHECKPOINT + ".tmp")
    torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, tmp)
    os.replace(tmp, workdir / CHECKPOINT)


def evaluate(task: Task, model: torch.nn.Module, test: Dataset) -> tuple[float, float]:
    model.eval()
    with torch.no_grad():
        out = model(test.cat, test.dense)
        loss, quality = float(task.loss(out, test.label)), task.quality(out, test.label)
    model.train()
    return loss, quality


def read_request(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.pg_timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.global_batch % world:
        print(f"train: --global-batch {args.global_batch} is not divisible by the world size {world}", file=sys.stderr)
        return 2
    task = TASKS[args.task]
    train_set, test_set = task.data(args.train_samples, args.test_samples)
    torch.manual_seed(args.seed)
    model = task.model()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    step = 0
    ckpt_path = args.workdir / CHECKPOINT
    if ckpt_path.exists():
        state = torch.load(ckpt_path, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = int(state["step"])
    resumed_step = step
    checkpoint_step, checkpoint_at = step, time.time()
    ddp = DistributedDataParallel(model)
    batches = Batches(len(train_set), args.global_batch, args.seed)
    handled_request = read_request(args.checkpoint_request_file)
    started, first_step_at, steps_here = time.time(), None, 0

    def status(state: str) -> None:
        now = time.time()
        rate = steps_here * args.global_batch / (now - first_step_at) if first_step_at and steps_here > 1 else 0.0
        write_atomically(
            args.workdir / STATUS,
            json.dumps({
                "generation": args.generation, "world_size": world, "state": state, "step": step,
                "steps": args.steps, "resumed_step": resumed_step, "samples": step * args.global_batch, "total_samples": args.steps * args.global_batch,
                "samples_per_s": rate, "checkpoint_step": checkpoint_step, "checkpoint_at": checkpoint_at,
                "checkpoint_request": handled_request, "started_at": started, "first_step_at": first_step_at, "at": now,
            }),
        )

    def checkpoint() -> None:
        nonlocal checkpoint_step, checkpoint_at
        if rank == 0 and checkpoint_step != step:
            save_checkpoint(args.workdir, model, optimizer, step)
            checkpoint_step, checkpoint_at = step, time.time()

    ending = "completed"
    while step < args.steps:
        flag = torch.tensor([1.0 if args.stop_file and args.stop_file.exists() else 0.0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() > 0:
            ending = "stopped"
            break
        part = train_set.rows(batches.indices(step, rank, world))
        optimizer.zero_grad()
        task.loss(ddp(part.cat, part.dense), part.label).backward()
        optimizer.step()
        if args.step_delay_s:
            time.sleep(args.step_delay_s)
        step += 1
        steps_here += 1
        if first_step_at is None:
            first_step_at = time.time()
        if rank == 0:
            request = read_request(args.checkpoint_request_file)
            periodic = args.checkpoint_every and step % args.checkpoint_every == 0
            if periodic or request != handled_request:
                checkpoint()
                handled_request = request
            if step % args.eval_every == 0 or step == args.steps:
                loss, quality = evaluate(task, model, test_set)
                with open(args.workdir / CURVE, "a") as f:
                    f.write(json.dumps({"step": step, "samples": step * args.global_batch, "test_loss": loss,
                                        task.metric: quality, "world_size": world, "generation": args.generation,
                                        "at": time.time()}) + "\n")
            status("running")
    # Stopped or done, every rank leaves at the same step, after rank 0's checkpoint.
    checkpoint()
    if rank == 0:
        status(ending)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
