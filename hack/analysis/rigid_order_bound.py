#!/usr/bin/env python3
"""How much the order of the queue alone can cut average JCT on windows of the Philly trace.

Plays each window of tests/trace_jobs.rs (300 jobs from day N, four times faster, 64 GPUs) with
rigid jobs started whenever they fit (list scheduling with backfill), once first come first
served and once shortest first with every duration known in advance. The ratio bounds what any
ordering of rigid jobs could gain over `gang-backfill`; the rest of colocate's gain has to come
from elasticity. Usage: hack/analysis/rigid_order_bound.py [TRACE_CSV]
"""
import csv
import datetime
import heapq
import sys

TRACE = sys.argv[1] if len(sys.argv) > 1 else "../shared/traces/dl/pollux_philly/philly_jobs_pollux.csv"
GPUS, LIMIT, SPEEDUP = 64, 300, 4


def load(path):
    stamp = lambda s: datetime.datetime.strptime(s, "%Y-%m-%d %H:%M:%S").timestamp()
    with open(path) as f:
        rows = [(stamp(r["timestamp"]), float(r["duration"]), int(float(r["num_gpus"]))) for r in csv.DictReader(f)]
    return sorted(rows, key=lambda r: r[0])


def average_jct(jobs, key):
    """jobs: (arrival s, duration s, gpus); key orders the queue at every event."""
    jobs, free, running, queue, jct, i = sorted(jobs), GPUS, [], [], [], 0
    while i < len(jobs) or queue or running:
        t = min(jobs[i][0] if i < len(jobs) else float("inf"), running[0][0] if running else float("inf"))
        while running and running[0][0] <= t:
            free += heapq.heappop(running)[1]
        while i < len(jobs) and jobs[i][0] <= t:
            queue.append(jobs[i])
            i += 1
        queue.sort(key=key)
        waiting = []
        for job in queue:
            if job[2] <= free:
                free -= job[2]
                heapq.heappush(running, (t + job[1], job[2]))
                jct.append(t + job[1] - job[0])
            else:
                waiting.append(job)
        queue = waiting
    return sum(jct) / len(jct)


def main():
    rows = load(TRACE)
    first = rows[0][0]
    for day in (20, 30, 40, 60, 80, 100):
        window = [r for r in rows if r[0] >= first + day * 86400][:LIMIT]
        start = window[0][0]
        jobs = [((r[0] - start) / SPEEDUP, r[1] / SPEEDUP, min(r[2], GPUS)) for r in window]
        fcfs, shortest = average_jct(jobs, lambda j: j[0]), average_jct(jobs, lambda j: j[1])
        print(f"day {day}: first come first served {fcfs:.0f} s, shortest first {shortest:.0f} s, {fcfs / shortest:.2f}x")


if __name__ == "__main__":
    main()
