#!/usr/bin/env bash
# Regenerates the replay figures of docs/results.md and README.md: the blocks between
# `<!-- BEGIN generated: NAME -->` and `<!-- END generated: NAME -->`.
#
#   hack/results.sh                         rewrite the generated blocks in place
#   hack/results.sh --check                 regenerate into a temporary copy; fail with a diff
#                                           if either page differs (CI runs this)
#   hack/results.sh --reuse-test-reports    take the trace tests' rows from the reports the last
#                                           `cargo test --release` wrote, instead of running them
#
# Blocks and where their figures come from (all in docs/results.md but the first):
#   readme-headline     README.md: colocate, preemption and online-only on the shipped
#                       scenarios with online services (from the replays below)
#   shipped-scenarios   `colocate replay --json` of every scenarios/*.yaml without a job trace
#   philly-scenarios    the same for the scenarios with a `job_trace:` (JCT and queueing)
#   flash-variants      scenarios/flash-crowd.yaml with one setting changed (the sed lines below)
#   llm-headroom        scenarios/philly-llm-loan.yaml with and without its standing headroom
#   trace-scenarios     tests/trace_scenarios.rs: seven real load traces, online pods that
#                       preempt and online pods that wait (target/test-reports/trace_scenarios.json)
#   philly-windows      tests/trace_jobs.rs: other windows of the Philly trace
#                       (target/test-reports/trace_jobs.json)
#
# The trace tests and philly-llm-loan read ../shared/traces. Without --reuse-test-reports this
# script runs the two tests (`cargo test --release --locked --test trace_scenarios --test
# trace_jobs`: 10-35 s on 2 cores once built); CI runs them once in hack/test.sh and passes
# --reuse-test-reports. The replays here take about 10-20 s. COLOCATE_BIN names a colocate binary
# to replay with (default: `cargo build --release`, then its target/release/colocate). Needs
# python3 (hack/test.sh requires it too).
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
reuse=0
for arg in "$@"; do
  case $arg in
    --check) check=1 ;;
    --reuse-test-reports) reuse=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "hack/results.sh: unknown argument $arg (--check, --reuse-test-reports)" >&2
      exit 2
      ;;
  esac
done

pages=(docs/results.md README.md)
reports=target/test-reports
started=$SECONDS
took() { printf '   %ss\n' "$((SECONDS - $1))" >&2; }
command -v python3 >/dev/null 2>&1 || { echo "hack/results.sh: python3 not found" >&2; exit 1; }
for page in "${pages[@]}"; do
  [ -f "$page" ] || { echo "hack/results.sh: $page is missing" >&2; exit 1; }
done

bin=${COLOCATE_BIN:-}
if [ -z "$bin" ]; then
  echo "== cargo build --release --locked --bin colocate" >&2
  t=$SECONDS
  cargo build --release --locked --quiet --bin colocate
  bin=${CARGO_TARGET_DIR:-target}/release/colocate
  took "$t"
fi

if [ "$reuse" -eq 0 ]; then
  echo "== cargo test --release --locked --test trace_scenarios --test trace_jobs (writes $reports/trace_*.json)" >&2
  t=$SECONDS
  cargo test --release --locked --quiet --test trace_scenarios --test trace_jobs >&2
  took "$t"
fi
for report in trace_scenarios trace_jobs; do
  if [ ! -f "$reports/$report.json" ]; then
    echo "hack/results.sh: $reports/$report.json is missing: run \`cargo test --release --test $report\` (or this script without --reuse-test-reports)" >&2
    exit 1
  fi
  # Older than the code that computes its rows? (Not the binary: `cargo test` builds with the
  # dev-dependencies' features, so the `cargo build` above may relink a binary the rows match.)
  if [ -n "$(find src crates tests/trace_scenarios.rs tests/trace_jobs.rs tests/support Cargo.toml Cargo.lock -newer "$reports/$report.json" -print -quit)" ]; then
    echo "hack/results.sh: $reports/$report.json is older than the code that computes it: run \`cargo test --release --test $report\` (or this script without --reuse-test-reports)" >&2
    exit 1
  fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== $bin replay --json, every scenarios/*.yaml" >&2
t=$SECONDS
scenarios=(scenarios/*.yaml)
for s in "${scenarios[@]}"; do
  "$bin" replay --json --quiet "$s" >"$tmp/$(basename "$s" .yaml).json"
done
took "$t"

# Shipped scenarios with one setting changed: block, scenario, label, then the sed expression
# docs/results.md shows (none: the scenario as shipped). Replayed under colocate and online-only.
variants=(
  "flash-variants|flash-crowd|as shipped|"
  "flash-variants|flash-crowd|\`jobs[].release_time: 5s\`|s/^( *)rescale_cost:/\\1release_time: 5s\\n&/"
  "flash-variants|flash-crowd|\`jobs[].release_in_place: true\`|s/^( *)rescale_cost:/\\1release_in_place: true\\n&/"
  "flash-variants|flash-crowd|\`services[].preemption_policy: Never\`|s/^( *)hpa:/\\1preemption_policy: Never\\n&/"
  "flash-variants|flash-crowd|\`services[].headroom_replicas: 4\`|s/^( *)hpa:/\\1headroom_replicas: 4\\n&/"
  "flash-variants|flash-crowd|\`services[].headroom_replicas: 8\`|s/^( *)hpa:/\\1headroom_replicas: 8\\n&/"
  "llm-headroom|philly-llm-loan|\`headroom_replicas: 4\` (as shipped)|"
  "llm-headroom|philly-llm-loan|no standing headroom|/^ *headroom_replicas:/d"
)
echo "== $bin replay --json --policies colocate,online-only, shipped scenarios with one setting changed" >&2
t=$SECONDS
# A variant's trace paths are relative to its file, as the original's are to scenarios/: the
# variants are written two levels below $tmp, beside a link to ../shared.
mkdir -p "$tmp/repo/scenarios"
ln -s "$(cd .. && pwd)/shared" "$tmp/shared"
mkdir "$tmp/variants"
: >"$tmp/variants/list"
for i in "${!variants[@]}"; do
  IFS='|' read -r block scenario label expr <<<"${variants[$i]}"
  if [ -z "$expr" ]; then
    cp "scenarios/$scenario.yaml" "$tmp/repo/scenarios/$i.yaml"
  else
    sed -E "$expr" "scenarios/$scenario.yaml" >"$tmp/repo/scenarios/$i.yaml"
    if cmp -s "scenarios/$scenario.yaml" "$tmp/repo/scenarios/$i.yaml"; then
      echo "hack/results.sh: sed -E '$expr' changes nothing in scenarios/$scenario.yaml" >&2
      exit 1
    fi
  fi
  "$bin" replay --json --quiet --policies colocate,online-only "$tmp/repo/scenarios/$i.yaml" >"$tmp/variants/$i.json"
  printf '%s\t%s\t%s\t%s\n' "$block" "$label" "$expr" "$tmp/variants/$i.json" >>"$tmp/variants/list"
done
took "$t"

mkdir -p "$tmp/out/docs"
python3 - "$tmp/out" "$tmp" "$reports" "${scenarios[@]}" <<'PY'
import json, os, re, sys

out, replays, reports, scenarios = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]


def num(x, digits=0):
    """A figure as the page prints it: thousands separated, '–' where there is none."""
    if x is None:
        return "–"
    return f"{x:,.{digits}f}"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def killed(r):
    # colocate's kills split by who killed: the scheduler's preemptions + colocate's own past
    # its release deadline; the other policies have no controller.
    if r["policy"] in ("colocate", "colocate-usage"):
        s = f"{num(r['scheduler_preemptions'])} + {num(r['controller_forced_preemptions'])}"
        if r.get("batch_evictions"):
            s += f" + {num(r['batch_evictions'])} evicted"
        return s
    return num(r["forced_preemptions"])


def policy_name(r):
    return f"**{r['policy']}**" if r["policy"] in ("colocate", "colocate-usage") else r["policy"]


shipped, philly = [], []
for path in scenarios:
    text = open(path).read()
    report = json.load(open(os.path.join(replays, os.path.basename(path)[: -len(".yaml")] + ".json")))
    has_services = re.search(r"^services:\s*(#.*)?$", text, re.M) is not None
    (philly if re.search(r"^job_trace:", text, re.M) else shipped).append((report, has_services))

blocks = {}

rows = []
for report, has_services in shipped:
    for i, r in enumerate(report["results"]):
        if r["policy"] == "online-only" and not has_services:
            continue  # no online service: nothing to compare against
        rows.append([
            report["scenario"] if i == 0 else "",
            policy_name(r),
            num(r["avg_cpu_allocation"], 3),
            num(r["avg_cpu_usage"], 3),
            num(r["time_above_target"], 3),
            num(r["slo_violation_s"]),
            num(r["pending_online_pod_s"]),
            killed(r),
            num(r["rescale_events"]),
            num(r["makespan_s"]),
        ])
headline = []
for report, has_services in shipped:
    if not has_services:
        continue
    by = {r["policy"]: r for r in report["results"]}
    for i, policy in enumerate(["colocate", "colocate-usage", "preemption", "online-only"]):
        r = by[policy]
        headline.append([report["scenario"] if i == 0 else "", policy_name(r), num(r["avg_cpu_allocation"], 3),
                         num(r["avg_cpu_usage"], 3), num(r["slo_violation_s"]), num(r["pending_online_pod_s"]),
                         num(r["forced_preemptions"])])
blocks["readme-headline"] = table(
    ["scenario", "policy", "avg CPU alloc", "avg CPU usage", "SLO s", "pending pod-s", "killed"], headline)

blocks["shipped-scenarios"] = table(
    ["scenario", "policy", "avg CPU alloc", "avg CPU usage", "time ≥ target", "SLO viol. s",
     "pending online pod-s", "killed", "rescales", "makespan s"], rows)

rows = []
for report, has_services in philly:
    colocate = next(r for r in report["results"] if r["policy"] == "colocate")
    for i, r in enumerate(report["results"]):
        if r["policy"] == "online-only" and not has_services:
            continue
        jobs = r["policy"] != "online-only"
        ratio = ""
        if r is not colocate and r["avg_jct_censored_s"] is not None and colocate["avg_jct_censored_s"]:
            ratio = f"{r['avg_jct_censored_s'] / colocate['avg_jct_censored_s']:.2f}x"
        rows.append([
            report["scenario"] if i == 0 else "",
            policy_name(r),
            num(r["avg_gpu_allocation"], 3),
            num(r["avg_jct_censored_s"]) if jobs else "",
            ratio if jobs else "",
            num(r["p95_jct_censored_s"]) if jobs else "",
            num(r["avg_queueing_s"]) if jobs else "",
            num(r["p95_queueing_s"]) if jobs else "",
            num(r["unfinished_jobs"]) if jobs else "",
            killed(r),
            num(r["slo_violation_s"]) if has_services else "–",
        ])
blocks["philly-scenarios"] = table(
    ["scenario", "policy", "avg GPU alloc", "avg JCT s", "vs colocate", "p95 JCT s", "avg queueing s",
     "p95 queueing s", "unfinished", "killed", "SLO viol. s"], rows)


variants = {}
for line in open(os.path.join(replays, "variants", "list")):
    block, label, expr, path = line.rstrip("\n").split("\t")
    by = {r["policy"]: r for r in json.load(open(path))["results"]}
    variants.setdefault(block, []).append((label, f"`sed -E '{expr}'`" if expr else "", by["colocate"], by["online-only"]))

blocks["flash-variants"] = table(
    ["flash-crowd with", "made by", "colocate avg CPU alloc", "SLO viol. s (online-only)", "pending online pod-s",
     "killed"],
    [[label, sed, num(c["avg_cpu_allocation"], 3), f"{num(c['slo_violation_s'])} ({num(o['slo_violation_s'])})",
      num(c["pending_online_pod_s"]), killed(c)] for label, sed, c, o in variants["flash-variants"]])
blocks["llm-headroom"] = table(
    ["philly-llm-loan with", "made by", "colocate avg GPU alloc", "avg JCT s", "p95 queueing s",
     "SLO viol. s (online-only)", "pending online pod-s", "killed"],
    [[label, sed, num(c["avg_gpu_allocation"], 3), num(c["avg_jct_censored_s"]), num(c["p95_queueing_s"]),
      f"{num(c['slo_violation_s'])} ({num(o['slo_violation_s'])})", num(c["pending_online_pod_s"]), killed(c)]
     for label, sed, c, o in variants["llm-headroom"]])


def shape(cluster):
    """'8 × 32 CPU' from a scenario's cluster block (one term per node pool)."""
    terms = []
    for m in re.finditer(r"count: (\d+), allocatable: \{([^}]*)\}", cluster):
        res = dict(re.findall(r"([\w./-]+): \"?([\w.]+)\"?", m.group(2)))
        term = f"{m.group(1)} × {res['cpu']} CPU"
        if "nvidia.com/gpu" in res:
            term += f" with {res['nvidia.com/gpu']} GPU"
        terms.append(term)
    return " + ".join(terms)


cases = json.load(open(os.path.join(reports, "trace_scenarios.json")))["cases"]
rows = []
for case in cases:
    by = {mode: {r["policy"]: r for r in case[mode]["results"]} for mode in ("preempt", "wait")}
    pc, wc = by["preempt"]["colocate"], by["wait"]["colocate"]
    online = by["preempt"]["online-only"]
    pre = by["preempt"]["preemption"]
    trace = re.search(r'file: "[^"]*/traces/([^"]+)"', case["services"]).group(1)
    rows.append([
        case["name"],
        f"`{trace}`",
        shape(case["cluster"]),
        f"{num(pc['avg_cpu_allocation'], 3)} / {num(wc['avg_cpu_allocation'], 3)} (≥ {case['min_allocation']})",
        f"{num(pc['slo_violation_s'])} / {num(wc['slo_violation_s'])} ({num(online['slo_violation_s'])})",
        f"{num(pc['pending_online_pod_s'])} / {num(wc['pending_online_pod_s'])}",
        f"{num(pc['forced_preemptions'])} / {num(wc['forced_preemptions'])}",
        " / ".join([num(pre["avg_cpu_allocation"], 3), num(pre["slo_violation_s"]),
                    num(pre["pending_online_pod_s"]), num(pre["forced_preemptions"])]),
        f"{num(wc['avg_cpu_usage'], 3)} / {num(by['wait']['colocate-usage']['avg_cpu_usage'], 3)}"
        f" (≥ {case['min_usage']})",
    ])
blocks["trace-scenarios"] = table(
    ["case", "trace (../shared/traces)", "cluster", "colocate alloc, preempt / wait (floor)",
     "SLO viol. s, preempt / wait (online-only)", "pending pod-s, preempt / wait",
     "killed, preempt / wait", "preemption: alloc / SLO s / pending pod-s / killed",
     "CPU usage: colocate / colocate-usage (floor)"], rows)

windows = json.load(open(os.path.join(reports, "trace_jobs.json")))["windows"]
rows, ratios = [], []
for w in windows:
    c, b = w["colocate"], w["gang-backfill"]
    ratio = b["avg_jct_censored_s"] / c["avg_jct_censored_s"]
    ratios.append(ratio)
    rows.append([
        f"day {w['skip'].rstrip('d')}",
        num(c["avg_jct_censored_s"]),
        num(b["avg_jct_censored_s"]),
        f"{ratio:.2f}x",
        num(c["p95_queueing_s"]),
        num(b["p95_queueing_s"]),
        f"{num(c['unfinished_jobs'])} / {num(b['unfinished_jobs'])}",
    ])
rows.append(["mean", "", "", f"{sum(ratios) / len(ratios):.2f}x", "", "", ""])
blocks["philly-windows"] = table(
    ["window (trace start)", "colocate avg JCT s", "gang-backfill avg JCT s", "gang-backfill ÷ colocate",
     "colocate p95 queueing s", "gang-backfill p95 queueing s", "unfinished, colocate / gang-backfill"], rows)

pages = {"docs/results.md": [b for b in blocks if b != "readme-headline"], "README.md": ["readme-headline"]}
for page, names in pages.items():
    text = open(page).read()
    for name in names:
        begin, end = f"<!-- BEGIN generated: {name} -->", f"<!-- END generated: {name} -->"
        pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
        if len(pattern.findall(text)) != 1:
            sys.exit(f"hack/results.sh: {page} must hold exactly one {begin} ... {end} block")
        text = pattern.sub(lambda _: f"{begin}\n{blocks[name]}\n{end}", text)
    open(os.path.join(out, page), "w").write(text)
PY

changed=()
for page in "${pages[@]}"; do
  cmp -s "$page" "$tmp/out/$page" || changed+=("$page")
done
if [ "$check" -eq 1 ]; then
  if [ ${#changed[@]} -gt 0 ]; then
    for page in "${changed[@]}"; do diff -u "$page" "$tmp/out/$page" >&2 || true; done
    echo "hack/results.sh --check: ${changed[*]} differ from the figures replay gives now (diff above)." >&2
    echo "If the change of figures is intended, run hack/results.sh, review the text around the tables, and commit." >&2
    exit 1
  fi
  echo "hack/results.sh --check: ${pages[*]} up to date ($((SECONDS - started))s)" >&2
elif [ ${#changed[@]} -eq 0 ]; then
  echo "hack/results.sh: ${pages[*]} unchanged ($((SECONDS - started))s)" >&2
else
  for page in "${changed[@]}"; do cp "$tmp/out/$page" "$page"; done
  echo "hack/results.sh: rewrote ${changed[*]} ($((SECONDS - started))s):" >&2
  git --no-pager diff --stat -- "${changed[@]}" >&2 || true
fi
