#!/usr/bin/env bash
# What a CPU-bound training worker costs NGINX's latency when it shares NGINX's core, measured
# with real processes on this machine's cgroups:
#
#   alone        NGINX alone on its core
#   besteffort   beside the worker in a group at cpu.shares 2 (cgroup v2: cpu.weight 1): what the
#                kubelet gives a BestEffort pod, i.e. a worker of `capacity: usage` mode
#   idle         beside the worker in a group with cpu.idle 1 (SCHED_IDLE for the whole group),
#                where the kernel has the file
#   equal        beside the worker at the same cpu.shares as NGINX (1024; v2: cpu.weight 100):
#                what request-based overcommit gives a worker that requests a CPU
#
# NGINX (master and one worker process, a 16 KiB page gzipped per request, no access log) runs in a group
# `online` at cpu.shares 1024 (a pod requesting one CPU), pinned to one CPU; the worker
# (`sha256sum /dev/zero`: one thread of pure user-space hashing that never blocks, from coreutils)
# is pinned to the same CPU in a group `batch`. Pinning both to one CPU is the point: otherwise
# the scheduler puts them on different CPUs and nothing is measured. wrk, the load generator, is
# pinned to another CPU so it does not compete.
#
# Load: an HPA holds a service at a CPU target, so NGINX is driven at the rate that keeps its
# processes at --load of its CPU alone (default 0.6), as its cgroup is charged: the usage an
# HPA's utilization is computed from. A few short calibration runs find that rate. Loopback
# network work that no process is charged for keeps the CPU somewhat busier (shared_cpu_busy).
# Debian's wrk has no rate option, so a Lua script makes each of many connections wait an
# exponentially distributed think time (mean 50 ms) before each request: with a response time
# far below that, the arrivals are close to an open-loop Poisson stream at connections / think
# time. Where NGINX slows down, each connection sends a little later (the loop is not fully
# open), so the achieved rate of every run is reported; so is the closed-loop maximum (wrk
# without pacing), for reference. The cases are interleaved, round by round, so a drift in the
# machine affects every case alike. Other processes distort every figure: a run during which they
# took more than 0.15 of a CPU is repeated (twice at most), and what they took is reported
# (other_cpu; the load average at the start too). Run it on an otherwise idle machine.
#
#   sudo hack/interference.sh [--out FILE] [--duration SECONDS] [--repeats N] [--load FRACTION]
#
# Prints a table and writes FILE (default target/test-reports/interference.json): per case the
# medians of p50_ms, p99_ms and rps over the repeats, p99_ratio against alone, the fraction of
# the shared CPU that NGINX and the worker received and that was busy, and every repeat. About
# 3.5 min with the defaults (15 s x 3 repeats).
# Exit 2: cannot run here (not root, no writable cpu controller, a tool missing, fewer than 2
# CPUs), with the reason on one line; exit 1: the measurement failed.
set -Eeuo pipefail
cd "$(dirname "$0")/.."

out=target/test-reports/interference.json
duration=15
repeats=3
load=0.6
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --load) load=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -E/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "hack/interference.sh: unknown argument $1 (see --help)" >&2; exit 1 ;;
  esac
done

cannot() { echo "hack/interference.sh: cannot run here: $*" >&2; exit 2; }
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
trap 'echo "hack/interference.sh: failed at line $LINENO" >&2; exit 1' ERR

[ "$(id -u)" -eq 0 ] || cannot "needs root to create cgroups and set cpu.shares (run: sudo hack/interference.sh)"
nginx=$(command -v nginx || true)
[ -n "$nginx" ] || nginx=/usr/sbin/nginx
[ -x "$nginx" ] || cannot "nginx not found: install it with apt-get install -y nginx"
command -v wrk >/dev/null || cannot "wrk not found: install it with apt-get install -y wrk"
command -v taskset >/dev/null || cannot "taskset not found: install it with apt-get install -y util-linux"
command -v python3 >/dev/null || cannot "python3 not found: install it with apt-get install -y python3"

# Two CPUs this process may use: the first for wrk, the second for NGINX and the worker.
mapfile -t cpus < <(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)), sep="\n")')
[ "${#cpus[@]}" -ge 2 ] || cannot "needs 2 CPUs (wrk on one, NGINX and the worker on the other), this process may use ${#cpus[@]}"
cpu_load=${cpus[0]}
cpu_shared=${cpus[1]}

# The cpu controller: cgroup v1 (cpu.shares, BestEffort 2 against 1024 per requested CPU) or v2
# (cpu.weight; the kubelet maps shares 2 to weight 1 and one requested CPU to about 100).
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
  cgroup=v2
  base=/sys/fs/cgroup
  grep -qw cpu "$base/cgroup.controllers" || cannot "cgroup v2 without the cpu controller in $base/cgroup.controllers"
  weight_file=cpu.weight online_weight=100 besteffort_weight=1
elif [ -f /sys/fs/cgroup/cpu/cpu.shares ]; then
  cgroup=v1
  base=/sys/fs/cgroup/cpu
  weight_file=cpu.shares online_weight=1024 besteffort_weight=2
else
  cannot "no cpu controller: neither cgroup v2 at /sys/fs/cgroup nor cgroup v1 at /sys/fs/cgroup/cpu"
fi
group=$base/colocate-interference

tmp=$(mktemp -d)
nginx_pid="" worker_pid=""
cleanup() {
  set +e
  for pid in "$worker_pid" "$nginx_pid"; do
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  for dir in "$group/online" "$group/batch" "$group"; do
    [ -d "$dir" ] || continue
    for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$dir" 2>/dev/null && break; sleep 0.2; done
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

# A group left by a killed run holds no process once its processes are gone; remove it.
[ -d "$group" ] && { rmdir "$group/online" "$group/batch" "$group" 2>/dev/null || true; }
mkdir "$group" 2>/dev/null || cannot "cannot create $group (cgroup $cgroup not writable here)"
if [ "$cgroup" = v2 ]; then
  { grep -qw cpu "$base/cgroup.subtree_control" || echo +cpu >"$base/cgroup.subtree_control"; } 2>/dev/null ||
    cannot "cannot enable the cpu controller in $base/cgroup.subtree_control"
  echo +cpu >"$group/cgroup.subtree_control" 2>/dev/null || cannot "cannot enable the cpu controller in $group"
fi
mkdir "$group/online" "$group/batch"
echo "$online_weight" >"$group/online/$weight_file"
has_idle=0
[ -f "$group/batch/cpu.idle" ] && has_idle=1

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$tmp/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $tmp/nginx.pid;
error_log $tmp/error.log warn;
worker_rlimit_nofile 16384;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path $tmp/body;
  proxy_temp_path $tmp/proxy;
  fastcgi_temp_path $tmp/fastcgi;
  uwsgi_temp_path $tmp/uwsgi;
  scgi_temp_path $tmp/scgi;
  keepalive_requests 1000000;
  gzip on;
  gzip_comp_level 6;
  gzip_min_length 0;
  server {
    listen 127.0.0.1:$port;
    root $tmp/www;
    location / { default_type text/html; }
  }
}
EOF

# The page: 16 KiB of HTML-like text, compressed per request. Each request then costs NGINX a
# fraction of a millisecond of its own CPU, as a page of a real service does, rather than the
# microseconds of a tiny constant response, whose rate would load wrk as much as NGINX.
mkdir "$tmp/www"
chmod 755 "$tmp" "$tmp/www" # NGINX's workers drop root
python3 -c '
import random
random.seed(7)
words = ["<div class=\"item\">", "</div>", "colocate", "nginx", "latency", "worker", "cluster", "<p>", "</p>", "node", "request"]
text = " ".join(random.choice(words) + str(random.randrange(1000)) for _ in range(2600))
print(text[:16384])' >"$tmp/www/index.html"

# Closed loop for the calibration; paced (think time) for the cases. done() prints exact
# microseconds, so nothing depends on the units of wrk's own text.
summary='function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT requests=%d duration_us=%d p50_us=%d p99_us=%d errors=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.status + e.timeout))
end'
printf '%s\n' "$summary" >"$tmp/closed.lua"
cat >"$tmp/paced.lua" <<EOF
local mean_ms = tonumber(os.getenv("INTERFERENCE_THINK_MS"))
math.randomseed(os.time() + math.floor(os.clock() * 1e6))
-- wrk takes whole milliseconds; rounding keeps the mean.
function delay()
  return math.floor(-mean_ms * math.log(1 - math.random()) + 0.5)
end
$summary
EOF

# NGINX and the worker join their group before they exec, so every process they fork is in it.
(echo "$BASHPID" >"$group/online/cgroup.procs" && exec taskset -c "$cpu_shared" "$nginx" -p "$tmp" -e "$tmp/error.log" -c "$tmp/nginx.conf") &
nginx_pid=$!
for _ in $(seq 50); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  kill -0 "$nginx_pid" 2>/dev/null || { echo "hack/interference.sh: nginx exited: $(cat "$tmp/error.log")" >&2; exit 1; }
  sleep 0.1
done
status=$(exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'GET / HTTP/1.0\r\n\r\n' >&3 && head -1 <&3)
[[ $status == *" 200 "* ]] || { echo "hack/interference.sh: NGINX answered '$status': $(cat "$tmp/error.log")" >&2; exit 1; }
start_worker() {
  (echo "$BASHPID" >"$group/batch/cgroup.procs" && exec taskset -c "$cpu_shared" sha256sum /dev/zero) &
  worker_pid=$!
}
stop_worker() {
  kill "$worker_pid" && wait "$worker_pid" 2>/dev/null || true
  worker_pid=""
}

# CPU time (clock ticks) used by a group's processes: what its cgroup is charged, the usage an
# HPA's CPU utilization is computed from.
ticks() {
  local pid t sum=0
  for pid in $(cat "$1/cgroup.procs"); do
    # utime and stime: the 12th and 13th fields after the command name.
    t=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{ print $12 + $13 }') || t=0
    sum=$((sum + ${t:-0}))
  done
  echo "$sum"
}
# Prints "nginx worker busy total busy total tasks": the groups' ticks; busy and all ticks of the
# shared CPU and of wrk's CPU; the ticks that tasks (user, system) and the hypervisor (steal)
# took from both CPUs: less what NGINX, the worker and wrk used, the CPU other programs took.
snapshot() {
  echo "$(ticks "$group/online") $(ticks "$group/batch") $(awk -v s="cpu$cpu_shared" -v l="cpu$cpu_load" '
    $1 == s { sb = $2 + $3 + $4 + $7 + $8 + $9; st = sb + $5 + $6; tb += $2 + $3 + $4 + $9 }
    $1 == l { lb = $2 + $3 + $4 + $7 + $8 + $9; lt = lb + $5 + $6; tb += $2 + $3 + $4 + $9 }
    END { print sb, st, lb, lt, tb }' /proc/stat)"
}
# The fraction of the shared CPU that NGINX's processes used between two snapshots; other
# processes on that CPU do not change it.
busy() { python3 -c "a = '$1'.split(); b = '$2'.split(); print(round((int(b[0]) - int(a[0])) / max(1, int(b[3]) - int(a[3])), 3))"; }

# wrk on its own CPU, in a subshell of its own; prints "requests duration_us p50_us p99_us errors
# wrk_ticks".
run_wrk() { # connections seconds script [think_ms]
  INTERFERENCE_THINK_MS=${4:-0} taskset -c "$cpu_load" wrk -t1 -c "$1" -d "${2}s" --timeout 10s --latency -s "$3" -H "Accept-Encoding: gzip" \
    "http://127.0.0.1:$port/" >"$tmp/wrk.out" 2>&1 || { echo "hack/interference.sh: wrk failed: $(cat "$tmp/wrk.out")" >&2; exit 1; }
  # The ticks wrk used: this shell's waited-for children's (cutime and cstime).
  local wrk_ticks
  wrk_ticks=$(sed 's/.*) //' "/proc/$BASHPID/stat" | awk '{ print $14 + $15 }')
  grep -q '^RESULT ' "$tmp/wrk.out" || { echo "hack/interference.sh: no RESULT line from wrk: $(cat "$tmp/wrk.out")" >&2; exit 1; }
  echo "$(grep '^RESULT ' "$tmp/wrk.out" | sed -e 's/^RESULT //' -e 's/[a-z_0-9]*=//g') $wrk_ticks"
}
rate() { python3 -c "print(round($1 / ($2 / 1e6)))"; }

loadavg=$(cut -d' ' -f1-3 /proc/loadavg)
log "cgroup $cgroup at $group; wrk on CPU $cpu_load, NGINX and the worker on CPU $cpu_shared; load average $loadavg"
before=$(snapshot)
read -r requests dur_us _ _ _ _ < <(run_wrk 64 3 "$tmp/closed.lua")
max_busy=$(busy "$before" "$(snapshot)")
max_rps=$(rate "$requests" "$dur_us")
log "NGINX alone on its CPU, closed loop: $max_rps req/s, NGINX's processes using $max_busy of the CPU"

# The target load is NGINX's CPU usage as its cgroup is charged, a fraction --load of the CPU (of
# its request, for an HPA). It is found under the paced load itself: NGINX spends more per request on many connections at a steady
# pace than on a closed loop's batches, so a fraction of the closed-loop maximum would overload
# it. Each step measures the rate and the busy fraction and scales the rate linearly; `achieved`
# corrects the connection count for the pace wrk actually keeps.
think_ms=50
want=$(python3 -c "print(round($max_rps * $load * 0.5))")
achieved=1
for step in 1 2 3 4; do
  conns=$(python3 -c "print(max(8, round($want / $achieved * $think_ms / 1000)))")
  before=$(snapshot)
  read -r requests dur_us _ _ _ _ < <(run_wrk "$conns" 4 "$tmp/paced.lua" "$think_ms")
  b=$(busy "$before" "$(snapshot)")
  got=$(rate "$requests" "$dur_us")
  log "calibration $step: $conns connections, $got req/s, NGINX's processes using $b of the CPU"
  achieved=$(python3 -c "print($got / ($conns * 1000 / $think_ms))")
  if python3 -c "import sys; sys.exit(0 if abs($b - $load) <= 0.03 else 1)"; then target=$got; break; fi
  want=$(python3 -c "print(round($got * $load / max($b, 0.05)))")
  target=$want
done
conns=$(python3 -c "print(max(8, round($target / $achieved * $think_ms / 1000)))")
log "target $target req/s: $conns connections, mean think time $think_ms ms"

cases=(alone besteffort)
[ "$has_idle" -eq 1 ] && cases+=(idle)
cases+=(equal)
: >"$tmp/runs"
for round in $(seq "$repeats"); do
  for case in "${cases[@]}"; do
    case $case in
      besteffort) echo "$besteffort_weight" >"$group/batch/$weight_file" ;;
      idle) echo "$besteffort_weight" >"$group/batch/$weight_file"; echo 1 >"$group/batch/cpu.idle" ;;
      equal) echo "$online_weight" >"$group/batch/$weight_file" ;;
    esac
    # A run during which other processes took more than 0.15 of a CPU is repeated, twice at most,
    # and kept out of the figures if a repeat is quiet.
    for attempt in 1 2 3; do
      [ "$case" = alone ] || { start_worker; sleep 1; }
      before=$(snapshot)
      result=$(run_wrk "$conns" "$duration" "$tmp/paced.lua" "$think_ms")
      after=$(snapshot)
      [ "$case" = alone ] || stop_worker
      read -r n0 w0 _ st0 _ _ tb0 <<<"$before"
      read -r n1 w1 _ st1 _ _ tb1 <<<"$after"
      other=$((tb1 - tb0 - (n1 - n0) - (w1 - w0) - ${result##* }))
      ((other > 0)) || other=0
      quiet=$(python3 -c "print(int($other / max(1, $st1 - $st0) <= 0.15))")
      kept=1
      [ "$quiet" -eq 1 ] || [ "$attempt" -eq 3 ] || kept=0
      echo "$case $round $result $before $after $other $kept" >>"$tmp/runs"
      log "round $round/$repeats $case: $(echo "$result" | awk '{ printf "%.0f req/s, p50 %.3f ms, p99 %.3f ms, %d errors", $1 / ($2 / 1e6), $3 / 1e3, $4 / 1e3, $5 }'), other processes $(python3 -c "print(round($other / max(1, $st1 - $st0), 2))") CPU$([ "$kept" -eq 1 ] || echo ': repeating')"
      [ "$kept" -eq 0 ] || break
    done
    [ "$has_idle" -eq 0 ] || echo 0 >"$group/batch/cpu.idle"
  done
done

mkdir -p "$(dirname "$out")"
python3 - "$tmp/runs" "$out" <<EOF
import json, os, platform, statistics, sys

runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    case, rnd = f[0], int(f[1])
    requests, dur_us, p50, p99, errors, _ = map(int, f[2:8])
    b = list(map(int, f[8:15]))
    a = list(map(int, f[15:22]))
    other, kept = int(f[22]), f[23] == "1"
    secs = dur_us / 1e6
    runs.setdefault(case, []).append({
        "round": rnd,
        "rps": round(requests / secs, 1),
        "p50_ms": p50 / 1e3,
        "p99_ms": p99 / 1e3,
        "errors": errors,
        "nginx_cpu": round((a[0] - b[0]) / max(1, a[3] - b[3]), 3),
        "worker_cpu": round((a[1] - b[1]) / max(1, a[3] - b[3]), 3),
        "shared_cpu_busy": round((a[2] - b[2]) / max(1, a[3] - b[3]), 3),
        "wrk_cpu_busy": round((a[4] - b[4]) / max(1, a[5] - b[5]), 3),
        "other_cpu": round(other / max(1, a[3] - b[3]), 3),
        "kept": kept,
    })

settings = {
    "alone": "NGINX alone on its CPU",
    "besteffort": "worker beside NGINX, batch $weight_file $besteffort_weight (BestEffort)",
    "idle": "worker beside NGINX, batch cpu.idle 1",
    "equal": "worker beside NGINX, batch $weight_file $online_weight (equal to NGINX's)",
}
cases = {}
for case, all_runs in runs.items():
    rs = [r for r in all_runs if r["kept"]]
    med = lambda k: statistics.median(r[k] for r in rs)
    cases[case] = {
        "setting": settings[case],
        "p50_ms": med("p50_ms"),
        "p99_ms": med("p99_ms"),
        "rps": med("rps"),
        "p99_ms_range": [min(r["p99_ms"] for r in rs), max(r["p99_ms"] for r in rs)],
        "nginx_cpu": med("nginx_cpu"),
        "worker_cpu": med("worker_cpu"),
        "shared_cpu_busy": med("shared_cpu_busy"),
        "wrk_cpu_busy": med("wrk_cpu_busy"),
        "other_cpu": med("other_cpu"),
        "errors": sum(r["errors"] for r in rs),
        "repeats": rs,
        "discarded": [r for r in all_runs if not r["kept"]],
    }
for c in cases.values():
    c["p99_ratio"] = round(c["p99_ms"] / cases["alone"]["p99_ms"], 3)

report = {
    "machine": {
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "cgroup": "$cgroup",
        "load_average_at_start": "$loadavg",
    },
    "nginx_cpu": $cpu_shared,
    "wrk_cpu": $cpu_load,
    "worker_command": "sha256sum /dev/zero",
    "online_weight": "$weight_file $online_weight",
    "max_rps": $max_rps,
    "max_rps_cpu_busy": $max_busy,
    "load": $load,
    "target_rps": $target,
    "connections": $conns,
    "mean_think_ms": $think_ms,
    "duration_s": $duration,
    "repeats": $repeats,
    "cases": cases,
}
json.dump(report, open(sys.argv[2], "w"), indent=2)

print(f"NGINX paced at {$target} req/s to keep its processes at {$load:.0%} of their CPU alone (closed-loop maximum {$max_rps} req/s), "
      f"cgroup $cgroup; median of {$repeats} x {$duration} s, p99 range in brackets")
print(f"{'case':<11} {'p50 ms':>7} {'p99 ms':>7} {'p99 range':>15} {'p99/alone':>9} {'req/s':>7} {'NGINX CPU':>9} {'worker CPU':>10} {'CPU busy':>8}")
for name, c in cases.items():
    lo, hi = c["p99_ms_range"]
    print(f"{name:<11} {c['p50_ms']:>7.3f} {c['p99_ms']:>7.3f} {f'[{lo:.3f}-{hi:.3f}]':>15} {c['p99_ratio']:>9.2f} "
          f"{c['rps']:>7.0f} {c['nginx_cpu']:>9.0%} {c['worker_cpu']:>10.0%} {c['shared_cpu_busy']:>8.0%}")
print(f"written to {sys.argv[2]}")
EOF
