"""The convergence experiment: rigid 4 workers, rigid 8, and elastic 4..8 moved by a schedule
taken from a colocate replay, each through the torchrun master, several seeds, both model
families; and the same schedule applied by killing agents (what preemption does).

    python -m colocate_torchrun.convergence --intents out/intents.csv --job wide-deep --out DIR

The schedule: the job's targets in replay's ``intents.csv``, times mapped linearly onto the
training's steps and targets linearly from the range the job moved through onto 4..8 (a change
that maps to the same count is dropped). The driver posts each target to the master once
training passes its step, as colocate would, and waits for the job to complete.

Writes ``runs.json`` (every run's evaluations, changes and final figures), ``table.md`` and one
SVG per model family (test loss per sample processed: a kill's lost steps are processed twice).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .agents import PACKAGE_ROOT, free_port
from .job_files import CURVE, RESCALES, read_jsonl
from .svg_plot import Line, plot

VARIANTS = ("rigid-4", "rigid-8", "elastic", "elastic-kill")
LOW, HIGH = 4, 8


@dataclass(frozen=True)
class Change:
    step: int
    target: int


def schedule_from_intents(path: Path, job: str, steps: int, policy: str = "colocate") -> list[Change]:
    rows = [r for r in csv.DictReader(path.open()) if r["job"] == job and r.get("policy", "colocate") == policy]
    if len(rows) < 2:
        raise SystemExit(f"{path}: job {job!r} has {len(rows)} decisions; the schedule needs at least two")
    times = [float(r["t_s"]) for r in rows]
    targets = [int(r["target"]) for r in rows]
    t0, t1, lo, hi = times[0], times[-1], min(targets), max(targets)
    if t1 <= t0 or hi <= lo:
        raise SystemExit(f"{path}: job {job!r} never changes its target over time; nothing to replay")
    changes: list[Change] = []
    for t, n in zip(times, targets):
        step = round((t - t0) / (t1 - t0) * steps * 0.9)  # the last change lands before the end
        mapped = LOW + round((n - lo) / (hi - lo) * (HIGH - LOW))
        if not changes or mapped != changes[-1].target:
            changes.append(Change(step, mapped))
    return changes


def request(base: str, method: str, path: str, body: object = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as res:
        return json.loads(res.read())


def run_one(workdir: Path, python: str, task: str, seed: int, steps: int, changes: list[Change], kill: bool) -> dict:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    first = changes[0].target
    cmd = [python, "-m", "colocate_torchrun", "--job", f"{task}-{seed}", "--workdir", str(workdir),
           "--min-workers", str(LOW), "--max-workers", str(HIGH), "--workers", str(first),
           "--listen", f"127.0.0.1:{port}", "--python", python, "--shrink", "kill" if kill else "graceful",
           "--pg-timeout-s", "30", "--",
           "--task", task, "--seed", str(seed), "--steps", str(steps), "--eval-every", str(max(1, steps // 24)),
           "--checkpoint-every", str(max(1, steps // 12))]  # fmt: skip
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with open(workdir / "master.log", "wb") as log:
        master = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=str(PACKAGE_ROOT)))
        try:
            pending = list(changes[1:])
            while True:
                time.sleep(0.2)
                if master.poll() is not None:
                    raise SystemExit(f"the master of {workdir} exited ({master.returncode}); see {workdir / 'master.log'}")
                try:
                    status = request(base, "GET", "/v1/status")
                except OSError:
                    continue
                if status["phase"] == "Completed":
                    break
                if status["phase"] == "Failed":
                    raise SystemExit(f"{workdir}: the job failed; see the agent logs there")
                progress = status.get("progress", {})
                done = progress.get("done", 0) * steps // max(1, progress.get("total", 0))
                if pending and done >= pending[0].step:
                    change = pending.pop(0)
                    request(base, "POST", "/v1/scale",
                            {"command_id": f"step-{change.step}", "target": change.target, "reason": "schedule"})  # fmt: skip
        finally:
            master.terminate()
            master.wait(timeout=120)
    curve = read_jsonl(workdir / CURVE)
    rescales = read_jsonl(workdir / RESCALES)
    # Samples processed: a kill's lost steps were computed once and thrown away.
    for point in curve:
        lost = sum(r["lost_steps"] or 0 for r in rescales if r["first_step_at"] and r["first_step_at"] <= point["at"])
        point["processed"] = point["samples"] + lost * point["samples"] // point["step"]
    return {"curve": curve, "rescales": rescales, "wall_s": time.time() - started}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m colocate_torchrun.convergence", description=__doc__.split("\n\n")[0])
    p.add_argument("--intents", type=Path, help="intents.csv of a colocate replay (--out)")
    p.add_argument("--job", help="the job of that replay whose targets make the schedule")
    p.add_argument("--policy", default="colocate", help="whose intents: colocate or colocate-usage")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tasks", default="wide-deep,mlp")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--report-only", action="store_true", help="rewrite table.md and the SVGs from OUT/runs.json")
    args = p.parse_args(argv)
    if args.report_only:
        runs = json.loads((args.out / "runs.json").read_text())["runs"]
        print(report(args.out, runs))
        return 0
    if args.intents is None or args.job is None:
        p.error("--intents and --job are needed to run the experiment")
    changes = schedule_from_intents(args.intents, args.job, args.steps, args.policy)
    args.out.mkdir(parents=True, exist_ok=True)
    runs = {}
    for task in args.tasks.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            for variant in VARIANTS:
                name = f"{task}/{variant}/seed-{seed}"
                plan = {"rigid-4": [Change(0, 4)], "rigid-8": [Change(0, 8)]}.get(variant, changes)
                print(f"{time.strftime('%H:%M:%S')} {name}: {len(plan) - 1} changes", file=sys.stderr, flush=True)
                result = run_one(args.out / task / variant / f"seed-{seed}", args.python, task, seed, args.steps,
                                 plan, kill=variant == "elastic-kill")  # fmt: skip
                runs[name] = {"task": task, "variant": variant, "seed": seed, **result}
                # written after every run, so a long experiment cut short still has its report
                (args.out / "runs.json").write_text(json.dumps({"schedule": [c.__dict__ for c in changes], "runs": runs}))
    print(report(args.out, runs))
    return 0


def report(out: Path, runs: dict[str, dict]) -> str:
    """table.md (final figures, the spread test, what the changes cost) and one SVG per task."""
    text = table(runs) + "\n" + spread(runs) + "\n" + costs(runs)
    (out / "table.md").write_text(text)
    for task in sorted({r["task"] for r in runs.values()}):
        lines = [Line(f"{r['variant']} seed {r['seed']}", [(q["processed"], q["test_loss"]) for q in r["curve"]], r["variant"])
                 for r in runs.values() if r["task"] == task]  # fmt: skip
        seeds = len({r["seed"] for r in runs.values() if r["task"] == task})
        plot(out / f"{task}.svg", f"{task}: test loss per sample processed, {seeds} seeds per variant",
             "samples processed", "test loss", lines, list(VARIANTS))  # fmt: skip
    return text


def table(runs: dict[str, dict]) -> str:
    out = ["| model | variant | seeds | final test loss (each seed) | final quality | changes | steps lost | wall s |",
           "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in runs.values():
        groups.setdefault((r["task"], r["variant"]), []).append(r)
    for (task, variant), rs in groups.items():
        metric = "auc" if task == "wide-deep" else "accuracy"
        losses = " / ".join(f"{r['curve'][-1]['test_loss']:.4f}" for r in rs)
        quality = " / ".join(f"{r['curve'][-1][metric]:.4f}" for r in rs)
        changes = statistics.mean(len(r["rescales"]) for r in rs)
        lost = statistics.mean(sum(x["lost_steps"] or 0 for x in r["rescales"]) for r in rs)
        wall = statistics.mean(r["wall_s"] for r in rs)
        out.append(f"| {task} | {variant} | {len(rs)} | {losses} | {metric} {quality} | {changes:.1f} | {lost:.1f} | {wall:.0f} |")
    return "\n".join(out) + "\n"


def final_loss(run: dict) -> float:
    return float(run["curve"][-1]["test_loss"])


def spread(runs: dict[str, dict[str, Any]]) -> str:
    """The acceptance test: elasticity moves the final loss less than the seed does. For each
    elastic run, its gap to the rigid runs of its own seed (their mean over both sizes) is held
    against the seed spread of the rigid runs (max - min of their final losses over seeds and
    sizes); the gap between rigid 4 and rigid 8 of one seed is shown beside it."""
    out = ["| model | rigid final loss over seeds (spread) | largest gap, rigid 4 vs 8 of a seed | largest gap, elastic vs rigid of its seed | elastic runs within the spread |",
           "|---|---|---|---|---|"]  # fmt: skip
    for task in sorted({r["task"] for r in runs.values()}):
        rigid = [r for r in runs.values() if r["task"] == task and r["variant"].startswith("rigid")]
        elastic = [r for r in runs.values() if r["task"] == task and r["variant"].startswith("elastic")]
        if not rigid or not elastic:
            continue
        lo, hi = min(map(final_loss, rigid)), max(map(final_loss, rigid))
        by_seed = {seed: [final_loss(r) for r in rigid if r["seed"] == seed] for seed in {r["seed"] for r in rigid}}
        rigid_gap = max(max(v) - min(v) for v in by_seed.values())
        gaps = [abs(final_loss(e) - statistics.mean(by_seed[e["seed"]])) for e in elastic]
        inside = sum(g <= hi - lo for g in gaps)
        out.append(f"| {task} | {lo:.4f} .. {hi:.4f} ({hi - lo:.4f}) | {rigid_gap:.4f} | {max(gaps):.4f} | {inside} of {len(elastic)} |")
    return "\n".join(out) + "\n"


def costs(runs: dict[str, dict]) -> str:
    """What the changes cost, by how they were made: median and p95 over every change."""
    out = ["| changes | count | release s (median / p95) | restart s (median / p95) | pause s (median / p95) | steps lost (median / max) |",
           "|---|---|---|---|---|---|"]  # fmt: skip
    for mode in ("graceful", "kill"):
        rs = [x for r in runs.values() for x in r["rescales"] if x["mode"] == mode and x["pause_s"] is not None]
        if not rs:
            continue

        def mp(key: str) -> str:
            values = sorted(float(x[key]) for x in rs)
            return f"{statistics.median(values):.2f} / {values[min(len(values) - 1, int(0.95 * len(values)))]:.2f}"

        lost = sorted(int(x["lost_steps"]) for x in rs)
        out.append(f"| {mode} | {len(rs)} | {mp('release_s')} | {mp('restart_s')} | {mp('pause_s')} | "
                   f"{statistics.median(lost):.0f} / {lost[-1]} |")  # fmt: skip
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
